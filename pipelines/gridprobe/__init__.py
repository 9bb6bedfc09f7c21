"""GridProbe (specs/gridprobe.md): posterior probes on a K×K frame grid, a rank-1 importance map,
a shape-adaptive frame budget, and one focused pass.

Modules: ``grid`` (pool and probe layout), ``selection`` (importance map, budget rules, cell
choice), ``frames`` (frame sources and resizing), ``pipeline`` (the pipeline, its config and
output), ``baselines`` (full-frame, uniform, random and encoder baselines sharing the probes),
``viz`` (heatmap and frame strip).
"""


from pipelines import lazy_exports

# imported on first use: this package's config and app stay free of torch
__getattr__, __all__ = lazy_exports("pipelines.gridprobe", {
    "GridProbePipeline": "pipelines.gridprobe.pipeline",
    "GridProbeConfig": "pipelines.gridprobe.config",
    "GridProbeOutput": "pipelines.gridprobe.pipeline",
    "Pool": "pipelines.gridprobe.pipeline",
    "ProbeResult": "pipelines.gridprobe.pipeline",
    "GridLayout": "pipelines.gridprobe.grid",
    "FrameSource": "pipelines.gridprobe.frames",
    "importance_map": "pipelines.gridprobe.selection",
    "shape_stats": "pipelines.gridprobe.selection",
    "ShapeStats": "pipelines.gridprobe.selection",
    "shape_adaptive_budget": "pipelines.gridprobe.selection",
    "budget_from_shape_strength": "pipelines.gridprobe.selection",
    "select_budget": "pipelines.gridprobe.selection",
    "select_positions": "pipelines.gridprobe.selection",
    "rank_cells": "pipelines.gridprobe.selection",
    "SELECTORS": "pipelines.gridprobe.selection",
    "compare_methods": "pipelines.gridprobe.baselines",
    "Comparison": "pipelines.gridprobe.baselines",
    "MethodResult": "pipelines.gridprobe.baselines",
    "METHODS": "pipelines.gridprobe.baselines",
})
