"""Random scenes: ``sample_world(seed, SceneConfig)`` is a pure function of its arguments.

All randomness comes from ``numpy.random.default_rng(seed)``; nothing depends on hash seeds,
set order or the clock, so the same ``(seed, config)`` gives the same world in every process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgen import figures
from worldgen.motion import Motion
from worldgen.vocab import BACKGROUND_TONES, BACKGROUNDS, COLOR_NAMES, MOTIONS, SHAPES, SIZE_NAMES
from worldgen.world import PERSON_HEIGHTS, Background, Obj, World


@dataclass
class SceneConfig:
    """What a random scene may contain."""

    width: int = 64
    height: int = 64
    num_frames: int = 48
    fps: float = 12.0
    num_shapes: tuple = (2, 4)  # inclusive range
    num_people: tuple = (0, 0)
    shapes: tuple = SHAPES
    colors: tuple = COLOR_NAMES
    sizes: tuple = SIZE_NAMES
    motions: tuple = MOTIONS
    backgrounds: tuple = BACKGROUNDS
    p_transient: float = 0.3  # chance an object appears late and/or leaves early
    p_reappear: float = 0.1  # chance a transient object comes back
    speed: float = 1.0  # px/frame at a 64 px canvas (scales with the canvas)
    scale: float = 1.0  # object size multiplier

    def __post_init__(self):
        for name in ("width", "height", "num_frames"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v <= 0 or (name != "num_frames" and v > 1024):
                raise ValueError(f"invalid SceneConfig.{name}={v!r}: use a positive integer (sides up to 1024)")


def sample_background(rng: np.random.Generator, cfg: SceneConfig) -> Background:
    kind = str(rng.choice(cfg.backgrounds))
    tone = BACKGROUND_TONES[rng.integers(len(BACKGROUND_TONES))]
    accent = tuple(int(c) for c in np.asarray(tone) + rng.integers(20, 60, size=3))
    return Background(kind, tuple(tone), accent, int(rng.integers(2**31)))


def sample_motion(rng: np.random.Generator, kind: str, r: float, cfg: SceneConfig, lifetime: int) -> Motion:
    """A motion program of ``kind`` that keeps an object of radius ``r`` on the canvas."""
    w, h = cfg.width, cfg.height
    lo, hi = np.array([r, r]), np.array([w - r, h - r])
    p0 = lo + rng.random(2) * np.maximum(hi - lo, 0)
    speed = cfg.speed * min(w, h) / 64 * rng.uniform(0.5, 1.5)
    ang = rng.uniform(0, 2 * np.pi)
    d = np.array([np.cos(ang), np.sin(ang)])
    room = _room(p0, d, lo, hi)  # distance to the wall along d
    if kind == "static":
        return Motion("static", tuple(p0))
    if kind == "linear":  # straight, slow enough not to reach a wall during its life
        s = min(speed, 0.95 * room / max(lifetime, 1))
        return Motion("linear", tuple(p0), tuple(d * s))
    if kind == "bounce":
        return Motion("bounce", tuple(p0), tuple(d * speed * 1.5))
    if kind == "accelerate":  # from rest, reaching about the wall at the end of its life
        acc = 2 * room / max(lifetime, 1) ** 2 * rng.uniform(0.4, 0.9)
        return Motion("accelerate", tuple(p0), (0.0, 0.0), tuple(d * acc))
    if kind == "circular":
        rad = min(rng.uniform(0.15, 0.3) * min(w, h), float(np.min(hi - lo)) / 2)
        centre = lo + rad + rng.random(2) * np.maximum(hi - lo - 2 * rad, 0)
        omega = speed / max(rad, 1.0) * rng.choice([-1, 1])
        return Motion("circular", tuple(centre), radius=rad, omega=float(omega), phase=float(rng.uniform(0, 2 * np.pi)))
    if kind == "stop_and_go":
        return Motion("stop_and_go", tuple(p0), tuple(d * speed * 1.5), on=int(rng.integers(4, 13)), off=int(rng.integers(4, 13)))
    raise ValueError(f"invalid motion kind={kind!r}: choose one of {MOTIONS}")


def _room(p: np.ndarray, d: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    ts = [((hi[k] if d[k] > 0 else lo[k]) - p[k]) / d[k] for k in range(2) if abs(d[k]) > 1e-9]
    return max(min(ts), 0.0) if ts else 0.0


def sample_spans(rng: np.random.Generator, cfg: SceneConfig) -> list:
    T = cfg.num_frames
    if rng.random() >= cfg.p_transient or T < 8:
        return []
    a = int(rng.integers(0, T // 2)) if rng.random() < 0.6 else 0
    b = int(rng.integers(max(a + 4, T // 2), T + 1)) if rng.random() < 0.6 or a == 0 else T
    spans = [(a, b)]
    if b < T - 6 and rng.random() < cfg.p_reappear:
        spans.append((int(rng.integers(b + 2, T - 3)), T))
    return spans


def sample_person(rng: np.random.Generator, cfg: SceneConfig, size: str) -> tuple[figures.Person, tuple]:
    """A person with a random identity and an action timeline that keeps them on the canvas."""
    hgt = PERSON_HEIGHTS[size] * cfg.height
    thick = max(2.0, round(hgt / 16 * rng.uniform(0.8, 1.3), 1))
    p = figures.Person(hgt, thick, arm=rng.uniform(0.9, 1.1), leg=rng.uniform(0.9, 1.1), torso=rng.uniform(0.9, 1.1))
    x = rng.uniform(0.3, 0.7) * cfg.width
    y = cfg.height - 0.5 * hgt - 1.0
    p.actions = sample_actions(rng, p, x, cfg.width, cfg.num_frames, cfg.fps)
    return p, (x, y)


def sample_actions(rng: np.random.Generator, p: figures.Person, x: float, width: float, num_frames: int, fps: float, names=None) -> list:
    names = sorted(figures.ACTIONS) if names is None else list(names)
    t, out, margin = int(rng.integers(0, max(int(fps * 0.5), 1))), [], 0.25 * p.height
    while True:
        n = int(rng.integers(int(fps * 1.5), int(fps * 2.5) + 1))
        if t + n > num_frames:
            break
        name = names[int(rng.integers(len(names)))]
        dx = figures.ACTIONS[name].shift * p.height
        if not margin <= x + dx <= width - margin:
            continue
        x += dx
        out.append((name, t, n))
        t += n + int(rng.integers(0, max(int(fps * 0.5), 1)))
    return out


def sample_world(seed: int, cfg: SceneConfig | None = None) -> World:
    """A random world; the same ``(seed, cfg)`` always gives the same world."""
    cfg = cfg or SceneConfig()
    rng = np.random.default_rng(seed)
    n_shapes = int(rng.integers(cfg.num_shapes[0], cfg.num_shapes[1] + 1))
    n_people = int(rng.integers(cfg.num_people[0], cfg.num_people[1] + 1))
    z = rng.permutation(n_shapes + n_people)
    objects = []
    for i in range(n_people):
        size = str(rng.choice(cfg.sizes))
        person, p0 = sample_person(rng, cfg, size)
        objects.append(Obj(len(objects) + 1, "person", str(rng.choice(cfg.colors)), size, int(z[len(objects)]), Motion("static", p0), person=person))
    for _ in range(n_shapes):
        objects.append(sample_shape(rng, cfg, len(objects) + 1, int(z[len(objects)])))
    return World(cfg.width, cfg.height, cfg.num_frames, cfg.fps, objects, sample_background(rng, cfg))


def sample_shape(rng: np.random.Generator, cfg: SceneConfig, obj_id: int, z: int, **fixed) -> Obj:
    """A random shape object; ``fixed`` pins any of shape/color/size/motion/spans."""
    shape = fixed.get("shape") or str(rng.choice(cfg.shapes))
    color = fixed.get("color") or str(rng.choice(cfg.colors))
    size = fixed.get("size") or str(rng.choice(cfg.sizes))
    spans = fixed["spans"] if "spans" in fixed else sample_spans(rng, cfg)
    kind = fixed.get("motion") or str(rng.choice(cfg.motions))
    o = Obj(obj_id, shape, color, size, z, spans=spans, scale=cfg.scale)
    life = max(b - a for a, b in spans) if spans else cfg.num_frames
    o.motion = sample_motion(rng, kind, o.radius(cfg.width, cfg.height), cfg, life)
    return o
