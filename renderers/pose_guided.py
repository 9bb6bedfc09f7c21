"""Pose-guided rendering of a whole clip with the builtin renderer in its AnyMotion mode (spec b.5).

    frames = render_motion(renderer, source, target_keypoints, "raise the left arm", queries, generator=0)

The builtin renderer is trained on windows of ``config.num_frames`` frames; a clip of any length is
rendered window by window (the last window ends on the clip's last frame, overlapping the one before,
whose frames it then replaces), each with the source clip's same frames in context and the target
skeleton's pose maps (``core.skeleton.pose_maps``) spatially aligned. Every window's noise comes from
one generator, in order, so the clip is a pure function of its inputs and the seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from core.errors import InputError
from core.skeleton import POSE_MAP_CHANNELS, pose_maps, render_limbs


def windows(num_frames: int, window: int) -> list[tuple[int, int]]:
    """``[(start, stop)]`` covering ``range(num_frames)`` in windows of ``window`` (the last one flush with the end)."""
    if num_frames <= window:
        return [(0, num_frames)]
    starts = list(range(0, num_frames - window + 1, window))
    if starts[-1] + window < num_frames:
        starts.append(num_frames - window)
    return [(s, s + window) for s in starts]


def render_motion(renderer: Any, source: np.ndarray, target_keypoints: np.ndarray | None, text: str | None,
                  queries: torch.Tensor | np.ndarray | None = None, *, steps: int | None = None, guidance: Any = "auto",
                  generator: torch.Generator | int | None = None, window: int | None = None,
                  callback: Callable[[int, dict], None] | None = None, cache: Any = None) -> np.ndarray:
    """Render the edited clip: ``source`` uint8 ``(T, H, W, 3)``, ``target_keypoints`` ``(T, 17, 3)`` pixels (None: no
    skeleton, the direct-editing ablation). Returns uint8 ``(T, H, W, 3)``. ``callback(step, info)`` as the
    renderer's, with ``info["window"]`` = ``(start, stop)`` added; ``cache`` the renderer's step cache, per window."""
    c = renderer.config
    if c.pose_channels != POSE_MAP_CHANNELS:
        raise InputError("renderer", f"pose_channels={c.pose_channels}", f"use a pose-guided renderer ({POSE_MAP_CHANNELS} pose channels)")
    if not isinstance(source, np.ndarray) or source.dtype != np.uint8 or source.ndim != 4 or source.shape[-1] != 3:
        raise InputError("source", getattr(source, "shape", type(source).__name__), "pass the source clip as uint8 (T, H, W, 3)")
    t, h, w, _ = source.shape
    maps = None
    if target_keypoints is not None:
        kp = np.asarray(target_keypoints, np.float32)
        if kp.shape != (t, 17, 3):
            raise InputError("target_keypoints", kp.shape, f"pass ({t}, 17, 3): one skeleton per source frame")
        maps = pose_maps(kp, h, w)
    gen = generator if isinstance(generator, torch.Generator) or generator is None else torch.Generator().manual_seed(int(generator))
    out = np.empty_like(source)
    for a, b in windows(t, window or c.num_frames):
        def cb(step: int, info: dict, span=(a, b)):
            return callback(step, {**info, "window": span}) if callback is not None else None

        out[a:b] = renderer.generate(None, text, sources=[source[a:b]], num_frames=b - a, height=h, width=w, steps=steps,
                                     guidance=guidance, generator=gen, callback=cb, pose=None if maps is None else maps[a:b],
                                     queries=queries, **({"cache": cache} if cache is not None else {}))
    return out


def limb_masks(keypoints: np.ndarray, height: int, width: int, grow: int) -> np.ndarray:
    """Where a skeleton's limbs lie, ``(T, H, W)`` bool: its limbs drawn ``1 + 2 * grow`` pixels wider than
    ``render_limbs`` draws them (a figure's limbs are wider than the map's lines)."""
    import cv2

    drawn = render_limbs(keypoints, height, width).any(-1)
    kernel = np.ones((2 * grow + 1, 2 * grow + 1), np.uint8)
    return np.stack([cv2.dilate(m.astype(np.uint8), kernel) > 0 for m in drawn])


def uncover(video: np.ndarray, source: np.ndarray, source_keypoints: np.ndarray, target_keypoints: np.ndarray,
            grow: int | None = None) -> np.ndarray:
    """Show the background where the source person's limbs were and the target's are not [PROPOSED].

    The builtin renderer predicts the change from the source clip and leaves dark residues of the limbs a
    motion moves away (issue 48: "ghosts of the source limbs"). The clip itself shows what lies behind a
    limb in the frames where that limb is elsewhere: per pixel, the median of the source frames where no
    source limb covers it. Pixels inside a source limb and outside every target limb take that median; a
    pixel the clip never uncovers keeps the render. Rows are done one at a time (memory: one row of
    the clip). ``grow``: pixels added around each drawn limb (default: 1/32 of the shorter side, at least 1).
    """
    t, h, w = video.shape[:3]
    grow = max(1, round(min(h, w) / 32)) if grow is None else int(grow)
    src = limb_masks(source_keypoints, h, w, grow)
    fix = src & ~limb_masks(target_keypoints, h, w, grow)
    if not fix.any():
        return video
    out = video.copy()
    for y in np.nonzero(fix.any((0, 2)))[0]:
        seen = np.where(src[:, y, :, None], np.nan, source[:, y].astype(np.float32))  # (T, W, 3)
        known = ~src[:, y].all(0)
        if not known.any():
            continue
        background = np.zeros((w, 3), np.float32)
        background[known] = np.nanmedian(seen[:, known], axis=0)
        cols = fix[:, y] & known  # (T, W)
        out[:, y][cols] = np.round(np.broadcast_to(background, (t, w, 3))[cols]).astype(np.uint8)
    return out
