"""spatial: 512x512 stills with many small objects; questions that need localisation.

"What colour is the small star right of the large triangle?" The anchor (size + shape) is unique
in the image; the target is the only object of its (size, shape) inside the relation's region
(right of / left of / above / below the anchor: beyond its edge, within a band of
``BAND`` x canvas across). The evidence region is the box around anchor and target.

Levels: 1 = 12-20 objects, 2 = 20-32, 3 = 32-48 (smaller objects, more look-alikes).

JSONL schema::

    {"task": "spatial", "seed": int, "level": int, "question": str, "options": [str], "answer": str,
     "answer_index": int, "anchor_id": int, "target_id": int, "relation": str,
     "evidence_box": [x0, y0, x1, y1], "objects": [{"id", "shape", "color", "size", "x", "y", "r"}],
     "world": {...}, "files": {"image": "....png"}}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgen.motion import Motion
from worldgen.scene import SceneConfig, sample_background
from worldgen.tasks.base import Sample, sub_rng
from worldgen.vocab import COLOR_NAMES, SHAPES, SIZE_NAMES
from worldgen.world import Obj, World

BAND = 0.15
RELATIONS = ("right of", "left of", "above", "below")


@dataclass
class Config:
    size: int = 512
    level: int = 2
    max_attempts: int = 50


def in_region(anchor: dict, o: dict, relation: str, size: int) -> bool:
    dx, dy = o["x"] - anchor["x"], o["y"] - anchor["y"]
    band = BAND * size
    return {
        "right of": dx > anchor["r"] and abs(dy) < band, "left of": -dx > anchor["r"] and abs(dy) < band,
        "above": -dy > anchor["r"] and abs(dx) < band, "below": dy > anchor["r"] and abs(dx) < band,
    }[relation]  # fmt: skip


def build_world(rng, cfg: Config) -> World:
    lo, hi = {1: (12, 20), 2: (20, 32), 3: (32, 48)}[cfg.level]
    n, s = int(rng.integers(lo, hi + 1)), cfg.size
    scale = {1: 0.5, 2: 0.4, 3: 0.3}[cfg.level]
    objs, placed = [], []
    for i in range(n * 3):
        if len(objs) == n:
            break
        size = str(rng.choice(SIZE_NAMES))
        o = Obj(len(objs) + 1, str(rng.choice(SHAPES)), str(rng.choice(COLOR_NAMES)), size, len(objs), scale=scale)
        r = o.radius(s, s)
        p = r + rng.random(2) * (s - 2 * r)
        if any(np.hypot(*(p - q)) < r + rq + 2 for q, rq in placed):
            continue  # no overlaps: every object is fully visible
        placed.append((p, r))
        o.motion = Motion("static", tuple(p))
        objs.append(o)
    return World(s, s, 1, 1.0, objs, sample_background(rng, SceneConfig(s, s, 1)))


def generate(seed: int, cfg: Config | None = None) -> Sample:
    cfg = cfg or Config()
    for attempt in range(cfg.max_attempts):
        rng = sub_rng(seed, attempt)
        world = build_world(rng, cfg)
        st = [x for x in world.state(0)]
        key = lambda x: (x["size"], x["shape"])  # noqa: E731
        anchors = [a for a in st if sum(key(b) == key(a) for b in st) == 1]
        found = []
        for a in anchors:
            for rel in RELATIONS:
                region = [o for o in st if o["id"] != a["id"] and in_region(a, o, rel, cfg.size)]
                for o in region:
                    if sum(key(b) == key(o) for b in region) == 1:
                        found.append((a, rel, o))
        if not found:
            continue
        a, rel, o = found[int(rng.integers(len(found)))]
        opts = [o["color"]] + [str(c) for c in rng.choice([c for c in COLOR_NAMES if c != o["color"]], 3, replace=False)]
        opts = [opts[i] for i in rng.permutation(4)]
        ev = [min(a["x"] - a["r"], o["x"] - o["r"]), min(a["y"] - a["r"], o["y"] - o["r"]), max(a["x"] + a["r"], o["x"] + o["r"]), max(a["y"] + a["r"], o["y"] + o["r"])]
        record = {
            "task": "spatial", "seed": int(seed), "level": cfg.level, "attempt": attempt,
            "question": f"What colour is the {o['size']} {o['shape']} {rel} the {a['size']} {a['shape']}?",
            "options": opts, "answer": o["color"], "answer_index": opts.index(o["color"]),
            "anchor_id": a["id"], "target_id": o["id"], "relation": rel,
            "evidence_box": [round(float(np.clip(v, 0, cfg.size)), 2) for v in ev],
            "objects": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in x.items() if k in ("id", "shape", "color", "size", "x", "y", "r")} for x in st],
            "world": world.spec(),
        }  # fmt: skip
        return Sample("spatial", seed, record, images={"image": world.render(0).rgb})
    raise RuntimeError(f"spatial: no unique question for seed={seed} after {cfg.max_attempts} attempts")
