"""Keypoints: COCO-17 inside, converters from MediaPipe-33 and OpenPose-18, COCO JSON and planner text in and out.

Arrays are ``float32`` ``(..., 17, 3)`` holding ``(x, y, v)`` in pixels. ``v`` keeps COCO's meaning:
0 = absent / not labelled, 1 = labelled but occluded, 2 = visible.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

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


# ---- skeletons as text (a planner's prompt and answer; specs/anymotion.md b.3) ----------------------------

SKELETON_OPEN, SKELETON_CLOSE = "<skeleton>", "</skeleton>"
_SKELETON_BLOCK = re.compile(re.escape(SKELETON_OPEN) + r"(.*?)" + re.escape(SKELETON_CLOSE), re.DOTALL)
_SKELETON_ENTRY = re.compile(r"f(\d+)\s*:\s*(\[[\[\]\d,\s+\-]*\])")


def _check_size(width: int, height: int, bins: int) -> None:
    for name, v in (("width", width), ("height", height), ("bins", bins)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(name, v, "pass a positive integer")


def _excerpt(text: str, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def keypoints_to_text(kp: np.ndarray, width: int, height: int, bins: int = 1000,
                      frames: Sequence[int] | None = None) -> str:
    """COCO-17 keyframes ``(K, 17, 3)`` in pixels as planner text (spec b.3, Qwen2.5-VL grounding style).

    Layout, one line per keyframe, joints in ``COCO17_NAMES`` order, no spaces inside a line::

        <skeleton>
        f0: [[512,210,2],[530,195,2],[-1,-1,0],...]
        f12: [[514,208,2],...]
        </skeleton>

    ``f{i}`` is the keyframe's frame index (``frames``; default ``0..K-1``). ``x, y`` are integers in
    ``[0, bins)``: the bin of ``x / width`` (``y / height``), a joint outside the image clamped to the border
    bin. ``v`` is kept as 0 / 1 / 2 (any ``v > 0`` counts as labelled and is rounded into 1..2); an
    unlabelled joint (``v <= 0``) is written ``[-1,-1,0]``.
    ``text_to_keypoints`` decodes to the bin centres, so a joint inside the image comes back within
    ``0.5 * side / bins`` pixels and re-encoding the decoded keypoints gives the same text.
    """
    _check_size(width, height, bins)
    kp = _check(kp, 17, "kp")
    if kp.ndim == 2:
        kp = kp[None]
    if kp.ndim != 3 or len(kp) < 1:
        raise InputError("kp", f"array of shape {kp.shape}", "pass keyframes shaped (K, 17, 3)")
    if not np.isfinite(kp).all():
        raise InputError("kp", "non-finite values", "keypoints must be finite")
    frames = list(range(len(kp))) if frames is None else [int(f) for f in frames]
    if len(frames) != len(kp) or min(frames) < 0 or len(set(frames)) != len(frames):
        raise InputError("frames", frames, f"pass {len(kp)} distinct non-negative frame indices, one per keyframe")
    # v > 0 is labelled (the package's convention), written as COCO's 1 (occluded) or 2 (visible)
    v = np.where(kp[..., 2] > 0, np.clip(np.rint(kp[..., 2]), 1, 2), 0).astype(int)
    qx = np.clip(np.floor(kp[..., 0] / width * bins), 0, bins - 1).astype(int)
    qy = np.clip(np.floor(kp[..., 1] / height * bins), 0, bins - 1).astype(int)
    lines = []
    for f, xs, ys, vs in zip(frames, qx, qy, v):
        joints = ",".join(f"[{x},{y},{vv}]" if vv > 0 else "[-1,-1,0]" for x, y, vv in zip(xs, ys, vs))
        lines.append(f"f{f}: [{joints}]")
    return "\n".join([SKELETON_OPEN, *lines, SKELETON_CLOSE])


def parse_skeleton_text(text: str, width: int, height: int, bins: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """The first ``<skeleton>...</skeleton>`` block of ``text`` (``keypoints_to_text``'s layout) as
    ``(frame indices (K,) int64, keypoints (K, 17, 3) float32 pixels)``, sorted by frame index.

    Coordinates decode to bin centres; ``[-1,-1,0]`` (any joint with ``v == 0``) decodes to ``(0, 0, 0)``.
    Raises ``InputError("skeleton", excerpt, fix)`` for anything malformed: no block, text other than
    ``f{i}: [...]`` entries inside it, not 17 joints of 3 integers, ``v`` outside 0 / 1 / 2, a labelled
    joint outside ``[0, bins)``, a repeated frame index.
    """
    _check_size(width, height, bins)
    if not isinstance(text, str):
        raise InputError("skeleton", type(text).__name__, "pass the skeleton text as a string")
    block = _SKELETON_BLOCK.search(text)
    if block is None:
        raise InputError("skeleton", _excerpt(text), f"wrap the keyframes in {SKELETON_OPEN}...{SKELETON_CLOSE}")
    body = block.group(1)
    entries = list(_SKELETON_ENTRY.finditer(body))
    leftover = _SKELETON_ENTRY.sub("", body)
    if not entries or leftover.strip(" \t\r\n;"):
        bad = leftover.strip() or body
        raise InputError("skeleton", _excerpt(bad), "write one 'f{frame}: [[x,y,v], ...17 joints]' line per keyframe")
    frames, out = [], []
    for m in entries:
        try:
            joints = json.loads(m.group(2))
        except ValueError:
            raise InputError("skeleton", _excerpt(m.group(0)), "each keyframe is a JSON list of 17 [x,y,v] integer triples") from None
        if (not isinstance(joints, list) or len(joints) != 17
                or not all(isinstance(j, list) and len(j) == 3 and all(type(c) is int for c in j) for j in joints)):
            raise InputError("skeleton", _excerpt(m.group(0)), "each keyframe needs exactly 17 [x,y,v] integer triples")
        rows = np.zeros((17, 3), np.float32)
        for i, (x, y, v) in enumerate(joints):
            if v not in (0, 1, 2):
                raise InputError("skeleton", f"f{m.group(1)} {COCO17_NAMES[i]} v={v}", "v must be 0, 1 or 2")
            if v == 0:
                continue
            if not (0 <= x < bins and 0 <= y < bins):
                raise InputError("skeleton", f"f{m.group(1)} {COCO17_NAMES[i]} [{x},{y},{v}]",
                                 f"labelled coordinates are integers in [0, {bins}); write [-1,-1,0] for a joint not seen")
            rows[i] = ((x + 0.5) / bins * width, (y + 0.5) / bins * height, v)
        frames.append(int(m.group(1)))
        out.append(rows)
    if len(set(frames)) != len(frames):
        raise InputError("skeleton", f"frames {frames}", "write each keyframe once")
    order = np.argsort(frames, kind="stable")
    return np.asarray(frames, np.int64)[order], np.stack(out)[order]


def text_to_keypoints(text: str, width: int, height: int, bins: int = 1000) -> np.ndarray:
    """``keypoints_to_text``'s inverse: the keyframes ``(K, 17, 3)`` in pixels, in frame order (see
    ``parse_skeleton_text``, which also returns the frame indices)."""
    return parse_skeleton_text(text, width, height, bins)[1]
