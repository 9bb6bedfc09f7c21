"""longqa: long clips (1,000-4,000 frames at 64x64) with multiple-choice questions.

Clips are rendered lazily frame by frame (``World.render``), so a 4,000-frame clip streams in
bounded memory. Every answer is a function of the world state restricted to a set of frames,
``answer(world, q, frames)``; the generator calls it on all frames, tests recompute it.

Kinds:
- ``needle``: "What shape was the <colour> object that briefly appeared?" One object of a colour
  no other object has, present in at most 3% of the frames (level 1: 3%, 2: 2%, 3: 1%). Its
  frames are the evidence: sufficient (answerable from them alone) and necessary (without them
  no object of that colour is seen, so the question has no answer).
- ``counting``: "How many <shape>s appear in the video?" (distinct objects).
- ``order``: "Which of these appears first?" over uniquely described objects.
- ``negation``: "Which colour never appears?"
- ``holistic``: "Which colour is on screen for the longest time?" (frames with >= 1 object of it,
  winner at least 10% ahead).

Levels: 1 = 1,000 frames, 4 options, 6 objects; 2 = 2,000, 6, 9; 3 = 4,000, 8, 12.

JSONL schema::

    {"task": "longqa", "seed": int, "level": int, "kind": str, "question": str,
     "options": [str] (4-8), "answer_index": int, "answer": str,
     "question_struct": {...},            # the parameters answer() needs
     "evidence_ranges": [[start, stop]],  # evidence frame indices as half-open ranges
     "num_evidence_frames": int, "num_frames": int, "fps": float, "world": {...},
     "files": {"video": "....mp4"}}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgen.motion import Motion
from worldgen.scene import SceneConfig, sample_motion
from worldgen.tasks.base import Sample, sub_rng
from worldgen.vocab import COLOR_NAMES, MOTIONS, SHAPES
from worldgen.world import Background, Obj, World

KINDS = ("needle", "counting", "order", "negation", "holistic")
LEVELS = {1: (1000, 4, 6, 0.03), 2: (2000, 6, 9, 0.02), 3: (4000, 8, 12, 0.01)}  # frames, options, objects, needle fraction
HOLISTIC_MARGIN = 1.1


@dataclass
class Config:
    size: int = 64
    level: int = 1
    num_frames: int | None = None  # None: the level's length
    fps: float = 24.0
    kind: str | None = None  # None: drawn from KINDS
    max_attempts: int = 50


def build_world(rng: np.random.Generator, cfg: Config, kind: str) -> tuple[World, dict]:
    """Objects that come and go over a long clip; for ``needle`` a brief object of a unique colour."""
    T0, _, n, frac = LEVELS[cfg.level]
    T = cfg.num_frames or T0
    sc = SceneConfig(cfg.size, cfg.size, T, cfg.fps)
    colors = list(COLOR_NAMES)
    extra = {}
    if kind == "needle":
        extra["color"] = colors.pop(int(rng.integers(len(colors))))
    if kind == "negation":  # leave at least one colour out of the clip
        colors = list(rng.choice(colors, size=len(colors) - int(rng.integers(1, 4)), replace=False))
    objs = []
    for i in range(n):
        spans, t = [], int(rng.integers(0, T // 4))
        while t < T and len(spans) < 3:
            ln = int(rng.integers(T // 20, T // 4))
            spans.append((t, min(t + ln, T)))
            t += ln + int(rng.integers(T // 20, T // 3))
        o = Obj(i + 1, str(rng.choice(SHAPES)), str(rng.choice(colors)), str(rng.choice(["small", "medium", "large"])), i, spans=spans)
        kind_m = str(rng.choice([m for m in MOTIONS if m not in ("linear", "accelerate")]))
        o.motion = sample_motion(rng, kind_m, o.radius(cfg.size, cfg.size), sc, T)
        objs.append(o)
    if kind == "needle":
        ln = max(2, int(frac * T))
        a = int(rng.integers(T // 10, T - ln - T // 10))
        o = Obj(n + 1, str(rng.choice(SHAPES)), extra["color"], "large", n + 10, spans=[(a, a + ln)])
        o.motion = sample_motion(rng, "static", o.radius(cfg.size, cfg.size), sc, ln)
        objs.append(o)
    return World(cfg.size, cfg.size, T, cfg.fps, objs, Background("solid", (20, 20, 28))), extra


def _present(world: World, frames) -> np.ndarray:
    """``(len(frames), N)`` presence restricted to ``frames`` (all frames if None)."""
    p = world.track["present"]
    return p if frames is None else p[np.asarray(sorted(frames), dtype=np.int64)]


def answer(world: World, q: dict, frames=None) -> str | None:
    """The answer to ``q`` from the state restricted to ``frames``; None when it is not determined."""
    pres = _present(world, frames)
    seen = [o for i, o in enumerate(world.objects) if pres[:, i].any()]
    if q["kind"] == "needle":
        shapes = sorted({o.shape for o in seen if o.color == q["color"]})
        return shapes[0] if len(shapes) == 1 else None
    if q["kind"] == "counting":
        return str(sum(o.shape == q["shape"] for o in seen))
    if q["kind"] == "order":
        first = {}
        for oid in q["ids"]:
            i = [o.id for o in world.objects].index(oid)
            hit = np.nonzero(pres[:, i])[0]
            if len(hit):
                first[oid] = hit[0]
        if not first:
            return None
        best = min(first.values())
        win = [k for k, v in first.items() if v == best]
        return _describe(world.obj(win[0])) if len(win) == 1 else None
    if q["kind"] == "negation":
        missing = [c for c in q["colors"] if all(o.color != c for o in seen)]
        return missing[0] if len(missing) == 1 else None
    if q["kind"] == "holistic":
        counts = {c: int(np.any(pres[:, [o.color == c for o in world.objects]], axis=1).sum()) for c in q["colors"]}
        ranked = sorted(counts.values(), reverse=True)
        if not ranked or ranked[0] == 0 or (len(ranked) > 1 and ranked[0] < HOLISTIC_MARGIN * ranked[1]):
            return None
        return max(counts, key=counts.get)
    raise ValueError(f"invalid question kind={q['kind']!r}: choose one of {KINDS}")


def _describe(o: Obj) -> str:
    return f"the {o.color} {o.shape}"


def _ranges(frames: list[int]) -> list[list[int]]:
    out = []
    for f in sorted(set(int(x) for x in frames)):
        if out and out[-1][1] == f:
            out[-1][1] = f + 1
        else:
            out.append([f, f + 1])
    return out


def evidence_frames(record: dict) -> list[int]:
    """Expand a record's ``evidence_ranges`` into frame indices."""
    return [f for a, b in record["evidence_ranges"] for f in range(a, b)]


