"""The official Bernini release folders, as they download, at toy size: ``Bernini-Diffusers`` (v1), ``-v2`` and
``Bernini-R-Diffusers``, each written here with the release's file names, key prefixes and config files (the full
release: ``bernini/model-0000i-of-00003.safetensors`` + ``model.safetensors.index.json`` holding
``diff_dec.transformer.``, ``diff_dec_low.transformer_2.``, ``mllm.`` (Hugging Face Qwen2.5-VL names),
``t5_text_encoder.``, ``connector.proj_gen`` / ``pred_vit``, ``vit_decoder.net.*`` and ``mask_tokens``; ``mllm/``,
``t5_text_encoder/``, ``t5_tokenizer/``, ``vae/``, ``scheduler/``, ``transformer_config.json``,
``transformer_2_config.json``). The planner's tensors are named by hand after the release's module tree
(T8mars/comfyui-bernini-v2-T8 ``planner_model.py``), not by our key map, so loading tests the map.

Each folder loads through ``BerniniPipeline.from_pretrained`` and the CLI and runs every task offline; the
release is detected and recorded; a removed, renamed or extra tensor is an error naming it; ``convert``
writes our layout and back, tensor for tensor."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tiny_wan import TEXT_DIM, build_tiny_bernini_r, tiny_text_encoder, tiny_transformer, tiny_vae

from app.cli import main
from core.errors import InputError
from core.video import write_video
from pipelines.bernini import BerniniConfig, BerniniPipeline
from pipelines.bernini.official import convert, detect_release
from pipelines.bernini.tasks import TASKS

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = {"num_frames": 5, "height": 32, "width": 32, "steps": 2, "planning_steps": 2, "denoising_steps": 1}
CLI_FAST = ["--num-frames", "5", "--height", "32", "--width", "32", "--steps", "2", "--planning-steps", "2",
            "--denoising-steps", "1", "--seed", "0", "--no-progress"]
HEAD_WIDTH, HEAD_DEPTH, MASK_ROWS = 32, 2, 16


def official_aux(h: int, ctx: int) -> dict[str, torch.Tensor]:
    """The planner's own tensors under the release's names: MLPConnector (proj_gen: Linear-GELU-RMSNorm-Linear,
    pred_vit: Linear-GELU-Linear-RMSNorm-Linear), DiffLossFM.net (SimpleMLPAdaLN) and the mask-token table."""
    g = torch.Generator().manual_seed(7)

    def r(*shape, std=0.2):
        return torch.randn(*shape, generator=g) * std

    w = HEAD_WIDTH
    out = {"connector.proj_gen.0.weight": r(ctx, h), "connector.proj_gen.0.bias": r(ctx), "connector.proj_gen.2.weight": 1 + r(ctx),
           "connector.proj_gen.3.weight": r(ctx, ctx), "connector.proj_gen.3.bias": r(ctx), "mask_tokens": r(1, MASK_ROWS, h)}
    for i in (0, 2, 4):
        out[f"connector.pred_vit.{i}.weight"], out[f"connector.pred_vit.{i}.bias"] = r(h, h), r(h)
    out["connector.pred_vit.3.weight"] = 1 + r(h)
    net = "vit_decoder.net."
    out.update({net + "input_proj.weight": r(w, h), net + "input_proj.bias": r(w), net + "cond_embed.weight": r(w, h),
                net + "cond_embed.bias": r(w), net + "time_embed.mlp.0.weight": r(w, 256, std=0.02), net + "time_embed.mlp.0.bias": r(w),
                net + "time_embed.mlp.2.weight": r(w, w), net + "time_embed.mlp.2.bias": r(w),
                net + "final_layer.linear.weight": r(h, w), net + "final_layer.linear.bias": r(h),
                net + "final_layer.adaLN_modulation.1.weight": r(2 * w, w), net + "final_layer.adaLN_modulation.1.bias": r(2 * w)})
    for n in range(HEAD_DEPTH):
        b = f"{net}res_blocks.{n}."
        out.update({b + "in_ln.weight": 1 + r(w), b + "in_ln.bias": r(w), b + "mlp.0.weight": r(w, w), b + "mlp.0.bias": r(w),
                    b + "mlp.2.weight": r(w, w), b + "mlp.2.bias": r(w), b + "adaLN_modulation.1.weight": r(3 * w, w),
                    b + "adaLN_modulation.1.bias": r(3 * w)})
    return out


def write_release_shards(folder: Path, tensors: dict[str, torch.Tensor], shards: int = 3) -> None:
    """``model-0000i-of-0000n.safetensors`` + ``model.safetensors.index.json``, as the release ships ``bernini/``."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = sorted(tensors)
    weight_map, total = {}, 0
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k].contiguous() for k in keys[i::shards]}
        save_file(part, str(folder / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in part})
        total += sum(t.numel() * t.element_size() for t in part.values())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))


