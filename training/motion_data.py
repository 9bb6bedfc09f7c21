"""AnyMotion's training data: worldgen ``motion_edit`` quadruplets, built once and cached.

    pool = load_motion_pool("train", seed=0, count=3000)   # outputs/motion_data/train_seed0_n3000_...npz
    pool.source[i], pool.target[i]            # (T, H, W, 3) uint8 clips: the same person doing A, then B
    pool.source_kp[i], pool.target_kp[i]      # (T, 17, 3) COCO-17 pixels, worldgen's ground truth
    pool.text[i], pool.fine[i], pool.category[i], pool.parts[i]

Each item is one ``worldgen.tasks.motion_edit`` sample (quadruplet: source clip, instruction, target
clip, target skeleton), levels cycling 1, 2, 3 with the item index. **Held-out fine classes**
(``HELD_OUT``, one per category that has a mirror pair): no TRAIN item has one of them as its target
action, so VAL / TEST items whose target is held out measure open-vocabulary generalisation (the planner
must compose "right" with a motion it has only seen on the left). A TRAIN index whose target is held out
is skipped and the next index taken, deterministically.

``person`` is the union of the source and target person masks per frame; ``edit_region(i)`` grows it by the
anti-aliased edge and adds every pixel the two clips differ in: what the background metric of spec b.7 leaves out. Pools are ``.npz`` (no pickles) under ``cache_dir``, keyed by split, seed, count
and geometry.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.atomic import atomic_path
from core.errors import InputError
from worldgen.figures import ACTIONS, CATEGORIES, NEUTRAL
from worldgen.tasks import motion_edit
from worldgen.tasks.base import split_seed

logger = logging.getLogger(__name__)

DEFAULT_CACHE = Path("outputs") / "motion_data"
FINE_CLASSES = tuple(sorted(ACTIONS))
# [PROPOSED] one held-out target class per category with a left/right pair (whole_body has none)
HELD_OUT = ("hop_right", "kick_right", "raise_right_arm", "tilt_head_right", "wave_right_arm")
# body parts a motion can move (the planner's "which body parts" reasoning), from the pose parameters
PARTS = ("head", "torso", "left arm", "right arm", "left leg", "right leg", "whole body position")
_PARAM_PARTS = {"head": "head", "yaw": "torso", "lean": "torso", "lsh": "left arm", "lel": "left arm", "rsh": "right arm",
                "rel": "right arm", "lhip": "left leg", "lknee": "left leg", "rhip": "right leg", "rknee": "right leg", "dy": "whole body position"}


def action_parts(name: str) -> np.ndarray:
    """Which of ``PARTS`` action ``name`` moves (a keyframe leaves neutral there, or it shifts the root): ``(7,)`` bool."""
    act = ACTIONS[name]
    moved = {_PARAM_PARTS[k] for _, key in act.keys for k, v in key.items() if abs(v - NEUTRAL[k]) > 1e-6}
    if act.shift:
        moved.add("whole body position")
    return np.array([p in moved for p in PARTS])


@dataclass(frozen=True)
class MotionDataConfig:
    size: int = 64
    num_frames: int = 36  # worldgen motion_edit's default: 3 s at 12 fps, the action over 75% of it
    # False: TRAIN holds every class (what a shipped model needs: "raise the right arm" must be known);
    # True: no TRAIN target is in HELD_OUT (the open-vocabulary generalisation study)
    hold_out: bool = True


def _sample(split: str, seed: int, index: int, cfg: MotionDataConfig):
    level = 1 + index % 3
    return motion_edit.generate(split_seed(split, seed, index), motion_edit.Config(size=cfg.size, num_frames=cfg.num_frames, level=level))


def train_indices(seed: int, count: int, cfg: MotionDataConfig = MotionDataConfig()) -> list[int]:
    """The first ``count`` TRAIN indices whose target action is not held out (cheap: no rendering);
    every index when ``cfg.hold_out`` is False."""
    if not cfg.hold_out:
        return list(range(count))
    out, i = [], 0
    while len(out) < count:
        if _target_action(seed, i, cfg) not in HELD_OUT:
            out.append(i)
        i += 1
    return out


def _target_action(seed: int, index: int, cfg: MotionDataConfig) -> str:
    # motion_edit draws its actions first from rng([seed, 4]); reading them without rendering keeps skipping cheap
    rng = np.random.default_rng([int(split_seed("train", seed, index)), 4])
    names = sorted(ACTIONS)
    a = names[int(rng.integers(len(names)))]
    level = 1 + index % 3
    if level == 1:
        pool = [b for b in names if ACTIONS[b].category != ACTIONS[a].category]
    elif level == 3:
        pool = [b for b in names if ACTIONS[b].category == ACTIONS[a].category and b != a]
    else:
        pool = [b for b in names if b != a]
    return pool[int(rng.integers(len(pool)))]


def make_item(args: tuple) -> dict:
    split, seed, index, cfg = args
    smp = _sample(split, seed, index, cfg)
    rec = smp.record
    src, tgt = smp.worlds["source"], smp.worlds["target"]
    out = {"source": [], "target": [], "source_kp": [], "target_kp": [], "person": []}
    for t in range(src.num_frames):
        fs, ft = src.render(t), tgt.render(t)
        out["source"].append(fs.rgb)
        out["target"].append(ft.rgb)
        out["source_kp"].append(fs.keypoints.get(1, np.zeros((17, 3), np.float32)))
        out["target_kp"].append(ft.keypoints.get(1, np.zeros((17, 3), np.float32)))
        out["person"].append((fs.ids == 1) | (ft.ids == 1))
    item = {k: np.stack(v) for k, v in out.items()}
    item.update(text=rec["instruction"], fine=rec["fine_class"], category=rec["category"], source_action=rec["source_action"],
                level=rec["level"], index=index, world_seed=smp.seed, color=rec["source_world"]["objects"][0]["color"])
    return item


class MotionPool:
    """Stacked ``motion_edit`` items (see the module docstring)."""

    def __init__(self, arrays: dict[str, np.ndarray], cfg: MotionDataConfig):
        self.cfg = cfg
        self.source, self.target = arrays["source"], arrays["target"]
        self.source_kp, self.target_kp = arrays["source_kp"], arrays["target_kp"]
        self.person = arrays["person"]
        self.text = [str(t) for t in arrays["text"]]
        self.fine = [str(t) for t in arrays["fine"]]
        self.category = [str(t) for t in arrays["category"]]
        self.source_action = [str(t) for t in arrays["source_action"]]
        self.color = [str(t) for t in arrays["color"]]
        self.level, self.index, self.world_seed = arrays["level"], arrays["index"], arrays["world_seed"]

    def __len__(self) -> int:
        return len(self.source)

    @property
    def fine_ids(self) -> np.ndarray:
        return np.array([FINE_CLASSES.index(f) for f in self.fine])

    @property
    def category_ids(self) -> np.ndarray:
        return np.array([CATEGORIES.index(c) for c in self.category])

    @property
    def parts(self) -> np.ndarray:
        return np.stack([action_parts(f) for f in self.fine])

    def edit_region(self, i: int) -> np.ndarray:
        """``(T, H, W)`` bool: where item ``i``'s edit may change pixels: the union of the source and target person
        masks grown by 1 px (their anti-aliased edges) and every pixel where the two clips differ (an occluder's
        edge over the person). The background metric (spec b.7) scores the rest."""
        import cv2

        kernel = np.ones((3, 3), np.uint8)
        grown = np.stack([cv2.dilate(m.astype(np.uint8), kernel) > 0 for m in self.person[i]])
        return grown | (self.source[i] != self.target[i]).any(-1)

    def parts_of(self, i: int) -> np.ndarray:
        return action_parts(self.fine[i])

    @property
    def held_out(self) -> np.ndarray:
        return np.array([f in HELD_OUT for f in self.fine])


def pool_path(split: str, seed: int, count: int, cfg: MotionDataConfig, cache_dir: str | Path) -> Path:
    every = "_all" if split == "train" and not cfg.hold_out else ""
    return Path(cache_dir) / f"motion_{split}_seed{seed}_n{count}_f{cfg.num_frames}_s{cfg.size}{every}.npz"


def load_motion_pool(split: str, seed: int, count: int, cfg: MotionDataConfig = MotionDataConfig(), *,
                     cache_dir: str | Path = DEFAULT_CACHE, workers: int = 1) -> MotionPool:
    """The cached pool of ``count`` ``motion_edit`` items of ``split``; built (and saved) on first use."""
    if split not in ("train", "val", "test"):
        raise InputError("split", split, "use train, val or test")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InputError("count", count, "use a positive number of examples")
    path = pool_path(split, seed, count, cfg, cache_dir)
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            return MotionPool({k: z[k] for k in z.files}, cfg)
    t0 = time.perf_counter()
    indices = train_indices(seed, count, cfg) if split == "train" else list(range(count))
    jobs = [(split, seed, i, cfg) for i in indices]
    if workers > 1 and count > 1:
        with mp.get_context("fork").Pool(workers) as p:
            items = p.map(make_item, jobs, chunksize=8)
    else:
        items = [make_item(j) for j in jobs]
    arrays = {k: np.stack([it[k] for it in items]) for k in ("source", "target", "source_kp", "target_kp", "person")}
    for k in ("text", "fine", "category", "source_action", "color"):
        arrays[k] = np.array([it[k] for it in items])
    for k in ("level", "index", "world_seed"):
        arrays[k] = np.array([it[k] for it in items], np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        np.savez(tmp, **arrays)
    logger.info("built %s (%d motion_edit items) in %.0f s", path, count, time.perf_counter() - t0)
    return MotionPool(arrays, cfg)


def describe(pool: MotionPool) -> str:
    """One line: the pool's size and how its targets spread over categories and held-out classes."""
    cats = {c: pool.category.count(c) for c in CATEGORIES}
    return json.dumps({"items": len(pool), "held_out_targets": int(pool.held_out.sum()), "categories": cats})


