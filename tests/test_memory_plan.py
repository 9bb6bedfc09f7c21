"""A memory plan before loading (issue 60): the full Bernini release sized from its configs alone (meta tensors), its
components within 2% of their published sizes, a placement for 24 / 48 / 80 GB whose estimated peak fits, and bf16
checkpoints that stay bf16 on the CPU."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from app.cli import main
from benchmarks.bernini_release_sizes import PUBLISHED_PARAMS, scale_release
from core.errors import InputError
from core.memory_plan import STRATEGIES, parse_memory
from pipelines.bernini.memory import plan_release, release_parts
from test_bernini_official_layout import build_full_release, read_release, write_release_shards
from tiny_wan import build_tiny_bernini_r

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def real_sized(tmp_path_factory) -> Path:
    """The tiny full release with its configs rewritten to the real release's sizes (weights stay tiny)."""
    return scale_release(build_full_release(tmp_path_factory.mktemp("release") / "Bernini-Diffusers"))


def test_each_component_is_sized_within_2_percent_of_its_published_count(real_sized):
    parts = {p.name: p for p in release_parts(real_sized)}
    assert set(PUBLISHED_PARAMS) <= set(parts)
    for name, published in PUBLISHED_PARAMS.items():
        assert abs(parts[name].params / published - 1) <= 0.02, (name, parts[name].params, published)
    bf16 = [p for p in parts.values() if p.role in ("planner", "dit", "text_encoder")]
    assert all(p.dtype == "bfloat16" and p.bytes == 2 * p.params for p in bf16)
    assert parts["vae"].dtype == "float32"  # the renderer keeps its VAE in float32
    total = sum(p.bytes for p in parts.values())
    assert 84e9 < total < 88e9, total  # 2 x 28.6 + 16.6 + 11.4 + 0.5 GB: more than an 80 GB card holds


@pytest.mark.parametrize("budget, fastest", [("24GB", "fp8-dit"), ("48GB", "model-offload"),
                                              ("80GB", "active-expert")])
def test_a_plan_for_each_budget_fits_it_with_the_fastest_strategy_that_does(real_sized, budget, fastest):
    plan = plan_release(real_sized, parse_memory(budget))
    assert plan.peak <= plan.budget and plan.strategy == fastest, str(plan)
    faster = STRATEGIES[:STRATEGIES.index(plan.strategy)]
    assert all(plan_release(real_sized, plan.budget, strategy=s).peak > plan.budget for s in faster)
    assert set(plan.places) == {p.name for p in plan.parts}
    assert plan.to_dict()["peak_bytes"] == plan.peak


def test_the_plan_follows_the_clip_size(real_sized):
    small = plan_release(real_sized, parse_memory("80GB"), num_frames=17, height=256, width=256, segments=1)
    big = plan_release(real_sized, parse_memory("80GB"))
    assert small.activations < big.activations / 10


def test_too_small_a_budget_or_a_bad_size_is_a_clear_error(real_sized):
    with pytest.raises(InputError, match="no placement fits: the least this needs is about"):
        plan_release(real_sized, parse_memory("8GB"))
    for bad in ("24XB", "-3GB", "lots", "0.5KB", True):
        with pytest.raises(InputError, match="max_memory"):
            parse_memory(bad)
    assert parse_memory("24GB") == 24 * 10**9 and parse_memory("24 GiB") == 24 * 2**30


