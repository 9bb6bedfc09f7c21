"""The world: objects with closed-form state at any frame, an event log, and lazy rendering.

``World`` is a pure function of its objects (and those of ``(seed, config)`` via
``worldgen.scene.sample_world``). ``state``/``track`` never render; ``render(t)`` draws one frame
and its annotations without touching other frames, so a long clip streams in bounded memory.

Geometric rules (shared by events, queries and tests):
- an object is *present* at frame t when t lies in one of its ``spans`` ``[start, stop)``;
- two present objects *touch* when their centres are closer than the sum of their radii
  (``radius`` = circumradius of a shape, half the body height of a person); a *collision* is the
  first frame of a touch (both present the frame before, not touching then); motion is kinematic,
  so objects pass through each other;
- a present object B is *hidden* at frame t when a present object A with higher z has B's centre
  within ``HIDE_FRACTION * radius(A)`` of its own ("centre rule");
- a *wall hit* is a frame where the bounce reflection count changes.

Keypoint visibility follows COCO (core.keypoints): 2 = visible, that is inside the frame on a
pixel whose id is the person's; 1 = inside the frame but covered (by a shape in front);
0 = outside the frame or the person absent. So visible keypoints always lie inside the mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from core.masks import mask_to_box
from worldgen import figures, raster
from worldgen.motion import Motion, positions
from worldgen.vocab import COLORS, SIZES

HIDE_FRACTION = 0.8
PERSON_HEIGHTS = {"small": 0.45, "medium": 0.6, "large": 0.75}  # fraction of the canvas height


@dataclass
class Obj:
    """One object: a shape (``shape`` in vocab.SHAPES) or a person (``shape == "person"``)."""

    id: int  # 1..255, the value in the id maps
    shape: str
    color: str
    size: str = "medium"
    z: int = 0  # larger is in front; unique within a world
    motion: Motion = field(default_factory=Motion)
    spans: list = field(default_factory=list)  # [(start, stop)] frames present; empty = whole clip
    angle: float = 0.0
    scale: float = 1.0  # multiplies the size's radius (spatial scenes use small objects)
    person: figures.Person | None = None

    def radius(self, width: int, height: int) -> float:
        if self.person is not None:
            return 0.5 * self.person.height
        return SIZES[self.size] * min(width, height) * self.scale

    def attrs(self) -> dict:
        return {"id": self.id, "shape": self.shape, "color": self.color, "size": self.size}


@dataclass
class Background:
    kind: str = "solid"
    tone: tuple = (20, 20, 28)
    accent: tuple = (60, 60, 80)
    seed: int = 0


@dataclass
class Frame:
    """One rendered frame with its annotations."""

    index: int
    rgb: np.ndarray  # (H, W, 3) uint8
    ids: np.ndarray  # (H, W) uint8 instance id map
    alpha: np.ndarray  # (H, W) float32 total coverage (the mask rule's input)
    boxes: dict  # id -> xyxy of the visible mask (exclusive max)
    keypoints: dict  # person id -> (17, 3) float32 (x, y, v)


class World:
    """Objects on a canvas over ``num_frames`` frames at ``fps``."""

    def __init__(self, width: int, height: int, num_frames: int, fps: float, objects: list, background: Background | None = None):
        ids = [o.id for o in objects]
        if len(set(ids)) != len(ids) or any(not 0 < i < 256 for i in ids):
            raise ValueError(f"invalid object ids={ids}: ids must be unique and in 1..255")
        self.width, self.height, self.num_frames, self.fps = int(width), int(height), int(num_frames), float(fps)
        self.objects = list(objects)
        self.background = background or Background()
        self._bg_cache = None

    def __len__(self) -> int:
        return self.num_frames

    def obj(self, obj_id: int) -> Obj:
        return next(o for o in self.objects if o.id == obj_id)

    # ------------------------------------------------------------------ state (no rendering)
    def radius(self, o: Obj) -> float:
        return o.radius(self.width, self.height)

    def present_mask(self, o: Obj, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t)
        if not o.spans:
            return np.ones(t.shape, bool)
        return np.any([(t >= a) & (t < b) for a, b in o.spans], axis=0)

    def centres(self, o: Obj, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Centres ``(len(t), 2)`` and bounce reflection counts ``(len(t), 2)``."""
        t = np.asarray(t, np.float64)
        if o.person is not None:
            p = np.broadcast_to(np.asarray(o.motion.p0, np.float64), (len(t), 2)).copy()
            p[:, 0] += figures.root_shift(o.person, t)
            return p, np.zeros((len(t), 2), np.int64)
        r = self.radius(o)
        return positions(o.motion, t, (r, r), (self.width - r, self.height - r))

    @cached_property
    def track(self) -> dict:
        """Whole-clip state arrays: ``pos (T, N, 2)``, ``present (T, N)``, ``bounces (T, N, 2)``, ``radius (N,)``, ``z (N,)``.

        Small (a 4,000-frame clip with 10 objects is under 1 MB); frames are never held.
        """
        t = np.arange(self.num_frames)
        pos, bounces = zip(*(self.centres(o, t) for o in self.objects)) if self.objects else ((), ())
        n = len(self.objects)
        return {
            "pos": np.stack(pos, 1) if n else np.zeros((len(t), 0, 2)),
            "bounces": np.stack(bounces, 1) if n else np.zeros((len(t), 0, 2), np.int64),
            "present": np.stack([self.present_mask(o, t) for o in self.objects], 1) if n else np.zeros((len(t), 0), bool),
            "radius": np.array([self.radius(o) for o in self.objects]),
            "z": np.array([o.z for o in self.objects]),
            "ids": np.array([o.id for o in self.objects]),
        }

    def state(self, t: int) -> list[dict]:
        """Every object's attributes, centre, radius and presence at frame ``t``."""
        tr = self.track
        return [
            {**o.attrs(), "x": float(tr["pos"][t, i, 0]), "y": float(tr["pos"][t, i, 1]), "r": float(tr["radius"][i]), "z": o.z, "present": bool(tr["present"][t, i])}
            for i, o in enumerate(self.objects)
        ]

    def touching(self) -> np.ndarray:
        """``(T, N, N)`` bool: both present and centres closer than the sum of radii."""
        tr = self.track
        d = np.linalg.norm(tr["pos"][:, :, None] - tr["pos"][:, None], axis=-1)
        both = tr["present"][:, :, None] & tr["present"][:, None]
        out = both & (d < tr["radius"][:, None] + tr["radius"][None])
        idx = np.arange(len(self.objects))
        out[:, idx, idx] = False
        return out

    def hiding(self) -> np.ndarray:
        """``(T, N, N)`` bool: ``[t, a, b]`` = object a hides object b at frame t (centre rule)."""
        tr = self.track
        d = np.linalg.norm(tr["pos"][:, :, None] - tr["pos"][:, None], axis=-1)
        both = tr["present"][:, :, None] & tr["present"][:, None]
        front = tr["z"][:, None] > tr["z"][None]
        return both & front[None] & (d < HIDE_FRACTION * tr["radius"][None, :, None])

    @cached_property
    def events(self) -> list[dict]:
        """The event log, sorted by frame: appear, disappear, hit_wall, collide, occlude_start/end, action_start/end."""
        tr, T, ev = self.track, self.num_frames, []
        add = lambda kind, t, objs, **kw: ev.append({"type": kind, "frame": int(t), "time": round(int(t) / self.fps, 4), "objects": [int(i) for i in objs], **kw})  # noqa: E731
        for i, o in enumerate(self.objects):
            for a, b in o.spans:
                if 0 < a < T:
                    add("appear", a, [o.id])
                if 0 < b < T:
                    add("disappear", b, [o.id])
            hit = np.any(np.diff(tr["bounces"][:, i], axis=0) != 0, axis=1) & tr["present"][1:, i] & tr["present"][:-1, i]
            for t in np.nonzero(hit)[0] + 1:
                add("hit_wall", t, [o.id], wall=self._wall(i, t))
            if o.person is not None:
                for name, start, n in o.person.actions:
                    if start < T:
                        add("action_start", start, [o.id], action=name)
                    if start + n < T:
                        add("action_end", start + n, [o.id], action=name)
        touch = self.touching()
        onset = touch[1:] & ~touch[:-1] & tr["present"][:-1, :, None] & tr["present"][:-1, None]
        for t, a, b in zip(*np.nonzero(onset)):
            if a < b:
                add("collide", t + 1, [self.objects[a].id, self.objects[b].id])
        hide = self.hiding()
        for t, a, b in zip(*np.nonzero(hide[1:] & ~hide[:-1])):
            add("occlude_start", t + 1, [self.objects[a].id, self.objects[b].id])
        for t, a, b in zip(*np.nonzero(hide[:-1] & ~hide[1:])):
            add("occlude_end", t + 1, [self.objects[a].id, self.objects[b].id])
        order = {k: i for i, k in enumerate(("disappear", "occlude_end", "action_end", "appear", "hit_wall", "collide", "occlude_start", "action_start"))}
        return sorted(ev, key=lambda e: (e["frame"], order[e["type"]], e["objects"]))

    def _wall(self, i: int, t: int) -> str:
        p, r = self.track["pos"][t, i], self.track["radius"][i]
        d = {"left": p[0] - r, "right": self.width - r - p[0], "top": p[1] - r, "bottom": self.height - r - p[1]}
        return min(d, key=d.get)

    # ------------------------------------------------------------------ rendering
    @property
    def background_image(self) -> np.ndarray:
        if self._bg_cache is None:
            b = self.background
            self._bg_cache = raster.make_background(b.kind, b.tone, b.accent, self.height, self.width, np.random.default_rng(b.seed))
        return self._bg_cache

    def keypoints_raw(self, o: Obj, t: int, centre: np.ndarray) -> np.ndarray:
        pose, _ = figures.pose_at(o.person, t)
        return centre + figures.forward_kinematics(o.person, pose)

    def render(self, t: int, annotations: bool = True) -> Frame:
        """Render frame ``t`` (0 <= t < num_frames) with masks, boxes and keypoints."""
        if not 0 <= t < self.num_frames:
            raise IndexError(f"frame t={t} is out of range 0..{self.num_frames - 1}")
        tr, h, w = self.track, self.height, self.width
        layers, people = [], {}
        for i in np.argsort(-tr["z"], kind="stable"):
            if not tr["present"][t, i]:
                continue
            o, c = self.objects[i], tr["pos"][t, i]
            if o.person is None:
                cov = raster.shape_coverage(o.shape, c[0], c[1], tr["radius"][i], o.angle, h, w)
            else:
                kp = self.keypoints_raw(o, t, c)
                people[o.id] = kp
                head = (kp[3] + kp[4]) / 2
                cov = raster.figure_coverage(kp, head, figures.head_radius(o.person), o.person.thickness, h, w)
            if cov is not None:
                layers.append((o.id, cov, COLORS[o.color]))
        rgb, ids, alpha = raster.composite(self.background_image, layers)
        boxes, kps = {}, {}
        if annotations:
            for obj_id, (x0, y0, counts), _ in layers:
                box = mask_to_box(ids[y0 : y0 + counts.shape[0], x0 : x0 + counts.shape[1]] == obj_id)
                if box is not None:
                    boxes[obj_id] = (box[0] + x0, box[1] + y0, box[2] + x0, box[3] + y0)
            for obj_id, kp in people.items():
                kps[obj_id] = self._visibility(kp, ids, obj_id)
        return Frame(t, rgb, ids, alpha, boxes, kps)

    def _visibility(self, kp: np.ndarray, ids: np.ndarray, obj_id: int) -> np.ndarray:
        out = np.zeros((17, 3), np.float32)
        out[:, :2] = kp
        xi, yi = np.floor(kp[:, 0]).astype(int), np.floor(kp[:, 1]).astype(int)
        inside = (xi >= 0) & (yi >= 0) & (xi < self.width) & (yi < self.height)
        own = np.zeros(17, bool)
        own[inside] = ids[yi[inside], xi[inside]] == obj_id
        out[:, 2] = np.where(own, 2.0, np.where(inside, 1.0, 0.0))
        return out

    def keypoints(self, obj_id: int, t: int) -> np.ndarray:
        """COCO-17 keypoints ``(17, 3)`` of a person at frame ``t`` (renders the frame for visibility)."""
        kp = self.render(t).keypoints.get(obj_id)
        return kp if kp is not None else np.zeros((17, 3), np.float32)

    def frames(self, start: int = 0, stop: int | None = None):
        """Yield rendered ``Frame`` objects lazily."""
        for t in range(start, self.num_frames if stop is None else min(stop, self.num_frames)):
            yield self.render(t)

    def rgb_frames(self, start: int = 0, stop: int | None = None):
        """Yield RGB frames lazily (for core.video.write_video)."""
        for f in self.frames(start, stop):
            yield f.rgb

    def spec(self) -> dict:
        """A JSON-safe description of the world (objects, motions, spans, people's actions)."""
        from dataclasses import asdict

        return {
            "width": self.width, "height": self.height, "num_frames": self.num_frames, "fps": self.fps,
            "background": asdict(self.background),
            "objects": [_jsonable(asdict(o)) for o in self.objects],
        }  # fmt: skip


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float):
        return round(x, 6)
    return x
