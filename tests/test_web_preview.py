"""The web tab's live preview and Cancel: step infos reach the callback, the Run generator yields a
preview before the outputs, and Cancel stops the pipeline itself (not only the page) with a message."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from core.errors import InputError
from pipelines.base import Pipeline, PipelineConfig, PipelineOutput, setting
from pipelines.registry import Input, PipelineApp

gr = pytest.importorskip("gradio")


@dataclass
class TickConfig(PipelineConfig):
    steps: int = setting(5, help="loop steps", range=(1, 1000))
    delay: float = setting(0.0, help="seconds per step", range=(0.0, 10.0))


@dataclass(repr=False)
class TickOutput(PipelineOutput):
    text: str = ""
    steps_done: int = 0


class TickPipeline(Pipeline):
    """Counts steps; each step's info carries a tiny image whose value is the step."""

    config_class = TickConfig
    done: ClassVar[list[int]] = []  # steps that ran, across calls (the test resets it)

    def __call__(self, word: str, generator=None, callback_on_step_end=None) -> TickOutput:
        self._begin_call()
        if word == "boom":
            raise InputError("word", "/srv/atelier/secret/boom.txt", "no such word")
        for step in range(self.config.steps):
            time.sleep(self.config.delay)
            TickPipeline.done.append(step)
            self.step_end(callback_on_step_end, step, {"image": np.full((2, 3, 3), step, np.uint8)})
        return TickOutput(text=f"{word} x{self.config.steps}", steps_done=self.config.steps)


def make_app(preview: bool = True) -> PipelineApp:
    return PipelineApp(
        verb="tick", name="tick", pipeline=f"{__name__}:TickPipeline", help="count", description="Count steps.",
        inputs=(Input("word", "a word"),),
        run=lambda pipe, inputs, generator=None, callback=None: pipe(inputs["word"], callback_on_step_end=callback),
        summarize=lambda out: {"text": out.text}, format=lambda s: s["text"],
        web_outputs=(("markdown", "text"),), web_present=lambda out, s: (s["text"],),
        web_preview=(lambda info: info["image"]) if preview else None,
    )


@pytest.fixture(autouse=True)
def fresh_counter():
    TickPipeline.done = []


def test_run_in_web_passes_step_infos_to_the_callback():
    from app.web import WebSettings, run_in_web

    seen = []
    out = run_in_web(make_app(), WebSettings(), ("hi", 3, 0.0), callback=lambda pipe, step, info: seen.append((step, info)))
    assert out == ("hi x3",)
    assert [s for s, _ in seen] == [0, 1, 2] and seen[2][1]["image"].dtype == np.uint8


def test_the_generator_yields_a_preview_before_the_outputs():
    from app.web import RunControl, WebSettings, stream_run

    updates = list(stream_run(make_app(), WebSettings(), ("hi", 6, 0.05), RunControl(), interval=0.02))
    *during, final = updates
    assert during, "no preview while it ran"
    assert all(isinstance(u[0], np.ndarray) and u[0].shape == (2, 3, 3) and u[1] == gr.update() for u in during)
    assert final[0] == gr.update() and final[1] == "hi x6"  # the preview keeps its last image


def test_without_a_preview_only_the_outputs_come():
    from app.web import RunControl, WebSettings, stream_run

    assert list(stream_run(make_app(preview=False), WebSettings(), ("hi", 3, 0.01), RunControl(), interval=0.01)) == [("hi x3",)]


def test_cancel_stops_the_pipeline_with_a_message_not_a_traceback():
    from app.web import RunControl, WebSettings, stream_run

    state = RunControl()
    state.start()  # what the tab's clear step does
    run = stream_run(make_app(), WebSettings(), ("hi", 200, 0.01), state, interval=0.02)
    first = next(run)  # a preview: the pipeline is running
    assert isinstance(first[0], np.ndarray)
    state.cancel()  # what the Cancel button does (from another request thread)
    with pytest.warns(UserWarning, match=r"Cancelled after step \d+"):  # gr.Warning outside a request
        rest = list(run)
    assert rest[-1] == (gr.update(), None)  # outputs left empty
    assert 0 < len(TickPipeline.done) < 200  # it stopped computing, not only the page
    assert not state.active and state.pipe is None
    time.sleep(0.05)
    assert len(TickPipeline.done) == len(set(TickPipeline.done)) < 200  # and nothing goes on in the background


def test_cancel_before_it_starts_and_when_idle():
    from app.web import RunControl, WebSettings, stream_run

    state = RunControl()
    state.cancel()  # idle: nothing to cancel, the next run is unaffected
    assert list(stream_run(make_app(preview=False), WebSettings(), ("hi", 2, 0.0), state)) == [("hi x2",)]
    state.start()
    state.cancel()  # pressed while the run waited in the queue
    with pytest.warns(UserWarning, match="before it started"):
        assert list(stream_run(make_app(), WebSettings(), ("hi", 2, 0.0), state)) == [(gr.update(), None)]
    assert TickPipeline.done == [0, 1]


