"""AnyMotion's settings and component slots, without torch (``pipelines.config``): what ``atelier motion`` builds its
options from and checks its arguments against before a model loads. ``pipelines.anymotion.pipeline`` re-exports
every name here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pipelines.config import ComponentSpec, PipelineConfig, setting
from pipelines.render_cache import RenderCacheSettings

MAX_FRAMES = 240


@runtime_checkable
class SkeletonPlannerSlot(Protocol):
    """What the planner slot needs: ``plan(frames, source_keypoints, instruction, generator)``."""

    def plan(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class RendererSlot(Protocol):
    """What the renderer slot needs: ``generate`` a clip."""

    def generate(self, *args: Any, **kwargs: Any) -> Any: ...


@dataclass
class AnyMotionConfig(RenderCacheSettings, PipelineConfig):
    """Settings of an AnyMotion call; None takes the renderer's default."""

    skeleton: bool = setting(True, help="plan the target skeleton first (off: the renderer edits from the instruction alone, "
                                        "the ablation the method argues against)")
    pose_reader: str = setting("classic", help="how the source skeleton is read: classic (the builtin stick-figure reader, no weights) "
                                              "or mediapipe (real people; pip install 'atelier[pose]')", choices=("classic", "mediapipe"))
    num_frames: int | None = setting(None, help="frames of the output; the clip is sampled evenly to it (None: every frame, at most 240; "
                                                "Wan takes 4k+1)", range=(1, MAX_FRAMES))
    height: int | None = setting(None, help="output height in pixels (None: builtin 64, hf 480)", range=(16, 1280))
    width: int | None = setting(None, help="output width in pixels (None: builtin 64, hf 832)", range=(16, 1280))
    steps: int | None = setting(None, help="renderer sampling steps (None: the builtin renderer's 8, hf 40)", range=(1, 200))
    guidance_scale: float | None = setting(None, help="builtin renderer: one guidance scale, fully conditioned vs nothing "
                                                      "(None: its config's, 1 = no guidance)", range=(0.0, 20.0))
    uncover: bool = setting(True, help="builtin renderer: where a source limb was and no target limb is, show the background the clip "
                                       "shows there in other frames (the render leaves dark residues there) [PROPOSED]")
    tiling: bool = setting(False, help="hf renderer: decode the VAE in tiles (less memory at large sizes)")
    cpu_offload: bool = setting(False, help="hf renderer: keep each model on the CPU until it runs (less GPU memory, slower)", flag="--offload")

    def __post_init__(self):
        self.check_fields()


# AnyMotionPipeline.component_specs: each slot's protocol, loader and help, in order
COMPONENT_SPECS = {
    "planner": ComponentSpec(SkeletonPlannerSlot, "planners.skeleton_cot:load_skeleton_planner",
                             help="SCoT planner: 'builtin', a saved planner folder, or a Qwen2.5-VL checkpoint"),
    "renderer": ComponentSpec(RendererSlot, "renderers.loading:load_motion_renderer",
                              help="pose-guided renderer: 'builtin' or a Wan diffusers folder"),
}
