"""The Gradio web demo: one tab per pipeline, plus video tools. Binds 127.0.0.1 by default.

Every registered pipeline (``pipelines.registry``) gets a tab built from its ``PipelineApp``: its
inputs, its config settings, the models the server offers, examples and its outputs.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


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
        raise gr.Error(f"This file cannot be read as a video: {user_message(e, [path])}") from None
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


def user_message(error: Exception, uploads: list[str] = ()) -> str:
    """An error as a visitor may read it: uploads by file name only, no server paths, no errno codes."""
    import re

    text = " ".join(str(error).split())
    for path in uploads:
        if path:
            text = text.replace(str(path), Path(path).name)
    text = re.sub(r"\[Errno \d+\]\s*", "", text)
    return re.sub(r"(/[\w.\-]+){2,}/([\w.\-]+)", r"\2", text)  # any other absolute path -> its last part


def _input_component(inp):
    import gradio as gr

    if inp.kind == "video":
        return gr.Video(label=inp.name, sources=["upload"])
    if inp.kind == "image":
        return gr.Image(label=inp.name, type="filepath", sources=["upload"])
    if inp.kind == "images":
        return gr.File(label=inp.name, file_count="multiple", file_types=["image"])
    if inp.kind == "texts":
        return gr.Textbox(label=f"{inp.name}, one per line", lines=4, info=inp.help)
    return gr.Textbox(label=inp.name, info=inp.help)


def _setting_component(s):
    """A config setting as a form control: choices -> dropdown, bool -> checkbox, bounded number -> slider."""
    import gradio as gr

    label, info = s.name.replace("_", " "), s.help
    if s.choices:
        return gr.Dropdown(list(s.choices), value=s.default, label=label, info=info)
    if s.type is bool:
        return gr.Checkbox(value=bool(s.default), label=label, info=info)
    if s.pair:
        return gr.Textbox(value="" if s.default is None else " ".join(map(str, s.default)), label=label, info=info + " (H W)")
    low, high = s.range or (None, None)
    if s.optional:  # None means "the pipeline's rule". A text box, since the form must be able to send "empty": a
        # slider always holds a value, and gradio's number box shows and sends 0 once its panel opens (seen in
        # Chromium, gradio 6.31), which its own minimum check then refuses. Setting.parse reads the text.
        bounds = f"; {low}..{high}" if low is not None and high is not None else ""
        return gr.Textbox(value="" if s.default is None else str(s.default), label=label, placeholder="default",
                          info=f"{info} (empty: the default{bounds})")
    if s.type is int and low is not None and high is not None and high - low <= 256:
        return gr.Slider(low, high, value=s.default, step=1, label=label, info=info)
    if s.type is float and low is not None and high is not None and high <= 1:
        return gr.Slider(0.05, high, value=s.default, step=0.05, label=label, info=info)
    return gr.Number(value=s.default, label=label, info=info, precision=0 if s.type is int else None, minimum=low, maximum=high)


def _output_component(kind: str, label: str):
    import gradio as gr

    makers = {"markdown": lambda: gr.Markdown(label=label), "image": lambda: gr.Image(label=label, type="numpy"),
              "label": lambda: gr.Label(label=label), "json": lambda: gr.JSON(label=label), "video": lambda: gr.Video(label=label),
              "frames": lambda: _frames_component(label),
              "gallery": lambda: gr.Gallery(label=label, columns=2, object_fit="contain", height="auto")}
    return makers[kind]()


def _frames_component(label: str):
    """A list of images shown one at a time under a slider: the run fills the returned State."""
    import gradio as gr

    frames = gr.State([])
    image = gr.Image(label=label, type="numpy", interactive=False)
    slider = gr.Slider(0, 1, value=0, step=1, label="frame")

    def show(items, i=0):
        i = int(i or 0)
        return items[i] if items and 0 <= i < len(items) else None

    frames.change(lambda items: (show(items), gr.update(maximum=max(len(items or []) - 1, 1), value=0)), frames, [image, slider])
    slider.change(show, [frames, slider], image)
    return frames


VLM_LOADERS = ("planners.loading:load_vlm", "planners.loading:load_selector")


def slot_choices(app, slot: str, settings: WebSettings) -> list[str]:
    """What a visitor may pick for a component slot: the server's VLMs for a VLM-backed slot, else
    the app's default for it ('classic'); an optional slot may stay empty (first)."""
    spec = app.pipeline_class.component_specs[slot]
    choices = list(settings.models) if spec.loader in VLM_LOADERS else [app.defaults.get(slot, "")]
    return ([""] if spec.optional else []) + [c for c in choices if c]


