"""The hf Bernini renderer on tiny random Wan folders saved to disk (spec bernini.md b.5-b.8, d.2 items 9-12)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_wan import MAX_SEQUENCE_LENGTH, TEXT_DIM, build_tiny_bernini_r

from core.errors import InputError
from renderers import hf_wan
from renderers.guidance import GuidanceScales
from renderers.hf_wan import PlanContexts, Segment, WanRenderer

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = {"height": 32, "width": 32, "num_frames": 5}
FAST = {**SIZE, "num_inference_steps": 2}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    """``single``: one expert + UMT5 (Bernini-R-1.3B layout). ``moe``: two experts, no text encoder,
    stock Wan ``model_index.json`` instead of the root config."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    diffusers_logging.disable_progress_bar()
    root = tmp_path_factory.mktemp("tiny_wan")
    return {"single": build_tiny_bernini_r(root / "single"),
            "moe": build_tiny_bernini_r(root / "moe", two_experts=True, text_encoder=False, root_config=False)}


@pytest.fixture(scope="module")
def renderer(dirs) -> WanRenderer:
    return WanRenderer.from_pretrained(dirs["single"], device="cpu")


@pytest.fixture(scope="module")
def moe(dirs) -> WanRenderer:
    return WanRenderer.from_pretrained(dirs["moe"], device="cpu")


def _clip(seed: int, frames: int | None = 5, h: int = 32, w: int = 32) -> np.ndarray:
    shape = (h, w, 3) if frames is None else (frames, h, w, 3)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _latents(seed: int, t: int = 2, h: int = 4, w: int = 4, b: int = 1) -> torch.Tensor:
    return torch.randn(b, 16, t, h, w, generator=torch.Generator().manual_seed(seed))


def _text(seed: int, n: int = 7, b: int = 1) -> torch.Tensor:
    return torch.randn(b, n, TEXT_DIM, generator=torch.Generator().manual_seed(seed))


def _count_forwards(monkeypatch, r: WanRenderer) -> list[int]:
    calls: list[int] = []
    real = hf_wan.packed_forward

    def counting(module, target, *args, **kwargs):
        calls.append(target.shape[0])
        return real(module, target, *args, **kwargs)

    monkeypatch.setattr(hf_wan, "packed_forward", counting)
    return calls


# ---------------------------------------------------------------- loading

def test_loads_the_release_layout(renderer: WanRenderer, moe: WanRenderer) -> None:
    assert renderer.has_text_encoder and renderer.transformer_2 is None
    assert renderer.config.max_sequence_length == MAX_SEQUENCE_LENGTH
    assert renderer.config.extra["architectures"] == ["BerniniRendererModel"]
    # A stock Wan2.2 folder: both experts, the boundary from model_index.json, no text encoder.
    assert moe.transformer_2 is not None and not moe.has_text_encoder
    assert moe.config.switch_dit_boundary == 0.875
    assert (moe.expert(875), moe.expert(874.9), renderer.expert(100)) == ("high", "low", "high")


def test_bad_folder_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        WanRenderer.from_pretrained(tmp_path)
    assert e.value.name == "directory" and "transformer/config.json" in e.value.hint
    with pytest.raises(InputError, match="directory"):
        WanRenderer.from_pretrained(tmp_path / "missing")


# ---------------------------------------------------------------- the packed forward (d.2)

def test_segment_zero_without_sources_is_the_diffusers_forward(renderer: WanRenderer, moe: WanRenderer) -> None:
    x, text = _latents(0, b=2), _text(1, b=2)
    for t in (torch.tensor([999, 250]), torch.tensor(500)):
        with torch.no_grad():
            ref = renderer.transformer(x, t.expand(2), text, return_dict=False)[0]
            ours = renderer.velocity(x, t, [], text)
        assert ours.shape == x.shape and torch.equal(ours, ref)
    with torch.no_grad():
        low = moe.transformer_2(x, torch.tensor([100, 100]), text, return_dict=False)[0]
        assert torch.equal(moe.velocity(x, 100, [], text), low)


