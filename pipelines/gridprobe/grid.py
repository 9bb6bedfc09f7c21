"""The K×K grid: which K² frames form the pool, and which pool positions each probe sees (spec B.1).

Positions are indices into the pool (0..K²-1); ``pool_indices`` maps them back to video frames.
Row r holds positions ``r·K .. r·K+K-1`` (a contiguous temporal window, a dense local view);
column c holds ``c, c+K, .., c+(K-1)·K`` (a strided sample over the whole video, a sparse global
view). Every position lies in exactly one row and one column, and row r ∩ column c = {r·K+c}.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from core.errors import InputError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Probe:
    """One probe pass: ``axis`` is "row" or "col", ``index`` its row/column, ``positions`` ascending."""

    axis: str
    index: int
    positions: tuple[int, ...]


@dataclass(frozen=True)
class GridLayout:
    """A K×K grid laid out row-major over a pool of K² uniformly spaced frames."""

    K: int

    def __post_init__(self):
        if not isinstance(self.K, Integral) or isinstance(self.K, bool) or self.K < 2:
            raise InputError("grid", self.K, "the grid side K is an integer >= 2 (the paper uses 6..32, default 12)")

    @property
    def size(self) -> int:
        """K², the number of frames in the pool."""
        return self.K * self.K

    def pool_indices(self, total_frames: int) -> list[int]:
        """``round(linspace(0, total-1, K²))``: the reference's frame pool (numpy round-half-to-even).

        A video shorter than K² frames yields repeated indices; that is what the reference does too
        (it pads with repeats), and the caller is warned because probes then see duplicates.
        """
        if not isinstance(total_frames, Integral) or total_frames < 1:
            raise InputError("total_frames", total_frames, "the video must have at least one frame")
        if total_frames < self.size:
            logger.warning("the video has %d frames, fewer than the K²=%d pool of a %dx%d grid: frames repeat "
                           "in the pool; pass a smaller grid for a short clip", total_frames, self.size, self.K, self.K)
        return [int(i) for i in np.linspace(0, total_frames - 1, self.size).round().astype(np.int64)]

    def row(self, r: int) -> tuple[int, ...]:
        """Positions of row ``r``: a contiguous window."""
        return tuple(range(r * self.K, r * self.K + self.K))

    def col(self, c: int) -> tuple[int, ...]:
        """Positions of column ``c``: stride K, spanning the whole pool."""
        return tuple(range(c, self.size, self.K))

    def row_indices(self) -> list[tuple[int, ...]]:
        return [self.row(r) for r in range(self.K)]

    def col_indices(self) -> list[tuple[int, ...]]:
        return [self.col(c) for c in range(self.K)]

    def probes(self) -> list[Probe]:
        """The 2K probe passes in the reference's order: all rows, then all columns."""
        return [Probe("row", r, self.row(r)) for r in range(self.K)] + [Probe("col", c, self.col(c)) for c in range(self.K)]

    def cell_to_position(self, r: int, c: int) -> int:
        return r * self.K + c

    def position_to_cell(self, position: int) -> tuple[int, int]:
        return divmod(int(position), self.K)
