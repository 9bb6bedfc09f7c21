"""Bernini's tasks: which inputs each takes, how one is told from the inputs, and its default settings.

| task | inputs | the renderer's sources (conversation order) |
|---|---|---|
| t2v  | prompt | none |
| t2i  | prompt | none; one frame |
| i2v  | prompt + image | the image |
| v2v  | instruction + video | the video |
| r2v  | prompt + 1-5 reference images | the references |
| rv2v | instruction + video + 1-5 references | the video, then the references |

Defaults of the hf backend are the official demo's tables (spec b.8 [C]): the base table (40 UniPC
steps, 81 frames at 480x832, flow shift 5, omega image 4.5 / text 4 / plan 0.5, omega_scale 0.8,
planning 25 steps with 5 ViT denoising steps), with the rows it publishes per task: t2v text 5 and
plan 1.2 (v2 table); v2v video 1.25, image 1.25, text 4, plan 0.5, omega_scale 0.75, planner text CFG
1.2 and image CFG 1.0 (the v2v example); rv2v with APG, video 1.75, image 4.0, text 5.5, plan 1.5 (v2
table). The builtin backend's defaults are its models' own configs (what they were measured with).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from core.errors import InputError
from renderers.guidance import GuidanceScales

TASKS = ("t2v", "t2i", "i2v", "v2v", "r2v", "rv2v")
MAX_REFERENCES = 5

_TAKES = {"t2v": (False, False, False), "t2i": (False, False, False), "i2v": (False, True, False),
          "v2v": (True, False, False), "r2v": (False, False, True), "rv2v": (True, False, True)}


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


@dataclass(frozen=True)
class TaskDefaults:
    """What a task runs with when a setting is left at None (the hf backend's table)."""

    guidance: GuidanceScales = field(default_factory=GuidanceScales)
    apg: bool = False
    steps: int = 40
    num_frames: int = 81
    height: int = 480
    width: int = 832
    flow_shift: float = 5.0
    planning_steps: int = 25
    denoising_steps: int = 5
    txt_cfg: float | None = None  # None: the planner's own config
    img_cfg: float | None = None


_BASE = TaskDefaults()
HF_DEFAULTS: dict[str, TaskDefaults] = {
    "t2v": replace(_BASE, guidance=replace(_BASE.guidance, text=5.0, plan=1.2)),
    "t2i": replace(_BASE, num_frames=1),
    "i2v": _BASE,
    "v2v": replace(_BASE, guidance=GuidanceScales(video=1.25, image=1.25, text=4.0, plan=0.5, omega_scale=0.75),
                   txt_cfg=1.2, img_cfg=1.0),
    "r2v": _BASE,
    "rv2v": replace(_BASE, guidance=GuidanceScales(video=1.75, image=4.0, text=5.5, plan=1.5), apg=True),
}
