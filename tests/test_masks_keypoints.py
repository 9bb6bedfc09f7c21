"""Mask formats and keypoints on real DAVIS and COCO data: bit-exact round trips."""

import json

import numpy as np
import pytest
from PIL import Image

from core.errors import InputError
from core.keypoints import (
    COCO17_NAMES,
    COCO17_SKELETON,
    from_coco_json,
    from_mediapipe33,
    from_openpose18,
    to_coco_json,
    to_openpose18,
)
from core.masks import (
    ids_to_stack,
    mask_to_box,
    read_mask_folder,
    read_palette_png,
    rle_decode,
    rle_encode,
    stack_to_ids,
    write_mask_folder,
    write_palette_png,
)
from tests.shared_data import COCO_KPTS, DAVIS, need


def _davis_files(kind, limit=6):
    root = need(DAVIS) / kind
    files = sorted(root.glob("**/*.png"))
    return files[:: max(1, len(files) // limit)][:limit]


def test_davis_ground_truth_roundtrips_through_palette_png_and_rle(tmp_path):
    for f in _davis_files("Annotations"):
        ids = read_palette_png(f)  # DAVIS-2016 GT: greyscale 0 / 255
        assert ids.dtype == np.uint8 and set(np.unique(ids)) <= {0, 255}
        out = write_palette_png(tmp_path / f.name, ids)
        assert Image.open(out).mode == "P"
        np.testing.assert_array_equal(read_palette_png(out), ids)
        fg = ids > 0
        rle = rle_encode(fg)
        json.dumps(rle)  # JSON-safe
        np.testing.assert_array_equal(rle_decode(rle), fg)


def test_davis_predictions_keep_ids_and_palette(tmp_path):
    for f in _davis_files("predictions"):
        src = Image.open(f)
        assert src.mode == "P"
        ids = read_palette_png(f)
        out = write_palette_png(tmp_path / f.name, ids)
        np.testing.assert_array_equal(np.array(Image.open(out)), np.array(src))
        assert Image.open(out).getpalette()[:6] == src.getpalette()[:6]  # DAVIS palette: black, dark red


def test_mask_folder_and_stacks(tmp_path):
    maps = np.zeros((3, 20, 30), np.uint8)
    maps[:, 2:8, 3:9] = 1
    maps[1:, 10:15, 10:25] = 7
    write_mask_folder(tmp_path / "ann", maps)
    assert sorted(p.name for p in (tmp_path / "ann").iterdir()) == ["00000.png", "00001.png", "00002.png"]
    back = read_mask_folder(tmp_path / "ann")
    np.testing.assert_array_equal(back, maps)
    stack, ids = ids_to_stack(back)
    assert ids == [1, 7] and stack.shape == (2, 3, 20, 30)
    np.testing.assert_array_equal(stack_to_ids(stack, ids), maps)
    assert mask_to_box(stack[1, 1]) == (10, 10, 25, 15)
    assert mask_to_box(stack[1, 0]) is None


def test_uncompressed_rle_from_coco():
    m = np.zeros((4, 5), bool)
    m[1:3, 2:4] = True
    counts = []  # column-major run lengths, starting with background
    flat = m.flatten(order="F")
    run, cur = 0, False
    for v in flat:
        if v != cur:
            counts.append(run)
            run, cur = 0, v
        run += 1
    counts.append(run)
    np.testing.assert_array_equal(rle_decode({"size": [4, 5], "counts": counts}), m)


def test_bad_mask_inputs(tmp_path):
    with pytest.raises(InputError, match="id_map"):
        write_palette_png(tmp_path / "x.png", np.zeros((4, 4), np.int32))
    with pytest.raises(InputError, match="rle"):
        rle_decode({"counts": "x"})
    assert list(tmp_path.iterdir()) == []


def test_coco_keypoints_convert_and_back():
    data = json.loads(need(COCO_KPTS).read_text())
    cat = data["categories"][0]
    assert tuple(cat["keypoints"]) == COCO17_NAMES
    assert sorted(tuple(sorted((a - 1, b - 1))) for a, b in cat["skeleton"]) == sorted(tuple(sorted(p)) for p in COCO17_SKELETON)
    anns = [a for a in data["annotations"] if a["num_keypoints"] > 0]
    assert len(anns) == 12
    for ann in anns:
        kp = from_coco_json(ann["keypoints"])
        assert to_coco_json(kp) == ann["keypoints"]  # bit-exact, ints stay ints
        back = from_openpose18(to_openpose18(kp))
        np.testing.assert_array_equal(back, kp)
        op = to_openpose18(kp)
        if kp[5, 2] > 0 and kp[6, 2] > 0:
            np.testing.assert_allclose(op[1, :2], (kp[5, :2] + kp[6, :2]) / 2)


def test_mediapipe_conversion():
    lm = np.zeros((33, 4), np.float32)
    lm[:, 0], lm[:, 1], lm[:, 3] = np.linspace(0, 1, 33), 0.5, 0.9
    lm[27, 3] = 0.1  # left ankle barely visible
    kp = from_mediapipe33(lm, width=200, height=100)
    assert kp.shape == (17, 3)
    np.testing.assert_allclose(kp[0, :2], [0, 50])
    np.testing.assert_allclose(kp[5, 0], lm[11, 0] * 200)  # left shoulder
    assert kp[15, 2] == 1 and kp[16, 2] == 2
    with pytest.raises(InputError, match="landmarks"):
        from_mediapipe33(np.zeros((17, 3)), 10, 10)
