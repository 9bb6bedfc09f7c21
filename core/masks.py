"""Mask formats: DAVIS palette PNG, COCO RLE (pycocotools) and per-object boolean stacks.

Convention: an id map is ``uint8`` ``(H, W)`` or ``(T, H, W)`` with 0 = background and
pixel value = object id; a stack is boolean ``(N, T, H, W)`` (or ``(N, H, W)``) with one
plane per object id.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.atomic import atomic_path
from core.errors import InputError, MediaError


def davis_palette() -> np.ndarray:
    """The DAVIS / PASCAL VOC 256-colour palette as ``(256, 3)`` uint8 (bit-interleaved labels)."""
    pal = np.zeros((256, 3), np.uint8)
    for i in range(256):
        c, r, g, b = i, 0, 0, 0
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        pal[i] = (r, g, b)
    return pal


def read_palette_png(path: str | Path) -> np.ndarray:
    """Read a palette (mode "P") PNG into an id map; pixel value = object id."""
    from core.images import open_image

    try:
        with open_image(path) as im:  # refuses an image over the pixel budget before decoding it
            if im.mode not in ("P", "L"):
                raise MediaError(path, f"mask PNG has mode {im.mode!r}", "expected a palette ('P') or greyscale ('L') PNG of object ids")
            return np.array(im, dtype=np.uint8)
    except (OSError, ValueError) as e:
        raise MediaError(path, f"cannot read mask PNG ({e})") from None


def write_palette_png(path: str | Path, id_map: np.ndarray, palette: np.ndarray | None = None) -> Path:
    """Write an ``(H, W)`` uint8 id map as a DAVIS palette PNG, atomically."""
    from PIL import Image

    id_map = np.asarray(id_map)
    if id_map.ndim != 2 or id_map.dtype != np.uint8:
        raise InputError("id_map", f"array {id_map.shape} {id_map.dtype}", "pass an (H, W) uint8 map of object ids")
    im = Image.fromarray(id_map, mode="P")
    im.putpalette((davis_palette() if palette is None else palette).reshape(-1).tolist())
    with atomic_path(path) as tmp:
        im.save(tmp, format="PNG")
    return Path(path)


def read_mask_folder(folder: str | Path) -> np.ndarray:
    """Read a DAVIS Annotations folder of palette PNGs into a ``(T, H, W)`` id map, in name order."""
    files = sorted(Path(folder).glob("*.png"))
    if not files:
        raise MediaError(folder, "no .png masks in the folder")
    return np.stack([read_palette_png(f) for f in files])


def write_mask_folder(folder: str | Path, id_maps: np.ndarray, start: int = 0) -> list[Path]:
    """Write ``(T, H, W)`` id maps as ``00000.png, 00001.png, ...`` (DAVIS naming)."""
    folder = Path(folder)
    return [write_palette_png(folder / f"{start + t:05d}.png", m) for t, m in enumerate(np.asarray(id_maps))]


def ids_to_stack(id_map: np.ndarray, ids: list[int] | None = None) -> tuple[np.ndarray, list[int]]:
    """Split an id map into a boolean stack, one plane per id (sorted non-zero ids by default)."""
    id_map = np.asarray(id_map)
    if ids is None:
        ids = [int(i) for i in np.unique(id_map) if i != 0]
    return np.stack([id_map == i for i in ids]) if ids else np.zeros((0, *id_map.shape), bool), ids


def stack_to_ids(stack: np.ndarray, ids: list[int] | None = None) -> np.ndarray:
    """Merge a boolean stack into an id map; where planes overlap the later plane wins."""
    stack = np.asarray(stack, bool)
    ids = list(range(1, len(stack) + 1)) if ids is None else ids
    if len(ids) != len(stack):
        raise InputError("ids", ids, f"give one id per plane ({len(stack)} planes)")
    if any(not 0 < i < 256 for i in ids):
        raise InputError("ids", ids, "object ids are 1..255 in a uint8 id map")
    out = np.zeros(stack.shape[1:], np.uint8)
    for plane, i in zip(stack, ids):
        out[plane] = i
    return out


def rle_encode(mask: np.ndarray) -> dict:
    """COCO RLE of a boolean ``(H, W)`` mask, with ``counts`` as a JSON-safe str (pycocotools)."""
    from pycocotools import mask as mask_utils

    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise InputError("mask", f"array of shape {mask.shape}", "encode one (H, W) mask at a time")
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(s) for s in rle["size"]], "counts": rle["counts"].decode("ascii")}


def rle_decode(rle: dict) -> np.ndarray:
    """Decode a COCO RLE (compressed str/bytes counts, or uncompressed list counts) to bool ``(H, W)``."""
    from pycocotools import mask as mask_utils

    if not isinstance(rle, dict) or "size" not in rle or "counts" not in rle:
        raise InputError("rle", rle, "expected a dict with 'size' and 'counts'")
    h, w = rle["size"]
    counts = rle["counts"]
    if isinstance(counts, list):  # uncompressed RLE, as in COCO 'iscrowd' annotations
        rle = mask_utils.frPyObjects({"size": [h, w], "counts": counts}, h, w)
    elif isinstance(counts, str):
        rle = {"size": [h, w], "counts": counts.encode("ascii")}
    return mask_utils.decode(rle).astype(bool)


def mask_to_box(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    """Tight ``xyxy`` box (exclusive max) of a boolean mask, or None if empty."""
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return None
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1
