"""HUMOR's picture: the ranked memes side by side, each labelled with its rank and reward."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.overlay import add_caption_band, contact_sheet


def gallery(memes: Sequence[np.ndarray], rewards: Sequence[float], columns: int = 4) -> np.ndarray:
    """Memes best first in a grid, ``#k  reward r`` under each, and a caption band."""
    if not memes:
        raise ValueError("no memes to show")
    # each label in a band below its meme, so it never covers the meme's own top text
    tiles = [add_caption_band(m, f"#{k + 1}  reward {r:.2f}") for k, (m, r) in enumerate(zip(memes, rewards))]
    sheet = contact_sheet(np.stack(tiles), columns=columns)
    return add_caption_band(sheet, "memes ranked by the reward model (mean pairwise preference)")
