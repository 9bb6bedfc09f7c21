"""Overlays, device/dtype selection, seeding, safe weight IO, atomic writes."""

import numpy as np
import pytest
import torch

from core.atomic import atomic_path, write_json_atomic
from core.device import select_device, select_dtype, seed_everything
from core.errors import InputError, MediaError
from core.overlay import add_caption_band, contact_sheet, draw_boxes, draw_caption, draw_masks, draw_skeleton, id_color
from core.weights_io import load_state_dict, save_state_dict


def test_overlays_keep_shape_and_leave_input_untouched():
    frames = np.zeros((3, 40, 60, 3), np.uint8)
    ids = np.zeros((3, 40, 60), np.uint8)
    ids[:, 5:15, 5:25] = 2
    out = draw_masks(frames, ids, alpha=1.0, contours=False)
    assert out.shape == frames.shape and frames.max() == 0
    assert tuple(out[0, 10, 10]) == id_color(2) and tuple(out[0, 30, 50]) == (0, 0, 0)
    boxed = draw_boxes(frames[0], [(2, 2, 30, 20)], labels=["dog"])
    assert boxed.shape == (40, 60, 3) and boxed[2, 10].any()
    kp = np.zeros((17, 3), np.float32)
    kp[5], kp[7] = (10, 10, 2), (30, 30, 2)  # left shoulder -> left elbow is a limb
    sk = draw_skeleton(frames, kp)
    assert sk[:, 20, 20].any() and not sk[:, 35, 5].any()
    cap = draw_caption(frames, "hello")
    assert cap[:, -20:].any() and not cap[:, :5].any()  # white text in the bottom band only
    assert add_caption_band(frames[0], "x").shape == (58, 60, 3)
    assert contact_sheet(frames, columns=2).shape == (80, 120, 3)
    with pytest.raises(InputError, match="frames"):
        draw_caption(np.zeros((4, 4)), "x")
    with pytest.raises(InputError, match="id_maps"):
        draw_masks(frames, np.zeros((2, 5, 5), np.uint8))


def test_device_and_dtype():
    assert select_device() == torch.device("cpu") == select_device("auto")
    assert select_dtype(None, torch.device("cpu")) == torch.float32
    assert select_dtype("bf16") == torch.bfloat16
    for bad in ("tpu9", "cuda"):
        with pytest.raises(InputError, match="device"):
            select_device(bad)
    with pytest.raises(InputError, match="dtype"):
        select_dtype("int3")


def test_seeding_is_reproducible():
    g = seed_everything(3)
    a = (np.random.rand(), torch.rand(2, generator=g))
    g = seed_everything(3)
    b = (np.random.rand(), torch.rand(2, generator=g))
    assert a[0] == b[0] and torch.equal(a[1], b[1])
    with pytest.raises(InputError, match="seed"):
        seed_everything(-1)


def test_weights_roundtrip_and_safe_loading(tmp_path):
    state = {"w": torch.arange(6.0).reshape(2, 3).t(), "b": torch.ones(2)}  # non-contiguous on purpose
    path = save_state_dict(state, tmp_path / "m.safetensors", metadata={"steps": "10"})
    back = load_state_dict(path)
    assert torch.equal(back["w"], state["w"]) and torch.equal(back["b"], state["b"])
    torch.save({"state_dict": state}, tmp_path / "m.pt")
    assert torch.equal(load_state_dict(tmp_path / "m.pt")["b"], state["b"])

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(MediaError, match="safely"):
        load_state_dict(tmp_path / "evil.pt")
    (tmp_path / "junk.safetensors").write_bytes(b"garbage")
    with pytest.raises(MediaError, match="junk"):
        load_state_dict(tmp_path / "junk.safetensors")


def test_atomic_write_cleans_up_on_failure(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "a.json") as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    write_json_atomic(tmp_path / "b.json", {"x": np.float32(1.5), "a": np.arange(2)})
    assert (tmp_path / "b.json").read_text().replace(" ", "").replace("\n", "") == '{"x":1.5,"a":[0,1]}'
