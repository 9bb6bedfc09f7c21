"""Pictures of a GridProbe answer, as RGB uint8 arrays: the importance map as a heatmap with axes and
a colour bar, the chosen frames as a labelled strip, the answer posterior as a bar chart.

Text is drawn with DejaVu Sans where the system has it (most Linux installs; it covers accented and
Greek / Cyrillic letters), else Pillow's bundled font; no matplotlib. A glyph the font lacks shows
as a box, never an error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from core.errors import InputError
from core.frames import resize_frame

INK = (33, 33, 33)
MUTED = (115, 115, 115)
ANSWER = (214, 96, 20)  # the chosen option's bar
OTHER = (126, 156, 196)  # every other option's bar
TRACK = (236, 238, 242)  # the empty part of a bar


@lru_cache(maxsize=None)
def _font(size: int):
    try:
        return ImageFont.truetype("DejaVuSans.ttf", size)
    except OSError:
        pass
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: one fixed bitmap font
        return ImageFont.load_default()


def _text_size(text: str, size: int) -> tuple[int, int]:
    left, top, right, bottom = _font(size).getbbox(_drawable(text, size))
    return right - left, bottom - top


def _drawable(text: str, size: int) -> str:
    """``text``, or its ASCII stand-in where the font cannot take it (the old bitmap font is Latin-1 only)."""
    try:
        _font(size).getbbox(text)
        return text
    except UnicodeEncodeError:
        return text.encode("ascii", "replace").decode()


def _put(draw: ImageDraw.ImageDraw, xy: tuple[float, float], text: str, size: int, fill=INK, align: str = "left",
         valign: str = "top") -> None:
    """Write ``text`` with its box's left / centre / right edge at ``x`` and its top / middle at ``y``."""
    text = _drawable(text, size)
    left, top, right, bottom = _font(size).getbbox(text)
    x, y = xy
    x -= {"left": 0, "center": (right - left) / 2, "right": right - left}[align] + left
    y -= {"top": 0, "middle": (bottom - top) / 2}[valign] + top
    draw.text((round(x), round(y)), text, fill=fill, font=_font(size))


def _put_vertical(img: Image.Image, centre: tuple[float, float], text: str, size: int, fill=INK) -> None:
    """Write ``text`` turned 90° (reading upwards), centred on ``centre``."""
    w, h = _text_size(text, size)
    label = Image.new("RGB", (w + 2, h + 2), "white")
    _put(ImageDraw.Draw(label), (1, 1), text, size, fill)
    label = label.rotate(90, expand=True)
    img.paste(label, (round(centre[0] - label.width / 2), round(centre[1] - label.height / 2)))


def _fit(text: str, size: int, width: int) -> str:
    """``text`` cut (with ``...``) to fit ``width`` pixels."""
    if _text_size(text, size)[0] <= width:
        return text
    while text and _text_size(text + "...", size)[0] > width:
        text = text[:-1]
    return text.rstrip() + "..."


def _viridis(grey: np.ndarray) -> np.ndarray:
    """uint8 levels -> RGB viridis colours."""
    return cv2.applyColorMap(np.ascontiguousarray(grey, np.uint8), cv2.COLORMAP_VIRIDIS)[..., ::-1]


def _value(v: float) -> str:
    return f"{v:.3g}"


# ---------------------------------------------------------------------------------- the importance map