def read_release(folder: Path) -> dict[str, torch.Tensor]:
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    out = {}
    for shard in sorted(set(index.values())):
        with safe_open(str(folder / shard), "pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    assert set(out) == set(index)
    return out


def build_full_release(root: Path) -> Path:
    """A tiny ``Bernini-Diffusers`` folder (v1 and v2 share this layout)."""
    from diffusers import UniPCMultistepScheduler
    from tiny_vlms import build_tiny_qwen2_5_vl

    qwen_dir = build_tiny_qwen2_5_vl(root.parent / f"{root.name}-qwen")
    mllm = root / "mllm"
    mllm.mkdir(parents=True)
    for f in qwen_dir.iterdir():  # the assets, not the weights: those live in bernini/
        if not f.name.endswith(".safetensors"):
            shutil.copy(f, mllm / f.name)
    tensors = {}
    with safe_open(str(qwen_dir / "model.safetensors"), "pt") as f:
        tensors.update({"mllm." + k: f.get_tensor(k) for k in f.keys()})
    hidden = json.loads((mllm / "config.json").read_text())["text_config"]["hidden_size"]
    for prefix, seed, cfg in (("diff_dec.transformer.", 0, "transformer_config.json"),
                              ("diff_dec_low.transformer_2.", 1, "transformer_2_config.json")):
        expert = tiny_transformer(seed)
        tensors.update({prefix + k: v for k, v in expert.state_dict().items()})
        (root / cfg).write_text(expert.to_json_string())
    te, tok = tiny_text_encoder(0)
    tensors.update({"t5_text_encoder." + k: v.clone() for k, v in te.state_dict().items() if k != "encoder.embed_tokens.weight"})
    te.config.save_pretrained(root / "t5_text_encoder")
    tok.save_pretrained(root / "t5_tokenizer")
    tensors.update(official_aux(hidden, TEXT_DIM))
    write_release_shards(root / "bernini", tensors)
    tiny_vae(0).save_pretrained(root / "vae")
    UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0, solver_order=2,
                            solver_type="bh2").save_pretrained(root / "scheduler")
    return root


@pytest.fixture(scope="module")
def releases(tmp_path_factory) -> dict[str, Path]:
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    diffusers_logging.disable_progress_bar()
    base = tmp_path_factory.mktemp("hub")
    v1 = build_full_release(base / "Bernini-Diffusers")
    v2 = base / "Bernini-Diffusers-v2"
    shutil.copytree(v1, v2)
    r = build_tiny_bernini_r(base / "Bernini-R-Diffusers", two_experts=True)
    return {"v1": v1, "v2": v2, "r": r}


def clip(seed=0, frames=7, h=40, w=24):
    return np.random.default_rng(seed).integers(0, 256, (frames, h, w, 3), dtype=np.uint8)


def run_tasks(pipe, tasks=TASKS) -> dict:
    """Each task through the one pipeline (its inputs by what the task takes), the task named explicitly."""
    video, image, refs = {"video": clip(1)}, {"image": clip(3)[0]}, {"references": [clip(2)[0]]}
    inputs = {"t2v": {}, "t2i": {}, "i2v": image, "i2i": image, "v2v": video, "mv2v": video, "r2v": refs,
              "rv2v": {**video, **refs}, "ads2v": {**video, **refs}}
    return {t: BerniniPipeline(dataclasses.replace(pipe.config, task=t), **pipe.components)("a red square moves right", generator=0,
                                                                                         **inputs[t]) for t in tasks}


