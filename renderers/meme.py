"""Meme rendering: caption text drawn into a template's text boxes, white with a black outline.

HUMOR's judge and reward model compare *rendered* memes (spec (c) ``render.py``, test 9), so
this renderer is deterministic: the same image, texts, boxes and font file give byte-identical
pixels (no randomness, no clock; Pillow's layout engine, raqm or basic, is recorded). Each box's
text is word-wrapped and auto-sized: the largest size, by binary search, at which the wrapped
text fits the box; if no size >= ``min_size`` fits whole words, words are broken between
characters (which is also how unspaced CJK text wraps); if even that does not fit at
``min_size``, the text is cut to the lines that fit and the last one ends in an ellipsis
[PROPOSED]. Drawing happens on a crop of the box, so no pixel outside a box ever changes.

Font: the first of ``FONT_CANDIDATES`` that exists (DejaVu Sans Bold, from matplotlib or the
system: Latin, Greek, Cyrillic, many symbols and the basic emoticons, no CJK), else Liberation
Sans Bold, Noto Sans CJK Bold, and last Pillow's embedded scalable default (Aileron: Latin
only). A glyph the font lacks is drawn as Pillow's missing-glyph box, never an error;
``MemeRendering.missing`` lists such characters. Pass ``font=`` a .ttf/.otf/.ttc for other
scripts (e.g. a CJK font). Colour emoji are drawn as monochrome outlines or boxes.

Two styles (``MEME_STYLES``): ``"atelier"`` (the above, the default; the builtin pipeline's look) and
``"official"`` (``render_meme_official``: what LightRFT's ``examples/godsmeme/meme_utils.py`` ``render_meme_image``
draws for its judge: the dataset's detection boxes when it gives them (``text_loc_info``), else banners at
6-20% and 78-94% of the height; DejaVu Sans regular, not upper-cased, the largest size 14..72 that fits, text
black on a light box (mean luminance > 186) else white, with a 2-pixel outline in the other colour).
"""

from __future__ import annotations

import importlib.util
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from core.errors import InputError

PILLOW_DEFAULT = "pillow:default"
ELLIPSIS = "\u2026"
SYSTEM_FONTS = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",  # Debian / Ubuntu
    "/usr/share/fonts/TTF/DejaVuSans-Bold.ttf",  # Arch
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans-Bold.ttf",  # Fedora
    "/usr/share/fonts/truetype/liberation/LiberationSans-Bold.ttf",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc",
)
# worldgen.tasks.meme templates all caption as (top, bottom) pairs; the test keeps this in step.
TEMPLATE_LAYOUTS = {name: "top_bottom" for name in ("chase", "collide", "crowd", "fall", "hide", "ignore")}
LAYOUTS = ("top_bottom",)
_ALIGN, _VALIGN = ("left", "center", "right"), ("top", "middle", "bottom")


@dataclass(frozen=True)
class TextBox:
    """A text region in integer pixels of the image (x, y: top-left corner), with its alignment."""

    x: int
    y: int
    w: int
    h: int
    align: str = "center"  # horizontal: left | center | right
    valign: str = "middle"  # vertical: top | middle | bottom


@dataclass(frozen=True)
class BoxLayout:
    """How one box's text was set: font size, lines, and whether words were broken or text cut."""

    box: TextBox
    size: int
    lines: tuple[str, ...]
    broken: bool = False
    truncated: bool = False


@dataclass(frozen=True)
class MemeRendering:
    """The rendered meme plus what a log needs to reproduce it."""

    image: np.ndarray
    font: str  # a font file path, or PILLOW_DEFAULT
    engine: str  # "raqm" or "basic"
    layouts: tuple[BoxLayout, ...]
    missing: str  # characters the font lacks (drawn as boxes)


def font_candidates() -> list[Path]:
    """Fonts tried by ``resolve_font``, best first: a package-shipped DejaVu, then system paths."""
    spec = importlib.util.find_spec("matplotlib")
    roots = list(spec.submodule_search_locations or []) if spec else []
    return [Path(r) / "mpl-data/fonts/ttf/DejaVuSans-Bold.ttf" for r in roots] + [Path(p) for p in SYSTEM_FONTS]


def resolve_font(font: str | Path | None = None) -> str:
    """The font file ``render_meme`` will use (log it: output bytes depend on it)."""
    if font is None:
        return next((str(p) for p in font_candidates() if p.is_file()), PILLOW_DEFAULT)
    try:
        ImageFont.truetype(str(font), 12)
    except (OSError, ValueError) as e:
        raise InputError("font", str(font), f"pass a readable .ttf/.otf/.ttc file or None ({e})") from None
    return str(font)


