"""The per-token flow-matching head ("ViT embedding decoder", ``SimpleMLPAdaLN``) and its schedule, spec b.3-b.4.

The head predicts the flow velocity of one target token from its noisy value, the timestep and the
backbone's condition ``z_i = for_vit(h_i)``::

    x = input_proj(y_t)                      y = time_embed(t) + cond_proj(z)
    ResBlock:  (shift, scale, gate) = Linear(SiLU(y));  x += gate * MLP(LN(x) * (1 + scale) + shift)
    FinalLayer: LN (no affine), modulated by (shift, scale) = Linear(SiLU(y)), then Linear -> velocity

The final linear is zero-initialised, so a fresh head predicts v = 0 (spec d.16). Noising, targets, the
loss and training sigmas come from ``renderers.flow`` (same rectified-flow convention as the renderer).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from core.errors import InputError
from renderers import flow

# The head's FlowMatchScheduler (spec b.3, [PORT]): shift 2, sigma in [0.003 / 1.002, 1], t = 1000 sigma'.
HEAD_SHIFT = 2.0
HEAD_SIGMA_MIN = 0.003 / 1.002
HEAD_SIGMA_MAX = 1.0
FREQ_DIM = 256


def timestep_embedding(t: torch.Tensor, dim: int = FREQ_DIM, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal features ``(n, dim)`` of timesteps ``t`` (n,): ``[cos(t f_j), sin(t f_j)]``,
    ``f_j = max_period^(-j / (dim/2))`` [PROPOSED: the cos-then-sin order of the DiT / MAR code]."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class TimestepEmbedder(nn.Module):
    """sinusoidal(256) -> Linear -> SiLU -> Linear (spec b.3)."""

    def __init__(self, width: int, freq_dim: int = FREQ_DIM):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, width), nn.SiLU(), nn.Linear(width, width))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        emb = timestep_embedding(t, self.freq_dim).to(self.mlp[0].weight.dtype)
        return self.mlp(emb)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class AdaLNResBlock(nn.Module):
    """``x + gate * MLP(modulate(LN(x), shift, scale))`` with (shift, scale, gate) from ``Linear(SiLU(y))``."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(width, 3 * width))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.ada(y).chunk(3, dim=-1)
        return x + gate * self.mlp(modulate(self.norm(x), shift, scale))