def test_full_release_loads_strictly_and_runs_every_task(releases):
    pipe = BerniniPipeline.from_pretrained(releases["v1"], config=BerniniConfig(**SETTINGS))
    pipe.set_progress_bar_config(disable=True)
    assert pipe.config.release == "v1" and pipe.release == "v1" and pipe.encoder is None
    saved = read_release(releases["v1"] / "bernini")
    planner, renderer = pipe.planner, pipe.renderer
    # the release's names landed on our modules
    pairs = {"connector.proj_gen.3.weight": planner.for_gen[3].weight, "connector.pred_vit.3.weight": planner.for_vit[3].weight,
             "mask_tokens": planner.mask_tokens, "vit_decoder.net.cond_embed.weight": planner.head.cond_proj.weight,
             "vit_decoder.net.res_blocks.1.in_ln.bias": planner.head.blocks[1].norm.bias,
             "vit_decoder.net.res_blocks.0.adaLN_modulation.1.weight": planner.head.blocks[0].ada[1].weight,
             "vit_decoder.net.final_layer.adaLN_modulation.1.bias": planner.head.final.ada[1].bias,
             "mllm.model.layers.1.mlp.up_proj.weight": planner.backbone.model.model.language_model.layers[1].mlp.up_proj.weight,
             "mllm.visual.blocks.0.attn.qkv.weight": planner.backbone.model.model.visual.blocks[0].attn.qkv.weight,
             "mllm.lm_head.weight": planner.backbone.model.lm_head.weight,
             "diff_dec_low.transformer_2.blocks.1.attn2.to_k.weight": renderer.transformer_2.blocks[1].attn2.to_k.weight,
             "diff_dec.transformer.patch_embedding.weight": renderer.transformer.patch_embedding.weight,
             "t5_text_encoder.shared.weight": renderer.text_encoder.encoder.embed_tokens.weight}
    for key, param in pairs.items():
        assert torch.equal(saved[key], param.detach().cpu()), key
    assert planner.config.num_mask_tokens == MASK_ROWS and planner.config.head_depth == HEAD_DEPTH and planner.config.cot is False
    assert renderer.transformer_2 is not None and renderer.config.switch_dit_boundary == 0.875
    outs = run_tasks(pipe)
    for task, out in outs.items():
        assert out.task == task and out.video.dtype == np.uint8 and out.plan_tokens is not None, task
        assert out.config["release"] == "v1" and len(out.video) == (1 if task in ("t2i", "i2i") else 5), task
    assert not np.array_equal(outs["t2v"].video, outs["v2v"].video)


def test_release_is_detected_from_the_folder_name_and_can_be_given(releases, tmp_path):
    assert [detect_release(releases[k]) for k in ("v1", "v2", "r")] == ["v1", "v2", "r"]
    hub = tmp_path / "models--ByteDance--Bernini-Diffusers-v2" / "snapshots" / "0123abc"
    hub.parent.mkdir(parents=True)
    hub.symlink_to(releases["v1"])  # the Hugging Face cache: the name is in a parent folder
    assert detect_release(hub) == "v2"
    assert BerniniPipeline.from_pretrained(releases["v2"]).config.release == "v2"
    assert BerniniPipeline.from_pretrained(releases["v1"], release="v2").config.release == "v2"
    with pytest.raises(InputError, match="release"):
        BerniniPipeline.from_pretrained(releases["v1"], release="r")
    with pytest.raises(InputError, match="release"):
        BerniniPipeline.from_pretrained(releases["r"], release="v2")


def test_bernini_r_release_is_the_renderer_alone(releases):
    pipe = BerniniPipeline.from_pretrained(releases["r"], config=BerniniConfig(**SETTINGS))
    pipe.set_progress_bar_config(disable=True)
    assert pipe.planner is None and pipe.config.release == "r" and pipe.renderer.transformer_2 is not None
    for out in run_tasks(pipe, ("t2v", "v2v")).values():
        assert out.plan_tokens is None and out.video.shape == (5, 32, 32, 3) and out.config["release"] == "r"


