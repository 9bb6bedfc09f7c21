"""From probe confidences to frames: the importance map, the per-question budget, the chosen cells.

Formulas follow GridProbe's released code (``two_stage_eval.py``; spec B.3-B.5):

- the map is the outer product ``M = R Cᵀ`` of row and column peak posteriors (rank 1);
- the default budget rule (``skew``) reads the *shape* of the K² map entries, not their level:
  ``S = |skew| + 0.5·max(0, excess kurtosis)`` (population moments) and
  ``M_eff = ceil(K² / (1 + γ·S))`` clipped to ``[min_frames, max_frames or K²]``; a flat map
  (σ < 1e-10) keeps all K² frames. |skew| because both signs mean few frames suffice: a few sparse
  peaks (positive), or a crowd of equally good frames with a few bad ones (negative).
- cells are ranked by ``argsort(M.flatten())[::-1]`` and the top ``M_eff`` are re-sorted
  chronologically before the focused pass (importance order would scramble temporal positions).

**γ discrepancy (recorded as the spec asks).** The reference README says ``--selector skew
--pr_gamma 0.25`` ("paper default for skew is 0.25"), but the released code never passes
``pr_gamma`` to ``skewness_selector``, whose scale stays 3.0; ``pr_gamma`` only sharpens the
participation-ratio selector. The worked examples in the paper figure (K=12: S≈0.01 → 140 frames,
S=6.6 → 7, S=9.6 → 5) match γ = 3 exactly, so γ = 3.0 is the default here and stays a parameter.

The other selectors (``pr``, ``mean``, ``otsu``) are the reference's ablations, reproduced as
written (including their quirks, noted in each docstring).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from core.errors import InputError

FLAT_STD = 1e-10  # the reference's "flat map" threshold on the population std
TIE_BREAKS = ("stable", "spread")


def importance_map(row_conf: np.ndarray, col_conf: np.ndarray) -> np.ndarray:
    """``M[r, c] = R[r]·C[c]`` (K×K, rank 1): cell (r, c) scores pool position r·K + c."""
    R = np.asarray(row_conf, dtype=np.float64)
    C = np.asarray(col_conf, dtype=np.float64)
    if R.ndim != 1 or C.ndim != 1 or len(R) != len(C) or len(R) < 1:
        raise InputError("row_conf/col_conf", (R.shape, C.shape), "pass two 1-D arrays of the same length K")
    if not (np.isfinite(R).all() and np.isfinite(C).all()):
        raise InputError("row_conf/col_conf", "non-finite values", "confidences are probabilities in [0, 1]")
    return R[:, None] * C[None, :]


def _flat(importance: np.ndarray) -> np.ndarray:
    x = np.asarray(importance, dtype=np.float64).ravel()
    if x.size < 1 or not np.isfinite(x).all():
        raise InputError("importance_map", f"array {np.shape(importance)}", "pass a non-empty, finite importance map")
    return x


def _check_bounds(n_cells: int, min_frames: int, max_frames: int | None) -> int:
    """Validate the clip range; return its upper end (``max_frames or n_cells``, as the reference)."""
    if not isinstance(min_frames, Integral) or isinstance(min_frames, bool) or not 1 <= min_frames <= n_cells:
        raise InputError("min_frames", min_frames, f"use an integer in [1, K²={n_cells}]")
    if max_frames is not None and (not isinstance(max_frames, Integral) or isinstance(max_frames, bool)
                                   or max_frames < min_frames):
        raise InputError("max_frames", max_frames, f"use None (= K²) or an integer >= min_frames={min_frames}")
    return int(max_frames) if max_frames else n_cells


def _check_gamma(gamma: float) -> float:
    if not isinstance(gamma, Real) or isinstance(gamma, bool) or not (math.isfinite(gamma) and gamma >= 0):
        raise InputError("gamma", gamma, "use a finite number >= 0 (default 3.0)")
    return float(gamma)


# ---------------------------------------------------------------------------------- shape rule


@dataclass(frozen=True)
class ShapeStats:
    """Population moments of the map entries. ``strength`` is S; all zero for a flat map."""

    mean: float
    std: float
    skew: float
    kurtosis_excess: float
    strength: float

    @property
    def flat(self) -> bool:
        return self.std < FLAT_STD


def shape_stats(importance: np.ndarray) -> ShapeStats:
    """Skewness, excess kurtosis and shape strength ``S = |skew| + 0.5·max(0, kurt_excess)``."""
    x = _flat(importance)
    mu, sd = float(x.mean()), float(x.std())
    if sd < FLAT_STD:
        return ShapeStats(mu, sd, 0.0, 0.0, 0.0)
    z = x - mu
    skew = float((z**3).mean() / sd**3)
    kurt = float((z**4).mean() / sd**4 - 3.0)
    return ShapeStats(mu, sd, skew, kurt, abs(skew) + 0.5 * max(0.0, kurt))


def budget_from_shape_strength(strength: float, K: int, gamma: float = 3.0, min_frames: int = 2,
                               max_frames: int | None = None) -> int:
    """``clip(ceil(K² / (1 + γ·S)), min_frames, max_frames or K²)``: the closed form alone.

    >>> [budget_from_shape_strength(s, 12) for s in (0.01, 6.6, 9.6)]  # the paper figure's examples
    [140, 7, 5]
    """
    if not isinstance(K, Integral) or K < 1:
        raise InputError("K", K, "the grid side is a positive integer")
    if not isinstance(strength, Real) or not (math.isfinite(strength) and strength >= 0):
        raise InputError("strength", strength, "the shape strength S is a finite number >= 0")
    return _budget(float(strength), K * K, _check_gamma(gamma), min_frames, max_frames)


def _budget(strength: float, n_cells: int, gamma: float, min_frames: int, max_frames: int | None) -> int:
    hi = _check_bounds(n_cells, min_frames, max_frames)
    m = int(np.ceil(n_cells / (1.0 + gamma * strength)))
    return int(np.clip(m, min_frames, hi))


def shape_adaptive_budget(importance_map: np.ndarray, gamma: float = 3.0, min_frames: int = 2,
                          max_frames: int | None = None) -> int:
    """GridProbe's Shape-Adaptive Selection: how many frames the focused pass gets (spec B.4).

    Few frames for peaked (large |skew| or kurtosis) maps, nearly all K² for flat ones; a map with
    σ < 1e-10 keeps ``min(K², max_frames or K²)`` (the reference skips ``min_frames`` there).
    ``gamma`` [DEFAULT 3.0] is the scale γ; see the module docstring for the README's 0.25.
    """
    gamma = _check_gamma(gamma)
    x = _flat(importance_map)
    hi = _check_bounds(x.size, min_frames, max_frames)
    stats = shape_stats(x)
    if stats.flat:
        return min(x.size, hi)
    return _budget(stats.strength, x.size, gamma, min_frames, max_frames)


# ---------------------------------------------------------------------------------- ablations


def participation_ratio_budget(importance_map: np.ndarray, gamma: float = 3.0, min_frames: int = 2,
                               max_frames: int | None = None, subtract_min: bool = True) -> int:
    """The reference's ``pr`` selector: the participation ratio of ``(x - min)^γ``.

    ``PR = 1 / Σ p²`` with ``p ∝ max(x - min(x), 0)^γ``, capped by the number of cells holding 90%
    of that sharpened mass; the tighter of the two is clipped to ``[min_frames, max_frames or K²]``.
    Quirk kept from the reference: a flat map has no mass after subtracting the minimum and gets
    ``min_frames`` (the opposite of the ``skew`` rule).
    """
    gamma = _check_gamma(gamma)
    x = _flat(importance_map)
    hi = _check_bounds(x.size, min_frames, max_frames)
    if subtract_min:
        x = x - x.min()
    x = np.clip(x, 0, None) ** gamma
    total = x.sum()
    if total <= 0:
        return int(min_frames)
    p = x / total
    pr = 1.0 / float((p * p).sum())
    mass_count = int(np.searchsorted(np.cumsum(np.sort(p)[::-1]), 0.90) + 1)
    return int(np.clip(min(int(np.ceil(pr)), mass_count), min_frames, hi))


def mean_threshold_budget(importance_map: np.ndarray, gamma: float = 3.0, min_frames: int = 2,
                          max_frames: int | None = None) -> int:
    """The reference's ``mean`` selector: the number of cells strictly above the mean (``gamma`` unused)."""
    x = _flat(importance_map)
    hi = _check_bounds(x.size, min_frames, max_frames)
    return int(np.clip(int((x > x.mean()).sum()), min_frames, hi))


