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
from core.skeleton import POSE_MAP_CHANNELS, pose_maps


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
                  callback: Callable[[int, dict], None] | None = None) -> np.ndarray:
    """Render the edited clip: ``source`` uint8 ``(T, H, W, 3)``, ``target_keypoints`` ``(T, 17, 3)`` pixels (None: no
    skeleton, the direct-editing ablation). Returns uint8 ``(T, H, W, 3)``. ``callback(step, info)`` as the
    renderer's, with ``info["window"]`` = ``(start, stop)`` added."""
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
                                     queries=queries)
    return out