@lru_cache(maxsize=512)
def _font(name: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size) if name == PILLOW_DEFAULT else ImageFont.truetype(name, size)


def template_boxes(name_or_layout: str, height: int, width: int) -> list[TextBox]:
    """Default boxes of a layout ("top_bottom") or of a worldgen meme template, for an image size."""
    layout = TEMPLATE_LAYOUTS.get(name_or_layout, name_or_layout)
    if layout not in LAYOUTS:
        known = sorted(set(LAYOUTS) | set(TEMPLATE_LAYOUTS))
        raise InputError("layout", name_or_layout, f"use one of {known} or pass a list of TextBox")
    # [PROPOSED] classic bands: 2% margins, each band 22% of the height, text hugging the edge
    mx, my = max(1, round(0.02 * width)), max(1, round(0.02 * height))
    bh = max(1, round(0.22 * height))
    return [TextBox(mx, my, width - 2 * mx, bh, valign="top"), TextBox(mx, height - my - bh, width - 2 * mx, bh, valign="bottom")]


def _stroke(size: int) -> int:
    return max(1, round(size / 12))  # [PROPOSED] outline thickness, classic meme look


def _width(font: ImageFont.FreeTypeFont, text: str, sw: int) -> int:
    left, _, right, _ = font.getbbox(text, stroke_width=sw, anchor="ls")
    return right - left


def _chunks(word: str, font: ImageFont.FreeTypeFont, sw: int, width: int) -> list[str]:
    out, cur = [], ""
    for ch in word:
        if cur and _width(font, cur + ch, sw) > width:
            out.append(cur)
            cur = ""
        cur += ch
    return out + [cur]


def _wrap(text: str, font: ImageFont.FreeTypeFont, sw: int, width: int, brk: bool) -> list[str] | None:
    """Greedy word wrap; None when a word is wider than the box and ``brk`` is off."""
    lines = []
    for para in text.split("\n"):
        cur = ""
        for word in para.split():
            if _width(font, word, sw) > width:
                if not brk:
                    return None
                *full, word = _chunks(word, font, sw, width)
                lines += ([cur] if cur else []) + full
                cur = word
                continue
            trial = f"{cur} {word}" if cur else word
            if cur and _width(font, trial, sw) > width:
                lines.append(cur)
                trial = word
            cur = trial
        lines.append(cur)
    return lines


def _pitch(font: ImageFont.FreeTypeFont, sw: int) -> int:
    ascent, descent = font.getmetrics()
    return ascent + descent + 2 * sw


