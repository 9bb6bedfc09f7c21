"""CLEAR's entry in the app registry: ``atelier segment``, the batch verb ``segment`` and the web tab."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.registry import Input, PipelineApp, output_summary, saved_line

if TYPE_CHECKING:  # the pipeline module imports torch: never at the top of an app module
    from pipelines.clear.pipeline import ClearOutput

EXAMPLES = """\
examples:
  atelier segment clip.mp4 "the red circle that disappears first" -o seg/
  atelier segment clip.mp4 "the dog that jumps last" --vlm /models/Qwen2.5-VL-7B-Instruct --tracker /models/sam2.1-hiera-tiny \\
      --proposer /models/sam2.1-hiera-tiny -o seg/
  atelier segment clip.mp4 "the fastest star" --no-monitor --json      # prompt-then-track, for comparison

Writes masks/ (DAVIS palette PNGs, 1 = the target) and masks.rle.json (COCO RLE), overlay.mp4,
marks.png (the anchor frame with numbered candidates), timeline.png (fast/slow mode and events)
and result.json (the choice, its reasoning, every event). A query that matches nothing gives empty
masks and "no object matches", not an error.
"""

NOTE = ("Say which object to segment; CLEAR proposes candidates, tracks them, lets the planner choose one and checks "
        "the choice counterfactually (keep only it, remove it), then follows it with a fast tracker watched by an "
        "event monitor that re-anchors on identity switches. The built-in planner knows Atelier's synthetic world "
        "(coloured shapes that appear, vanish, collide, hide); start the server with `atelier serve --vlm PATH` for a real VLM.")


def run(pipe: Any, inputs: dict, generator: Any = None, callback: Any = None) -> ClearOutput:
    return pipe(inputs["video"], inputs["query"], generator=generator, callback_on_step_end=callback)


def present(out: ClearOutput, s: dict) -> tuple:
    head = "### no object matches" if s["no_match"] else f"### candidate #{s['target_id']}" + (" (ambiguous)" if s["ambiguous"] else "")
    text = head + "\n\n" + "\n".join(f"- {line}" for line in out.selection.get("reasoning", []))
    return text, _overlay_file(out), out.marks, out.timeline(), s


def _overlay_file(out: ClearOutput) -> str | None:
    """The overlay as an H.264 mp4 in a temporary folder (a web video player plays files)."""
    import tempfile
    from pathlib import Path

    from core.video import write_video

    if out.overlay is None:
        return None
    return str(write_video(Path(tempfile.mkdtemp(prefix="atelier-clear-")) / "overlay.mp4", out.overlay, fps=12))


def format_summary(s: dict) -> str:
    if s["no_match"]:
        return f"no object matches: {s['query']!r}"
    flag = " (ambiguous)" if s["ambiguous"] else ""
    lines = [f"target: candidate #{s['target_id']}{flag}, chosen on frame {s['anchor_frame']}",
             f"on screen in {s['target_frames']} of {s['frames']} frames; {s['events']} events, {s['slow_frames']} slow re-anchorings, "
             f"{s['planner_calls']} planner calls; {s['seconds']['total']:.2f} s"]
    if s.get("files"):
        lines.append(saved_line(s))
    return "\n".join(lines)


APP = PipelineApp(
    verb="segment",
    name="clear",
    pipeline="pipelines.clear.pipeline:ClearPipeline",
    config="pipelines.clear.config:ClearConfig",
    specs="pipelines.clear.config:COMPONENT_SPECS",
    help="segment the object a query describes, through the whole video (CLEAR)",
    description="CLEAR: propose candidate objects, track them, choose the one the query means (checked by keeping only "
                "it and by removing it), follow it with a fast tracker and re-anchor when an event monitor sees an "
                "identity switch, a disappearance or a scene cut.",
    inputs=(Input("video", "video file, folder of frames, or image", kind="video"),
            Input("query", "what to segment, e.g. 'the red circle that disappears first'")),
    run=run,
    summarize=output_summary,
    format=format_summary,
    components={"planner": "vlm", "tracker": "tracker", "proposer": "proposer"},
    defaults={"planner": "builtin", "tracker": "classic", "proposer": "classic"},
    examples=EXAMPLES,
    saved_files="masks/, masks.rle.json, overlay.mp4, marks.png, timeline.png, result.json",
    web_title="CLEAR segmentation",
    web_note=NOTE,
    web_outputs=(("markdown", "choice and reasoning"), ("video", "overlay"), ("image", "anchor frame with numbered candidates"),
                 ("image", "event timeline"), ("json", "details")),
    web_present=present,
)
