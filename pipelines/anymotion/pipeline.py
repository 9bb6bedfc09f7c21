"""AnyMotionPipeline: skeleton chain-of-thought motion editing (specs/anymotion.md).

read the source skeleton -> the SCoT planner reasons and plans the target skeleton (and MetaQuery states)
-> the pose-guided renderer draws the edited clip with the source in context -> output:

    pipe = AnyMotionPipeline.build(components={"planner": "builtin", "renderer": "builtin"})
    out = pipe("clip.mp4", "make the person raise the left arm", generator=0)
    out.video, out.source_keypoints, out.target_keypoints, out.reasoning, out.side_by_side()

Slots: ``planner`` (a ``SkeletonPlanner``: the builtin SCoT planner, or Qwen2.5-VL through
``planners.skeleton_cot_hf``), ``renderer`` (the builtin renderer in its pose-guided mode, which reads
pose maps of the planned skeleton, or ``WanRenderer``, which gets the rendered skeleton as a second
in-context video, spec b.5 (a)). The source skeleton comes from ``source_keypoints=`` when given,
else from the ``pose_reader`` setting (the builtin stick-figure reader, or MediaPipe for real people).

A clip without a person returns the clip unchanged with ``person_found=False`` and says so; an
instruction the planner reads as asking for nothing (``no_change``, or a plan within a quarter torso
length of the source) returns the clip unchanged with ``changed=False`` and says so. Unchanged means
the input itself: its frames at its own size and frame rate (the keypoints in its pixels), not the
renderer's working copy.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.errors import InputError
from core.memory import check_allocation
from pipelines.anymotion.config import (  # noqa: F401  (the config and slots live torch-free in config.py; importable here too)
    COMPONENT_SPECS,
    MAX_FRAMES,
    AnyMotionConfig,
    RendererSlot,
    SkeletonPlannerSlot,
)
from pipelines.base import Pipeline, PipelineOutput, generator_and_seed, output_field

MAX_INSTRUCTION_CHARS = 2000
# [DEFAULT] spec b.5's three-way CFG for the hf renderer: s_src 1.5 on the sources, s_txt 4.0 on the text
HF_STEPS, HF_SHIFT, HF_SIZE = 40, 5.0, (480, 832)


@dataclass(repr=False)
class AnyMotionOutput(PipelineOutput):
    """One motion edit: ``video`` uint8 ``(T, H, W, 3)``; ``source_keypoints`` / ``target_keypoints`` COCO-17
    ``(T, 17, 3)`` pixels of the output's size (None where there is none); the planner's ``reasoning``;
    ``person_found`` / ``changed`` and a ``message`` saying what happened; the seed and the settings."""

    instruction: str
    reasoning: str
    message: str
    person_found: bool
    changed: bool
    category: str
    fine_class: str
    confidence: float
    seed: int | None
    seconds: dict
    fps: float
    video: np.ndarray = output_field("video")
    source_video: np.ndarray | None = output_field("none", default=None)
    source_keypoints: np.ndarray | None = output_field("keypoints", default=None)
    target_keypoints: np.ndarray | None = output_field("keypoints", default=None)
    queries: np.ndarray | None = output_field("none", default=None)

    def side_by_side(self, frames: list[int] | None = None) -> np.ndarray:
        """Source + its skeleton | planned skeleton | output, for ``frames`` (default 4 evenly spaced)."""
        from pipelines.anymotion.viz import side_by_side

        source = self.source_video if self.source_video is not None else self.video
        return side_by_side(source, self.video, self.source_keypoints, self.target_keypoints, frames)

    PICTURES = ('side_by_side',)

    def pictures(self) -> dict[str, np.ndarray | None]:
        return {"side_by_side": self.side_by_side()}

    def summary(self) -> dict[str, Any]:
        return {"instruction": self.instruction, "message": self.message, "person_found": self.person_found, "changed": self.changed,
                "reasoning": self.reasoning, "category": self.category, "fine_class": self.fine_class, "confidence": self.confidence,
                "frames": int(len(self.video)), "size": [int(self.video.shape[1]), int(self.video.shape[2])], "seed": self.seed,
                "fps": self.fps, "seconds": {k: round(float(v), 3) for k, v in self.seconds.items()}, "config": self.config}

    def __str__(self) -> str:
        s = self.summary()
        return f"{s['message']} ({s['frames']} frames {s['size'][0]}x{s['size'][1]}, seed {s['seed']}, {s['seconds']['total']:.1f} s)"


class AnyMotionPipeline(Pipeline):
    component_specs = COMPONENT_SPECS
    config_class = AnyMotionConfig
    _callback_tensor_inputs = ("latents",)  # the renderer's; a callback may hand back new ones

    @property
    def backend(self) -> str:
        return "builtin" if getattr(self.renderer, "plan_input", None) == "tokens" else "hf"

    # ---- inputs

    def _geometry(self, n_source: int) -> tuple[int, int, int]:
        c = self.config
        frames = c.num_frames or min(n_source, MAX_FRAMES)
        if self.backend == "builtin":
            rc = self.renderer.config
            if not rc.pose_channels:
                raise InputError("renderer", "a Bernini renderer", "AnyMotion needs a pose-guided renderer: pass renderer='builtin' "
                                                                   "(weights/builtin/motion_renderer) or a Wan folder")
            height, width = c.height or rc.image_size, c.width or rc.image_size
            for name, v in (("height", height), ("width", width)):
                if v % rc.patch:
                    raise InputError(name, v, f"the builtin renderer takes multiples of {rc.patch} pixels (it was trained at 64)")
        else:
            height, width = c.height or HF_SIZE[0], c.width or HF_SIZE[1]
            frames = max(1, (frames - 1) // 4 * 4 + 1)  # Wan's VAE takes 4k+1 frames
            self.renderer.check_inputs(height, width, frames)
        check_allocation("num_frames", frames, frames * height * width * 3 * 8, "ask for fewer frames or a smaller size")
        return int(frames), int(height), int(width)

    def _clip(self, video: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int], float | None]:
        """(the sampled frames at the source size, their indices, the output geometry (frames, height, width), the
        frame rate of those frames: the file's, stretched when sampled to fewer; None for an array, which has none)."""
        from core.video import Video, reading

        if isinstance(video, np.ndarray) and (video.dtype != np.uint8 or video.ndim != 4 or video.shape[-1] != 3):
            raise InputError("video", getattr(video, "shape", video), "pass a uint8 RGB clip (T, H, W, 3) or a video path")
        if not isinstance(video, (np.ndarray, str, Path, Video)):
            raise InputError("video", type(video).__name__, "pass a video path, a core.video.Video, a folder of frames or a uint8 (T, H, W, 3) array")
        with reading(video) as v:
            n = len(v)
            geometry = self._geometry(n)
            frames = geometry[0]
            k = min(n, frames)
            check_allocation("video", f"{k} frames", k * v.info.height * v.info.width * 3 * 2, "pass a shorter clip or fewer num_frames")
            idx = np.linspace(0, n - 1, k).round().astype(int)
            clip = np.asarray(v.get_frames([int(i) for i in idx]))
            fps = None if isinstance(video, np.ndarray) else float(v.info.fps) * k / max(n, 1)  # same duration as the source
        if len(clip) < frames:  # a clip shorter than asked is held on its last frame
            pad = frames - len(clip)
            clip, idx = np.concatenate([clip, np.repeat(clip[-1:], pad, 0)]), np.concatenate([idx, np.repeat(idx[-1:], pad)])
        return clip, idx, geometry, fps

    def _source_keypoints(self, given: Any, clip: np.ndarray, idx: np.ndarray, size: tuple[int, int], out_size: tuple[int, int]) -> np.ndarray:
        from planners.skeleton_cot import check_keypoints

        if given is not None:
            kp = check_keypoints(given)
            if len(kp) <= int(idx.max()):
                raise InputError("source_keypoints", f"{len(kp)} frames", f"give one skeleton per frame of the source clip (at least {int(idx.max()) + 1})")
            kp = kp[idx].copy()
        else:
            from trackers.pose import load_pose_reader

            kp = load_pose_reader(self.config.pose_reader).read(clip)
        kp[..., 0] *= out_size[1] / size[1]
        kp[..., 1] *= out_size[0] / size[0]
        return kp.astype(np.float32)

    # ---- the call

    def __call__(self, video: Any, instruction: str, *, source_keypoints: Any = None, generator: Any = None,
                 callback_on_step_end: Callable | None = None, output_type: str = "np") -> AnyMotionOutput:
        """Edit the motion of the person in ``video`` (a path or uint8 ``(T, H, W, 3)``) as ``instruction`` says.

        ``source_keypoints``: COCO-17 ``(T, 17, 3)`` pixels, one per source frame (e.g. ground truth); None reads
        them with the ``pose_reader`` setting. ``generator``: a seed or ``torch.Generator``, the only randomness
        (a fresh seed is drawn and reported when None). ``callback_on_step_end(pipe, step, info)`` runs after the
        planning step and every rendering step (``info["stage"]`` "plan" or "render"); ``interrupt()`` stops there.
        """
        from core.frames import resize_frames

        self._begin_call()
        self._step = 0
        t0 = time.perf_counter()
        gen, seed = generator_and_seed(generator)
        if not isinstance(instruction, str) or not instruction.strip():
            raise InputError("instruction", instruction, "describe the motion, e.g. 'make the person raise the left arm'")
        if len(instruction) > MAX_INSTRUCTION_CHARS:
            raise InputError("instruction", f"{len(instruction)} characters", f"use at most {MAX_INSTRUCTION_CHARS}")
        raw, idx, (frames, height, width), source_fps = self._clip(video)
        size = (int(raw.shape[1]), int(raw.shape[2]))
        clip = resize_frames(raw, (height, width))
        src_kp = self._source_keypoints(source_keypoints, raw, idx, size, (height, width))
        t_in = time.perf_counter()
        fps = 12.0 if self.backend == "builtin" else 16.0
        config = {**dataclasses.asdict(self.config), "num_frames": frames, "height": height, "width": width, "backend": self.backend}

        def at_source(kp):  # keypoints of the working size -> pixels of the source's size
            if kp is None:
                return None
            kp = np.array(kp, np.float32)
            kp[..., 0] *= size[1] / width
            kp[..., 1] *= size[0] / height
            return kp

        def finish(video_out, message, *, reasoning="", found=True, changed=True, plan=None, t_plan=None):
            t_end = time.perf_counter()
            t_plan = t_plan or t_end
            kp_src, kp_tgt = src_kp if found else None, None if plan is None else plan.target_keypoints
            source_video, out_fps = clip, fps
            if not changed:  # "returned unchanged" means the input itself: its own size and frame rate, not the working copy
                video_out = source_video = raw
                out_fps = source_fps or fps
                kp_src, kp_tgt = at_source(kp_src), at_source(kp_tgt)
            out = AnyMotionOutput(instruction=instruction, seed=seed, fps=out_fps, source_video=source_video, config=config,
                                  reasoning=reasoning, message=message, person_found=found, changed=changed,
                                  category=getattr(plan, "category", ""), fine_class=getattr(plan, "fine_class", ""),
                                  confidence=float(getattr(plan, "confidence", 0.0)),
                                  seconds={"inputs": t_in - t0, "plan": t_plan - t_in, "render": t_end - t_plan, "total": t_end - t0},
                                  video=video_out, source_keypoints=kp_src, target_keypoints=kp_tgt,
                                  queries=None if plan is None or plan.queries is None else np.asarray(plan.queries, np.float32))
            return out.convert(output_type)

        if not (src_kp[..., 2] > 0).any():
            return finish(clip, "no person found in the clip: nothing to edit (the clip is returned unchanged)", found=False, changed=False)
        plan = None
        if self.config.skeleton:
            try:
                plan = self.planner.plan(clip, src_kp, instruction, generator=gen)
            except InputError as e:
                if e.name == "source_keypoints":  # a person too partial to read (no frame with shoulders and hips)
                    return finish(clip, f"no person found in the clip: {e}", found=False, changed=False)
                raise
            self._step += 1
            self.step_end(callback_on_step_end, 0, {"stage": "plan", "stage_step": 0, "num_steps": 1, "reasoning": plan.reasoning})
            if not plan.changes:
                return finish(clip, "the instruction asks for no change the planner can make: the clip is returned unchanged",
                              reasoning=plan.reasoning, changed=False, plan=plan, t_plan=time.perf_counter())
        t_plan = time.perf_counter()
        raw = None  # the render works at the output size: free the source-size frames (only unchanged returns use them)
        out = self._render(clip, instruction, plan, callback_on_step_end, gen, src_kp)
        what = f"planned {plan.fine_class.replace('_', ' ')} (p={plan.confidence:.2f}) and rendered it" if plan is not None else \
            "rendered from the instruction alone (no skeleton)"
        return finish(out, what, reasoning=plan.reasoning if plan is not None else "", plan=plan, t_plan=t_plan)

    def _render(self, clip: np.ndarray, instruction: str, plan: Any, callback: Callable | None, gen: torch.Generator,
                source_keypoints: np.ndarray | None = None) -> np.ndarray:
        c = self.config
        target = None if plan is None else plan.target_keypoints
        if self.backend == "builtin":
            from renderers.pose_guided import render_motion, uncover, windows

            rc = self.renderer.config
            steps = c.steps or rc.steps
            total = steps * len(windows(len(clip), rc.num_frames))
            queries = plan.queries if plan is not None and rc.query_dim and plan.queries is not None else None
            bar = self.progress_bar(total=total, desc="render")
            decode = self.renderer.decode_tokens
            h, w = clip.shape[1:3]

            def on_step(step: int, info: dict):  # returns the latents a callback hands back (or None)
                bar.update(1)
                self._step += 1
                if callback is not None and info.get("denoised") is not None:
                    info = {**info, "preview": _sheet(decode(info["denoised"][0], h, w))}
                return self.step_end(callback, self._step - 1, {"stage": "render", "stage_step": self._step - 2, "num_steps": total, **info}).get("latents")

            try:
                guidance = c.guidance_scale if c.guidance_scale is not None else "auto"
                video = render_motion(self.renderer, clip, target, instruction, queries, steps=steps, guidance=guidance, generator=gen,
                                      callback=on_step, cache=c.render_cache())
            finally:
                bar.close()
            if c.uncover and target is not None and source_keypoints is not None:
                video = uncover(video, clip, source_keypoints, target)
            return video
        return self._render_hf(clip, instruction, plan, callback, gen)

    def _render_hf(self, clip: np.ndarray, instruction: str, plan: Any, callback: Callable | None, gen: torch.Generator) -> np.ndarray:
        """Wan: the source clip and the rendered target skeleton as two in-context videos (spec b.5 (a)); the
        MetaQuery states join the text context when their width matches it."""
        from core.skeleton import render_limbs
        from renderers.guidance import GuidanceScales
        from renderers.hf_wan import PlanContexts

        c = self.config
        h, w = clip.shape[1:3]
        sources = [clip] + ([render_limbs(plan.target_keypoints, h, w)] if plan is not None else [])
        ctx = None
        if plan is not None and plan.queries is not None:
            q = torch.as_tensor(np.asarray(plan.queries), dtype=torch.float32)[None]
            if q.shape[-1] == self.renderer.transformer.config.text_dim:
                ctx = PlanContexts(q, q, torch.zeros_like(q))
        if c.tiling:
            self.renderer.enable_tiling()
        if c.cpu_offload:
            self.renderer.enable_model_cpu_offload()
        steps = c.steps or HF_STEPS
        cache = c.render_cache()
        cache = {"cache": cache} if cache is not None else {}  # passed only when on
        bar = self.progress_bar(total=steps, desc="render")

        def on_step(step: int, info: dict):  # returns the latents a callback hands back (or None)
            bar.update(1)
            self._step += 1
            return self.step_end(callback, self._step - 1, {"stage": "render", "stage_step": step, "num_steps": steps, **info}).get("latents")

        try:
            return np.asarray(self.renderer.generate(instruction, sources=sources, plan=ctx, height=h, width=w, num_frames=len(clip),
                                                     num_inference_steps=steps, guidance=GuidanceScales(video=1.5, image=0.0, text=4.0, plan=0.0),
                                                     flow_shift=HF_SHIFT, generator=gen, callback=on_step, **cache))
        finally:
            bar.close()


def _sheet(frames: np.ndarray) -> np.ndarray:
    from core.frames import resize_frames
    from core.overlay import contact_sheet

    pick = sorted({int(i) for i in np.linspace(0, len(frames) - 1, min(len(frames), 4)).round()})
    f = frames[pick]
    if f.shape[1] < 128:
        k = -(-128 // f.shape[1])
        f = resize_frames(f, (f.shape[1] * k, f.shape[2] * k), "nearest")
    return contact_sheet(f, columns=4, labels=[f"frame {i}" for i in pick])
