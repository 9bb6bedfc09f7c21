"""The scene layouts the builtin Bernini planner is taught to write (``planners.semantic.layout_tokens``), read from
worldgen's records: training may read worldgen, the pipeline never does.

    vocab = layout_vocab()                       # the names of every value, saved beside the planner's weights
    lay = item_layout("t2v", "train", 0, 12)     # SceneLayout of item 12 of the t2v TRAIN pool
    ids = layout_array(pool, "train", 0)         # (n, vocab.max_length) int64, EOS-then-PAD padded

Object order: the order the text names them in, then the rest of the world's objects: t2v captions name the
first three objects in world order, an edit keeps the source's order (an added object comes last), an r2v
prompt names its references first. A place is the cell of a ``cells x cells`` grid holding the object's centre
on a plan frame, or absent when the object is not in the frame.
"""

from __future__ import annotations

import numpy as np

from planners.semantic.layout_tokens import PAD, LayoutObject, LayoutVocab, SceneLayout
from training.bernini_data import DataConfig, Pool, world_sample
from worldgen.vocab import BACKGROUND_TONES, BACKGROUNDS, COLOR_NAMES, MOTIONS, SHAPES, SIZE_NAMES

# names for worldgen's five background tones (dark, low-saturation RGB), in its order
TONE_NAMES = ("dark blue", "dark purple", "dark green", "dark brown", "dark grey")
assert len(TONE_NAMES) == len(BACKGROUND_TONES)


def layout_vocab(cells: int = 16, plan_frames: int = 4, max_objects: int = 6) -> LayoutVocab:
    return LayoutVocab(bg_kind=tuple(BACKGROUNDS), bg_tone=TONE_NAMES, color=tuple(COLOR_NAMES), shape=(*SHAPES, "person"),
                       size=tuple(SIZE_NAMES), motion=tuple(MOTIONS), cells=cells, plan_frames=plan_frames, max_objects=max_objects)


def world_layout(world, order: list[int], plan_indices: list[int], cells: int) -> SceneLayout:
    """The layout of a worldgen world, its objects in ``order`` (object ids)."""
    bg = world.background
    tone = TONE_NAMES[[tuple(t) for t in BACKGROUND_TONES].index(tuple(bg.tone))]
    tr = world.track
    ids = list(tr["ids"])
    out = SceneLayout(bg.kind, tone)
    for obj_id in order:
        i = ids.index(obj_id)
        o = world.objects[i]
        places = []
        for t in plan_indices:
            if not tr["present"][t, i]:
                places.append(None)
                continue
            x, y = tr["pos"][t, i]
            cx = min(max(int(x * cells / world.width), 0), cells - 1)
            cy = min(max(int(y * cells / world.height), 0), cells - 1)
            places.append(cy * cells + cx)
        out.objects.append(LayoutObject(o.color, o.shape, o.size, o.motion.kind, places))
    return out


def item_layout(task: str, split: str, seed: int, index: int, cfg: DataConfig = DataConfig(), cells: int = 16) -> SceneLayout:
    """The target layout of item ``index`` of a Bernini pool (``training.bernini_data``)."""
    sample = world_sample(task, split, seed, index, cfg)
    world = sample.worlds["target" if task == "v2v" else "video"]
    order = [o.id for o in world.objects]
    if task == "r2v":
        named = [r["object_id"] for r in sample.record["references"]]
        order = named + [i for i in order if i not in named]
    return world_layout(world, order, cfg.plan_indices, cells)


def source_layout(split: str, seed: int, index: int, cfg: DataConfig = DataConfig(), cells: int = 16) -> SceneLayout:
    """The source clip's layout of v2v item ``index`` (its objects in the source world's order, which the target keeps)."""
    world = world_sample("v2v", split, seed, index, cfg).worlds["source"]
    return world_layout(world, [o.id for o in world.objects], cfg.plan_indices, cells)


def layout_array(pool: Pool, split: str, seed: int, vocab: LayoutVocab | None = None, source: bool = False) -> np.ndarray:
    """Every item's layout ids, ``(n, vocab.max_length)``, padded with PAD after EOS; objects past
    ``vocab.max_objects`` are dropped (worldgen's Bernini tasks hold at most six). ``source``: a v2v pool's source
    layouts instead of its targets'."""
    vocab = vocab or layout_vocab(plan_frames=len(pool.plan_indices))
    out = np.full((len(pool), vocab.max_length), PAD, np.int64)
    for row, index in enumerate(pool.index):
        if source:
            lay = source_layout(split, seed, int(index), pool.cfg, vocab.cells)
        else:
            lay = item_layout(pool.task, split, seed, int(index), pool.cfg, vocab.cells)
        lay.objects = lay.objects[: vocab.max_objects]
        ids = vocab.encode(lay)
        out[row, : len(ids)] = ids
    return out
