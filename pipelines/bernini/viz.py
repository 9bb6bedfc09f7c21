"""Pictures of a Bernini output: the plan's ViT tokens as colours above the frames they describe; an edit's source
above its result."""

from __future__ import annotations

import numpy as np

from core.frames import resize_frames
from core.overlay import draw_caption

CELL = 128  # pixels per plan frame / output frame in the picture


def token_colours(tokens: np.ndarray) -> np.ndarray:
    """``(T', h, w, D)`` tokens -> ``(T', h, w, 3)`` uint8: their first three principal components (over
    all of the plan's tokens) scaled to 0..255, so tokens alike look alike [the usual ViT-feature view]."""
    t = np.asarray(tokens, np.float64)
    x = t.reshape(-1, t.shape[-1])
    x = x - x.mean(0)
    k = min(3, *x.shape)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    pcs = x @ vt[:k].T
    pcs = np.concatenate([pcs, np.zeros((len(pcs), 3 - k))], 1) if k < 3 else pcs
    lo, hi = np.percentile(pcs, 2, axis=0), np.percentile(pcs, 98, axis=0)
    rgb = np.clip((pcs - lo) / np.maximum(hi - lo, 1e-8), 0, 1)
    return (rgb * 255).round().astype(np.uint8).reshape(*t.shape[:3], 3)


def plan_picture(tokens: np.ndarray, video: np.ndarray, plan_frames: list[int] | None) -> np.ndarray:
    """Row 1: each plan frame's tokens as colours; row 2 (when the frames are known): the output frame it describes."""
    colours = token_colours(tokens)
    top = [draw_caption(resize_frames(c[None], (CELL, CELL * c.shape[1] // c.shape[0]), "nearest")[0], f"plan {i}", "top")
           for i, c in enumerate(colours)]
    rows = [np.concatenate(top, 1)]
    if plan_frames and len(plan_frames) == len(top):
        h, w = top[0].shape[:2]
        bottom = [draw_caption(resize_frames(video[i][None], (h, w), "nearest")[0], f"frame {i}", "top") for i in plan_frames]
        rows.append(np.concatenate(bottom, 1))
    return np.concatenate(rows, 0)


def source_and_result(source: np.ndarray, video: np.ndarray, count: int = 4) -> np.ndarray:
    """Two rows of ``count`` evenly spaced frames, labelled: the edit's source clip, then the result at the same
    frame numbers (the source is sampled to the output's length, so frame i of each is the same moment)."""
    n = min(len(source), len(video))
    picks = sorted({int(round(k * (n - 1) / max(count - 1, 1))) for k in range(count)})
    h, w = video.shape[1:3]
    size = (CELL, max(1, CELL * w // h))
    rows = [np.concatenate([draw_caption(resize_frames(clip[i][None], size, "nearest")[0], f"{name} {i}", "top") for i in picks], 1)
            for name, clip in (("source", source), ("result", video))]
    return np.concatenate(rows, 0)
