"""Rectified flow / flow matching for the renderers, spec bernini.md b.7 (and the samplers of b.8).

Convention (Wan's and diffusers' ``FlowMatchEulerDiscreteScheduler.scale_noise``): sigma = 0 is data,
sigma = 1 is noise, ``x_t = (1 - sigma) x0 + sigma * noise``, the model predicts the velocity
``v = noise - x0`` and the timestep fed to the model is ``1000 * sigma``. Sampling integrates
``dx/dsigma = v`` from sigma = 1 down to 0 with a diffusers scheduler (UniPC or Euler, flow prediction).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Literal

import torch
from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler
from diffusers.utils.torch_utils import randn_tensor

from core.errors import InputError

NUM_TRAIN_TIMESTEPS = 1000
EXPERT_BOUNDARY = 0.875  # Wan2.2 A14B: the high-noise expert serves t >= 875 (spec b.5)

Density = Literal["mode", "logit_normal", "uniform"]
VelocityFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
StepCallback = Callable[[int, torch.Tensor, torch.Tensor], None]


def _per_sample(sigma: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
    # A scalar or one sigma per sample, shaped (B, 1, ..., 1) to broadcast over the sample's dims.
    s = torch.as_tensor(sigma, dtype=like.dtype, device=like.device)
    if s.ndim == 0:
        return s
    if s.ndim != 1 or s.shape[0] != like.shape[0]:
        raise InputError("sigma", tuple(s.shape), f"use a scalar or one value per sample, shape ({like.shape[0]},)")
    return s.reshape(-1, *([1] * (like.ndim - 1)))


def add_noise(x0: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor | float) -> torch.Tensor:
    """``x_t = (1 - sigma) x0 + sigma * noise`` (spec b.7); ``sigma`` a scalar or shape ``(B,)``."""
    if x0.shape != noise.shape:
        raise InputError("noise", tuple(noise.shape), f"must have the shape of x0, {tuple(x0.shape)}")
    s = _per_sample(sigma, x0)
    return (1 - s) * x0 + s * noise


def velocity_target(x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The flow-matching target ``v* = noise - x0`` in at least float32, as the official trainer computes it (b.7)."""
    if x0.shape != noise.shape:
        raise InputError("noise", tuple(noise.shape), f"must have the shape of x0, {tuple(x0.shape)}")
    dtype = torch.promote_types(torch.promote_types(x0.dtype, noise.dtype), torch.float32)
    return noise.to(dtype) - x0.to(dtype)


def flow_matching_loss(pred: torch.Tensor, x0: torch.Tensor, noise: torch.Tensor,
                       target_mask: torch.Tensor | None = None) -> torch.Tensor:
    """MSE between ``pred`` and ``noise - x0`` on target elements only (spec b.7).

    ``target_mask`` (bool) marks what is scored: source tokens carry ``False`` and never count. Its dims
    align with the leading dims of ``pred`` (``(B, L)`` for tokens ``(B, L, C)``; ``(B, 1, T, H, W)`` for
    latents) and broadcast over the rest. Each sample's loss is the mean over its target elements, and
    samples are averaged, so a long source does not dilute a sample's weight.
    (The official trainer's extra normalisation by target segments across data-parallel ranks is the
    training loop's business.)
    """
    target = velocity_target(x0, noise)
    if pred.shape != target.shape:
        raise InputError("pred", tuple(pred.shape), f"must have the shape of x0, {tuple(x0.shape)}")
    dtype = torch.promote_types(pred.dtype, target.dtype)
    err = (pred.to(dtype) - target.to(dtype)) ** 2
    if target_mask is None:
        return err.flatten(1).mean(1).mean()
    m = target_mask
    if m.dtype != torch.bool or m.ndim > err.ndim or m.shape[0] != err.shape[0]:
        raise InputError("target_mask", (tuple(m.shape), m.dtype),
                         f"use a bool tensor whose dims lead pred's {tuple(err.shape)}, e.g. (B, L)")
    m = m.reshape(*m.shape, *([1] * (err.ndim - m.ndim)))
    try:
        m = m.expand_as(err)
    except RuntimeError:
        raise InputError("target_mask", tuple(target_mask.shape),
                         f"does not broadcast over pred's {tuple(err.shape)}") from None
    counts = m.flatten(1).sum(1)
    if bool((counts == 0).any()):
        raise InputError("target_mask", f"{int((counts == 0).sum())} sample(s) with no target",
                         "every sample needs at least one target token")
    return ((err * m).flatten(1).sum(1) / counts).mean()


def shift_sigmas(sigmas: torch.Tensor, shift: float) -> torch.Tensor:
    """Wan's timestep shift ``s * sigma / (1 + (s - 1) * sigma)``; ``s > 1`` spends more steps at high noise."""
    _check_shift(shift)
    return shift * sigmas / (1 + (shift - 1) * sigmas)


