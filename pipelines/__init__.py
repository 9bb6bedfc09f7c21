"""Pipelines: one module per method, all built on :class:`pipelines.base.Pipeline`.

Modules (moved from the table of docs/ARCHITECTURE.md):

- `base.py`: `Pipeline`: typed component slots (`ComponentSpec`: the protocol a slot needs, checked in
  `__init__`, and its loader for paths), versioned `pipeline.json` whose every defect is an `InputError`
  naming the key, `from_pretrained` with overrides by instance or directory for any slot, `build` (saved
  folder + model specs + settings: the one loading path of CLI, batch, web and benchmarks), `to`, progress
  bars, `generator` (`generator_and_seed`: the caller's, or a fresh reported seed) / `callback_on_step_end` /
  `interrupt()`; `setting(...)` config fields with help / choices / range; `PipelineOutput` whose fields
  declare how they are saved, short `repr`, `convert(output_type)`
- `config.py`: the config side of `base.py` without torch (`setting`, `PipelineConfig`, `ComponentSpec`, the seed
  check; re-exported by `base.py`); each method's `config.py` holds its config dataclass and component slots on it,
  so the CLI builds a verb's options and checks its arguments without importing torch
- `registry.py`: `PipelineApp`, `Input`, `Setting`; `PIPELINE_APPS`, one line per pipeline
- `gridprobe/`: `GridProbePipeline`, slots `selector` + optional `answerer` of the `ProbeModel` protocol:
  `grid.py` pool and probe layout, `selection.py` importance map / shape-adaptive budget / ablation selectors
  / tie-breaks, `frames.py` frame sources and INTER_AREA resizing, `pipeline.py` config, output, pipeline,
  `baselines.py` full-frame / uniform / random / encoder baselines sharing the probes, `viz.py` heatmap with
  colour bar and axes, timed frame strip, posterior chart, `app.py` its `PipelineApp`
- `clear/`: `ClearPipeline`, slots `planner` (an instance selector), `tracker`, `proposer`: `pipeline.py`
  anchor, candidate tracks, selection, fast propagation under the event monitor, slow re-anchoring;
  `dictionary.py` the Contrastive Concept Dictionary; `viz.py` the event timeline; `app.py` its `PipelineApp`,
  verb `segment`
- `bernini/`: `BerniniPipeline`, slots `planner` (optional), `renderer`, `encoder` (optional): `official.py` the official layouts (Bernini-Diffusers, -v2, -R): detection, strict loading,
  `atelier convert`; `tasks.py` the
  six tasks (t2v, t2i, i2v, v2v, r2v, rv2v), how one is told from the inputs, the official per-task tables of
  the hf backend; `pipeline.py` sources sampled and resized, plan, render (plan tokens to the builtin
  renderer, the planner's contexts to Wan); `viz.py` the plan picture; `app.py` two `PipelineApp`s, verbs
  `generate` and `edit`
- `anymotion/`: `AnyMotionPipeline`, slots `planner` (a `SkeletonPlanner`), `renderer` (pose-guided builtin or
  Wan): `pipeline.py` the clip sampled and resized, the source skeleton (given, or the `pose_reader` setting),
  no person / no change handled as results, the plan, the render (pose maps to the builtin renderer; the
  rendered skeleton as a second in-context video and the MetaQueries to Wan); `viz.py` source + skeleton |
  planned skeleton | output; `app.py` its `PipelineApp`, verb `motion`, `--keypoints-out`
- `humor/`: `HumorPipeline`, slots `writer`, `reward_model`: `pipeline.py` the image read (a clip's middle
  frame), N samples parsed (unreadable or repeated ones re-drawn, at most `max_rounds`), rendered on the
  enlarged image, every pair compared by the reward model, ranked by Borda or Bradley-Terry; `viz.py` the
  ranked gallery; `app.py` its `PipelineApp`, verb `meme`, the web gallery with each meme's reasoning in a
  collapsed block
- `latent_reasoning/`: `LatentReasoningPipeline`, slot `reasoner`: `pipeline.py` the image read, the
  reasoner's answer after K slots, per-slot peaks and the region the slots found; `viz.py` each slot's map
  over the image and the zoom; `app.py` its `PipelineApp`, verb `reason`, the web tab's slot slider)
"""

import importlib


def lazy_exports(package: str, table: dict[str, str]):
    """``(__getattr__, __all__)`` for a package whose names ``table`` maps to the module that defines them, imported
    on first use (PEP 562), so `atelier --help`, a verb's options and its argument errors never import torch."""

    def __getattr__(name: str):
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__, list(table)


__getattr__, __all__ = lazy_exports("pipelines", {
    "Pipeline": "pipelines.base", "PipelineConfig": "pipelines.config", "PipelineOutput": "pipelines.base",
    "GridProbePipeline": "pipelines.gridprobe", "GridProbeConfig": "pipelines.gridprobe", "GridProbeOutput": "pipelines.gridprobe"})
