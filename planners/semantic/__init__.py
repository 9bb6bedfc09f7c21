"""Bernini's semantic planner (spec bernini.md b.2-b.4, b.9): the planner sequence and its block mask
(``layout``), the per-token flow head (``flow_head``), the MaskGIT reveal schedule (``maskgit``), the
pluggable backbones (``backbones``: transformers Qwen2.5-VL, builtin transformer) and the planner itself; the builtin
backend's layout planner (``layout_planner``) and its planner slot of one planner per task (``by_task``)."""

from planners.semantic.backbones import (
                                         HFPlannerBackbone,
                                         PlannerBackbone,
                                         TinyBackboneConfig,
                                         TinyPlannerBackbone,
)
from planners.semantic.flow_head import SimpleMLPAdaLN, three_stream_cfg
from planners.semantic.layout import (
                                         TokenType,
                                         VisualTokens,
                                         additive_mask,
                                         block_attention_mask,
)
from planners.semantic.maskgit import reveal_counts
from planners.semantic.planner import (
                                         PlanExample,
                                         PlannerLoss,
                                         PlanOutput,
                                         PlanRequest,
                                         SemanticPlanner,
                                         SemanticPlannerConfig,
                                         builtin_planner,
)

__all__ = ["HFPlannerBackbone", "PlanExample", "PlanOutput", "PlanRequest", "PlannerBackbone", "PlannerLoss",
           "SemanticPlanner", "SemanticPlannerConfig", "SimpleMLPAdaLN", "TinyBackboneConfig", "TinyPlannerBackbone",
           "TokenType", "VisualTokens", "additive_mask", "block_attention_mask", "builtin_planner", "reveal_counts",
           "three_stream_cfg"]
