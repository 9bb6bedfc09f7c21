"""What every task generator returns, and the split/seed conventions shared by all of them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from worldgen.world import World

# Splits come from disjoint seed ranges: item i of split s uses seed SPLIT_OFFSETS[s] + base + i,
# with base + i < SPLIT_STRIDE, so train, val and test can never share a seed.
SPLIT_STRIDE = 10**9
SPLIT_OFFSETS = {"train": 0, "val": SPLIT_STRIDE, "test": 2 * SPLIT_STRIDE}


def split_seed(split: str, seed: int, index: int) -> int:
    """The world seed of item ``index`` of ``split`` for a run started with ``seed``."""
    if split not in SPLIT_OFFSETS:
        raise ValueError(f"invalid split={split!r}: choose one of {sorted(SPLIT_OFFSETS)}")
    local = int(seed) + int(index)
    if not 0 <= local < SPLIT_STRIDE:
        raise ValueError(f"invalid seed={seed!r}: seed + index must lie in [0, {SPLIT_STRIDE})")
    return SPLIT_OFFSETS[split] + local


@dataclass
class Sample:
    """One generated item: a JSON-safe ``record`` plus the media it refers to.

    ``worlds`` are clips (rendered lazily at export); ``images`` are stills ``(H, W, 3)`` uint8.
    Exporters add file paths to the record under ``"files"``.
    """

    task: str
    seed: int
    record: dict
    worlds: dict = field(default_factory=dict)
    images: dict = field(default_factory=dict)


def sub_rng(seed: int, attempt: int) -> np.random.Generator:
    """The generator for retry ``attempt`` of ``seed`` (regeneration stays a pure function of seed)."""
    return np.random.default_rng([int(seed), int(attempt)])
