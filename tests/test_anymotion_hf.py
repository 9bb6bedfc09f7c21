"""AnyMotion on the hf backend: a tiny random Qwen2.5-VL SCoT planner (transformers) and a tiny random Wan
renderer (diffusers), loaded by the pipeline's own loaders; the whole pipeline offline, the rendered skeleton
as a second in-context video, MetaQueries in the text context, and a saved pipeline reloading identical."""

import numpy as np
import pytest
import torch
from tiny_wan import TEXT_DIM, build_tiny_bernini_r

from core.keypoints import keypoints_to_text
from pipelines.anymotion import AnyMotionPipeline

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = {"num_frames": 5, "height": 32, "width": 32, "steps": 2}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from diffusers.utils import logging as diffusers_logging
    from tiny_vlms import build_tiny_qwen2_5_vl
    from transformers.utils import logging as hf_logging

    from planners.hf import HFVisionLanguageModel
    from planners.skeleton_cot_hf import HFSkeletonPlanner

    hf_logging.disable_progress_bar()
    diffusers_logging.disable_progress_bar()
    root = tmp_path_factory.mktemp("anymotion")
    vlm = HFVisionLanguageModel.from_pretrained(build_tiny_qwen2_5_vl(root / "qwen"), device="cpu", dtype="float32")
    HFSkeletonPlanner(vlm, num_queries=4, query_dim=TEXT_DIM, max_new_tokens=8).save_pretrained(root / "planner")
    return {"planner": str(root / "planner"), "renderer": str(build_tiny_bernini_r(root / "wan"))}


def world():
    from worldgen.tasks import motion_edit

    w = motion_edit.generate(8, motion_edit.Config(num_frames=6)).worlds["source"]
    frames = [w.render(t) for t in range(6)]
    return np.stack([f.rgb for f in frames]), np.stack([f.keypoints[1] for f in frames])


CLIP, KP = world()


def answer_raising_the_left_arm(size=32):
    kp = KP[[0, 2, 4]] * (size / 64)
    kp[..., 2] = KP[[0, 2, 4], :, 2]
    kp[1:, 9, 1] = 1.0  # the left wrist goes to the top of the frame
    return "<think>(2) the left arm rises</think>" + keypoints_to_text(kp, size, size, frames=[0, 2, 4])


def build(folders, monkeypatch):
    p = AnyMotionPipeline.build(components=folders, config=FAST)
    p.set_progress_bar_config(disable=True)
    monkeypatch.setattr(p.planner.vlm, "generate", lambda *a, **k: [answer_raising_the_left_arm()])
    return p


def test_the_whole_pipeline_runs_on_qwen_and_wan(folders, monkeypatch):
    pipe = build(folders, monkeypatch)
    assert pipe.backend == "hf" and type(pipe.renderer).__name__ == "WanRenderer" and pipe.planner.backend == "hf"
    out = pipe(CLIP, "make the person raise the left arm", source_keypoints=KP, generator=0)
    assert out.changed and out.video.shape == (5, 32, 32, 3) and out.video.dtype == np.uint8
    assert out.target_keypoints.shape == (5, 17, 3) and out.target_keypoints[-1, 9, 1] < 3
    assert out.queries.shape == (4, TEXT_DIM) and out.reasoning == "(2) the left arm rises"
    again = pipe(CLIP, "make the person raise the left arm", source_keypoints=KP, generator=0)
    assert np.array_equal(out.video, again.video)


def test_a_saved_pipeline_reloads_with_identical_output(folders, monkeypatch, tmp_path):
    pipe = build(folders, monkeypatch)
    before = pipe(CLIP, "make the person raise the left arm", source_keypoints=KP, generator=3)
    pipe.save_pretrained(tmp_path / "saved")
    loaded = AnyMotionPipeline.from_pretrained(tmp_path / "saved")
    loaded.set_progress_bar_config(disable=True)
    monkeypatch.setattr(loaded.planner.vlm, "generate", lambda *a, **k: [answer_raising_the_left_arm()])
    after = loaded(CLIP, "make the person raise the left arm", source_keypoints=KP, generator=3)
    assert np.array_equal(before.video, after.video) and torch.allclose(torch.as_tensor(before.queries), torch.as_tensor(after.queries))


def test_an_unreadable_plan_changes_nothing_and_says_so(folders):
    pipe = AnyMotionPipeline.build(components=folders, config=FAST)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(CLIP, "make the person raise the left arm", source_keypoints=KP, generator=0)  # a random model writes no skeleton
    assert not out.changed and "no readable skeleton" in out.reasoning and "no change" in out.message
