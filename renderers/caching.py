"""Step caching for the DiT renderers through diffusers' cache hooks (issue 50), not a hand-written cache.

    frames = renderer.generate(..., cache=CacheSettings("first_block", threshold=0.1))
    frames = renderer.generate(..., cache="taylorseer")                 # the mode's defaults

Modes (``CACHE_MODES``), each one of diffusers' hooks (``diffusers.hooks``, 0.42.1) on the DiT's ``blocks``:

- ``first_block``: ``FirstBlockCacheConfig(threshold)``. Every step runs the first block; when the mean
  absolute change of its residual since the last full step, relative to that residual's mean magnitude,
  is at most ``threshold``, the other blocks are skipped and their last residual is added back.
- ``mag``: ``MagCacheConfig`` (MagCache, Ma et al. 2025). Whole steps are skipped (the last residual of
  all blocks added to the first block's input) while the accumulated error ``sum |1 - prod(ratio)|`` stays
  within ``threshold``, at most ``max_skip`` steps in a row and never in the first ``retention`` share of
  steps. The ratios (per token, the norm of the blocks' residual at a step over the previous step's, averaged) belong to the
  checkpoint: diffusers' calibration mode measures them (``renderer.calibrate_mag_cache``), one list per
  expert, averaged over the guidance branches because diffusers' hook takes one list for every context.
- ``taylorseer``: ``TaylorSeerCacheConfig`` in its lite form (diffusers' ``use_lite_mode``, with the module
  names spelled out so it fits both renderers): the output head (``proj_out``; the builtin's ``head``) is
  forecast by a Taylor series in the step index from its last full steps, and the blocks are skipped on
  forecast steps; a full step every ``interval`` steps after ``warmup`` full ones.

Guidance branches: each branch runs in its own ``cache_context(branch name)`` (diffusers keys a hook's state
by that name), so no branch ever reads another's residuals, and so a cached run does not batch branches
into one forward (a batched forward would be one context for several branches). Two Wan experts: each has
its own hooks and states, so at the switch the low-noise expert starts from nothing and never reuses the
high-noise expert's residuals; MagCache gets each expert's own step count and calibrated ratios,
TaylorSeer counts each expert's own steps (a warm-up at the start of each). The hooks are put on for one
``generate`` call and taken off after it, so nothing carries over between calls.

``EvaluationCounter`` counts the block evaluations that really run (what the benchmark reports).
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from core.errors import InputError

CACHE_MODES = ("none", "first_block", "mag", "taylorseer")
# Defaults measured by ``benchmarks.caching`` (docs/BENCHMARKS.md, "Renderer step caching").
DEFAULT_THRESHOLD = {"first_block": 0.1, "mag": 0.12}
DEFAULT_INTERVAL = 3
DEFAULT_WARMUP = {"mag": 0.2, "taylorseer": 3}  # MagCache: share of steps; TaylorSeer: full steps per expert
BLOCK_PATTERN = r"^blocks\.\d+$"


def _real(name: str, value: Any, lo: float, hi: float, hint: str) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value) or not lo <= value <= hi:
        raise InputError(name, value, hint)
    return float(value)


def _int(name: str, value: Any, lo: int, hint: str) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < lo:
        raise InputError(name, value, hint)
    return int(value)


@dataclass(frozen=True)
class CacheSettings:
    """Which cache and its knobs; None takes the mode's default (``DEFAULT_*``, measured).

    ``threshold``: first_block's relative residual change, mag's error budget (0..1). ``interval``:
    taylorseer's full step every ``interval`` steps. ``warmup``: mag's retention share (0..1) / taylorseer's
    full steps at the start of each expert. ``max_skip``: mag's longest run of skipped steps. ``order``:
    taylorseer's Taylor order. ``calibrate``: mag only, measure the ratios instead of caching
    (``calibrate_mag_cache``).
    """

    mode: str = "none"
    threshold: float | None = None
    interval: int | None = None
    warmup: float | None = None
    max_skip: int = 3
    order: int = 1
    calibrate: bool = False

    def __post_init__(self) -> None:
        if self.mode not in CACHE_MODES:
            raise InputError("cache", self.mode, f"choose one of {list(CACHE_MODES)}")
        if self.threshold is not None:
            _real("cache_threshold", self.threshold, 0.0, 1.0, "use a threshold in [0, 1] (None: the mode's default)")
        if self.interval is not None:
            _int("cache_interval", self.interval, 1, "use a positive whole number of steps (None: the mode's default)")
        if self.warmup is not None:
            hi = 1.0 if self.mode == "mag" else 1000.0
            w = _real("cache_warmup", self.warmup, 0.0, hi, "mag: a share of steps in [0, 1]; taylorseer: whole steps >= 0")
            if self.mode == "taylorseer" and w != int(w):
                raise InputError("cache_warmup", self.warmup, "taylorseer counts whole steps (e.g. 3)")
        _int("max_skip", self.max_skip, 1, "use a positive whole number of steps (3)")
        _int("order", self.order, 1, "use a Taylor order >= 1 (1)")
        if self.calibrate and self.mode != "mag":
            raise InputError("calibrate", self.calibrate, "only mag is calibrated; use mode='mag'")

    @property
    def active(self) -> bool:
        return self.mode != "none"


def as_settings(cache: Any, name: str = "cache") -> CacheSettings | None:
    """``cache`` as ``CacheSettings``: None / "none" -> None (no caching), a mode name -> its defaults."""
    if cache is None:
        return None
    if isinstance(cache, str):
        cache = CacheSettings(cache) if cache in CACHE_MODES else _bad(name, cache)
    if not isinstance(cache, CacheSettings):
        _bad(name, cache)
    return cache if cache.active else None


def _bad(name: str, value: Any) -> Any:
    raise InputError(name, value, f"use one of {list(CACHE_MODES)} or a renderers.caching.CacheSettings")


def hook_config(settings: CacheSettings, num_steps: int, *, head: str = "proj_out",
                mag_ratios: Sequence[float] | None = None) -> Any:
    """The diffusers config of ``settings`` for a model that runs ``num_steps`` steps of a call."""
    from diffusers.hooks import FirstBlockCacheConfig, MagCacheConfig, TaylorSeerCacheConfig

    s = settings
    if s.mode == "first_block":
        return FirstBlockCacheConfig(threshold=_pick(s.threshold, DEFAULT_THRESHOLD["first_block"]))
    if s.mode == "mag":
        retention = _pick(s.warmup, DEFAULT_WARMUP["mag"])
        if s.calibrate:  # one step more than the run: the hook's end-of-run reset would drop the ratios
            return MagCacheConfig(calibrate=True, num_inference_steps=num_steps + 1, retention_ratio=retention)
        return MagCacheConfig(threshold=_pick(s.threshold, DEFAULT_THRESHOLD["mag"]), max_skip_steps=s.max_skip,
                              retention_ratio=retention, num_inference_steps=num_steps,
                              mag_ratios=torch.tensor([float(r) for r in mag_ratios]))
    if s.mode == "taylorseer":
        return TaylorSeerCacheConfig(cache_interval=_pick(s.interval, DEFAULT_INTERVAL),
                                     disable_cache_before_step=int(_pick(s.warmup, DEFAULT_WARMUP["taylorseer"])),
                                     max_order=s.order, taylor_factors_dtype=torch.float32,
                                     cache_identifiers=[f"^{head}$"], skip_predict_identifiers=[BLOCK_PATTERN])
    raise InputError("cache", s.mode, f"choose one of {list(CACHE_MODES[1:])} to cache")


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


def check_mag_ratios(ratios: Any, experts: Sequence[str]) -> dict[str, list[float]]:
    """``{expert: [ratio per step]}`` for every expert in ``experts``, else an ``InputError`` saying how to get them."""
    if ratios is None:
        raise InputError("cache", "mag", "MagCache needs this checkpoint's magnitude ratios: run "
                                         "renderer.calibrate_mag_cache(...) once (then save_pretrained keeps them), "
                                         "or choose first_block / taylorseer")
    ok = isinstance(ratios, Mapping) and all(
        isinstance(ratios.get(e), Sequence) and len(ratios[e]) > 0
        and all(isinstance(r, numbers.Real) and math.isfinite(r) and r > 0 for r in ratios[e]) for e in experts)
    if not ok:
        raise InputError("mag_ratios", ratios, f"pass {{expert: [positive ratio per step]}} for {list(experts)} "
                                               "(calibrate_mag_cache writes them)")
    return {e: [float(r) for r in ratios[e]] for e in experts}


class CacheRun:
    """The hooks of one call on each model (``name -> module``); ``calibration()`` after a calibrating run."""

    def __init__(self, modules: Mapping[str, torch.nn.Module], settings: CacheSettings):
        self.modules, self.settings = dict(modules), settings

    def calibration(self) -> dict[str, list[float]]:
        """Each model's MagCache ratios per step, averaged over the contexts (guidance branches) it ran in."""
        from diffusers.hooks.mag_cache import _MAG_CACHE_BLOCK_HOOK

        out = {}
        for name, module in self.modules.items():
            hook = module.blocks[-1]._diffusers_hook.get_hook(_MAG_CACHE_BLOCK_HOOK)
            lists = [s.calibration_ratios for s in hook.state_manager._state_cache.values() if s.calibration_ratios]
            if lists:
                n = min(len(r) for r in lists)
                out[name] = [float(sum(r[i] for r in lists) / len(lists)) for i in range(n)]
        return out


