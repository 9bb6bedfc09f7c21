"""HUMOR's entry in the app registry: ``atelier meme``, its batch verb and its web tab."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from pipelines.registry import Input, PipelineApp, output_summary, saved_line

if TYPE_CHECKING:  # the pipeline module imports torch: never at the top of an app module
    from pipelines.humor.pipeline import HumorOutput

EXAMPLES = """\
examples:
  atelier meme template.png -o memes/                       # 4 memes, builtin writer + reward model
  atelier meme template.png --topic "mondays" -n 8 -o memes/
  atelier meme clip.mp4 -o memes/                           # a clip: its middle frame is the template
  atelier meme template.png --num-paths 1 -o single/        # the single-path ablation (0: caption only)
  atelier meme photo.jpg --writer /models/Qwen2.5-VL-7B-Instruct --reward-model /models/Qwen2.5-VL-7B-Instruct -o real/

Writes meme_1.png (the best) ... meme_N.png, gallery.png (all, ranked), image.png (the template),
result.json (per meme: its boxes, reward, rank, the intent, every reasoning path and which one was
anchored; the rejected samples) and config.json. The builtin models know Atelier's synthetic meme
scenes (coloured shapes chasing, hiding, falling ... at 64x64); they read the picture as a list of
objects, so on a photo they name what they think they see.
"""

NOTE = ("HUMOR writes each meme by reasoning first: what the template is used for, several reasoning paths under "
        "different contexts, then it anchors on one and writes the boxes. A pairwise reward model compares every two "
        "memes of the group and ranks them. The built-in models know Atelier's synthetic meme scenes (coloured shapes "
        "at 64x64); start the server with real checkpoints for photos.")


def run(pipe: Any, inputs: dict, generator: Any = None, callback: Any = None) -> HumorOutput:
    return pipe(inputs["image"], inputs.get("topic"), generator=generator, callback_on_step_end=callback)


def format_summary(s: dict) -> str:
    lines = [f"{s['message']} (seed {s['seed']}, {s['seconds']['total']:.1f} s)"]
    if s.get("intent"):
        lines.append(f"intent: {s['intent']}")
    for m in s["memes"]:
        anchored = f", from path {m['anchored_path']}" if m["anchored_path"] else ""
        lines.append(f"#{m['rank']} reward {m['reward']:.2f}{anchored}: " + " / ".join(m["boxes"]))
    if s.get("files"):
        lines.append(saved_line(s))
    return "\n".join(lines)


def reasoning_markdown(out: HumorOutput) -> str:
    """Per meme, best first: its boxes and reward, then its reasoning in a collapsed <details> block."""
    parts = [f"### {html.escape(out.message)}", f"seed {out.seed}, {out.seconds['total']:.1f} s"]
    if out.intent:
        parts.append(f"**intent (template level):** {html.escape(out.intent)}")
    for k, (boxes, reward, cot) in enumerate(zip(out.captions, out.rewards, out.cots)):
        head = f"**#{k + 1}** reward {reward:.2f}: " + " / ".join(f"*{html.escape(b)}*" for b in boxes)
        lines = []
        for i, p in enumerate(cot.get("paths", [])):
            mark = " **(anchored)**" if cot.get("anchor") == i else ""
            lines.append(f"- Path {i + 1} ({html.escape(p['context'])}){mark}: {html.escape(p['text'])}")
        if cot.get("step1"):
            lines.append(f"- Step 1: {html.escape(cot['step1'])}")
        if cot.get("step2"):
            lines.append(f"- Step 2: {html.escape(cot['step2'])}")
        body = "\n".join(lines) or "(caption only: no reasoning asked for)"
        parts.append(f"{head}\n\n<details><summary>reasoning</summary>\n\n{body}\n\n</details>")
    if out.rejected:
        parts.append(f"{len(out.rejected)} sample(s) rejected (unreadable or repeated).")
    return "\n\n".join(parts)


def present(out: HumorOutput, s: dict) -> tuple:
    # the caption is drawn over the thumbnail's corner, so only the rank: the rewards are in the reasoning below
    shown = [(m, f"#{k + 1}") for k, m in enumerate(out.memes)]
    return shown, reasoning_markdown(out), s


APP = PipelineApp(
    verb="meme",
    name="humor",
    pipeline="pipelines.humor.pipeline:HumorPipeline",
    config="pipelines.humor.config:HumorConfig",
    specs="pipelines.humor.config:COMPONENT_SPECS",
    help="write memes for a template image by multi-path reasoning, ranked by a pairwise reward model (HUMOR)",
    description="HUMOR: the writer reasons about the template (its intent, several reasoning paths under different "
                "contexts, the anchored one) and writes the text boxes; each meme is rendered on the image and a pairwise "
                "reward model ranks the group.",
    inputs=(Input("image", "the template: an image, or a video (its middle frame)", kind="image"),
            Input("topic", "what the meme should be about (optional), e.g. 'mondays'", flag="--topic", required=False)),
    run=run,
    summarize=output_summary,
    format=format_summary,
    components={"writer": "writer", "reward_model": "reward-model"},
    defaults={"writer": "builtin", "reward_model": "builtin"},
    examples=EXAMPLES,
    saved_files="meme_1.png ... meme_N.png, gallery.png, image.png, result.json, config.json",
    web_title="HUMOR: memes",
    web_note=NOTE,
    web_outputs=(("gallery", "memes, best first"), ("markdown", "reasoning"), ("json", "details")),
    web_present=present,
    nothing=lambda out: None if out.memes else out.message,
)
