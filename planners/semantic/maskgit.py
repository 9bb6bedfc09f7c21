"""The MaskGIT / MAR reveal schedule over target tokens (spec b.4).

``order`` is a random permutation of the N target positions; step ``s`` of ``S`` keeps
``max(1, min(remaining - 1, floor(N * cos(pi/2 * (s + 1) / S))))`` positions masked and reveals the
rest of what is still masked; the last step reveals everything left. Positions are revealed in
``order``: the first ones written are ``order[:k0]``, and so on.
"""

from __future__ import annotations

import logging
import math
from numbers import Integral

import torch

from core.errors import InputError

logger = logging.getLogger(__name__)


def _check_count(name: str, value: object) -> int:
    if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
        raise InputError(name, value, "use a positive integer")
    return int(value)


def reveal_counts(num_tokens: int, steps: int) -> list[int]:
    """How many tokens each step reveals (spec b.4's cosine rule); sums to ``num_tokens``, each >= 1.

    With more steps than tokens some steps would reveal nothing: ``steps`` is cut to ``num_tokens``
    (logged as a warning). Whenever the spec's rule would leave too few tokens masked for every later
    step to reveal one, at least one per remaining step is kept masked; for ``steps <= num_tokens`` at
    Bernini's sizes this never binds, so the counts are the spec's.
    """
    n = _check_count("num_tokens", num_tokens)
    s_total = _check_count("steps", steps)
    if s_total > n:
        logger.warning("planning with %d steps over %d target tokens: using %d steps (one token each)", s_total, n, n)
        s_total = n
    counts, remaining = [], n
    for s in range(s_total):
        if s == s_total - 1:
            counts.append(remaining)
            break
        ratio = math.cos(math.pi / 2 * (s + 1) / s_total)
        keep = max(1, min(remaining - 1, math.floor(n * ratio)))
        keep = max(keep, s_total - 1 - s)  # every later step still reveals one (never binds when the rule suffices)
        counts.append(remaining - keep)
        remaining = keep
    return counts


def reveal_order(num_tokens: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu") -> torch.Tensor:
    """A random permutation of ``range(num_tokens)`` drawn from ``generator`` alone (spec b.4)."""
    n = _check_count("num_tokens", num_tokens)
    return torch.randperm(n, generator=generator, device="cpu").to(device)


def reveal_sets(order: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The positions each step reveals: consecutive slices of ``order`` sized by ``reveal_counts``."""
    if not isinstance(order, torch.Tensor) or order.ndim != 1 or order.dtype.is_floating_point:
        raise InputError("order", getattr(order, "shape", order), "pass a 1-D integer permutation")
    counts = reveal_counts(order.numel(), steps)
    return list(order.split(counts))


def run_reveal_loop(order: torch.Tensor, steps: int, predict, write, callback=None) -> list[int]:
    """Drive the reveal loop: for each step, ``tokens = predict(step, positions)`` for the positions leaving
    the mask, then ``write(positions, tokens)``; ``callback(step, positions, tokens)`` after each write.

    Every position is written exactly once (counted here; a ``RuntimeError`` if not, which would be a bug).
    Returns the number revealed per step.
    """
    sets = reveal_sets(order, steps)
    written = torch.zeros(order.numel(), dtype=torch.long)
    for step, positions in enumerate(sets):
        tokens = predict(step, positions)
        write(positions, tokens)
        written[positions.cpu()] += 1
        if callback is not None:
            callback(step, positions, tokens)
    if not bool((written == 1).all()):
        raise RuntimeError(f"the reveal loop wrote positions {written.tolist()} times; each must be written once")
    return [len(p) for p in sets]
