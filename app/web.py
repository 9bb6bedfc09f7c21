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
    """Limits every tab enforces on uploads."""

    max_video_seconds: float = 600.0
    max_file_size: str = "500mb"


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


TABS: list[tuple[str, Callable[[WebSettings], None]]] = [("Video tools", _video_tools_tab)]


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


def launch(host: str = "127.0.0.1", port: int = 7860, max_video_seconds: float = 600.0, max_file_size: str = "500mb", **kwargs):
    """Start the app; ``prevent_thread_lock=True`` in ``kwargs`` returns immediately (tests)."""
    settings = WebSettings(max_video_seconds=max_video_seconds, max_file_size=max_file_size)
    demo = build_app(settings)
    demo.launch(server_name=host, server_port=port, share=False, max_file_size=max_file_size, **kwargs)
    return demo
