"""A codebook of ViT tokens for the discrete plan head ([PROPOSED]; not in the Bernini paper).

Bernini predicts each target token with a continuous flow head (spec b.3). The discrete alternative is
MaskGIT's own recipe: quantise the target tokens against a fixed codebook, predict one code per
token with cross-entropy, and reveal codes by confidence::

    codebook = fit_codebook(train_tokens, 512, generator=torch.Generator().manual_seed(0))   # (K, D)
    codes = quantize(tokens, codebook)                                                          # (...,) long
    head = CodebookHead(token_dim=192, cond_dim=128, size=512, width=256, depth=2)
    head.set_codebook(codebook); logits = head(z)                                                # (n, K)

The codebook is fitted with k-means in **L2 on the raw tokens** [PROPOSED]: the renderer reads the raw
vectors (direction and norm), so L2 minimises exactly the error the plan hands it; spherical (cosine)
k-means would throw the norm away, and for the builtin ViT's post-LayerNorm tokens, whose norms are
nearly equal, both give almost the same partition anyway. Distances are computed in row chunks, so
memory stays at ``chunk_size x K`` floats whatever N is.
"""

from __future__ import annotations

import logging
import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import InputError

logger = logging.getLogger(__name__)

DEFAULT_CHUNK = 8192  # rows per distance block: 8192 x 512 floats = 16 MiB [PROPOSED]


def _positive_int(name: str, value: object, lo: int = 1) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < lo:
        raise InputError(name, value, f"use an integer >= {lo}")
    return int(value)


def _check_tokens(name: str, tokens: object, dim: int | None = None) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.ndim < 1 or not tokens.is_floating_point():
        raise InputError(name, getattr(tokens, "shape", tokens), "pass a float tensor (..., token_dim)")
    if dim is not None and tokens.shape[-1] != dim:
        raise InputError(name, tuple(tokens.shape), f"the last axis must be the codebook's width {dim}")
    return tokens