def _check_shift(shift: float) -> None:
    if not isinstance(shift, numbers.Real) or isinstance(shift, bool) or not math.isfinite(shift) or shift <= 0:
        raise InputError("shift", shift, "use a positive number (Wan and Bernini use 5.0)")


@lru_cache(maxsize=16)
def _training_sigmas(shift: float, num_train_timesteps: int) -> torch.Tensor:
    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=num_train_timesteps, shift=shift).sigmas.clone()


def training_sigmas(shift: float = 5.0, num_train_timesteps: int = NUM_TRAIN_TIMESTEPS) -> torch.Tensor:
    """The shifted training schedule, descending from 1: diffusers' ``FlowMatchEulerDiscreteScheduler`` table.

    [DEFAULT] sigma runs 1, 1 - 1/N, ..., 1/N before the shift (the grid Wan's trainer uses); the official
    renderer trainer's exact grid was not retrieved.
    """
    _check_shift(shift)
    if not isinstance(num_train_timesteps, int) or isinstance(num_train_timesteps, bool) or num_train_timesteps < 1:
        raise InputError("num_train_timesteps", num_train_timesteps, "use a positive integer (1000)")
    return _training_sigmas(float(shift), num_train_timesteps).clone()


def expert_sigma_range(expert: Literal["high", "low", "all"], boundary: float = EXPERT_BOUNDARY) -> tuple[float, float]:
    """The sigma range an expert trains on: high ``[boundary, 1]``, low ``[0, boundary)``, all ``[0, 1]`` (b.7)."""
    if expert == "all":
        return 0.0, 1.0
    if not isinstance(boundary, numbers.Real) or not 0 < boundary < 1:
        raise InputError("boundary", boundary, "use a number in (0, 1); Wan2.2 A14B uses 0.875")
    if expert == "high":
        return float(boundary), 1.0
    if expert == "low":
        return 0.0, float(boundary)
    raise InputError("expert", expert, "use 'high', 'low' or 'all'")


def _sample_u(n: int, density: Density, generator: torch.Generator | None, logit_mean: float, logit_std: float,
              mode_scale: float) -> torch.Tensor:
    if density == "logit_normal":
        return torch.sigmoid(logit_mean + logit_std * torch.randn(n, generator=generator, dtype=torch.float64))
    r = torch.rand(n, generator=generator, dtype=torch.float64)
    if density == "uniform":
        return r
    # SD3's "mode" density; symmetric about 0.5 and inside [0, 1] for 0 <= mode_scale <= 2 / (pi - 2).
    return 1 - r - mode_scale * (torch.cos(math.pi * r / 2) ** 2 - 1 + r)


def sample_sigmas(batch_size: int, *, generator: torch.Generator | None = None, density: Density = "mode",
                  shift: float = 5.0, sigma_range: tuple[float, float] = (0.0, 1.0), logit_mean: float = 0.5,
                  logit_std: float = 1.0, mode_scale: float = 1.29, num_train_timesteps: int = NUM_TRAIN_TIMESTEPS,
                  max_rounds: int = 1000) -> torch.Tensor:
    """Training sigmas ``(batch_size,)``, float32 on the CPU (spec b.7 ``NoiseScheduler``).

    ``u`` is drawn from ``density`` ("mode" with scale 1.29 for video tasks, "logit_normal" with mean 0.5 and
    std 1.0 for image tasks, or "uniform"), then sigma = ``training_sigmas(shift)[floor(N * u)]``: the
    descending table, as diffusers' SD3 scripts index it. Draws whose sigma falls outside ``sigma_range``
    (an expert's range, ``expert_sigma_range``) are rejected and redrawn. The timestep is ``N * sigma``.
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise InputError("batch_size", batch_size, "use a positive integer")
    if density not in ("mode", "logit_normal", "uniform"):
        raise InputError("density", density, "use 'mode' (video), 'logit_normal' (image) or 'uniform'")
    ok = isinstance(sigma_range, (tuple, list)) and len(sigma_range) == 2
    lo, hi = sigma_range if ok else (1.0, 0.0)
    if not 0 <= lo < hi <= 1:
        raise InputError("sigma_range", sigma_range, "use (lo, hi) with 0 <= lo < hi <= 1")
    table = training_sigmas(shift, num_train_timesteps)
    in_range = (table >= lo) & ((table < hi) if hi < 1 else (table <= hi))
    if not bool(in_range.any()):
        raise InputError("sigma_range", sigma_range, f"no sigma of the shift-{shift} schedule lies in it; widen it")
    out = torch.empty(batch_size, dtype=table.dtype)
    todo = torch.arange(batch_size)
    for _ in range(max_rounds):
        u = _sample_u(len(todo), density, generator, logit_mean, logit_std, mode_scale)
        idx = (u * num_train_timesteps).long().clamp(0, num_train_timesteps - 1)
        ok = in_range[idx]
        out[todo[ok]] = table[idx[ok]]
        todo = todo[~ok]
        if len(todo) == 0:
            return out
    raise InputError("sigma_range", sigma_range,
                     f"the {density} density almost never lands in it (after {max_rounds} rounds); widen it")


def sigmas_to_timesteps(sigmas: torch.Tensor, num_train_timesteps: int = NUM_TRAIN_TIMESTEPS) -> torch.Tensor:
    """The timestep the DiT embeds: ``num_train_timesteps * sigma`` (Wan's convention)."""
    return sigmas * num_train_timesteps


def euler_step(x: torch.Tensor, velocity: torch.Tensor, sigma: torch.Tensor | float,
               sigma_next: torch.Tensor | float) -> torch.Tensor:
    """One Euler step of the flow ODE: ``x + (sigma_next - sigma) * v`` (spec b.4/b.8)."""
    return x + (_per_sample(sigma_next, x) - _per_sample(sigma, x)) * velocity


def make_scheduler(kind: Literal["unipc", "euler"] = "unipc", shift: float = 5.0,
                   num_train_timesteps: int = NUM_TRAIN_TIMESTEPS) -> Any:
    """A diffusers flow-prediction scheduler configured as Wan / Bernini sample (spec b.8).

    "unipc": ``UniPCMultistepScheduler`` (bh2, order 2, flow sigmas, ``flow_shift``), the official sampler;
    "euler": ``FlowMatchEulerDiscreteScheduler`` with the same shift.
    """
    _check_shift(shift)
    if kind == "unipc":
        return UniPCMultistepScheduler(num_train_timesteps=num_train_timesteps, prediction_type="flow_prediction",
                                       use_flow_sigmas=True, flow_shift=float(shift), solver_order=2,
                                       solver_type="bh2")
    if kind == "euler":
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=num_train_timesteps, shift=float(shift))
    raise InputError("kind", kind, "use 'unipc' or 'euler'")


