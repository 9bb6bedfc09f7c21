"""Pictures of a GridProbe answer: the importance map as a heatmap, the chosen frames as a strip."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from core.overlay import add_caption_band, contact_sheet


def heatmap_image(importance: np.ndarray, selected: Sequence[int] = (), cell_px: int | None = None,
                  caption: str | None = None) -> np.ndarray:
    """The K×K map as an RGB image (viridis, min→max), selected pool positions outlined in white.

    A flat map is drawn at the middle of the colour scale rather than stretched from noise.
    """
    M = np.asarray(importance, dtype=np.float64)
    K = M.shape[0]
    cell = cell_px or max(12, 384 // K)
    lo, hi = float(M.min()), float(M.max())
    norm = (M - lo) / (hi - lo) if hi - lo > 1e-12 else np.full_like(M, 0.5)
    grey = np.round(norm * 255).astype(np.uint8)
    bgr = cv2.applyColorMap(grey, cv2.COLORMAP_VIRIDIS)
    img = np.ascontiguousarray(cv2.resize(bgr, (K * cell, K * cell), interpolation=cv2.INTER_NEAREST)[..., ::-1])
    for p in selected:
        r, c = divmod(int(p), K)
        cv2.rectangle(img, (c * cell, r * cell), ((c + 1) * cell - 1, (r + 1) * cell - 1), (255, 255, 255), max(1, cell // 10))
    return add_caption_band(img, caption) if caption else img


def frame_strip(frames: np.ndarray, labels: Sequence[str] | None = None, columns: int = 8) -> np.ndarray:
    """The chosen frames side by side (``columns`` per row), each labelled."""
    return contact_sheet(frames, columns=min(columns, max(1, len(frames))), labels=list(labels) if labels else None)
