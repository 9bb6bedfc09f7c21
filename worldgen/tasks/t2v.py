"""t2v: caption -> clip. A random scene and a paraphrased caption with its attribute record.

Levels: 1 = one shape; 2 = 2-3 shapes; 3 = 3-5 shapes and maybe a person.

JSONL schema::

    {"task": "t2v", "seed": int, "level": int, "caption": str,
     "attributes": {"objects": [{"id", "shape", "color", "size", "motion"|"actions", "direction"}],
                    "relations": [{"subject", "relation", "object", "frame"}], "events": [...]},
     "world": {...}, "files": {"video": "....mp4"}}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgen.captions import caption
from worldgen.scene import SceneConfig, sample_world
from worldgen.tasks.base import Sample


@dataclass
class Config:
    size: int = 64
    num_frames: int = 32
    fps: float = 12.0
    level: int = 2


def scene_config(cfg: Config) -> SceneConfig:
    shapes, people = {1: ((1, 1), (0, 0)), 2: ((2, 3), (0, 0)), 3: ((3, 5), (0, 1))}[cfg.level]
    return SceneConfig(cfg.size, cfg.size, cfg.num_frames, cfg.fps, num_shapes=shapes, num_people=people)


def generate(seed: int, cfg: Config | None = None) -> Sample:
    cfg = cfg or Config()
    world = sample_world(seed, scene_config(cfg))
    text, attrs = caption(world, np.random.default_rng([int(seed), 1]))
    record = {"task": "t2v", "seed": int(seed), "level": cfg.level, "caption": text, "attributes": attrs, "world": world.spec()}
    return Sample("t2v", seed, record, worlds={"video": world})
