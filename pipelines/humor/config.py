"""HUMOR's settings and component slots, without torch (``pipelines.config``): what ``atelier meme`` builds its
options from and checks its arguments against before a model loads. ``pipelines.humor.pipeline`` re-exports every
name here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pipelines.config import ComponentSpec, PipelineConfig, setting

MAX_MEMES = 16


@runtime_checkable
class WriterSlot(Protocol):
    def write(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class RewardSlot(Protocol):
    def prefer(self, *args: Any, **kwargs: Any) -> Any: ...


@dataclass
class HumorConfig(PipelineConfig):
    """Settings of a meme call."""

    num_memes: int = setting(4, help="memes to write and rank", range=(1, MAX_MEMES), flag="-n")
    style: str = setting("atelier", choices=("atelier", "official"),
                         help="writer prompt and meme rendering: ours, or the published LightRFT ones (generate_meme.txt; "
                              "banners, DejaVu Sans, luminance-based text colour) for an officially trained writer; the "
                              "builtin writer refuses it")
    num_paths: int = setting(3, help="reasoning paths explored before anchoring on one (spec b.2's K; 1: single path, "
                                     "0: the caption alone, no reasoning)", range=(0, 8))
    temperature: float = setting(1.0, help="sampling temperature of the writer (the published RL rollouts use 1.0)", range=(0.05, 2.0))
    # 0.95 measured on 30 VAL scenes x 8 samples (docs/BENCHMARKS.md, "HUMOR"): at 1.0 the builtin writer's rare
    # tokens break the K = 3 schema in a third of its samples (readable 67%); 0.95 reads 98% at equal preference
    top_p: float = setting(0.95, help="nucleus mass kept when sampling (1: every token; 0.95 keeps the reasoning "
                                      "readable, measured)", range=(0.05, 1.0))
    ranking: str = setting("borda", help="how the group is ordered from the pairwise preferences: borda (counts) or "
                                          "bradley_terry (fitted strengths)", choices=("borda", "bradley_terry"))
    # 5 measured on 16 TEST scenes with the RL writer (it repeats itself more than the SFT one): 4 memes asked, all 4
    # returned in 94% of calls (3 rounds: 81%); extra rounds cost time only when a round comes up short
    max_rounds: int = setting(5, help="rounds of sampling: after the first, each round draws twice the memes still missing "
                                      "(a sample may be unreadable or repeat one already kept)", range=(1, 10))
    meme_size: int = setting(384, help="a small image is enlarged to this shorter side (pixel-sharp) before the text goes on", range=(64, 1024))
    # [PROPOSED] planners.meme_cot.anchor_boxes; off by default: docs/humor.md, "reasoning loosely tied", has the measurement
    anchored_boxes: bool = setting(False, help="write the caption the anchored reasoning path quotes as the boxes, so the "
                                               "meme says what its reasoning chose (needs num_paths >= 1)")

    def __post_init__(self):
        self.check_fields()


# HumorPipeline.component_specs: each slot's protocol, loader and help, in order
COMPONENT_SPECS = {
    "writer": ComponentSpec(WriterSlot, "planners.meme_lm:load_meme_writer",
                            help="meme writer (a VLM checkpoint is asked with the published CoT schema)"),
    "reward_model": ComponentSpec(RewardSlot, "planners.meme_reward:load_reward_model",
                                  help="pairwise reward model (a VLM checkpoint without a trained head judges with the published prompt)"),
}
