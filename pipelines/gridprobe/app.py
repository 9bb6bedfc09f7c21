"""GridProbe's entry in the app registry: ``atelier ask``, the batch verb ``ask`` and the web tab."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.errors import InputError
from pipelines.registry import Input, PipelineApp, output_summary

if TYPE_CHECKING:  # the pipeline module imports torch: never at the top of an app module
    from pipelines.gridprobe.pipeline import GridProbeOutput

EXAMPLES = """\
examples:
  atelier ask talk.mp4 -q "What does the speaker hold?" --options "a pen" "a cup" "a phone"
  atelier ask talk.mp4 -q "..." --options A B C D --vlm /models/Qwen3-VL-2B-Instruct --answerer /models/Qwen3-VL-8B-Instruct
  atelier ask talk.mp4 -q "..." --options A B C D --grid 16 --probe-scale 0.25 --json -o out/

Put VIDEO before --options (which takes every word after it). The answer is read from the
answer-letter posterior, never generated text. Compute is the language model's analytic FLOPs
(vision tower excluded, as in the paper), next to one full-frame pass on all K² frames.
The default probe scale 0.5 is the measured Pareto point (docs/BENCHMARKS.md).
"""

BUILTIN_NOTE = (
    "The built-in model knows only Atelier's synthetic world (coloured shapes that move, appear and vanish): "
    "ask about colours, shapes, counts, order and motion there. For real footage start the server with a real "
    "checkpoint: `atelier serve --vlm /models/Qwen2.5-VL-3B-Instruct` and choose it under *models*."
)


def run(pipe: Any, inputs: dict, generator: Any = None, callback: Any = None) -> GridProbeOutput:
    options = inputs["options"]
    if isinstance(options, str):
        raise InputError("options", options, "pass a list of option texts, not one string")
    return pipe(inputs["video"], inputs["question"], list(options), generator=generator, callback_on_step_end=callback)


def format_summary(s: dict) -> str:
    """The human-readable form of ``GridProbeOutput.summary()`` (``pipelines.gridprobe.pipeline.format_summary``)."""
    from pipelines.gridprobe.pipeline import format_summary as text

    return text(s)


def present(out: GridProbeOutput, s: dict) -> tuple:
    """The web tab's outputs: answer text, importance map, chosen frames, option chart, details."""
    from pipelines.gridprobe.pipeline import compute_phrase

    t = s["tflops"]
    times = s.get("frame_times")
    text = (f"### {s['answer']}. {s['answer_text']}  (p = {s['posterior'][s['answer']]:.2f})\n\n"
            f"**{s['m_eff']} of {s['pool_size']} frames** chosen: {s['frames']}"
            + (f" (at {', '.join(f'{x:.1f}' for x in times)} s)" if times else "") + "\n\n"
            f"**Compute:** {t['total']:.3g} TFLOPs (probes {t['probe']:.3g} + focus {t['focus']:.3g}) "
            f"vs **{t['full_frame']:.3g} TFLOPs** for one full-frame pass on all {s['pool_size']} frames "
            f"({compute_phrase(t['reduction'])}). Probe-ensemble answer: {s['ensemble_answer']}.")
    chart = {f"{L}. {o}": float(p) for (L, p), o in zip(s["posterior"].items(), out.options)}
    return text, out.heatmap(), out.strip(), chart, s


def check(inputs: dict, settings: dict) -> list[str]:
    """Warnings before a run: a clip shorter than the K² pool repeats frames."""
    from core.errors import AtelierError
    from core.video import Video

    grid = settings.get("grid") or 12
    try:
        with Video(inputs["video"]) as v:
            n = len(v)
    except (AtelierError, TypeError):
        return []
    if n < grid * grid:
        return [f"The clip has {n} frames, fewer than the {grid * grid} of a {grid}x{grid} grid: frames repeat in the pool. "
                f"Choose a grid of at most {max(2, int(n ** 0.5))}."]
    return []


APP = PipelineApp(
    verb="ask",
    name="gridprobe",
    pipeline="pipelines.gridprobe.pipeline:GridProbePipeline",
    config="pipelines.gridprobe.config:GridProbeConfig",
    specs="pipelines.gridprobe.config:COMPONENT_SPECS",
    help="answer a multiple-choice question about a video (GridProbe)",
    description="GridProbe: probe a KxK grid of K² uniformly sampled frames with 2K cheap passes (rows, columns), "
                "build a frame-importance map from the answer posteriors, pick a per-question number of frames "
                "from the map's shape, and answer with one focused pass on those frames.",
    inputs=(
        Input("video", "video file, folder of frames, or image", kind="video"),
        Input("question", "the question", flag="-q"),
        Input("options", "2 to 10 answer options, lettered A, B, ...", kind="texts"),
    ),
    run=run,
    summarize=output_summary,
    format=format_summary,
    components={"selector": "vlm", "answerer": "answerer"},
    defaults={"selector": "builtin"},
    examples=EXAMPLES,
    saved_files="result.json, config.json, importance_map.png and selected_frames.png",
    web_title="GridProbe QA",
    web_note="Ask a multiple-choice question about a long video. GridProbe samples K² frames, runs 2K cheap probes "
             "(grid rows and columns), maps which frames the answer depends on, and answers from just those frames.\n\n"
             + BUILTIN_NOTE,
    web_outputs=(("markdown", "answer"), ("image", "importance map (chosen cells outlined)"), ("image", "chosen frames"),
                 ("label", "option probabilities"), ("json", "details")),
    web_present=present,
    web_check=check,
)
