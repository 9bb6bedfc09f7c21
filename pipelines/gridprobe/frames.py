"""Where GridProbe's frames come from, and how they are resized for the probes and the focused pass.

Frame sources follow ``core.frames.FrameSource``; GridProbe asks one for the K² pool frames in one
call and never touches any other frame, so a long video costs K² seeks, not a full decode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from core.errors import InputError
from core.frames import FrameSource, resize_frames as _resize
from core.video import Video

VideoInput = str | Path | np.ndarray | Video | FrameSource


def open_frame_source(video: VideoInput) -> tuple[FrameSource, bool]:
    """A frame source for ``video``, and whether the caller opened it (and so must close it).

    Paths open a ``core.video.Video``; uint8 arrays ``(T, H, W, 3)`` are wrapped without a copy;
    ``Video`` objects and other frame sources are used as they are.
    """
    if isinstance(video, (str, Path)):
        return Video(video), True
    if isinstance(video, np.ndarray):
        if video.dtype != np.uint8 or video.ndim != 4 or video.shape[-1] != 3 or 0 in video.shape:
            raise InputError("video", f"array {video.shape} {video.dtype}", "pass RGB uint8 frames shaped (T, H, W, 3)")
        return Video(video), True
    if isinstance(video, FrameSource):
        return video, False
    raise InputError("video", type(video).__name__,
                     "pass a video path, a core.video.Video, a uint8 (T, H, W, 3) array, "
                     "or an object with __len__ and get_frames(indices)")


def fetch_frames(source: FrameSource, indices: Sequence[int]) -> np.ndarray:
    """``source.get_frames(indices)``, checked against the boundary convention."""
    frames = np.asarray(source.get_frames(list(indices)))
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) != len(indices):
        raise InputError("video", f"get_frames returned {frames.shape} {frames.dtype}",
                         f"a frame source must return {len(indices)} RGB uint8 frames (N, H, W, 3)")
    return frames


def scaled_size(height: int, width: int, scale: float = 1.0, size: tuple[int, int] | None = None) -> tuple[int, int]:
    """The ``(H, W)`` frames are resized to: ``size`` when given, else each side times ``scale`` (>= 1 px)."""
    if size is not None:
        return int(size[0]), int(size[1])
    return max(1, round(height * scale)), max(1, round(width * scale))


def check_scale(name: str, scale: float) -> float:
    """Scales are fractions of the source side in (0, 1]: frames are only ever shrunk."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and 0 < scale <= 1):
        raise InputError(name, scale, "use a fraction of the source side in (0, 1], e.g. 0.5 for half size")
    return float(scale)


def check_size(name: str, size: tuple[int, int] | None) -> tuple[int, int] | None:
    if size is None:
        return None
    try:
        h, w = (int(v) for v in size)
    except (TypeError, ValueError):
        raise InputError(name, size, "pass (height, width) in pixels, or None") from None
    if h < 1 or w < 1 or (h, w) != tuple(size):
        raise InputError(name, size, "pass positive integer (height, width) in pixels, or None")
    return h, w


def resize_frames(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``core.frames.resize_frames`` with ``INTER_AREA`` always: GridProbe only shrinks, and its
    benchmark numbers were measured with that rule."""
    return _resize(frames, size, "area")


def thumbnails(frames: np.ndarray, max_side: int) -> np.ndarray:
    """Copies of ``frames`` no larger than ``max_side`` on their long side (for outputs, not models)."""
    h, w = frames.shape[1:3]
    scale = min(1.0, max_side / max(h, w))
    return resize_frames(frames, scaled_size(h, w, scale)).copy()
