"""The Gradio web demo: one tab per pipeline, plus video tools. Binds 127.0.0.1 by default.

Pipelines add tabs by appending a builder ``(settings: WebSettings) -> None`` to ``TABS``; each
builder is called inside ``gr.Blocks`` and ``gr.Tab``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WebSettings:
    """Limits every tab enforces on uploads, and the models the server offers.

    Visitors choose among ``models`` only (set with ``atelier serve --vlm PATH``); the page never
    loads a path typed by a visitor.
    """

    max_video_seconds: float = 600.0
    max_file_size: str = "500mb"
    models: tuple[str, ...] = ("builtin",)


def check_upload(path: str | None, settings: WebSettings) -> str:
    """Reject a missing, unreadable or too-long upload with a message the user can act on."""
    import gradio as gr

    from core.errors import AtelierError
    from core.video import Video

    if not path:
        raise gr.Error("Upload a video first.")
    try:
        with Video(path) as v:
            duration = v.duration
    except AtelierError as e:
        raise gr.Error(f"This file cannot be read as a video: {e}") from None
    if duration > settings.max_video_seconds:
        raise gr.Error(f"The video lasts {duration:.0f} s; this server accepts at most {settings.max_video_seconds:.0f} s.")
    return path


def _video_tools_tab(settings: WebSettings) -> None:
    import gradio as gr

    from app import video_tools

    def probe(path):
        return video_tools.probe(check_upload(path, settings))

    def sample(path, n, progress=gr.Progress(track_tqdm=True)):
        out = Path(tempfile.mkdtemp(prefix="atelier-sample-"))
        res = video_tools.sample(check_upload(path, settings), out, n=int(n), height=360)
        return [(f, f"#{i}  {t:.2f}s") for f, i, t in zip(res["frames"], res["indices"], res["times"])]

    def overlay(path, caption, progress=gr.Progress(track_tqdm=True)):
        out = Path(tempfile.mkdtemp(prefix="atelier-overlay-")) / "overlay.mp4"
        video_tools.overlay(check_upload(path, settings), out, motion=True, caption=caption or None, height=360)
        return str(out)

    gr.Markdown("Inspect a video, pull uniformly spaced frames (seeking, not decoding everything), or highlight what moves.")
    with gr.Row():
        with gr.Column():
            video = gr.Video(label="video", sources=["upload"])
            n = gr.Slider(1, 32, value=8, step=1, label="frames to sample")
            caption = gr.Textbox(label="caption for the overlay", placeholder="optional")
            with gr.Row():
                b_probe = gr.Button("Probe")
                b_sample = gr.Button("Sample frames")
                b_overlay = gr.Button("Motion overlay", variant="primary")
        with gr.Column():
            info = gr.JSON(label="metadata")
            gallery = gr.Gallery(label="sampled frames", columns=4, height="auto")
            out_video = gr.Video(label="overlay")
    b_probe.click(probe, video, info, api_name="probe")
    b_sample.click(sample, [video, n], gallery, api_name="sample")
    b_overlay.click(overlay, [video, caption], out_video, api_name="overlay")


def gridprobe_answer(path: str, question: str, options_text: str, grid: float = 12, probe_scale: float = 1.0,
                     vlm: str = "builtin", answerer: str = ""):
    """The GridProbe tab's work: ``(answer markdown, heatmap, frame strip, summary)``; user errors raise ``gr.Error``."""
    import gradio as gr

    from app.ask import run_ask, summarize
    from core.errors import AtelierError

    options = [line.strip() for line in (options_text or "").splitlines() if line.strip()]
    if not (question or "").strip():
        raise gr.Error("Type a question.")
    if not 2 <= len(options) <= 10:
        raise gr.Error(f"Give 2 to 10 options, one per line (got {len(options)}).")
    try:
        out = run_ask(path, question.strip(), options, vlm=(vlm or "").strip() or None,
                      answerer=(answerer or "").strip() or None, grid=int(grid), probe_scale=float(probe_scale))
    except AtelierError as e:
        raise gr.Error(str(e)) from None
    s = summarize(out)
    t = s["tflops"]
    text = (f"### {s['answer']}. {s['answer_text']}  (p = {s['posterior'][s['answer']]:.2f})\n\n"
            f"**{s['m_eff']} of {s['pool_size']} frames** chosen: {s['frames']}\n\n"
            f"**Compute:** {t['total']:.3g} TFLOPs (probes {t['probe']:.3g} + focus {t['focus']:.3g}) "
            f"vs **{t['full_frame']:.3g} TFLOPs** for one full-frame pass on all {s['pool_size']} frames "
            f"({t['reduction']:.2f}x less). Probe-ensemble answer: {s['ensemble_answer']}.")
    return text, out.heatmap(), out.strip(), s