def _layout(text: str, name: str, box: TextBox, min_size: int, max_size: int | None) -> BoxLayout:
    top = min(max_size or box.h, box.h)
    for brk in (False, True):
        lo, hi, best = min_size, top, None
        while lo <= hi:
            mid = (lo + hi) // 2
            f, sw = _font(name, mid), _stroke(mid)
            lines = _wrap(text, f, sw, box.w, brk)
            if lines is not None and len(lines) * _pitch(f, sw) <= box.h:
                best, lo = (mid, lines), mid + 1
            else:
                hi = mid - 1
        if best:
            return BoxLayout(box, best[0], tuple(best[1]), broken=brk)
    f, sw = _font(name, min_size), _stroke(min_size)
    lines = _wrap(text, f, sw, box.w, True)
    keep = max(1, box.h // _pitch(f, sw))
    if len(lines) > keep:
        lines, last = lines[:keep], lines[keep - 1]
        while last and _width(f, last + ELLIPSIS, sw) > box.w:
            last = last[:-1]
        lines[-1] = last.rstrip() + ELLIPSIS
    return BoxLayout(box, min_size, tuple(lines), broken=True, truncated=True)


def _draw(pil: Image.Image, lay: BoxLayout, name: str) -> None:
    b, f, sw = lay.box, _font(name, lay.size), _stroke(lay.size)
    crop = pil.crop((b.x, b.y, b.x + b.w, b.y + b.h))  # drawing on the crop clips to the box
    draw, pitch, ascent = ImageDraw.Draw(crop), _pitch(f, sw), f.getmetrics()[0]
    block = len(lay.lines) * pitch
    y0 = {"top": 0, "middle": (b.h - block) // 2, "bottom": b.h - block}[b.valign]
    for i, line in enumerate(lay.lines):
        left, _, right, _ = f.getbbox(line, stroke_width=sw, anchor="ls")
        x0 = {"left": 0, "center": (b.w - (right - left)) // 2, "right": b.w - (right - left)}[b.align] - left
        draw.text((x0, y0 + i * pitch + sw + ascent), line, font=f, fill=(255, 255, 255),
                  stroke_width=sw, stroke_fill=(0, 0, 0), anchor="ls")
    pil.paste(crop, (b.x, b.y))


def _missing(text: str, name: str) -> str:
    f = _font(name, 24)

    def ink(ch: str) -> bytes:
        im = Image.new("L", (72, 72))
        ImageDraw.Draw(im).text((12, 12), ch, font=f, fill=255)
        return im.tobytes()

    skip = lambda c: c.isspace() or unicodedata.category(c)[0] == "C" or "\ufe00" <= c <= "\ufe0f"  # noqa: E731
    notdef = ink("\uffff")
    return "".join(c for c in sorted(set(text)) if not skip(c) and ink(c) == notdef)


def _check(image: np.ndarray, texts: Sequence[str], boxes: Sequence[TextBox] | str) -> list[TextBox]:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or 0 in image.shape:
        desc = f"{type(image).__name__} {getattr(image, 'dtype', '')} {getattr(image, 'shape', '')}".strip()
        raise InputError("image", desc, "pass an (H, W, 3) uint8 RGB array")
    h, w = image.shape[:2]
    if isinstance(boxes, str):
        label, boxes = repr(boxes), template_boxes(boxes, h, w)
    else:
        label, boxes = "the given boxes", list(boxes)
    for b in boxes:
        ok = isinstance(b, TextBox) and all(isinstance(v, (int, np.integer)) for v in (b.x, b.y, b.w, b.h))
        if not ok or b.w < 1 or b.h < 1 or b.x < 0 or b.y < 0 or b.x + b.w > w or b.y + b.h > h:
            raise InputError("boxes", b, f"each box must be a TextBox of int pixels inside the {w}x{h} image")
        if b.align not in _ALIGN or b.valign not in _VALIGN:
            raise InputError("boxes", b, f"align must be one of {_ALIGN}, valign one of {_VALIGN}")
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise InputError("texts", texts, "pass a list of strings, one per box")
    if len(texts) != len(boxes):
        raise InputError("texts", list(texts), f"{label} has {len(boxes)} boxes (box1..box{len(boxes)}); pass {len(boxes)} texts")
    return boxes


def render_meme_detailed(image: np.ndarray, texts: Sequence[str], boxes: Sequence[TextBox] | str = "top_bottom",
                         font: str | Path | None = None, *, upper: bool = True, min_size: int = 8,
                         max_size: int | None = None) -> MemeRendering:
    """``render_meme`` plus the font, engine, per-box layout and missing glyphs, for logs and tests."""
    boxes = _check(image, texts, boxes)
    if min_size < 1 or (max_size is not None and max_size < 1):
        raise InputError("min_size", (min_size, max_size), "font sizes must be positive")
    name = resolve_font(font)
    texts = [t.upper() if upper else t for t in texts]
    pil, layouts = Image.fromarray(image, "RGB"), []
    for text, box in zip(texts, boxes):
        if not text.strip():
            layouts.append(BoxLayout(box, 0, ()))
            continue
        layouts.append(_layout(text.strip(), name, box, min_size, max_size))
        _draw(pil, layouts[-1], name)
    engine = "raqm" if _font(name, 12).layout_engine == ImageFont.Layout.RAQM else "basic"
    return MemeRendering(np.asarray(pil).copy(), name, engine, tuple(layouts), _missing("".join(texts), name))


def render_meme(image: np.ndarray, texts: Sequence[str], boxes: Sequence[TextBox] | str = "top_bottom",
                font: str | Path | None = None, *, upper: bool = True, min_size: int = 8,
                max_size: int | None = None) -> np.ndarray:
    """Draw ``texts[i]`` into ``boxes[i]`` (a layout or template name, or TextBoxes); returns a new (H, W, 3) uint8.

    ``upper`` (default True) upper-cases the text, the Impact-style meme look. An empty text leaves its box as is.
    """
    return render_meme_detailed(image, texts, boxes, font, upper=upper, min_size=min_size, max_size=max_size).image


# ---- the published style (LightRFT examples/godsmeme/meme_utils.py) --------------------------------

MEME_STYLES = ("atelier", "official")
OFFICIAL_FONTS = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",  # the published search path (Debian / Ubuntu)
    "/usr/share/fonts/truetype/liberation2/DejaVuSans.ttf",
)


@dataclass(frozen=True)
class OfficialRenderConfig:
    """The published ``MemeRenderConfig`` defaults."""

    min_font_size: int = 14
    max_font_size: int = 72
    line_spacing: int = 4
    outline_width: int = 2
    margin: int = 6
    padding_ratio: float = 0.06


def official_font() -> str:
    """DejaVu Sans regular, where the published code looks for it, else matplotlib's copy of the same font (the
    published code would fall back to Pillow's bitmap default; we keep the font instead [PROPOSED])."""
    spec = importlib.util.find_spec("matplotlib")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for path in [*OFFICIAL_FONTS, *(str(Path(r) / "mpl-data/fonts/ttf/DejaVuSans.ttf") for r in roots)]:
        if Path(path).is_file():
            return path
    raise InputError("font", "DejaVuSans.ttf", "install the DejaVu fonts (fonts-dejavu-core) or matplotlib")


def official_detections(reference: dict | None) -> list[tuple[float, float, float, float]]:
    """The detection boxes a dataset row gives, read as the published ``normalize_detections`` reads them:
    ``detections`` (boxes, or dicts with ``bbox`` / ``box`` / ``loc`` / ``coordinates``), else ``text_loc_info
    ["loc"]``, else ``loc``; entries that are not four numbers are skipped."""
    if not isinstance(reference, dict):
        return []
    raw = reference.get("detections")
    if raw is None and isinstance(reference.get("text_loc_info"), dict):
        raw = reference["text_loc_info"].get("loc", [])
    if raw is None and isinstance(reference.get("loc"), list):
        raw = reference["loc"]
    out = []
    for item in raw or []:
        if isinstance(item, dict):
            item = next((item[k] for k in ("bbox", "box", "loc", "coordinates") if k in item), None)
        if isinstance(item, (list, tuple)) and len(item) == 4:
            try:
                out.append(tuple(float(v) for v in item))
            except (TypeError, ValueError):
                continue
    return out


def _official_box(bbox: Sequence[float], width: int, height: int, scale: float | None, normalized: bool) -> tuple[int, int, int, int]:
    """A detection box in pixels (``bbox_scale`` units, or [0, 1] when flagged or when no value exceeds 1), clamped."""
    x1, y1, x2, y2 = bbox
    if scale is not None:
        x1, x2, y1, y2 = x1 / scale * width, x2 / scale * width, y1 / scale * height, y2 / scale * height
    elif normalized or max(bbox) <= 1.0:
        x1, x2, y1, y2 = x1 * width, x2 * width, y1 * height, y2 * height
    left = max(0, min(int(round(x1)), width - 1))
    top = max(0, min(int(round(y1)), height - 1))
    return left, top, max(left + 1, min(int(round(x2)), width)), max(top + 1, min(int(round(y2)), height))


def official_banners(width: int, height: int, count: int, padding_ratio: float = 0.06) -> list[tuple[int, int, int, int]]:
    """The published default boxes (xyxy): a top banner to 20% of the height, a bottom one from 78%, and for more
    than two texts equal bands over 24%..82% between them; one text gets the top banner only."""
    px, py = int(width * padding_ratio), int(height * padding_ratio)
    top = (px, py, width - px, max(py + 1, int(height * 0.2)))
    if count <= 1:
        return [top]
    boxes = [top, (px, max(int(height * 0.78), py), width - px, height - py)]
    band = max(1, int(height * 0.58 / max(1, count - 2)))
    for k in range(count - 2):
        y1 = int(height * 0.24) + k * band
        boxes.insert(-1, (px, y1, width - px, max(y1 + 1, min(height - py, y1 + band))))
    return boxes[:count]


def _official_size(draw: ImageDraw.ImageDraw, text: str, font) -> tuple[int, int]:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return right - left, bottom - top


def _official_wrap(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> list[str]:
    words = text.split()
    if not words:
        return [""]
    lines, cur = [], words[0]
    for word in words[1:]:
        if _official_size(draw, f"{cur} {word}", font)[0] <= width:
            cur = f"{cur} {word}"
        else:
            lines.append(cur)
            cur = word
    return lines + [cur]


def render_meme_official(image: np.ndarray, texts: Sequence[str], detections: Sequence[Sequence[float]] | None = None, *,
                         bbox_scale: float | None = None, bbox_normalized: bool = False, font: str | Path | None = None,
                         config: OfficialRenderConfig = OfficialRenderConfig()) -> np.ndarray:
    """The published rendering (``render_meme_image``) of ``texts`` on ``image`` (RGB uint8 (H, W, 3)); a new array.

    Empty texts are dropped (none left: the bare template). Boxes: ``detections`` (xyxy, see ``_official_box`` for
    units; ``official_detections`` reads them from a dataset row) or ``official_banners``. More texts than boxes:
    the extra ones join the last box, one per line; fewer: the extra boxes stay empty. Per box: the largest size
    from 14 up that fits (the search stops at the first size that does not), word-wrapped, lines centred (at least
    ``margin`` from the box edge), colours from the box's mean luminance (``0.299 R + 0.587 G + 0.114 B > 186``:
    black text, white outline; else white on black)."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or 0 in image.shape:
        raise InputError("image", getattr(image, "shape", type(image).__name__), "pass an (H, W, 3) uint8 RGB array")
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise InputError("texts", texts, "pass a list of strings, one per box")
    name = resolve_font(font) if font is not None else official_font()  # a bad font: an InputError naming it
    canvas = Image.fromarray(image, "RGB").copy()
    draw = ImageDraw.Draw(canvas)
    kept = [t.strip() for t in texts if t and t.strip()]
    if not kept:
        return np.asarray(canvas).copy()
    w, h = canvas.size
    boxes = [_official_box(b, w, h, bbox_scale, bbox_normalized) for b in detections or []]
    boxes = boxes or official_banners(w, h, len(kept), config.padding_ratio)
    if len(kept) > len(boxes):
        kept = kept[: len(boxes) - 1] + ["\n".join(kept[len(boxes) - 1:]).strip()]
    c = config
    for (x1, y1, x2, y2), text in zip(boxes, kept):
        max_w, max_h = max(1, x2 - x1 - 2 * c.margin), max(1, y2 - y1 - 2 * c.margin)
        font_obj = _font(name, c.min_font_size)
        lines = _official_wrap(draw, text, font_obj, max_w)
        for size in range(c.min_font_size, c.max_font_size + 1):
            trial = _font(name, size)  # cached: a judge renders every pair
            wrapped = _official_wrap(draw, text, trial, max_w)
            sizes = [_official_size(draw, line, trial) for line in wrapped]
            if max(s[0] for s in sizes) > max_w or sum(s[1] for s in sizes) + c.line_spacing * (len(wrapped) - 1) > max_h:
                break
            font_obj, lines = trial, wrapped
        # the box's mean colour through Pillow's own 1x1 resize, as published (not a plain arithmetic mean)
        mean = canvas.crop((x1, y1, x2, y2)).resize((1, 1)).getpixel((0, 0))
        light = 0.299 * mean[0] + 0.587 * mean[1] + 0.114 * mean[2] > 186
        fill, outline = ((0, 0, 0), (255, 255, 255)) if light else ((255, 255, 255), (0, 0, 0))
        sizes = [_official_size(draw, line, font_obj) for line in lines]
        y = y1 + max(c.margin, (y2 - y1 - sum(s[1] for s in sizes) - c.line_spacing * (len(lines) - 1)) // 2)
        for line, (lw, lh) in zip(lines, sizes):
            x = x1 + max(c.margin, (x2 - x1 - lw) // 2)
            for dx in range(-c.outline_width, c.outline_width + 1):
                for dy in range(-c.outline_width, c.outline_width + 1):
                    if dx or dy:
                        draw.text((x + dx, y + dy), line, font=font_obj, fill=outline)
            draw.text((x, y), line, font=font_obj, fill=fill)
            y += lh + c.line_spacing
    return np.asarray(canvas).copy()


def render_meme_styled(image: np.ndarray, texts: Sequence[str], style: str = "atelier", detections: Sequence[Sequence[float]] | None = None,
                       **kwargs) -> np.ndarray:
    """``render_meme`` (``"atelier"``; ``texts`` must fill the layout's boxes) or ``render_meme_official``
    (``"official"``; ``detections`` and its keywords pass through)."""
    if style == "atelier":
        if detections is not None:
            raise InputError("detections", "given", "detection boxes are drawn by style='official'; ours takes boxes=")
        return render_meme(image, texts, **kwargs)
    if style == "official":
        return render_meme_official(image, texts, detections, **kwargs)
    raise InputError("style", style, f"choose one of {MEME_STYLES}")
