"""Segment-Aware 3D RoPE (SA-3D), spec bernini.md b.5-b.6.

Wan's 3D RoPE splits the head's ``head_dim // 2`` complex pairs into frame / height / width parts
(22 / 21 / 21 for 128-d heads). SA-3D adds to every pair's angle a 1-D RoPE phase over the full head
evaluated at the segment id ``s``: ``phi_k = phi3d_k(f, h, w) + s * theta^(-2k/d)``. Each segment uses
its own local grid from (0, 0, 0); the phase is what tells a source token from the target token at the
same (f, h, w). Target ``s = 0`` gives Wan's tables exactly, so plain t2v is unchanged.

Tables use diffusers' layout: a ``(cos, sin)`` pair of shape ``(1, L, 1, head_dim)``, each value
repeated for the two channels of its pair, which is what ``WanTransformer3DModel``'s blocks take as
``rotary_emb``. Grids are in tokens, i.e. latent frames and latent height / width after the (1, 2, 2)
patch embedding.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import NamedTuple

import torch

from core.errors import InputError

Grid = tuple[int, int, int]


class RotaryTables(NamedTuple):
    """cos and sin tables, each ``(1, L, 1, head_dim)``; unpacks like diffusers' ``rotary_emb``."""

    cos: torch.Tensor
    sin: torch.Tensor