def run_in_web(app, settings: WebSettings, values: tuple, callback: Callable | None = None) -> tuple:
    """One web request: ``values`` in the tab's order (inputs, settings, models) -> the tab's outputs.
    Every user error is a ``gr.Error`` that names no server path; warnings are ``gr.Warning``s.
    ``callback(pipe, step, info)`` runs after each loop step; ``PipelineInterrupted`` passes through."""
    import gradio as gr

    from app.runner import run_app
    from core.errors import AtelierError
    from pipelines.base import PipelineInterrupted

    app_settings = app.settings()
    names_in = [i.name for i in app.inputs]
    given = dict(zip(names_in, values))
    for i in app.inputs:  # a multiple-file upload arrives as a list of paths (or file objects)
        if i.kind == "images":
            given[i.name] = [str(getattr(f, "name", f)) for f in (given.get(i.name) or [])]
    uploads = [str(given[i.name]) for i in app.inputs if i.kind in ("video", "image") and given.get(i.name)]
    uploads += [p for i in app.inputs if i.kind == "images" for p in given.get(i.name) or []]
    for i in app.inputs:  # an optional text left empty in the form is not given
        if i.kind == "text" and not i.required and not str(given.get(i.name) or "").strip():
            given.pop(i.name, None)
    for i in app.inputs:
        if i.kind == "video":
            check_upload(given.get(i.name), settings)
        elif i.required and not str(given.get(i.name) or "").strip():
            raise gr.Error(f"Fill in '{i.name}' first.")
    rest = values[len(names_in):]
    chosen = dict(zip([s.name for s in app_settings], rest[:len(app_settings)]))
    picked = dict(zip(app.components, rest[len(app_settings):]))
    for slot, model in picked.items():
        if model and model not in slot_choices(app, slot, settings):
            raise gr.Error(f"Choose a {slot} this server offers: {slot_choices(app, slot, settings)}")
    for i in app.inputs:  # a list of texts comes from the form one per line
        if i.kind == "texts" and isinstance(given.get(i.name), str):
            given[i.name] = [line.strip() for line in given[i.name].splitlines() if line.strip()]
    args = {**given, **{k: v for k, v in chosen.items() if v not in (None, "")}, **{s: m for s, m in picked.items() if m}}
    try:
        inputs, config, _, _ = app.split_args(args)
        for warning in (app.web_check(inputs, config) if app.web_check else []):
            gr.Warning(warning)
        out, summary = run_app(app, args, callback=callback)
    except PipelineInterrupted:
        raise
    except AtelierError as e:
        raise gr.Error(user_message(e, uploads)) from None
    return app.web_present(out, summary)


@dataclass
class RunControl:
    """A tab's current run in one browser session (its ``gr.State``), so Cancel can reach the pipeline.
    Plain fields only: gradio deep-copies a state's initial value for every session."""

    active: bool = False  # a run was requested and has not ended
    cancelled: bool = False
    pipe: Any = None  # the running pipeline once its first step ended
    step: int | None = None  # the last step that ended

    def start(self) -> None:
        self.active, self.cancelled, self.pipe, self.step = True, False, None, None

    def cancel(self) -> None:
        """Stop the run at its next step (a no-op when nothing runs)."""
        if self.active:
            self.cancelled = True
            if self.pipe is not None:
                self.pipe.interrupt()


