"""No foreign code runs from a folder a user passes (issue 46, sweep §6): hostile SAM 2 configs (hydra
``_target_`` gadgets in the YAML, the overrides and through a ``pipeline.json``), live pickles,
remote-code checkpoints in every component slot of every verb, generic classes in a slot, and
foreign training checkpoints. Each case goes through the CLI and must end in one clean error line
(exit 1 or 2, no traceback, naming the flag or key) with the marker file never created."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from core.video import write_video
from pipelines.base import ComponentSpec
from pipelines.registry import apps
from test_malformed_inputs import assert_clean, run_cli, to_argv, valid_args

pytestmark = pytest.mark.usefixtures("one_thread")

needs_sam2 = pytest.mark.skipif(importlib.util.find_spec("sam2") is None,
                                reason="the optional sam2 extra: SAM2_BUILD_CUDA=0 pip install 'atelier[sam2]'")


class LivePickle:
    """Unpickling this creates ``marker``: proof that a loader ran a pickle's code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("media")
    frames = np.zeros((8, 128, 128, 3), np.uint8)
    frames[:, 32:64, 32:64] = 200
    return write_video(d / "clip.mp4", frames, fps=10)


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "pwned"
    yield path
    assert not path.exists(), f"foreign code ran: {path} was created"


def clean_run(argv, capsys, names, marker):
    code, err = run_cli(argv, capsys)
    assert_clean(code, err, names)
    assert not marker.exists(), f"foreign code ran for {argv}"
    return err


def test_the_pickle_is_live(tmp_path, marker):
    """The payload the loaders meet really runs when unpickled (so its absence below means something)."""
    torch.save({"x": LivePickle(tmp_path / "control")}, tmp_path / "evil.pt")
    torch.load(tmp_path / "evil.pt", weights_only=False)
    assert (tmp_path / "control").exists()


# ---------------------------------------------------------------- SAM 2 package tracker folders

def sam2_folder(root, name, config=None, overrides=(), package_config=None, pickle_marker=None):
    """A sam2_package.json folder: a local config.yaml (``config``, a dict) or a package config name,
    and ``model.pt``, a live pickle when ``pickle_marker`` is given."""
    import yaml

    d = root / name
    d.mkdir()
    if config is not None:
        (d / "config.yaml").write_text(yaml.safe_dump(config))
    payload = LivePickle(pickle_marker) if pickle_marker is not None else torch.zeros(1)
    torch.save({"model": payload}, d / "model.pt")
    (d / "sam2_package.json").write_text(json.dumps({
        "format": "sam2-package", "format_version": 1, "config": package_config or "config.yaml", "checkpoint": "model.pt",
        "overrides": list(overrides), "postprocessing": False}))
    return d


def sam2_gadgets(root, marker):
    """(folder, key the error must name) for each way a config could make hydra call something."""
    pt = root / "evil.pt"
    torch.save({"x": LivePickle(marker)}, pt)
    make = {"_target_": "sam2.build_sam.os.makedirs", "name": str(marker)}
    base = "configs/sam2.1/sam2.1_hiera_t.yaml"
    enc = lambda node: {"model": {"_target_": "sam2.modeling.sam2_base.SAM2Base", "image_encoder": node}}  # noqa: E731
    return [
        (sam2_folder(root, "torchload", enc({"_target_": "sam2.build_sam.torch.load", "f": str(pt), "weights_only": False}),
                     pickle_marker=marker), "_target_"),
        (sam2_folder(root, "makedirs", enc(make)), "_target_"),
        (sam2_folder(root, "system", enc({"_target_": "sam2.utils.misc.os.system", "_args_": [f"touch {marker}"]})), "_target_"),
        (sam2_folder(root, "top_level", {"model": {"_target_": "sam2.build_sam.os.makedirs", "name": str(marker)}}), "_target_"),
        # an allowed class fed a callable through _args_, a nested target in a list, _partial_
        (sam2_folder(root, "args", enc({"_target_": "sam2.modeling.memory_encoder.Fuser", "_args_": [make]})), "_args_"),
        (sam2_folder(root, "in_list", enc({"_target_": "sam2.modeling.backbones.hieradet.Hiera", "stages": [make]})), "_target_"),
        (sam2_folder(root, "partial", enc({"_target_": "sam2.modeling.memory_encoder.Fuser", "_partial_": True})), "_partial_"),
        # an escaped interpolation is live again once resolved, and decodes to a target
        (sam2_folder(root, "interpolation", enc({"_target_": "sam2.modeling.memory_encoder.Fuser",
                                                 "layer": "\\${oc.decode:'{_target_: sam2.build_sam.os.makedirs, name: x}'}"})),
         "model.image_encoder.layer"),
        (sam2_folder(root, "override", package_config=base, overrides=[
            "++model.image_encoder._target_=sam2.build_sam.os.makedirs", f"++model.image_encoder.name={marker}"]), "_target_"),
        (sam2_folder(root, "override_mapping", package_config=base,
                     overrides=[f"++model.image_encoder={{_target_:sam2.build_sam.os.makedirs,name:{marker.name}}}"]),
         "model.image_encoder"),
        (sam2_folder(root, "override_hydra", package_config=base, overrides=["hydra.run.dir=/tmp"]), "hydra.run.dir"),
        (sam2_folder(root, "override_predictor", package_config=base, overrides=["++model._target_=sam2.build_sam.os.makedirs"]),
         "model._target_"),
    ]


