"""Bernini on the hf backend: a tiny random Wan renderer (diffusers) and a tiny random Qwen2.5-VL planner
(transformers), saved as a Bernini-Diffusers-like folder and loaded by the pipeline's own loaders; t2v, v2v
and r2v through one pipeline class, save/reload identical, the official per-task tables, clear errors."""

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_wan import TEXT_DIM, build_tiny_bernini_r

from core.errors import InputError
from pipelines.bernini import BerniniConfig, BerniniPipeline
from pipelines.bernini.tasks import DEFAULT_NEG_PROMPT, task_defaults

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = {"num_frames": 5, "height": 32, "width": 32, "steps": 2, "planning_steps": 2, "denoising_steps": 1}


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """A tiny folder laid out like Bernini-Diffusers: the Bernini-R renderer parts plus planner/."""
    from diffusers.utils import logging as diffusers_logging
    from tiny_vlms import build_tiny_qwen2_5_vl
    from transformers.utils import logging as hf_logging

    from planners.semantic import HFPlannerBackbone, SemanticPlanner, SemanticPlannerConfig

    hf_logging.disable_progress_bar()
    diffusers_logging.disable_progress_bar()
    root = tmp_path_factory.mktemp("bernini")
    folder = build_tiny_bernini_r(root / "Bernini-Diffusers")
    backbone = HFPlannerBackbone.from_pretrained(build_tiny_qwen2_5_vl(root / "qwen"), device="cpu", dtype="float32")
    torch.manual_seed(0)
    planner = SemanticPlanner(SemanticPlannerConfig(token_dim=backbone.hidden_size, plan_grid=(1, 2, 2), head_width=32, head_depth=1,
                                                    context_dim=TEXT_DIM, max_cot_tokens=3), backbone).eval()
    for p in planner.head.final.parameters():
        torch.nn.init.normal_(p, std=0.2)
    planner.save_pretrained(folder / "planner")
    return folder


@pytest.fixture(scope="module")
def pipe(release) -> BerniniPipeline:
    p = BerniniPipeline.build(components={"planner": str(release), "renderer": str(release)}, config=FAST)
    p.set_progress_bar_config(disable=True)
    return p


def clip(seed=0, frames=7, h=40, w=24):
    return np.random.default_rng(seed).integers(0, 256, (frames, h, w, 3), dtype=np.uint8)


def test_t2v_v2v_r2v_through_one_pipeline(pipe):
    assert type(pipe.renderer).__name__ == "WanRenderer" and pipe.backend == "hf" and pipe.encoder is None
    t2v = pipe("a red square moves right", generator=0)
    v2v = pipe("make it blue", video=clip(1), generator=0)
    r2v = pipe("the two objects dance", references=[clip(2)[0], clip(3)[0]], generator=0)
    for out, task in ((t2v, "t2v"), (v2v, "v2v"), (r2v, "r2v")):
        assert out.task == task and out.video.shape == (5, 32, 32, 3) and out.video.dtype == np.uint8
        assert out.plan_tokens is not None and out.plan_tokens.shape[:3] == (1, 2, 2) and out.cot_text is None  # no CoT (official)
    assert not np.array_equal(t2v.video, v2v.video) and not np.array_equal(v2v.video, r2v.video)
    # a planner with no recorded release runs the v1 table (the official demo's fallback): wapg, t2v text 4 / plan .5
    assert t2v.config["release"] == "v1" and t2v.config["guidance_mode"] == "vae_txt_vit_wapg"
    assert t2v.config["guidance"]["text"] == task_defaults("t2v", "v1").guidance.text == 4.0 and t2v.config["guidance"]["plan"] == 0.5
    assert v2v.config["guidance"]["video"] == 1.25 and v2v.config["apg"] is True and v2v.config["flow_shift"] == 5.0
    assert v2v.config["negative_prompt"] == DEFAULT_NEG_PROMPT and task_defaults("rv2v", "v2").mode == "rv2v"


def test_save_reload_gives_identical_clips_and_settings_override_the_table(pipe, tmp_path):
    before = pipe("make it blue", video=clip(1), generator=4)
    pipe.save_pretrained(tmp_path / "saved")
    again = BerniniPipeline.from_pretrained(tmp_path / "saved")
    again.set_progress_bar_config(disable=True)
    after = again("make it blue", video=clip(1), generator=4)
    assert np.array_equal(before.video, after.video) and np.array_equal(before.plan_tokens, after.plan_tokens)
    assert again.config == pipe.config
    tuned = BerniniPipeline(BerniniConfig(**{**FAST, "guidance_text": 2.0, "apg": "on", "cot": False, "tiling": True}), **pipe.components)
    tuned.set_progress_bar_config(disable=True)
    out = tuned("make it blue", video=clip(1), generator=4)
    assert out.config["guidance"]["text"] == 2.0 and out.config["apg"] is True and out.cot_text is None


def test_renderer_alone_is_bernini_r(release):
    pipe = BerniniPipeline.build(components={"renderer": str(release)}, config=FAST)
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a cat", generator=0)
    assert out.plan_tokens is None and out.video.shape == (5, 32, 32, 3)
    assert out.config["release"] == "r" and out.config["guidance_mode"] == "t2v_apg" and out.config["flow_shift"] == 3.0


def test_bad_requests_name_the_argument(pipe, release, tmp_path):
    with pytest.raises(InputError, match="1 to 5"):
        pipe("dance", references=[clip()[0]] * 6, generator=0)
    with pytest.raises(InputError, match="height"):
        BerniniPipeline(BerniniConfig(**{**FAST, "height": 30}), **pipe.components)("a cat", generator=0)
    with pytest.raises(InputError, match="num_frames"):
        BerniniPipeline(BerniniConfig(**{**FAST, "num_frames": 6}), **pipe.components)("a cat", generator=0)
    with pytest.raises(InputError, match="prompt"):
        pipe("  ", generator=0)
    (tmp_path / "qwen_only").mkdir()
    (tmp_path / "qwen_only" / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    with pytest.raises(InputError, match="no plan head"):
        BerniniPipeline.build(components={"planner": str(tmp_path / "qwen_only"), "renderer": str(release)})
    with pytest.raises(InputError, match="neither"):
        BerniniPipeline.build(components={"renderer": str(tmp_path / "qwen_only")})