def _check_flow_scheduler(scheduler: Any) -> None:
    cfg = getattr(scheduler, "config", None)
    if cfg is None or not hasattr(scheduler, "set_timesteps") or not hasattr(scheduler, "step"):
        raise InputError("scheduler", type(scheduler).__name__, "pass a diffusers scheduler (see make_scheduler)")
    if getattr(cfg, "prediction_type", "flow_prediction") != "flow_prediction" or not getattr(cfg, "use_flow_sigmas", True):
        raise InputError("scheduler", type(scheduler).__name__,
                         "the renderer predicts flow velocity: use prediction_type='flow_prediction' and "
                         "use_flow_sigmas=True (see make_scheduler)")


def initial_noise(shape: Sequence[int], generator: torch.Generator | None = None,
                  device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The starting latents, drawn only from the caller's generator (diffusers' ``randn_tensor``)."""
    return randn_tensor(tuple(shape), generator=generator, device=torch.device(device or "cpu"), dtype=dtype)


def sample_flow(velocity_fn: VelocityFn, noise: torch.Tensor, scheduler: Any, num_inference_steps: int, *,
                generator: torch.Generator | None = None, callback: StepCallback | None = None) -> torch.Tensor:
    """Integrate from ``noise`` (sigma = 1) to a clean sample with a diffusers flow scheduler (spec b.8).

    ``velocity_fn(latents, timestep, sigma)`` returns the (guided) velocity: ``timestep`` is the scheduler's
    0-d timestep, what the DiT embeds and what picks the expert; ``sigma`` the noise level the scheduler
    integrates from (the timestep is rounded for UniPC, so it is not always ``sigma * 1000``).
    ``callback(i, t, latents)`` runs after each step; latents it returns replace the loop's. The scheduler is reset with ``set_timesteps`` first, so one instance can be reused;
    ``generator`` reaches schedulers whose ``step`` takes one (stochastic Euler).
    """
    _check_flow_scheduler(scheduler)
    if not isinstance(num_inference_steps, int) or isinstance(num_inference_steps, bool) or num_inference_steps < 1:
        raise InputError("num_inference_steps", num_inference_steps, "use a positive integer (Bernini uses 40)")
    scheduler.set_timesteps(num_inference_steps, device=noise.device)
    extra = {"generator": generator} if "generator" in inspect.signature(scheduler.step).parameters else {}
    x = noise
    for i, t in enumerate(scheduler.timesteps):
        # Both schedulers keep sigmas[i] aligned with timesteps[i], with one extra final sigma.
        v = velocity_fn(x, t, scheduler.sigmas[i])
        x = scheduler.step(v, t, x, return_dict=False, **extra)[0]
        if callback is not None:
            taken = callback(i, t, x)
            if taken is not None:  # diffusers' callback_on_step_end_tensor_inputs: the callback's latents go on
                if not isinstance(taken, torch.Tensor) or taken.shape != x.shape:
                    raise InputError("latents", getattr(taken, "shape", type(taken).__name__),
                                     f"a step callback must hand back latents of shape {tuple(x.shape)}")
                x = taken.to(x)
    return x
