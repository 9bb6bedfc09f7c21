"""A config field declared once (``pipelines.base.setting``) appears in the CLI, batch manifests and
the web tab, and reaches the pipeline from each. The registry is the only wiring."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from pipelines.base import Pipeline, PipelineConfig, PipelineOutput, setting
from pipelines.registry import PIPELINE_APPS, Input, PipelineApp


@dataclass
class EchoConfig(PipelineConfig):
    times: int = setting(1, help="how often to say it", range=(1, 5))
    shout: bool = setting(False, help="say it in capitals")  # the "new" field under test


@dataclass(repr=False)
class EchoOutput(PipelineOutput):
    text: str = ""

    def summary(self) -> dict:
        return {"text": self.text}


class EchoPipeline(Pipeline):
    config_class = EchoConfig

    def __call__(self, word: str, generator=None, callback_on_step_end=None) -> EchoOutput:
        text = " ".join([word] * self.config.times)
        return EchoOutput(text=text.upper() if self.config.shout else text, config={"times": self.config.times})


APP = PipelineApp(
    verb="echo", name="echo", pipeline=f"{__name__}:EchoPipeline", help="say a word", description="Repeat a word.",
    inputs=(Input("word", "the word", flag="-w"),),
    run=lambda pipe, inputs, generator=None, callback=None: pipe(inputs["word"]),
    summarize=EchoOutput.summary, format=lambda s: s["text"],
    web_outputs=(("markdown", "text"),), web_present=lambda out, s: (s["text"],),
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(PIPELINE_APPS, "echo", f"{__name__}:APP")
    from app.batch import VERBS, pipeline_verb

    monkeypatch.setitem(VERBS, "echo", pipeline_verb(APP))  # what app.batch does for every registered app


def test_the_field_reaches_cli_batch_and_web(registered, capsys, tmp_path):
    from app.cli import main

    with pytest.raises(SystemExit):
        main(["echo", "--help"])
    assert "--shout" in capsys.readouterr().out
    assert main(["echo", "-w", "hi", "--shout", "--times", "2"]) == 0
    assert capsys.readouterr().out.strip() == "HI HI"

    from app.batch import run_batch

    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "a", "verb": "echo", "args": {"word": "hi", "shout": True}}) + "\n")
    assert run_batch(manifest, tmp_path / "out", progress=False).ok == 1
    assert json.loads((tmp_path / "out" / "a" / "result.json").read_text())["text"] == "HI"

    gr = pytest.importorskip("gradio")
    from app.web import WebSettings, pipeline_tab, run_in_web

    with gr.Blocks() as demo:
        pipeline_tab(APP, WebSettings())
    labels = [c.get("props", {}).get("label") for c in demo.config["components"]]
    assert "shout" in labels and "times" in labels
    assert run_in_web(APP, WebSettings(), ("hi", 1, True)) == ("HI",)