def test_target_only_output_and_sources_are_attended(renderer: WanRenderer) -> None:
    x, text = _latents(0), _text(1)
    video, image = _latents(2, t=3, h=6, w=2), _latents(3, t=1, h=4, w=6)
    with torch.no_grad():
        plain = renderer.velocity(x, 700, [], text)
        out = renderer.velocity(x, 700, [video, image], text)
        changed = renderer.velocity(x, 700, [video, image + 1.0], text)
    assert out.shape == x.shape and out.dtype == torch.float32
    assert not torch.allclose(out, plain) and not torch.allclose(out, changed)


def test_source_order_does_not_matter_when_ids_travel_with_tokens(renderer: WanRenderer) -> None:
    x, text = _latents(0), _text(1)
    a, b = Segment(_latents(2), 1.0), Segment(_latents(3, t=1), 2.0, "image")
    with torch.no_grad():
        ab = renderer.velocity(x, 600, [a, b], text)
        ba = renderer.velocity(x, 600, [b, a], text)
    torch.testing.assert_close(ab, ba, rtol=0, atol=1e-5)


def test_segment_id_tells_a_colocated_source_from_the_target(renderer: WanRenderer) -> None:
    x, text = _latents(0), _text(1)
    src = _latents(4)  # same grid as the target: only the SA-3D phase separates their positions
    with torch.no_grad():
        same = renderer.velocity(x, 600, [Segment(src, 0.0)], text)
        sa3d = renderer.velocity(x, 600, [Segment(src, 1.0)], text)
    assert not torch.allclose(same, sa3d, atol=1e-4)


def test_plan_tokens_follow_the_text(renderer: WanRenderer) -> None:
    x, text, plan = _latents(0), _text(1), _text(2, n=3)
    with torch.no_grad():
        joined = renderer.velocity(x, 400, [], torch.cat([text, plan], 1))
        torch.testing.assert_close(renderer.velocity(x, 400, [], text, plan), joined, rtol=0, atol=0)
    with pytest.raises(InputError, match="plan"):
        renderer.velocity(x, 400, [], text, torch.zeros(1, 3, TEXT_DIM + 1))


# ---------------------------------------------------------------- sampling end to end

def test_t2v_v2v_r2v_run_and_batch_the_cascade(renderer: WanRenderer, monkeypatch) -> None:
    calls = _count_forwards(monkeypatch, renderer)
    t2v = renderer.generate("a red square moves right", generator=0, **FAST)
    # base (negative prompt) and text rung see the same tokens (no sources): one batched forward per step.
    assert t2v.shape == (5, 32, 32, 3) and t2v.dtype == np.uint8 and calls == [2, 2]

    calls.clear()
    v2v = renderer.generate("make it blue", sources=[_clip(1)], generator=0, **FAST)
    # base alone; image + text rungs share [video | target] and a context length.
    assert v2v.shape == (5, 32, 32, 3) and calls == [1, 2, 1, 2]

    calls.clear()
    refs = [_clip(2, frames=None), _clip(3, frames=None, h=48, w=16)]
    r2v = renderer.generate("the two objects dance", sources=refs, generator=0,
                            guidance=GuidanceScales(video=1.0), **FAST)
    # No source video: the video rung is skipped even with a scale.
    assert r2v.shape == (5, 32, 32, 3) and calls == [1, 2, 1, 2]
    assert not np.array_equal(t2v, v2v) and not np.array_equal(v2v, r2v)


def test_batched_branches_equal_one_forward_each(renderer: WanRenderer) -> None:
    kw = {"sources": [_clip(1), _clip(2, frames=None)], "guidance": GuidanceScales(video=1.25), **FAST}
    batched = renderer.generate("edit", generator=5, output_type="latent", **kw)
    single = renderer.generate("edit", generator=5, output_type="latent", batch_branches=False, **kw)
    torch.testing.assert_close(batched, single, rtol=0, atol=1e-5)