def stream_run(app, settings: WebSettings, values: tuple, state: RunControl, interval: float = 0.5) -> Iterator[tuple]:
    """A tab's Run: ``run_in_web`` in a worker thread, yielding ``(preview, *outputs)`` (no preview slot
    without ``app.web_preview``) -- the latest preview every ``interval`` s, then the outputs. A
    cancelled run ends with a warning and empty outputs; other errors are re-raised here as they are."""
    import gradio as gr

    from pipelines.base import PipelineInterrupted

    keep = [gr.update()] if app.web_preview else []  # leave the preview as it is
    n = len(app.web_outputs)
    if not state.active:  # an API call, which skips the tab's clear step
        state.start()
    if state.cancelled:
        state.active = False
        gr.Warning("Cancelled before it started.")
        yield (*keep, *[None] * n)
        return
    latest: dict[str, Any] = {}

    def callback(pipe, step: int, info: dict) -> None:
        state.pipe, state.step = pipe, step
        if app.web_preview and "preview_failed" not in latest:
            try:
                image = app.web_preview(info)
            except Exception:  # a preview is cosmetic: never let it fail the run
                logger.warning("%s: web_preview failed; no more previews this run", app.verb, exc_info=True)
                latest["preview_failed"] = True
                image = None
            if image is not None:
                latest["preview"] = (step, image)  # a new tuple per image, even if the array is reused
        if state.cancelled or "abandoned" in latest:
            pipe.interrupt()

    def work() -> None:
        try:
            latest["outputs"] = run_in_web(app, settings, values, callback=callback)
        except BaseException as e:  # noqa: BLE001 -- handed to the generator, which re-raises it
            latest["error"] = e

    # the copied context carries gradio's request: progress bars (track_tqdm) and gr.Warning work in the thread
    worker = threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True, name=f"web-{app.verb}")
    worker.start()
    try:
        shown = None
        while worker.is_alive():
            worker.join(interval)
            preview = latest.get("preview")
            if preview is not None and preview is not shown:
                shown = preview
                yield (preview[1], *[gr.update()] * n)
    finally:
        if worker.is_alive():  # the generator was closed (page left, request cancelled): stop computing
            latest["abandoned"] = True
            state.cancel()
        state.active, state.pipe = False, None
    error = latest.get("error")
    if isinstance(error, PipelineInterrupted):
        done = "before its first step" if state.step is None else f"after step {state.step}"
        gr.Warning(f"Cancelled {done}.")
        yield (*keep, *[None] * n)
        return
    if error is not None:
        raise error
    if state.cancelled:
        gr.Info("The run finished before it could be cancelled.")
    yield (*keep, *latest["outputs"])


def pipeline_tab(app, settings: WebSettings) -> None:
    """A registered pipeline's tab: its inputs, every config setting, the models this server offers,
    clickable examples, a live preview (with ``app.web_preview``), a Cancel button and its outputs.
    Errors become ``gr.Error`` with no server paths; a failed request leaves the outputs empty rather
    than showing the previous answer."""
    import gradio as gr

    from app.examples import EXAMPLES

    app_settings = app.settings()
    gr.Markdown(app.web_note)
    state = gr.State(RunControl())  # gradio gives every session its own (deep) copy
    with gr.Row():
        with gr.Column():
            inputs = [_input_component(i) for i in app.inputs]
            with gr.Accordion("settings", open=False):
                controls = [_setting_component(s) for s in app_settings]
            with gr.Accordion("models", open=False):
                models = [gr.Dropdown(slot_choices(app, slot, settings), value=slot_choices(app, slot, settings)[0],
                                      label=f"{slot}: {app.pipeline_class.component_specs[slot].help} (offered by the server: atelier serve --vlm PATH)")
                          for slot in app.components]
            with gr.Row():
                button = gr.Button("Run", variant="primary")
                cancel = gr.Button("Cancel", variant="stop")
        with gr.Column():
            preview = [gr.Image(label="preview (while it runs)", type="numpy")] if app.web_preview else []
            outputs = preview + [_output_component(kind, label) for kind, label in app.web_outputs]
    if app.verb in EXAMPLES:
        gr.Examples(examples=EXAMPLES[app.verb](), inputs=inputs, label="examples (synthetic clips the built-in model knows)")

    # gradio sees a Progress only among the positional parameters (not after *values): there it
    # inserts one, which shows the pipeline's tqdm bars on the page
    def run(control: RunControl, progress=gr.Progress(track_tqdm=True), *values):
        for update in stream_run(app, settings, values, control):
            yield update if len(outputs) > 1 else update[0]  # gradio takes a lone output's value bare

    def clear(control: RunControl):
        control.start()  # a Cancel pressed while the run waits in the queue still counts
        return [None] * len(outputs) if len(outputs) > 1 else None

    button.click(clear, state, outputs, queue=False).then(run, [state, *inputs, *controls, *models], outputs, api_name=app.verb)
    # no gradio ``cancels=``: it would drop the request without stopping the pipeline or saying so
    cancel.click(RunControl.cancel, state, None, queue=False, api_name=f"cancel_{app.verb}")


def tabs() -> list[tuple[str, Callable[[WebSettings], None]]]:
    """The video tools, then one tab per registered pipeline."""
    from pipelines.registry import apps

    return [("Video tools", _video_tools_tab)] + [(a.web_title or a.name, functools.partial(pipeline_tab, a)) for a in apps().values()]


def build_app(settings: WebSettings | None = None):
    import gradio as gr

    settings = settings or WebSettings()
    with gr.Blocks(title="Atelier") as demo:
        gr.Markdown("# Atelier\nStaged video/vision pipelines, running offline on the built-in models.")
        for title, build in tabs():
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
