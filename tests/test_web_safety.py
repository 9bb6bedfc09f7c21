"""The web server cleans up after itself and answers every bad input with a message (issue 46, items 5 and 6).

Handlers are called the way gradio calls them: the component's ``preprocess`` first, then the function the
Blocks wire; a generator is resumed after its yielded value was taken (gradio copies the returned files into
its own cache at that point). One test runs a real server to see the files arrive after their folder is gone.
"""

from __future__ import annotations

import logging
import math
import struct
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from core.video import write_video
from pipelines.base import Pipeline, PipelineConfig, PipelineOutput, setting
from pipelines.registry import Input, PipelineApp, apps

gr = pytest.importorskip("gradio")

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------ a fast pipeline whose tab writes a video, like bernini's


@dataclass
class SlowConfig(PipelineConfig):
    delay: float = setting(0.0, help="seconds before it returns", range=(0.0, 10.0))


@dataclass(repr=False)
class SlowOutput(PipelineOutput):
    word: str = ""


class SlowPipeline(Pipeline):
    """One preview step, then ``delay`` seconds with no step (an interrupt is not seen), then the output."""

    config_class = SlowConfig

    def __call__(self, word: str, generator=None, callback_on_step_end=None) -> SlowOutput:
        self._begin_call()
        if word == "crash":
            raise RuntimeError("unforeseen failure reading /srv/atelier/secret/model.bin")
        self.step_end(callback_on_step_end, 0, {"image": np.zeros((2, 2, 3), np.uint8)})
        time.sleep(self.config.delay)
        return SlowOutput(word=word)


def present_video(out: SlowOutput, s: dict) -> tuple:
    """What bernini / anymotion / clear do: the clip goes to a fresh temp folder the player can read."""
    frames = np.zeros((4, 16, 16, 3), np.uint8)
    path = write_video(Path(tempfile.mkdtemp(prefix="atelier-slow-")) / "video.mp4", frames, fps=4)
    return s["word"], str(path)


SLOW = PipelineApp(
    verb="slow", name="slow", pipeline=f"{__name__}:SlowPipeline", help="wait", description="Wait, then write a clip.",
    inputs=(Input("word", "a word"),),
    run=lambda pipe, inputs, generator=None, callback=None: pipe(inputs["word"], callback_on_step_end=callback),
    summarize=lambda out: {"word": out.word}, format=lambda s: s["word"],
    web_outputs=(("markdown", "text"), ("video", "clip")), web_present=present_video,
    web_preview=lambda info: info["image"],
)


