"""One tracking session API, in the shape of SAM 2's video predictor, for every tracker backend.

    session = tracker.init_session(video)                       # a path, Video, (T, H, W, 3) array or FrameSource
    session.add_prompt(0, obj_id=1, mask=first_mask)            # or points= + labels=, or box= (xyxy pixels)
    for out in session.propagate(start_frame=0):                # TrackedFrame(frame_idx, obj_ids, masks, scores)
        ...
    session.propagate(start_frame=40, reverse=True)             # backwards from a later prompt
    session.remove_object(1); session.reset()

``masks`` are boolean ``(N, H, W)`` at the video's size, one per object in ``obj_ids`` (ascending);
``scores`` are per-object presence probabilities in [0, 1] (SAM 2's ``sigmoid(object_score_logits)``,
the classic tracker's appearance match). Prompts may be given on any frame for any object; a frame
with a prompt is a *conditioning* frame and is kept for the whole session, while ordinary frame
outputs live in a bounded window (``window`` frames) and older ones are evicted, so memory does not
grow with the video's length (transformers' ``Sam2VideoInferenceSession`` never prunes its
per-object outputs, which is why the hf wrapper must).

``SessionBase`` holds everything backends share: argument checks that name the bad value, the
prompt store, the output window, the frame source. A backend implements ``_apply_prompt`` and
``_track``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from core.errors import InputError
from core.frames import FrameSource


@dataclass(frozen=True)
class TrackedFrame:
    """One frame's result: ``masks`` ``(N, H, W)`` bool and ``scores`` ``(N,)`` for ``obj_ids``."""

    frame_idx: int
    obj_ids: list[int]
    masks: np.ndarray
    scores: np.ndarray

    def id_map(self) -> np.ndarray:
        """The frame as a uint8 id map ``(H, W)`` (0 = background; later objects win overlaps)."""
        out = np.zeros(self.masks.shape[1:], np.uint8)
        for obj, mask in zip(self.obj_ids, self.masks):
            out[mask] = obj
        return out


@dataclass(frozen=True)
class Prompt:
    """What the user said about one object on one frame (validated)."""

    frame_idx: int
    obj_id: int
    points: np.ndarray | None = None  # (P, 2) float xy pixels
    labels: np.ndarray | None = None  # (P,) int: 1 foreground, 0 background
    box: np.ndarray | None = None  # (4,) float xyxy pixels
    mask: np.ndarray | None = None  # (H, W) bool


@runtime_checkable
class TrackingSession(Protocol):
    """A tracking run over one video (see the module docstring)."""

    num_frames: int
    frame_size: tuple[int, int]

    def add_prompt(self, frame_idx: int, obj_id: int, *, points: Any = None, labels: Any = None, box: Any = None,
                   mask: Any = None) -> TrackedFrame: ...

    def propagate(self, start_frame: int | None = None, reverse: bool = False, max_frames: int | None = None) -> Iterator[TrackedFrame]: ...

    def remove_object(self, obj_id: int) -> None: ...

    def reset(self) -> None: ...


@runtime_checkable
class Tracker(Protocol):
    """A tracker backend: ``init_session(video, window=...)`` returns a ``TrackingSession``."""

    backend: str

    def init_session(self, video: Any, *, window: int = 16) -> TrackingSession: ...


def open_source(video: Any) -> FrameSource:
    """A frame source for a path, ``Video``, uint8 ``(T, H, W, 3)`` array or any ``FrameSource``."""
    from core.video import Video

    if isinstance(video, FrameSource):
        return video
    return Video(video)


