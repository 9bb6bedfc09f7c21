"""Bernini's entries in the app registry: ``atelier generate`` and ``atelier edit`` (one pipeline, two verbs:
what a user gives differs, the settings are the same), their batch verbs and their web tabs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.registry import Input, PipelineApp, output_summary, saved_line

if TYPE_CHECKING:  # the pipeline module imports torch: never at the top of an app module
    from pipelines.bernini.pipeline import BerniniOutput

GENERATE_EXAMPLES = """\
examples:
  atelier generate "a red star bouncing to the left" -o gen/                 # t2v on the builtin models
  atelier generate "a red star bouncing to the left" -o star.mp4             # the clip as star.mp4, the rest in star/
  atelier generate "a small green circle" --task t2i -o img/                 # one frame
  atelier generate "the ball rolls to the right" --ref ball.png -o r2v/     # 1-5 reference images
  atelier generate "a cat walks across a sofa" --renderer /models/Bernini-R-Diffusers --no-plan \\
      --num-frames 33 --height 480 --width 832 --cpu-offload -o wan/        # a real Wan renderer, text only

Writes video.mp4 (a clip under 256 pixels written enlarged by a whole factor: 64x64 as 256x256, so a player
shows it and H.264 keeps a small object's colour), plan.png (the planned ViT tokens as colours above the frames they describe),
frames.png (a strip of output frames), plan_tokens.npy, result.json (the task, seed, chain of
thought, timings) and config.json (every setting as resolved). --seed makes a run repeatable.
"""

EDIT_EXAMPLES = """\
examples:
  atelier edit clip.mp4 "make the blue square green" -o edit/               # v2v on the builtin models
  atelier edit clip.mp4 "replace the circle with this" --ref star.png -o rv2v/
  atelier edit clip.mp4 "make it snow" --renderer /models/Bernini-R-Diffusers --no-plan --tiling -o wan/

The clip is sampled to the output length (--num-frames) and resized to its size (builtin: 16 frames
at 64x64). Writes the same files as `atelier generate`, and source_and_result.png (the source's frames above
the result's, at the same frame numbers).
"""

NOTE = ("Bernini plans the clip in ViT space first (a grid of image-feature tokens per plan frame, shown as colours), "
        "then renders it with a diffusion transformer. The built-in models know Atelier's synthetic world: flat "
        "coloured shapes that move (\"a red star bouncing to the left\"), at 16 frames of 64x64; their planner is still "
        "weak, so expect rough, speckled clips (docs/bernini.md, measured). Start the server with real checkpoints for "
        "anything else.")


def run_generate(pipe: Any, inputs: dict, generator: Any = None, callback: Any = None) -> BerniniOutput:
    return pipe(inputs["prompt"], image=inputs.get("image") or None, references=list(inputs.get("references") or []),
                generator=generator, callback_on_step_end=callback)


def run_edit(pipe: Any, inputs: dict, generator: Any = None, callback: Any = None) -> BerniniOutput:
    return pipe(inputs["instruction"], video=inputs["video"], references=list(inputs.get("references") or []),
                generator=generator, callback_on_step_end=callback)


def format_summary(s: dict) -> str:
    plan = f"plan {tuple(s['plan_grid'])}" if s["planned"] else "no plan (text only)"
    lines = [f"{s['task']}: {s['frames']} frames at {s['size'][0]}x{s['size'][1]}, {plan}, seed {s['seed']}, {s['seconds']['total']:.1f} s"]
    if s.get("cot"):
        lines.append(f"chain of thought: {s['cot']}")
    if s.get("files"):
        lines.append(saved_line(s))
    return "\n".join(lines)


def present(out: BerniniOutput, s: dict) -> tuple:
    import tempfile
    from pathlib import Path

    from core.frames import resize_frames
    from core.video import write_video

    video = out.video if out.video.shape[1] >= 256 else resize_frames(out.video, (256, 256 * out.video.shape[2] // out.video.shape[1]), "nearest")
    path = str(write_video(Path(tempfile.mkdtemp(prefix="atelier-bernini-")) / "video.mp4", video, fps=out.fps))
    text = f"### {s['task']}, seed {s['seed']}\n\n" + format_summary(s).split("\n", 1)[0]
    if s.get("cot"):
        text += f"\n\n**chain of thought:** {s['cot']}"
    pictures = out.pictures()  # an edit shows its source above the result; a generation its frames
    sheet = pictures["source_and_result"] if pictures["source_and_result"] is not None else pictures["frames"]
    return text, path, out.plan_picture(), sheet, s


def preview(info: dict):
    """The renderer's current clean-clip estimate (builtin: every step; the pipeline puts it in ``info``)."""
    return info.get("preview")


COMMON = dict(
    pipeline="pipelines.bernini.pipeline:BerniniPipeline",
    config="pipelines.bernini.config:BerniniConfig",
    specs="pipelines.bernini.config:COMPONENT_SPECS",
    summarize=output_summary,
    format=format_summary,
    components={"planner": "planner", "renderer": "renderer", "encoder": "encoder"},
    defaults={"planner": "builtin", "renderer": "builtin", "encoder": "builtin"},
    saved_files="video.mp4, plan.png, frames.png, source_and_result.png (edits), plan_tokens.npy, result.json, config.json",
    web_note=NOTE,
    web_outputs=(("markdown", "result"), ("video", "video"), ("image", "plan (ViT tokens as colours) above the frames it describes"),
                 ("image", "frames (an edit: its source above the result)"), ("json", "details")),
    web_present=present,
    web_preview=preview,
    video_output="video",
)

GENERATE = PipelineApp(
    verb="generate",
    name="bernini",
    help="generate a video (or an image) from a prompt, optionally from a first frame or reference images (Bernini)",
    description="Bernini: a planner writes the clip as a grid of ViT tokens (layout and motion), a diffusion "
                "transformer renders it. Tasks: t2v, t2i (--task t2i), i2v (--image), r2v (--ref, 1-5 images).",
    inputs=(Input("prompt", "what to show, e.g. 'a red star bouncing to the left'"),
            Input("image", "i2v: the first frame", kind="image", flag="--image", required=False),
            Input("references", "r2v: 1-5 reference images of what should appear", kind="images", flag="--ref", required=False)),
    run=run_generate,
    examples=GENERATE_EXAMPLES,
    web_title="Bernini: generate",
    **COMMON,
)

EDIT = PipelineApp(
    verb="edit",
    name="bernini",
    help="edit a video by instruction, optionally guided by reference images (Bernini v2v / rv2v)",
    description="Bernini: the planner reads the source clip and the instruction and writes the edited clip as ViT "
                "tokens; the renderer draws it with the source in context, so what the instruction leaves alone stays.",
    inputs=(Input("video", "the clip to edit: a video file, a folder of frames or an image", kind="video"),
            Input("instruction", "what to change, e.g. 'make the blue square green'"),
            Input("references", "rv2v: 1-5 reference images the edit should use", kind="images", flag="--ref", required=False)),
    run=run_edit,
    examples=EDIT_EXAMPLES,
    web_title="Bernini: edit",
    **COMMON,
)
