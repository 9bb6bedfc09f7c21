"""edit: (source clip, instruction, target clip) where the two clips differ in exactly one thing.

Edit kinds: recolor, reshape, resize, change_motion, add_object, remove_object, change_background.
The target world is a copy of the source with one field changed, so everything else (other
objects, motions, timing, background) is identical, pixel for pixel where the edit does not reach.

Levels: 1 = 1-2 objects; 2 = 2-3; 3 = 3-5 (the edited object has look-alike distractors).

JSONL schema::

    {"task": "edit", "seed": int, "level": int, "edit": {"kind": str, "object_id": int|null, "from": any, "to": any},
     "instruction": str, "source_world": {...}, "target_world": {...},
     "files": {"source": "....mp4", "target": "....mp4"}}
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from worldgen.scene import SceneConfig, sample_background, sample_motion, sample_shape, sample_world
from worldgen.tasks.base import Sample
from worldgen.vocab import COLOR_NAMES, MOTIONS, SHAPES, SIZE_NAMES
from worldgen.world import World

KINDS = ("recolor", "reshape", "resize", "change_motion", "add_object", "remove_object", "change_background")
_MOTION_WORDS = {"static": "stay still", "linear": "move in a straight line", "bounce": "bounce around", "circular": "move in a circle", "accelerate": "speed up", "stop_and_go": "stop and go"}


@dataclass
class Config:
    size: int = 64
    num_frames: int = 32
    fps: float = 12.0
    level: int = 2


def _other(rng, options, current):
    return str(rng.choice([o for o in options if o != current]))


def generate(seed: int, cfg: Config | None = None) -> Sample:
    cfg = cfg or Config()
    lo, hi = {1: (1, 2), 2: (2, 3), 3: (3, 5)}[cfg.level]
    sc = SceneConfig(cfg.size, cfg.size, cfg.num_frames, cfg.fps, num_shapes=(lo, hi), p_transient=0.0)
    src = sample_world(seed, sc)
    rng = np.random.default_rng([int(seed), 2])
    kind = str(rng.choice(KINDS if len(src.objects) > 1 else [k for k in KINDS if k != "remove_object"]))
    objs = copy.deepcopy(src.objects)
    o = objs[int(rng.integers(len(objs)))]
    name = f"the {o.color} {o.shape}"
    bg = copy.deepcopy(src.background)
    edit = {"kind": kind, "object_id": o.id}
    if kind == "recolor":
        new = _other(rng, COLOR_NAMES, o.color)
        edit.update({"from": o.color, "to": new}); o.color = new
        text = f"make {name} {new}"
    elif kind == "reshape":
        new = _other(rng, SHAPES, o.shape)
        edit.update({"from": o.shape, "to": new}); o.shape = new
        text = f"turn {name} into a {new}"
    elif kind == "resize":
        new = _other(rng, SIZE_NAMES, o.size)
        edit.update({"from": o.size, "to": new}); o.size = new
        o.motion = copy.deepcopy(o.motion)
        text = f"make {name} {new}"
    elif kind == "change_motion":
        new = _other(rng, MOTIONS, o.motion.kind)
        edit.update({"from": o.motion.kind, "to": new})
        o.motion = sample_motion(rng, new, o.radius(cfg.size, cfg.size), sc, cfg.num_frames)
        text = f"make {name} {_MOTION_WORDS[new]}"
    elif kind == "add_object":
        new = sample_shape(rng, sc, max(x.id for x in objs) + 1, max(x.z for x in objs) + 1, spans=[])
        objs.append(new)
        edit.update({"object_id": new.id, "from": None, "to": new.attrs()})
        text = f"add a {new.size} {new.color} {new.shape}"
    elif kind == "remove_object":
        objs.remove(o)
        edit.update({"from": o.attrs(), "to": None})
        text = f"remove {name}"
    else:
        new = sample_background(rng, sc)
        while (new.kind, new.tone) == (bg.kind, bg.tone):
            new = sample_background(rng, sc)
        edit.update({"object_id": None, "from": bg.kind, "to": new.kind})
        bg = new
        text = f"change the background to a {new.kind} one" if new.kind != bg.kind else "change the background colour"
    tgt = World(src.width, src.height, src.num_frames, src.fps, objs, bg)
    record = {"task": "edit", "seed": int(seed), "level": cfg.level, "edit": edit, "instruction": text[0].upper() + text[1:] + ".",
              "source_world": src.spec(), "target_world": tgt.spec()}
    return Sample("edit", seed, record, worlds={"source": src, "target": tgt})
