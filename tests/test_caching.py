"""Renderer step caching through diffusers' hooks (renderers.caching, issue 50): the pipeline settings, fewer
transformer evaluations, each guidance branch in its own cache context (never reading another's), each Wan
expert with its own cache across the switch, MagCache's calibration, the builtin renderer, clear errors."""

import dataclasses

import numpy as np
import pytest
import torch
from tiny_wan import TEXT_DIM, build_tiny_bernini_r, tiny_transformer, tiny_vae

from core.errors import InputError
from pipelines.anymotion import AnyMotionConfig
from pipelines.bernini import BerniniConfig, BerniniPipeline
from renderers import caching
from renderers.caching import CACHE_MODES, CacheSettings, EvaluationCounter
from renderers.guidance import GuidanceScales
from renderers.hf_wan import RendererConfig, WanRenderer

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT_ONLY = GuidanceScales(video=0.0, image=0.0, text=4.0, plan=0.0)  # two branches a step: base and text


def wan(two_experts: bool = False) -> WanRenderer:
    return WanRenderer(tiny_transformer(0), tiny_vae(0), transformer_2=tiny_transformer(1) if two_experts else None,
                       config=RendererConfig(switch_dit_boundary=0.875 if two_experts else 0.0))


def call(steps: int = 8) -> dict:
    g = torch.Generator().manual_seed(3)
    return dict(text_embeds=torch.randn(1, 6, TEXT_DIM, generator=g), negative_text_embeds=torch.randn(1, 6, TEXT_DIM, generator=g),
                height=32, width=32, num_frames=5, num_inference_steps=steps, guidance=TEXT_ONLY, generator=0, output_type="latent")


def test_the_setting_is_declared_on_both_pipelines_and_off_by_default():
    for cfg in (BerniniConfig, AnyMotionConfig):
        f = {x.name: x for x in dataclasses.fields(cfg)}
        assert f["cache"].default == "none" and f["cache"].metadata["choices"] == CACHE_MODES == ("none", "first_block", "mag", "taylorseer")
        assert f["cache_threshold"].default is None and f["cache_interval"].default is None and f["cache"].metadata["help"]
        with pytest.raises(InputError, match="cache"):
            cfg(cache="fast")
        with pytest.raises(InputError, match="cache_threshold"):
            cfg(cache="first_block", cache_threshold=2.0)
    assert caching.from_settings("none") is None and caching.from_settings("first_block", 0.2).threshold == 0.2


def test_bad_cache_values_name_the_argument():
    r = wan()
    with pytest.raises(InputError, match="cache"):
        r.generate(**call(2), cache="fast")
    with pytest.raises(InputError, match="cache_threshold"):
        CacheSettings("first_block", threshold=-0.1)
    with pytest.raises(InputError, match="cache_interval"):
        CacheSettings("taylorseer", interval=0)
    with pytest.raises(InputError, match="calibrate_mag_cache"):  # MagCache without this checkpoint's ratios
        r.generate(**call(2), cache="mag")


def test_first_block_cache_runs_fewer_evaluations_and_keeps_the_shape():
    r = wan()
    with EvaluationCounter(r.transformer) as plain:
        ref = r.generate(**call())
    with EvaluationCounter(r.transformer) as cached:
        out = r.generate(**call(), cache=CacheSettings("first_block", threshold=0.5))
    assert plain.evaluations == 16.0 and plain.full == 16  # 8 steps x 2 branches (batched rows count apart)
    assert cached.evaluations < plain.evaluations and cached.full < plain.full
    assert out.shape == ref.shape == (1, 16, 2, 4, 4) and torch.isfinite(out).all()
    # off again after the call: the hooks do not outlive it
    assert not r.transformer.is_cache_enabled and torch.equal(r.generate(**call()), ref)
    with EvaluationCounter(r.transformer) as ts:
        r.generate(**call(), cache="taylorseer")
    assert ts.evaluations < plain.evaluations


def test_each_guidance_branch_runs_in_its_own_cache_context(monkeypatch):
    seen = []
    real = caching.branch_context

    def spy(module, name):
        seen.append((name, module.is_cache_enabled))
        return real(module, name)

    monkeypatch.setattr(caching, "branch_context", spy)
    r = wan()
    r.generate(**call(3), cache="first_block")
    assert seen == [("base", True), ("text", True)] * 3  # one branch a forward, never batched, every step
    seen.clear()
    r.generate(**call(3))
    assert seen == [("base+text", False)] * 3  # uncached: batched, no hooks


