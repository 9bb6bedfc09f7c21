"""``PipelineTesterMixin``: the contract every pipeline's tests run (after diffusers' tester mixin).

A pipeline's test class mixes it in and provides:

- ``pipeline_class``;
- ``get_dummy_components()``: real classes at tiny size, built with ``torch.manual_seed(0)``;
- ``get_dummy_inputs(seed=0)``: keyword arguments of one call (with ``generator`` where it applies);
- ``output_slice(output)``: a small float array that sums up the output;
- ``expected_slice``: the golden value of that slice (``None`` while a pipeline has no golden yet
  is not allowed: the golden test fails);
- ``bad_inputs``: ``(changes to the dummy inputs, regex the InputError must match)`` pairs.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from core.errors import InputError
from pipelines.base import INDEX_FILE, Pipeline, PipelineInterrupted


class PipelineTesterMixin:
    pipeline_class: type[Pipeline]
    expected_slice: np.ndarray | None = None
    slice_atol: float = 1e-4
    bad_inputs: tuple[tuple[dict, str], ...] = ()
    loops: bool = True  # the pipeline calls callback_on_step_end and honours interrupt()

    def get_dummy_components(self) -> dict:
        raise NotImplementedError

    def get_dummy_inputs(self, seed: int = 0) -> dict:
        raise NotImplementedError

    def output_slice(self, output) -> np.ndarray:
        raise NotImplementedError

    def make_pipeline(self, **config) -> Pipeline:
        cfg = self.pipeline_class.config_class(**config) if config else None
        pipe = self.pipeline_class(cfg, **self.get_dummy_components())
        pipe.set_progress_bar_config(disable=True)
        return pipe

    # ---- the contract

    def test_save_load_round_trip_gives_identical_outputs(self, tmp_path):
        pipe = self.make_pipeline()
        before = self.output_slice(pipe(**self.get_dummy_inputs()))
        pipe.save_pretrained(tmp_path / "saved")
        index = json.loads((tmp_path / "saved" / INDEX_FILE).read_text())
        assert index["format_version"] >= 1 and index["_class_name"] == self.pipeline_class.__name__
        loaded = self.pipeline_class.from_pretrained(tmp_path / "saved")
        loaded.set_progress_bar_config(disable=True)
        np.testing.assert_allclose(self.output_slice(loaded(**self.get_dummy_inputs())), before, atol=1e-6)
        assert loaded.config == pipe.config
        for name, comp in loaded.components.items():  # every slot comes back with its backend
            if comp is not None:
                assert index["components"][name]["backend"] in ("builtin", "hf", "custom")

    def test_generator_determinism(self):
        pipe = self.make_pipeline()
        a = self.output_slice(pipe(**self.get_dummy_inputs(seed=0)))
        b = self.output_slice(pipe(**self.get_dummy_inputs(seed=0)))
        np.testing.assert_array_equal(a, b)
        inputs = self.get_dummy_inputs(seed=0)
        if "generator" in inputs:  # an int seed and a torch.Generator with that seed agree
            inputs["generator"] = torch.Generator().manual_seed(0)
            np.testing.assert_array_equal(self.output_slice(pipe(**inputs)), a)

    def test_golden_output_slice(self):
        assert self.expected_slice is not None, "set expected_slice to the golden value of output_slice"
        got = self.output_slice(self.make_pipeline()(**self.get_dummy_inputs()))
        np.testing.assert_allclose(got, np.asarray(self.expected_slice), atol=self.slice_atol)

    def test_device_and_dtype_moves(self):
        pipe = self.make_pipeline()
        before = self.output_slice(pipe(**self.get_dummy_inputs()))
        assert pipe.to("cpu") is pipe and pipe.device == torch.device("cpu")
        pipe.to(dtype="float32")
        np.testing.assert_allclose(self.output_slice(pipe(**self.get_dummy_inputs())), before, atol=1e-6)
        with pytest.raises(InputError, match="dtype"):
            pipe.to(dtype="float8")
        with pytest.raises(InputError, match="device"):
            pipe.to("no-such-device")

    def test_bad_inputs_are_input_errors(self):
        pipe = self.make_pipeline()
        for changes, pattern in self.bad_inputs:
            with pytest.raises(InputError, match=pattern):
                pipe(**{**self.get_dummy_inputs(), **changes})
        with pytest.raises(InputError, match="generator"):
            pipe(**{**self.get_dummy_inputs(), "generator": "seven"})

    def test_callback_and_interrupt(self):
        if not self.loops:
            pytest.skip("this pipeline has no loop")
        pipe = self.make_pipeline()
        steps = []
        pipe(**self.get_dummy_inputs(), callback_on_step_end=lambda p, step, info: steps.append((step, dict(info))))
        assert [s for s, _ in steps] == list(range(len(steps))) and steps

        def stop(p, step, info):
            if step == 0:
                p.interrupt()

        with pytest.raises(PipelineInterrupted, match="after step 0"):
            pipe(**self.get_dummy_inputs(), callback_on_step_end=stop)
        self.output_slice(pipe(**self.get_dummy_inputs()))  # the next call runs to the end

    def test_output_repr_is_short_and_save_writes_declared_files(self, tmp_path):
        out = self.make_pipeline()(**self.get_dummy_inputs())
        text = repr(out)
        assert len(text) < 2000 and "\n" not in text and text.startswith(type(out).__name__)
        out.save(tmp_path / "out")
        assert json.loads((tmp_path / "out" / "result.json").read_text())
        assert str(out)  # print(output) works

    def test_damaged_indexes_are_input_errors(self, tmp_path):
        self.make_pipeline().save_pretrained(tmp_path / "p")
        path = tmp_path / "p" / INDEX_FILE
        good = json.loads(path.read_text())
        first_slot = next(iter(good["components"]))
        cases = [
            (path.read_text()[: len(path.read_text()) // 2], "damaged or truncated"),
            ({**good, "format_version": 99}, "format"),
            ({k: v for k, v in good.items() if k != "format_version"}, "format_version"),
            ({**good, "extra": 1}, "unknown keys"),
            ({**good, "config": {**good["config"], "no_such_setting": 1}}, "no_such_setting"),
            ({**good, "components": {**good["components"], first_slot: {"class": "os.system", "backend": "hf"}}}, "trusted"),
            ({**good, "components": {**good["components"], first_slot: {"class": "planners.protocol", "backend": "hf"}}}, "module"),
            ({**good, "components": {**good["components"], first_slot: {"class": "transformers.AutoModel", "backend": "hf"}}}, "Auto"),
        ]
        for content, pattern in cases:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
            with pytest.raises(InputError, match=re.escape(pattern) if " " not in pattern else pattern):
                self.pipeline_class.from_pretrained(tmp_path / "p")