@needs_sam2
def test_sam2_tracker_folders_build_only_the_packages_model_classes(tmp_path, media, marker, capsys):
    app = apps()["segment"]
    base = valid_args(app, media)
    for folder, key in sam2_gadgets(tmp_path, marker):
        err = clean_run(to_argv(app, {**base, "tracker": str(folder)}), capsys, key, marker)
        assert "tracker" in err and str(folder) in err.strip().splitlines()[-1]


@needs_sam2
def test_sam2_gadget_through_a_pipeline_index(tmp_path, media, marker, capsys):
    """The same folder reached through ``pipeline.json`` naming ``Sam2PackageTracker``."""
    app = apps()["segment"]
    (gadget, _), *_ = sam2_gadgets(tmp_path, marker)
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    gadget.rename(pipe / "tracker")
    write_index(pipe, "ClearPipeline", "pipelines.clear.pipeline",
                {"planner": None, "tracker": {"class": "trackers.sam2_package.Sam2PackageTracker", "backend": "hf"}, "proposer": None})
    clean_run(to_argv(app, {**valid_args(app, media), "pipeline": str(pipe)}), capsys, "_target_", marker)


@needs_sam2
def test_the_packages_own_configs_pass_the_allow_list():
    """Every model config the package ships composes and passes the check (the allow-list is complete)."""
    from pathlib import Path

    import sam2

    from trackers.sam2_package import compose_config

    root = Path(sam2.__file__).parent
    names = sorted(str(p.relative_to(root)) for p in root.glob("configs/sam2*/*.yaml") if "training" not in p.parent.name)
    assert len(names) == 8
    for name in names:
        assert compose_config(name).model._target_ == "sam2.sam2_video_predictor.SAM2VideoPredictor"


# ---------------------------------------------------------------- remote code in every slot

REMOTE_CODE = '''
open({marker!r}, "w").close()  # runs on import: the checkpoint's own code
from transformers import PretrainedConfig


class EvilConfig(PretrainedConfig):
    model_type = "evil_vlm"
'''


def remote_code_folder(root, marker):
    """A checkpoint whose config, processor, tokenizer and model all point at its own ``evil.py``."""
    d = root / "remote_code"
    d.mkdir()
    auto = {k: "evil.EvilConfig" for k in ("AutoConfig", "AutoModel", "AutoModelForCausalLM", "AutoModelForImageTextToText",
                                           "AutoModelForVision2Seq", "AutoProcessor", "AutoImageProcessor")}
    (d / "config.json").write_text(json.dumps({"model_type": "evil_vlm", "architectures": ["EvilModel"], "auto_map": auto}))
    for name in ("preprocessor_config.json", "processor_config.json"):
        (d / name).write_text(json.dumps({"auto_map": auto, "processor_class": "EvilProcessor"}))
    (d / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["evil.EvilConfig", None]}}))
    (d / "evil.py").write_text(REMOTE_CODE.format(marker=str(marker)))
    return d


def junk_folders(root):
    empty = root / "empty"
    empty.mkdir()
    junk = root / "random_files"
    junk.mkdir()
    rng = np.random.default_rng(0)
    for name in ("config.json", "model.safetensors", "pytorch_model.bin", "weights.dat"):
        (junk / name).write_bytes(rng.integers(0, 256, 300, dtype=np.uint8).tobytes())
    return [empty, junk]


def pickle_folder(root, marker):
    """Weights only as live pickles, under every name a torch / transformers loader looks for."""
    d = root / "pickles"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model": "builtin-vlm", "model_type": "qwen2_5_vl"}))
    for name in ("pytorch_model.bin", "model.pt", "model.bin", "model.pth", "model.ckpt", "classification_head.pt",
                 "reward_head.pt", "sam2.1_hiera_tiny.pt"):
        torch.save(LivePickle(marker), d / name)
    return d


def slots():
    """(verb, slot, flag) for every component slot of every registered verb."""
    return [(verb, slot, flag) for verb, app in sorted(apps().items()) for slot, flag in app.components.items()]