def test_errors_in_the_thread_reach_the_user_as_before():
    from app.web import RunControl, WebSettings, stream_run

    with pytest.raises(gr.Error, match="word"):
        list(stream_run(make_app(), WebSettings(), (" ", 2, 0.0), RunControl()))  # a required input left empty
    with pytest.raises(gr.Error, match="no such word") as e:  # raised by the pipeline, in the worker thread
        list(stream_run(make_app(), WebSettings(), ("boom", 2, 0.0), RunControl()))
    assert "/srv" not in str(e.value) and "boom.txt" in str(e.value)


def test_a_closed_generator_interrupts_the_pipeline():
    from app.web import RunControl, WebSettings, stream_run

    run = stream_run(make_app(), WebSettings(), ("hi", 200, 0.01), RunControl(), interval=0.02)
    next(run)
    run.close()  # the page went away
    deadline = time.time() + 2
    while any(t.name == "web-tick" for t in threading.enumerate()) and time.time() < deadline:
        time.sleep(0.01)
    assert len(TickPipeline.done) < 200


def test_every_tab_has_cancel_and_a_preview_when_declared():
    from app.web import WebSettings, pipeline_tab

    for preview in (True, False):
        with gr.Blocks() as demo:
            pipeline_tab(make_app(preview), WebSettings())
        props = [c.get("props", {}) for c in demo.config["components"]]
        assert "Cancel" in [p.get("value") for p in props]
        assert ("preview (while it runs)" in [p.get("label") for p in props]) is preview
        assert "tick" in [d.get("api_name") for d in demo.config["dependencies"]]


def test_cancel_through_a_real_server(monkeypatch):
    """The Cancel request reaches the same session's run (gr.State), and the run's tqdm bar shows."""
    from gradio_client import Client

    from app.web import WebSettings, pipeline_tab

    def counting(self, word, generator=None, callback_on_step_end=None):  # the loop under a progress bar
        for step in self.progress_bar(range(self.config.steps)):
            time.sleep(self.config.delay)
            TickPipeline.done.append(step)
            self.step_end(callback_on_step_end, step, {"image": np.zeros((2, 2, 3), np.uint8)})
        return TickOutput(text=word)

    with gr.Blocks() as demo:
        pipeline_tab(make_app(preview=False), WebSettings())
    demo.queue(default_concurrency_limit=1)
    monkeypatch.setattr(TickPipeline, "__call__", counting)
    demo.launch(prevent_thread_lock=True, quiet=True)
    try:
        client = Client(demo.local_url, verbose=False)
        assert client.predict(api_name="/clear") is None  # what the Run button does first
        job = client.submit("hi", 1000, 0.01, api_name="/tick")
        deadline = time.time() + 20
        while len(TickPipeline.done) < 5 and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        progress = job.status().progress_data
        client.predict(api_name="/cancel_tick")
        assert job.result(timeout=20) is None  # the one output, left empty
        assert 5 <= len(TickPipeline.done) < 1000
        assert progress and progress[0].length == 1000
    finally:
        demo.close()


def test_an_optional_setting_is_a_text_box_that_may_stay_empty():
    """An optional bounded setting (None = the pipeline's rule) must be able to send "empty": a slider always
    holds a value (its minimum would give a 1-frame, 1-step run), and gradio's number box sends 0 once its
    panel opens, which its own minimum check refuses before the run starts. The text is parsed like a
    manifest's value: empty -> the default, a number -> that number, anything else -> an error naming it."""
    gr = pytest.importorskip("gradio")
    from app.web import _setting_component
    from core.errors import InputError
    from pipelines.registry import Setting

    frames = Setting("num_frames", int, None, "frames", range=(1, 241), optional=True)
    box = _setting_component(frames)
    assert isinstance(box, gr.Textbox) and box.value == "" and "1..241" in box.info
    assert frames.parse("") is None and frames.parse(" 12 ") == 12
    with pytest.raises(InputError, match="num_frames"):
        frames.parse("twelve")
    assert isinstance(_setting_component(Setting("grid", int, 8, "grid", range=(2, 32))), gr.Slider)


def test_one_run_at_a_time_across_every_tab():
    """The web demo's concurrency, as docs/ARCHITECTURE.md states it: every tab's run event joins one concurrency group of
    limit 1 (runs share loaded models and one device; per-call settings hold for the duration of a call), at most
    QUEUE_SIZE wait, and cancel is never queued behind a run."""
    from app.web import QUEUE_SIZE, RUN_CONCURRENCY, WebSettings, build_app

    from pipelines.registry import apps

    demo = build_app(WebSettings())
    verbs = {a.verb for a in apps().values()}
    runs = [f for f in demo.fns.values() if f.api_name in verbs]
    assert {f.api_name for f in runs} == verbs  # every pipeline tab's run
    assert all(f.concurrency_id == RUN_CONCURRENCY and f.concurrency_limit == 1 for f in runs), \
        [(f.api_name, f.concurrency_id, f.concurrency_limit) for f in runs]
    cancels = [f for f in demo.fns.values() if f.api_name and f.api_name.startswith("cancel_")]
    assert cancels and not any(f.queue for f in cancels)
    assert demo._queue.max_size == QUEUE_SIZE
