"""The VLM's training examples, drawn fresh every step from worldgen (no files).

- **QA** on ``longqa`` questions, shown the frames a VLM gets in use: uniform samples plus the
  evidence, GridProbe-style row and column probes of a K x K pool, and plain uniform samples. The
  target is the answer *as determined by the frames shown* (``longqa.answer(world, q, frames)``):
  one-hot when they determine the true answer, uniform over the options when they do not.
- **Dense targets**: which shown frames contain each option's referent (and, for counting, each
  count probe's), and per-frame presence of colours, shapes and colour-shape pairs.
- **Captions** of single-object clips ("a red circle moves left"), with the object's centre in each
  frame, and unrendered trajectories of such clips for the motion embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.frames import resize_frames
from worldgen.scene import SceneConfig, sample_world
from worldgen.tasks import longqa
from worldgen.tasks.base import split_seed
from worldgen.vocab import COLOR_NAMES, SHAPES

CAPTION_PROMPT = "Describe the video."
MOTION_WORDS = {"static": "stays still", "bounce": "bounces around", "circular": "moves in a circle",
                "stop_and_go": "stops and starts"}  # fmt: skip
DIRECTION_WORDS = {"left": "moves left", "right": "moves right", "up": "moves up", "down": "moves down"}
MOTION_PHRASES = (*MOTION_WORDS.values(), *DIRECTION_WORDS.values())  # classes of the training-only motion head
CAPTION_FRAMES = 24  # clip length; every 2nd frame is shown


def caption_vocab() -> list[str]:
    words = {"a", "an"} | set(COLOR_NAMES) | set(SHAPES)
    for phrase in list(MOTION_WORDS.values()) + list(DIRECTION_WORDS.values()):
        words |= set(phrase.split())
    return ["<pad>", "<bos>", "<eos>"] + sorted(words)


@dataclass
class VLMDataConfig:
    batch_size: int = 16
    caption_items: int = 6  # added to full-resolution batches
    max_frames_start: int = 8
    max_frames_end: int = 48  # 32x32 inputs; 64x64 ones take 2/3 of it, at most 20 (cost)
    low_res_p: float = 0.5
    trajectories: int = 128  # unrendered caption-clip trajectories per step, for the motion embedding
    curriculum_steps: int = 1000
    # question kinds are drawn with these weights: the conjunction kinds (needle: colour and shape
    # of one object; counting: distinct objects of a shape) learn slowest, so they are drawn more
    kind_weights: tuple[float, ...] = (0.25, 0.25, 0.2, 0.12, 0.18)  # needle, counting, order, negation, holistic


def frame_pool(n_total: int, k: int) -> np.ndarray:
    """The K x K pool of a GridProbe grid over an ``n_total``-frame clip, row-major."""
    return np.round(np.linspace(0, n_total - 1, k * k)).astype(int)


def frame_times(idx, n_total: int) -> np.ndarray:
    """When frames ``idx`` of an ``n_total``-frame clip were taken, as fractions of the clip (the protocol's ``times``)."""
    return np.asarray(idx, np.float32) / max(1, n_total - 1)


def choose_frames(rng, record: dict, n_total: int, max_frames: int) -> tuple[list[int], str]:
    """Frame indices for one example, and the sampling mode used."""
    mode = rng.choice(["evidence", "row", "col", "uniform"], p=[0.3, 0.3, 0.3, 0.1])
    if mode in ("row", "col"):
        k = int(rng.choice([6, 8, 12, 16]))
        grid = frame_pool(n_total, k).reshape(k, k)
        r = int(rng.integers(k))
        return sorted(set((grid[r] if mode == "row" else grid[:, r]).tolist())), mode
    n = int(rng.integers(4, max_frames + 1))
    uni = ((np.arange(n) + rng.random()) * n_total / n).astype(int).clip(0, n_total - 1).tolist()
    if mode == "evidence":
        ev = longqa.evidence_frames(record)
        m = min(len(ev), max(1, max_frames - n), 12)
        uni += [ev[i] for i in sorted(rng.choice(len(ev), m, replace=False))]
    return sorted(set(uni)), str(mode)


def visible_objects(world, frame) -> list:
    """Objects with at least 6 visible pixels in a rendered frame."""
    counts = np.bincount(frame.ids.ravel(), minlength=256)
    return [o for o in world.objects if counts[o.id] >= 6 and o.person is None]


def presence_labels(visible: list) -> np.ndarray:
    nc, ns = len(COLOR_NAMES), len(SHAPES)
    y = np.zeros(nc + ns + nc * ns, np.float32)
    for o in visible:
        c, s = COLOR_NAMES.index(o.color), SHAPES.index(o.shape)
        y[c] = y[nc + s] = y[nc + ns + c * ns + s] = 1
    return y


def render(world, indices, size: int) -> tuple[np.ndarray, np.ndarray, list[list]]:
    """Frames at ``size``, per-frame presence labels, and the visible objects of each frame."""
    rendered = [world.render(int(t)) for t in indices]
    vis = [visible_objects(world, f) for f in rendered]
    frames = resize_frames(np.stack([f.rgb for f in rendered]), (size, size), "area")
    return frames, np.stack([presence_labels(v) for v in vis]), vis


def grounding_targets(rec: dict, visible: list[list]) -> tuple[np.ndarray, np.ndarray]:
    """Which frames show each option's referent ``(O, T)`` and, for counting, each count probe's
    ("a <colour> <shape asked about>") ``(C, T)``; NaN where a kind defines no target."""
    q, T = rec["question_struct"], len(visible)
    kind, opts = rec["kind"], rec["options"]
    refers = {
        "needle": lambda o, opt: o.color == q["color"] and o.shape == opt,
        "negation": lambda o, opt: o.color == opt,
        "holistic": lambda o, opt: o.color == opt,
        "order": lambda o, opt: f"the {o.color} {o.shape}" == opt,
    }.get(kind)
    opt_t = np.full((len(opts), T), np.nan, np.float32)
    probe_t = np.full((len(COLOR_NAMES), T), np.nan, np.float32)
    if refers:
        opt_t = np.array([[any(refers(o, opt) for o in vis) for vis in visible] for opt in opts], np.float32).reshape(len(opts), T)
    if kind == "counting":
        probe_t = np.array([[any(o.color == c and o.shape == q["shape"] for o in vis) for vis in visible] for c in COLOR_NAMES], np.float32)
    return opt_t, probe_t


def question_item(rec: dict, world, idx, size: int, determined: bool) -> tuple[dict, list[list]]:
    """A QA item of ``rec``'s question shown frames ``idx`` at ``size``, plus the visible objects of each frame."""
    frames, aux, vis = render(world, idx, size)
    item = {"frames": frames, "aux": aux, "question": rec["question"], "options": rec["options"], "answer_index": rec["answer_index"],
            "kind": rec["kind"], "determined": bool(determined), "times": frame_times(idx, world.num_frames)}
    return item, vis


def qa_example(seed: int, max_frames: int, size: int, kind: str | None = None) -> dict:
    """One training item: a longqa question (level and, unless given, kind drawn from the seed), the
    frames ``choose_frames`` shows, the answer those frames determine, and dense grounding targets."""
    rng = np.random.default_rng(seed)
    level = int(rng.choice([1, 2, 3], p=[0.5, 0.3, 0.2]))
    sample = longqa.generate(seed, longqa.Config(level=level, kind=kind))
    rec, world = sample.record, sample.worlds["video"]
    idx, mode = choose_frames(rng, rec, world.num_frames, max_frames)
    determined = longqa.answer(world, rec["question_struct"], idx) == rec["answer"]
    item, vis = question_item(rec, world, idx, size, determined)
    opt_ground, probe_ground = grounding_targets(rec, vis)
    n_opt = len(rec["options"])
    target = np.eye(n_opt, dtype=np.float32)[rec["answer_index"]] if determined else np.full(n_opt, 1 / n_opt, np.float32)
    return {**item, "target": target, "level": level, "mode": mode, "opt_ground": opt_ground, "probe_ground": probe_ground}


def caption_motion(world) -> str | None:
    """The motion phrase a single-object clip shows, or None when it shows none clearly.

    Phrases follow the trajectory, not just the motion program: a "bounce" that meets no wall
    during the clip is a straight move, and a slow drift (under 10% of the frame) has no phrase."""
    from worldgen.captions import direction

    o = world.objects[0]
    if o.motion.kind in MOTION_WORDS and o.motion.kind != "bounce":
        return MOTION_WORDS[o.motion.kind]
    if o.motion.kind == "bounce" and np.any(np.diff(world.track["bounces"][:, 0], axis=0) != 0):
        return MOTION_WORDS["bounce"]
    d = direction(world, o.id)
    return DIRECTION_WORDS[d] if d else None


def caption_world(seed: int):
    """A single-object clip with a clear motion (re-drawn from the seed until it has one), its motion
    phrase, the frames shown (every 2nd) and the object's centre in them, in [-1, 1]."""
    for k in range(50):
        s = seed if k == 0 else int(np.random.default_rng([seed, k]).integers(2**31))
        world = sample_world(s, SceneConfig(num_frames=CAPTION_FRAMES, num_shapes=(1, 1), p_transient=0.0))
        motion = caption_motion(world)
        if motion is not None:
            break
    idx = list(range(0, CAPTION_FRAMES, 2))
    centre = world.track["pos"][idx, 0] / np.array([world.width, world.height]) * 2 - 1
    return world, motion, idx, centre.astype(np.float32)


def caption_example(seed: int) -> dict:
    """A rendered caption clip and its caption ("a red circle moves left")."""
    world, motion, idx, centre = caption_world(seed)
    o = world.objects[0]
    frames, aux, _ = render(world, idx, 64)
    art = "an" if o.color[0] in "aeiou" else "a"
    return {"frames": frames, "aux": aux, "caption": f"{art} {o.color} {o.shape} {motion}",
            "motion": MOTION_PHRASES.index(motion), "centre": centre, "times": frame_times(idx, world.num_frames)}


def trajectory_examples(seed: int, n: int, noise: float = 0.02) -> dict:
    """``n`` caption-clip trajectories with their motion classes, not rendered (~0.2 ms each), jittered
    by about the position head's error: clean, plentiful data for the motion embedding, which learns
    too slowly from the ~3 rendered clips per step alone (card: "Design notes and measurements")."""
    rng = np.random.default_rng(seed)
    drawn = [caption_world(int(s)) for s in rng.integers(2**31, size=n)]
    traj = np.stack([c for _, _, _, c in drawn]) + rng.normal(0, noise, (n, len(drawn[0][3]), 2)).astype(np.float32)
    return {"trajectories": traj.astype(np.float32), "motions": np.array([MOTION_PHRASES.index(m) for _, m, _, _ in drawn])}


def make_items(step: int, cfg: VLMDataConfig, split: str = "train") -> list[dict]:
    """Batch ``step`` of the stream: a pure function of (step, cfg, split). The frames per item grow
    from ``max_frames_start`` to ``max_frames_end`` over the first ``curriculum_steps``."""
    seed = split_seed(split, step % 10**7, 0)
    rng = np.random.default_rng(seed)
    frac = min(1.0, step / max(1, cfg.curriculum_steps))
    max_frames = int(cfg.max_frames_start + frac * (cfg.max_frames_end - cfg.max_frames_start))
    size = 32 if rng.random() < cfg.low_res_p else 64
    n = max_frames if size == 32 else max(8, min(20, 2 * max_frames // 3))
    w = np.asarray(cfg.kind_weights) / np.sum(cfg.kind_weights)
    items = [qa_example(int(rng.integers(2**31)), n, size, kind=str(rng.choice(longqa.KINDS, p=w))) for _ in range(cfg.batch_size)]
    if size == 64:
        items += [caption_example(int(rng.integers(2**31))) for _ in range(cfg.caption_items)]
    if cfg.trajectories:
        items.append(trajectory_examples(int(rng.integers(2**31)), cfg.trajectories))
    return items
