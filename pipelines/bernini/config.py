"""Bernini's settings and component slots, without torch (``pipelines.config``): what ``atelier generate`` /
``atelier edit`` build their options from and check their arguments against before a model loads.
``pipelines.bernini.pipeline`` re-exports every name here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from core.memory_plan import STRATEGIES
from pipelines.config import ComponentSpec, PipelineConfig, setting
from pipelines.render_cache import RenderCacheSettings

TASKS = ("t2v", "t2i", "i2v", "i2i", "v2v", "mv2v", "r2v", "rv2v", "ads2v")  # pipelines.bernini.tasks: what each one takes
RELEASES = ("r", "v1", "v2", "builtin")
# = renderers.guidance.GUIDANCE_MODES (that module imports torch; tests/test_cold_start.py keeps the two equal)
GUIDANCE_MODES = ("t2v_apg", "v2v_apg", "r2v_apg", "rv2v", "v2v", "vae_txt_vit_wapg", "cascade")
MAX_FRAMES = 241


@runtime_checkable
class Renderer(Protocol):
    """What the renderer slot needs: ``generate`` a clip (``plan_input`` says what plan it reads)."""

    def generate(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class Planner(Protocol):
    """What the planner slot needs: ``plan`` the target's ViT tokens."""

    def plan(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class PlanEncoder(Protocol):
    """What the encoder slot needs: ``encode_visual`` a source into the planner's ViT tokens (the
    builtin encoder also has ``encode_prompt`` / ``plan_text_score``, asked for where used). A slot
    without a protocol would take any loadable class, e.g. ``transformers.PretrainedConfig``."""

    def encode_visual(self, frames: Any, kind: str | None = None) -> Any: ...


@dataclass
class BerniniConfig(RenderCacheSettings, PipelineConfig):
    """Settings of a Bernini call; None takes the task's default (``pipelines.bernini.tasks``)."""

    task: str = setting("auto", help="what to do: auto (from the inputs), t2v, t2i, i2v, i2i, v2v (edit a video), mv2v, r2v (references), "
                                     "rv2v, ads2v", choices=("auto", *TASKS))
    release: str = setting("auto", help="which release's tables and numerics: r (Bernini-R), v1, v2 (Bernini-Diffusers, -v2), builtin "
                                        "(our own models); auto: what loading recorded, else builtin / r without a planner / v1",
                           choices=("auto", *RELEASES))
    guidance_mode: str = setting("auto", help="hf renderer: the guidance formula (auto: the release's table for the task)",
                                 choices=("auto", *GUIDANCE_MODES))
    plan: bool = setting(True, help="plan the target in ViT space first (off: the renderer alone, from the text)")
    cot: bool = setting(True, help="let the planner write its chain of thought before the plan, if it was trained to (off: skip it; "
                                   "official checkpoints never do)")
    num_frames: int | None = setting(None, help="frames of the output (None: the task's default; Wan needs 4k+1)", range=(1, MAX_FRAMES))
    height: int | None = setting(None, help="output height in pixels (None: the renderer's default)", range=(16, 1280))
    width: int | None = setting(None, help="output width in pixels (None: the renderer's default)", range=(16, 1280))
    steps: int | None = setting(None, help="renderer sampling steps (None: builtin 12, hf 40)", range=(1, 200))
    planning_steps: int | None = setting(None, help="MaskGIT reveal steps of the planner (None: the task's default)", range=(1, 200))
    denoising_steps: int | None = setting(None, help="flow-head Euler steps per revealed token (None: the task's default)", range=(1, 50))
    plan_text_cfg: float | None = setting(None, help="planner guidance on the instruction (None: the task's default; 1 = none)", range=(0.0, 20.0))
    plan_image_cfg: float | None = setting(None, help="planner guidance on the sources (None: the task's default; 1 = none)", range=(0.0, 20.0))
    plan_candidates: int = setting(1, help="builtin planner: sample this many plans and keep the one whose tokens match the prompt best "
                                           "in the ViT/MiniLM space [PROPOSED] (each costs one planning pass)", range=(1, 16))
    guidance_scale: float | None = setting(None, help="builtin renderer: one guidance scale, fully conditioned vs nothing (None: its config's; 1 = no guidance)", range=(0.0, 20.0))
    guidance_video: float | None = setting(None, help="hf renderer: guidance on the source video (None: the task's table)", range=(0.0, 20.0))
    guidance_image: float | None = setting(None, help="hf renderer: guidance on all sources (None: the task's table)", range=(0.0, 20.0))
    guidance_text: float | None = setting(None, help="hf renderer: guidance on the text (None: the task's table)", range=(0.0, 20.0))
    guidance_plan: float | None = setting(None, help="hf renderer: guidance on the plan (None: the task's table)", range=(0.0, 20.0))
    apg: str = setting("auto", help="hf renderer, guidance_mode cascade: its APG on or off (auto: off); the official modes carry their own",
                       choices=("auto", "on", "off"))
    flow_shift: float | None = setting(None, help="hf renderer: the sampler's flow shift (None: the release's: 3.0 Bernini-R, 5.0 full)",
                                       range=(0.01, 100.0))
    negative_prompt: str = setting("", help="what the text guidance steers away from (empty: the release's official one on hf, "
                                            "nothing on builtin; a single space: nothing)")
    tiling: bool = setting(False, help="hf renderer: decode the VAE in tiles (less memory at large sizes)")
    cpu_offload: bool = setting(False, help="hf renderer: keep each model on the CPU until it runs (less GPU memory, slower); "
                                            "the same as --placement 'model-offload'", flag="--offload")
    placement: str = setting("auto", help="hf: where the models go (core.memory_plan): auto plans for --max-memory on an accelerator "
                                          "(on the CPU nothing moves), none keeps them where they loaded, or a strategy by name",
                             choices=("auto", "none", *STRATEGIES))
    max_memory: str | None = setting(None, help="hf: the device memory the placement may use, e.g. 24GB (None: what the device has free)")

    def __post_init__(self):
        self.check_fields()
        if self.max_memory is not None:
            from core.memory_plan import parse_memory

            parse_memory(self.max_memory)


# BerniniPipeline.component_specs: each slot's protocol, loader and help, in order
COMPONENT_SPECS = {
    "planner": ComponentSpec(Planner, "planners.semantic.loading:load_planner", optional=True,
                             help="semantic planner: 'builtin' or a Bernini planner folder (empty: render from the text alone)"),
    "renderer": ComponentSpec(Renderer, "renderers.loading:load_renderer",
                              help="renderer: 'builtin' or a Bernini-R / Wan diffusers folder"),
    "encoder": ComponentSpec(PlanEncoder, "planners.semantic.loading:load_plan_encoder", optional=True,
                             help="how the builtin planner reads prompts and sources ('builtin'; a Qwen-VL planner needs none)"),
}