def test_atelier_info_plans_without_loading_a_weight(real_sized, capsys):
    assert main(["info", "--plan", str(real_sized), "--max-memory", "24GB"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("memory plan for 24.0 GB: fp8-dit") and "transformer_2 (Wan DiT)" in out
    assert main(["info", "--plan", str(real_sized), "--max-memory", "4GB"]) == 2
    assert "no placement fits" in capsys.readouterr().err
    assert main(["info", "--max-memory", "24GB"]) == 2
    assert "pass --plan" in capsys.readouterr().err
    # 86 GB of models planned in a fresh process: its peak memory is the interpreter and the libraries, not the weights
    code = ("import json, resource, sys; from app.cli import main; rc = main(sys.argv[1:]); "
            "print(json.dumps({'rc': rc, 'peak_kib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), file=sys.stderr)")
    run = subprocess.run([sys.executable, "-c", code, "info", "--plan", str(real_sized), "--max-memory", "80GB", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    facts = json.loads(run.stderr.strip().splitlines()[-1])
    assert facts["rc"] == 0 and json.loads(run.stdout)["strategy"] == "active-expert"
    assert facts["peak_kib"] < 4_000_000, facts  # under 4 GB (the libraries; measured 1.9-2.3 GB), against 86 GB of models


def test_a_bernini_r_folder_is_planned_too(tmp_path):
    parts = [p.name for p in release_parts(build_tiny_bernini_r(tmp_path / "r", two_experts=True))]
    assert parts == ["text encoder (UMT5)", "transformer (Wan DiT)", "transformer_2 (Wan DiT)", "vae"]


def test_bf16_checkpoints_load_as_bf16_on_the_cpu(tmp_path):
    """A bf16 release loaded on the CPU without a dtype keeps bf16 (float32 would double it); float32 stays float32."""
    from pipelines.bernini import BerniniPipeline

    from diffusers import WanTransformer3DModel
    from transformers import UMT5EncoderModel

    r = build_tiny_bernini_r(tmp_path / "r")
    for part, cls in (("transformer", WanTransformer3DModel), ("text_encoder", UMT5EncoderModel)):
        cls.from_pretrained(r / part).to(torch.bfloat16).save_pretrained(r / part)
    pipe = BerniniPipeline.from_pretrained(r, device="cpu")
    assert pipe.renderer.transformer.dtype == torch.bfloat16 and pipe.renderer.text_encoder.dtype == torch.bfloat16
    assert pipe.renderer.vae.dtype == torch.float32
    full = build_full_release(tmp_path / "full")
    write_release_shards(full / "bernini", {k: v.to(torch.bfloat16) if v.is_floating_point() else v
                                            for k, v in read_release(full / "bernini").items()})
    pipe = BerniniPipeline.from_pretrained(full, device="cpu")
    assert pipe.renderer.transformer.dtype == torch.bfloat16
    assert next(pipe.planner.backbone.model.parameters()).dtype == torch.bfloat16
    fp32 = BerniniPipeline.from_pretrained(build_tiny_bernini_r(tmp_path / "r32"), device="cpu")
    assert fp32.renderer.transformer.dtype == torch.float32


@pytest.fixture(scope="module")
def tiny_full(tmp_path_factory) -> Path:
    return build_full_release(tmp_path_factory.mktemp("placed") / "Bernini-Diffusers")


def _generate(folder: Path, placement: str):
    import dataclasses

    from pipelines.bernini import BerniniPipeline
    from test_bernini_official_layout import SETTINGS

    pipe = BerniniPipeline.from_pretrained(folder, device="cpu")
    pipe.config = dataclasses.replace(pipe.config, placement=placement, **SETTINGS)
    pipe.set_progress_bar_config(disable=True)
    return pipe, pipe("a red fox runs through the snow", generator=0)


@pytest.mark.parametrize("strategy", ["all-on-device", "active-expert", "model-offload", "stream-dit",
                                      "stream-all"])
def test_each_placement_with_the_cpu_as_device_renders_the_clip_it_renders_without(tiny_full, strategy):
    """The libraries' hooks are installed (accelerate's offload hooks, diffusers' group offloading) and the clip is the one
    rendered with everything left in place: exactly (the CPU as the device moves no bit; on a GPU, transfers are exact
    too). The run's config records the plan."""
    _, reference = _generate(tiny_full, "none")
    pipe, out = _generate(tiny_full, strategy)
    assert np.array_equal(out.video, reference.video)
    assert out.config["memory_plan"]["strategy"] == strategy and "memory_plan" not in reference.config
    r = pipe.renderer
    if strategy in ("active-expert", "model-offload"):
        assert {"transformer", "transformer_2"} <= set(r._offload)
    if strategy.startswith("stream"):
        assert hasattr(r.transformer.blocks[0].attn1.to_q, "_diffusers_hook") and "transformer" not in r._offload
    if strategy == "stream-all":
        assert hasattr(r.text_encoder.encoder.block[0].layer[0].SelfAttention.q, "_diffusers_hook")
    if strategy not in ("all-on-device", "active-expert"):
        assert pipe._planner_stage is not None  # the planner moves to the device for its stage only


def test_fp8_storage_keeps_the_clip_close(tiny_full):
    """Float8 weights (cast per layer as it runs) change the clip a little, not its content (tolerance: mean |diff| under
    2 of 255 on the tiny random model)."""
    _, reference = _generate(tiny_full, "none")
    pipe, out = _generate(tiny_full, "fp8-dit")
    assert pipe.renderer.transformer.blocks[0].ffn.net[0].proj.weight.dtype == torch.float8_e4m3fn
    diff = np.abs(out.video.astype(float) - reference.video.astype(float))
    assert 0 < diff.mean() < 2, diff.mean()


def test_the_gpu_script_builds_a_sized_release_that_plans_and_generates(tmp_path, monkeypatch, capsys):
    """benchmarks/gpu_memory.py: without a GPU it says so and exits 2; its builder of a random release at given sizes (here
    small ones in place of the real) makes a pipeline that the plan places and that generates, on the CPU."""
    import dataclasses

    import benchmarks.bernini_release_sizes as sizes
    from benchmarks.gpu_memory import main as gpu_main
    from benchmarks.gpu_memory import random_release
    from pipelines.bernini.placement import pipeline_parts
    from test_bernini_official_layout import SETTINGS

    if not torch.cuda.is_available():
        assert gpu_main([]) == 2 and "no CUDA GPU here" in capsys.readouterr().err
    small = {"QWEN25_VL_7B_TEXT": dict(sizes.QWEN25_VL_7B_TEXT, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_window_layers=2,
                                       layer_types=["full_attention"] * 2,
                                       rope_parameters={"mrope_section": [2, 3, 3], "rope_theta": 1e6, "rope_type": "default"}),
             "QWEN25_VL_7B_VISION": dict(sizes.QWEN25_VL_7B_VISION, depth=2, hidden_size=32, intermediate_size=48, num_heads=2,
                                         out_hidden_size=64, fullatt_block_indexes=[1]),
             "WAN22_A14B_EXPERT": dict(sizes.WAN22_A14B_EXPERT, num_attention_heads=2, attention_head_dim=16, ffn_dim=48,
                                       num_layers=2, text_dim=32),
             "UMT5_XXL": dict(sizes.UMT5_XXL, d_model=32, d_ff=48, d_kv=8, num_heads=4, num_layers=2, num_decoder_layers=2),
             "WAN_VAE": dict(sizes.WAN_VAE, base_dim=8, dim_mult=[1, 1, 1, 1], num_res_blocks=1),
             "RELEASE_HEADS": {"head_width": 32, "head_depth": 2, "num_mask_tokens": 4}}
    for name, value in small.items():
        monkeypatch.setattr(sizes, name, value)
    pipe = random_release(build_full_release(tmp_path / "Bernini-Diffusers"), True, "float32")
    parts = {p.name: p for p in pipeline_parts(pipe)}
    assert parts["transformer (Wan DiT)"].params == sum(p.numel() for p in pipe.renderer.transformer.parameters())
    assert pipe.planner.config.head_width == 32 and pipe.renderer.transformer.config.num_layers == 2
    pipe.config = dataclasses.replace(pipe.config, placement="model-offload", **SETTINGS)
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a red fox runs through the snow", generator=0)
    assert out.config["memory_plan"]["strategy"] == "model-offload" and np.isfinite(out.video.astype(float)).all()
