"""renderers.meme: deterministic, clipped to its boxes, wrapped and auto-sized, any unicode, typed errors."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InputError
from renderers.meme import (
    ELLIPSIS,
    TEMPLATE_LAYOUTS,
    TextBox,
    _font,
    _stroke,
    _width,
    render_meme,
    render_meme_detailed,
    resolve_font,
    template_boxes,
)
from worldgen.tasks.meme import TEMPLATES, Config, generate

H, W = 240, 320


def _image(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(40, 200, (H, W, 3), dtype=np.uint8)


def _inside(boxes: list[TextBox]) -> np.ndarray:
    mask = np.zeros((H, W), bool)
    for b in boxes:
        mask[b.y:b.y + b.h, b.x:b.x + b.w] = True
    return mask


def test_deterministic_and_input_untouched():
    img = _image()
    before = img.copy()
    a = render_meme(img, ["one does not simply", "render a meme twice"])
    b = render_meme(img, ["one does not simply", "render a meme twice"])
    assert a.dtype == np.uint8 and a.shape == img.shape
    assert a.tobytes() == b.tobytes()
    assert np.array_equal(img, before)


def test_text_only_inside_its_boxes():
    img = _image(1)
    boxes = template_boxes("top_bottom", H, W) + [TextBox(100, 100, 120, 40)]
    out = render_meme(img, ["top text", "bottom text", "middle"], boxes)
    changed = np.any(out != img, axis=2)
    assert not changed[~_inside(boxes)].any()
    for b in boxes:
        assert changed[b.y:b.y + b.h, b.x:b.x + b.w].any(), b


def test_long_text_wraps_and_shrinks_to_fit():
    img = np.full((H, W, 3), 128, np.uint8)
    box = TextBox(20, 20, 200, 80)
    long = "this caption is far too long to fit on a single line of the box so it must wrap and shrink"
    short = render_meme_detailed(img, ["hi"], [box]).layouts[0]
    r = render_meme_detailed(img, [long], [box])
    lay = r.layouts[0]
    assert len(lay.lines) > 1 and lay.size < short.size and not lay.truncated and not lay.broken
    assert " ".join(lay.lines) == long.upper()
    f, sw = _font(r.font, lay.size), _stroke(lay.size)
    assert all(_width(f, line, sw) <= box.w for line in lay.lines)
    ascent, descent = f.getmetrics()
    assert len(lay.lines) * (ascent + descent + 2 * sw) <= box.h
    ys, xs = np.nonzero(np.any(r.image != img, axis=2))
    assert box.x <= xs.min() and xs.max() < box.x + box.w and box.y <= ys.min() and ys.max() < box.y + box.h


def test_too_long_for_min_size_is_truncated_with_ellipsis():
    img = np.full((H, W, 3), 128, np.uint8)
    lay = render_meme_detailed(img, ["word " * 200], [TextBox(0, 0, 100, 30)]).layouts[0]
    assert lay.truncated and lay.size == 8 and lay.lines[-1].endswith(ELLIPSIS)
    unspaced = render_meme_detailed(img, ["x" * 60], [TextBox(0, 0, 100, 60)]).layouts[0]
    assert unspaced.broken and "".join(unspaced.lines) == "X" * 60


def test_white_fill_with_dark_outline_and_upper_flag():
    img = np.full((H, W, 3), 128, np.uint8)
    out = render_meme(img, ["hello", "world"])
    assert (np.all(out == 255, axis=2)).sum() > 50
    assert (np.all(out < 40, axis=2)).sum() > 50
    lower = render_meme_detailed(img, ["hello", "world"], upper=False)
    assert lower.layouts[0].lines == ("hello",)
    assert not np.array_equal(lower.image, out)


def test_empty_text_leaves_box_unchanged():
    img = _image(2)
    boxes = template_boxes("top_bottom", H, W)
    out = render_meme(img, ["", "only bottom"])
    top = boxes[0]
    assert np.array_equal(out[top.y:top.y + top.h, top.x:top.x + top.w], img[top.y:top.y + top.h, top.x:top.x + top.w])
    assert not np.array_equal(out, img)


@pytest.mark.parametrize("text", ["café ñandú", "Привет", "ελληνικά", "\U0001f600 lol \u2764\ufe0f", "中文字幕", "\u0645\u0631\u062d\u0628\u0627"])
def test_unicode_renders(text):
    img = _image(3)
    r = render_meme_detailed(img, [text, text])
    assert not np.array_equal(r.image, img)
    assert r.font == resolve_font()
    if "DejaVu" in r.font and text == "中文字幕":
        assert set(r.missing) == set(text)  # drawn as missing-glyph boxes, not an error
    if "DejaVu" in r.font and text in ("café ñandú", "Привет", "ελληνικά"):
        assert r.missing == ""


def test_errors_name_the_argument():
    img = _image()
    with pytest.raises(InputError) as e:
        render_meme(img, ["only one"])
    assert e.value.name == "texts" and "2 boxes" in str(e.value)
    with pytest.raises(InputError) as e:
        render_meme(img, "a string")
    assert e.value.name == "texts"
    for bad in (img.astype(np.float32), img[..., 0], np.zeros((H, W, 4), np.uint8), img.tolist(), np.zeros((0, W, 3), np.uint8)):
        with pytest.raises(InputError) as e:
            render_meme(bad, ["a", "b"])
        assert e.value.name == "image"
    for box in (TextBox(W - 10, 0, 20, 10), TextBox(-1, 0, 10, 10), TextBox(0, 0, 0, 10), TextBox(0.5, 0, 10, 10),
                TextBox(0, 0, 10, 10, align="middle"), (0, 0, 10, 10)):
        with pytest.raises(InputError) as e:
            render_meme(img, ["a"], [box])
        assert e.value.name == "boxes"
    with pytest.raises(InputError) as e:
        render_meme(img, ["a", "b"], "sideways")
    assert e.value.name == "layout" and "sideways" in str(e.value)
    with pytest.raises(InputError) as e:
        resolve_font("/no/such/font.ttf")
    assert e.value.name == "font"


def test_every_worldgen_template_has_boxes_inside_the_image():
    assert set(TEMPLATE_LAYOUTS) == set(TEMPLATES)
    for name in TEMPLATES:
        for h, w in ((64, 64), (480, 640), (33, 17)):
            boxes = template_boxes(name, h, w)
            assert len(boxes) == 2  # (top, bottom) captions
            for b in boxes:
                assert b.x >= 0 and b.y >= 0 and b.w >= 1 and b.h >= 1 and b.x + b.w <= w and b.y + b.h <= h
    sample = generate(0, Config())
    cap = sample.record["candidates"][0]
    out = render_meme(sample.images["still"], [cap["top"], cap["bottom"]], sample.record["template"])
    assert out.shape == sample.images["still"].shape


def test_user_font(tmp_path):
    alt = "/usr/share/fonts/truetype/liberation/LiberationSans-Bold.ttf"
    import os

    if not os.path.isfile(alt):
        pytest.skip("no second system font")
    r = render_meme_detailed(_image(), ["a", "b"], font=alt)
    assert r.font == alt
