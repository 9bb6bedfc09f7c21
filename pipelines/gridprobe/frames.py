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


def scaled_size(height: int, width: int, scale: float | tuple[float, float] = 1.0, size: tuple[int, int] | None = None) -> tuple[int, int]:
    """The ``(H, W)`` frames are resized to: ``size`` when given, else each side times ``scale`` (>= 1 px); a
    ``(height, width)`` pair of fractions scales the sides apart (a squashed frame: fewer tokens)."""
    if size is not None:
        return int(size[0]), int(size[1])
    sy, sx = scale if isinstance(scale, tuple) else (scale, scale)
    return max(1, round(height * sy)), max(1, round(width * sx))


def check_scale(name: str, scale: float | Sequence[float]) -> float | tuple[float, float]:
    """Scales are fractions of the source side in (0, 1]: frames are only ever shrunk. A ``(height, width)``
    pair scales the sides apart; an equal pair is the one scale."""
    if isinstance(scale, (tuple, list)) and len(scale) == 2:
        sy, sx = (check_scale(name, s) for s in scale)
        return sy if sy == sx else (sy, sx)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and 0 < scale <= 1):
        raise InputError(name, scale, "use a fraction of the source side in (0, 1], e.g. 0.5 for half size, "
                                      "or a (height, width) pair of them")
    return float(scale)


def scale_text(scale: float | Sequence[float] | None) -> str:
    """``0.5`` -> ``"0.5"``, ``(0.25, 0.5)`` -> ``"0.25x0.5"`` (height x width): how labels and tables name a probe scale."""
    if scale is None:
        return "-"
    return "x".join(f"{s:g}" for s in scale) if isinstance(scale, (tuple, list)) else f"{scale:g}"


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


# ---- the official GridProbe probe resolutions (qwen-vl-utils 0.0.14, vision_process.py) --------------------

# "official": eval/two_stage_eval.py's --max_video_pixels_probe 0, i.e. qwen-vl-utils' default video budget;
# "official_crossmodel": eval/two_stage_eval_crossmodel.py's default 50176 px, a square resize.
OFFICIAL_PROBE_PIXELS = {"official": 0, "official_crossmodel": 50176}
QWEN_IMAGE_MIN_TOKENS, QWEN_IMAGE_MAX_TOKENS = 4, 16384  # IMAGE_MIN_TOKEN_NUM / IMAGE_MAX_TOKEN_NUM
QWEN_VIDEO_MIN_TOKENS, QWEN_VIDEO_MAX_TOKENS = 128, 768  # VIDEO_MIN_TOKEN_NUM / VIDEO_MAX_TOKEN_NUM
QWEN_MODEL_SEQ_LEN = 128000  # MODEL_SEQ_LEN (an environment override there; fixed here)
QWEN_FRAME_FACTOR = 2
QWEN_DEFAULT_PATCH = 14  # process_vision_info's image_patch_size when the processor names none


def qwen_smart_resize(height: int, width: int, factor: int, min_pixels: float, max_pixels: float) -> tuple[int, int]:
    """qwen-vl-utils' ``smart_resize``: sides rounded to multiples of ``factor``, area brought into
    [min_pixels, max_pixels] keeping the aspect ratio as closely as the rounding allows."""
    if max(height, width) / min(height, width) > 200:
        raise InputError("frames", f"{width}x{height}", "an aspect ratio above 200 is refused by qwen-vl-utils")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h, w = math.floor(height / beta / factor) * factor, math.floor(width / beta / factor) * factor
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


def official_probe_sizes(height: int, width: int, n_frames: int, mode: str, patch_size: int | None = None) -> list[tuple[int, int]]:
    """The ``(H, W)`` steps GridProbe's official code takes a probe's frames through, last = final size.

    The official ``build_inputs`` hands qwen-vl-utils a list of frames (plus ``resized_height`` =
    ``resized_width`` = ``max(56, int(sqrt(px)) // 28 * 28)`` when a pixel cap ``px`` > 0 is set) and
    the processor then runs with ``do_resize=False``. qwen-vl-utils resizes each frame in
    ``fetch_image`` (image budget, or the requested square), then the stacked frames in
    ``fetch_video`` (the video budget per frame: ``max(min(768 f², total / n * 2), 1.05 * 128 f²)``
    with the list padded to an even ``n``, or the requested square again), ``f = 2 * patch_size``.
    """
    if mode not in OFFICIAL_PROBE_PIXELS:
        raise InputError("probe_resolution", mode, f"use one of {', '.join(OFFICIAL_PROBE_PIXELS)}")
    factor = 2 * int(patch_size or QWEN_DEFAULT_PATCH)
    px = OFFICIAL_PROBE_PIXELS[mode]
    if px > 0:
        side = max(56, int(math.sqrt(px)) // 28 * 28)
        square = qwen_smart_resize(side, side, factor, QWEN_IMAGE_MIN_TOKENS * factor**2, QWEN_IMAGE_MAX_TOKENS * factor**2)
        return [square, qwen_smart_resize(*square, factor, QWEN_IMAGE_MIN_TOKENS * factor**2, QWEN_IMAGE_MAX_TOKENS * factor**2)]
    first = qwen_smart_resize(height, width, factor, QWEN_IMAGE_MIN_TOKENS * factor**2, QWEN_IMAGE_MAX_TOKENS * factor**2)
    n = math.ceil(n_frames / QWEN_FRAME_FACTOR) * QWEN_FRAME_FACTOR
    min_pixels = QWEN_VIDEO_MIN_TOKENS * factor**2
    total = QWEN_MODEL_SEQ_LEN * factor**2 * 0.9
    max_pixels = max(min(QWEN_VIDEO_MAX_TOKENS * factor**2, total / n * QWEN_FRAME_FACTOR), int(min_pixels * 1.05))
    return [first, qwen_smart_resize(*first, factor, min_pixels, max_pixels)]


def official_resize(frames: np.ndarray, steps: Sequence[tuple[int, int]]) -> np.ndarray:
    """Frames resized the way qwen-vl-utils resizes a frame list: PIL's default (bicubic) resize to
    ``steps[0]`` per frame, then torchvision's bicubic antialiased resize of the stack to ``steps[1]``
    (uint8 in, so rounded back to uint8 as torchvision does; the official then casts to float)."""
    import torch
    from PIL import Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    (h1, w1), (h2, w2) = steps
    first = np.stack([np.asarray(Image.fromarray(f).resize((w1, h1))) for f in frames])
    video = torch.from_numpy(first).permute(0, 3, 1, 2)
    video = TF.resize(video, [h2, w2], interpolation=InterpolationMode.BICUBIC, antialias=True)
    return np.ascontiguousarray(video.permute(0, 2, 3, 1).numpy())
