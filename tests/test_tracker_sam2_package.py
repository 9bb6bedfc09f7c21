"""SAM 2 through Meta's ``sam2`` package: the tracker contract on a tiny random SAM 2.1 saved in the
``sam2_package.json`` layout and loaded back with ``trackers.load_tracker``; results equal to the
package's own ``init_state`` + ``propagate_in_video``; frames read on demand; the inference state
bounded; save/load round trips; layouts that are refused. Skipped without the optional extra."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("sam2", reason="the optional sam2 extra: SAM2_BUILD_CUDA=0 pip install 'atelier[sam2]'")

from tracker_contract import CountingSource, TrackerContract, square_clip

import trackers
from core.errors import InputError, MissingDependencyError
from trackers.sam2_package import (
    INDEX,
    LazyImages,
    Sam2PackageTracker,
    fill_holes,
    is_package_checkpoint,
    read_layout,
)

pytestmark = pytest.mark.usefixtures("one_thread")

S = 64  # the model's image size: Hiera strides 4, 8, 16 -> 16x16, 8x8, 4x4 feature maps
BASE = "configs/sam2.1/sam2.1_hiera_t.yaml"
# SAM 2.1 tiny shrunk to ~1M parameters: Hiera with 5 blocks (8..64 channels; its global-attention
# block may not be a pooling block), 64-wide features, 32-channel memories (so an object pointer is
# split into two memory tokens, as SAM 2.1's 256 / 64 are), one memory-attention layer
TINY = [
    f"++model.image_size={S}",
    "++model.image_encoder.trunk.embed_dim=8", "++model.image_encoder.trunk.num_heads=1",
    "++model.image_encoder.trunk.stages=[1,1,2,1]", "++model.image_encoder.trunk.global_att_blocks=[3]",
    "++model.image_encoder.trunk.window_spec=[4,4,4,2]", "++model.image_encoder.trunk.window_pos_embed_bkg_spatial_size=[4,4]",
    "++model.image_encoder.neck.d_model=64", "++model.image_encoder.neck.backbone_channel_list=[64,32,16,8]",
    "++model.image_encoder.neck.position_encoding.num_pos_feats=64",
    "++model.memory_attention.d_model=64", "++model.memory_attention.num_layers=1",
    "++model.memory_attention.layer.d_model=64", "++model.memory_attention.layer.dim_feedforward=64",
    "++model.memory_attention.layer.self_attention.embedding_dim=64",
    f"++model.memory_attention.layer.self_attention.feat_sizes=[{S // 16},{S // 16}]",
    "++model.memory_attention.layer.cross_attention.embedding_dim=64",
    f"++model.memory_attention.layer.cross_attention.feat_sizes=[{S // 16},{S // 16}]",
    "++model.memory_attention.layer.cross_attention.kv_in_dim=32",
    "++model.memory_encoder.in_dim=64", "++model.memory_encoder.out_dim=32",
    "++model.memory_encoder.position_encoding.num_pos_feats=32",
    "++model.memory_encoder.mask_downsampler.embed_dim=64",
    "++model.memory_encoder.fuser.layer.dim=64", "++model.memory_encoder.fuser.num_layers=1",
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random SAM 2.1 video predictor, saved in the sam2_package.json layout, once per module."""
    torch.manual_seed(0)
    tracker = Sam2PackageTracker.from_config(BASE, TINY, device="cpu")
    return tracker.save_pretrained(tmp_path_factory.mktemp("sam2_package") / "tiny")


_LOADED: dict = {}


def loaded(path) -> Sam2PackageTracker:
    key = str(path)
    if key not in _LOADED:
        _LOADED[key] = trackers.load_tracker(key, device="cpu")
    return _LOADED[key]