def axis_pairs(head_dim: int) -> tuple[int, int, int]:
    """Complex pairs given to (frame, height, width): ``(c - 2*(c//3), c//3, c//3)`` with ``c = head_dim // 2``.

    (22, 21, 21) for 128-d heads; the same split as diffusers' ``WanRotaryPosEmbed`` (spec d.1.6).
    """
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 6 or head_dim % 2:
        raise InputError("head_dim", head_dim, "use an even integer >= 6 (Wan uses 128)")
    c = head_dim // 2
    return c - 2 * (c // 3), c // 3, c // 3


def _inv_freq(n_pairs: int, theta: float) -> torch.Tensor:
    # Written as diffusers' get_1d_rotary_pos_embed writes it, so segment 0 matches it bit for bit.
    return 1.0 / (theta ** (torch.arange(0, 2 * n_pairs, 2, dtype=torch.float64) / (2 * n_pairs)))


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _check_theta(theta: float) -> None:
    if not _is_real(theta) or not theta > 1:
        raise InputError("theta", theta, "use a number > 1 (Wan uses 10000.0)")


def _check_segment_id(segment_id: float) -> float:
    if not _is_real(segment_id):
        raise InputError("segment_id", segment_id, "use a finite number (0 = target, 1, 2, ... = sources)")
    return float(segment_id)


def _check_grid(grid: Sequence[int]) -> Grid:
    ok = (
        isinstance(grid, (tuple, list))
        and len(grid) == 3
        and all(isinstance(n, numbers.Integral) and not isinstance(n, bool) and n > 0 for n in grid)
    )
    if not ok:
        raise InputError("grid", grid, "use (frames, height, width) in tokens, three positive integers")
    return int(grid[0]), int(grid[1]), int(grid[2])


def segment_phase(segment_id: float, head_dim: int = 128, theta: float = 10000.0) -> torch.Tensor:
    """The segment phase psi_k(s) = s * theta^(-2k/head_dim), k < head_dim // 2, as float64 (spec b.6).

    Fractional ids are allowed: v2 spreads more sources than trained over [1, 5] (see ``source_segment_ids``).
    """
    s = _check_segment_id(segment_id)
    _check_theta(theta)
    axis_pairs(head_dim)
    return s * _inv_freq(head_dim // 2, theta)


def sa3d_angles(grid: Sequence[int], segment_id: float = 0.0, head_dim: int = 128,
                theta: float = 10000.0) -> torch.Tensor:
    """Rotation angles ``(f*h*w, head_dim // 2)`` in float64, tokens in (f, h, w) row-major order (spec b.6)."""
    f, h, w = _check_grid(grid)
    pf, ph, pw = axis_pairs(head_dim)
    _check_theta(theta)
    af = torch.arange(f, dtype=torch.float64)[:, None] * _inv_freq(pf, theta)
    ah = torch.arange(h, dtype=torch.float64)[:, None] * _inv_freq(ph, theta)
    aw = torch.arange(w, dtype=torch.float64)[:, None] * _inv_freq(pw, theta)
    ang = torch.cat([af[:, None, None, :].expand(f, h, w, pf),
                     ah[None, :, None, :].expand(f, h, w, ph),
                     aw[None, None, :, :].expand(f, h, w, pw)], dim=-1).reshape(f * h * w, -1)
    # Adding the phase (rather than multiplying cos/sin tables) keeps s = 0 exact: x + 0.0 == x.
    return ang + segment_phase(segment_id, head_dim, theta)


def _tables(ang: torch.Tensor, device: torch.device | str | None, dtype: torch.dtype) -> RotaryTables:
    # cos/sin in float64 on the CPU, then cast, as diffusers builds its buffers; MPS has no float64.
    cos = ang.cos().repeat_interleave(2, dim=-1).to(dtype)
    sin = ang.sin().repeat_interleave(2, dim=-1).to(dtype)
    return RotaryTables(cos[None, :, None, :].to(device), sin[None, :, None, :].to(device))


def sa3d_freqs(grid: Sequence[int], segment_id: float = 0.0, head_dim: int = 128, theta: float = 10000.0, *,
               device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> RotaryTables:
    """SA-3D tables of one segment, ``(1, f*h*w, 1, head_dim)`` each (spec b.6).

    ``segment_id`` 0 is the target and equals ``WanRotaryPosEmbed`` bit for bit; sources are 1, 2, ...
    ``dtype`` float32 matches diffusers; float64 is there for exact tests.
    """
    return _tables(sa3d_angles(grid, segment_id, head_dim, theta), device, dtype)


def multi_segment_freqs(segments: Sequence[tuple[Sequence[int], float]], head_dim: int = 128,
                        theta: float = 10000.0, *, device: torch.device | str | None = None,
                        dtype: torch.dtype = torch.float32) -> RotaryTables:
    """Tables for a packed sequence: one ``(grid, segment_id)`` per segment, in sequence order (spec b.5-b.6).

    The renderer packs ``[source 1 | ... | source K | noisy target]``, so the usual call is
    ``multi_segment_freqs([(g1, 1), ..., (gK, K), (target_grid, 0)])``.
    """
    if not isinstance(segments, Sequence) or isinstance(segments, (str, bytes)) or not segments:
        raise InputError("segments", segments, "pass a non-empty list of (grid, segment_id) pairs")
    angles = []
    for i, seg in enumerate(segments):
        if not isinstance(seg, (tuple, list)) or len(seg) != 2:
            raise InputError(f"segments[{i}]", seg, "each segment is a (grid, segment_id) pair")
        angles.append(sa3d_angles(seg[0], seg[1], head_dim, theta))
    return _tables(torch.cat(angles), device, dtype)


def apply_rotary(x: torch.Tensor, freqs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate interleaved channel pairs (2k, 2k+1) of ``x`` ``(B, L, heads, head_dim)`` by ``freqs``.

    The same arithmetic as diffusers' Wan attention processor, so a renderer may call either.
    """
    cos, sin = freqs
    if x.shape[-1] != cos.shape[-1] or x.shape[-3] != cos.shape[-3]:
        raise InputError("x", tuple(x.shape), f"expected (B, {cos.shape[-3]}, heads, {cos.shape[-1]}) to match the tables")
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x1 * s + x2 * c
    return out


def source_segment_ids(num_sources: int, max_trained_id: int = 5) -> list[float]:
    """Segment ids of ``num_sources`` sources in conversation order: 1..K, or linspace(1, max) past it.

    [PORT] v2's ``interpolate_src_id`` with ``max_trained_src_id = 5``: more sources than the renderer was
    trained on share the trained range through fractional ids instead of extrapolating (spec b.5).
    """
    if not isinstance(num_sources, int) or isinstance(num_sources, bool) or num_sources < 0:
        raise InputError("num_sources", num_sources, "use a non-negative integer")
    if not isinstance(max_trained_id, int) or isinstance(max_trained_id, bool) or max_trained_id < 1:
        raise InputError("max_trained_id", max_trained_id, "use a positive integer (v2 uses 5)")
    if num_sources <= max_trained_id:
        return [float(i + 1) for i in range(num_sources)]
    return torch.linspace(1.0, float(max_trained_id), num_sources, dtype=torch.float64).tolist()