def test_same_generator_same_video(renderer: WanRenderer) -> None:
    a = renderer.generate("a star", generator=torch.Generator().manual_seed(3), **FAST)
    b = renderer.generate("a star", generator=torch.Generator().manual_seed(3), **FAST)
    c = renderer.generate("a star", generator=torch.Generator().manual_seed(4), **FAST)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_save_and_reload_give_the_same_video(renderer: WanRenderer, tmp_path: Path) -> None:
    kw = {"sources": [_clip(1)], "generator": 7, **FAST}
    before = renderer.generate("a circle", **kw)
    renderer.save_pretrained(tmp_path / "saved")
    cfg = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert cfg["model_type"] == "bernini_renderer" and cfg["architectures"] == ["BerniniRendererModel"]
    again = WanRenderer.from_pretrained(tmp_path / "saved", device="cpu").generate("a circle", **kw)
    assert np.array_equal(before, again)


def test_two_experts_switch_at_the_boundary_with_embeddings(moe: WanRenderer, monkeypatch) -> None:
    guides: list[hf_wan.CascadeGuidance] = []

    class Recording(hf_wan.CascadeGuidance):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            guides.append(self)

    monkeypatch.setattr(hf_wan, "CascadeGuidance", Recording)
    seen: list[tuple[int, str]] = []
    out = moe.generate(text_embeds=_text(1), negative_text_embeds=_text(2, n=4), num_inference_steps=4,
                       flow_shift=1.0, generator=0, callback=lambda i, info: seen.append((i, info["expert"])),
                       **SIZE)
    assert out.shape == (5, 32, 32, 3)
    assert [e for _, e in seen] == ["high", "low", "low", "low"] and [i for i, _ in seen] == [0, 1, 2, 3]
    # The low-noise expert runs with every scale times omega_scale, applied once (spec b.8).
    (guide,) = guides
    assert guide.switched and guide.scales == guide.initial_scales.scaled(guide.initial_scales.omega_scale)


def test_no_text_encoder_asks_for_embeddings(moe: WanRenderer) -> None:
    with pytest.raises(InputError) as e:
        moe.generate("a prompt", **FAST)
    assert e.value.name == "prompt" and "text_embeds" in e.value.hint
    with pytest.raises(InputError, match="negative_text_embeds"):
        moe.generate(text_embeds=_text(1), **FAST)
    # Without guidance no negative is needed.
    assert moe.generate(text_embeds=_text(1), guidance=None, **FAST).shape == (5, 32, 32, 3)


def test_plan_contexts_add_the_plan_rung(renderer: WanRenderer, monkeypatch) -> None:
    calls = _count_forwards(monkeypatch, renderer)
    plan = PlanContexts(with_target=_text(3, n=5), without_target=_text(4, n=2), uncond=_text(5, n=2))
    out = renderer.generate("a square", plan=plan, generator=0, **FAST)
    # with a plan the UMT5 rows are cropped to the prompt and every context padded to 512 (the release's
    # _pad_renderer_context): the three rungs share a length and one batched forward
    assert out.shape == (5, 32, 32, 3) and calls == [3, 3]
    calls.clear()
    renderer.generate("a square", plan=plan, generator=0, context_min_length=0, **FAST)
    assert calls == [1, 1, 1] * 2  # exact lengths: negative + 2, prompt + 2, prompt + 5: no two rungs batch


# ---------------------------------------------------------------- text, VAE, memory

def test_prompt_features_are_zero_past_the_prompt(renderer: WanRenderer) -> None:
    feats = renderer.encode_prompt(["a red square", "a much longer prompt about a green circle"])
    mask = renderer.tokenizer(["a red square"], padding="max_length", max_length=MAX_SEQUENCE_LENGTH,
                              truncation=True, return_tensors="pt").attention_mask[0].bool()
    assert feats.shape == (2, MAX_SEQUENCE_LENGTH, TEXT_DIM)
    assert torch.all(feats[0, ~mask] == 0) and torch.all(feats[0, mask].abs().sum(-1) > 0)


