"""The MaskGIT / MAR reveal schedule over target tokens (spec b.4).

``order`` is a random permutation of the N target positions; step ``s`` of ``S`` keeps
``max(1, min(remaining - 1, floor(N * cos(pi/2 * (s + 1) / S))))`` positions masked and reveals the
rest of what is still masked; the last step reveals everything left. Positions are revealed in
``order``: the first ones written are ``order[:k0]``, and so on (``run_reveal_loop``, MAR's random order).

The discrete (codebook) head [PROPOSED] can instead reveal by confidence, as MaskGIT does
(``run_confidence_loop``): each step predicts a code for every still-masked position and keeps the
``reveal_counts`` most confident ones, confidence being the code's log-probability plus Gumbel noise
annealed linearly to 0 (MaskGIT's ``choice_temperature``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from numbers import Integral, Real

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


# ---- the confidence-ordered loop of the discrete head (MaskGIT) [PROPOSED for Bernini] ---------------------


def _uniform(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """U(0, 1) drawn from ``generator`` alone (on the generator's device), then moved to ``device``."""
    where = generator.device if generator is not None else torch.device("cpu")
    return torch.rand(shape, generator=generator, device=where).to(device)


def gumbel_noise(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device | str = "cpu") -> torch.Tensor:
    """Standard Gumbel samples ``-log(-log u)``, ``u ~ U(0, 1)`` clamped away from 0 and 1."""
    u = _uniform(tuple(shape), generator, torch.device(device)).clamp(1e-20, 1 - 1e-7)
    return -torch.log(-torch.log(u))


def sample_codes(logits: torch.Tensor, temperature: float = 1.0,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One code per row of ``logits`` ``(m, K)``: ``(codes (m,), log_probs (m,))``.

    ``temperature`` 0 takes the argmax; otherwise a draw from ``softmax(logits / temperature)`` (Gumbel-max,
    so the noise comes from ``generator`` on any device). ``log_probs`` are the chosen codes' log-probabilities
    under the untempered ``softmax(logits)`` [PROPOSED]: at temperature 0 the tempered ones would all be 0
    and carry no confidence.
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or not logits.is_floating_point():
        raise InputError("logits", getattr(logits, "shape", logits), "pass float logits (m, K)")
    if not isinstance(temperature, Real) or isinstance(temperature, bool) or not math.isfinite(temperature) or temperature < 0:
        raise InputError("temperature", temperature, "use a finite number >= 0 (0 = argmax)")
    logits = logits.float()
    if temperature == 0:
        codes = logits.argmax(-1)
    else:
        codes = (logits / temperature + gumbel_noise(tuple(logits.shape), generator, logits.device)).argmax(-1)
    log_probs = torch.log_softmax(logits, -1).gather(-1, codes[:, None])[:, 0]
    return codes, log_probs


def choice_noise_scale(step: int, num_steps: int, choice_temperature: float) -> float:
    """MaskGIT's annealed Gumbel scale on confidences: ``choice_temperature * (1 - (step + 1) / num_steps)``.

    Linear in the step and exactly 0 at the last step (MaskGIT's ``ratio = (step + 1) / T``); the last
    step reveals everything left, so its noise would not matter anyway."""
    return float(choice_temperature) * (1.0 - (step + 1) / num_steps)


PredictLogits = Callable[[int, torch.Tensor], torch.Tensor]
WriteCodes = Callable[[torch.Tensor, torch.Tensor], None]
CodeCallback = Callable[[int, torch.Tensor, torch.Tensor], None]


def run_confidence_loop(num_tokens: int, steps: int, predict_logits: PredictLogits, write: WriteCodes, *,
                        generator: torch.Generator | None = None, temperature: float = 1.0,
                        choice_temperature: float = 4.5, callback: CodeCallback | None = None,
                        device: torch.device | str = "cpu", given: torch.Tensor | None = None) -> tuple[torch.Tensor, list[int]]:
    """MaskGIT's decoding loop over ``num_tokens`` positions: ``(order, counts)``.

    Step ``s``: ``logits = predict_logits(s, masked)`` ``(m, K)`` for every still-masked position (``masked``
    ascending, on ``device``); a code per position from ``sample_codes`` at ``temperature``; confidence =
    its log-probability + ``gumbel * choice_noise_scale(s, S, choice_temperature)``; the ``reveal_counts(n, S)[s]``
    most confident positions (ties: lower position first) are passed to ``write(positions, codes)``, most
    confident first, then to ``callback(s, positions, codes)``. ``order`` lists the positions in the order they
    were written. Every position is written exactly once (counted; a ``RuntimeError`` otherwise, a bug).

    ``given`` ``(num_tokens,)`` bool: positions the caller has already written (an edit's kept source codes);
    the loop reveals only the others, over the same number of steps (fewer if fewer remain), and ``order``
    lists only what it wrote.
    """
    n = _check_count("num_tokens", num_tokens)
    if given is not None and (given.dtype != torch.bool or given.shape != (n,)):
        raise InputError("given", tuple(getattr(given, "shape", ())), f"pass a bool ({n},) mask of the positions already written")
    free = n - (int(given.sum()) if given is not None else 0)
    if free == 0:
        return torch.zeros(0, dtype=torch.long, device=torch.device(device)), []
    counts = reveal_counts(free, steps)
    if not isinstance(choice_temperature, Real) or isinstance(choice_temperature, bool) \
            or not math.isfinite(choice_temperature) or choice_temperature < 0:
        raise InputError("choice_temperature", choice_temperature, "use a finite number >= 0 (MaskGIT uses 4.5)")
    device = torch.device(device)
    masked = torch.ones(n, dtype=torch.bool, device=device) if given is None else ~given.to(device)
    written = torch.zeros(n, dtype=torch.long) if given is None else given.cpu().long()
    order = []
    for step, k in enumerate(counts):
        positions = masked.nonzero()[:, 0]
        logits = predict_logits(step, positions)
        if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or logits.shape[0] != len(positions):
            raise InputError("predict_logits", getattr(logits, "shape", logits),
                             f"must return ({len(positions)}, K) logits for the masked positions")
        codes, log_probs = sample_codes(logits, temperature, generator)
        confidence = log_probs
        scale = choice_noise_scale(step, len(counts), choice_temperature)
        if scale > 0 and k < len(positions):  # the noise only changes which positions are picked
            confidence = log_probs + scale * gumbel_noise(tuple(log_probs.shape), generator, log_probs.device)
        pick = torch.sort(confidence, descending=True, stable=True).indices[:k]
        chosen, chosen_codes = positions[pick], codes[pick]
        write(chosen, chosen_codes)
        masked[chosen] = False
        written[chosen.cpu()] += 1
        order.append(chosen)
        if callback is not None:
            callback(step, chosen, chosen_codes)
    if not bool((written == 1).all()):
        raise RuntimeError(f"the confidence loop wrote positions {written.tolist()} times; each must be written once")
    return torch.cat(order), counts
