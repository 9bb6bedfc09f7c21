"""SAM 2 / SAM 3 through transformers: the tracker contract on tiny random checkpoints loaded back from
disk with ``trackers.load_tracker``, bounded transformers state, frames read on demand, save/load
round trips, text prompts and SAM 3's own detect-and-track loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

import trackers
from core.errors import InputError
from tracker_contract import H, T, W, CountingSource, TrackerContract, square_clip
from trackers.protocol import TrackedFrame

pytestmark = pytest.mark.usefixtures("one_thread")

_LOADED: dict = {}


def loaded(path) -> trackers.Tracker:
    """One tracker per checkpoint directory for the whole module (loading is the slow part)."""
    key = str(path)
    if key not in _LOADED:
        _LOADED[key] = trackers.load_tracker(key)
    return _LOADED[key]


def check_hf_state(session) -> None:
    """transformers' per-object outputs and tracked-frame marks stay within the window; one cached
    vision feature map; no stored video frames."""
    held = session.state.held_frames()
    assert held["non_cond_frame_outputs"] <= session.window, held
    assert held["frames_tracked"] <= session.window, held
    assert held["vision_features"] <= 1 and held["processed_frames"] == 0, held


class HFContract(TrackerContract):
    name = ""

    @pytest.fixture(autouse=True)
    def _checkpoint(self, tiny_tracker_dirs):
        self.dir = tiny_tracker_dirs[self.name]

    def make_tracker(self):
        return loaded(self.dir)

    def check_backend_memory(self, session) -> None:
        check_hf_state(session)


class TestSam2Contract(HFContract):
    name = "sam2"


class TestSam3Contract(HFContract):
    name = "sam3"


def prompted_run(tracker, frames, masks, n: int = 6) -> list[TrackedFrame]:
    s = tracker.init_session(frames, window=4)
    s.add_prompt(0, 1, mask=masks[0])
    s.add_prompt(0, 2, points=[[12, 50], [40, 10]], labels=[1, 0])
    return list(s.propagate(max_frames=n))


@pytest.mark.parametrize("name", ["sam2", "sam3"])
def test_checkpoints_load_as_their_backend(tiny_tracker_dirs, name):
    tracker = loaded(tiny_tracker_dirs[name])
    assert type(tracker).__name__ == {"sam2": "Sam2Tracker", "sam3": "Sam3Tracker"}[name] and tracker.backend == "hf"
    model_type = json.loads((tiny_tracker_dirs[name] / "config.json").read_text())["model_type"]
    assert trackers.MODEL_TYPES[model_type] == name


def test_frames_are_read_one_at_a_time_on_demand(tiny_tracker_dirs):
    frames, masks = square_clip(40)
    source = CountingSource(frames)
    s = loaded(tiny_tracker_dirs["sam2"]).init_session(source, window=4)
    s.add_prompt(0, 1, mask=masks[0])
    out = list(s.propagate(max_frames=30))
    assert len(out) == 30 and max(len(c) for c in source.calls) == 1
    assert {i for c in source.calls for i in c} <= set(range(30))  # nothing past what was tracked
    check_hf_state(s)


def test_a_mask_prompt_comes_back_on_its_frame(tiny_tracker_dirs):
    """SAM 2 uses a mask prompt as its frame's output (``_use_mask_as_output``): the golden value of a
    random model is the prompt itself, with presence sigmoid(10)."""
    frames, masks = square_clip()
    first = loaded(tiny_tracker_dirs["sam2"]).init_session(frames).add_prompt(3, 1, mask=masks[3])
    iou = (first.masks[0] & masks[3]).sum() / (first.masks[0] | masks[3]).sum()
    assert iou > 0.9 and float(first.scores[0]) == pytest.approx(1 / (1 + np.exp(-10.0)), abs=1e-4)


@pytest.mark.parametrize("name", ["sam2", "sam3"])
def test_save_load_round_trip_gives_identical_masks(tiny_tracker_dirs, tmp_path, name):
    frames, masks = square_clip(12)
    tracker = loaded(tiny_tracker_dirs[name])
    again = trackers.load_tracker(tracker.save_pretrained(tmp_path / name))
    a, b = prompted_run(tracker, frames, masks), prompted_run(again, frames, masks)
    assert [o.frame_idx for o in a] == [o.frame_idx for o in b] == list(range(6))
    for x, y in zip(a, b):
        assert x.obj_ids == y.obj_ids == [1, 2] and np.array_equal(x.masks, y.masks)
        np.testing.assert_allclose(x.scores, y.scores, atol=1e-6)


def test_prompt_on_a_tracked_frame_becomes_a_conditioning_frame(tiny_tracker_dirs):
    frames, masks = square_clip(30)
    s = loaded(tiny_tracker_dirs["sam2"]).init_session(frames, window=2)
    s.add_prompt(0, 1, mask=masks[0])
    list(s.propagate(max_frames=10))
    s.add_prompt(5, 1, mask=masks[5])  # frame 5 was tracked: now it is a prompt and outlives the window
    list(s.propagate(start_frame=5))
    obj = s.state.obj_id_to_idx(1)
    assert set(s.state.output_dict_per_obj[obj]["cond_frame_outputs"]) == {0, 5}
    check_hf_state(s)


def test_mask_with_points_is_refused_before_it_is_stored(tiny_tracker_dirs):
    frames, masks = square_clip()
    s = loaded(tiny_tracker_dirs["sam2"]).init_session(frames)
    with pytest.raises(InputError, match="mask"):
        s.add_prompt(0, 1, mask=masks[0], points=[[30, 28]], labels=[1])
    assert s.prompts == {}


def test_image_models_and_wrong_families_are_clear_errors(tiny_tracker_dirs, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "sam2"}))
    with pytest.raises(InputError, match="model_type='sam2'"):
        trackers.load_tracker(str(tmp_path))
    from trackers.hf_sam2 import Sam2Tracker

    with pytest.raises(InputError, match="sam3_video"):
        Sam2Tracker.from_pretrained(tiny_tracker_dirs["sam3"])


# ---- SAM 3: text prompts and its own detect-and-track loop

def test_text_prompt_proposes_instances_as_new_objects(tiny_tracker_dirs):
    frames, masks = square_clip(10)
    s = loaded(tiny_tracker_dirs["sam3"]).init_session(frames, window=3)
    s.add_prompt(0, 1, mask=masks[0])
    ids = s.add_text_prompt(2, "white square")
    assert ids and ids == list(range(2, 2 + len(ids)))  # the lowest free ids
    assert s.obj_ids == [1, *ids] and set(s.prompts[2]) == set(ids)
    assert all(p.mask is not None and p.mask.shape == (H, W) for p in s.prompts[2].values())
    out = list(s.propagate(start_frame=2, max_frames=4))
    assert [o.frame_idx for o in out] == [2, 3, 4, 5] and all(o.obj_ids == [1, *ids] for o in out)
    s.remove_object(ids[0])
    assert next(iter(s.propagate(start_frame=2, max_frames=1))).obj_ids == [1, *ids[1:]]
    check_hf_state(s)
    for bad, name in [("", "text"), (None, "text")]:
        with pytest.raises(InputError, match=name):
            s.add_text_prompt(0, bad)
    with pytest.raises(InputError, match="frame_idx"):
        s.add_text_prompt(T + 5, "square")


def test_detect_returns_instances_best_first_without_duplicates(tiny_tracker_dirs):
    frames, _ = square_clip()
    found = loaded(tiny_tracker_dirs["sam3"]).detect(frames[0], "square")
    n = len(found.masks)
    assert n >= 1 and found.masks.shape == (n, H, W) and found.boxes.shape == (n, 4) and found.scores.shape == (n,)
    assert np.all(np.diff(found.scores) <= 0)
    flat = found.masks.reshape(n, -1)
    for i in range(n):
        for j in range(i):
            assert (flat[i] & flat[j]).sum() / (flat[i] | flat[j]).sum() <= 0.1 + 1e-6  # det_nms_thresh


def test_tracker_only_checkpoint_tracks_but_refuses_text(tiny_tracker_dirs):
    from transformers import Sam3TrackerVideoModel, Sam3TrackerVideoProcessor, Sam3VideoConfig

    from trackers.hf_sam3 import Sam3Tracker

    video = loaded(tiny_tracker_dirs["sam3"])
    cfg = Sam3VideoConfig.from_pretrained(tiny_tracker_dirs["sam3"]).tracker_config
    proc = Sam3TrackerVideoProcessor(image_processor=video.processor.image_processor,
                                     video_processor=video.processor.video_processor)
    tracker = Sam3Tracker(Sam3TrackerVideoModel(cfg), proc)
    assert not tracker.has_detector
    frames, masks = square_clip(8)
    s = tracker.init_session(frames, window=2)
    s.add_prompt(0, 1, box=[4, 20, 20, 36])
    assert [o.frame_idx for o in s.propagate()] == list(range(8))
    with pytest.raises(InputError, match="text"):
        s.add_text_prompt(0, "square")


def test_track_concept_runs_sam3s_loop_with_bounded_state(tiny_tracker_dirs):
    from trackers.hf_sam3 import ConceptTracking

    frames, _ = square_clip(8)
    tracker = loaded(tiny_tracker_dirs["sam3"])
    run = ConceptTracking(tracker, frames, "square", window=2)
    out = []
    for o in run.run(0, None):
        out.append(o)
        held = run.held_frames()
        keep = max(2, tracker.model.hotstart_delay + 1)
        assert held["non_cond_frame_outputs"] <= keep and held["tracker_scores"] <= keep and held["suppressed"] <= keep
        assert held["hotstart_frames"] <= keep and held["vision_features"] <= 1 and held["processed_frames"] == 0
        assert not set(o.obj_ids) & run.state.hotstart_removed_obj_ids
    assert [o.frame_idx for o in out] == list(range(8))
    for o in out:
        assert o.masks.shape == (len(o.obj_ids), H, W) and o.masks.dtype == bool and o.scores.shape == (len(o.obj_ids),)
        assert o.obj_ids == sorted(o.obj_ids)
    assert sum(len(o.obj_ids) for o in out) > 0
    assert [o.frame_idx for o in tracker.track_concept(frames, "square", start_frame=2, max_frames=3)] == [2, 3, 4]
    with pytest.raises(InputError, match="text"):
        tracker.track_concept(frames, " ")
    with pytest.raises(InputError, match="start_frame"):
        next(tracker.track_concept(frames, "square", start_frame=99))


# ---- proposers: SAM 2 automatic masks, SAM 3 concepts

def check_candidates(cands, most: int) -> None:
    from core.masks import mask_to_box
    from trackers.monitor import mask_iou
    from trackers.proposals import Candidate

    assert 1 <= len(cands) <= most and [c.id for c in cands] == list(range(1, len(cands) + 1))
    assert all(isinstance(c, Candidate) for c in cands) and all(a.score >= b.score for a, b in zip(cands, cands[1:]))
    for c in cands:
        assert c.mask.shape == (H, W) and c.mask.dtype == bool and c.area == c.mask.sum() > 0
        assert tuple(c.box) == tuple(mask_to_box(c.mask)) and 0 <= c.score <= 1
    assert all(mask_iou(a.mask, b.mask) < 0.7 for i, a in enumerate(cands) for b in cands[:i])


def test_sam2_automatic_masks_propose_candidates(tiny_tracker_dirs):
    from dataclasses import replace

    from trackers.hf_proposals import Sam2AutoMaskProposer
    from trackers.proposals import Proposer

    # a random model predicts IoUs near 0.5 and logits near 0: open the SAM 2 filters (and shrink the
    # stability offset to the logits' scale), keep the grid and the clean-up real
    auto = Sam2AutoMaskProposer.from_pretrained(tiny_tracker_dirs["sam2"], points_per_side=4, points_per_batch=6,
                                                pred_iou_thresh=0.0, stability_thresh=0.0, stability_offset=1e-4,
                                                min_area=0.0, max_area=1.0, max_candidates=5)
    assert isinstance(auto, Proposer)
    frames, _ = square_clip()
    check_candidates(auto.propose(frames[0]), 5)
    assert auto.grid(H, W).shape == (16, 2)
    assert replace(auto, pred_iou_thresh=1.0).propose(frames[0]) == []  # no predicted IoU exceeds 1
    with pytest.raises(InputError, match="frame"):
        auto.propose(frames[:2])
    with pytest.raises(InputError, match="points_per_side"):
        replace(auto, points_per_side=0)


def test_sam3_concept_proposer(tiny_tracker_dirs):
    from trackers.hf_proposals import Sam3ConceptProposer
    from trackers.proposals import Proposer

    concept = Sam3ConceptProposer(loaded(tiny_tracker_dirs["sam3"]), min_area=0.0, max_area=1.0)
    assert isinstance(concept, Proposer)
    frames, _ = square_clip()
    check_candidates(concept.propose(frames[0], "white square"), 12)
    with pytest.raises(InputError, match="phrase"):
        concept.propose(frames[0])