def test_vae_round_trip_shapes_and_tiling(renderer: WanRenderer) -> None:
    z = renderer.encode_video(_clip(1, frames=9, h=48, w=32))
    assert z.shape == (1, 16, 3, 6, 4)
    assert renderer.encode_video(_clip(2, frames=None)).shape == (1, 16, 1, 4, 4)
    plain = renderer.decode_latents(z)
    renderer.enable_tiling(tile_sample_min_height=32, tile_sample_min_width=32, tile_sample_stride_height=16,
                           tile_sample_stride_width=16)
    try:
        tiled = renderer.decode_latents(z)
    finally:
        renderer.disable_tiling()
    assert plain.shape == tiled.shape == (9, 48, 32, 3) and plain.dtype == np.uint8


def test_cpu_offload_is_a_logged_no_op_here(renderer: WanRenderer, caplog) -> None:
    if torch.cuda.is_available():
        pytest.skip("an accelerator is present: offload really happens")
    with caplog.at_level(logging.WARNING, logger="renderers.hf_wan"):
        assert renderer.enable_model_cpu_offload() is renderer
    assert "no accelerator" in caplog.text and renderer.device.type == "cpu"
    assert renderer.generate("a square", guidance=None, **FAST).shape == (5, 32, 32, 3)


def test_offload_hooks_move_each_component_when_used(dirs) -> None:
    # No accelerator here, so the hooks run with the CPU as their execution device: this checks the
    # routing (every component onloaded before use, the DiT's forward bypassed by hand), not the copies.
    r = WanRenderer.from_pretrained(dirs["single"], device="cpu")
    kw = {"sources": [_clip(1)], "generator": 2, **FAST}
    plain = r.generate("a square", **kw)
    r._install_offload(torch.device("cpu"))
    assert set(r._offload) == {"transformer", "vae", "text_encoder"} and hasattr(r.transformer, "_hf_hook")
    assert np.array_equal(r.generate("a square", **kw), plain)
    r.to("cpu")  # a move ends offloading
    assert not r._offload and not hasattr(r.transformer, "_hf_hook")


# ---------------------------------------------------------------- bad inputs

@pytest.mark.parametrize("kw,name", [
    ({"height": 30}, "height"), ({"width": 40}, "width"), ({"height": "32"}, "height"),
    ({"num_frames": 6}, "num_frames"), ({"num_frames": 0}, "num_frames"),
])
def test_bad_sizes_name_the_argument(renderer: WanRenderer, kw: dict, name: str) -> None:
    with pytest.raises(InputError) as e:
        renderer.generate("x", **{**FAST, **kw})
    assert e.value.name == name and e.value.value == kw[name] and e.value.hint


@pytest.mark.parametrize("source,fix", [
    (_clip(1, frames=6), "num_frames"), (_clip(1, h=24), "height"),
    (np.zeros((5, 32, 32, 3), np.float32), "uint8"), (np.zeros((32, 32), np.uint8), "uint8"),
])
def test_bad_sources_name_the_source(renderer: WanRenderer, source: np.ndarray, fix: str) -> None:
    with pytest.raises(InputError) as e:
        renderer.generate("x", sources=[_clip(2), source], **FAST)
    assert e.value.name == "sources[1]" and fix in e.value.hint


def test_bad_embeddings_and_settings(renderer: WanRenderer) -> None:
    with pytest.raises(InputError, match="text_embeds"):
        renderer.generate(text_embeds=torch.zeros(1, 4, TEXT_DIM + 1), guidance=None, **FAST)
    with pytest.raises(InputError, match="flow_shift"):
        renderer.generate("x", flow_shift=0.0, **FAST)
    with pytest.raises(InputError, match="output_type"):
        renderer.generate("x", output_type="pil", **FAST)
    with pytest.raises(InputError, match="switch_dit_boundary"):
        hf_wan.RendererConfig(switch_dit_boundary=1.5)
