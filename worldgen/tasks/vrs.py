"""vrs: video reasoning segmentation. A clip, a query whose answer is exactly one object, its masks.

Scenes are built with hard distractors: shapes and colours are drawn from small pools so several
objects share a shape or a colour; objects cross paths, hide behind each other, leave and come
back. Every candidate query is resolved by brute force over all objects against the world state
(``resolve``); only queries with exactly one matching object are kept, otherwise the scene is
regenerated from the next sub-seed.

Query kinds: disappears_first, appears_last, hits_wall, fastest, hidden_behind, collides_with,
reappears, never_moves. ``filter`` narrows the candidates by shape or colour; ``ref`` names a
second, uniquely described object.

JSONL schema (one line per item)::

    {"task": "vrs", "seed": int, "level": 1|2|3, "query": str,
     "query_struct": {"kind": str, "filter": {"shape"?: str, "color"?: str}, "ref": {"shape": str, "color": str} | null},
     "target_id": int, "distractor_ids": [int],   # objects sharing the target's shape or colour
     "hard": [str],                                 # which hard-distractor kinds are present
     "objects": [{"id", "shape", "color", "size"}], "events": [...], "world": {...},
     "files": {"video": "....mp4", "masks": "DIR (DAVIS palette PNGs, all ids)", "target_masks": "DIR (target = 1)"}}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgen.scene import SceneConfig, sample_background, sample_shape
from worldgen.tasks.base import Sample, sub_rng
from worldgen.vocab import COLOR_NAMES, SHAPES
from worldgen.world import World

KINDS = ("disappears_first", "appears_last", "hits_wall", "fastest", "hidden_behind", "collides_with", "reappears", "never_moves")
FAST_MARGIN = 1.3  # the fastest object must be this much faster than the runner-up


@dataclass
class Config:
    size: int = 64
    num_frames: int = 48
    fps: float = 12.0
    level: int = 2  # 1: 3-4 objects, 2: 4-6, 3: 6-8 with stronger attribute sharing
    max_attempts: int = 50


def _speeds(world: World) -> np.ndarray:
    tr = world.track
    v = np.linalg.norm(np.diff(tr["pos"], axis=0), axis=-1)
    both = tr["present"][1:] & tr["present"][:-1]
    return np.where(both.sum(0) > 0, (v * both).sum(0) / np.maximum(both.sum(0), 1), 0.0)


def _matches(o, flt: dict) -> bool:
    return all(getattr(o, k) == v for k, v in flt.items())


def _unique_ref(world: World, ref: dict | None):
    if ref is None:
        return None
    hits = [o for o in world.objects if _matches(o, ref)]
    return hits[0] if len(hits) == 1 else None


def resolve(world: World, q: dict) -> list[int]:
    """Ids of the objects that satisfy query ``q`` (brute force over every object)."""
    kind, flt = q["kind"], q.get("filter") or {}
    cands = [o for o in world.objects if _matches(o, flt)]
    ev = world.events
    if kind in ("hidden_behind", "collides_with"):
        ref = _unique_ref(world, q.get("ref"))
        if ref is None:
            return []
        cands = [o for o in cands if o.id != ref.id]
        if kind == "hidden_behind":
            return [o.id for o in cands if any(e["type"] == "occlude_start" and e["objects"] == [ref.id, o.id] for e in ev)]
        return [o.id for o in cands if any(e["type"] == "collide" and sorted(e["objects"]) == sorted([ref.id, o.id]) for e in ev)]
    if kind == "hits_wall":
        return [o.id for o in cands if any(e["type"] == "hit_wall" and e["objects"] == [o.id] for e in ev)]
    if kind == "reappears":
        return [o.id for o in cands if len(o.spans) >= 2]
    if kind == "never_moves":
        return [o.id for o in cands if o.motion.kind == "static"]
    if kind in ("disappears_first", "appears_last"):
        typ = "disappear" if kind == "disappears_first" else "appear"
        first = {}
        for e in ev:
            if e["type"] == typ and e["objects"][0] not in first:
                first[e["objects"][0]] = e["frame"]
        times = {o.id: first[o.id] for o in cands if o.id in first}
        if not times:
            return []
        best = min(times.values()) if typ == "disappear" else max(times.values())
        return [i for i, t in times.items() if t == best]
    if kind == "fastest":
        sp = _speeds(world)
        vals = {o.id: sp[world.objects.index(o)] for o in cands}
        if not vals:
            return []
        top = max(vals.values())
        return [i for i, v in vals.items() if v * FAST_MARGIN > top]
    raise ValueError(f"invalid query kind={kind!r}: choose one of {KINDS}")


def query_text(q: dict, rng: np.random.Generator) -> str:
    flt, kind = q.get("filter") or {}, q["kind"]
    color = flt.get("color")
    shape = flt.get("shape")
    noun = " ".join(w for w in (color, shape or ("object" if color else pick_word(rng, ["object", "shape", "one"]))) if w)
    ref = q.get("ref")
    refn = f"{ref['color']} {ref['shape']}" if ref else ""
    return {
        "disappears_first": f"the {noun} that disappears first",
        "appears_last": f"the {noun} that appears last",
        "hits_wall": f"the {noun} that hits the wall",
        "fastest": f"the fastest {noun}",
        "hidden_behind": f"the {noun} that was hidden behind the {refn}",
        "collides_with": f"the {noun} that bumps into the {refn}",
        "reappears": f"the {noun} that disappears and comes back",
        "never_moves": f"the {noun} that never moves",
    }[kind]


def pick_word(rng: np.random.Generator, words: list) -> str:
    return words[int(rng.integers(len(words)))]


def build_world(rng: np.random.Generator, cfg: Config) -> World:
    """A scene with hard distractors: few shapes/colours shared by many objects, transient objects."""
    lo, hi = {1: (3, 4), 2: (4, 6), 3: (6, 8)}[cfg.level]
    n = int(rng.integers(lo, hi + 1))
    sc = SceneConfig(cfg.size, cfg.size, cfg.num_frames, cfg.fps, p_transient=0.5, p_reappear=0.35)
    shapes = list(rng.choice(SHAPES, size=max(2, n // 2), replace=False))
    colors = list(rng.choice(COLOR_NAMES, size=max(2, n // 2), replace=False))
    z = rng.permutation(n)
    objs = [sample_shape(rng, sc, i + 1, int(z[i]), shape=str(rng.choice(shapes)), color=str(rng.choice(colors))) for i in range(n)]
    return World(cfg.size, cfg.size, cfg.num_frames, cfg.fps, objs, sample_background(rng, sc))


def candidate_queries(world: World) -> list[dict]:
    """Every query the vocabulary can express about this world (before the uniqueness check)."""
    filters = [{}] + [{"shape": s} for s in sorted({o.shape for o in world.objects})] + [{"color": c} for c in sorted({o.color for o in world.objects})]
    refs = [{"shape": o.shape, "color": o.color} for o in world.objects]
    out = []
    for kind in KINDS:
        for flt in filters:
            for ref in refs if kind in ("hidden_behind", "collides_with") else [None]:
                out.append({"kind": kind, "filter": flt, "ref": ref})
    return out


def hard_distractors(world: World, target: int) -> tuple[list[int], list[str]]:
    t = world.obj(target)
    same = [o.id for o in world.objects if o.id != target and (o.shape == t.shape or o.color == t.color)]
    tags = set()
    for o in world.objects:
        if o.id == target:
            continue
        if o.color == t.color:
            tags.add("same_color")
        if o.shape == t.shape:
            tags.add("same_shape")
        if len(o.spans) >= 2:
            tags.add("reappearance")
    for e in world.events:
        if e["type"] == "occlude_start":
            tags.add("occlusion")
        if e["type"] == "collide" and target in e["objects"]:
            tags.add("crossing_paths")
    return same, sorted(tags)


def generate(seed: int, cfg: Config | None = None) -> Sample:
    """One vrs item; retries deterministic sub-seeds until a query has exactly one answer."""
    cfg = cfg or Config()
    for attempt in range(cfg.max_attempts):
        rng = sub_rng(seed, attempt)
        world = build_world(rng, cfg)
        good = []
        for q in candidate_queries(world):
            ids = resolve(world, q)
            if len(ids) == 1:
                n_match = sum(_matches(o, q["filter"]) for o in world.objects)
                good.append((q, ids[0], n_match))
        if not good:
            continue
        # prefer queries whose filter still leaves distractors (hard); more so at higher levels
        hard = [g for g in good if g[2] >= 2]
        pool = hard if hard and rng.random() < {1: 0.5, 2: 0.8, 3: 1.0}[cfg.level] else good
        kinds = sorted({g[0]["kind"] for g in pool})  # balance query kinds, then pick within one
        kind = kinds[int(rng.integers(len(kinds)))]
        pool = [g for g in pool if g[0]["kind"] == kind]
        q, target, _ = pool[int(rng.integers(len(pool)))]
        same, tags = hard_distractors(world, target)
        record = {
            "task": "vrs", "seed": int(seed), "level": cfg.level, "attempt": attempt,
            "query": query_text(q, rng), "query_struct": q, "target_id": int(target),
            "distractor_ids": same, "hard": tags,
            "objects": [o.attrs() for o in world.objects], "events": world.events, "world": world.spec(),
        }  # fmt: skip
        return Sample("vrs", seed, record, worlds={"video": world})
    raise RuntimeError(f"vrs: no unique query for seed={seed} after {cfg.max_attempts} attempts; raise Config.max_attempts")


def world_for(record: dict) -> World:
    """Rebuild the world of a record from its seed (the generator is a pure function of it)."""
    cfg = Config(**{k: record["world"][k] for k in ("num_frames", "fps")}, size=record["world"]["width"], level=record["level"])
    return build_world(sub_rng(record["seed"], record["attempt"]), cfg)