def _nearest(x: torch.Tensor, codebook: torch.Tensor, chunk_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of the nearest code (L2) and the squared distance to it, for rows ``x`` (N, D), in float32.

    ``|x - c|^2 = |x|^2 - 2 x.c + |c|^2`` one block of rows at a time; ties go to the lower index
    (``argmin`` returns the first minimum)."""
    c = codebook.float()
    c_sq = (c * c).sum(-1)
    idx = torch.empty(x.shape[0], dtype=torch.long, device=x.device)
    dist = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    for start in range(0, x.shape[0], chunk_size):
        block = x[start : start + chunk_size].float()
        d = (block * block).sum(-1, keepdim=True) - 2 * block @ c.T + c_sq
        best, arg = d.min(-1)
        idx[start : start + chunk_size] = arg
        dist[start : start + chunk_size] = best.clamp_min(0)  # the expansion can dip below 0 by rounding
    return idx, dist


def quantize(tokens: torch.Tensor, codebook: torch.Tensor, chunk_size: int = DEFAULT_CHUNK) -> torch.Tensor:
    """The nearest code (L2) of every token: ``tokens`` ``(..., D)`` -> ``codes`` ``(...)`` (long)."""
    if not isinstance(codebook, torch.Tensor) or codebook.ndim != 2 or not codebook.is_floating_point():
        raise InputError("codebook", getattr(codebook, "shape", codebook), "pass a float (K, token_dim) tensor")
    tokens = _check_tokens("tokens", tokens, codebook.shape[1])
    chunk_size = _positive_int("chunk_size", chunk_size)
    flat = tokens.reshape(-1, tokens.shape[-1])
    idx, _ = _nearest(flat.to(codebook.device), codebook, chunk_size)
    return idx.reshape(tokens.shape[:-1])


def _kmeans_pp(x: torch.Tensor, k: int, generator: torch.Generator | None, chunk_size: int) -> torch.Tensor:
    """k-means++ seeding: the first centre uniformly, each next one with probability ~ D(x)^2."""
    n = x.shape[0]
    first = int(torch.randint(n, (1,), generator=generator))
    centres = [x[first].float()]
    d2 = _nearest(x, centres[0][None], chunk_size)[1]
    for _ in range(1, k):
        total = float(d2.sum())
        if total <= 0:  # fewer distinct points than k: the rest uniformly (duplicates get reseeded later)
            pick = int(torch.randint(n, (1,), generator=generator))
        else:
            pick = int(torch.multinomial((d2 / total).cpu().double(), 1, generator=generator))
        centres.append(x[pick].float())
        d2 = torch.minimum(d2, _nearest(x, centres[-1][None], chunk_size)[1])
    return torch.stack(centres)


def fit_codebook(tokens: torch.Tensor, size: int, *, iters: int = 20, generator: torch.Generator | None = None,
                 init: str = "kmeans++", chunk_size: int = DEFAULT_CHUNK, tol: float = 1e-4) -> torch.Tensor:
    """k-means (L2, Lloyd) codebook ``(size, D)`` float32 of ``tokens`` ``(N, D)`` [PROPOSED, see the module doc].

    ``init``: "kmeans++" (D^2 seeding) or "random" (``size`` distinct rows); all draws come from
    ``generator`` (CPU). At most ``iters`` Lloyd steps; stops early when the mean squared error improves by
    less than ``tol`` (relative). A cluster left empty is reseeded with the token farthest from its code,
    so every code stays in use. Memory: the data, plus ``chunk_size x size`` floats per distance block.
    """
    x = _check_tokens("tokens", tokens)
    if x.ndim != 2:
        raise InputError("tokens", tuple(x.shape), "pass a 2-D (N, token_dim) tensor (flatten the grid first)")
    size = _positive_int("size", size)
    iters = _positive_int("iters", iters, 0)
    chunk_size = _positive_int("chunk_size", chunk_size)
    if x.shape[0] < size:
        raise InputError("size", size, f"k-means needs at least as many tokens as codes; got {x.shape[0]} tokens")
    if not bool(torch.isfinite(x).all()):
        raise InputError("tokens", "non-finite values", "remove NaN / inf tokens before fitting")
    if init not in ("kmeans++", "random"):
        raise InputError("init", init, "use 'kmeans++' or 'random'")
    if not isinstance(tol, numbers.Real) or isinstance(tol, bool) or not math.isfinite(tol) or tol < 0:
        raise InputError("tol", tol, "use a finite number >= 0")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise InputError("generator", generator, "pass a torch.Generator or None")
    x = x.float()
    n, d = x.shape
    if init == "kmeans++":
        codebook = _kmeans_pp(x, size, generator, chunk_size)
    else:
        codebook = x[torch.randperm(n, generator=generator)[:size].to(x.device)].clone()
    prev = math.inf
    for it in range(iters):
        assign, dist = _nearest(x, codebook, chunk_size)
        mse = float(dist.mean()) / d
        counts = torch.bincount(assign, minlength=size)
        sums = torch.zeros(size, d, device=x.device).index_add_(0, assign, x)
        nonempty = counts > 0
        codebook[nonempty] = sums[nonempty] / counts[nonempty, None].float()
        empty = (~nonempty).nonzero()[:, 0]
        if len(empty):  # reseed with the worst-served tokens (deterministic: largest distance, lowest index)
            far = torch.sort(dist, descending=True, stable=True).indices[: len(empty)]
            codebook[empty] = x[far]
        logger.debug("k-means iteration %d: mse %.6f, %d empty clusters reseeded", it, mse, len(empty))
        if len(empty) == 0 and prev - mse <= tol * prev:
            break
        prev = mse
    return codebook


@torch.no_grad()
def codebook_stats(tokens: torch.Tensor, codebook: torch.Tensor, chunk_size: int = DEFAULT_CHUNK) -> dict[str, float]:
    """How well ``codebook`` represents ``tokens`` ``(..., D)``: ``cosine`` (mean cosine between each token
    and its code: the best a perfect codebook plan could score), ``rel_mse`` (``|x - c|^2 / |x|^2`` over all
    tokens), ``used`` (share of codes some token picks) and ``perplexity`` (exp entropy of code use)."""
    codes = quantize(tokens, codebook, chunk_size).reshape(-1)
    x = tokens.reshape(-1, tokens.shape[-1]).to(codebook.device).float()
    q = codebook.float()[codes]
    hist = torch.bincount(codes, minlength=codebook.shape[0]).float()
    p = hist[hist > 0] / hist.sum()
    return {"cosine": float(F.cosine_similarity(x, q, dim=-1).mean()),
            "rel_mse": float(((x - q) ** 2).sum() / (x * x).sum().clamp_min(1e-12)),
            "used": float((hist > 0).float().mean()),
            "perplexity": float(torch.exp(-(p * p.log()).sum()))}


class CodebookHead(nn.Module):
    """The discrete plan head [PROPOSED]: condition ``z`` ``(n, cond_dim)`` -> logits ``(n, size)`` over the codes.

    ``LayerNorm(cond_dim)``, then ``depth`` blocks of Linear -> GELU (the first to ``width``), then a
    Linear to ``size`` logits. ``codebook`` ``(size, token_dim)`` is a buffer (saved with the weights,
    never trained); until ``set_codebook`` it holds random placeholder rows and ``fitted`` is False.
    """

    def __init__(self, token_dim: int, cond_dim: int, size: int, width: int, depth: int):
        super().__init__()
        self.register_buffer("codebook", torch.randn(size, token_dim))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))
        layers: list[nn.Module] = [nn.LayerNorm(cond_dim)]
        d = cond_dim
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.GELU()]
            d = width
        layers.append(nn.Linear(d, size))
        self.classifier = nn.Sequential(*layers)

    @property
    def size(self) -> int:
        return self.codebook.shape[0]

    @torch.no_grad()
    def set_codebook(self, codebook: torch.Tensor) -> None:
        """Store a fitted codebook (e.g. ``fit_codebook``'s) and mark the head fitted."""
        if (not isinstance(codebook, torch.Tensor) or tuple(codebook.shape) != tuple(self.codebook.shape)
                or not codebook.is_floating_point() or not bool(torch.isfinite(codebook).all())):
            raise InputError("codebook", getattr(codebook, "shape", codebook),
                             f"pass finite floats of shape {tuple(self.codebook.shape)} (codebook_size, token_dim)")
        self.codebook.copy_(codebook)
        self.fitted.fill_(True)

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        """The code vectors ``(..., token_dim)`` of ``codes`` ``(...)``."""
        return self.codebook[codes]

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.classifier(z.to(self.classifier[-1].weight.dtype))


__all__ = ["CodebookHead", "codebook_stats", "fit_codebook", "quantize"]