def test_every_slot_names_a_protocol():
    """A slot without a protocol takes any loadable class (``transformers.PretrainedConfig`` loaded as
    Bernini's encoder): every slot of every registered pipeline must name one."""
    for verb, slot, _ in slots():
        spec = apps()[verb].pipeline_class.component_specs[slot]
        assert isinstance(spec, ComponentSpec) and spec.protocol is not None, (verb, slot)


def test_remote_code_checkpoints_and_junk_in_every_slot(tmp_path, media, marker, capsys):
    """A remote-code checkpoint without --trust-remote-code, an empty folder and a folder of random
    files, in every slot of every verb: a clean error naming the flag, no code run."""
    folders = [remote_code_folder(tmp_path, marker), *junk_folders(tmp_path), pickle_folder(tmp_path, marker)]
    for verb, slot, flag in slots():
        app = apps()[verb]
        base = valid_args(app, media)
        for folder in folders:
            err = clean_run(to_argv(app, {**base, flag: str(folder)}), capsys, str(folder), marker)
            last = err.strip().splitlines()[-1]
            assert flag in last or slot in last, (verb, slot, last)
            if "custom code" in last or "own Python code" in last:  # refused for its code: say how to allow it
                assert "--trust-remote-code" in last, last


def test_a_manifests_string_false_never_turns_remote_code_on(tmp_path, media, marker):
    """Sweep §6: ``"trust_remote_code": "false"`` (or "no", "0") read as True ran a checkpoint's code."""
    from app.batch import run_batch

    folder = remote_code_folder(tmp_path, marker)
    app = apps()["ask"]
    items = [{"id": f"s{i}", "verb": "ask", "args": {**valid_args(app, media), "vlm": str(folder), "trust_remote_code": value}}
             for i, value in enumerate(("false", "no", "0", "False", False))]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(it) + "\n" for it in items))
    summary = run_batch(manifest, tmp_path / "out", progress=False)
    records = [json.loads(line) for line in (tmp_path / "out" / "status.jsonl").read_text().splitlines()]
    assert summary.failed == len(items) and all("trust_remote_code" in r["error"] or "--trust-remote-code" in r["error"] for r in records)


def test_the_remote_code_folder_is_live(tmp_path):
    """Control: with trust_remote_code=True transformers does run its code (in a subprocess, with its
    own module cache), so the refusals above are real."""
    done = tmp_path / "ran"
    folder = remote_code_folder(tmp_path, done)
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    code = f"from transformers import AutoConfig; AutoConfig.from_pretrained({str(folder)!r}, trust_remote_code=True)"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=120)
    assert done.exists()


def write_index(directory, class_name, module, components):
    (directory / "pipeline.json").write_text(json.dumps({"format_version": 1, "_class_name": class_name, "_module": module,
                                                         "config": {}, "components": components}))


def test_remote_code_through_a_pipeline_index(tmp_path, media, marker, capsys):
    """A ``pipeline.json`` naming a trusted wrapper class whose folder ships code: refused cleanly."""
    app = apps()["ask"]
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    remote_code_folder(tmp_path, marker).rename(pipe / "selector")
    write_index(pipe, "GridProbePipeline", "pipelines.gridprobe.pipeline",
                {"selector": {"class": "planners.hf.HFVisionLanguageModel", "backend": "hf"}, "answerer": None})
    err = clean_run(to_argv(app, {**valid_args(app, media), "pipeline": str(pipe)}), capsys, "selector", marker)
    assert "--trust-remote-code" in err


# ---------------------------------------------------------------- generic classes in Bernini's encoder slot

@pytest.mark.parametrize("cls", ["transformers.PreTrainedModel", "transformers.PretrainedConfig", "transformers.AutoConfig",
                                 "diffusers.DiffusionPipeline", "diffusers.DiffusionPipeline:os"])
def test_generic_classes_are_not_an_encoder(cls, tmp_path, media, marker, capsys):
    app = apps()["generate"]
    pipe = tmp_path / "pipe"
    enc = pipe / "encoder"
    enc.mkdir(parents=True)
    (enc / "config.json").write_text(json.dumps({"model_type": "bert"}))
    if cls.startswith("diffusers"):  # a custom pipeline file, or a model_index naming os.system
        cls, _, variant = cls.partition(":")
        index = {"_class_name": "EvilPipeline", "_diffusers_version": "0.30.0"}
        if variant:
            index = {"_class_name": "DiffusionPipeline", "_diffusers_version": "0.30.0", "evil": ["os", "system"]}
        (enc / "model_index.json").write_text(json.dumps(index))
        (enc / "pipeline_evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    write_index(pipe, "BerniniPipeline", "pipelines.bernini.pipeline",
                {"planner": None, "renderer": None, "encoder": {"class": cls, "backend": "hf"}})
    clean_run(to_argv(app, {**valid_args(app, media), "pipeline": str(pipe)}), capsys, "components.encoder", marker)