# ---------------------------------------------------------------------------- instructions in free language

# [PROPOSED] paraphrase templates: TRAIN ones teach that the wording varies; TEST ones never occur in training
TRAIN_TEMPLATES = ("Make the person {d} instead.", "Have the person {d}.", "Now the figure should {d}.", "I want them to {d}.",
                   "Edit the clip so the person will {d}.", "{D}.", "Please {d}.", "Change the motion: {d}.",
                   "Let the character {d} instead of what it does.", "The person should {d}.")
TEST_TEMPLATES = ("Could you get the person to {d}?", "Replace the action so that they {d}.",
                  "The person ought to {d} rather than what they do now.")
SYNONYMS = (("raise", "lift"), ("stretch", "extend"), ("sideways", "to the sides"), ("put", "place"), ("walk", "stroll"),
            ("hop", "bounce"), ("squat", "squat down"), ("jump", "leap"), ("lean", "bend"), ("tilt", "tip"),
            ("point", "gesture"), ("clap the hands", "clap"), ("turn around", "spin around"), ("crouch down", "crouch low"))
# what a user types when they want nothing changed (the planner's no_change class)
KEEP_INSTRUCTIONS = ("Keep the motion as it is.", "Don't change anything.", "Leave the person as they are.",
                     "No changes, please.", "Keep everything the same.", "Do nothing to the clip.")
KEEP_TEST = ("Leave it unchanged.", "Change nothing at all.")


def paraphrase(fine: str, rng: np.random.Generator, templates: tuple[str, ...] = TRAIN_TEMPLATES, p_synonym: float = 0.4) -> str:
    """A free-language instruction for target action ``fine``: a template around its description, words swapped
    for synonyms at random."""
    d = ACTIONS[fine].description
    for a, b in SYNONYMS:
        if a in d and rng.random() < p_synonym:
            d = d.replace(a, b)
    t = templates[int(rng.integers(len(templates)))]
    return t.format(d=d, D=d[:1].upper() + d[1:])
