"""Pictures of a latent-reasoning answer: each slot's map over the image, and the region the slots found."""

from __future__ import annotations

import cv2
import numpy as np

from core.frames import resize_frame
from core.overlay import add_caption_band, contact_sheet

SIDE = 320  # the longer side of each tile


def _shown(image: np.ndarray) -> tuple[np.ndarray, float]:
    h, w = image.shape[:2]
    s = SIDE / max(h, w)
    return resize_frame(image, (max(1, round(h * s)), max(1, round(w * s)))), s


def overlay(image: np.ndarray, attention: np.ndarray, alpha: float = 0.55) -> np.ndarray:
    """The image under a heat map of one slot's ``(gh, gw)`` map (cells drawn as cells: no smoothing that
    would suggest a finer resolution than the model has), its peak cell outlined."""
    shown, _ = _shown(image)
    h, w = shown.shape[:2]
    a = attention / max(float(attention.max()), 1e-12)
    heat = cv2.applyColorMap(np.round(a * 255).astype(np.uint8), cv2.COLORMAP_INFERNO)[..., ::-1]
    heat = resize_frame(np.ascontiguousarray(heat), (h, w), "nearest")
    out = (shown * (1 - alpha) + heat * alpha).astype(np.uint8)
    gh, gw = attention.shape
    r, c = np.unravel_index(int(attention.argmax()), attention.shape)
    cv2.rectangle(out, (int(c * w / gw), int(r * h / gh)), (int((c + 1) * w / gw) - 1, int((r + 1) * h / gh) - 1), (0, 255, 255), 2)
    return out


def zoom(image: np.ndarray, region) -> np.ndarray:
    """The region (xyxy pixels) cut out and enlarged to the tile size (pixel-sharp)."""
    x0, y0, x1, y1 = (int(round(v)) for v in region)
    crop = image[max(0, y0) : max(y0 + 1, y1), max(0, x0) : max(x0 + 1, x1)]
    h, w = crop.shape[:2]
    s = SIDE / max(h, w)
    return resize_frame(crop, (max(1, round(h * s)), max(1, round(w * s))), "nearest" if s > 1 else "auto")


def _pad(tile: np.ndarray, h: int, w: int) -> np.ndarray:
    """``tile`` centred on a dark ``h x w`` panel (a wide or tall zoom keeps its aspect)."""
    out = np.full((h, w, 3), 24, np.uint8)
    th, tw = min(h, tile.shape[0]), min(w, tile.shape[1])
    y, x = (h - th) // 2, (w - tw) // 2
    out[y : y + th, x : x + tw] = tile[:th, :tw]
    return out


def slots_picture(out) -> np.ndarray:
    """[the image with the found region] [slot 1] ... [slot K] [the zoom], labelled, the answer below."""
    shown, s = _shown(out.image)
    framed = shown.copy()
    x0, y0, x1, y1 = (int(round(v * s)) for v in out.region)
    cv2.rectangle(framed, (x0, y0), (max(x0, x1 - 1), max(y0, y1 - 1)), (0, 255, 255), 2)
    tiles = [framed, *out.overlays(), out.zoom()]
    labels = ["image + region", *[f"slot {k + 1}" for k in range(len(out.attention))], "zoom"]
    h, w = max(t.shape[0] for t in tiles), max(t.shape[1] for t in tiles)
    sheet = contact_sheet(np.stack([_pad(t, h, w) for t in tiles]), columns=min(len(tiles), 6), labels=labels)
    p = out.posterior[out.answer]
    return add_caption_band(sheet, f"{out.question}  ->  {out.answer} (p = {p:.2f}) after {out.num_slots} latent slots")
