"""The built-in instance reasoner: persistence, determinism, the select() contract, the shipped weights."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from planners.builtin.instances import (BuiltinInstanceReasoner, InstanceReasonerConfig, _relative, candidate_views, collate, subset_features,
                                        track_features)
from planners.counterfactual import Mark, Selection

SHIPPED = Path(__file__).resolve().parents[1] / "weights" / "builtin" / "instances"
TINY = InstanceReasonerConfig(width=32, depth=1, heads=2, own_width=16, pair_width=16)
# measured on the CLEAR benchmark's TEST clips 0..19 with the shipped weights: 14 of 20 chosen by select() (chance ~4)
SHIPPED_ITEMS, SHIPPED_MIN_HITS = 20, 12


def clip(t=6, h=32, w=32):
    """Two squares (one static red, one moving blue) over ``t`` frames: frames and masks (2, T, H, W)."""
    frames = np.full((t, h, w, 3), 20, np.uint8)
    masks = np.zeros((2, t, h, w), bool)
    for i in range(t):
        masks[0, i, 4:10, 4:10] = True
        masks[1, i, 20:26, 2 + 3 * i : 8 + 3 * i] = True
        frames[i][masks[0, i]] = (220, 30, 30)
        frames[i][masks[1, i]] = (30, 30, 220)
    return frames, masks


def tiny_model(seed=0):
    torch.manual_seed(seed)
    model = BuiltinInstanceReasoner(TINY).eval()
    model.query_tokens = lambda query: torch.ones(4, 384) * len(query) / 10  # no text encoder in unit tests
    return model


def features(frames, masks):
    return tiny_model().features(frames, masks)  # with the shipped builtin ViT's appearance


def logits(model, feats):
    with torch.no_grad():
        return model(collate([feats, subset_features(feats, [1])], [torch.ones(4, 384)] * 2))


def test_features_describe_presence_motion_and_colour():
    frames, masks = clip()
    f = track_features(frames, masks)
    assert f["own"].shape == (2, 6, 17) and f["pair"].shape == (2, 2, 6, 8) and f["summary"].shape == (2, 8)
    assert (f["own"][:, :, 0] == 1).all()
    assert f["own"][0, 1:, 10].max() == 0 and f["own"][1, 1:, 10].min() > 0  # vx: static vs moving right
    assert f["own"][0, 0, 7] > 0.8 and f["own"][1, 0, 9] > 0.8  # mean colour inside the masks


def test_a_candidate_is_seen_alone_on_its_largest_frame():
    frames, masks = clip()
    masks[1, 2, 20:26, :] = True  # candidate 2 is largest on frame 2
    views = candidate_views(frames, masks)
    assert views.shape == (2, 32, 32, 3)
    assert (views[1] == np.where(_grown(masks[1, 2])[..., None], frames[2], 0)).all()
    assert views[0][~_grown(masks[0, 0])].max() == 0 and views[0][masks[0, 0]].min() > 0


def _grown(m):
    from planners.builtin.instances import dilate

    return dilate(m)


def test_appearance_lives_in_language_space():
    """The builtin ViT's read of a candidate alone is nearer the words for its colour than for the other's."""
    from planners.builtin.text import MiniLM

    frames, masks = clip(h=64, w=64)
    app = features(frames, masks)["appearance"]
    words = MiniLM().encode(["something red", "something blue"]).numpy()
    sims = app @ words.T
    assert sims[0, 0] > sims[0, 1] and sims[1, 1] > sims[1, 0]


def test_summaries_are_read_beside_the_sets_extremes():
    summary = torch.tensor([[[1.0, 5.0], [3.0, 2.0], [9.0, 9.0]]])
    rel = _relative(summary, torch.tensor([[True, True, False]]))
    assert rel.shape == (1, 3, 6)
    assert rel[0, 0].tolist() == [1.0, 5.0, -2.0, 0.0, 0.0, 3.0]  # padding (candidate 3) is left out of the extremes
    assert rel[0, 2, 2:].abs().sum() == 0


def test_save_load_round_trip_gives_identical_logits(tmp_path):
    model = tiny_model()
    feats = features(*clip())
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model"] == "builtin-instance-reasoner"
    again = BuiltinInstanceReasoner.from_pretrained(tmp_path)
    assert torch.equal(logits(model, feats), logits(again, feats))


def test_deterministic_and_padding_is_masked():
    feats = features(*clip())
    a, b = logits(tiny_model(3), feats), logits(tiny_model(3), feats)
    assert torch.equal(a, b)
    assert torch.isinf(a[1, 2]) and torch.isfinite(a[0]).all()  # the one-candidate set: candidate 2 is padding


def test_select_scores_every_candidate_and_checks_the_shortlist():
    model = tiny_model()
    frames, masks = clip()
    sel = model.select(frames, [Mark(1, masks[0]), Mark(2, masks[1])], "the blue square that moves")
    assert isinstance(sel, Selection)
    assert [s.number for s in sel.scores] == [1, 2]
    assert abs(sum(s.forward for s in sel.scores) + sel.p_none - 1) < 1e-4
    assert all(s.sufficiency is not None and s.necessity is not None for s in sel.scores)
    assert sel.number in (1, 2, None)
    fwd = model.select(frames, [Mark(1, masks[0]), Mark(2, masks[1])], "the blue square", checks=False)
    assert fwd.number is not None and not fwd.ambiguous


def test_select_no_candidates_is_no_match():
    frames, _ = clip()
    sel = tiny_model().select(frames, [], "the red square")
    assert sel.no_match and sel.scores == [] and sel.p_none == 1.0


def test_two_training_steps_on_a_tiny_config(tmp_path):
    from training.instances import main

    assert main(["--tiny", "--out", str(tmp_path)]) == 0
    ev = json.loads((tmp_path / "eval.json").read_text())
    assert ev["steps"] == 2 and "per_kind" in ev["test"]["tracker"] and "per_hard" in ev["test"]["gt"]
    assert BuiltinInstanceReasoner.from_pretrained(tmp_path).config.width == 32


@pytest.mark.skipif(not (SHIPPED / "model.safetensors").is_file(), reason="no shipped instance-reasoner weights")
def test_shipped_weights_choose_the_target_on_test_items():
    """On the CLEAR benchmark's first TEST clips, ground-truth tracks read on the 16 frames CLEAR shows its planner."""
    from pipelines.clear import ClearConfig
    from pipelines.clear.pipeline import selection_indices
    from training.instances import TEST_SEED, clip_of

    model = BuiltinInstanceReasoner.from_pretrained(SHIPPED)
    hits = 0
    for i in range(SHIPPED_ITEMS):
        rgb, masks, target, rec = clip_of("test", TEST_SEED, i)
        sub = selection_indices(len(rgb), ClearConfig().selection_frames)
        sel = model.select(rgb[sub], [Mark(k + 1, m[sub]) for k, m in enumerate(masks)], rec["query"])
        hits += sel.number == target + 1
    assert hits >= SHIPPED_MIN_HITS
