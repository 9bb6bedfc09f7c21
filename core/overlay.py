"""Overlays drawn onto RGB uint8 frames: masks, boxes, skeletons, captions.

Every function takes a single frame ``(H, W, 3)`` or a video ``(T, H, W, 3)`` and returns a new
array of the same shape; the input is never modified.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from core.errors import InputError
from core.keypoints import COCO17_SKELETON
from core.masks import davis_palette

_PALETTE = davis_palette()


def id_color(obj_id: int) -> tuple[int, int, int]:
    """The DAVIS palette colour of an object id, so overlays match mask PNGs."""
    return tuple(int(c) for c in _PALETTE[int(obj_id) % 256])


def _as_video(frames: np.ndarray, name: str = "frames") -> tuple[np.ndarray, bool]:
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim not in (3, 4) or frames.shape[-1] != 3:
        raise InputError(name, f"array {frames.shape} {frames.dtype}", "pass uint8 RGB (H, W, 3) or (T, H, W, 3)")
    single = frames.ndim == 3
    return (frames[None] if single else frames).copy(), single


def _per_frame(value, t: int, name: str):
    """Broadcast a per-video annotation to T frames (a list of length T is taken as-is)."""
    if isinstance(value, np.ndarray) and value.ndim >= 1 and len(value) == t and t > 1:
        return value
    if isinstance(value, list) and len(value) == t and t > 1:
        return value
    return [value] * t


def draw_masks(frames: np.ndarray, id_maps: np.ndarray, alpha: float = 0.5, contours: bool = True) -> np.ndarray:
    """Tint each object id with its palette colour; ``id_maps`` is ``(H, W)`` or ``(T, H, W)`` uint8."""
    video, single = _as_video(frames)
    maps = np.asarray(id_maps)
    maps = maps[None] if maps.ndim == 2 else maps
    if maps.shape[0] not in (1, len(video)) or maps.shape[1:] != video.shape[1:3]:
        raise InputError("id_maps", f"array {maps.shape}", f"one (H, W) map per frame, matching frames {video.shape[:3]}")
    for t, frame in enumerate(video):
        m = maps[t if len(maps) > 1 else 0]
        color = _PALETTE[m].astype(np.float32)
        fg = (m > 0)[..., None]
        frame[:] = np.where(fg, (1 - alpha) * frame + alpha * color, frame).astype(np.uint8)
        if contours:
            for obj in np.unique(m[m > 0]):
                cs, _ = cv2.findContours((m == obj).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
                cv2.drawContours(frame, cs, -1, (255, 255, 255), 1, cv2.LINE_AA)
    return video[0] if single else video


def draw_boxes(
    frames: np.ndarray,
    boxes: Sequence | np.ndarray,
    labels: Sequence[str] | None = None,
    ids: Sequence[int] | None = None,
    thickness: int = 2,
) -> np.ndarray:
    """Draw ``xyxy`` pixel boxes (the same boxes on every frame, or one list per frame)."""
    video, single = _as_video(frames)
    per = boxes if (not single and len(boxes) == len(video) and _is_nested(boxes)) else [boxes] * len(video)
    for frame, frame_boxes in zip(video, per):
        for k, box in enumerate(frame_boxes):
            if box is None:
                continue
            x0, y0, x1, y1 = (int(round(float(v))) for v in box)
            color = id_color(ids[k] if ids else k + 1)
            cv2.rectangle(frame, (x0, y0), (x1, y1), color, thickness, cv2.LINE_AA)
            if labels:
                _label(frame, str(labels[k]), (x0, max(0, y0 - 4)), color)
    return video[0] if single else video


def _is_nested(boxes) -> bool:
    first = next((b for b in boxes if b is not None), None)
    return first is not None and len(first) > 0 and np.ndim(first) == 2


def draw_skeleton(frames: np.ndarray, keypoints: np.ndarray, min_visibility: float = 1.0, radius: int = 3) -> np.ndarray:
    """Draw COCO-17 skeletons; ``keypoints`` is ``(17, 3)``, ``(P, 17, 3)``, ``(T, 17, 3)`` or ``(T, P, 17, 3)``.

    A 3-D array on a video is read as one person per frame. Joints with ``v < min_visibility`` are skipped.
    """
    video, single = _as_video(frames)
    kp = np.asarray(keypoints, np.float32)
    if kp.shape[-2:] != (17, 3):
        raise InputError("keypoints", f"array {kp.shape}", "expected (..., 17, 3) COCO-17 (x, y, v)")
    if kp.ndim == 2:
        kp = np.broadcast_to(kp[None, None], (len(video), 1, 17, 3))
    elif kp.ndim == 3:
        kp = kp[:, None] if (not single and len(kp) == len(video)) else np.broadcast_to(kp[None], (len(video), *kp.shape))
    scale = max(1, round(min(video.shape[1:3]) / 128))
    for frame, people in zip(video, kp):
        for p, person in enumerate(people):
            color = id_color(p + 1)
            for a, b in COCO17_SKELETON:
                if person[a, 2] >= min_visibility and person[b, 2] >= min_visibility:
                    pa, pb = tuple(int(round(v)) for v in person[a, :2]), tuple(int(round(v)) for v in person[b, :2])
                    cv2.line(frame, pa, pb, color, scale + 1, cv2.LINE_AA)
            for x, y, v in person:
                if v >= min_visibility:
                    cv2.circle(frame, (int(round(x)), int(round(y))), radius * scale, (255, 255, 255), -1, cv2.LINE_AA)
    return video[0] if single else video


def draw_caption(frames: np.ndarray, text: str, position: str = "bottom", scale: float | None = None) -> np.ndarray:
    """Write ``text`` on a dark band at the top or bottom of every frame, scaled to the frame size."""
    if position not in ("top", "bottom"):
        raise InputError("position", position, "use 'top' or 'bottom'")
    video, single = _as_video(frames)
    h, w = video.shape[1:3]
    scale = scale or max(0.3, min(w / 900, h / 300))
    thick = max(1, int(round(scale * 2)))
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thick)
    if tw > w - 8:  # shrink long text to fit rather than clip it
        scale *= (w - 8) / tw
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thick)
    band = th + base + 8
    y0 = 0 if position == "top" else h - band
    for frame in video:
        frame[y0 : y0 + band] = (frame[y0 : y0 + band] * 0.35).astype(np.uint8)
        cv2.putText(frame, text, (4, y0 + th + 4), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), thick, cv2.LINE_AA)
    return video[0] if single else video


def add_caption_band(image: np.ndarray, text: str) -> np.ndarray:
    """Append a dark band with ``text`` below an ``(H, W, 3)`` image, leaving the image uncovered."""
    image, _ = _as_video(image, "image")
    image = image[0]
    band_h = max(18, min(40, image.shape[1] // 40))
    band = np.zeros((band_h, image.shape[1], 3), np.uint8)
    return np.concatenate([image, draw_caption(band, text, "top", scale=band_h / 44)])


def _label(frame: np.ndarray, text: str, org: tuple[int, int], color) -> None:
    scale = max(0.35, frame.shape[1] / 1200)
    cv2.putText(frame, text, org, cv2.FONT_HERSHEY_SIMPLEX, scale, color, 1, cv2.LINE_AA)


def contact_sheet(frames: np.ndarray, columns: int = 8, labels: Sequence[str] | None = None) -> np.ndarray:
    """Tile ``(N, H, W, 3)`` frames into one image, ``columns`` wide, with optional labels."""
    video, _ = _as_video(frames)
    n, h, w = video.shape[:3]
    cols = max(1, min(columns, n))
    rows = -(-n // cols)
    sheet = np.full((rows * h, cols * w, 3), 255, np.uint8)
    for i, frame in enumerate(video):
        if labels:
            frame = draw_caption(frame, str(labels[i]), "top")
        r, c = divmod(i, cols)
        sheet[r * h : (r + 1) * h, c * w : (c + 1) * w] = frame
    return sheet