def test_branches_never_read_each_others_cache():
    """With a threshold so high that every step after the first reuses the cache, each branch's output is what it
    is when that branch runs alone: the other branch's residuals never leak in. The control shares one context
    name and does leak."""
    r = wan()
    g = torch.Generator().manual_seed(1)
    x = [torch.randn(1, 16, 2, 4, 4, generator=g) for _ in range(3)]
    ctx = {"base": torch.randn(1, 6, TEXT_DIM, generator=g), "text": torch.randn(1, 6, TEXT_DIM, generator=g)}
    ts = [torch.tensor(900.0), torch.tensor(880.0), torch.tensor(860.0)]

    def run(branches, names):
        outs = {b: [] for b in branches}
        with caching.enabled({"high": (r.transformer, 3)}, CacheSettings("first_block", threshold=1.0)), \
                EvaluationCounter(r.transformer) as count:
            for xi, t in zip(x, ts):
                for b in branches:
                    outs[b].append(r._forward("high", xi, t, ctx[b], [], branch=names[b]))
            state = r.transformer.blocks[0]._diffusers_hook.get_hook("fbc_leader_block_hook").state_manager._state_cache
            keys = set(state)
        return outs, count, keys

    both, count, keys = run(("base", "text"), {"base": "base", "text": "text"})
    assert keys == {"base", "text"} and count.full == 2  # each branch's own state; only the first step ran in full
    for b in ("base", "text"):
        alone, _, _ = run((b,), {b: b})
        assert all(torch.equal(u, v) for u, v in zip(both[b], alone[b]))
    shared, _, _ = run(("base", "text"), {"base": "cond", "text": "cond"})
    assert not torch.allclose(shared["text"][1], both["text"][1])  # one context for both: text reads base's residual
    # and the cached branches still differ from each other, as the uncached ones do
    assert not torch.allclose(both["base"][2], both["text"][2])


def test_each_expert_has_its_own_cache_across_the_switch():
    r = wan(two_experts=True)
    with EvaluationCounter(r.transformer) as high, EvaluationCounter(r.transformer_2) as low:
        r.generate(**call(12), cache=CacheSettings("first_block", threshold=1.0))
    # each expert runs its first step in full for each branch: the low expert never reuses the high one's residuals
    assert high.full == 2 and low.full == 2 and high.evaluations > 2 and low.evaluations > 2


def test_mag_cache_calibrates_saves_and_skips(tmp_path):
    folder = build_tiny_bernini_r(tmp_path / "wan", two_experts=True, text_encoder=False)
    r = WanRenderer.from_pretrained(folder, device="cpu", dtype="float32")
    ratios = r.calibrate_mag_cache(**call(12))
    assert set(ratios) == {"high", "low"} and len(ratios["high"]) + len(ratios["low"]) == 12 and ratios["high"][0] == 1.0
    r.save_pretrained(tmp_path / "saved")
    again = WanRenderer.from_pretrained(tmp_path / "saved", device="cpu", dtype="float32")
    assert again.mag_ratios == ratios
    with EvaluationCounter(again.transformer, again.transformer_2) as count:
        out = again.generate(**call(12), cache=CacheSettings("mag", threshold=0.5))
    assert count.evaluations < 24 and out.shape == (1, 16, 2, 4, 4)


def test_builtin_renderer_takes_the_same_hooks():
    from renderers.builtin import BuiltinRenderer, BuiltinRendererConfig

    torch.manual_seed(0)
    r = BuiltinRenderer(BuiltinRendererConfig(width=32, depth=3, heads=2, steps=6)).eval()
    for p in r.parameters():  # zero-initialised parts would make every step alike
        torch.nn.init.normal_(p, std=0.05)
    kw = dict(text=np.random.default_rng(0).normal(size=(3, 384)).astype(np.float32), num_frames=2, height=16, width=16, generator=0,
              guidance=2.0)
    with EvaluationCounter(r) as plain:
        ref = r.generate(**kw)
    with EvaluationCounter(r) as cached:
        out = r.generate(**kw, cache=CacheSettings("first_block", threshold=1.0))
    assert plain.evaluations == 12.0 and cached.evaluations < plain.evaluations and out.shape == ref.shape == (2, 16, 16, 3)
    r.calibrate_mag_cache(**kw)
    with EvaluationCounter(r) as mag:
        r.generate(**kw, cache=CacheSettings("mag", threshold=0.5, warmup=0.0))
    assert mag.evaluations < plain.evaluations and not r.is_cache_enabled


def test_the_pipeline_passes_the_setting_to_the_renderer(tmp_path):
    folder = build_tiny_bernini_r(tmp_path / "wan")
    fast = {"num_frames": 5, "height": 32, "width": 32, "steps": 6}
    pipe = BerniniPipeline.build(components={"renderer": str(folder)}, config=fast)
    pipe.set_progress_bar_config(disable=True)
    cached = BerniniPipeline(BerniniConfig(**fast, cache="first_block", cache_threshold=1.0), **pipe.components)
    cached.set_progress_bar_config(disable=True)
    with EvaluationCounter(pipe.renderer.transformer) as plain:
        a = pipe("a cat", generator=0)
    with EvaluationCounter(pipe.renderer.transformer) as fewer:
        b = cached("a cat", generator=0)
    assert fewer.evaluations < plain.evaluations and a.video.shape == b.video.shape
    assert b.config["cache"] == "first_block" and b.config["cache_threshold"] == 1.0 and a.config["cache"] == "none"
