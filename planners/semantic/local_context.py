"""Local context for the plan head [PROPOSED, not in the paper]: a small 3-D convolution over the target grid.

Measured on the builtin planner (teacher-forced flow loss on VAL, 12 items per task): revealing 10% of the
target tokens lowers the loss on the rest from 0.85 to 0.50, but revealing 90% lowers it no further. The
backbone reads the clip's global facts (the background) from any revealed token and nothing from its
neighbours, so each masked token is drawn as if alone and a plan's object tokens land at scattered places
(speckle); for the same reason an edit plan does not copy its source (the codebook trial: the planner gives
the source's codes little probability). This module gives every target position its grid neighbours' current
rows (revealed ViT tokens through ``vit_in``, or the mask token) and, for an edit whose source video has the
target's grid, the source's rows at the same places: ``z_i += conv([rows, source rows])_i``, added to the
head's condition. The last layer starts at zero, so a planner that gains the module starts as the one it was.
"""

from __future__ import annotations

import torch
from torch import nn


class LocalContext(nn.Module):
    """``Conv3d(2 width, width, k) -> GELU -> Conv3d(width, width, k)`` over the ``(T', h, w)`` target grid; the
    input's second half is the aligned source (zeros when there is none, or when a stream drops the sources)."""

    def __init__(self, width: int, kernel: int):
        super().__init__()
        pad = kernel // 2
        self.inner = nn.Conv3d(2 * width, width, kernel, padding=pad)
        self.outer = nn.Conv3d(width, width, kernel, padding=pad)
        nn.init.zeros_(self.outer.weight)
        nn.init.zeros_(self.outer.bias)

    def forward(self, rows: torch.Tensor, grid: tuple[int, int, int], source: torch.Tensor | None = None) -> torch.Tensor:
        """``rows`` (and ``source``) ``(N, width)`` in grid order (N = T' h w) -> ``(N, width)``."""
        x = torch.cat([rows, torch.zeros_like(rows) if source is None else source.to(rows.dtype)], -1)
        x = x.T.reshape(1, x.shape[1], *grid)
        y = self.outer(nn.functional.gelu(self.inner(x)))
        return y.reshape(rows.shape[1], -1).T