def check_state(session) -> None:
    """The package's per-object outputs stay within the window plus the prompted frames; one cached
    feature map; nothing pending; the video is never held as a tensor."""
    held = session.held_frames()
    prompted = len(session.prompts)
    assert held["non_cond_frame_outputs"] <= session.window and held["frames_tracked"] <= session.window, held
    assert held["cond_frame_outputs"] <= prompted, held
    for outputs in session.state["output_dict_per_obj"].values():
        assert len(outputs["cond_frame_outputs"]) + len(outputs["non_cond_frame_outputs"]) <= session.window + prompted
    assert held["cached_features"] <= 1 and held["temp_outputs"] == 0 and held["lazy_images"] == 1, held


class TestSam2PackageContract(TrackerContract):
    @pytest.fixture(autouse=True)
    def _checkpoint(self, tiny_dir):
        self.dir = tiny_dir

    def make_tracker(self):
        return loaded(self.dir)

    def check_backend_memory(self, session) -> None:
        check_state(session)


def test_the_layout_loads_as_the_sam2_package_backend(tiny_dir):
    from pipelines.base import component_backend

    tracker = loaded(tiny_dir)
    assert type(tracker) is Sam2PackageTracker and tracker.backend == "hf" and component_backend(tracker) == "hf"
    assert is_package_checkpoint(tiny_dir) and trackers.backend_class("sam2-package") is Sam2PackageTracker
    index = json.loads((tiny_dir / INDEX).read_text())
    assert index == {"format": "sam2-package", "format_version": 1, "config": "config.yaml", "checkpoint": "model.pt",
                     "overrides": [], "postprocessing": False}
    assert tracker.predictor.image_size == S and tracker.fill_hole_area == 8 and tracker.predictor.fill_hole_area == 0
    assert type(tracker.predictor).__name__ == "SAM2VideoPredictor" and tracker.frames_read == 15
    assert tracker.device.type == "cpu" and tracker.dtype == torch.float32


def test_results_equal_the_packages_own_propagation(tiny_dir, tmp_path):
    """The package's loader and loop on a JPEG folder vs our lazy state and per-frame loop on the same
    decoded frames: identical masks and scores (window >= frames_read, so pruning drops nothing the
    model reads). Hole filling is off on both sides (the package's needs its CUDA kernel)."""
    from PIL import Image

    tracker = Sam2PackageTracker.from_pretrained(tiny_dir, device="cpu")
    tracker.fill_hole_area = 0
    p = tracker.predictor
    frames, masks = square_clip(20)
    for i, frame in enumerate(frames):
        Image.fromarray(frame).save(tmp_path / f"{i:05d}.jpg")
    decoded = np.stack([np.array(Image.open(tmp_path / f"{i:05d}.jpg").convert("RGB")) for i in range(len(frames))])

    state = p.init_state(str(tmp_path))
    p.add_new_mask(state, 0, 1, torch.from_numpy(masks[0]))
    p.add_new_points_or_box(state, 0, 2, points=np.array([[12.0, 50.0], [40.0, 10.0]]), labels=np.array([1, 0]))
    theirs = {f: (ids, logits) for f, ids, logits in p.propagate_in_video(state)}

    session = tracker.init_session(decoded, window=tracker.frames_read)
    assert set(session.state) == set(state)  # the same inference state, lazy images aside
    assert isinstance(session.state["images"], LazyImages) and isinstance(state["images"], torch.Tensor)
    torch.testing.assert_close(session.state["images"][7], state["images"][7])  # the package's preprocessing
    session.add_prompt(0, 1, mask=masks[0])
    session.add_prompt(0, 2, points=[[12, 50], [40, 10]], labels=[1, 0])
    ours = list(session.propagate())
    assert [o.frame_idx for o in ours] == sorted(theirs) == list(range(20))
    for o in ours:
        ids, logits = theirs[o.frame_idx]
        assert o.obj_ids == list(ids) == [1, 2]
        assert np.array_equal(o.masks, (logits[:, 0] > 0).numpy())
    for k in (0, 1):  # presence scores: the package's object_score_logits on every tracked frame
        stored = state["output_dict_per_obj"][k]["non_cond_frame_outputs"]
        expected = torch.sigmoid(torch.cat([stored[f]["object_score_logits"] for f in range(1, 20)])).reshape(-1).numpy()
        np.testing.assert_allclose([o.scores[k] for o in ours[1:]], expected, atol=1e-6)


