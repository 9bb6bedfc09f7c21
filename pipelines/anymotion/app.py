"""AnyMotion's entry in the app registry: ``atelier motion``, its batch verb and its web tab."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.registry import Input, PipelineApp, output_summary, saved_line

if TYPE_CHECKING:  # the pipeline module imports torch: never at the top of an app module
    from pipelines.anymotion.pipeline import AnyMotionOutput

EXAMPLES = """\
examples:
  atelier motion clip.mp4 "make the person raise the left arm" -o edit/           # builtin planner + renderer
  atelier motion clip.mp4 "have them do a jumping jack" -o jj.mp4 --keypoints-out jj.coco.json
  atelier motion clip.mp4 "make the person squat" --no-skeleton -o direct/        # the ablation: no skeleton plan
  atelier motion dance.mp4 "raise both arms" --pose-reader mediapipe --planner /models/Qwen2.5-VL-7B-Instruct \\
      --renderer /models/Wan2.1-T2V-1.3B-Diffusers --cpu-offload -o real/       # real checkpoints

Writes video.mp4, side_by_side.png (per frame: the source with its skeleton | the planned skeleton |
the output), source_keypoints.coco.json and target_keypoints.coco.json (COCO-17 keypoints per frame),
result.json (the reasoning, what happened, timings, the seed) and config.json. The builtin models
know Atelier's synthetic stick figures at 64x64; an instruction that asks for nothing comes back unchanged
with a message saying so; a clip where the pose reader finds no person fails (exit 1) and says what it looked for.
"""

NOTE = ("AnyMotion reasons about the edit (who moves, which body parts, how, what stays fixed), plans the target "
        "skeleton frame by frame, then renders it with the source clip in context so the person and the background "
        "stay. The built-in models know Atelier's synthetic world: one stick figure at 64x64 and 33 actions "
        "(raise an arm, squat, walk, wave, ...), in free wording. Start the server with real checkpoints for real people.")


def run(pipe: Any, inputs: dict, generator: Any = None, callback: Any = None) -> AnyMotionOutput:
    return pipe(inputs["video"], inputs["instruction"], generator=generator, callback_on_step_end=callback)


def format_summary(s: dict) -> str:
    lines = [f"{s['message']} ({s['frames']} frames at {s['size'][0]}x{s['size'][1]}, seed {s['seed']}, {s['seconds']['total']:.1f} s)"]
    if s.get("reasoning"):
        lines.append(f"reasoning: {s['reasoning']}")
    if s.get("files"):
        lines.append(saved_line(s))
    return "\n".join(lines)


def present(out: AnyMotionOutput, s: dict) -> tuple:
    import tempfile
    from pathlib import Path

    from core.frames import resize_frames
    from core.video import write_video
    from pipelines.anymotion.viz import side_by_side_frame

    video = out.video if out.video.shape[1] >= 256 else resize_frames(out.video, (256, 256 * out.video.shape[2] // out.video.shape[1]), "nearest")
    path = str(write_video(Path(tempfile.mkdtemp(prefix="atelier-anymotion-")) / "video.mp4", video, fps=out.fps))
    text = f"### {s['message']}\n\nseed {s['seed']}, {s['frames']} frames, {s['seconds']['total']:.1f} s"
    if s.get("reasoning"):
        text += f"\n\n**reasoning:** {s['reasoning']}"
    source = out.source_video if out.source_video is not None else out.video
    frames = [side_by_side_frame(source, out.video, out.source_keypoints, out.target_keypoints, t) for t in range(len(out.video))]
    return text, path, frames, s


def preview(info: dict):
    return info.get("preview")


APP = PipelineApp(
    verb="motion",
    name="anymotion",
    pipeline="pipelines.anymotion.pipeline:AnyMotionPipeline",
    config="pipelines.anymotion.config:AnyMotionConfig",
    specs="pipelines.anymotion.config:COMPONENT_SPECS",
    help="edit a person's motion in a clip by instruction: reason, plan the target skeleton, render it (AnyMotion)",
    description="AnyMotion: a skeleton chain-of-thought planner reads the source skeleton and the instruction, writes its "
                "reasoning and the target skeleton per frame; a pose-guided diffusion transformer renders it with the source "
                "clip in context, keeping the person and the background.",
    inputs=(Input("video", "the clip with the person: a video file, a folder of frames or an image", kind="video"),
            Input("instruction", "the motion to make, e.g. 'make the person raise the left arm'")),
    run=run,
    summarize=output_summary,
    format=format_summary,
    components={"planner": "planner", "renderer": "renderer"},
    defaults={"planner": "builtin", "renderer": "builtin"},
    examples=EXAMPLES,
    saved_files="video.mp4, side_by_side.png, source_keypoints.coco.json, target_keypoints.coco.json, result.json, config.json",
    web_title="AnyMotion: edit motion",
    web_note=NOTE,
    web_outputs=(("markdown", "result"), ("video", "edited clip"),
                 ("frames", "per frame: source + skeleton | planned skeleton | output"), ("json", "details")),
    web_present=present,
    web_preview=preview,
    video_output="video",
    # no person: nothing was edited, so the run failed (exit 1); the message says what the reader looks for
    nothing=lambda out: None if out.person_found else (
        f"{out.message.split(':')[0]}: the {out.config.get('pose_reader', 'classic')} pose reader found no person in any frame "
        "(the classic one looks for one stick figure of a single flat colour, as Atelier's world draws them; for real people "
        "pass --pose-reader mediapipe)"),
    file_outputs=(("--keypoints-out", "target_keypoints.coco.json", "also write the planned target skeleton (COCO keypoint JSON) to this file"),),
)
