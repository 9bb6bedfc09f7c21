"""The hf backend of AnyMotion's SCoT planner (planners/skeleton_cot_hf.py) and the skeleton text format
(core.keypoints), on a tiny random Qwen2.5-VL built offline."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.errors import InputError, MediaError
from core.keypoints import keypoints_to_text, parse_skeleton_text, text_to_keypoints
from planners.skeleton_cot import SkeletonPlan, SkeletonPlanner
from planners.skeleton_cot_hf import (
    HFSkeletonPlanner,
    interpolate_keyframes,
    keyframe_indices,
    parse_answer,
)

pytestmark = pytest.mark.usefixtures("one_thread")

T, H, W = 6, 56, 56


def _keypoints(t: int = T, seed: int = 0, width: float = W, height: float = H) -> np.ndarray:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, [width, height], (t, 17, 2))
    v = rng.integers(0, 3, (t, 17, 1)).astype(float)
    v[:, [5, 6, 11, 12]] = 2  # shoulders and hips labelled: the planner measures motion in torso lengths
    return np.concatenate([xy, v], -1).astype(np.float32)


def _frames(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (T, H, W, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tiny_vlms import build_tiny_qwen2_5_vl
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="module")
def planner(tiny_dir):
    return HFSkeletonPlanner.from_pretrained(tiny_dir, device="cpu", dtype="float32", max_new_tokens=8, num_keyframes=3,
                                             num_queries=6, query_dim=24)


# ---------------------------------------------------------------------------- skeleton text


@pytest.mark.parametrize("bins", [1000, 100])
def test_keypoints_text_round_trip(bins):
    kp = _keypoints(3, width=80, height=40)
    kp[0, 3, 2] = 0  # unlabelled
    kp[1, 7, 2] = 1  # occluded
    text = keypoints_to_text(kp, 80, 40, bins, frames=[0, 4, 9])
    assert text.startswith("<skeleton>\nf0: [[") and text.endswith("</skeleton>") and "[-1,-1,0]" in text
    frames, back = parse_skeleton_text(text, 80, 40, bins)
    assert frames.tolist() == [0, 4, 9] and back.shape == (3, 17, 3) and back.dtype == np.float32
    labelled = kp[..., 2] > 0
    np.testing.assert_array_equal(back[..., 2], kp[..., 2])  # v kept as 0 / 1 / 2
    assert np.abs(back[..., 0] - kp[..., 0])[labelled].max() <= 0.5 * 80 / bins + 1e-4
    assert np.abs(back[..., 1] - kp[..., 1])[labelled].max() <= 0.5 * 40 / bins + 1e-4
    np.testing.assert_array_equal(back[~labelled], 0)  # unlabelled joints come back as (0, 0, 0)
    assert keypoints_to_text(back, 80, 40, bins, frames=frames) == text  # exact after quantisation
    np.testing.assert_array_equal(text_to_keypoints(text, 80, 40, bins), back)


def test_keypoints_text_clamps_and_sorts():
    kp = _keypoints(2)
    kp[0, 0] = (-5, 70, 2)  # outside the image: the border bins
    text = keypoints_to_text(kp, W, H, frames=[7, 2])
    assert text.splitlines()[1].startswith("f7: [[0,999,")
    frames, back = parse_skeleton_text(text, W, H)
    assert frames.tolist() == [2, 7]
    np.testing.assert_allclose(back[1, 0, :2], (0.5 / 1000 * W, 999.5 / 1000 * H), atol=1e-5)


_ROW = ",".join(["[10,20,2]"] * 17)


@pytest.mark.parametrize("text", [
    "no skeleton here",
    "<skeleton>f0: [[10,20,2]]</skeleton>",  # one joint, not 17
    f"<skeleton>f0: [{_ROW.replace('[10,20,2]', '[10,20,3]', 1)}]</skeleton>",  # v = 3
    f"<skeleton>f0: [{_ROW.replace('[10,20,2]', '[1000,20,2]', 1)}]</skeleton>",  # outside [0, 1000)
    f"<skeleton>f0: [{_ROW.replace('[10,20,2]', '[-1,-1,2]', 1)}]</skeleton>",  # labelled but no position
    f"<skeleton>f0: [{_ROW}] the arm goes up</skeleton>",  # prose inside the block
    f"<skeleton>f0: [{_ROW}]\nf0: [{_ROW}]</skeleton>",  # a frame twice
    f"<skeleton>f0: [{_ROW[:-1]}</skeleton>",  # cut off
    f"<skeleton>f0: [{_ROW}]",  # unclosed
])
def test_malformed_skeleton_text(text):
    with pytest.raises(InputError) as e:
        text_to_keypoints(text, W, H)
    assert e.value.name == "skeleton" and e.value.hint


def test_parse_answer_and_interpolation():
    kf = _keypoints(2, seed=3)
    kf[:, 0, 2] = 2
    kf[0, 9, 2], kf[1, 9, 2] = 2, 0  # the left wrist is seen on f0 only
    kf[:, 10, 2] = 2
    answer = "<think>(1) the person (2) left arm</think>\n" + keypoints_to_text(kf, W, H, frames=[1, 5])
    reasoning, target = parse_answer(answer, W, H, num_frames=T)
    assert reasoning == "(1) the person (2) left arm" and target.shape == (T, 17, 3)
    decoded = text_to_keypoints(answer, W, H)
    np.testing.assert_array_equal(target[[0, 1]], decoded[[0, 0]])  # held before the first keyframe
    np.testing.assert_array_equal(target[5], decoded[1])
    np.testing.assert_allclose(target[3, 0, :2], decoded[:, 0, :2].mean(0), atol=1e-5)  # halfway: linear
    np.testing.assert_allclose(target[2, 10, :2], 0.75 * decoded[0, 10, :2] + 0.25 * decoded[1, 10, :2], atol=1e-5)
    assert target[2, 9, 2] == 2 and target[4, 9, 2] == 0  # labelled in one keyframe: the nearer one decides
    with pytest.raises(InputError, match="frames"):
        parse_answer(answer, W, H, num_frames=5)  # f5 outside a 5-frame clip
    with pytest.raises(InputError):
        parse_answer("<think>ok</think> no skeleton", W, H, num_frames=T)


def test_keyframe_indices():
    assert keyframe_indices(36, 4).tolist() == [0, 12, 23, 35]
    assert keyframe_indices(2, 4).tolist() == [0, 1] and keyframe_indices(1, 4).tolist() == [0]
    one = interpolate_keyframes([3], _keypoints(1), 5)
    assert one.shape == (5, 17, 3) and (one == one[0]).all()


# ---------------------------------------------------------------------------- the planner on a tiny model


def test_tiny_model_plan_falls_back_to_source(planner):
    assert isinstance(planner, SkeletonPlanner) and planner.backend == "hf"
    kp = _keypoints()
    plan = planner.plan(_frames(), kp, "make the person raise the left arm")
    assert isinstance(plan, SkeletonPlan)
    np.testing.assert_array_equal(plan.target_keypoints, kp)
    assert plan.changes is False and "no readable skeleton" in plan.reasoning and plan.extras["parsed"] is False
    assert len(plan.extras["answer"]) < 200 and repr(plan.extras["answer"]) in plan.reasoning  # quoted
    assert plan.queries.shape == (6, 24) and plan.queries.dtype == torch.float32 and plan.queries.device.type == "cpu"
    assert torch.isfinite(plan.queries).all()
    again = planner.plan(_frames(), kp, "make the person raise the left arm")  # greedy: deterministic
    assert again.extras["answer"] == plan.extras["answer"] and torch.equal(again.queries, plan.queries)
    text_only = planner.plan(None, kp, "make the person raise the left arm", height=H, width=W)
    assert text_only.queries.shape == (6, 24)


def test_plan_with_a_readable_answer(planner, monkeypatch):
    """The parsed branch (a trained planner's answer, stubbed here): reasoning from <think>, target interpolated."""
    kp = _keypoints()
    kp[:, 9] = (30, 40, 2)
    target = kp[[0, 2, 5]].copy()
    target[1:, 9, :2] = (30, 2)  # the left wrist goes up by far more than a torso length
    answer = "<think>(2) the left arm rises</think>" + keypoints_to_text(target, W, H, frames=[0, 2, 5])
    monkeypatch.setattr(planner.vlm, "generate", lambda *a, **k: [answer])
    plan = planner.plan(_frames(), kp, "raise the left arm")
    assert plan.reasoning == "(2) the left arm rises" and plan.extras["parsed"] is True
    assert plan.changes is True and "left arm" in plan.parts
    tol = 0.5 * W / 1000  # the quantisation
    np.testing.assert_allclose(plan.target_keypoints[2:, 9, :2], [[30, 2]] * 4, atol=tol)
    np.testing.assert_allclose(plan.target_keypoints[1, 9, 1], (40 + 2) / 2, atol=tol)  # halfway from f0 to f2
    assert plan.queries.shape == (6, 24)


def test_prompt_layout(planner):
    messages = planner.messages(_frames(), _keypoints(), "raise the left arm")
    assert [m.role for m in messages] == ["system", "user"]
    assert messages[0].text == "You are a human-motion editing planner."
    assert len(messages[1].visuals) == 3  # first, middle, last frame
    text = messages[1].text
    assert "Instruction: raise the left arm" in text and "<think>" in text
    assert text.count("\nf") == 3 and "f0: [[" in text and "f5: [[" in text  # 3 keyframes of the source


def test_query_forward_is_the_models_own_multimodal_forward(planner):
    """The prompt positions of the query forward (inputs_embeds, images scattered in, get_rope_index) equal the
    model's normal forward on the processor's inputs."""
    messages = planner.messages(_frames(), _keypoints(), "raise the left arm")
    model = planner.vlm.module
    seen = {}
    hook = model.model.language_model.register_forward_hook(lambda m, a, o: seen.__setitem__("h", o.last_hidden_state))
    with torch.no_grad():
        reference = model(**planner.vlm._chat_inputs(messages), use_cache=False, output_hidden_states=True).hidden_states[-1]
        planner.query_states(messages, "")
    hook.remove()
    n = reference.shape[1]
    assert seen["h"].shape[1] == n + planner.num_queries + 2
    torch.testing.assert_close(seen["h"][:, :n], reference, rtol=0, atol=1e-5)


def test_queries_read_what_comes_before_them_only(planner):
    kp = _keypoints()
    moved = kp.copy()
    moved[:, 9, :2] = (5, 5)  # the left wrist elsewhere in the source skeleton
    frames = _frames()
    base_messages = planner.messages(frames, kp, "raise the left arm")
    answer = "<think>the left arm</think>" + keypoints_to_text(kp[[0, 5]], W, H, frames=[0, 5])
    other_answer = "<think>the left arm</think>" + keypoints_to_text(moved[[0, 5]], W, H, frames=[0, 5])
    with torch.no_grad():
        base = planner.query_states(base_messages, answer)
        assert not torch.allclose(base, planner.query_states(base_messages, other_answer))  # the target skeleton
        assert not torch.allclose(base, planner.query_states(planner.messages(frames, moved, "raise the left arm"), answer))
        assert not torch.allclose(base, planner.query_states(planner.messages(frames, kp, "squat"), answer))
        assert not torch.allclose(base, planner.query_states(planner.messages(_frames(1), kp, "raise the left arm"), answer))
        saved = planner.markers.detach().clone(), planner.queries.detach().clone()
        try:
            planner.markers[1] += 1.0  # the end marker comes after every query
            torch.testing.assert_close(planner.query_states(base_messages, answer), base, rtol=0, atol=1e-6)
            planner.queries[-1] += 1.0  # the last query: only its own state changes
            changed = planner.query_states(base_messages, answer)
            torch.testing.assert_close(changed[:-1], base[:-1], rtol=0, atol=1e-6)
            assert not torch.allclose(changed[-1], base[-1])
        finally:
            planner.markers.copy_(saved[0])
            planner.queries.copy_(saved[1])


def test_queries_take_gradients_without_touching_the_backbone(planner):
    messages = planner.messages(None, _keypoints(), "raise the left arm", height=H, width=W)
    planner.zero_grad()
    planner.query_states(messages, "<think>x</think>").square().mean().backward()
    assert planner.queries.grad is not None and planner.queries.grad.abs().sum() > 0
    assert planner.connector[0].weight.grad is not None
    names = {n for n, _ in planner.named_parameters()}
    assert names == {"queries", "markers", "connector.0.weight", "connector.0.bias", "connector.2.weight",
                     "connector.2.bias", "connector.3.weight"}  # the VLM is not part of the module
    planner.zero_grad(set_to_none=True)
    planner.vlm.module.zero_grad(set_to_none=True)


def test_save_and_load(planner, tiny_dir, tmp_path):
    with torch.no_grad():
        planner.queries[0] += 0.5  # as if trained: the saved weights, not the seed, must come back
    try:
        out = planner.save_pretrained(tmp_path / "saved")
    finally:
        with torch.no_grad():
            planner.queries[0] -= 0.5
    config = json.loads((out / "skeleton_planner.json").read_text())
    assert config == {"kind": "hf-skeleton-cot-planner", "num_queries": 6, "query_dim": 24, "num_keyframes": 3,
                      "num_images": 3, "max_new_tokens": 8}
    assert (out / "skeleton_planner.safetensors").is_file()
    loaded = HFSkeletonPlanner.from_pretrained(out, device="cpu", dtype="float32")
    assert loaded.config == planner.config
    torch.testing.assert_close(loaded.queries[0], planner.queries[0] + 0.5, rtol=0, atol=1e-6)
    with torch.no_grad():
        planner.queries[0] += 0.5
    try:
        args = (_frames(), _keypoints(), "make the person squat")
        a = planner.plan(*args, generator=torch.Generator().manual_seed(7))
        b = loaded.plan(*args, generator=torch.Generator().manual_seed(7))
    finally:
        with torch.no_grad():
            planner.queries[0] -= 0.5
    assert a.extras["answer"] == b.extras["answer"] and a.reasoning == b.reasoning
    assert torch.equal(a.queries, b.queries)
    # a bare checkpoint: queries and connector from the fixed seed, the same on every load
    bare = [HFSkeletonPlanner.from_pretrained(tiny_dir, device="cpu", dtype="float32", num_queries=6, query_dim=24) for _ in range(2)]
    assert all(torch.equal(x, y) for x, y in zip(bare[0].state_dict().values(), bare[1].state_dict().values()))
    assert bare[0].query_dim == 24 and HFSkeletonPlanner.from_pretrained(tiny_dir, device="cpu").query_dim == 64
    with pytest.raises(InputError, match="num_queries"):
        HFSkeletonPlanner.from_pretrained(out, device="cpu", num_queries=8)
    with pytest.raises(InputError, match="temperature"):
        HFSkeletonPlanner.from_pretrained(out, device="cpu", temperature=0.5)
    (out / "skeleton_planner.json").write_text("{not json")
    with pytest.raises(MediaError):
        HFSkeletonPlanner.from_pretrained(out, device="cpu")


def test_bad_inputs(planner):
    kp, frames = _keypoints(), _frames()
    bad = [
        ((frames, kp[..., :2], "raise the arm"), "source_keypoints"),
        ((frames, kp[0], "raise the arm"), "source_keypoints"),
        ((frames, kp, ""), "instruction"),
        ((frames, kp, "   "), "instruction"),
        ((frames, kp, None), "instruction"),
        ((frames.astype(np.float32), kp, "raise the arm"), "frames"),
        ((frames[0], kp, "raise the arm"), "frames"),
        ((frames[:4], kp, "raise the arm"), "frames"),
        ((None, kp, "raise the arm"), "frames"),
    ]
    for args, name in bad:
        with pytest.raises(InputError) as e:
            planner.plan(*args)
        assert e.value.name == name, (args[2], e.value)
    with pytest.raises(InputError):
        HFSkeletonPlanner(planner.vlm, num_queries=0)
    with pytest.raises(InputError):
        HFSkeletonPlanner("not a model")