def _first_frames(world: World, ids) -> list[int]:
    pres = world.track["present"]
    idx = [o.id for o in world.objects]
    return [int(np.nonzero(pres[:, idx.index(i)])[0][0]) for i in ids if pres[:, idx.index(i)].any()]


def _question(rng: np.random.Generator, world: World, kind: str, extra: dict, n_opt: int):
    """(question text, struct, options, evidence frames) or None when this world cannot host ``kind``."""
    objs = world.objects
    if kind == "needle":
        o = next(o for o in objs if o.color == extra["color"])
        q = {"kind": kind, "color": o.color}
        opts = [o.shape] + list(rng.choice([s for s in SHAPES if s != o.shape], n_opt - 1, replace=False))
        ev = [f for a, b in o.spans for f in range(a, b)]
        return f"What shape was the {o.color} object that briefly appeared?", q, opts, ev
    if kind == "counting":
        s = str(rng.choice(sorted({o.shape for o in objs})))
        q = {"kind": kind, "shape": s}
        true = int(answer(world, q))
        pool = [k for k in range(0, true + n_opt + 2) if k != true]
        opts = [str(true)] + [str(k) for k in sorted(pool, key=lambda k: abs(k - true))[: n_opt - 1]]
        return f"How many {s}s appear in the video?", q, opts, _first_frames(world, [o.id for o in objs if o.shape == s])
    if kind == "order":
        desc = [_describe(o) for o in objs]
        unique = [o for o, d in zip(objs, desc) if desc.count(d) == 1]
        if len(unique) < n_opt:
            return None
        chosen = [unique[i] for i in rng.choice(len(unique), n_opt, replace=False)]
        q = {"kind": kind, "ids": [o.id for o in chosen]}
        return "Which of these appears first?", q, [_describe(o) for o in chosen], _first_frames(world, q["ids"])
    if kind == "negation":
        present = sorted({o.color for o in objs})
        absent = [c for c in COLOR_NAMES if c not in present]
        if not absent or len(present) < n_opt - 1:
            return None
        opts = [str(rng.choice(absent))] + list(rng.choice(present, n_opt - 1, replace=False))
        q = {"kind": kind, "colors": sorted(opts)}
        ev = _first_frames(world, [next(o.id for o in objs if o.color == c) for c in opts[1:]])
        return "Which colour never appears?", q, opts, ev
    if kind == "holistic":
        present = sorted({o.color for o in objs})
        if len(present) < n_opt:
            return None
        opts = list(rng.choice(present, n_opt, replace=False))
        q = {"kind": kind, "colors": sorted(opts)}
        return "Which colour is on screen for the longest time?", q, opts, list(range(world.num_frames))
    raise ValueError(f"invalid kind={kind!r}: choose one of {KINDS}")


def generate(seed: int, cfg: Config | None = None) -> Sample:
    cfg = cfg or Config()
    if cfg.level not in LEVELS:
        raise ValueError(f"invalid Config.level={cfg.level!r}: choose one of {sorted(LEVELS)}")
    n_opt = LEVELS[cfg.level][1]
    for attempt in range(cfg.max_attempts):
        kind = cfg.kind or KINDS[int(np.random.default_rng([int(seed), attempt, 7]).integers(len(KINDS)))]
        rng = sub_rng(seed, attempt)
        world, extra = build_world(rng, cfg, kind)
        made = _question(rng, world, kind, extra, n_opt)
        if made is None:
            continue
        text, q, opts, ev = made
        ans = answer(world, q)
        if ans is None or ans not in opts or len(set(opts)) != len(opts):
            continue
        opts = [str(x) for x in opts]
        order = rng.permutation(len(opts))
        opts = [opts[i] for i in order]
        record = {
            "task": "longqa", "seed": int(seed), "level": cfg.level, "attempt": attempt, "kind": kind,
            "question": text, "options": opts, "answer_index": opts.index(ans), "answer": ans,
            "question_struct": q, "evidence_ranges": _ranges(ev), "num_evidence_frames": len(set(ev)),
            "num_frames": world.num_frames, "fps": world.fps, "world": world.spec(),
        }  # fmt: skip
        return Sample("longqa", seed, record, worlds={"video": world})
    raise RuntimeError(f"longqa: no valid question for seed={seed} after {cfg.max_attempts} attempts")


def world_for(record: dict, cfg: Config | None = None) -> World:
    """Rebuild the world of a record from its seed and attempt."""
    cfg = cfg or Config(level=record["level"])
    if cfg.num_frames is None and record["num_frames"] != LEVELS[record["level"]][0]:
        cfg.num_frames = record["num_frames"]
    return build_world(sub_rng(record["seed"], record["attempt"]), cfg, record["kind"])[0]
