"""Latent reasoning's entry in the app registry: ``atelier reason``, its batch verb and its web tab."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.errors import InputError
from pipelines.registry import Input, PipelineApp, output_summary, saved_line

if TYPE_CHECKING:  # the pipeline module imports torch: never at the top of an app module
    from pipelines.latent_reasoning.pipeline import LatentReasoningOutput

EXAMPLES = """\
examples:
  atelier reason scene.png -q "What colour is the small star right of the large triangle?" --options red blue green white -o out/
  atelier reason scene.png -q "..." --options red blue green white --num-slots 8 --json -o out/
  atelier reason scene.png -q "..." --options red blue green white --num-slots 0 -o direct/   # no slots: answer directly
  atelier reason photo.jpg -q "What colour is the car left of the tree?" --options A B C D --reasoner /models/Qwen2.5-VL-7B-Instruct -o real/

Put IMAGE before --options (which takes every word after it). The answer is the option with the highest
posterior after K latent slots. Writes slots.png (the image, each slot's map over it, and the zoom on the region
the slots found), zoom.png, slots.npy (K x d slot vectors), attention.npy (K x grid x grid maps), result.json and
config.json. The builtin reasoner knows Atelier's `spatial` scenes (512x512, dozens of small shapes) and answers
colour questions about them; a real VLM checkpoint answers about photos, with slots only after latent-slot training.
"""

NOTE = ("The reasoner thinks in K continuous latent slots between the question and the answer: each slot is the model's "
        "own last hidden state fed back as the next input. Each slot's map shows where in the image it points; the zoom is "
        "the region they found. The built-in reasoner knows Atelier's synthetic `spatial` scenes (512x512, many small shapes); "
        "ask for the colour of a shape by its relation to another, e.g. \"What colour is the small star right of the large "
        "triangle?\".")


def run(pipe: Any, inputs: dict, generator: Any = None, callback: Any = None) -> LatentReasoningOutput:
    options = inputs["options"]
    if isinstance(options, str):
        options = [o.strip() for o in options.replace(",", "\n").splitlines() if o.strip()]
        if not options:
            raise InputError("options", inputs["options"], "pass the answer options, one per line")
    return pipe(inputs["image"], inputs["question"], list(options), generator=generator, callback_on_step_end=callback)


def format_summary(s: dict) -> str:
    p = s["posterior"][s["answer"]]
    lines = [f"{s['answer']} (p = {p:.2f}) after {s['num_slots']} latent slots ({s['seconds']['total']:.2f} s)",
             "posterior: " + ", ".join(f"{k} {v:.2f}" for k, v in s["posterior"].items())]
    for pk in s["peaks"]:
        lines.append(f"slot {pk['slot']} looks at cell {tuple(pk['cell'])}, box {pk['box']} (weight {pk['weight']:.2f})")
    lines.append(f"region found: {s['region']}")
    if s.get("files"):
        lines.append(saved_line(s))
    return "\n".join(lines)


def present(out: LatentReasoningOutput, s: dict) -> tuple:
    p = s["posterior"][s["answer"]]
    started = "" if s["started"] or not s["num_slots"] else " (the model would have answered directly: the slots were forced)"
    text = (f"### {s['answer']}  (p = {p:.2f})\n\nafter **{s['num_slots']} latent slots**{started}; "
            f"region found: {', '.join(f'{v:.0f}' for v in s['region'])} (x0, y0, x1, y1)")
    from core.overlay import add_caption_band

    overlays = [add_caption_band(o, f"slot {k + 1} of {len(out.attention)}") for k, o in enumerate(out.overlays())]
    return text, overlays, out.zoom(), dict(s["posterior"]), s


APP = PipelineApp(
    verb="reason",
    name="latent_reasoning",
    pipeline="pipelines.latent_reasoning.pipeline:LatentReasoningPipeline",
    config="pipelines.latent_reasoning.config:LatentReasoningConfig",
    specs="pipelines.latent_reasoning.config:COMPONENT_SPECS",
    help="answer a multiple-choice question about a large image after K latent reasoning slots (GeLVR)",
    description="Latent visual reasoning (GeLVR + GePO): the model reads the image and the question, emits <start>, then "
                "thinks in K continuous latent slots (each its own last hidden state fed back) that point at the evidence, "
                "and answers after <end>; the answer is a posterior over the options.",
    inputs=(Input("image", "the image (a large one: small objects are read at two scales)", kind="image"),
            Input("question", "the question", flag="-q"),
            Input("options", "2 to 8 answer options", kind="texts")),
    run=run,
    summarize=output_summary,
    format=format_summary,
    components={"reasoner": "reasoner"},
    defaults={"reasoner": "builtin"},
    examples=EXAMPLES,
    saved_files="slots.png, zoom.png, slots.npy, attention.npy, result.json, config.json",
    web_title="Latent reasoning",
    web_note=NOTE,
    web_outputs=(("markdown", "answer"), ("frames", "slot by slot: where each latent slot looks"),
                 ("image", "zoom on the region the slots found"), ("label", "posterior"), ("json", "details")),
    web_present=present,
)
