"""Bernini runs the shared pipeline contract (``PipelineTesterMixin``) on builtin components at toy size:
a tiny random semantic planner, the builtin plan encoder (shipped ViT + MiniLM) and a tiny random
builtin renderer; and every task through the one pipeline class."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from core.errors import InputError
from pipeline_tester import PipelineTesterMixin
from pipelines.bernini import BerniniConfig, BerniniPipeline
from pipelines.bernini.tasks import infer_task
from planners.semantic import builtin_planner
from planners.semantic.backbones import TinyBackboneConfig
from planners.semantic.encoder import BuiltinPlanEncoder
from renderers.builtin import BuiltinRenderer, BuiltinRendererConfig
from training.planner import default_planner_config

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_components(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    planner = builtin_planner(replace(default_planner_config(), head_width=32, head_depth=1, planning_steps=2, denoising_steps=1),
                              TinyBackboneConfig(hidden_size=32, num_layers=2, num_heads=2)).eval()
    for p in planner.head.final.parameters():  # the zero-initialised head would plan all-zero tokens
        torch.nn.init.normal_(p, std=0.2)
    renderer = BuiltinRenderer(BuiltinRendererConfig(width=32, depth=1, heads=2, steps=2)).eval()
    for p in renderer.parameters():
        if p.ndim > 1 and not p.abs().sum():
            torch.nn.init.normal_(p, std=0.05)
    return {"planner": planner, "renderer": renderer, "encoder": BuiltinPlanEncoder.from_pretrained()}


class TestBerniniContract(PipelineTesterMixin):
    pipeline_class = BerniniPipeline
    # mean pixel of frames 0, 8, 15 and the plan tokens' mean and std (computed once, then frozen);
    # means of 12,288 uint8 values move by 1e-4 when one pixel rounds the other way, hence the tolerance
    expected_slice = [127.6794, 128.0537, 126.6706, 5.9767, 169.9910]
    slice_atol = 0.05
    bad_inputs = (
        ({"prompt": ""}, "prompt"),
        ({"prompt": "x" * 5000}, "characters"),
        ({"references": [np.zeros((8, 8, 3), np.uint8)] * 6}, "1 to 5"),
        ({"references": "one.png"}, "references"),
        ({"video": np.zeros((4, 8, 8), np.uint8)}, "video"),
        ({"image": np.zeros((8, 8), np.float32)}, "image"),
    )

    def get_dummy_components(self):
        return tiny_components()

    def get_dummy_inputs(self, seed=0):
        return {"prompt": "a red star moves to the left", "generator": seed}

    def output_slice(self, out):
        v = out.video.astype(np.float64)
        return np.array([v[0].mean(), v[8].mean(), v[15].mean(), out.plan_tokens.mean() * 100, out.plan_tokens.std() * 100])


@pytest.fixture(scope="module")
def pipe():
    p = BerniniPipeline(**tiny_components())
    p.set_progress_bar_config(disable=True)
    return p


def clip(frames=20, h=48, w=80, seed=0):
    return np.random.default_rng(seed).integers(0, 255, (frames, h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("task, inputs, sources", [
    ("t2v", {}, 0), ("i2v", {"image": clip(1)[0]}, 1), ("v2v", {"video": clip()}, 1),
    ("r2v", {"references": [clip(1, seed=i)[0] for i in range(3)]}, 3),
    ("rv2v", {"video": clip(), "references": [clip(1)[0]]}, 2)])
def test_every_task_runs_through_one_pipeline(pipe, task, inputs, sources, tmp_path):
    out = pipe("make the blue square green", generator=3, **inputs)
    assert out.task == task and out.video.shape == (16, 64, 64, 3) and out.video.dtype == np.uint8
    assert out.plan_tokens.shape == (4, 8, 8, 192) and out.plan_frames == [0, 5, 10, 15]
    assert out.seed == 3 and out.config["task"] == task and out.cot_text is None
    out.save(tmp_path / task)
    for name in ("video.mp4", "plan.png", "frames.png", "plan_tokens.npy", "result.json", "config.json"):
        assert (tmp_path / task / name).is_file(), name


def test_t2i_gives_one_frame_and_no_plan_gives_no_tokens(pipe):
    t2i = BerniniPipeline(BerniniConfig(task="t2i"), **pipe.components)(prompt="a green circle", generator=0)
    assert t2i.video.shape == (1, 64, 64, 3) and t2i.plan_frames == [0]
    plain = BerniniPipeline(BerniniConfig(plan=False), **pipe.components)(prompt="a green circle", generator=0)
    assert plain.plan_tokens is None and plain.plan_picture() is None and plain.video.shape == (16, 64, 64, 3)
    bare = BerniniPipeline(renderer=pipe.renderer)("a green circle", generator=0)  # Bernini-R: a renderer alone
    assert bare.plan_tokens is None


def test_no_generator_draws_and_reports_a_seed_that_reproduces_the_run(pipe):
    a = pipe("a red star moves to the left")
    b = pipe("a red star moves to the left", generator=a.seed)
    assert np.array_equal(a.video, b.video)


def test_task_rules_name_the_input():
    assert infer_task("auto", False, False, 0) == "t2v" and infer_task("auto", True, False, 2) == "rv2v"
    with pytest.raises(InputError, match="task t2v takes no video"):
        infer_task("t2v", True, False, 0)
    with pytest.raises(InputError, match="needs a video"):
        infer_task("v2v", False, False, 0)
    with pytest.raises(InputError, match="not both"):
        infer_task("auto", True, True, 0)


def test_sizes_the_builtin_renderer_cannot_take_are_refused_before_any_work(pipe):
    with pytest.raises(InputError, match="height"):
        BerniniPipeline(BerniniConfig(height=60), **pipe.components)("a red star", generator=0)
    with pytest.raises(InputError, match="needs a video"):
        BerniniPipeline(BerniniConfig(task="v2v"), **pipe.components)("a red star", generator=0)


def test_plan_candidates_keep_the_best_scored_draw_and_one_is_the_plain_call(pipe, monkeypatch):
    plain = pipe("a red star moves to the left", generator=5)
    one = BerniniPipeline(BerniniConfig(plan_candidates=1), **pipe.components)("a red star moves to the left", generator=5)
    assert np.array_equal(plain.video, one.video) and np.array_equal(plain.plan_tokens, one.plan_tokens)
    # the three draws of one seeded generator, in order, as the pipeline makes them
    gen = torch.Generator().manual_seed(5)
    request = pipe.encoder.encode_prompt("a red star moves to the left")
    from planners.semantic import PlanRequest

    draws = [pipe.planner.plan(PlanRequest(prompt_embeds=request, task="t2v"), grid=(4, 8, 8), generator=gen).tokens.numpy()
             for _ in range(3)]
    scores = iter([0.1, 0.9, 0.5])  # the second draw scores best
    seen = []

    def fake_score(tokens, text):
        seen.append(text)
        return next(scores)

    monkeypatch.setattr(pipe.encoder, "plan_text_score", fake_score)
    three = BerniniPipeline(BerniniConfig(plan_candidates=3), **pipe.components)("a red star moves to the left", generator=5)
    assert seen == ["a red star moves to the left"] * 3
    assert np.allclose(three.plan_tokens, draws[1]) and not np.allclose(three.plan_tokens, draws[0])


def test_plan_text_score_reads_plan_tokens_and_names_bad_ones(pipe):
    tokens = torch.randn(4, 8, 8, 192)
    s = pipe.encoder.plan_text_score(tokens, "a red star")
    assert -1.0 <= s <= 1.0 and s == pipe.encoder.plan_text_score(tokens, "a red star")
    with pytest.raises(InputError, match="tokens"):
        pipe.encoder.plan_text_score(torch.randn(8, 8, 192), "a red star")
    with pytest.raises(InputError, match="text"):
        pipe.encoder.plan_text_score(tokens, " ")
    class NoScore:  # an encoder that reads prompts but cannot rank plans
        encode_prompt, encode_visual = pipe.encoder.encode_prompt, pipe.encoder.encode_visual

    with pytest.raises(InputError, match="plan_candidates"):
        BerniniPipeline(BerniniConfig(plan_candidates=2), planner=pipe.planner, renderer=pipe.renderer,
                        encoder=NoScore())("a red star", generator=0)