@contextlib.contextmanager
def enabled(models: Mapping[str, tuple[torch.nn.Module, int]], settings: CacheSettings | None, *, head: str = "proj_out",
            mag_ratios: Mapping[str, Sequence[float]] | None = None) -> Iterator[CacheRun | None]:
    """Put ``settings``' hooks on each model (``name -> (module, steps it runs this call)``) for the block, off after.

    Models with no step this call get no hooks. None settings: nothing happens (yields None).
    """
    if settings is None:
        yield None
        return
    used = {name: (m, n) for name, (m, n) in models.items() if n > 0}
    if settings.mode == "mag" and not settings.calibrate:
        mag_ratios = check_mag_ratios(mag_ratios, list(used))
    on = {}
    try:
        for name, (module, steps) in used.items():
            module.enable_cache(hook_config(settings, steps, head=head, mag_ratios=(mag_ratios or {}).get(name)))
            on[name] = module
        yield CacheRun(on, settings)
    finally:
        for module in on.values():
            module.disable_cache()


def branch_context(module: torch.nn.Module, name: str) -> contextlib.AbstractContextManager:
    """``module.cache_context(name)`` while a cache is on it, else nothing (the uncached path stays as it was)."""
    if getattr(module, "is_cache_enabled", False):
        return module.cache_context(name)
    return contextlib.nullcontext()


