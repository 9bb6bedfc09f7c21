"""ref2v: 1-5 reference object images + prompt -> clip.

Each reference image shows one object of the clip alone, centred on a plain background; the
prompt refers to them as "the object in image k" (k from 1) and says how each moves.

JSONL schema::

    {"task": "ref2v", "seed": int, "level": int, "prompt": str,
     "references": [{"image": k, "object_id": int, "shape", "color", "size"}],
     "world": {...}, "files": {"video": "....mp4", "ref_1": "....png", ...}}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgen.captions import describe_motion
from worldgen.motion import Motion
from worldgen.scene import SceneConfig, sample_world
from worldgen.tasks.base import Sample
from worldgen.world import Background, Obj, World


@dataclass
class Config:
    size: int = 64
    num_frames: int = 32
    fps: float = 12.0
    level: int = 2  # number of references: level 1 -> 1, 2 -> 2-3, 3 -> 4-5


def reference_image(o: Obj, size: int) -> np.ndarray:
    solo = Obj(1, o.shape, o.color, o.size, motion=Motion("static", (size / 2, size / 2)), angle=o.angle, scale=o.scale)
    return World(size, size, 1, 1.0, [solo], Background("solid", (128, 128, 128))).render(0).rgb


def generate(seed: int, cfg: Config | None = None) -> Sample:
    cfg = cfg or Config()
    k_lo, k_hi = {1: (1, 1), 2: (2, 3), 3: (4, 5)}[cfg.level]
    world = sample_world(seed, SceneConfig(cfg.size, cfg.size, cfg.num_frames, cfg.fps, num_shapes=(k_hi, k_hi + 1), p_transient=0.0))
    rng = np.random.default_rng([int(seed), 3])
    k = int(rng.integers(k_lo, k_hi + 1))
    refs = [world.objects[i] for i in sorted(rng.choice(len(world.objects), k, replace=False))]
    parts = [f"the object in image {j + 1} {describe_motion(world, o.id, rng)[0]}" for j, o in enumerate(refs)]
    prompt = "; ".join(parts)
    record = {"task": "ref2v", "seed": int(seed), "level": cfg.level, "prompt": prompt[0].upper() + prompt[1:] + ".",
              "references": [{"image": j + 1, "object_id": o.id, **{a: getattr(o, a) for a in ("shape", "color", "size")}} for j, o in enumerate(refs)],
              "world": world.spec()}
    return Sample("ref2v", seed, record, worlds={"video": world}, images={f"ref_{j + 1}": reference_image(o, cfg.size) for j, o in enumerate(refs)})
