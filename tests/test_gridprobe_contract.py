"""GridProbe runs the shared pipeline contract (``PipelineTesterMixin``) on a tiny random builtin VLM."""

import numpy as np
import pytest
import torch

from pipeline_tester import PipelineTesterMixin
from pipelines.gridprobe import GridProbePipeline
from planners.builtin import BuiltinVisionLanguageModel
from planners.builtin.vit import ViTConfig
from planners.builtin.vlm import BuiltinVLMModel, VLMConfig

pytestmark = pytest.mark.usefixtures("one_thread")


class TestGridProbeContract(PipelineTesterMixin):
    pipeline_class = GridProbePipeline
    # posterior of the focused pass and the importance map's first row (computed once, then frozen; recomputed
    # 2026-12-06 when the default probes became 1/4 high x 1/2 wide)
    expected_slice = [0.364107, 0.223684, 0.412209, 0.17049, 0.170481, 0.170486, 6.0]
    bad_inputs = (
        ({"question": ""}, "question"),
        ({"options": ["a"]}, "options"),
        ({"options": ["a", "a"]}, "differ"),
        ({"question": "x" * 5000}, "characters"),
        ({"video": np.zeros((0, 8, 8, 3), np.uint8)}, "video"),
    )

    def get_dummy_components(self):
        torch.manual_seed(0)
        cfg = VLMConfig(d_model=32, layers=1, heads=2, vit=ViTConfig(width=32, depth=1, heads=2), vocab=["<pad>", "<bos>", "<eos>", "a"])
        return {"selector": BuiltinVisionLanguageModel(BuiltinVLMModel(cfg).eval())}

    def make_pipeline(self, **config):
        return super().make_pipeline(**({"grid": 3} | config))

    def get_dummy_inputs(self, seed=0):
        video = np.random.default_rng(0).integers(0, 256, (30, 32, 32, 3), dtype=np.uint8)
        return {"video": video, "question": "Which colour never appears?", "options": ["red", "green", "blue"], "generator": seed}

    def output_slice(self, out):
        return np.concatenate([out.posterior, out.importance_map[0], [out.m_eff]]).astype(np.float64)
