"""The Gradio web demo: one tab per pipeline, plus video tools. Binds 127.0.0.1 by default.

Every registered pipeline (``pipelines.registry``) gets a tab built from its ``PipelineApp``: its
inputs, its config settings, the models the server offers, examples and its outputs.
"""

from __future__ import annotations

import functools
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
    if s.type is int and low is not None and high is not None and high - low <= 256:
        return gr.Slider(low, high, value=s.default, step=1, label=label, info=info)
    if s.type is float and low is not None and high is not None and high <= 1:
        return gr.Slider(0.05, high, value=s.default, step=0.05, label=label, info=info)
    return gr.Number(value=s.default, label=label, info=info, precision=0 if s.type is int else None, minimum=low, maximum=high)


def _output_component(kind: str, label: str):
    import gradio as gr

    makers = {"markdown": lambda: gr.Markdown(label=label), "image": lambda: gr.Image(label=label, type="numpy"),
              "label": lambda: gr.Label(label=label), "json": lambda: gr.JSON(label=label), "video": lambda: gr.Video(label=label)}
    return makers[kind]()


VLM_LOADERS = ("planners.loading:load_vlm", "planners.loading:load_selector")


def slot_choices(app, slot: str, settings: WebSettings) -> list[str]:
    """What a visitor may pick for a component slot: the server's VLMs for a VLM-backed slot, else
    the app's default for it ('classic'); an optional slot may stay empty (first)."""
    spec = app.pipeline_class.component_specs[slot]
    choices = list(settings.models) if spec.loader in VLM_LOADERS else [app.defaults.get(slot, "")]
    return ([""] if spec.optional else []) + [c for c in choices if c]


def run_in_web(app, settings: WebSettings, values: tuple) -> tuple:
    """One web request: ``values`` in the tab's order (inputs, settings, models) -> the tab's outputs.
    Every user error is a ``gr.Error`` that names no server path; warnings are ``gr.Warning``s."""
    import gradio as gr

    from app.runner import run_app
    from core.errors import AtelierError

    app_settings = app.settings()
    names_in = [i.name for i in app.inputs]
    given = dict(zip(names_in, values))
    uploads = [str(given[i.name]) for i in app.inputs if i.kind in ("video", "image") and given.get(i.name)]
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
        out, summary = run_app(app, args)
    except AtelierError as e:
        raise gr.Error(user_message(e, uploads)) from None
    return app.web_present(out, summary)


def pipeline_tab(app, settings: WebSettings) -> None:
    """A registered pipeline's tab: its inputs, every config setting, the models this server offers,
    clickable examples, and its outputs. Errors become ``gr.Error`` with no server paths; a failed
    request leaves the outputs empty rather than showing the previous answer."""
    import gradio as gr

    from app.examples import EXAMPLES

    app_settings = app.settings()
    gr.Markdown(app.web_note)
    with gr.Row():
        with gr.Column():
            inputs = [_input_component(i) for i in app.inputs]
            with gr.Accordion("settings", open=False):
                controls = [_setting_component(s) for s in app_settings]
            with gr.Accordion("models", open=False):
                models = [gr.Dropdown(slot_choices(app, slot, settings), value=slot_choices(app, slot, settings)[0],
                                      label=f"{slot}: {app.pipeline_class.component_specs[slot].help} (offered by the server: atelier serve --vlm PATH)")
                          for slot in app.components]
            button = gr.Button("Run", variant="primary")
        with gr.Column():
            outputs = [_output_component(kind, label) for kind, label in app.web_outputs]
    if app.verb in EXAMPLES:
        gr.Examples(examples=EXAMPLES[app.verb](), inputs=inputs, label="examples (synthetic clips the built-in model knows)")

    def run(*values, progress=gr.Progress(track_tqdm=True)):
        return run_in_web(app, settings, values)

    def clear():
        return [None] * len(outputs)

    button.click(clear, None, outputs, queue=False).then(run, [*inputs, *controls, *models], outputs, api_name=app.verb)


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
