"""Swapping the builtin VLM for a real transformers checkpoint is configuration, not code.

The same GridProbe code runs on both backends: the saved pipelines differ only in their
components' class/backend entries, and the CLI-level loader takes either from one string."""

import json

import numpy as np
import pytest
import torch

from pipelines.base import clear_caches
from planners.loading import load_vlm
from pipelines.gridprobe import GridProbeConfig, GridProbePipeline
from planners.builtin import BuiltinVisionLanguageModel
from planners.builtin.vit import ViTConfig
from planners.builtin.vlm import BuiltinVLMModel, VLMConfig

OPTIONS = ["red", "green", "blue", "yellow"]
QUESTION = "Which colour never appears?"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def builtin_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = VLMConfig(d_model=32, layers=1, heads=2, vit=ViTConfig(width=32, depth=1, heads=2), vocab=["<pad>", "<bos>", "<eos>", "a"])
    return BuiltinVLMModel(cfg).save_pretrained(tmp_path_factory.mktemp("builtin") / "vlm")


def _run(pipe: GridProbePipeline):
    video = np.random.default_rng(0).integers(0, 256, (40, 64, 64, 3), dtype=np.uint8)
    pipe.set_progress_bar_config(disable=True)
    return pipe(video, QUESTION, OPTIONS)


def test_saved_pipelines_differ_only_in_the_component_entries(builtin_dir, tiny_vlm_dirs, tmp_path):
    config = GridProbeConfig(grid=4, probe_scale=0.5)
    outs, index = {}, {}
    specs = {"builtin": str(builtin_dir), "hf": str(tiny_vlm_dirs["qwen2.5-vl"])}
    for backend, spec in specs.items():
        vlm = BuiltinVisionLanguageModel.from_pretrained(spec) if backend == "builtin" else load_vlm(spec, "cpu")
        GridProbePipeline(selector=vlm, answerer=vlm, config=config).save_pretrained(tmp_path / backend)
        index[backend] = json.loads((tmp_path / backend / "pipeline.json").read_text())
        # the identical loading and calling code for both
        outs[backend] = _run(GridProbePipeline.from_pretrained(tmp_path / backend))
    b, h = index["builtin"], index["hf"]
    assert {k: v for k, v in b.items() if k != "components"} == {k: v for k, v in h.items() if k != "components"}
    assert {c["backend"] for c in b["components"].values() if c} == {"builtin"}
    assert {c["backend"] for c in h["components"].values() if c} == {"hf"}
    ob, oh = outs["builtin"], outs["hf"]
    assert type(ob) is type(oh)
    for o in (ob, oh):
        assert o.answer_text in OPTIONS and len(o.posterior) == len(OPTIONS)
        assert 2 <= o.m_eff <= 16 and list(o.frames) == sorted(o.frames)


def test_the_loader_takes_either_backend_from_one_string(builtin_dir, tiny_vlm_dirs, monkeypatch):
    import planners.builtin as pb

    monkeypatch.setattr(pb, "load_builtin_vlm", lambda device=None: BuiltinVisionLanguageModel.from_pretrained(builtin_dir))
    clear_caches()
    try:
        for spec, backend in (("builtin", "builtin"), (str(builtin_dir), "builtin"), (str(tiny_vlm_dirs["qwen3-vl"]), "hf")):
            pipe = GridProbePipeline.build(components={"selector": spec}, config={"grid": 4, "probe_scale": 0.5})
            assert pipe.components["selector"].backend == backend
            assert _run(pipe).answer_text in OPTIONS
    finally:
        clear_caches()