# ---------------------------------------------------------------- training checkpoints

def vit_run_folder(root, model_state: dict, state_pt):
    """An ``atelier train vit`` folder (its recipe) whose checkpoint holds ``model_state`` and ``state_pt``."""
    from core.weights_io import save_state_dict
    from training.common import save_recipe
    from training.vit import ViTTrainConfig

    out = root / "vit_run"
    ck = out / "run" / "checkpoint"
    ck.mkdir(parents=True)
    save_recipe(ViTTrainConfig().resolved(), out, "vit", "test")
    save_state_dict(model_state, ck / "model.safetensors")
    torch.save(state_pt, ck / "state.pt")
    return out, ck


def test_train_refuses_a_checkpoint_that_is_not_its_own(tmp_path, marker, capsys):
    from core.weights_io import load_state_dict
    from planners.builtin.vit import BuiltinViT
    from training.common import SHIPPED
    from training.vit import ViTTrainConfig, ViTWithAux

    # the shipped ViT's weights copied in as the checkpoint: keys that do not fit ViTWithAux
    shipped = load_state_dict(SHIPPED / "vit" / "model.safetensors")
    out, ck = vit_run_folder(tmp_path / "a", shipped, {"step": 1, "optimizer": {}, "torch_rng": torch.get_rng_state(), "history": "[]"})
    err = clean_run(["train", "vit", "--steps", "2", "--out", str(out)], capsys, "--out", marker)
    assert "--no-resume" in err and str(ck) in err
    # a state.pt replaced by a live pickle, beside weights that fit
    own = ViTWithAux(BuiltinViT(ViTTrainConfig().resolved().architecture)).state_dict()
    out, ck = vit_run_folder(tmp_path / "b", own, {"step": LivePickle(marker)})
    err = clean_run(["train", "vit", "--steps", "2", "--out", str(out)], capsys, "--out", marker)
    assert "--no-resume" in err and str(ck) in err


# ---------------------------------------------------------------- training checkpoints and the letter of every option

CODE_DIRS = ("app", "core", "pipelines", "planners", "renderers", "trackers", "training", "scorers", "worldgen", "benchmarks")


def _calls_loading_auto_classes():
    """Every ``Auto*.from_pretrained(...)`` call of transformers in the code (diffusers' ``AutoencoderKL*`` hold no code)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for d in CODE_DIRS:
        for path in sorted((root / d).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                f = node.func if isinstance(node, ast.Call) else None
                if (isinstance(f, ast.Attribute) and f.attr == "from_pretrained" and isinstance(f.value, ast.Name)
                        and f.value.id.startswith("Auto") and not f.value.id.startswith("Autoencoder")):
                    yield f"{path.relative_to(root)}:{node.lineno}", node


def test_every_auto_class_load_passes_the_users_flag_or_false():
    calls = list(_calls_loading_auto_classes())
    assert len(calls) >= 10  # the scan sees the loaders (planners/hf.py, training/humor_*.py, the official layouts)
    for where, node in calls:
        flag = next((k for k in node.keywords if k.arg == "trust_remote_code"), None)
        assert flag is not None, f"{where}: pass trust_remote_code explicitly (the user's flag, or False for our own folders)"
        assert not (isinstance(flag.value, ast.Constant) and flag.value.value is True), f"{where}: never trust_remote_code=True"


def test_train_refuses_a_remote_code_sft_folder_without_asking(tmp_path, marker):
    folder = remote_code_folder(tmp_path, marker)
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    proc = subprocess.run([sys.executable, "-m", "app.cli", "train", "humor-rl", "--sft", str(folder), "--out", str(tmp_path / "rl"),
                           "--steps", "1"], capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=300)
    assert proc.returncode == 2 and "--trust-remote-code" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists() and not (tmp_path / "rl").exists()  # nothing ran, nothing was written


def test_no_command_line_takes_an_abbreviated_option():
    from pathlib import Path

    from app.cli import build_parser

    root = Path(__file__).resolve().parents[1]
    plain = [str(p.relative_to(root)) for d in CODE_DIRS for p in sorted((root / d).rglob("*.py"))
             if "argparse.ArgumentParser(" in p.read_text() and p.name != "arguments.py"]
    assert plain == [], "build parsers with core.arguments.StrictParser (no abbreviations)"
    parser = build_parser("*")
    todo, seen = [parser], 0
    while todo:
        p = todo.pop()
        assert p.allow_abbrev is False, p.prog
        seen += 1
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
    assert seen > 20  # every verb's parser was walked
    for argv in (["segment", "clip.mp4", "a query", "--trust"], ["ask", "clip.mp4", "why?", "--tr"], ["train", "vit", "--no-res"]):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(argv)
        assert exit_.value.code == 2
