"""motion_edit: (source figure clip, instruction, target keypoint sequence, target clip).

The source shows a person doing action A; the target shows the same person (identity, timing,
background, other objects) doing action B instead. Actions come from the taxonomy in
``worldgen.figures.ACTIONS``: 6 categories (upper_body, lower_body, whole_body, locomotion,
gesture, posture) and 33 fine classes. Levels: 1 = B in a different category from A;
2 = any B; 3 = B in the same category as A (fine-grained), with a distractor shape in front.

JSONL schema::

    {"task": "motion_edit", "seed": int, "level": int, "instruction": str,
     "source_action": str, "target_action": str, "category": str, "fine_class": str,
     "action_span": [start, stop],
     "target_keypoints": [[[x, y, v] x 17] x T],   # COCO-17, pixels, v: 0 absent/outside, 1 occluded, 2 visible
     "source_world": {...}, "target_world": {...},
     "files": {"source": "....mp4", "target": "....mp4", "target_keypoints": "COCO json", ...}}
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from worldgen.figures import ACTIONS, Person
from worldgen.motion import Motion
from worldgen.scene import SceneConfig, sample_background, sample_shape
from worldgen.tasks.base import Sample
from worldgen.vocab import COLOR_NAMES
from worldgen.world import PERSON_HEIGHTS, Obj, World


@dataclass
class Config:
    size: int = 64
    num_frames: int = 36
    fps: float = 12.0
    level: int = 2


def _person_world(cfg: Config, color: str, action: str, start: int, n: int, ident: dict, extras: list, bg) -> World:
    p = Person(**ident, actions=[(action, start, n)])
    x = cfg.size / 2 - ACTIONS[action].shift * p.height / 2  # centre the walk
    o = Obj(1, "person", color, "large", z=0, motion=Motion("static", (x, cfg.size - 0.5 * p.height - 1)), person=p)
    return World(cfg.size, cfg.size, cfg.num_frames, cfg.fps, [o] + extras, bg)


def generate(seed: int, cfg: Config | None = None) -> Sample:
    cfg = cfg or Config()
    rng = np.random.default_rng([int(seed), 4])
    names = sorted(ACTIONS)
    a = names[int(rng.integers(len(names)))]
    if cfg.level == 1:
        pool = [b for b in names if ACTIONS[b].category != ACTIONS[a].category]
    elif cfg.level == 3:
        pool = [b for b in names if ACTIONS[b].category == ACTIONS[a].category and b != a]
    else:
        pool = [b for b in names if b != a]
    b = pool[int(rng.integers(len(pool)))]
    color = str(rng.choice(COLOR_NAMES))
    h = PERSON_HEIGHTS["large"] * cfg.size
    ident = {"height": h, "thickness": max(2.0, round(h / 16 * rng.uniform(0.8, 1.3), 1)), "arm": rng.uniform(0.9, 1.1), "leg": rng.uniform(0.9, 1.1), "torso": rng.uniform(0.9, 1.1)}
    start, n = int(rng.integers(2, 6)), int(cfg.num_frames * 0.75)
    sc = SceneConfig(cfg.size, cfg.size, cfg.num_frames, cfg.fps, scale=0.8)
    extras = [sample_shape(rng, sc, 2, 1 if cfg.level == 3 else -1, spans=[])] if cfg.level >= 2 else []
    bg = sample_background(rng, sc)
    src = _person_world(cfg, color, a, start, n, ident, copy.deepcopy(extras), bg)
    tgt = _person_world(cfg, color, b, start, n, ident, copy.deepcopy(extras), bg)
    kps = [tgt.render(t).keypoints[1].round(3).tolist() for t in range(tgt.num_frames)]
    record = {"task": "motion_edit", "seed": int(seed), "level": cfg.level,
              "instruction": f"Make the person {ACTIONS[b].description} instead.",
              "source_action": a, "target_action": b, "category": ACTIONS[b].category, "fine_class": b,
              "action_span": [start, start + n], "target_keypoints": kps,
              "source_world": src.spec(), "target_world": tgt.spec()}  # fmt: skip
    return Sample("motion_edit", seed, record, worlds={"source": src, "target": tgt})
