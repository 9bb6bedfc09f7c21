"""Skeleton renders a renderer is conditioned on (AnyMotion spec b.5): OpenPose-style limb maps and
per-joint Gaussian heatmaps of COCO-17 keypoints. Pure numpy / OpenCV, deterministic, no model.

Keypoints are ``float32`` ``(..., 17, 3)`` ``(x, y, v)`` in pixels, as everywhere (``core.keypoints``):
``(17, 3)`` is one person on one image, ``(T, 17, 3)`` one person per frame, ``(T, P, 17, 3)``
several persons per frame. A joint is drawn when ``v >= min_visibility`` (default 1: every labelled
joint, occluded ones included; pass 2 for visible ones only).

Pixel convention: pixel ``(i, j)`` covers ``[j, j + 1) x [i, i + 1)``, so a joint at ``(x, y)`` lands
in pixel ``(floor(y), floor(x))``, as the synthetic world's visibility rule reads it
(``worldgen.world``). Heatmaps are evaluated at pixel centres ``(j + 0.5, i + 0.5)``.

``render_limbs`` follows the convention ControlNet-OpenPose models were trained on (controlnet_aux's
body drawing): COCO-17 is mapped to OpenPose-18 (``core.keypoints.to_openpose18``: the neck is the
shoulders' midpoint), each of OpenPose's 17 drawn limbs has its own fixed colour, limbs are drawn at
60% brightness and joints on top as dots at full brightness of their joint's colour, on black. A limb
is drawn only when both its ends are drawn.
"""

from __future__ import annotations

import cv2
import numpy as np

from core.errors import InputError
from core.keypoints import to_openpose18

# OpenPose-18's 18 joint colours (RGB); limb k is drawn in colour k.
OPENPOSE_COLORS = (
    (255, 0, 0), (255, 85, 0), (255, 170, 0), (255, 255, 0), (170, 255, 0), (85, 255, 0), (0, 255, 0),
    (0, 255, 85), (0, 255, 170), (0, 255, 255), (0, 170, 255), (0, 85, 255), (0, 0, 255), (85, 0, 255),
    (170, 0, 255), (255, 0, 255), (255, 0, 170), (255, 0, 85),
)  # fmt: skip
# The 17 limbs OpenPose draws, as 0-based OpenPose-18 index pairs: neck to shoulders, arms, neck to
# hips, legs, neck to nose, nose to eyes to ears.
OPENPOSE_LIMBS = (
    (1, 2), (1, 5), (2, 3), (3, 4), (5, 6), (6, 7), (1, 8), (8, 9), (9, 10), (1, 11), (11, 12),
    (12, 13), (1, 0), (0, 14), (14, 16), (0, 15), (15, 17),
)  # fmt: skip
LIMB_BRIGHTNESS = 0.6
LIMB_COLORS = tuple(tuple(int(round(c * LIMB_BRIGHTNESS)) for c in OPENPOSE_COLORS[k]) for k in range(len(OPENPOSE_LIMBS)))

_SHIFT = 4  # cv2 fixed-point bits: joints are placed to 1/16 px


def _people(keypoints, name: str = "keypoints") -> tuple[np.ndarray, int]:
    """Keypoints as ``(T, P, 17, 3)`` float32, and the input's rank (2, 3 or 4)."""
    try:
        kp = np.asarray(keypoints, np.float32)
    except (TypeError, ValueError):
        raise InputError(name, type(keypoints).__name__, "pass COCO-17 keypoints: an array (17, 3), (T, 17, 3) or (T, P, 17, 3)") from None
    if kp.ndim not in (2, 3, 4) or kp.shape[-2:] != (17, 3):
        raise InputError(name, f"array of shape {kp.shape}", "expected COCO-17 (x, y, v) in pixels: (17, 3), (T, 17, 3) or (T, P, 17, 3)")
    if not np.isfinite(kp).all():
        raise InputError(name, "array with NaN or inf", "keypoints must be finite; mark a missing joint with v=0")
    rank = kp.ndim
    if rank == 2:
        kp = kp[None, None]
    elif rank == 3:
        kp = kp[:, None]
    return kp, rank


def _size(height, width) -> tuple[int, int]:
    try:
        h, w = int(height), int(width)
    except (TypeError, ValueError):
        raise InputError("height, width", (height, width), "pass the render's size in pixels") from None
    if h < 1 or w < 1 or h != height or w != width:
        raise InputError("height, width", (height, width), "pass positive integer sizes in pixels")
    return h, w


def default_thickness(height: int, width: int) -> int:
    """Limb width of ``render_limbs``: 1/64 of the shorter side (8 px at 512, as OpenPose's ``stickwidth`` 4)."""
    return max(1, int(round(min(height, width) / 64)))