def test_frames_are_read_one_at_a_time_on_demand(tiny_dir):
    frames, masks = square_clip(40)
    source = CountingSource(frames)
    s = loaded(tiny_dir).init_session(source, window=4)
    s.add_prompt(0, 1, mask=masks[0])
    out = list(s.propagate(max_frames=30))
    assert len(out) == 30 and max(len(c) for c in source.calls) == 1
    assert {i for c in source.calls for i in c} <= set(range(30))  # nothing past what was tracked
    check_state(s)


def test_state_stays_bounded_over_a_long_clip_with_two_prompted_frames(tiny_dir):
    frames, masks = square_clip(120)
    s = loaded(tiny_dir).init_session(frames, window=3)
    s.add_prompt(0, 1, mask=masks[0])
    s.add_prompt(0, 2, points=[[12, 50]], labels=[1])
    s.add_prompt(60, 1, mask=masks[60])
    for out in s.propagate():
        assert s.memory_frames() <= 3 + 2
        check_state(s)
    assert set(s.state["output_dict_per_obj"][0]["cond_frame_outputs"]) == {0, 60}
    assert set(s.state["output_dict_per_obj"][0]["non_cond_frame_outputs"]) == {117, 118, 119}
    for out in s.propagate(start_frame=90, reverse=True, max_frames=40):  # backwards: the window follows
        check_state(s)
    assert set(s.state["output_dict_per_obj"][1]["non_cond_frame_outputs"]) == {51, 52, 53}


def test_a_mask_prompt_comes_back_on_its_frame(tiny_dir):
    """SAM 2.1 uses a mask prompt as its frame's output (``use_mask_input_as_output_without_sam``):
    the golden value of a random model is the prompt itself with presence sigmoid(10); tracked frames
    match the recorded golden scores."""
    frames, masks = square_clip()
    s = loaded(tiny_dir).init_session(frames)
    first = s.add_prompt(3, 1, mask=masks[3])
    iou = (first.masks[0] & masks[3]).sum() / (first.masks[0] | masks[3]).sum()
    assert iou > 0.9 and float(first.scores[0]) == pytest.approx(1 / (1 + np.exp(-10.0)), abs=1e-4)
    scores = [float(o.scores[0]) for o in s.propagate(start_frame=4, max_frames=3)]
    np.testing.assert_allclose(scores, GOLDEN_SCORES, atol=1e-4)


GOLDEN_SCORES = [0.463807, 0.462899, 0.463364]  # tiny random SAM 2.1 (seed 0), frames 4-6; below 0.5: "absent"


def test_save_load_round_trip_and_autocast(tiny_dir, tmp_path):
    frames, masks = square_clip(12)

    def run(tracker):
        s = tracker.init_session(frames, window=4)
        s.add_prompt(0, 1, mask=masks[0])
        s.add_prompt(0, 2, box=[6, 44, 20, 58])
        return list(s.propagate(max_frames=6))

    tracker = loaded(tiny_dir)
    again = trackers.load_tracker(tracker.save_pretrained(tmp_path / "again"))
    for x, y in zip(run(tracker), run(again), strict=True):
        assert x.obj_ids == y.obj_ids == [1, 2] and np.array_equal(x.masks, y.masks)
        np.testing.assert_allclose(x.scores, y.scores, atol=1e-6)
    again.to("cpu", "bfloat16")  # autocast: the weights stay float32
    assert again.dtype == torch.bfloat16 and next(again.predictor.parameters()).dtype == torch.float32
    out = run(again)
    assert len(out) == 6 and all(o.masks.dtype == bool and o.scores.dtype == np.float32 for o in out)