def otsu_budget(importance_map: np.ndarray, gamma: float = 3.0, min_frames: int = 2,
                max_frames: int | None = None, bins: int = 64) -> int:
    """The reference's ``otsu`` selector: cells above Otsu's threshold on a ``bins``-bin histogram.

    The threshold is the left edge of the first bin of the upper class that maximises the
    between-class variance (first maximum wins); a flat map keeps ``min(K², max_frames or K²)``.
    ``gamma`` is unused.
    """
    x = _flat(importance_map)
    hi = _check_bounds(x.size, min_frames, max_frames)
    if x.std() < FLAT_STD:
        return min(x.size, hi)
    hist, edges = np.histogram(x, bins=bins)
    total = hist.sum()
    centres = 0.5 * (edges[:-1] + edges[1:])
    cum_n, cum_sum = np.cumsum(hist), np.cumsum(hist * centres)
    best_var, threshold = -1.0, centres[0]
    for i in range(1, bins):
        n_low = cum_n[i - 1]
        w_low = n_low / total
        if n_low == 0 or n_low == total:
            continue
        mu_low = cum_sum[i - 1] / n_low
        mu_high = (cum_sum[-1] - cum_sum[i - 1]) / (total - n_low)
        var = w_low * (1.0 - w_low) * (mu_low - mu_high) ** 2
        if var > best_var:
            best_var, threshold = var, edges[i]
    return int(np.clip(int((x > threshold).sum()), min_frames, hi))


