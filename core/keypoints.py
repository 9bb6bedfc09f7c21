"""Keypoints: COCO-17 inside, converters from MediaPipe-33 and OpenPose-18, COCO JSON in and out.

Arrays are ``float32`` ``(..., 17, 3)`` holding ``(x, y, v)`` in pixels. ``v`` keeps COCO's meaning:
0 = absent / not labelled, 1 = labelled but occluded, 2 = visible.
"""

from __future__ import annotations

import numpy as np

from core.errors import InputError

COCO17_NAMES = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear",
    "left_shoulder", "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist",
    "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle", "right_ankle",
)  # fmt: skip

# Limbs as 0-based index pairs (COCO's 1-based "skeleton" field, minus one).
COCO17_SKELETON = (
    (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7),
    (6, 8), (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6),
)  # fmt: skip

# Left/right swap permutation, for horizontal flips.
COCO17_FLIP = (0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15)

# MediaPipe Pose landmark index of each COCO-17 joint.
_MEDIAPIPE33_TO_COCO17 = (0, 2, 5, 7, 8, 11, 12, 13, 14, 15, 16, 23, 24, 25, 26, 27, 28)

OPENPOSE18_NAMES = (
    "nose", "neck", "right_shoulder", "right_elbow", "right_wrist", "left_shoulder", "left_elbow",
    "left_wrist", "right_hip", "right_knee", "right_ankle", "left_hip", "left_knee", "left_ankle",
    "right_eye", "left_eye", "right_ear", "left_ear",
)  # fmt: skip
# OpenPose-18 index of each COCO-17 joint (OpenPose adds "neck" at 1).
_OPENPOSE18_TO_COCO17 = (0, 15, 14, 17, 16, 5, 2, 6, 3, 7, 4, 11, 8, 12, 9, 13, 10)


def _check(kp: np.ndarray, n: int, name: str) -> np.ndarray:
    kp = np.asarray(kp, np.float32)
    if kp.ndim < 2 or kp.shape[-2:] != (n, 3):
        raise InputError(name, f"array of shape {kp.shape}", f"expected (..., {n}, 3)")
    return kp


def from_mediapipe33(landmarks: np.ndarray, width: int, height: int, min_visibility: float = 0.5) -> np.ndarray:
    """MediaPipe Pose ``(..., 33, 3|4)`` normalised landmarks (x, y, [z,] visibility) to COCO-17 pixels.

    A landmark whose visibility reaches ``min_visibility`` is visible (v=2); below it, occluded (v=1).
    """
    lm = np.asarray(landmarks, np.float32)
    if lm.ndim < 2 or lm.shape[-2] != 33 or lm.shape[-1] not in (3, 4):
        raise InputError("landmarks", f"array of shape {lm.shape}", "expected MediaPipe (..., 33, 4) or (..., 33, 3)")
    sel = lm[..., _MEDIAPIPE33_TO_COCO17, :]
    out = np.empty(sel.shape[:-1] + (3,), np.float32)
    out[..., 0] = sel[..., 0] * width
    out[..., 1] = sel[..., 1] * height
    out[..., 2] = np.where(sel[..., -1] >= min_visibility, 2.0, 1.0)
    return out


def from_openpose18(kp: np.ndarray) -> np.ndarray:
    """OpenPose-18 ``(..., 18, 3)`` (x, y, confidence) to COCO-17; confidence 0 means absent.

    Confidence >= 0.75 maps to visible (2), anything else above 0 to occluded (1), so the
    round trip through :func:`to_openpose18` is exact.
    """
    kp = _check(kp, 18, "kp")
    sel = kp[..., _OPENPOSE18_TO_COCO17, :].copy()
    c = sel[..., 2]
    sel[..., 2] = np.where(c >= 0.75, 2.0, np.where(c > 0, 1.0, 0.0))
    sel[sel[..., 2] == 0, :2] = 0
    return sel


def to_openpose18(kp: np.ndarray) -> np.ndarray:
    """COCO-17 to OpenPose-18; the neck is the shoulders' midpoint when both are present."""
    kp = _check(kp, 17, "kp")
    out = np.zeros(kp.shape[:-2] + (18, 3), np.float32)
    out[..., _OPENPOSE18_TO_COCO17, :2] = kp[..., :2]
    out[..., _OPENPOSE18_TO_COCO17, 2] = np.select([kp[..., 2] >= 2, kp[..., 2] > 0], [1.0, 0.5], 0.0)
    ls, rs = kp[..., 5, :], kp[..., 6, :]
    both = (ls[..., 2] > 0) & (rs[..., 2] > 0)
    out[..., 1, :2] = np.where(both[..., None], (ls[..., :2] + rs[..., :2]) / 2, 0)
    out[..., 1, 2] = np.where(both, np.minimum(out[..., 5, 2], out[..., 2, 2]), 0)
    return out


def from_coco_json(flat: list[float]) -> np.ndarray:
    """A COCO annotation's ``keypoints`` list ``[x1, y1, v1, ...]`` (51 numbers) to ``(17, 3)``."""
    if len(flat) != 51:
        raise InputError("keypoints", f"list of {len(flat)} numbers", "COCO-17 keypoints have 51 numbers (x, y, v) x 17")
    return np.asarray(flat, np.float32).reshape(17, 3)


def to_coco_json(kp: np.ndarray) -> list[float | int]:
    """``(17, 3)`` back to COCO's flat list; integral values are written as ints, as COCO does."""
    kp = _check(kp, 17, "kp")
    if kp.ndim != 2:
        raise InputError("kp", f"array of shape {kp.shape}", "convert one (17, 3) person at a time")
    return [int(x) if float(x).is_integer() else float(x) for x in kp.reshape(-1)]


def keypoints_box(kp: np.ndarray) -> tuple[float, float, float, float] | None:
    """``xyxy`` box around the present keypoints of one ``(17, 3)`` person, or None."""
    kp = _check(kp, 17, "kp")
    present = kp[kp[:, 2] > 0]
    if len(present) == 0:
        return None
    return float(present[:, 0].min()), float(present[:, 1].min()), float(present[:, 0].max()), float(present[:, 1].max())