def test_prompt_on_a_tracked_frame_becomes_a_conditioning_frame(tiny_dir):
    frames, masks = square_clip(30)
    s = loaded(tiny_dir).init_session(frames, window=2)
    s.add_prompt(0, 1, mask=masks[0])
    list(s.propagate(max_frames=10))
    s.add_prompt(5, 1, points=[[20, 28]], labels=[1])  # frame 5 was tracked: now it is a prompt and outlives the window
    list(s.propagate(start_frame=5))
    assert set(s.state["output_dict_per_obj"][0]["cond_frame_outputs"]) == {0, 5}
    check_state(s)


def test_mask_with_points_is_refused_before_it_is_stored(tiny_dir):
    frames, masks = square_clip()
    s = loaded(tiny_dir).init_session(frames)
    with pytest.raises(InputError, match="mask"):
        s.add_prompt(0, 1, mask=masks[0], points=[[30, 28]], labels=[1])
    assert s.prompts == {} and s.state["obj_ids"] == []


def test_fill_holes_fills_small_background_components_only():
    logits = torch.full((1, 1, 12, 12), 5.0)
    logits[0, 0, 1:3, 1:3] = -3.0  # a 4-pixel hole
    logits[0, 0, 6:9, 6:9] = -3.0  # a 9-pixel hole
    logits[0, 0, 11, :] = -3.0  # 12 pixels of background
    out = fill_holes(logits, 8)
    assert torch.all(out[0, 0, 1:3, 1:3] == 0.1) and torch.all(out[0, 0, 6:9, 6:9] == -3.0) and torch.all(out[0, 0, 11] == -3.0)
    assert torch.equal(out[logits > 0], logits[logits > 0]) and fill_holes(logits, 0) is logits


def test_bad_layouts_are_clear_errors(tiny_dir, tmp_path):
    import shutil

    def folder(name, index=None, config=None):
        d = tmp_path / name
        shutil.copytree(tiny_dir, d)
        if index is not None:
            layout = json.loads((d / INDEX).read_text())
            (d / INDEX).write_text(json.dumps({**layout, **index}))
        if config is not None:
            (d / "config.yaml").write_text((d / "config.yaml").read_text().replace(*config))
        return d

    cases = [
        (folder("version", {"format_version": 9}), "format_version"),
        (folder("checkpoint", {"checkpoint": "missing.pt"}), "checkpoint"),
        (folder("unknown", {"extra": 1}), "unknown keys"),
        (folder("overrides", {"overrides": "image_size=32"}), "overrides"),
        (folder("target", config=("sam2.modeling.memory_encoder.Fuser", "os.system")), "_target_"),
        (folder("weights", {"overrides": ["++model.num_maskmem=3"]}), "does not fit"),
        (folder("config", {"config": "configs/nope.yaml"}), "config"),
    ]
    for path, match in cases:
        with pytest.raises(InputError, match=match):
            trackers.load_tracker(str(path))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "broken" / INDEX).write_text((tiny_dir / INDEX).read_text())
    shutil.copy(tiny_dir / "config.yaml", tmp_path / "broken")
    with pytest.raises(InputError, match="loadable"):
        Sam2PackageTracker.from_pretrained(tmp_path / "broken")


def test_released_checkpoint_folders_are_recognised(tmp_path):
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "sam2.1_hiera_tiny.pt").write_bytes(b"")
    layout = read_layout(tmp_path / "meta")
    assert layout["config"] == BASE and layout["checkpoint"].name == "sam2.1_hiera_tiny.pt" and layout["postprocessing"]
    assert is_package_checkpoint(tmp_path / "meta")
    (tmp_path / "meta" / "config.json").write_text("{}")  # a transformers snapshot: transformers loads it
    assert not is_package_checkpoint(tmp_path / "meta")
    with pytest.raises(InputError, match="sam2_package.json"):
        read_layout(tmp_path)


def test_without_the_package_the_error_names_the_extra(monkeypatch):
    from trackers import sam2_package

    monkeypatch.setitem(sys.modules, "sam2", None)
    with pytest.raises(MissingDependencyError, match=r"atelier\[sam2\]"):
        sam2_package._sam2()