Selector = Callable[..., int]
SELECTORS: dict[str, Selector] = {
    "skew": shape_adaptive_budget,
    "pr": participation_ratio_budget,
    "mean": mean_threshold_budget,
    "otsu": otsu_budget,
}


def select_budget(selector: str, importance: np.ndarray, gamma: float = 3.0, min_frames: int = 2,
                  max_frames: int | None = None) -> int:
    """Dispatch to a budget rule by name (``skew`` is the paper's; the rest are ablations)."""
    if selector not in SELECTORS:
        raise InputError("budget_rule", selector, f"choose one of {sorted(SELECTORS)} ('skew' is the paper's rule)")
    return SELECTORS[selector](importance, gamma=gamma, min_frames=min_frames, max_frames=max_frames)


# ---------------------------------------------------------------------------------- choosing cells


def rank_cells(importance: np.ndarray) -> np.ndarray:
    """Pool positions from most to least important: ``argsort(x, kind="stable")[::-1]``.

    Deterministic, and like the reference's default sort it puts exactly tied cells in descending
    position order (a fully tied map ranks the *last* frames first).
    """
    return np.argsort(_flat(importance), kind="stable")[::-1]


def select_positions(importance: np.ndarray, m: int, tie_break: str = "stable") -> list[int]:
    """The top-``m`` pool positions, returned in chronological (ascending) order.

    ``tie_break="stable"`` [DEFAULT] reproduces the reference ranking. ``"spread"`` is our
    extension: cells tied at the cut-off value are picked evenly across time (the centre of each
    of equal segments of the tied run) instead of all from the end of the video.
    """
    x = _flat(importance)
    if not isinstance(m, Integral) or not 1 <= m <= x.size:
        raise InputError("m", m, f"choose between 1 and {x.size} frames")
    if tie_break not in TIE_BREAKS:
        raise InputError("tie_break", tie_break, f"choose one of {TIE_BREAKS}")
    order = rank_cells(x)
    if tie_break == "stable":
        return sorted(int(p) for p in order[:m])
    cut = x[order[m - 1]]
    above = [int(p) for p in np.nonzero(x > cut)[0]]
    tied = np.nonzero(x == cut)[0]  # ascending positions
    need = m - len(above)
    picks = tied[((np.arange(need) + 0.5) * len(tied) / need).astype(np.int64)]
    return sorted(above + [int(p) for p in picks])
