"""GridProbe (specs/gridprobe.md): posterior probes on a K×K frame grid, a rank-1 importance map,
a shape-adaptive frame budget, and one focused pass.

Modules: ``grid`` (pool and probe layout), ``selection`` (importance map, budget rules, cell
choice), ``frames`` (frame sources and resizing), ``pipeline`` (the pipeline, its config and
output), ``baselines`` (full-frame, uniform, random and encoder baselines sharing the probes),
``viz`` (heatmap and frame strip).
"""

from pipelines.gridprobe.baselines import METHODS, Comparison, MethodResult, compare_methods
from pipelines.gridprobe.frames import FrameSource
from pipelines.gridprobe.grid import GridLayout
from pipelines.gridprobe.pipeline import GridProbeConfig, GridProbeOutput, GridProbePipeline, Pool, ProbeResult
from pipelines.gridprobe.selection import (SELECTORS, ShapeStats, budget_from_shape_strength, importance_map, rank_cells,
                                           select_budget, select_positions, shape_adaptive_budget, shape_stats)

__all__ = [
    "GridProbePipeline", "GridProbeConfig", "GridProbeOutput", "Pool", "ProbeResult", "GridLayout", "FrameSource",
    "importance_map", "shape_stats", "ShapeStats", "shape_adaptive_budget", "budget_from_shape_strength",
    "select_budget", "select_positions", "rank_cells", "SELECTORS", "compare_methods", "Comparison", "MethodResult",
    "METHODS",
]
