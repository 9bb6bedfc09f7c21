"""Chroma upsampling guided by the luma: what a file's subsampled colour planes allow back.

H.264 / HEVC / VP9 in yuv420p (nearly every video a user has) and most JPEGs store colour at half
the resolution in each direction and brightness at full resolution. A decoder's plain upsampling
(bilinear, as swscale and decord do) spreads each colour over 2x2 pixels, so a 6-pixel object's
colour bleeds into its neighbours while its shape is still sharp in the luma. ``restore_chroma``
upsamples colour the edge-aware way instead: joint bilateral upsampling (Kopf et al., 2007). Each
pixel takes the colour of the nearby half-resolution blocks whose mean luma is like its own, so an
object's pixels take the colour of its pure blocks and not of the mixed ones on its edge [PROPOSED:
the sigmas chosen on worldgen VAL clips written at CRF 18; PSNR to the raw frames 31.0 dB plain,
34.0 with a luma-guided filter, 36.6 here: docs/history/user_path.md].

OpenCV's joint bilateral filter lives in opencv-contrib (``cv2.ximgproc``), which the stack does not
ship, and filters at one resolution; the upsampling is nine shifted weights, written here.

    frames = Video("clip.mp4", chroma="guided").get_frames(range(8))   # what Video does with it
    frame = restore_chroma(decoded_frame)                               # (H, W, 3) or (T, H, W, 3)
"""

from __future__ import annotations

import cv2
import numpy as np

from core.errors import InputError

CHROMA_MODES = ("auto", "plain", "guided")
SIGMA_RANGE = 8.0  # luma levels: a block this much brighter or darker than the pixel counts e^-1/2 as much
SIGMA_SPACE = 1.0  # half-resolution blocks


def subsampled(pix_fmt: str | None) -> bool:
    """Whether an FFmpeg pixel format stores chroma below the luma's resolution (4:2:0, 4:2:2, 4:1:1, NV12...)."""
    name = (pix_fmt or "").lower()
    return any(tag in name for tag in ("420", "422", "411", "410", "440", "nv12", "nv21", "nv16"))


def restore_chroma(frames: np.ndarray, sigma_range: float = SIGMA_RANGE, sigma_space: float = SIGMA_SPACE) -> np.ndarray:
    """RGB uint8 ``(H, W, 3)`` or ``(T, H, W, 3)`` with each frame's colour upsampled again, along its luma."""
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim not in (3, 4) or frames.shape[-1] != 3:
        raise InputError("frames", f"array {frames.shape} {frames.dtype}", "pass RGB uint8 (H, W, 3) or (T, H, W, 3)")
    if frames.ndim == 3:
        return restore_chroma(frames[None], sigma_range, sigma_space)[0]
    return np.stack([_upsample(frame, sigma_range, sigma_space) for frame in frames])


def _upsample(frame: np.ndarray, sigma_range: float, sigma_space: float) -> np.ndarray:
    ycc = cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2YCrCb).astype(np.float32)
    h, w = ycc.shape[:2]
    hh, hw = (h + 1) // 2, (w + 1) // 2
    even = np.pad(ycc, ((0, 2 * hh - h), (0, 2 * hw - w), (0, 0)), mode="edge")
    half = even.reshape(hh, 2, hw, 2, 3).mean((1, 3))  # the stored half-resolution planes, and each block's mean luma
    half = np.pad(half, ((1, 1), (1, 1), (0, 0)), mode="edge")
    yy, xx = np.mgrid[0:h, 0:w]
    cy, cx = (yy + 0.5) / 2 - 0.5, (xx + 0.5) / 2 - 0.5  # each pixel's centre on the half-resolution grid
    luma = ycc[..., 0]
    total, weight = np.zeros((h, w, 2), np.float32), np.zeros((h, w), np.float32)
    for dy in (-1, 0, 1):  # the 3x3 blocks around the pixel's own
        for dx in (-1, 0, 1):
            by, bx = yy // 2 + dy, xx // 2 + dx
            block = half[by + 1, bx + 1]
            wgt = np.exp(-((by - cy) ** 2 + (bx - cx) ** 2) / (2 * sigma_space ** 2)
                         - (luma - block[..., 0]) ** 2 / (2 * sigma_range ** 2)) + 1e-12
            total += wgt[..., None] * block[..., 1:]
            weight += wgt
    ycc[..., 1:] = total / weight[..., None]
    return cv2.cvtColor(np.clip(ycc, 0, 255).round().astype(np.uint8), cv2.COLOR_YCrCb2RGB)


def check_mode(chroma: str) -> str:
    if chroma not in CHROMA_MODES:
        raise InputError("chroma", chroma, f"choose one of {CHROMA_MODES}: 'guided' upsamples a file's colour along its luma "
                                           "edges, 'plain' as the decoder does, 'auto' lets the pipeline choose")
    return chroma


__all__ = ["CHROMA_MODES", "check_mode", "restore_chroma", "subsampled"]