def _gridprobe_tab(settings: WebSettings) -> None:
    import gradio as gr

    def run(path, question, options_text, grid, probe_scale, vlm, answerer, progress=gr.Progress(track_tqdm=True)):
        if vlm not in settings.models or (answerer and answerer not in settings.models):
            raise gr.Error(f"Choose a model this server offers: {list(settings.models)}")
        return gridprobe_answer(check_upload(path, settings), question, options_text, grid, probe_scale, vlm, answerer)

    gr.Markdown("Ask a multiple-choice question about a long video. GridProbe samples K² frames, runs 2K cheap probes "
                "(grid rows and columns), maps which frames the answer depends on, and answers from just those frames.")
    with gr.Row():
        with gr.Column():
            video = gr.Video(label="video", sources=["upload"])
            question = gr.Textbox(label="question", placeholder="What colour was the object that briefly appeared?")
            options = gr.Textbox(label="options, one per line", lines=4, placeholder="red\ngreen\nblue\nyellow")
            grid = gr.Slider(2, 16, value=12, step=1, label="grid K (K² frames, 2K probes)")
            probe_scale = gr.Slider(0.1, 1.0, value=1.0, step=0.05, label="probe resolution (fraction of the source side)")
            with gr.Accordion("models", open=False):
                vlm = gr.Dropdown(list(settings.models), value=settings.models[0], label="selector VLM (offered by the server: atelier serve --vlm PATH)")
                answerer = gr.Dropdown(["", *settings.models], value="", label="answerer (blank: the same model)")
            button = gr.Button("Answer", variant="primary")
        with gr.Column():
            answer = gr.Markdown()
            heatmap = gr.Image(label="importance map (chosen cells outlined)", type="numpy")
            strip = gr.Image(label="chosen frames", type="numpy")
            details = gr.JSON(label="details")
    button.click(run, [video, question, options, grid, probe_scale, vlm, answerer], [answer, heatmap, strip, details],
                 api_name="ask")


TABS: list[tuple[str, Callable[[WebSettings], None]]] = [("Video tools", _video_tools_tab), ("GridProbe QA", _gridprobe_tab)]


def build_app(settings: WebSettings | None = None):
    import gradio as gr

    settings = settings or WebSettings()
    with gr.Blocks(title="Atelier") as demo:
        gr.Markdown("# Atelier\nStaged video/vision pipelines, running offline on the built-in models.")
        for title, build in TABS:
            with gr.Tab(title):
                build(settings)
    demo.queue(default_concurrency_limit=1, max_size=16)
    return demo


def launch(host: str = "127.0.0.1", port: int = 7860, max_video_seconds: float = 600.0, max_file_size: str = "500mb",
           models: tuple[str, ...] = ("builtin",), allow_remote: bool = False, **kwargs):
    """Start the app on loopback (never a public share link); ``prevent_thread_lock=True`` in
    ``kwargs`` returns immediately (tests). A non-loopback ``host`` needs ``allow_remote=True``."""
    import ipaddress

    from core.errors import InputError

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        raise InputError("host", host, "the demo binds loopback only (e.g. 127.0.0.1); pass --allow-remote to expose it")
    kwargs.pop("share", None)
    settings = WebSettings(max_video_seconds=max_video_seconds, max_file_size=max_file_size, models=tuple(models))
    demo = build_app(settings)
    demo.launch(server_name=host, server_port=port, share=False, max_file_size=max_file_size, **kwargs)
    return demo