@dataclass
class SessionBase:
    """Shared state and checks of a tracking session; backends subclass it.

    ``window``: how many past non-prompt frame outputs are kept (the memory a backend may read);
    prompted frames are always kept. ``outputs`` maps frame index -> ``TrackedFrame``.
    """

    video: Any
    window: int = 16
    source: Any = field(init=False, repr=False)
    prompts: dict[int, dict[int, Prompt]] = field(init=False, default_factory=dict, repr=False)  # frame -> obj -> prompt
    outputs: OrderedDict = field(init=False, default_factory=OrderedDict, repr=False)

    def __post_init__(self):
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise InputError("window", self.window, "keep at least 1 past frame (an integer)")
        self.source = open_source(self.video)
        n = len(self.source)
        if n < 1:
            raise InputError("video", f"{n} frames", "the video has no frames; pass a clip with at least one")
        first = np.asarray(self.source.get_frames([0]))
        self.num_frames, self.frame_size = n, tuple(int(v) for v in first.shape[1:3])

    # ---- checks
    @property
    def obj_ids(self) -> list[int]:
        return sorted({o for frame in self.prompts.values() for o in frame})

    def check_frame(self, frame_idx: Any, name: str = "frame_idx") -> int:
        if isinstance(frame_idx, bool) or not isinstance(frame_idx, (int, np.integer)):
            raise InputError(name, frame_idx, "pass a frame index (an integer)")
        if not 0 <= frame_idx < self.num_frames:
            raise InputError(name, int(frame_idx), f"the video has {self.num_frames} frames: use 0..{self.num_frames - 1}")
        return int(frame_idx)

    def make_prompt(self, frame_idx: Any, obj_id: Any, points: Any, labels: Any, box: Any, mask: Any) -> Prompt:
        """Validate one prompt against the video's size; every error names the argument."""
        frame_idx = self.check_frame(frame_idx)
        if isinstance(obj_id, bool) or not isinstance(obj_id, (int, np.integer)) or not 1 <= obj_id <= 255:
            raise InputError("obj_id", obj_id, "object ids are integers 1..255 (0 is the background)")
        if points is None and box is None and mask is None:
            raise InputError("prompt", None, "give points= with labels=, a box= or a mask=")
        h, w = self.frame_size
        p = lab = b = m = None
        if points is not None:
            p = np.asarray(points, np.float32).reshape(-1, 2) if np.size(points) else np.zeros((0, 2), np.float32)
            if len(p) == 0 or labels is None:
                raise InputError("points", points, "pass at least one (x, y) point and labels= of the same length (1 object, 0 background)")
            lab = np.asarray(labels).reshape(-1)
            if len(lab) != len(p) or not np.isin(lab, (0, 1)).all():
                raise InputError("labels", labels, f"pass {len(p)} labels, each 1 (object) or 0 (background)")
            if not ((p[:, 0] >= 0) & (p[:, 0] < w) & (p[:, 1] >= 0) & (p[:, 1] < h)).all():
                raise InputError("points", points, f"points are (x, y) pixels inside the {w}x{h} frame")
            lab = lab.astype(np.int64)
        elif labels is not None:
            raise InputError("labels", labels, "labels go with points=")
        if box is not None:
            b = np.asarray(box, np.float32).reshape(-1)
            if len(b) != 4 or not (b[0] < b[2] and b[1] < b[3]) or b.min() < 0 or b[2] > w or b[3] > h:
                raise InputError("box", box, f"pass (x0, y0, x1, y1) pixels with x0 < x1 <= {w} and y0 < y1 <= {h}")
        if mask is not None:
            m = np.asarray(mask)
            if m.shape != (h, w):
                raise InputError("mask", f"array {m.shape}", f"pass an (H, W) = ({h}, {w}) mask")
            m = m.astype(bool)
            if not m.any():
                raise InputError("mask", "empty", "the mask selects no pixel; remove_object() forgets an object")
        return Prompt(frame_idx, int(obj_id), p, lab, b, m)

    def check_propagation(self, start_frame: Any, reverse: bool, max_frames: Any) -> list[int]:
        """The frame indices a ``propagate`` call visits, in order."""
        if not self.prompts:
            raise InputError("propagate", "no prompts", "add_prompt() on some frame first")
        first_prompt = min(self.prompts) if not reverse else max(self.prompts)
        start = first_prompt if start_frame is None else self.check_frame(start_frame, "start_frame")
        if max_frames is not None and (isinstance(max_frames, bool) or not isinstance(max_frames, (int, np.integer)) or max_frames < 1):
            raise InputError("max_frames", max_frames, "pass a positive number of frames, or None for all")
        stop = -1 if reverse else self.num_frames
        frames = list(range(start, stop, -1 if reverse else 1))
        return frames[: int(max_frames)] if max_frames is not None else frames

    # ---- memory
    def remember(self, out: TrackedFrame) -> TrackedFrame:
        """Keep ``out`` and evict the oldest non-prompt outputs beyond the window."""
        self.outputs.pop(out.frame_idx, None)
        self.outputs[out.frame_idx] = out
        ordinary = [f for f in self.outputs if f not in self.prompts]
        for f in ordinary[: max(0, len(ordinary) - self.window)]:
            del self.outputs[f]
        return out

    def memory_frames(self) -> int:
        """How many frame outputs the session holds now (bounded by ``window`` + prompted frames)."""
        return len(self.outputs)

    # ---- the API
    def add_prompt(self, frame_idx: int, obj_id: int, *, points: Any = None, labels: Any = None, box: Any = None,
                   mask: Any = None) -> TrackedFrame:
        """Prompt object ``obj_id`` on ``frame_idx``; returns that frame's masks for every object."""
        prompt = self.make_prompt(frame_idx, obj_id, points, labels, box, mask)
        self.prompts.setdefault(prompt.frame_idx, {})[prompt.obj_id] = prompt
        return self.remember(self._apply_prompt(prompt))

    def propagate(self, start_frame: int | None = None, reverse: bool = False, max_frames: int | None = None) -> Iterator[TrackedFrame]:
        """Track every prompted object frame by frame from ``start_frame`` (default: the first prompted
        frame, or the last when ``reverse``); yields one ``TrackedFrame`` per frame."""
        frames = self.check_propagation(start_frame, reverse, max_frames)
        return (self.remember(self._track(f, reverse)) for f in frames)

    def remove_object(self, obj_id: int) -> None:
        """Forget ``obj_id``'s prompts and past masks."""
        if obj_id not in self.obj_ids:
            raise InputError("obj_id", obj_id, f"tracked objects are {self.obj_ids}")
        for frame in list(self.prompts):
            self.prompts[frame].pop(obj_id, None)
            if not self.prompts[frame]:
                del self.prompts[frame]
        for frame, out in self.outputs.items():  # past outputs no longer show it
            keep = [k for k, o in enumerate(out.obj_ids) if o != obj_id]
            self.outputs[frame] = TrackedFrame(frame, [out.obj_ids[k] for k in keep], out.masks[keep], out.scores[keep])
        self._forget(obj_id)

    def reset(self) -> None:
        """Drop every prompt and output; the video stays open."""
        self.prompts.clear()
        self.outputs.clear()
        self._forget(None)

    # ---- what a backend implements
    def _apply_prompt(self, prompt: Prompt) -> TrackedFrame:
        raise NotImplementedError

    def _track(self, frame_idx: int, reverse: bool) -> TrackedFrame:
        raise NotImplementedError

    def _forget(self, obj_id: int | None) -> None:
        """Drop a backend's own state of ``obj_id`` (None: of every object)."""

    def frames(self, indices: Sequence[int]) -> np.ndarray:
        return np.asarray(self.source.get_frames(list(indices)))


__all__ = ["TrackedFrame", "Prompt", "TrackingSession", "Tracker", "SessionBase", "open_source"]
