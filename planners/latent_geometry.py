"""Relational structure of latent slots: GeLVR's geometric-consistency losses (specs/gelvr.md B.2) and GePO's
geometry-preserving regulariser R_geo (B.4). All [PROPOSED]: the paper's exact form is not public.

Shapes: slot states ``H`` and targets ``V`` are ``(..., K, d)``, image tokens ``P`` ``(..., N, d)`` with an
optional ``(..., N)`` boolean mask of valid tokens. ``n(X)`` is row-wise L2 normalisation.

- ``gram_loss``: ``||G(H) - G(V)||_F^2 / K^2`` with ``G(X) = n(X) n(X)^T``; blind to any rotation or per-row
  rescaling of H, so it cannot pin slots to the visual subspace alone;
- ``cross_kl``: ``mean_k KL(A(V)_k || A(H)_k)``, ``A(X) = softmax(n(X) n(P)^T / tau)`` over the image tokens;
  P is shared and fixed, which removes Gram's rotation freedom;
- ``pointwise_loss``: the precursors' anchor, ``1 - mean cos`` (Mirage) or MSE (LVR);
- ablation variants: ``cka_loss`` (1 - linear CKA) and ``rkd_loss`` (relational KD distance + angle terms).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TAU = 0.07


def cosine_gram(x: torch.Tensor) -> torch.Tensor:
    """``(..., K, d) -> (..., K, K)``: cosines between rows."""
    n = F.normalize(x, dim=-1)
    return n @ n.transpose(-1, -2)


def gram_loss(h: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``||G(H) - G(V)||_F^2 / K^2``, averaged over leading axes."""
    k = h.shape[-2]
    return ((cosine_gram(h) - cosine_gram(v)) ** 2).sum((-1, -2)).div(k * k).mean()


def cross_structure(x: torch.Tensor, p: torch.Tensor, tau: float = TAU, mask: torch.Tensor | None = None,
                    log: bool = False) -> torch.Tensor:
    """``A(X) = softmax(n(X) n(P)^T / tau)`` over the N image tokens: ``(..., K, N)`` (log-probabilities if ``log``)."""
    s = F.normalize(x, dim=-1) @ F.normalize(p, dim=-1).transpose(-1, -2) / tau
    if mask is not None:
        s = s.masked_fill(~mask[..., None, :], float("-inf"))
    return F.log_softmax(s, -1) if log else F.softmax(s, -1)


def cross_kl(h: torch.Tensor, v: torch.Tensor, p: torch.Tensor, tau: float = TAU, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``(1/K) sum_k KL(A(V)_k || A(H)_k)``, averaged over leading axes."""
    log_t = cross_structure(v, p, tau, mask, log=True)
    log_s = cross_structure(h, p, tau, mask, log=True)
    kl = (log_t.exp() * (log_t - log_s)).nan_to_num(0.0).sum(-1)  # masked tokens: 0 * (-inf) terms are 0
    return kl.mean()


def pointwise_loss(h: torch.Tensor, v: torch.Tensor, kind: str = "cos") -> torch.Tensor:
    """``1 - mean_k cos(h_k, v_k)`` (``kind="cos"``) or the mean squared error (``"mse"``)."""
    if kind == "cos":
        return 1 - F.cosine_similarity(h, v, dim=-1).mean()
    if kind == "mse":
        return F.mse_loss(h, v)
    raise ValueError(f"pointwise kind {kind!r}: choose cos or mse")


def linear_cka(h: torch.Tensor, v: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Linear CKA between the K-row representations ``H`` and ``V`` (per leading item), in [0, 1]."""
    h = h - h.mean(-2, keepdim=True)
    v = v - v.mean(-2, keepdim=True)
    cross = (h.transpose(-1, -2) @ v).pow(2).sum((-1, -2))
    hh = (h.transpose(-1, -2) @ h).pow(2).sum((-1, -2)).sqrt()
    vv = (v.transpose(-1, -2) @ v).pow(2).sum((-1, -2)).sqrt()
    return cross / (hh * vv + eps)


def cka_loss(h: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (1 - linear_cka(h, v)).mean()


def rkd_loss(h: torch.Tensor, v: torch.Tensor, angle_weight: float = 2.0) -> torch.Tensor:
    """Relational knowledge distillation (Park et al. 2019): Huber loss between mean-normalised pairwise
    distances, plus ``angle_weight`` x the Huber loss between the angles of every triple."""

    def dist(x):
        d = torch.cdist(x, x)
        k = x.shape[-2]
        mean = d.sum((-1, -2), keepdim=True) / max(k * (k - 1), 1)
        return d / mean.clamp(min=1e-8)

    def angles(x):
        e = F.normalize(x[..., :, None, :] - x[..., None, :, :], dim=-1)  # (..., K, K, d): e_ij = n(x_i - x_j)
        return e @ e.transpose(-1, -2)  # (..., K, K, K): cos of angle j-i-k

    distance = F.smooth_l1_loss(dist(h), dist(v))
    return distance + angle_weight * F.smooth_l1_loss(angles(h), angles(v))


def geometry_regulariser(m: torch.Tensor, m_ref: torch.Tensor, p: torch.Tensor, tau: float = TAU,
                         mask: torch.Tensor | None = None) -> torch.Tensor:
    """GePO's ``R_geo``: the Gram term plus the slot-to-image cross KL of the policy's slot means ``m`` against
    the frozen reference's ``m_ref`` on the same inputs (0 when they agree)."""
    return gram_loss(m, m_ref) + cross_kl(m, m_ref, p, tau, mask)