class FinalLayer(nn.Module):
    """LN without affine, AdaLN (shift, scale), Linear to the token width; zero-initialised (spec b.3)."""

    def __init__(self, width: int, out_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=1e-6, elementwise_affine=False)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width))
        self.linear = nn.Linear(width, out_dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        shift, scale = self.ada(y).chunk(2, dim=-1)
        return self.linear(modulate(self.norm(x), shift, scale))


class SimpleMLPAdaLN(nn.Module):
    """The flow head: ``forward(y_t (n, D), t (n,), z (n, C)) -> v (n, D)`` (spec b.3, "DiffLoss_FM").

    The release uses width 4096 and 16 blocks for 3584-d tokens; both are parameters here. Besides the
    zero final linear, the AdaLN modulations start at zero [PROPOSED, as in MAR], so every block starts
    as the identity.
    """

    def __init__(self, token_dim: int, cond_dim: int, width: int, depth: int):
        super().__init__()
        self.input_proj = nn.Linear(token_dim, width)
        self.time_embed = TimestepEmbedder(width)
        self.cond_proj = nn.Linear(cond_dim, width)
        self.blocks = nn.ModuleList(AdaLNResBlock(width) for _ in range(depth))
        self.final = FinalLayer(width, token_dim)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.time_embed.mlp[0].weight, std=0.02)
        nn.init.normal_(self.time_embed.mlp[2].weight, std=0.02)
        for block in self.blocks:
            nn.init.zeros_(block.ada[-1].weight)
            nn.init.zeros_(block.ada[-1].bias)
        nn.init.zeros_(self.final.ada[-1].weight)
        nn.init.zeros_(self.final.ada[-1].bias)
        nn.init.zeros_(self.final.linear.weight)
        nn.init.zeros_(self.final.linear.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        dtype = self.input_proj.weight.dtype
        h = self.input_proj(x.to(dtype))
        y = self.time_embed(t) + self.cond_proj(z.to(dtype))
        for block in self.blocks:
            h = block(h, y)
        return self.final(h, y)


def sampling_sigmas(steps: int, shift: float = HEAD_SHIFT, sigma_min: float = HEAD_SIGMA_MIN,
                    sigma_max: float = HEAD_SIGMA_MAX, extra_one_step: bool = True) -> torch.Tensor:
    """The head's ``steps + 1`` sigmas, from ``sigma_max`` (shifted) down to a final 0 (spec b.3-b.4).

    ``extra_one_step`` [PROPOSED True]: ``linspace(sigma_max, sigma_min, steps + 1)[:-1]``, else
    ``linspace(sigma_max, sigma_min, steps)``; then ``s * sigma / (1 + (s - 1) * sigma)`` (the spec names
    the flag, not its value). The last Euler step goes to sigma 0, the clean token.
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise InputError("denoising_steps", steps, "use a positive integer (Bernini uses 1, 3 or 5)")
    if not 0 <= sigma_min < sigma_max <= 1:
        raise InputError("sigma_min", (sigma_min, sigma_max), "use 0 <= sigma_min < sigma_max <= 1")
    if extra_one_step:
        base = torch.linspace(sigma_max, sigma_min, steps + 1, dtype=torch.float64)[:-1]
    else:
        base = torch.linspace(sigma_max, sigma_min, steps, dtype=torch.float64)
    return torch.cat([flow.shift_sigmas(base, shift), torch.zeros(1, dtype=torch.float64)]).float()


def three_stream_cfg(v_cond: torch.Tensor, v_imgcond: torch.Tensor, v_uncond: torch.Tensor,
                     txt_scale: float, img_scale: float) -> torch.Tensor:
    """``v = v_u + s_img (v_ic - v_u) + s_txt (v_c - v_ic)`` (spec b.4).

    ``v_cond``: the full input; ``v_imgcond``: the image-condition stream (the release drops the source
    visuals and keeps the text; the builtin planner drops the text and keeps the visuals, see the planner's
    ``imgcond_drop``); ``v_uncond``: text and sources dropped. All scales 1 give ``v_cond``; all 0 give
    ``v_uncond``. Same formula as the release's ``forward_with_txt_img_cfg``.
    """
    return v_uncond + img_scale * (v_imgcond - v_uncond) + txt_scale * (v_cond - v_imgcond)


CFG_RULES = ("always", "txt_above_1")


def effective_cfg(txt_scale: float, img_scale: float, rule: str = "always") -> tuple[float, float]:
    """The scales ``three_stream_cfg`` is run with under ``rule``.

    "always" (the builtin planner's): as given. "txt_above_1" (the release's ``DiffLossFM.sample``, T8mars
    planner_model.py: three streams only when the text scale is above 1, else the cond stream alone):
    ``txt_scale <= 1`` gives (1, 1), where the sum is exactly ``v_cond``.
    """
    if rule not in CFG_RULES:
        raise InputError("cfg_rule", rule, f"use one of {CFG_RULES}")
    if rule == "txt_above_1" and txt_scale <= 1:
        return 1.0, 1.0
    return float(txt_scale), float(img_scale)


def needed_streams(txt_scale: float, img_scale: float, imgcond_is_cond: bool) -> tuple[bool, bool]:
    """Which extra forwards ``three_stream_cfg`` needs: ``(imgcond, uncond)``.

    The sum is ``s_txt v_c + (s_img - s_txt) v_ic + (1 - s_img) v_u``: the uncond stream counts only when
    ``s_img != 1``, the imgcond stream only when ``s_img != s_txt`` and it differs from cond.
    """
    return (not imgcond_is_cond) and img_scale != txt_scale, img_scale != 1


VelocityFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def sample_tokens(head: VelocityFn, z_cond: torch.Tensor, z_imgcond: torch.Tensor | None, z_uncond: torch.Tensor | None,
                  *, token_dim: int, steps: int, txt_scale: float, img_scale: float, generator: torch.Generator | None,
                  shift: float = HEAD_SHIFT, sigma_min: float = HEAD_SIGMA_MIN, sigma_max: float = HEAD_SIGMA_MAX,
                  extra_one_step: bool = True, temperature: float = 1.0) -> torch.Tensor:
    """Euler-integrate the head's flow ODE from noise to tokens ``(n, token_dim)`` for conditions ``(n, C)``.

    One noise draw (from ``generator`` only) is shared by the three streams: each step evaluates the head
    on the same ``y`` under each stream's condition and follows ``three_stream_cfg``'s guided velocity
    (spec b.4). A stream passed as ``None`` is one ``needed_streams`` says the sum does not need: a missing
    imgcond stands in as cond, a missing uncond has weight 0. ``temperature`` scales the initial noise
    [PROPOSED, as MAR's sampling temperature: below 1 draws tokens nearer the head's mode].
    """
    n = z_cond.shape[0]
    if z_uncond is None and img_scale != 1:
        raise InputError("img_scale", img_scale, "needs the unconditional stream (pass z_uncond) unless it is 1")
    sigmas = sampling_sigmas(steps, shift, sigma_min, sigma_max, extra_one_step).to(z_cond.device)
    y = flow.initial_noise((n, token_dim), generator=generator, device=z_cond.device, dtype=torch.float32) * temperature
    conds = [z_cond] + [z for z in (z_imgcond, z_uncond) if z is not None]
    z_all = torch.cat(conds)
    for k in range(steps):
        t = flow.sigmas_to_timesteps(sigmas[k]).expand(z_all.shape[0])
        v_all = list(head(y.repeat(len(conds), 1), t, z_all).float().split(n))
        v_c = v_all.pop(0)
        v_ic = v_all.pop(0) if z_imgcond is not None else v_c
        v_u = v_all.pop(0) if z_uncond is not None else v_c
        v = three_stream_cfg(v_c, v_ic, v_u, txt_scale, img_scale)
        y = flow.euler_step(y, v, sigmas[k], sigmas[k + 1])
    return y