def heatmap_image(importance: np.ndarray, selected: Sequence[int] = (), cell_px: int | None = None,
                  caption: str | None = None) -> np.ndarray:
    """The K×K map as an RGB image: viridis from its minimum to its maximum, with a colour bar that
    gives the two values, row indices down the left, column indices along the top, and the selected
    pool positions (row-major cells) outlined. ``caption`` goes above as a title.

    A flat map is drawn at the middle of the colour scale rather than stretched from noise.
    """
    M = np.asarray(importance, dtype=np.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] < 1 or not np.isfinite(M).all():
        raise InputError("importance", f"array {M.shape}", "pass a finite K×K importance map")
    K = M.shape[0]
    cell = cell_px or max(12, 384 // K)
    tick, label = 12, 13
    lo, hi = float(M.min()), float(M.max())
    flat = hi - lo <= 1e-12
    norm = np.full_like(M, 0.5) if flat else (M - lo) / (hi - lo)
    side = K * cell
    step = _tick_step(K, cell, tick)

    title_h = _text_size(caption, label)[1] + 12 if caption else 0
    top = title_h + label + tick + 14  # "column", then its indices
    left = label + 8 + _text_size(str(K - 1), tick)[0] + 8  # "row", then its indices
    bar_x = left + side + 14
    bar_w = 14
    values = [_value(hi), _value(lo)]
    right = bar_x + bar_w + 6 + max(_text_size(v, tick)[0] for v in values) + 8 + label + 6
    img = Image.new("RGB", (right, top + side + 10), "white")
    draw = ImageDraw.Draw(img)
    if caption:
        _put(draw, (right / 2, 6), caption, label, align="center")

    cells = resize_frame(_viridis(np.round(norm * 255)), (side, side), "nearest")
    img.paste(Image.fromarray(np.ascontiguousarray(cells)), (left, top))
    width = min(4, max(2, cell // 8))
    for p in selected:
        r, c = divmod(int(p), K)
        x0, y0 = left + c * cell, top + r * cell
        draw.rectangle([x0, y0, x0 + cell - 1, y0 + cell - 1], outline=(0, 0, 0), width=width + 1)
        draw.rectangle([x0 + 1, y0 + 1, x0 + cell - 2, y0 + cell - 2], outline=(255, 255, 255), width=width)
    draw.rectangle([left - 1, top - 1, left + side, top + side], outline=MUTED)

    for i in range(0, K, step):
        centre = i * cell + cell / 2
        _put(draw, (left + centre, top - 6 - _text_size("0", tick)[1]), str(i), tick, MUTED, align="center")
        _put(draw, (left - 6, top + centre), str(i), tick, MUTED, align="right", valign="middle")
    _put(draw, (left + side / 2, title_h + 2), "column", label, align="center")
    _put_vertical(img, (label / 2 + 4, top + side / 2), "row", label)

    # the colour bar: the scale from the map's maximum (top) to its minimum (bottom)
    levels = np.full(side, 127.5) if flat else np.linspace(255, 0, side)
    bar = np.repeat(_viridis(np.round(levels)[:, None]), bar_w, axis=1)
    img.paste(Image.fromarray(np.ascontiguousarray(bar)), (bar_x, top))
    draw.rectangle([bar_x - 1, top - 1, bar_x + bar_w, top + side], outline=MUTED)
    _put(draw, (bar_x + bar_w + 6, top), values[0], tick, valign="top")
    _put(draw, (bar_x + bar_w + 6, top + side - _text_size(values[1], tick)[1]), values[1], tick)
    _put_vertical(img, (right - label / 2 - 5, top + side / 2), "importance", label)
    return np.array(img)


def _tick_step(K: int, cell: int, size: int) -> int:
    """Label every index when the cells are wide enough for the widest one, else every 2nd, 5th, ..."""
    need = _text_size(str(K - 1), size)[0] + 4
    for step in (1, 2, 5, 10, 20, 50):
        if step * cell >= need:
            return step
    return math.ceil(need / cell)


# ---------------------------------------------------------------------------------- the chosen frames


def frame_labels(indices: Sequence[int], times: Sequence[float] | None = None) -> list[str]:
    """``#412  13.7 s`` for each chosen frame (its source index and, when known, its time in seconds)."""
    if times is None:
        return [f"#{int(i)}" for i in indices]
    if len(times) != len(indices):
        raise InputError("times", f"{len(times)} times", f"give one time per frame ({len(indices)} frames)")
    return [f"#{int(i)}  {float(t):.1f} s" for i, t in zip(indices, times)]


def frame_strip(frames: np.ndarray, labels: Sequence[str] | None = None, columns: int = 8) -> np.ndarray:
    """The chosen frames side by side (``columns`` per row) on white, each with its label underneath."""
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) == 0:
        raise InputError("frames", f"array {frames.shape} {frames.dtype}", "pass uint8 RGB (N, H, W, 3), N >= 1")
    if labels is not None and len(labels) != len(frames):
        raise InputError("labels", f"{len(labels)} labels", f"give one label per frame ({len(frames)} frames)")
    if frames.shape[2] < 64:  # tiny frames: blown up (nearest) so a label fits under each
        k = -(-64 // frames.shape[2])
        frames = frames.repeat(k, axis=1).repeat(k, axis=2)
    n, h, w = frames.shape[:3]
    cols = max(1, min(columns, n))
    rows = -(-n // cols)
    gap = 6
    size = 13 if w >= 96 else 11
    lines = [_lines(str(t), size, w) for t in labels] if labels else []
    line_h = _text_size("#0 s", size)[1] + 3
    band = max(map(len, lines)) * line_h + 6 if labels else 0
    img = Image.new("RGB", (cols * w + (cols + 1) * gap, rows * (h + band) + (rows + 1) * gap), "white")
    draw = ImageDraw.Draw(img)
    for i, frame in enumerate(frames):
        r, c = divmod(i, cols)
        x, y = gap + c * (w + gap), gap + r * (h + band + gap)
        img.paste(Image.fromarray(np.ascontiguousarray(frame)), (x, y))
        for j, line in enumerate(lines[i] if labels else []):
            _put(draw, (x + w / 2, y + h + 4 + j * line_h), line, size, align="center")
    return np.array(img)


def _lines(label: str, size: int, width: int) -> list[str]:
    """A label on one line, or (too wide) one line per part between double spaces, each cut to fit."""
    if _text_size(label, size)[0] <= width:
        return [label]
    return [_fit(part, size, width) for part in label.split("  ") if part]


# ---------------------------------------------------------------------------------- the posterior


def posterior_chart(options: Sequence[str], posterior: Sequence[float], answer_index: int | None = None,
                    width: int = 560, title: str = "answer posterior") -> np.ndarray:
    """A horizontal bar per option: its letter, its text (cut to fit) and its probability in %; the
    answer's bar in orange, the others in blue."""
    p = np.asarray(posterior, dtype=np.float64).reshape(-1)
    n = len(options)
    letters = "ABCDEFGHIJ"
    if not 1 <= n <= len(letters) or len(p) != n:
        raise InputError("posterior", f"{len(p)} values for {n} options", f"give one probability per option (1 to {len(letters)} options)")
    if not np.isfinite(p).all():
        raise InputError("posterior", p.tolist(), "probabilities must be finite")
    if answer_index is not None and not 0 <= int(answer_index) < n:
        raise InputError("answer_index", answer_index, f"use an option index in [0, {n})")
    size, row_h = 14, 30
    title_h = 30
    text_x = 34
    text_w = int(width * 0.38)
    bar_x = text_x + text_w + 10
    pct_w = _text_size("100.0%", size)[0] + 12
    bar_len = width - bar_x - pct_w
    img = Image.new("RGB", (width, title_h + n * row_h + 10), "white")
    draw = ImageDraw.Draw(img)
    _put(draw, (12, title_h / 2), title, size, MUTED, valign="middle")
    for k in range(n):
        y = title_h + k * row_h
        mid = y + row_h / 2
        chosen = answer_index is not None and k == int(answer_index)
        ink = INK if chosen or answer_index is None else MUTED
        _put(draw, (12, mid), letters[k], size, ink, valign="middle")
        _put(draw, (text_x, mid), _fit(str(options[k]), size, text_w), size, ink, valign="middle")
        draw.rectangle([bar_x, y + 6, bar_x + bar_len, y + row_h - 7], fill=TRACK)
        filled = round(float(np.clip(p[k], 0.0, 1.0)) * bar_len)
        if filled > 0:
            draw.rectangle([bar_x, y + 6, bar_x + filled, y + row_h - 7], fill=ANSWER if chosen else OTHER)
        _put(draw, (width - 8, mid), f"{100 * p[k]:.1f}%", size, ink, align="right", valign="middle")
    return np.array(img)
