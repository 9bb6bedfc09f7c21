"""Latent reasoning's settings and component slot, without torch (``pipelines.config``): what ``atelier reason``
builds its options from and checks its arguments against before a model loads. ``pipelines.latent_reasoning.pipeline``
re-exports every name here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pipelines.config import ComponentSpec, PipelineConfig, setting

# = planners.latent.MAX_SLOTS (that module imports torch; tests/test_cold_start.py keeps the two equal)
MAX_SLOTS = 32


@runtime_checkable
class ReasonerSlot(Protocol):
    def answer(self, *args: Any, **kwargs: Any) -> Any: ...


@dataclass
class LatentReasoningConfig(PipelineConfig):
    """Settings of a reasoning call."""

    num_slots: int | None = setting(None, help="latent slots K between the question and the answer (empty: the K the reasoner "
                                               "was trained with; 0: answer directly, no slots)", range=(0, MAX_SLOTS))
    tau: float = setting(0.07, help="temperature of the slot-to-image maps (spec B.2's tau)", range=(0.005, 1.0))
    region_mass: float = setting(0.5, help="the zoomed region covers the cells holding this share of the slots' mean map",
                                 range=(0.05, 1.0))

    def __post_init__(self):
        self.check_fields()


# LatentReasoningPipeline.component_specs: each slot's protocol, loader and help, in order
COMPONENT_SPECS = {
    "reasoner": ComponentSpec(ReasonerSlot, "planners.latent:load_latent_reasoner",
                              help="latent reasoner (a VLM checkpoint gets the latent-slot tokens added)"),
}
