"""Bernini's tasks: which inputs each takes, how one is told from the inputs, and its default settings.

| task | inputs | the renderer's sources (conversation order) |
|---|---|---|
| t2v  | prompt | none |
| t2i  | prompt | none; one frame |
| i2v  | prompt + image | the image |
| v2v  | instruction + video | the video |
| r2v  | prompt + 1-5 reference images | the references |
| rv2v | instruction + video + 1-5 references | the video, then the references |
| i2i  | instruction + image | the image; one frame out |
| mv2v | instruction + video (motion / style edit) | the video |
| ads2v | instruction + video + the ad image(s) | the video, then the images |

Defaults of the hf backend are the official per-release tables of bytedance/Bernini ``gradio_demo.py``
(commit 7ef670d): ``BASE_TASK_DEFAULTS`` updated by ``RENDERER_TASK_DEFAULTS`` (Bernini-R, release "r"),
``BERNINI_V1_TASK_DEFAULTS`` (Bernini-Diffusers, "v1") or ``BERNINI_V2_TASK_DEFAULTS``
(Bernini-Diffusers-v2, "v2"), each with its guidance mode. ``i2v`` is ours (no official row): it takes
the base table with Bernini-R's ``v2v_apg`` / full Bernini's ``vae_txt_vit_wapg`` [PROPOSED].
The builtin backend's defaults are its models' own configs (what they were measured with).

Flow shift: the tables pass 5.0. Bernini-R samples with UniPC built from its config's ``shift`` 3.0, so
the demo's 5.0 is dead on the default UniPC path (neuregex/ComfyUI-BerniniR constants.py + sampler.py
``build_scheduler(shift=C.SHIFT)`` + README "the CLI's flow_shift=5.0 is dead code"; xocialize
PORTING-SPEC "Flow shift 3.0", bit-exact sampler gates): release "r" defaults to 3.0; 5.0 stays a
setting (``flow_shift``). Full Bernini passes 5.0 into its sampler (T8mars, xocialize): "v1"/"v2" use 5.0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from core.errors import InputError
from pipelines.bernini.config import RELEASES, TASKS  # declared with the config: its choices, without torch
from renderers.guidance import GuidanceScales

MAX_REFERENCES = 5

_TAKES = {"t2v": (False, False, False), "t2i": (False, False, False), "i2v": (False, True, False),
          "i2i": (False, True, False), "v2v": (True, False, False), "mv2v": (True, False, False),
          "r2v": (False, False, True), "rv2v": (True, False, True), "ads2v": (True, False, True)}


def infer_task(task: str, has_video: bool, has_image: bool, n_refs: int) -> str:
    """``task`` checked against the inputs; ``auto`` picks the one the inputs describe."""
    if task == "auto":
        if has_image and has_video:
            raise InputError("image", "given with a video", "pass a video (v2v / rv2v) or a first-frame image (i2v), not both")
        return ("rv2v" if n_refs else "v2v") if has_video else "i2v" if has_image else "r2v" if n_refs else "t2v"
    if task not in _TAKES:
        raise InputError("task", task, f"choose one of {['auto', *TASKS]}")
    video, image, refs = _TAKES[task]
    for name, given, wanted in (("video", has_video, video), ("image", has_image, image), ("references", n_refs > 0, refs)):
        if given and not wanted:
            raise InputError(name, "given", f"task {task} takes no {name}; drop it or choose a task that does ({_users(name)})")
        if wanted and not given:
            raise InputError(name, None, f"task {task} needs {'1-5 reference images' if name == 'references' else 'a ' + name}")
    return task


def _users(name: str) -> str:
    index = {"video": 0, "image": 1, "references": 2}[name]
    return ", ".join(t for t, takes in _TAKES.items() if takes[index])


# Wan's Chinese negative prompt (bernini.cli DEFAULT_NEG_PROMPT, the gradio default) and the English one
# the v2 table and scripts/bernini/run_v2v.sh use (gradio_demo.py BERNINI_SCRIPT_NEG_PROMPT).
DEFAULT_NEG_PROMPT = (
    "\u8272\u8c03\u8273\u4e3d\uff0c\u8fc7\u66dd\uff0c\u9759\u6001\uff0c\u7ec6\u8282\u6a21\u7cca\u4e0d\u6e05\uff0c"
    "\u5b57\u5e55\uff0c\u98ce\u683c\uff0c\u4f5c\u54c1\uff0c\u753b\u4f5c\uff0c\u753b\u9762\uff0c\u9759\u6b62\uff0c"
    "\u6574\u4f53\u53d1\u7070\uff0c\u6700\u5dee\u8d28\u91cf\uff0c\u4f4e\u8d28\u91cf\uff0cJPEG\u538b\u7f29\u6b8b\u7559\uff0c"
    "\u4e11\u964b\u7684\uff0c\u6b8b\u7f3a\u7684\uff0c\u591a\u4f59\u7684\u624b\u6307\uff0c\u753b\u5f97\u4e0d\u597d\u7684\u624b\u90e8\uff0c"
    "\u753b\u5f97\u4e0d\u597d\u7684\u8138\u90e8\uff0c\u7578\u5f62\u7684\uff0c\u6bc1\u5bb9\u7684\uff0c\u5f62\u6001\u7578\u5f62\u7684\u80a2\u4f53\uff0c"
    "\u624b\u6307\u878d\u5408\uff0c\u9759\u6b62\u4e0d\u52a8\u7684\u753b\u9762\uff0c\u6742\u4e71\u7684\u80cc\u666f\uff0c\u4e09\u6761\u817f\uff0c"
    "\u80cc\u666f\u4eba\u5f88\u591a\uff0c\u5012\u7740\u8d70"
)
SCRIPT_NEG_PROMPT = (
    "vivid tones, overexposed, static, blurry details, subtitles, style, artwork, painting, image, "
    "motionless, overall grayish, worst quality, low quality, JPEG compression artifacts, ugly, incomplete, "
    "extra fingers, poorly drawn hands, poorly drawn face, deformed, disfigured, malformed limbs, fused fingers, "
    "still frame, cluttered background, three legs, too many people in the background, walking backwards"
)

# The task system prompts prefixed to the UMT5 prompt (bernini.prompt_enhancer.SYSTEM_PROMPTS as the ports
# carry it, get_system_prompt_for_task; unknown tasks get "default").
RENDERER_SYSTEM_PROMPTS: dict[str, str] = {
    "default": "You are a helpful assistant.",
    "t2i": "You are a helpful assistant specialized in text-to-image generation.",
    "t2v": "You are a helpful assistant specialized in text-to-video generation.",
    "i2i": "You are a helpful assistant specialized in image editing.",
    "i2v": "You are a helpful assistant specialized in image-to-video generation.",
    "v2v": "You are a helpful assistant specialized in video editing.",
    "r2v": "You are a helpful assistant specialized in subject-to-video generation.",
    "rv2v": "You are a helpful assistant specialized in video editing with reference.",
    "ads2v": "You are a helpful assistant specialized in ads insertion.",
    "mv2v": "You are a helpful assistant for editing. You might need to adjust the video's style, lighting, colors, "
            "textures, and the subject's pose or action.",
}


def system_prompt_for_task(task: str) -> str:
    return RENDERER_SYSTEM_PROMPTS.get(task, RENDERER_SYSTEM_PROMPTS["default"])


@dataclass(frozen=True)
class TaskDefaults:
    """What a task runs with when a setting is left at None (one row of an official table).

    ``mode``: the renderer's guidance mode (``renderers.guidance.GUIDANCE_MODES``). ``height`` / ``width``
    0: the output takes the size of the task's source (``fit_media_size`` of it). ``max_image_size``: the
    long-side cap of every source. ``negative_prompt``: the text of the unconditional branches.
    ``eta`` / ``momentum``: Bernini-R's APG (norm cap 50). ``txt_cfg`` / ``img_cfg``: the planner's CFG.
    """

    guidance: GuidanceScales = field(default_factory=lambda: GuidanceScales(video=1.25, image=4.5, text=4.0, plan=0.5,
                                                                              omega_scale=0.8))
    mode: str = "vae_txt_vit_wapg"
    steps: int = 40
    num_frames: int = 81
    height: int = 480
    width: int = 848
    max_image_size: int = 848
    fps: int = 16
    flow_shift: float = 5.0
    planning_steps: int = 25
    denoising_steps: int = 5
    txt_cfg: float | None = 1.2
    img_cfg: float | None = 1.0
    eta: float = 0.5
    momentum: float = 0.0
    negative_prompt: str = DEFAULT_NEG_PROMPT


def mode_projects(mode: str) -> bool:
    """Whether an official guidance mode projects its deltas with APG (every one but the plain chains)."""
    return mode not in ("rv2v", "v2v", "cascade")


_BASE = TaskDefaults()  # BASE_TASK_DEFAULTS


def _row(mode: str, *, vid: float, img: float, txt: float, tgt: float, scale: float, **kw) -> TaskDefaults:
    return replace(_BASE, mode=mode, guidance=GuidanceScales(video=vid, image=img, text=txt, plan=tgt, omega_scale=scale), **kw)


def _base_scales(mode: str, **kw) -> TaskDefaults:
    g = _BASE.guidance
    return _row(mode, vid=g.video, img=g.image, txt=g.text, tgt=g.plan, scale=g.omega_scale, **kw)


# Bernini-R (RENDERER_TASK_DEFAULTS): the base scales, one mode per task; flow shift 3.0 (see above).
_R = {"t2i": _base_scales("t2v_apg", num_frames=1, flow_shift=3.0), "i2i": _base_scales("v2v", num_frames=1, flow_shift=3.0),
      "t2v": _base_scales("t2v_apg", flow_shift=3.0), "v2v": _base_scales("v2v_apg", flow_shift=3.0),
      "mv2v": _base_scales("v2v_apg", flow_shift=3.0), "r2v": _base_scales("r2v_apg", flow_shift=3.0),
      "rv2v": _base_scales("rv2v", flow_shift=3.0), "ads2v": _base_scales("v2v_apg", flow_shift=3.0),
      "i2v": _base_scales("v2v_apg", flow_shift=3.0)}

_W = "vae_txt_vit_wapg"
_V1 = {
    "t2i": _row(_W, vid=1.0, img=1.0, txt=4.0, tgt=0.5, scale=1.0, num_frames=1, max_image_size=842, height=512, width=512, steps=50),
    "i2i": _row(_W, vid=1.25, img=1.25, txt=4.0, tgt=0.5, scale=0.75, num_frames=1, max_image_size=842, height=512, width=512),
    "t2v": _row(_W, vid=1.0, img=1.0, txt=4.0, tgt=0.5, scale=1.0, max_image_size=842, steps=50),
    "v2v": _row(_W, vid=1.25, img=1.25, txt=4.0, tgt=0.5, scale=0.75),
    "mv2v": _row(_W, vid=1.25, img=1.25, txt=4.0, tgt=0.5, scale=0.75),
    "rv2v": _row("rv2v", vid=0.75, img=3.0, txt=4.0, tgt=1.5, scale=0.75, max_image_size=842),
    "r2v": _row("rv2v", vid=1.25, img=2.5, txt=4.0, tgt=1.5, scale=0.8, max_image_size=842),
    "ads2v": _row(_W, vid=1.25, img=1.25, txt=4.0, tgt=0.5, scale=0.75),
    "i2v": _base_scales(_W),
}
_V2_STEPS = {"planning_steps": 50, "denoising_steps": 1}
_V2 = {
    "t2i": _row(_W, vid=1.0, img=1.0, txt=4.0, tgt=0.5, scale=1.0, num_frames=1, max_image_size=842, height=512, width=512, steps=50),
    "i2i": _row(_W, vid=1.25, img=1.25, txt=4.0, tgt=0.5, scale=0.75, num_frames=1, max_image_size=842, height=512, width=512),
    "t2v": _row(_W, vid=1.0, img=1.0, txt=5.0, tgt=1.2, scale=1.0, max_image_size=842, steps=50, **_V2_STEPS),
    "v2v": _row(_W, vid=1.25, img=1.25, txt=4.0, tgt=1.2, scale=0.75, height=0, width=0, negative_prompt=SCRIPT_NEG_PROMPT, **_V2_STEPS),
    "mv2v": _row(_W, vid=1.25, img=1.25, txt=4.0, tgt=1.2, scale=0.75, height=0, width=0, negative_prompt=SCRIPT_NEG_PROMPT, **_V2_STEPS),
    # rv2v_wapg in the table: the released code runs the plain chain (renderers.guidance.ModeGuidance)
    "rv2v": _row("rv2v", vid=1.75, img=4.0, txt=5.5, tgt=1.5, scale=0.75, height=0, width=0, **_V2_STEPS),
    "r2v": _row(_W, vid=1.0, img=3.0, txt=4.5, tgt=1.5, scale=0.75, max_image_size=842, negative_prompt=SCRIPT_NEG_PROMPT, **_V2_STEPS),
    "ads2v": _row(_W, vid=1.25, img=1.25, txt=4.0, tgt=1.2, scale=0.75, height=0, width=0, **_V2_STEPS),
    "i2v": _base_scales(_W, **_V2_STEPS),
}
TABLES: dict[str, dict[str, TaskDefaults]] = {"r": _R, "v1": _V1, "v2": _V2}


def task_defaults(task: str, release: str) -> TaskDefaults:
    """The official row for ``task`` in ``release`` ("r", "v1", "v2")."""
    if release not in TABLES:
        raise InputError("release", release, f"use one of {sorted(TABLES)} (the hf backend's official tables)")
    if task not in TABLES[release]:
        raise InputError("task", task, f"choose one of {list(TABLES[release])}")
    return TABLES[release][task]


def fit_media_size(height: int, width: int, max_size: int = 848, min_size: int = 240, stride: int = 16,
                   max_pixels: int = 2048 * 2048) -> tuple[int, int]:
    """(height, width) a source is resized to, keeping its aspect (bytedance/Bernini tools/vae_transform.py
    ``MaxLongEdgeMinShortEdgeResize``): scale so the long side is at most ``max_size`` but the short side at
    least ``min_size``, snap each side to the nearest multiple of ``stride``; then, if over ``max_pixels``
    or the long side still exceeds ``max_size``, rescale and snap again."""
    for name, v in (("height", height), ("width", width), ("max_size", max_size), ("min_size", min_size), ("stride", stride)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise InputError(name, v, "use a positive integer")

    def snap(v: float) -> int:
        return max(stride, int(round(v / stride) * stride))

    def scaled(w: int, h: int, f: float) -> tuple[int, int]:
        return snap(round(w * f)), snap(round(h * f))

    f = max(min(max_size / max(width, height), 1.0), min_size / min(width, height))
    w, h = scaled(width, height, f)
    if w * h > max_pixels:
        w, h = scaled(w, h, max_pixels / (w * h))
    if max(w, h) > max_size:
        w, h = scaled(w, h, max_size / max(w, h))
    return h, w


def source_frame_indices(total: int, source_fps: float, num_frames: int, fps: float = 16.0) -> list[int]:
    """Which source frames feed a renderer source of ``num_frames`` frames: the clip resampled to the output
    ``fps`` (consecutive frames when the rates agree), from its start, with 4k+1 frames (bytedance/Bernini
    tools/video_utils.py ``smart_video_nframes(fps=16, frame_factor=4, add_one=True, max_frames=num_frames)``).
    A clip shorter than ``num_frames`` gives fewer; the caller holds its last frame [DEFAULT: the official
    pipeline then renders a shorter target; ours keeps the asked length]."""
    if not isinstance(total, int) or total < 1:
        raise InputError("video", total, "the clip has no frames")
    if not (isinstance(source_fps, (int, float)) and source_fps > 0):
        raise InputError("fps", source_fps, "use a positive frame rate")
    n = math.floor(total / source_fps * fps / 4) * 4 + 1
    n = max(n, 5)
    span = total
    if source_fps == fps:
        span = math.floor(total / 4) * 4 + 1
    idx = [int(round(float(v))) for v in np.linspace(0, span - 1, n)]
    idx = [min(i, total - 1) for i in idx]
    cap = math.floor(num_frames / 4) * 4 + 1
    return idx[:min(n, cap)]