def render_limbs(keypoints, height: int, width: int, thickness: int | None = None, radius: int | None = None,
                 min_visibility: float = 1.0) -> np.ndarray:
    """OpenPose-style skeleton map(s): uint8 RGB ``(H, W, 3)`` for ``(17, 3)`` keypoints, else ``(T, H, W, 3)``.

    ``thickness``: limb width in pixels (default ``default_thickness``); ``radius``: joint dot radius
    (default half the thickness, rounded up). Persons are drawn in order, later ones on top.
    """
    kp, rank = _people(keypoints)
    h, w = _size(height, width)
    thickness = default_thickness(h, w) if thickness is None else thickness
    if not isinstance(thickness, (int, np.integer)) or isinstance(thickness, bool) or thickness < 1:
        raise InputError("thickness", thickness, "pass a whole number of pixels >= 1")
    radius = max(1, (int(thickness) + 1) // 2) if radius is None else radius
    if not isinstance(radius, (int, np.integer)) or isinstance(radius, bool) or radius < 1:
        raise InputError("radius", radius, "pass a whole number of pixels >= 1")
    op = to_openpose18(kp)  # (T, P, 18, 3); confidence 1 = visible, 0.5 = occluded, 0 = absent
    vis = np.select([op[..., 2] >= 1.0, op[..., 2] > 0], [2.0, 1.0], 0.0)
    drawn = vis >= min_visibility
    # cv2 puts integer coordinate j at pixel j's centre; ours is at j + 0.5
    fixed = np.round((op[..., :2].astype(np.float64) - 0.5) * (1 << _SHIFT))
    fixed = np.clip(fixed, -(1 << 24), 1 << 24).astype(np.int64)  # far-off joints stay far off, without overflow
    out = np.zeros((len(kp), h, w, 3), np.uint8)
    for t in range(len(kp)):
        canvas = out[t]
        for p in range(kp.shape[1]):
            pts, on = fixed[t, p], drawn[t, p]
            for k, (a, b) in enumerate(OPENPOSE_LIMBS):
                if on[a] and on[b]:
                    cv2.line(canvas, tuple(int(v) for v in pts[a]), tuple(int(v) for v in pts[b]), LIMB_COLORS[k], int(thickness), cv2.LINE_8, _SHIFT)
            for j in range(18):
                if on[j]:
                    cv2.circle(canvas, tuple(int(v) for v in pts[j]), int(radius) << _SHIFT, OPENPOSE_COLORS[j], -1, cv2.LINE_8, _SHIFT)
    return out[0] if rank == 2 else out


def default_sigma(height: int, width: int) -> float:
    """Heatmap sigma of ``render_heatmaps``: 2% of the image diagonal (spec b.3)."""
    return 0.02 * float(np.hypot(height, width))


def render_heatmaps(keypoints, height: int, width: int, sigma: float | None = None, min_visibility: float = 1.0) -> np.ndarray:
    """Per-joint Gaussian heatmaps, float32 ``(T, 17, H, W)`` (``(17, H, W)`` for ``(17, 3)`` keypoints).

    Channel ``j`` is ``exp(-d^2 / (2 sigma^2))`` with ``d`` the distance from a pixel's centre to joint
    ``j``, so it peaks (at 1 when the joint sits on a pixel centre) in the joint's pixel; it is all zero
    when the joint is not drawn (``v < min_visibility``). With several persons a channel is the
    maximum over them. ``sigma`` in pixels (default ``default_sigma``: 2% of the diagonal).
    """
    kp, rank = _people(keypoints)
    h, w = _size(height, width)
    sigma = default_sigma(h, w) if sigma is None else sigma
    try:
        sigma = float(sigma)
    except (TypeError, ValueError):
        raise InputError("sigma", sigma, "pass a positive number of pixels") from None
    if not np.isfinite(sigma) or sigma <= 0:
        raise InputError("sigma", sigma, "pass a positive number of pixels")
    out = np.zeros((len(kp), 17, h, w), np.float32)
    xs, ys = np.arange(w, dtype=np.float64) + 0.5, np.arange(h, dtype=np.float64) + 0.5
    inv = 1.0 / (2.0 * sigma * sigma)
    for t in range(len(kp)):
        for p in range(kp.shape[1]):
            for j in range(17):
                x, y, v = (float(c) for c in kp[t, p, j])
                if v < min_visibility:
                    continue
                # separable: exp(-(dx^2 + dy^2) k) = exp(-dx^2 k) * exp(-dy^2 k)
                gx, gy = np.exp(-((xs - x) ** 2) * inv), np.exp(-((ys - y) ** 2) * inv)
                np.maximum(out[t, j], np.outer(gy, gx).astype(np.float32), out=out[t, j])
    return out[0] if rank == 2 else out


POSE_MAP_CHANNELS = 20  # pose_maps: 3 limb-map channels + 17 joint heatmaps


def pose_maps(keypoints, height: int, width: int, min_visibility: float = 1.0) -> np.ndarray:
    """What a pose-guided renderer reads per frame (AnyMotion spec b.5): float32 ``(T, H, W, 20)`` (``(H, W, 20)``
    for ``(17, 3)``), the limb map in [0, 1] (3 channels: which limb by its colour) then the 17 joint heatmaps."""
    limbs = render_limbs(keypoints, height, width, min_visibility=min_visibility).astype(np.float32) / 255.0
    heat = np.moveaxis(render_heatmaps(keypoints, height, width, min_visibility=min_visibility), -3, -1)
    return np.concatenate([limbs, heat], -1)


__all__ = ["LIMB_COLORS", "POSE_MAP_CHANNELS", "pose_maps", "OPENPOSE_COLORS", "OPENPOSE_LIMBS", "default_sigma", "default_thickness", "render_heatmaps", "render_limbs"]