def test_cli_generate_and_edit_take_each_release(releases, tmp_path):
    video = write_video(tmp_path / "src.mp4", clip(4, frames=9, h=32, w=32), fps=16)
    for name in ("v2", "r"):
        out = tmp_path / f"gen-{name}"
        assert main(["generate", "a red square moves right", "--pipeline", str(releases[name]), "-o", str(out), *CLI_FAST]) == 0
        assert json.loads((out / "config.json").read_text())["release"] == name
        assert json.loads((out / "result.json").read_text())["task"] == "t2v"
        edit = tmp_path / f"edit-{name}"
        assert main(["edit", str(video), "make it blue", "--pipeline", str(releases[name]), "-o", str(edit), *CLI_FAST]) == 0
        assert json.loads((edit / "config.json").read_text())["release"] == name
    assert main(["generate", "a cat", "--pipeline", str(releases["v1"]), "--release", "v2", "-o", str(tmp_path / "given"),
                 *CLI_FAST]) == 0
    assert json.loads((tmp_path / "given" / "config.json").read_text())["release"] == "v2"


def _edited_copy(src: Path, dst: Path, folder: str, drop: str | None = None, rename: tuple[str, str] | None = None,
                 add: str | None = None) -> Path:
    """A copy of a release with one tensor of ``folder`` removed, renamed or added (shards and index rewritten)."""
    shutil.copytree(src, dst, symlinks=True)
    where = dst / folder
    index = where / "model.safetensors.index.json"
    files = sorted(where.glob("*.safetensors"))
    for f in files:
        with safe_open(str(f), "pt") as h:
            tensors = {k: h.get_tensor(k) for k in h.keys()}
        if drop in tensors:
            del tensors[drop]
        if rename and rename[0] in tensors:
            tensors[rename[1]] = tensors.pop(rename[0])
        if add and f == files[0]:
            tensors[add] = torch.zeros(2)
        save_file(tensors, str(f), metadata={"format": "pt"})
    if index.is_file():
        wm = json.loads(index.read_text())
        m = wm["weight_map"]
        if drop:
            m.pop(drop)
        if rename:
            m[rename[1]] = m.pop(rename[0])
        if add:
            m[add] = files[0].name
        index.write_text(json.dumps(wm))
    return dst


@pytest.mark.parametrize("case", [
    ("full", "bernini", {"drop": "vit_decoder.net.res_blocks.1.adaLN_modulation.1.weight"}, ["vit_decoder.net.res_blocks.1.adaLN_modulation.1.weight"]),
    ("full", "bernini", {"rename": ("diff_dec_low.transformer_2.blocks.0.attn1.to_q.weight",
                                    "diff_dec_low.transformer_2.blocks.0.attn1.to_qq.weight")},
     ["diff_dec_low.transformer_2.blocks.0.attn1.to_q.weight", "diff_dec_low.transformer_2.blocks.0.attn1.to_qq.weight"]),
    ("full", "bernini", {"drop": "mllm.model.layers.0.self_attn.q_proj.weight"}, ["mllm.model.layers.0.self_attn.q_proj.weight"]),
    ("full", "bernini", {"rename": ("connector.proj_gen.2.weight", "connector.proj_gen.1.weight")}, ["connector.proj_gen.2.weight"]),
    ("full", "bernini", {"drop": "t5_text_encoder.encoder.final_layer_norm.weight"}, ["t5_text_encoder.encoder.final_layer_norm.weight"]),
    ("full", "bernini", {"add": "ema.diff_dec.transformer.extra"}, ["ema.diff_dec.transformer.extra"]),
    ("r", "transformer_2", {"drop": "blocks.1.ffn.net.2.weight"}, ["blocks.1.ffn.net.2.weight"]),
    ("r", "text_encoder", {"rename": ("encoder.block.0.layer.1.DenseReluDense.wo.weight", "encoder.block.0.layer.1.wo.weight")},
     ["encoder.block.0.layer.1.DenseReluDense.wo.weight"]),
], ids=["drop-head", "rename-expert", "drop-mllm", "rename-connector", "drop-t5", "extra", "r-drop-expert", "r-rename-umt5"])
def test_a_missing_renamed_or_extra_tensor_is_an_error_naming_it(releases, tmp_path, capsys, case):
    layout, folder, edit, named = case
    src = releases["v1" if layout == "full" else "r"]
    broken = _edited_copy(src, tmp_path / src.name, folder, **edit)
    with pytest.raises(InputError) as e:
        BerniniPipeline.from_pretrained(broken)
    for key in named:
        assert key in str(e.value)
    assert main(["generate", "a cat", "--pipeline", str(broken), "-o", str(tmp_path / "out"), *CLI_FAST]) == 2
    assert named[0] in capsys.readouterr().err


