"""BerniniPipeline: video generation and editing through a semantic plan in ViT space (specs/bernini.md).

check inputs -> task -> sources (sampled, resized) -> plan (the planner's MaskGIT loop over the target's
ViT tokens, optional chain of thought) -> render (the renderer's guided flow sampling with the sources
in context and the plan) -> output:

    pipe = BerniniPipeline.build(components={"planner": "builtin", "renderer": "builtin", "encoder": "builtin"})
    out = pipe("a red star bouncing to the left", generator=0)            # t2v
    out = pipe("make the blue square green", video="clip.mp4")            # v2v
    out.video, out.plan_tokens, out.plan_picture(), out.cot_text, out.seed

Slots: ``planner`` (a ``SemanticPlanner``; optional: without it, or with ``plan=False``, the renderer
works from the text alone, which is what the public Bernini-R release is), ``renderer`` (the builtin
pixel-patch DiT, which decodes plan tokens, or ``WanRenderer``, which reads the planner's contexts:
``plan_input``), ``encoder`` (optional: how the builtin planner reads prompts and sources, the builtin
ViT + MiniLM; a Qwen2.5-VL planner encodes its own). Settings left at None take the task's default
(``tasks.py``: the official tables for hf, the models' own configs for builtin).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.errors import InputError
from core.memory import check_allocation
from pipelines.base import Pipeline, PipelineOutput, generator_and_seed, output_field
from pipelines.bernini.config import (  # noqa: F401  (the config and slots live torch-free in config.py; importable here too)
    COMPONENT_SPECS,
    GUIDANCE_MODES,
    MAX_FRAMES,
    RELEASES,
    TASKS,
    BerniniConfig,
    PlanEncoder,
    Planner,
    Renderer,
)
from pipelines.bernini.tasks import (
    MAX_REFERENCES,
    fit_media_size,
    infer_task,
    mode_projects,
    source_frame_indices,
    system_prompt_for_task,
    task_defaults,
)

OFFICIAL = ("r", "v1", "v2")
BUILTIN_TASKS = ("t2v", "t2i", "i2v", "v2v", "r2v", "rv2v")  # what the builtin models were trained on
SIZE_FROM_SOURCE = {"v2v": "video", "mv2v": "video", "rv2v": "video", "ads2v": "video", "i2i": "image"}

MAX_PROMPT_CHARS = 2000

logger = logging.getLogger(__name__)


@dataclass(repr=False)
class BerniniOutput(PipelineOutput):
    """One generated or edited clip: ``video`` uint8 ``(T, H, W, 3)``, ``plan_tokens`` the planned target
    ViT tokens ``(T', h, w, D)`` (None without a plan), ``cot_text``, the task, the prompt, the seed the
    noise came from and the resolved settings (``config``)."""

    prompt: str
    task: str
    seed: int | None
    cot_text: str | None
    seconds: dict
    fps: float
    video: np.ndarray = output_field("video")
    plan_tokens: np.ndarray | None = output_field("npy", default=None)
    plan_frames: list[int] | None = None  # the output frames the plan tokens describe (builtin), else None
    # an edit's source clip as the pipeline read it (sampled and resized to the output), for the side-by-side picture
    source_video: np.ndarray | None = output_field("none", default=None)

    def plan_picture(self) -> np.ndarray | None:
        """The plan tokens' three principal components as colours, per plan frame, above the output."""
        from pipelines.bernini.viz import plan_picture

        return None if self.plan_tokens is None else plan_picture(self.plan_tokens, self.video, self.plan_frames)

    PICTURES = ('plan', 'frames', 'source_and_result')

    def pictures(self) -> dict[str, np.ndarray | None]:
        """``plan``, ``frames`` and, for an edit, ``source_and_result``: the source's frames above the result's."""
        from pipelines.bernini.viz import source_and_result

        both = None if self.source_video is None else source_and_result(self.source_video, self.video)
        return {"plan": self.plan_picture(), "frames": _frame_sheet(self.video), "source_and_result": both}

    def summary(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "task": self.task, "frames": int(len(self.video)),
                "size": [int(self.video.shape[1]), int(self.video.shape[2])], "seed": self.seed,
                "planned": self.plan_tokens is not None,
                "plan_grid": None if self.plan_tokens is None else [int(n) for n in self.plan_tokens.shape[:3]],
                "cot": self.cot_text, "fps": self.fps, "seconds": {k: round(float(v), 3) for k, v in self.seconds.items()},
                "config": self.config}

    def __str__(self) -> str:
        s = self.summary()
        plan = f"plan {tuple(s['plan_grid'])}" if s["planned"] else "no plan"
        return f"{s['task']}: {s['frames']} frames {s['size'][0]}x{s['size'][1]}, {plan}, seed {s['seed']}, {s['seconds']['total']:.1f} s"


def _frame_sheet(video: np.ndarray, columns: int = 8) -> np.ndarray:
    from core.overlay import contact_sheet
    from core.frames import resize_frames

    n = len(video)
    pick = sorted({int(i) for i in np.linspace(0, n - 1, min(n, columns))})
    frames = video[pick]
    if frames.shape[1] < 128:  # a 64-pixel clip is too small to read
        scale = 128 // frames.shape[1] + (128 % frames.shape[1] > 0)
        frames = resize_frames(frames, (frames.shape[1] * scale, frames.shape[2] * scale), "nearest")
    return contact_sheet(frames, columns=columns, labels=[f"frame {i}" for i in pick])


class BerniniPipeline(Pipeline):
    component_specs = COMPONENT_SPECS
    config_class = BerniniConfig
    _callback_tensor_inputs = ("latents",)  # the renderer's; a callback may hand back new ones

    @classmethod
    def from_pretrained(cls, directory: str | Path, *, release: str | None = None, revision: str | None = None,
                        **kwargs: Any) -> BerniniPipeline:
        """A saved pipeline (``pipeline.json``), or an official release folder as it downloads: ``Bernini-Diffusers``
        / ``-v2`` (planner + renderer) or ``Bernini-R-Diffusers`` (renderer alone), loaded strictly
        (``pipelines.bernini.official``). ``release`` ("r", "v1", "v2") overrides the detected one; it is kept in
        ``config.release`` and so in every output's config. ``directory`` may be a hub id (its snapshot folder at
        ``revision``: ``core.hub``)."""
        from core.hub import resolve_model
        from pipelines.bernini.official import layout_of, load_official

        directory = resolve_model("pipeline", directory, revision)
        if layout_of(directory) is not None:
            return load_official(cls, directory, release=release, revision=revision, **kwargs)
        pipe = super().from_pretrained(directory, revision=revision, **kwargs)
        if release is not None:
            pipe.config = dataclasses.replace(pipe.config, release=release)  # checked by __post_init__
        return pipe

    # ---- checks

    @property
    def backend(self) -> str:
        return "builtin" if getattr(self.renderer, "plan_input", "tokens") == "tokens" else "hf"

    def check_inputs(self, prompt: Any, references: Sequence[Any]) -> None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError("prompt", prompt, "describe the clip (t2v) or the edit (v2v), e.g. 'a red star bouncing to the left'")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise InputError("prompt", f"{len(prompt)} characters", f"use at most {MAX_PROMPT_CHARS}")
        if isinstance(references, (str, Path, np.ndarray)) or not isinstance(references, Sequence):
            raise InputError("references", type(references).__name__, "pass a list of image paths or uint8 (H, W, 3) arrays")
        if len(references) > MAX_REFERENCES:
            raise InputError("references", f"{len(references)} images", f"give 1 to {MAX_REFERENCES} reference images")

    @property
    def release(self) -> str:
        """The release whose tables and numerics apply: the setting, else what loading recorded on the
        renderer or planner (``release``), else builtin for the builtin backend, r (Bernini-R) for an hf
        renderer alone and v1 with a planner (the official demo's fallback when the folder is not "-v2")."""
        if self.config.release != "auto":
            return self.config.release
        for part in (self.renderer, self.planner):
            found = getattr(part, "release", None)
            if found in RELEASES:
                return found
        if self.backend == "builtin":
            return "builtin"
        return "r" if self.planner is None else "v1"

    def _defaults(self, task: str):
        """The official row (hf), or None (builtin: the models' own configs)."""
        release = self.release
        if release == "builtin" or self.backend == "builtin":
            return None
        return task_defaults(task, release)

    def _geometry(self, task: str, source_hw: tuple[int, int] | None = None) -> tuple[int, int, int]:
        """(num_frames, height, width) of the output: the settings, else the task's default (a source clip is
        sampled to it), checked against what the renderer takes. On hf, edits (v2v, mv2v, rv2v, ads2v, i2i)
        take the size of their source by ``fit_media_size`` as the release does (``source_hw``)."""
        c = self.config
        d = self._defaults(task)
        if self.backend == "builtin":
            rc = self.renderer.config
            frames, height, width = rc.num_frames, rc.image_size, rc.image_size
        else:
            d = d or task_defaults(task, "v1")  # release "builtin" on an hf renderer: the v1 numbers
            frames, height, width = d.num_frames, d.height, d.width
            if task in SIZE_FROM_SOURCE and source_hw is not None:
                height, width = fit_media_size(int(source_hw[0]), int(source_hw[1]), d.max_image_size)
        frames = c.num_frames or frames
        if task in ("t2i", "i2i") and self.backend == "hf":
            frames = 1
        height, width = c.height or height, c.width or width
        if self.backend == "builtin":
            p = self.renderer.config.token_pixels  # a token's side in pixels (a latent renderer's patch times its factor)
            for name, v in (("height", height), ("width", width)):
                if v % p:
                    raise InputError(name, v, f"the builtin renderer takes multiples of {p} pixels (it was trained at 64)")
            if task == "t2i":
                frames = max(frames, self.renderer.config.plan_frames)
        else:
            self.renderer.check_inputs(height, width, frames)
        check_allocation("num_frames", frames, frames * height * width * 3 * 8, "ask for fewer frames or a smaller size")
        return int(frames), int(height), int(width)

    # ---- sources

    @staticmethod
    def _image(value: Any, name: str, size: tuple[int, int]) -> np.ndarray:
        from core.frames import resize_frames
        from core.video import Video, reading

        if isinstance(value, np.ndarray):
            if value.dtype != np.uint8 or value.ndim != 3 or value.shape[-1] != 3:
                raise InputError(name, getattr(value, "shape", value), "pass a uint8 RGB image (H, W, 3)")
            frame = value
        elif isinstance(value, (str, Path, Video)):
            with reading(value) as v:
                frame = np.asarray(v.get_frames([0]))[0]
        else:
            raise InputError(name, type(value).__name__, "pass an image path or a uint8 (H, W, 3) array")
        return resize_frames(frame[None], size)[0]

    @staticmethod
    def _source_hw(value: Any) -> tuple[int, int] | None:
        """(height, width) of a source (array or file), None when there is none."""
        from core.video import Video, reading

        if value is None:
            return None
        if isinstance(value, np.ndarray):
            return (int(value.shape[-3]), int(value.shape[-2])) if value.ndim in (3, 4) else None
        if isinstance(value, (str, Path, Video)):
            with reading(value) as v:
                return int(v.info.height), int(v.info.width)
        return None

    @staticmethod
    def _video(value: Any, frames: int, size: tuple[int, int], fps: float | None = None) -> np.ndarray:
        """``frames`` frames of the source (a shorter one held on its last frame), resized. ``fps`` None: spread
        evenly over the whole clip (the builtin models' sampling); else the clip resampled to ``fps`` from its
        start (``source_frame_indices``: consecutive frames when the rates agree; an array counts as ``fps``)."""
        from core.frames import resize_frames
        from core.video import reading

        if isinstance(value, np.ndarray) and (value.dtype != np.uint8 or value.ndim != 4 or value.shape[-1] != 3):
            raise InputError("video", getattr(value, "shape", value), "pass a uint8 RGB clip (T, H, W, 3) or a video path")
        with reading(value, fps=fps if isinstance(value, np.ndarray) else None) as v:
            n = len(v)
            if fps is None:
                pick = [int(i) for i in np.linspace(0, n - 1, min(n, frames)).round()]
            else:
                pick = source_frame_indices(n, float(v.info.fps), frames, fps)
            k = len(pick)
            check_allocation("video", f"{k} frames", k * (v.info.height * v.info.width + size[0] * size[1]) * 3,
                             "pass a shorter clip or fewer num_frames")
            clip = np.asarray(v.get_frames(pick))
        if len(clip) < frames:
            clip = np.concatenate([clip, np.repeat(clip[-1:], frames - len(clip), 0)])
        return resize_frames(clip, size)

    # ---- the call

    def __call__(self, prompt: str, *, video: Any = None, image: Any = None, references: Sequence[Any] = (),
                 generator: Any = None, callback_on_step_end: Callable | None = None, output_type: str = "np") -> BerniniOutput:
        """Generate (t2v / t2i / i2v / r2v) or edit (v2v / rv2v) a clip.

        ``video``: the clip to edit (path or uint8 array); ``image``: i2v's first frame; ``references``: 1-5
        images (paths or arrays). ``generator``: a seed or ``torch.Generator``, the only randomness (a fresh
        seed is drawn and reported when None). ``callback_on_step_end(pipe, step, info)`` runs after every
        planning and rendering step (``info["stage"]`` is "plan" or "render"); ``interrupt()`` stops there.
        """
        self._begin_call()
        self._step = 0  # one count over both stages: planning steps, then rendering steps
        t0 = time.perf_counter()
        gen, seed = generator_and_seed(generator)
        self.check_inputs(prompt, references)
        task = infer_task(self.config.task, video is not None, image is not None, len(references))
        if self.backend == "builtin" and task not in BUILTIN_TASKS:
            raise InputError("task", task, f"the builtin models were trained on {list(BUILTIN_TASKS)}; "
                                           "this task needs an official checkpoint (hf)")
        d = self._defaults(task)
        source = video if SIZE_FROM_SOURCE.get(task) == "video" else image
        frames, height, width = self._geometry(task, self._source_hw(source) if d is not None else None)
        size = (height, width)
        if d is None:  # builtin: every source stretched to the target, the clip sampled over its length
            source_video = self._video(video, frames, size) if video is not None else None
            refs = [self._image(r, f"references[{i}]", size) for i, r in enumerate(references)]
            first = self._image(image, "image", size) if image is not None else None
        else:  # the release: each source keeps its aspect (fit_media_size), the clip read at the output fps
            def fit(hw: tuple[int, int] | None) -> tuple[int, int]:
                return fit_media_size(int(hw[0]), int(hw[1]), d.max_image_size) if hw is not None else size

            source_video = self._video(video, frames, fit(self._source_hw(video)) if task not in SIZE_FROM_SOURCE else size,
                                       fps=float(d.fps)) if video is not None else None
            refs = [self._image(r, f"references[{i}]", fit(self._source_hw(r))) for i, r in enumerate(references)]
            first = self._image(image, "image", size if task in SIZE_FROM_SOURCE else fit(self._source_hw(image))) \
                if image is not None else None
        sources = ([source_video] if source_video is not None else []) + ([first] if first is not None else []) + refs
        t_in = time.perf_counter()

        memory_plan = self._place_models(frames, height, width, len(sources))
        plan_out = None
        if self.config.plan and self.planner is not None:
            if memory_plan is not None:
                from pipelines.bernini.placement import planning_done, planning_starts

                planning_starts(self)
            plan_out = self._plan(prompt, task, sources, frames, height, width, gen, callback_on_step_end)
            if memory_plan is not None:
                planning_done(self)
        t_plan = time.perf_counter()
        clip, settings = self._render(prompt, task, sources, plan_out, frames, height, width, gen, callback_on_step_end)
        if task == "t2i":
            clip = clip[:1]
        t_end = time.perf_counter()
        tokens = None if plan_out is None else plan_out.tokens.float().cpu().numpy()
        plan_frames = None
        if plan_out is not None and self.backend == "builtin":
            from renderers.builtin import plan_frame_indices

            plan_frames = [i for i in plan_frame_indices(frames, tokens.shape[0]) if i < len(clip)]
        config = {**dataclasses.asdict(self.config), "task": task, "release": self.release, "num_frames": len(clip), "height": height,
                  "width": width, **settings}
        if memory_plan is not None:
            config["memory_plan"] = {k: v for k, v in memory_plan.to_dict().items() if k != "parts"}
        out = BerniniOutput(prompt=prompt, task=task, seed=seed, cot_text=None if plan_out is None else plan_out.cot_text,
                            config=config, fps=12.0 if self.backend == "builtin" else 16.0, seconds={"inputs": t_in - t0, "plan": t_plan - t_in, "render": t_end - t_plan, "total": t_end - t0},
                            video=clip, plan_tokens=tokens, plan_frames=plan_frames, source_video=source_video)
        return out.convert(output_type)

    def _place_models(self, frames: int, height: int, width: int, n_sources: int):
        """The hf models placed by their memory plan (``pipelines.bernini.placement``), or None (builtin; ``placement``
        none; auto on the CPU). ``--offload`` is model offload on an accelerator (on the CPU: a warning, nothing moves)."""
        c = self.config
        if self.backend == "builtin" or c.placement == "none":
            return None
        device = self.renderer.device
        strategy = c.placement
        if strategy == "auto":
            if c.cpu_offload and device.type != "cpu":
                strategy = "model-offload"
            elif c.cpu_offload:
                logger.warning("--offload: no accelerator to offload to (running on the CPU); ignored")
            if device.type == "cpu" and strategy == "auto":
                return None
        from core.memory_plan import parse_memory
        from pipelines.bernini.placement import place, plan_pipeline

        if c.max_memory is not None:
            budget = parse_memory(c.max_memory)
        elif device.type == "cuda":
            budget = int(torch.cuda.mem_get_info(device)[0])
        else:
            import psutil

            budget = int(psutil.virtual_memory().available)
        plan = plan_pipeline(self, budget, num_frames=frames, height=height, width=width, segments=1 + n_sources,
                             strategy=None if strategy == "auto" else strategy)
        if getattr(self, "_placed", None) != (plan.strategy, str(device)):
            place(self, plan.strategy, device)
            self._placed = (plan.strategy, str(device))
        return plan

    def _plan(self, prompt: str, task: str, sources: list[np.ndarray], frames: int, height: int, width: int,
              gen: torch.Generator, callback: Callable | None):
        from planners.semantic import PlanRequest

        from planners.semantic.layout import official_system_prompt
        from planners.semantic.planner import OFFICIAL_STREAMS

        planner = self.planner.for_task(task) if hasattr(self.planner, "for_task") else self.planner  # the builtin: one per task
        c, pc = self.config, planner.config
        official = self.backend == "hf" and self.release in OFFICIAL
        encode = self.encoder.encode_visual if self.encoder is not None else getattr(planner.backbone, "encode_visual", None)
        if sources and encode is None:
            raise InputError("encoder", None, "this planner reads sources through an encoder: pass encoder='builtin'")
        # the release reads sources at 2 fps within 50176 pixels (bicubic); our own planners as their processor does
        read = {"source_fps": 16.0, "planner_fps": 2.0, "max_pixels": 50176} if official and self.encoder is None else {}
        visual = [encode(s, "video" if s.ndim == 4 else "image", **read) for s in sources]
        if pc.text_embed_dim:
            if self.encoder is None or not hasattr(self.encoder, "encode_prompt"):
                raise InputError("encoder", None, "this planner reads prompts as text states: pass encoder='builtin'")
            embeds = self.encoder.encode_prompt(prompt)
            neg = self.encoder.encode_prompt(c.negative_prompt) if c.negative_prompt.strip() else None
            request = PlanRequest(prompt_embeds=embeds, negative_prompt_embeds=neg, sources=visual, task=task)
        else:
            negative = self._negative(task) if self.backend == "hf" else c.negative_prompt
            request = PlanRequest(prompt=prompt, negative_prompt=negative.strip() and negative or None, sources=visual, task=task,
                                  system_prompt=official_system_prompt(task) if official else None)
        if self.backend == "builtin":
            rc = self.renderer.config
            grid = (min(rc.plan_frames, frames), height // rc.plan_patch, width // rc.plan_patch)
        else:
            from planners.semantic.layout import target_grid

            grid = target_grid(max(frames, 2), height, width)
        d = self._defaults(task)
        steps = c.planning_steps or (d.planning_steps if d else None)
        denoise = c.denoising_steps or (d.denoising_steps if d else None)
        txt = c.plan_text_cfg if c.plan_text_cfg is not None else (d.txt_cfg if d else None)
        img = c.plan_image_cfg if c.plan_image_cfg is not None else (d.img_cfg if d else None)
        k = c.plan_candidates
        score = getattr(self.encoder, "plan_text_score", None)
        if k > 1 and score is None:
            raise InputError("plan_candidates", k, "ranking plans needs the builtin encoder (encoder='builtin'); use 1")
        per_plan = steps or pc.planning_steps
        total = k * per_plan
        bar = self.progress_bar(total=total, desc="plan")

        def on_step(step: int, info: dict):  # returns the latents a callback hands back (or None)
            bar.update(1)
            self._step += 1
            self.step_end(callback, self._step - 1, {"stage": "plan", "stage_step": step, "num_steps": total, **info})

        try:
            best, best_score = None, -math.inf
            for _ in range(k):  # one generator: candidate j is the j-th draw after the seed, so a seed repeats the pick
                out = planner.plan(request, grid=grid, steps=steps, denoising_steps=denoise, txt_cfg=txt, img_cfg=img,
                                   cot=c.cot and pc.cot and not official, generator=gen, callback=on_step,
                                   **(OFFICIAL_STREAMS if official else {}))
                s = score(out.tokens, prompt) if k > 1 else 0.0
                if s > best_score:
                    best, best_score = out, s
            return best
        finally:
            bar.close()

    def _negative(self, task: str) -> str:
        """The negative prompt of an hf run: the setting, else the release's official one for the task (a
        single space: none)."""
        given = self.config.negative_prompt
        if given:
            return given if given.strip() else ""
        d = self._defaults(task)
        return d.negative_prompt if d is not None else ""

    def _render(self, prompt: str, task: str, sources: list[np.ndarray], plan_out: Any, frames: int, height: int, width: int,
                gen: torch.Generator, callback: Callable | None) -> tuple[np.ndarray, dict]:
        c = self.config
        if self.backend == "builtin":
            steps = c.steps or self.renderer.config.steps
            guidance = c.guidance_scale if c.guidance_scale is not None else "auto"
            settings = {"steps": steps, "guidance_scale": c.guidance_scale if c.guidance_scale is not None else self.renderer.config.guidance_scale}
            kwargs = dict(plan=None if plan_out is None else plan_out.tokens, text=prompt, sources=sources, num_frames=frames,
                          height=height, width=width, steps=steps, guidance=guidance)
        else:
            from renderers.guidance import APG
            from renderers.hf_wan import PlanContexts

            d = self._defaults(task) or task_defaults(task, "v1")
            g = d.guidance
            scales = dataclasses.replace(g, video=_pick(c.guidance_video, g.video), image=_pick(c.guidance_image, g.image),
                                         text=_pick(c.guidance_text, g.text), plan=_pick(c.guidance_plan, g.plan))
            mode = d.mode if c.guidance_mode == "auto" else c.guidance_mode
            if mode == "cascade":
                apg = c.apg == "on"
                apg_cfg = APG() if apg else None
            else:  # the official modes carry their own projection; Bernini-R's APG uses the table's eta / momentum
                apg = mode_projects(mode)
                apg_cfg = APG(eta=d.eta, momentum=d.momentum)
            steps = c.steps or d.steps
            shift = _pick(c.flow_shift, d.flow_shift)
            official = self.release in OFFICIAL
            plan = None
            if plan_out is not None:
                if plan_out.contexts is None:
                    raise InputError("planner", type(self.planner).__name__, "this planner has no renderer contexts (context_dim); "
                                                                            "the Wan renderer reads those, not tokens")
                plan = PlanContexts(*plan_out.contexts)
            if c.tiling and hasattr(self.renderer, "enable_tiling"):
                self.renderer.enable_tiling()
            negative = self._negative(task)
            system = system_prompt_for_task(task) if official else None
            settings = {"steps": steps, "flow_shift": shift, "apg": apg, "guidance_mode": mode, "guidance": dataclasses.asdict(scales),
                        "negative_prompt": negative, "system_prompt": system}
            kwargs = dict(prompt=prompt, negative_prompt=negative, sources=sources, plan=plan, height=height, width=width,
                          num_frames=frames, num_inference_steps=steps, guidance=scales, apg=apg_cfg, flow_shift=shift,
                          guidance_mode=mode, system_prompt=system)
        bar = self.progress_bar(total=steps, desc="render")

        decode = getattr(self.renderer, "decode_tokens", None) if self.backend == "builtin" else None

        def on_step(step: int, info: dict):  # returns the latents a callback hands back (or None)
            bar.update(1)
            self._step += 1
            if callback is not None and decode is not None and info.get("denoised") is not None:
                # the current clean-clip estimate: a picture a web tab can show while it renders
                info = {**info, "preview": _frame_sheet(decode(info["denoised"][0], height, width), columns=4)}
            return self.step_end(callback, self._step - 1, {"stage": "render", "stage_step": step, "num_steps": steps, **info}).get("latents")

        cache = c.render_cache()
        if cache is not None:  # passed only when on: a renderer without caching still takes the default
            kwargs["cache"] = cache
        try:
            clip = self.renderer.generate(**kwargs, generator=gen, callback=on_step)
        finally:
            bar.close()
        return np.asarray(clip), settings


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value
