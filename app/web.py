"""The Gradio web demo: one tab per pipeline, plus video tools. Binds 127.0.0.1 by default.

Every registered pipeline (``pipelines.registry``) gets a tab built from its ``PipelineApp``: its
inputs, its config settings, the models the server offers, examples and its outputs.

What the server writes does not pile up: a request's own ``atelier-*`` folder is removed once its
response is out (gradio has copied the returned files into its cache by then), and gradio's
``delete_cache`` expires uploads and those cached copies after ``WebSettings.keep_files_minutes``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import math
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MAX_TEXT_CHARS = 2000  # the pipelines' own cap on a prompt, query or question (e.g. bernini MAX_PROMPT_CHARS)
MAX_LIST_ITEMS = 10  # a one-per-line field holds at most this many full-length entries (ask takes 10 options)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


@dataclass(frozen=True)
class WebSettings:
    """Limits every tab enforces on uploads, and the models the server offers.

    Visitors choose among ``models`` only (set with ``atelier serve --vlm PATH``); the page never
    loads a path typed by a visitor.
    """

    max_video_seconds: float = 600.0
    models: tuple[str, ...] = ("builtin",)
    keep_files_minutes: float = 60.0  # uploads and served results older than this are deleted


def _expired_note(settings: WebSettings) -> str:
    return f"uploads are kept {settings.keep_files_minutes:g} min"


def check_upload(path: str | None, settings: WebSettings, name: str = "video") -> str:
    """Reject a missing, unreadable or too-long upload with a message the user can act on."""
    import gradio as gr

    if not path:
        raise gr.Error(f"'{name}': upload a video first.")
    duration = _open_upload(path, name, "a video", settings, lambda v: v.duration)
    if duration > settings.max_video_seconds:
        raise gr.Error(f"'{name}': the video lasts {duration:.0f} s; this server accepts at most {settings.max_video_seconds:.0f} s.")
    return path


def check_image(path: str, settings: WebSettings, name: str = "image") -> str:
    """Open an uploaded image with the reader the CLI uses, so a broken, truncated or oversized one is
    refused with our message (gradio's own ``gr.Image`` preprocessing would fail with a bare "Error")."""
    _open_upload(path, name, "an image", settings, lambda v: None)
    return path


def _open_upload(path: str, name: str, what: str, settings: WebSettings, read: Callable):
    import gradio as gr

    from core.errors import AtelierError
    from core.video import Video

    if not Path(path).exists():  # gradio's delete_cache removed it while the page still held it
        raise gr.Error(f"'{name}': the upload {Path(path).name} is no longer on the server ({_expired_note(settings)}); upload it again.")
    try:
        with Video(path) as v:
            return read(v)
    except AtelierError as e:
        raise gr.Error(f"'{name}': this file cannot be read as {what}: {user_message(e, [path])}") from None
    except Exception as e:  # noqa: BLE001 -- a reader failure we did not foresee: still the upload's fault, say so
        logger.warning("%s: unexpected error reading an upload", name, exc_info=True)
        raise gr.Error(f"'{name}': this file cannot be read as {what} ({type(e).__name__}); try another file.") from None


def web_error(error: Exception, uploads: list[str] = (), name: str | None = None):
    """The ``gr.Error`` a visitor sees for ``error``: ours as it is (paths reduced to file names; led by the
    input ``name`` when it is that input's fault), anything unforeseen as one generic line, its traceback
    in the server log (never on the page)."""
    import gradio as gr

    from core.errors import AtelierError

    if isinstance(error, gr.Error):
        return error
    if isinstance(error, AtelierError):
        return gr.Error((f"'{name}': " if name else "") + user_message(error, uploads))
    if isinstance(error, MemoryError):
        return gr.Error("The server ran out of memory on this request; ask for less (fewer frames, a smaller size).")
    logger.error("unexpected error in a web request", exc_info=error)
    return gr.Error("The server failed on this request (an internal error; the details are in the server log). Try other inputs or settings.")


def check_text(name: str, value: Any, per_line: bool = False) -> None:
    """Refuse a pasted document where a prompt, question or caption belongs (the CLI's 2,000-character cap)."""
    import gradio as gr

    if not isinstance(value, str):
        return
    limit = MAX_TEXT_CHARS * (MAX_LIST_ITEMS if per_line else 1)
    longest = max((len(line) for line in value.splitlines()), default=0) if per_line else len(value)
    if len(value) > limit or longest > MAX_TEXT_CHARS:
        what = f"an entry of {longest:,}" if per_line and longest > MAX_TEXT_CHARS else f"{len(value):,}"
        raise gr.Error(f"'{name}' is too long ({what} characters); keep it to {MAX_TEXT_CHARS:,} characters or fewer"
                       + (" per line." if per_line else "."))


@contextlib.contextmanager
def request_folder(kind: str) -> Iterator[Path]:
    """A fresh ``atelier-<kind>-*`` folder for one request's files, removed on exit. Exit after the response
    is out: a handler that yields its result inside this block is resumed only after gradio post-processed
    (copied) what it yielded."""
    folder = Path(tempfile.mkdtemp(prefix=f"atelier-{kind}-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def response_folders(outputs: Any, since: float) -> set[Path]:
    """The per-request ``atelier-*`` folders (directly in the temp folder, made at or after ``since``) that
    hold a file among ``outputs``: a pipeline's ``web_present`` writes its videos there."""
    roots = {Path(tempfile.gettempdir()), Path(tempfile.gettempdir()).resolve()}
    found: set[Path] = set()

    def walk(value: Any) -> None:
        if isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, (str, Path)) and len(str(value)) < 4096:
            folder = Path(value).parent
            if folder.name.startswith("atelier-") and not folder.name.startswith("atelier-examples-") and folder.parent in roots:
                with contextlib.suppress(OSError):  # a folder made before this request is not its own
                    if folder.stat().st_mtime >= since - 1.0:  # 1 s: file times tick coarser than time.time()
                        found.add(folder)

    walk(outputs)
    return found


def remove_folders(folders: set[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def remove_empty_request_folders(since: float) -> None:
    """The ``atelier-*`` folders made in the temp folder at or after ``since`` that hold nothing (a request that
    failed between making its folder and writing into it): empty, so nobody's; removed only if still empty."""
    root = Path(tempfile.gettempdir())
    for folder in root.glob("atelier-*"):
        with contextlib.suppress(OSError):
            if folder.is_dir() and not folder.is_symlink() and folder.stat().st_mtime >= since - 1.0 and not any(folder.iterdir()):
                folder.rmdir()  # fails, and keeps it, if a file appeared meanwhile


@functools.cache
def _checked_components() -> dict[str, type]:
    """gradio components that hand the raw value to our checks, so a bad one gets a message naming the field.

    gradio's own preprocessing opens an image with PIL (a 0-byte, text, truncated or bomb image fails
    there as a bare "Error") and compares a number with its bounds ("abc" fails, NaN passes every
    check). ``is_template`` makes gradio render each with its parent's widget."""
    import gradio as gr
    from gradio import component_meta

    # gradio writes a type stub (app/web.pyi, a copy of this file) for every component class it sees defined
    write_stub, component_meta.create_or_modify_pyi = component_meta.create_or_modify_pyi, lambda *args: None
    try:
        return _define_checked_components(gr)
    finally:
        component_meta.create_or_modify_pyi = write_stub


def _define_checked_components(gr) -> dict[str, type]:
    class Image(gr.Image):
        is_template = True

        def preprocess(self, payload):
            if payload is None:
                return None
            if payload.path and not (payload.url or "").startswith("data:"):
                return str(payload.path)  # an upload: read (and refused) by our reader in the handler
            try:  # a base64 image sent to the API
                return super().preprocess(payload)
            except Exception:  # noqa: BLE001
                raise gr.Error(f"'{self.label}': this is not a readable image; upload a PNG or JPEG file.") from None

    class Slider(gr.Slider):
        is_template = True

        def preprocess(self, payload):
            return super().preprocess(_number_value(self.label, payload, self.minimum, self.maximum))

    class Number(gr.Number):
        is_template = True

        def preprocess(self, payload):
            return super().preprocess(None if payload is None else _number_value(self.label, payload, self.minimum, self.maximum))

    class Checkbox(gr.Checkbox):
        is_template = True

        def preprocess(self, payload):
            from core.values import is_bool

            if not is_bool(payload):  # "false" is truthy: never guess
                raise gr.Error(f"'{self.label}' must be true or false, got {_short(payload)}.")
            return super().preprocess(payload)

    return {"Image": Image, "Slider": Slider, "Number": Number, "Checkbox": Checkbox}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number_value(label: str, value: Any, low: float | None, high: float | None) -> float:
    """A form's number, or a ``gr.Error`` naming the field: not a number, NaN / infinite, or out of range."""
    import gradio as gr

    from core.values import is_bool

    span = f" from {low:g} to {high:g}" if low is not None and high is not None else ""
    if is_bool(value) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise gr.Error(f"'{label}' must be a finite number{span}, got {_short(value)}.")
    if (low is not None and value < low) or (high is not None and value > high):
        raise gr.Error(f"'{label}' must be{span or (f' at least {low:g}' if low is not None else f' at most {high:g}')}, got {value:g}.")
    return value


def _video_tools_tab(settings: WebSettings) -> None:
    import gradio as gr

    from app import video_tools

    checked = _checked_components()

    def probe(path):
        try:
            return video_tools.probe(check_upload(path, settings))
        except Exception as e:  # noqa: BLE001 -- every failure reaches the page as one line
            raise web_error(e, [path], "video") from None

    # generators: the request folder goes only after gradio has copied the yielded files into its cache
    def sample(path, n, progress=gr.Progress(track_tqdm=True)):
        check_upload(path, settings)
        with request_folder("sample") as out:
            try:
                res = video_tools.sample(path, out, n=int(n), height=360)
            except Exception as e:  # noqa: BLE001 -- e.g. a frame that does not decode, met after check_upload
                raise web_error(e, [path], "video") from None
            yield [(f, f"#{i}  {t:.2f}s") for f, i, t in zip(res["frames"], res["indices"], res["times"])]

    def overlay(path, caption, progress=gr.Progress(track_tqdm=True)):
        check_text("caption for the overlay", caption)
        check_upload(path, settings)
        with request_folder("overlay") as folder:
            out = folder / "overlay.mp4"
            try:
                video_tools.overlay(path, out, motion=True, caption=caption or None, height=360)
            except Exception as e:  # noqa: BLE001
                raise web_error(e, [path], "video") from None
            yield str(out)

    gr.Markdown("Inspect a video, pull uniformly spaced frames (seeking, not decoding everything), or highlight what moves.")
    with gr.Row():
        with gr.Column():
            video = gr.Video(label="video", sources=["upload"])
            n = checked["Slider"](1, 32, value=8, step=1, label="frames to sample")
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
        return _checked_components()["Image"](label=inp.name, type="filepath", sources=["upload"])
    if inp.kind == "images":
        return gr.File(label=inp.name, file_count="multiple", file_types=["image"])
    if inp.kind == "texts":
        return gr.Textbox(label=f"{inp.name}, one per line", lines=4, info=inp.help)
    return gr.Textbox(label=inp.name, info=inp.help)


def _setting_component(s):
    """A config setting as a form control: choices -> dropdown, bool -> checkbox, bounded number -> slider."""
    import gradio as gr

    checked = _checked_components()
    label, info = s.name.replace("_", " "), s.help
    if s.choices:
        return gr.Dropdown(list(s.choices), value=s.default, label=label, info=info)
    if s.type is bool:
        return checked["Checkbox"](value=bool(s.default), label=label, info=info)
    if s.pair:
        return gr.Textbox(value="" if s.default is None else " ".join(map(str, s.default)), label=label, info=info + " (H W)")
    if s.type is str:  # free text (e.g. a negative prompt)
        return gr.Textbox(value=s.default or "", label=label, info=info)
    low, high = s.range or (None, None)
    if s.optional:  # None means "the pipeline's rule". A text box, since the form must be able to send "empty": a
        # slider always holds a value, and gradio's number box shows and sends 0 once its panel opens (seen in
        # Chromium, gradio 6.31), which its own minimum check then refuses. Setting.parse reads the text.
        bounds = f"; {low}..{high}" if low is not None and high is not None else ""
        return gr.Textbox(value="" if s.default is None else str(s.default), label=label, placeholder="default",
                          info=f"{info} (empty: the default{bounds})")
    if s.type is int and low is not None and high is not None and high - low <= 256:
        return checked["Slider"](low, high, value=s.default, step=1, label=label, info=info)
    if s.type is float and low is not None and high is not None and high <= 1:
        return checked["Slider"](0.05, high, value=s.default, step=0.05, label=label, info=info)
    return checked["Number"](value=s.default, label=label, info=info, precision=0 if s.type is int else None, minimum=low, maximum=high)


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
    slider = _checked_components()["Slider"](0, 1, value=0, step=1, label="frame")

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
    Every error is a ``gr.Error`` that names the input when it is the input's fault and no server path;
    warnings are ``gr.Warning``s. ``callback(pipe, step, info)`` runs after each loop step;
    ``PipelineInterrupted`` passes through. The caller removes the ``response_folders`` of the outputs."""
    import gradio as gr

    from app.runner import run_app
    from app.world_check import unlike_message
    from pipelines.base import PipelineInterrupted

    app_settings = app.settings()
    names_in = [i.name for i in app.inputs]
    given = dict(zip(names_in, values))
    for i in app.inputs:  # a multiple-file upload arrives as a list of paths (or file objects)
        if i.kind == "images":
            given[i.name] = [str(getattr(f, "name", f)) for f in (given.get(i.name) or [])]
    uploads = [str(given[i.name]) for i in app.inputs if i.kind in ("video", "image") and given.get(i.name)]
    uploads += [p for i in app.inputs if i.kind == "images" for p in given.get(i.name) or []]
    for i in app.inputs:
        if i.kind in ("text", "texts"):
            check_text(i.name, given.get(i.name), per_line=i.kind == "texts")
    for i in app.inputs:  # an optional text left empty in the form is not given
        if i.kind == "text" and not i.required and not str(given.get(i.name) or "").strip():
            given.pop(i.name, None)
    for i in app.inputs:  # every upload is opened by our reader first: a bad one is refused by name
        if i.kind == "video":
            check_upload(given.get(i.name), settings, i.name)
        elif i.kind == "image" and given.get(i.name):
            check_image(str(given[i.name]), settings, i.name)
        elif i.kind == "images":
            for path in given.get(i.name) or []:
                check_image(path, settings, i.name)
        if i.kind != "video" and i.required and not str(given.get(i.name) or "").strip():
            raise gr.Error(f"Fill in '{i.name}' first.")
    rest = values[len(names_in):]
    chosen = dict(zip([s.name for s in app_settings], rest[:len(app_settings)]))
    for name, value in chosen.items():  # a text box setting (optional number, H W pair) holds a short value
        check_text(name.replace("_", " "), value)
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
        if summary.get("unlike_builtin_world"):
            gr.Warning(f"The builtin models ran on this input, and {unlike_message(summary)}.")
        if summary.get("notice"):
            gr.Warning(summary["notice"][0].upper() + summary["notice"][1:] + ".")
        return app.web_present(out, summary)
    except PipelineInterrupted:
        raise
    except Exception as e:  # noqa: BLE001 -- ours as its message, anything else as one generic line
        raise web_error(e, uploads) from None


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
    cancelled run ends with a warning and empty outputs; other errors are re-raised here as they are.
    The request's own folders go when the generator ends: after gradio has taken the outputs, or when
    it is closed (a run abandoned mid-way removes its outputs itself when it ends)."""
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
    lock = threading.Lock()  # the hand-over of the outputs vs. the generator's end
    started = time.time()

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
            outputs = run_in_web(app, settings, values, callback=callback)
        except BaseException as e:  # noqa: BLE001 -- handed to the generator, which re-raises it
            latest["error"] = e
            return
        with lock:
            if "ended" in latest:  # nobody will deliver them
                remove_folders(response_folders(outputs, started))
            else:
                latest["outputs"] = outputs

    # the copied context carries gradio's request: progress bars (track_tqdm) and gr.Warning work in the thread
    worker = threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True, name=f"web-{app.verb}")
    worker.start()
    try:
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
    finally:  # gradio resumes a generator only after post-processing (copying) what it yielded last
        with lock:
            latest["ended"] = True
            outputs = latest.pop("outputs", None)
        remove_folders(response_folders(outputs, started))
        remove_empty_request_folders(started)


def pipeline_tab(app, settings: WebSettings) -> None:
    """A registered pipeline's tab: its inputs, every config setting, the models this server offers,
    clickable examples, a live preview (with ``app.web_preview``), a Cancel button and its outputs.
    Errors become ``gr.Error`` with no server paths; a failed request leaves the outputs empty rather
    than showing the previous answer."""
    import gradio as gr

    from app.examples import EXAMPLES
    from app.world_check import notice

    app_settings = app.settings()
    gr.Markdown(f"{app.web_note}\n\n*Note: {notice(app, web=True)}.*")
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
        # each row ends with its ground truth (and, for the gallery's item, whether the builtin models get it right):
        # an extra column, filled into this box when the row is chosen; the run never reads it
        truth = gr.Textbox(label="ground truth of the chosen example (synthetic: the exact answer is known)", interactive=False,
                           lines=2)
        gr.Examples(examples=EXAMPLES[app.verb](), inputs=[*inputs, truth],
                    label="examples: held-out synthetic items, chosen by the rule in app/showcase.py, with their truth")

    # gradio sees a Progress only among the positional parameters (not after *values): there it
    # inserts one, which shows the pipeline's tqdm bars on the page
    def run(control: RunControl, progress=gr.Progress(track_tqdm=True), *values):
        with contextlib.closing(stream_run(app, settings, values, control)) as updates:  # closed: its folders go
            for update in updates:
                yield update if len(outputs) > 1 else update[0]  # gradio takes a lone output's value bare

    def clear(control: RunControl):
        control.start()  # a Cancel pressed while the run waits in the queue still counts
        return [None] * len(outputs) if len(outputs) > 1 else None

    # one run at a time across every tab (RUN_CONCURRENCY): runs share loaded models and one device, and a per-call
    # setting is applied to the pipeline for the duration of its call; the others wait in the queue (demo.queue)
    button.click(clear, state, outputs, queue=False).then(run, [state, *inputs, *controls, *models], outputs, api_name=app.verb,
                                                          concurrency_limit=1, concurrency_id=RUN_CONCURRENCY)
    # no gradio ``cancels=``: it would drop the request without stopping the pipeline or saying so
    cancel.click(RunControl.cancel, state, None, queue=False, api_name=f"cancel_{app.verb}")


def tabs() -> list[tuple[str, Callable[[WebSettings], None]]]:
    """The video tools, then one tab per registered pipeline."""
    from pipelines.registry import apps

    return [("Video tools", _video_tools_tab)] + [(a.web_title or a.name, functools.partial(pipeline_tab, a)) for a in apps().values()]


def delete_cache(settings: WebSettings) -> tuple[int, int]:
    """gradio's ``delete_cache=(every, age)`` in seconds: files older than the setting go, checked at a
    quarter of it (at most every 5 min), so a file lives at most 1.25x the setting."""
    age = max(1, round(settings.keep_files_minutes * 60))
    return max(1, min(300, age // 4)), age


RUN_CONCURRENCY = "atelier-run"  # the concurrency group every tab's run joins: one pipeline runs at a time
QUEUE_SIZE = 16  # requests waiting beyond the running one; the 17th is told the queue is full


def build_app(settings: WebSettings | None = None):
    import gradio as gr

    settings = settings or WebSettings()
    with gr.Blocks(title="Atelier", delete_cache=delete_cache(settings)) as demo:
        gr.Markdown("# Atelier\nStaged video/vision pipelines, running offline on the built-in models.")
        for title, build in tabs():
            with gr.Tab(title):
                build(settings)
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE)
    return demo


_SIZE_UNITS = {"": 1, "b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}


def parse_file_size(text: str | int) -> int:
    """``--max-file-size`` in bytes: an integer of bytes, or an integer with a unit (500mb, 2gb; the forms
    gradio takes, checked here since gradio's own parser fails on anything else with a traceback)."""
    from core.errors import InputError

    hint = "pass a positive size such as 500mb, 2gb or a number of bytes"
    if isinstance(text, int) and not isinstance(text, bool):
        if text > 0:
            return text
        raise InputError("--max-file-size", text, hint)
    found = re.fullmatch(r"(\d+)\s*([a-z]*)", str(text).strip().lower())
    if not found or found.group(2) not in _SIZE_UNITS or int(found.group(1)) <= 0:
        raise InputError("--max-file-size", text, hint)
    return int(found.group(1)) * _SIZE_UNITS[found.group(2)]


def check_positive(flag: str, value: Any, unit: str) -> float:
    """A finite number above 0 (NaN passes every comparison, and would switch the limit off)."""
    from core.errors import InputError

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(flag, value, f"pass a number of {unit} above 0")
    return float(value)


def check_models(models: tuple[str, ...]) -> tuple[str, ...]:
    """Every ``--vlm`` the server offers, checked before it starts (a visitor would meet a bad one as an
    error on every request): 'builtin', a checkpoint folder (config.json and weights) or an HF id in the
    local cache (the server does not download while a visitor waits)."""
    from core.errors import InputError
    from planners.loading import BUILTIN, _saved_kind

    for spec in models:
        if spec == BUILTIN:
            continue
        path = Path(spec).expanduser()
        if path.is_dir():
            kind = _saved_kind(path)
            if kind is None:
                raise InputError("--vlm", spec, "this folder has no model config.json; pass a checkpoint folder "
                                                "(a transformers VLM or `atelier train vlm --out DIR`)")
            if kind not in ("transformers", "builtin-vlm"):  # what load_vlm takes: every tab that offers it loads a VLM
                raise InputError("--vlm", spec, f"this folder holds a {kind!r}, not a vision-language model")
            if not any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir()):
                raise InputError("--vlm", spec, f"this folder has a config.json but no weights ({', '.join(WEIGHT_SUFFIXES)}); "
                                                "copy the whole checkpoint")
        elif path.exists():
            raise InputError("--vlm", spec, "is a file; pass a checkpoint folder (with config.json) or 'builtin'")
        elif spec.startswith((".", "/", "~")) or spec.count("/") != 1:
            raise InputError("--vlm", spec, "no such folder; pass an existing checkpoint folder, 'builtin' or an HF id such as Qwen/Qwen3-VL-2B-Instruct")
        else:
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(spec, "config.json"), str):
                raise InputError("--vlm", spec, f"not in the local Hugging Face cache; download it first (hf download {spec}) "
                                                "or pass its folder")
    return tuple(dict.fromkeys(models))  # a model named twice is offered once


def launch(host: str = "127.0.0.1", port: int = 7860, max_video_seconds: float = 600.0, max_file_size: str | int = "500mb",
           models: tuple[str, ...] = ("builtin",), allow_remote: bool = False, keep_files_minutes: float = 60.0, **kwargs):
    """Start the app on loopback (never a public share link); ``prevent_thread_lock=True`` in
    ``kwargs`` returns immediately (tests). A non-loopback ``host`` needs ``allow_remote=True``.
    Every limit and offered model is checked before anything starts (an ``InputError`` naming its flag)."""
    import ipaddress

    from core.errors import InputError

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        raise InputError("host", host, "the demo binds loopback only (e.g. 127.0.0.1); pass --allow-remote to expose it")
    size = parse_file_size(max_file_size)
    settings = WebSettings(max_video_seconds=check_positive("--max-video-seconds", max_video_seconds, "seconds"),
                           models=check_models(tuple(models)),
                           keep_files_minutes=check_positive("--keep-files", keep_files_minutes, "minutes"))
    kwargs.pop("share", None)
    demo = build_app(settings)
    demo.launch(server_name=host, server_port=port, share=False, max_file_size=size, **kwargs)
    return demo