# ------------------------------------------------------------------ fixtures and helpers


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A temp folder of this test's own, so folders other processes leave in /tmp do not count."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def request_folders(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("atelier-"))


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("web_media")
    rng = np.random.default_rng(0)
    write_video(d / "clip.mp4", rng.integers(0, 256, (8, 32, 32, 3), dtype=np.uint8), fps=10)  # short: the tools upscale to 360p
    long = write_video(d / "long.mp4", rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8), fps=10)
    data = bytearray(long.read_bytes())
    start = len(data) // 2  # zeros in the middle of the stream: it opens, frame ~17 does not decode
    data[start:start + 3000] = bytes(3000)
    (d / "hole_1.mp4").write_bytes(bytes(data))
    from PIL import Image

    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(d / "good.png")
    png = (d / "good.png").read_bytes()
    (d / "truncated.png").write_bytes(png[: len(png) // 2])
    (d / "empty.png").write_bytes(b"")
    (d / "text.png").write_text("this is not an image\n" * 20)
    (d / "bomb.png").write_bytes(png_header(20000, 20000))
    return d


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares ``width x height`` and holds no pixels (69 bytes, over PIL's pixel limit)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + chunk(b"IEND", b"")


def wired(build) -> dict:
    """The functions a tab's Blocks wire, by api name, and the tab's components by label."""
    with gr.Blocks() as demo:
        build()
    fns = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}
    components = {getattr(b, "label", None): b for b in demo.blocks.values()}
    return {"fns": fns, "components": components}


def deliver(generator) -> list:
    """Run a handler as gradio does: take each yielded value (copy its files, as gradio's post-processing
    does), then resume the generator; the copies are what the visitor gets."""
    delivered = []
    for value in generator:
        delivered.append(value)
        for path in files_in(value):
            assert Path(path).is_file(), f"{path} was gone before gradio could copy it"
    return delivered


def files_in(value) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in files_in(v)]
    return [value] if isinstance(value, str) and value.endswith((".mp4", ".png")) else []


def message_of(call) -> str:
    with pytest.raises(gr.Error) as e:
        call()
    return str(e.value)


def assert_names(message: str, name: str, media: Path) -> None:
    assert f"'{name}'" in message, message
    assert str(media) not in message and "Traceback" not in message and "/tmp" not in message, message
    assert len(message.splitlines()) == 1 and message.strip() not in ("", "Error"), message


def values_for(app, **given) -> tuple:
    """A tab's values in its order: the given inputs (a plain default for the rest), settings left empty, models unset."""
    plain = {"text": "what is it?", "texts": "red\nblue", "video": None, "image": None, "images": None}
    values = [given.get(i.name, plain[i.kind]) for i in app.inputs]
    return tuple(values + [None] * len(app.settings()) + [""] * len(app.components))


# ------------------------------------------------------------------ 1. no request folder outlives its response


def test_ten_requests_leave_no_request_folder(private_tmp, media):
    from app.web import RunControl, WebSettings, _video_tools_tab, pipeline_tab

    settings = WebSettings()
    tools = wired(lambda: _video_tools_tab(settings))["fns"]
    slow = wired(lambda: pipeline_tab(SLOW, settings))["fns"]["slow"]
    clip, before = str(media / "clip.mp4"), request_folders(private_tmp)

    for n in (2, 3, 4):
        (frames,) = deliver(tools["sample"](clip, n))
        assert len(frames) == n and all(Path(f).parent.name.startswith("atelier-sample-") for f, _ in frames)
    for caption in ("", "moving"):
        (video,) = deliver(tools["overlay"](clip, caption))
        assert Path(video).name == "overlay.mp4"
    for word in ("one", "two", "three"):
        *_, final = deliver(slow(RunControl(), None, word, 0.0))
        assert final[1] == word and Path(final[2]).parent.name.startswith("atelier-slow-")
    # a request that fails half-way (a frame that does not decode) and one the visitor leaves mid-run
    with pytest.raises(gr.Error):
        deliver(tools["sample"](str(media / "hole_1.mp4"), 32))
    run = slow(RunControl(), None, "left", 0.3)
    next(run)  # the preview: the pipeline is sleeping now
    run.close()  # the page closed; the run ends on its own and must clean up after itself
    for worker in [t for t in threading.enumerate() if t.name == "web-slow"]:
        worker.join(5)
    assert request_folders(private_tmp) == before == []


def test_files_reach_the_visitor_through_a_real_server(private_tmp, media, tmp_path):
    from gradio_client import Client, handle_file

    from app.web import WebSettings, _video_tools_tab, delete_cache

    settings = WebSettings()
    with gr.Blocks(delete_cache=delete_cache(settings)) as demo:
        _video_tools_tab(settings)
    demo.queue()
    demo.launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1")
    try:
        client = Client(demo.local_url, verbose=False, download_files=str(tmp_path / "got"))
        gallery = client.predict(handle_file(str(media / "clip.mp4")), 3, api_name="/sample")
        video = client.predict(handle_file(str(media / "clip.mp4")), "", api_name="/overlay")
    finally:
        demo.close()
    assert len(gallery) == 3 and all(Path(item["image"]).stat().st_size > 0 for item in gallery)
    assert Path(video["video"] if isinstance(video, dict) else video).stat().st_size > 0
    assert request_folders(private_tmp) == []  # gone, yet the visitor got every file


def test_uploads_and_served_files_expire(monkeypatch):
    import app.web
    from app.web import WebSettings, build_app, delete_cache

    monkeypatch.setattr(app.web, "tabs", lambda: [])  # the Blocks' own settings are what counts here

    assert delete_cache(WebSettings()) == (300, 3600)  # an hour, checked every 5 min
    assert delete_cache(WebSettings(keep_files_minutes=2)) == (30, 120)
    assert delete_cache(WebSettings(keep_files_minutes=0.001)) == (1, 1)
    demo = build_app(WebSettings(keep_files_minutes=10))
    assert demo.delete_cache == (150, 600)


# ------------------------------------------------------------------ 2. every bad input gets a message naming it


BAD_IMAGES = ("empty.png", "text.png", "truncated.png", "bomb.png")


@pytest.mark.parametrize("verb", ["meme", "reason", "generate"])
def test_broken_images_on_image_inputs_are_named(verb, media):
    from app.web import WebSettings, _checked_components, _input_component
    from gradio.data_classes import FileData

    app = apps()[verb]
    image = next(i for i in app.inputs if i.kind == "image")
    component = _input_component(image)
    assert isinstance(component, _checked_components()["Image"]) and component.get_block_name() == "image"
    from app import web

    assert not Path(web.__file__).with_suffix(".pyi").exists()  # gradio writes a stub per component class unless told not to
    for name in BAD_IMAGES:
        path = component.preprocess(FileData(path=str(media / name), orig_name=name))  # no PIL here: our reader decides
        assert path == str(media / name)
        message = message_of(lambda: run(app, values_for(app, **{image.name: path, "prompt": "a red star"})))
        assert_names(message, image.name, media)
        assert name in message


def run(app, values):
    from app.web import WebSettings, run_in_web

    return run_in_web(app, WebSettings(), values)


@pytest.mark.parametrize("verb", ["ask", "segment", "edit", "motion"])
def test_an_image_over_the_pixel_limit_is_named_on_video_inputs(verb, media):
    app = apps()[verb]
    message = message_of(lambda: run(app, values_for(app, video=str(media / "bomb.png"))))
    assert_names(message, "video", media)
    assert "bomb.png" in message


def test_video_tools_name_a_bomb_and_a_stream_that_breaks_mid_way(media):
    from app.web import WebSettings, _video_tools_tab

    tools = wired(lambda: _video_tools_tab(WebSettings()))["fns"]
    assert_names(message_of(lambda: tools["probe"](str(media / "bomb.png"))), "video", media)
    hole = str(media / "hole_1.mp4")
    assert tools["probe"](hole)["num_frames"] == 40  # it opens: the error comes while decoding
    for call in (lambda: deliver(tools["sample"](hole, 32)), lambda: deliver(tools["overlay"](hole, "x"))):
        message = message_of(call)
        assert_names(message, "video", media)
        assert "hole_1.mp4" in message and "could not be decoded" in message and "Errno" not in message, message


def test_numbers_that_are_not_numbers_are_named(media):
    from app.web import WebSettings, _setting_component, _video_tools_tab

    n = wired(lambda: _video_tools_tab(WebSettings()))["components"]["frames to sample"]
    tau = _setting_component(next(s for s in apps()["reason"].settings() if s.name == "tau"))
    for component, label in ((n, "frames to sample"), (tau, "tau")):
        for bad in (math.nan, math.inf, -math.inf, "abc", None, True, [1]):
            message = message_of(lambda: component.preprocess(bad))
            assert f"'{label}'" in message and "finite number" in message, message
        assert f"'{label}'" in message_of(lambda: component.preprocess(1e6))  # out of range: named too
    assert n.preprocess(4) == 4 and n.get_block_name() == "slider"
    number = _setting_component(next(s for s in apps()["ask"].settings() if s.name == "gamma"))
    assert number.get_block_name() == "number" and number.preprocess(2.5) == 2.5
    assert "'gamma'" in message_of(lambda: number.preprocess(math.nan))
    text = _setting_component(next(s for s in apps()["generate"].settings() if s.name == "negative_prompt"))
    assert text.get_block_name() == "textbox" and text.preprocess("blurry") == "blurry"  # not a number box


def test_a_string_boolean_is_refused_by_name():
    from app.web import _setting_component

    box = _setting_component(next(s for a in apps().values() for s in a.settings() if s.type is bool))
    assert box.get_block_name() == "checkbox" and box.preprocess(False) is False
    for bad in ("false", "no", 0, None):
        assert f"'{box.label}'" in message_of(lambda: box.preprocess(bad))


def test_long_texts_are_capped_like_the_cli(media):
    from app.web import WebSettings, _video_tools_tab

    reason = apps()["reason"]
    message = message_of(lambda: run(reason, values_for(reason, image=str(media / "good.png"), question="x" * 1_000_000)))
    assert "'question'" in message and "2,000" in message and len(message) < 200
    ask = apps()["ask"]
    message = message_of(lambda: run(ask, values_for(ask, video=str(media / "clip.mp4"), options="a\n" + "b" * 5000)))
    assert "'options'" in message and "per line" in message
    tools = wired(lambda: _video_tools_tab(WebSettings()))["fns"]
    t0 = time.perf_counter()
    message = message_of(lambda: deliver(tools["overlay"](str(media / "clip.mp4"), "y" * 1_000_000)))
    assert "'caption for the overlay'" in message and time.perf_counter() - t0 < 2


def test_an_expired_upload_asks_for_it_again(media, tmp_path):
    gone = tmp_path / "clip.mp4"
    app = apps()["ask"]
    message = message_of(lambda: run(app, values_for(app, video=str(gone))))
    assert "'video'" in message and "upload it again" in message and str(tmp_path) not in message


def test_an_unforeseen_failure_is_one_generic_line_and_a_logged_traceback(caplog):
    from app.web import RunControl, WebSettings, stream_run

    with caplog.at_level(logging.ERROR, logger="app.web"):
        message = message_of(lambda: list(stream_run(SLOW, WebSettings(), ("crash", 0.0), RunControl())))
    assert "internal error" in message and "/srv" not in message and "secret" not in message
    assert any(r.exc_info and "secret/model.bin" in str(r.exc_info[1]) for r in caplog.records)


# ------------------------------------------------------------------ 3. serve refuses bad limits before it starts


@pytest.mark.parametrize("argv, flag", [
    (["--max-file-size", "abc"], "--max-file-size"),
    (["--max-file-size", "-1"], "--max-file-size"),
    (["--max-file-size", "0mb"], "--max-file-size"),
    (["--max-file-size", "5 parsecs"], "--max-file-size"),
    (["--max-video-seconds", "nan"], "--max-video-seconds"),
    (["--max-video-seconds", "inf"], "--max-video-seconds"),
    (["--max-video-seconds", "-1"], "--max-video-seconds"),
    (["--max-video-seconds", "0"], "--max-video-seconds"),
    (["--keep-files", "nan"], "--keep-files"),
    (["--keep-files", "0"], "--keep-files"),
    (["--vlm", "EMPTY"], "--vlm"),
    (["--vlm", "CONFIG_ONLY"], "--vlm"),
    (["--vlm", "./no/such/folder"], "--vlm"),
    (["--vlm", "nobody/not-a-cached-model"], "--vlm"),
])
def test_serve_refuses_bad_settings_without_starting(argv, flag, tmp_path, monkeypatch, capsys):
    import app.web
    from app.cli import main

    (tmp_path / "empty").mkdir()
    (tmp_path / "config_only").mkdir()
    (tmp_path / "config_only" / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    argv = [str(tmp_path / a.lower()) if a in ("EMPTY", "CONFIG_ONLY") else a for a in argv]
    monkeypatch.setattr(app.web, "build_app", lambda *a, **k: pytest.fail("the server was started"))
    assert main(["serve", "--port", "7999", *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_serve_accepts_gradio_size_forms_and_real_checkpoints(tmp_path):
    from app.web import check_models, parse_file_size

    assert parse_file_size("500mb") == 500 * 1024**2 and parse_file_size("2GB") == 2 * 1024**3
    assert parse_file_size("1000") == 1000 == parse_file_size(1000) and parse_file_size("64 kb") == 64 * 1024
    vlm = tmp_path / "vlm"  # what `atelier train vlm --out DIR` leaves: its config and weights
    vlm.mkdir()
    (vlm / "config.json").write_text('{"model": "builtin-vlm"}')
    (vlm / "model.safetensors").write_bytes(b"")
    assert check_models(("builtin", str(vlm), str(vlm))) == ("builtin", str(vlm))


def test_serve_refuses_a_model_folder_that_is_no_vlm():
    """Every tab that offers a --vlm loads it as a VLM: a builtin instance-reasoner folder would fail on every request."""
    from pathlib import Path

    from app.web import check_models
    from core.errors import InputError

    instances = Path(__file__).resolve().parents[1] / "weights" / "builtin" / "instances"
    with pytest.raises(InputError, match="not a vision-language model"):
        check_models(("builtin", str(instances)))