class EvaluationCounter:
    """Counts the block evaluations that really run under ``modules`` (each with a ``blocks`` list).

    A pre-hook sits on a part every block runs when it computes (its feed-forward: ``ffn`` / ``mlp``), which
    a cached step never reaches; each row of a batch counts (batched branches count as separate forwards).
    ``blocks`` is the total; ``evaluations`` the same in whole forwards (blocks / depth, summed over the
    modules), the cost measure a cache must cut; ``full`` the forwards whose last block ran.
    """

    def __init__(self, *modules: torch.nn.Module):
        self.modules = [m for m in modules if m is not None]
        self.per_module = [0] * len(self.modules)
        self.full = 0
        self._handles: list[Any] = []

    @property
    def blocks(self) -> int:
        return sum(self.per_module)

    @property
    def evaluations(self) -> float:
        return sum(n / len(m.blocks) for n, m in zip(self.per_module, self.modules))

    def __enter__(self) -> EvaluationCounter:
        for k, m in enumerate(self.modules):
            depth = len(m.blocks)
            for i, block in enumerate(m.blocks):
                probe = next((c for n, c in block.named_children() if n in ("ffn", "mlp")), None)
                if probe is None:
                    raise InputError("modules", type(block).__name__, "a block needs an ffn / mlp child to count")
                self._handles.append(probe.register_forward_pre_hook(self._hook(k, i == depth - 1)))
        return self

    def _hook(self, k: int, last: bool):
        def count(_: Any, args: tuple) -> None:
            rows = int(args[0].shape[0]) if args and isinstance(args[0], torch.Tensor) else 1  # batched branches count apart
            self.per_module[k] += rows
            self.full += rows * int(last)
        return count

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def from_settings(mode: str, threshold: float | None = None, interval: int | None = None) -> CacheSettings | None:
    """A pipeline's ``cache`` / ``cache_threshold`` / ``cache_interval`` settings as ``CacheSettings`` (None: off)."""
    return as_settings(CacheSettings(mode, threshold=threshold, interval=interval) if mode != "none" else None)
