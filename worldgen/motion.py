"""Motion programs in closed form: the position at any frame without simulating earlier ones.

Every program yields an *unfolded* path ``u(t)``; the object's centre is ``u`` reflected into the
box ``[lo, hi]`` (a triangle wave), which is exactly a bounce off the walls. The number of
reflections so far, ``floor((u - lo) / (hi - lo))``, changes exactly at wall hits, so hit
events are closed-form too. Units: pixels and frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgen.vocab import MOTIONS


@dataclass
class Motion:
    """One motion program. Only the fields its ``kind`` uses matter."""

    kind: str = "static"  # one of vocab.MOTIONS
    p0: tuple = (0.0, 0.0)  # start position (static/linear/bounce/accelerate/stop_and_go) or centre (circular)
    v: tuple = (0.0, 0.0)  # velocity, px/frame
    a: tuple = (0.0, 0.0)  # acceleration, px/frame^2 (accelerate)
    radius: float = 0.0  # circular
    omega: float = 0.0  # circular, rad/frame
    phase: float = 0.0  # circular
    on: int = 8  # stop_and_go: frames moving, then frames stopped
    off: int = 8

    def __post_init__(self):
        if self.kind not in MOTIONS:
            raise ValueError(f"invalid Motion.kind={self.kind!r}: choose one of {MOTIONS}")


def unfolded(m: Motion, t: np.ndarray) -> np.ndarray:
    """``(len(t), 2)`` unfolded positions."""
    t = np.asarray(t, np.float64)[:, None]
    p0, v = np.asarray(m.p0, np.float64), np.asarray(m.v, np.float64)
    if m.kind == "static":
        return np.broadcast_to(p0, (len(t), 2)).copy()
    if m.kind in ("linear", "bounce"):
        return p0 + v * t
    if m.kind == "accelerate":
        return p0 + v * t + 0.5 * np.asarray(m.a, np.float64) * t**2
    if m.kind == "circular":
        ang = m.omega * t[:, 0] + m.phase
        return p0 + m.radius * np.stack([np.cos(ang), np.sin(ang)], 1)
    if m.kind == "stop_and_go":
        period = m.on + m.off
        moved = (t // period) * m.on + np.minimum(t % period, m.on)
        return p0 + v * moved
    raise AssertionError(m.kind)


def fold(u: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reflect unfolded positions into ``[lo, hi]``; also return the reflection counts (int)."""
    span = np.maximum(hi - lo, 1e-9)
    x = u - lo
    k = np.floor(x / span).astype(np.int64)
    y = np.mod(x, 2 * span)
    return lo + np.where(y <= span, y, 2 * span - y), k


def positions(m: Motion, t: np.ndarray, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """Centres ``(len(t), 2)`` and per-axis reflection counts ``(len(t), 2)`` inside ``[lo, hi]``."""
    return fold(unfolded(m, t), np.asarray(lo, np.float64), np.asarray(hi, np.float64))