def test_convert_writes_our_layout_and_back_tensor_for_tensor(releases, tmp_path):
    ours = tmp_path / "ours-v2"
    assert main(["convert", str(releases["v2"]), "-o", str(ours)]) == 0
    assert (ours / "pipeline.json").is_file() and json.loads((ours / "pipeline.json").read_text())["config"]["release"] == "v2"
    assert BerniniPipeline.from_pretrained(ours).release == "v2"
    back = tmp_path / "Bernini-Diffusers-v2"
    result = convert(ours, back, max_shard_bytes=200_000)
    assert result["release"] == "v2" and "note" not in result
    for rel in ("mllm/config.json", "mllm/tokenizer.json", "t5_text_encoder/config.json", "t5_tokenizer/tokenizer.json",
                "vae/config.json", "scheduler/scheduler_config.json", "transformer_config.json", "transformer_2_config.json",
                "bernini/model.safetensors.index.json"):
        assert (back / rel).is_file(), rel
    assert len(list((back / "bernini").glob("model-*-of-*.safetensors"))) > 1
    want, got = read_release(releases["v2"] / "bernini"), read_release(back / "bernini")
    assert set(got) == set(want)
    assert all(torch.equal(want[k], got[k]) for k in want)
    for cfg in ("transformer_config.json", "transformer_2_config.json"):
        a, b = (json.loads((f / cfg).read_text()) for f in (releases["v2"], back))
        assert {k: v for k, v in a.items() if not k.startswith("_")} == {k: v for k, v in b.items() if not k.startswith("_")}
    assert detect_release(back) == "v2"
    # the output rules: a file atelier did not write is never replaced without --overwrite
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "transformer_config.json").write_text("{}")
    with pytest.raises(InputError, match="not written by atelier"):
        convert(ours, mine)
    assert main(["convert", str(ours), "-o", str(mine)]) == 2 and (mine / "transformer_config.json").read_text() == "{}"
    assert main(["convert", str(ours), "-o", str(mine), "--overwrite", "--json"]) == 0


def test_convert_bernini_r_both_ways(releases, tmp_path):
    ours = tmp_path / "ours-r"
    assert convert(releases["r"], ours)["release"] == "r"
    back = tmp_path / "Bernini-R-Diffusers"
    assert convert(ours, back)["to"] == "Bernini-R-Diffusers"
    for part in ("transformer", "transformer_2", "vae", "text_encoder"):
        stem = "model" if part == "text_encoder" else "diffusion_pytorch_model"
        with safe_open(str(releases["r"] / part / f"{stem}.safetensors"), "pt") as a, \
                safe_open(str(back / part / f"{stem}.safetensors"), "pt") as b:
            assert set(a.keys()) == set(b.keys()), part
            assert all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys()), part
    assert detect_release(back) == "r"


@pytest.mark.parametrize("release", ["v1", "v2"])
def test_a_loaded_release_reaches_its_planner_with_the_official_streams(releases, release, monkeypatch):
    """What the release's own inference does (the image-condition stream drops the visuals and keeps the text, the
    three-stream rule only above text scale 1, sources before the prompt): passed by the pipeline itself, checked on
    the values, so flipping the pipeline's setting turns this red."""
    pipe = BerniniPipeline.from_pretrained(releases[release], config=BerniniConfig(**SETTINGS))
    pipe.set_progress_bar_config(disable=True)
    seen = []
    plan = type(pipe.planner).plan

    def recording(self, *args, **kwargs):
        seen.append({k: kwargs.get(k) for k in ("imgcond_drop", "cfg_rule", "user_order")})
        return plan(self, *args, **kwargs)

    monkeypatch.setattr(type(pipe.planner), "plan", recording)
    run_tasks(pipe, tasks=("t2v", "rv2v"))
    assert seen and all(s == {"imgcond_drop": "visuals", "cfg_rule": "txt_above_1", "user_order": "sources_first"} for s in seen)
