"""AnyMotion's pictures: per frame, the source with its skeleton | the planned skeleton | the output frame."""

from __future__ import annotations

import numpy as np

from core.frames import resize_frames
from core.overlay import add_caption_band, draw_skeleton
from core.skeleton import render_limbs


def _upscale(frames: np.ndarray, min_side: int = 192) -> tuple[np.ndarray, float]:
    h = frames.shape[1]
    k = max(1, -(-min_side // h))
    return (resize_frames(frames, (h * k, frames.shape[2] * k), "nearest") if k > 1 else frames), float(k)


def side_by_side_frame(source: np.ndarray, output: np.ndarray, source_kp: np.ndarray | None, target_kp: np.ndarray | None, t: int) -> np.ndarray:
    """One frame's row: source + its skeleton | planned skeleton on black | output, upscaled for a small clip."""
    src, k = _upscale(source[t : t + 1])
    out, _ = _upscale(output[t : t + 1])
    h, w = src.shape[1:3]
    if source_kp is not None:
        kp = source_kp[t : t + 1].copy()
        kp[..., :2] *= k
        src = draw_skeleton(src, kp, radius=max(1, int(k) - 1))
    plan = np.zeros_like(src)
    if target_kp is not None:
        kp = target_kp[t : t + 1].copy()
        kp[..., :2] *= k
        plan = render_limbs(kp, h, w, thickness=max(2, int(k)))
    gap = np.full((1, h, 4, 3), 255, np.uint8)
    return np.concatenate([src, gap, plan, gap, out], 2)[0]


def side_by_side(source: np.ndarray, output: np.ndarray, source_kp: np.ndarray | None, target_kp: np.ndarray | None,
                 frames: list[int] | None = None) -> np.ndarray:
    """Rows of ``side_by_side_frame`` for ``frames`` (default: 4 evenly spaced), with a header band."""
    n = len(output)
    frames = frames if frames is not None else sorted({int(i) for i in np.linspace(0, n - 1, min(n, 4)).round()})
    rows = [add_caption_band(side_by_side_frame(source, output, source_kp, target_kp, t), f"frame {t}") for t in frames]
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    sheet = np.concatenate(rows, 0)
    return add_caption_band(sheet, "source + skeleton | planned skeleton | output")
