"""Frames as every model sees them: the frame-source protocol and the one resize.

A *frame source* is anything with ``len()`` and ``get_frames(indices) -> (N, H, W, 3) uint8``:
``core.video.Video``, a synthetic world wrapped by a benchmark, a test double. Pipelines ask a
source for exactly the frames they need, so a long video costs a few seeks, not a full decode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import cv2
import numpy as np

from core.errors import InputError


@runtime_checkable
class FrameSource(Protocol):
    """Random access to the frames of a video."""

    def __len__(self) -> int: ...

    def get_frames(self, indices: Sequence[int]) -> np.ndarray:
        """Frames at ``indices`` (sorted, possibly repeated) as RGB uint8 ``(N, H, W, 3)``."""
        ...


INTERPOLATIONS = {"area": cv2.INTER_AREA, "linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST}


def resize_frames(frames: np.ndarray, size: tuple[int, int], interpolation: str = "auto") -> np.ndarray:
    """Resize a stack ``(N, H, W[, C])`` (frames or id maps) to ``size = (H, W)``; no copy when unchanged.

    ``interpolation``: ``"auto"`` (the default) is ``INTER_AREA`` when shrinking, which averages
    the source pixels under each target pixel, so a small object stays a faint blob instead of
    falling between samples, and ``INTER_LINEAR`` when enlarging; ``"nearest"`` is for masks and
    id maps, whose values are labels; ``"area"`` and ``"linear"`` force one rule.
    """
    frames = np.asarray(frames)
    if frames.ndim not in (3, 4):
        raise InputError("frames", f"array {frames.shape}", "pass a stack (N, H, W) or (N, H, W, C)")
    try:
        h, w = (int(v) for v in size)
    except (TypeError, ValueError):
        raise InputError("size", size, "pass (height, width) in pixels") from None
    if h < 1 or w < 1:
        raise InputError("size", size, "pass positive (height, width) in pixels")
    if frames.shape[1:3] == (h, w):
        return frames
    if interpolation == "auto":
        shrink = h * w < frames.shape[1] * frames.shape[2]
        flag = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    elif interpolation in INTERPOLATIONS:
        flag = INTERPOLATIONS[interpolation]
    else:
        raise InputError("interpolation", interpolation, f"choose 'auto' or one of {sorted(INTERPOLATIONS)}")
    out = np.empty((len(frames), h, w, *frames.shape[3:]), frames.dtype)
    for i, frame in enumerate(frames):
        out[i] = cv2.resize(frame, (w, h), interpolation=flag).reshape(out.shape[1:])
    return out


def resize_frame(frame: np.ndarray, size: tuple[int, int], interpolation: str = "auto") -> np.ndarray:
    """``resize_frames`` for one ``(H, W[, C])`` image."""
    return resize_frames(np.asarray(frame)[None], size, interpolation)[0]


__all__ = ["FrameSource", "resize_frames", "resize_frame", "INTERPOLATIONS"]
