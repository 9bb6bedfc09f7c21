"""CLEAR's settings and component slots, without torch (``pipelines.config``): what ``atelier segment`` builds its
options from and checks its arguments against before a model loads. ``pipelines.clear.pipeline`` re-exports every
name here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from pipelines.config import ComponentSpec, PipelineConfig, setting
from trackers.protocol import Tracker
from trackers.proposals import Proposer

if TYPE_CHECKING:
    from planners.counterfactual import Mark, Selection
    from trackers.monitor import MonitorConfig


@runtime_checkable
class InstanceSelector(Protocol):
    """What CLEAR's planner slot needs: choose the candidate a query refers to."""

    def select(self, frames: np.ndarray, marks: list[Mark], query: str) -> Selection: ...


@dataclass
class ClearConfig(PipelineConfig):
    """Settings of a CLEAR run (every value [PROPOSED]: the paper publishes none)."""

    # [PROPOSED] auto: 256 on the builtin models (their world is 64-128 px; the 720p Big Buck Bunny clip then takes 48 s and
    # 1.2 GB on one thread, against 4 min at 512), a real tracker's own input size (1024) otherwise
    max_side: int | None = setting(None, help="work at most this many pixels on the longer side, decoded that small (the masks come "
                                              "back at the input's own size); default: 256 on the builtin models, 1024 with a real "
                                              "tracker; 0: the input's own size", range=(0, 4096))
    chroma: str = setting("auto", help="a file's colour, stored at half resolution by nearly every codec: 'guided' upsamples it along "
                                        "the brightness edges (a small object keeps its own colour), 'plain' as the decoder does; "
                                        "auto: guided on the builtin models, plain with a real tracker", choices=("auto", "plain", "guided"))
    anchor_samples: int = setting(8, help="frames sampled to choose the anchor (the one with the most candidates)", range=(1, 64))
    selection_frames: int = setting(16, help="frames of the candidate tracks the planner sees", range=(1, 64))
    window: int = setting(16, help="past frames a tracker session keeps", range=(1, 256))
    monitor: bool = setting(True, help="watch the fast tracker and re-anchor on events (off: prompt-then-track)")
    repair: bool = setting(True, help="re-anchor when the monitor escalates (off: escalations are only recorded, as 'flag')")
    heartbeat_every: int = setting(30, help="frames between cheap planner checks in fast mode", range=(1, 10_000))
    cooldown: int = setting(20, help="no slow re-anchoring within this many frames of the last one", range=(1, 10_000))
    reanchor_overlap: float = setting(0.3, help="weight of the overlap with the last confirmed mask when re-anchoring", range=(0.0, 10.0))
    lost_gate: float = setting(0.4, help="slow mode: farther than this many object sizes from where the target should be is another object, and with nothing nearer the target is lost (empty masks until it is found again)", range=(0.0, 100.0))
    lost_gate_growth: float = setting(0.1, help="while lost, the search radius grows by this many object sizes per frame", range=(0.0, 10.0))
    reanchor_motion: float = setting(0.5, help="penalty per object size between a proposal and where the target should be, when re-anchoring", range=(0.0, 10.0))
    new_object_iou: float = setting(0.3, help="a proposal overlapping every track less than this is a new candidate", range=(0.0, 1.0))
    contrast_cosine: float = setting(0.9, help="distractors more alike the target than this are not contrastive prototypes", range=(0.0, 1.0))
    duplicate_iou: float = setting(0.7, help="a candidate track this close (IoU) to an earlier one on most frames is a duplicate and dropped", range=(0.0, 1.0))
    max_candidates: int = setting(12, help="most candidates the planner chooses among (the anchor's first)", range=(1, 16))
    overlay: bool = setting(True, help="keep an overlay video of the target on the frames in the output (overlay.mp4)")

    def __post_init__(self):
        self.check_fields()

    def monitor_config(self) -> MonitorConfig:
        from trackers.monitor import MonitorConfig

        return MonitorConfig(heartbeat_every=self.heartbeat_every, cooldown=self.cooldown)


# ClearPipeline.component_specs: each slot's protocol, loader and help, in order
COMPONENT_SPECS = {
    "planner": ComponentSpec(InstanceSelector, "planners.loading:load_selector", help="planner that chooses the candidate the query refers to"),
    "tracker": ComponentSpec(Tracker, "trackers:load_tracker", help="tracker: 'classic' or a SAM 2 / SAM 3 checkpoint"),
    "proposer": ComponentSpec(Proposer, "trackers.proposals:load_proposer", help="proposes candidate objects on a frame"),
}
