"""GridProbe end to end on tiny random transformers VLMs (Qwen2.5-VL selector, Qwen3-VL answerer):
the real processor/forward path, token-count FLOPs, save/load of both components, output.save."""

import json

import numpy as np
import pytest

from gridprobe_fakes import CountingSource
from pipelines.gridprobe import GridLayout, GridProbeConfig, GridProbePipeline, compare_methods
from planners.hf import HFVisionLanguageModel

OPTIONS = ["a red circle", "a green square", "a blue triangle", "a yellow star"]
QUESTION = "Which object appears first in the video?"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def video() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (40, 64, 64, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def vlms(tiny_vlm_dirs) -> dict[str, HFVisionLanguageModel]:
    return {name: HFVisionLanguageModel.from_pretrained(tiny_vlm_dirs[name], device="cpu") for name in ("qwen2.5-vl", "qwen3-vl")}


@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_pipeline_runs_end_to_end(vlms, video, family):
    vlm = vlms[family]
    pipe = GridProbePipeline(GridProbeConfig(grid=4, probe_scale=0.5, probe_height_scale=None), selector=vlm)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(video, QUESTION, OPTIONS)
    assert out.answer in "ABCD" and OPTIONS[out.answer_index] == out.answer_text
    assert out.posterior.shape == (4,) and out.posterior.sum() == pytest.approx(1.0, abs=1e-9)
    assert out.importance_map.shape == (4, 4) and np.linalg.matrix_rank(out.importance_map) == 1
    assert np.all((out.row_conf >= 0.25 - 1e-9) & (out.row_conf <= 1))
    assert 2 <= out.m_eff <= 16 and len(out.frames) == out.m_eff and out.frames == sorted(out.frames)
    assert set(out.frames) <= set(out.pool) == set(GridLayout(4).pool_indices(40))
    prompt = pipe.prompt(QUESTION, OPTIONS)
    # compute from the processor's token counts: probes at half size, focus and full-frame at full size
    assert out.tflops["probe"] == pytest.approx(8 * vlm.flops(4, prompt, (32, 32)) / 1e12)
    assert out.tflops["focus"] == pytest.approx(vlm.flops(out.m_eff, prompt, (64, 64)) / 1e12)
    assert out.tflops["full_frame"] == pytest.approx(vlm.flops(16, prompt, (64, 64)) / 1e12)
    # what reached the VLM is recorded in the output's config: 8 probes of 4 frames at 32x32, the focus at 64x64
    assert out.config["vlm_inputs"] == {"probes": 8, "frames_per_probe": 4, "probe_size": [32, 32], "focus_frames": out.m_eff,
                                        "focus_size": [64, 64], "selector_video_fps": None, "answerer_video_fps": None}
    # deterministic
    again = pipe(video, QUESTION, OPTIONS)
    np.testing.assert_array_equal(again.posterior, out.posterior)
    np.testing.assert_array_equal(again.importance_map, out.importance_map)


def test_cross_model_save_load_and_output_save(vlms, video, tmp_path):
    pipe = GridProbePipeline(GridProbeConfig(grid=4, probe_scale=0.5, tie_break="spread"),
                             selector=vlms["qwen2.5-vl"], answerer=vlms["qwen3-vl"])
    pipe.set_progress_bar_config(disable=True)
    source = CountingSource(40, (64, 64))
    source.frames = video
    out = pipe(source, QUESTION, OPTIONS)
    assert len(source.requests) == 1
    pipe.save_pretrained(tmp_path / "pipe")
    index = json.loads((tmp_path / "pipe" / "pipeline.json").read_text())
    assert set(index["components"]) == {"selector", "answerer"} and index["config"]["tie_break"] == "spread"
    loaded = GridProbePipeline.from_pretrained(tmp_path / "pipe")
    loaded.set_progress_bar_config(disable=True)
    assert loaded.config == pipe.config and type(loaded.answerer).__name__ == "HFVisionLanguageModel"
    again = loaded(video, QUESTION, OPTIONS)
    np.testing.assert_allclose(again.posterior, out.posterior, atol=1e-6)
    assert again.frames == out.frames
    # overriding a component at load time by instance
    swapped = GridProbePipeline.from_pretrained(tmp_path / "pipe", answerer=vlms["qwen2.5-vl"])
    assert swapped.qa is vlms["qwen2.5-vl"]
    out.save(tmp_path / "out")
    for name in ("result.json", "config.json", "importance_map.png", "selected_frames.png"):
        assert (tmp_path / "out" / name).is_file()
    assert json.loads((tmp_path / "out" / "result.json").read_text())["answer"] == out.answer


def test_compare_methods_on_a_real_backend(vlms, video):
    pipe = GridProbePipeline(GridProbeConfig(grid=4), selector=vlms["qwen3-vl"])
    pipe.set_progress_bar_config(disable=True)
    cmp = compare_methods(pipe, video, QUESTION, OPTIONS, probe_scales=[1.0, 0.25])  # no encode_text: encoder skipped
    methods = {r.method for r in cmp.results}
    assert methods == {"gridprobe", "probe_ensemble", "full_frame", "uniform_m", "uniform_meff", "random_meff"}
    full = cmp.get("full_frame")
    assert full.tflops > cmp.get("uniform_m").tflops > 0
    assert cmp.get("gridprobe", 0.25).extra["probe_tflops"] < cmp.get("gridprobe", 1.0).extra["probe_tflops"]
