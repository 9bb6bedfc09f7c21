"""`atelier ask`, the batch verb `ask`, the GridProbe web tab, and the benchmark script at toy scale."""

import json
import sys

import numpy as np
import pytest

from app.batch import VERBS, run_batch
from app.cli import main
from pipelines.base import clear_caches
from core.video import write_video

ASK = ["-q", "Which object appears first?", "--options", "a red circle", "a green square", "a blue star"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    frames = np.zeros((30, 48, 64, 3), np.uint8)
    for i in range(30):
        frames[i, 10:30, i : i + 16] = 220
    return write_video(tmp_path_factory.mktemp("clip") / "c.mp4", frames, fps=10)


def test_cli_choices_come_from_the_config(capsys):
    from pipelines.gridprobe.pipeline import PROMPT_STYLES as styles
    from pipelines.gridprobe.selection import SELECTORS, TIE_BREAKS as ties

    with pytest.raises(SystemExit):
        main(["ask", "--help"])
    text = capsys.readouterr().out
    for choices in (sorted(SELECTORS), ties, styles):
        assert "{" + ",".join(choices) + "}" in text.replace(" ", "").replace("\n", "") or all(c in text for c in choices)
    assert "default 0.5" in text and "range 2..32" in text


def test_ask_json_and_saved_output(tiny_vlm_dirs, clip, tmp_path, capsys):
    vlm = str(tiny_vlm_dirs["qwen2.5-vl"])
    argv = ["ask", str(clip), *ASK, "--grid", "4", "--probe-scale", "0.5", "--vlm", vlm, "--json", "--no-progress",
            "-o", str(tmp_path / "out")]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["answer"] in "ABC" and sum(res["posterior"].values()) == pytest.approx(1.0, abs=1e-5)
    assert res["pool_size"] == 16 and len(res["frames"]) == res["m_eff"]
    assert res["tflops"]["full_frame"] > 0 and res["tflops"]["total"] > 0
    for name in ("result.json", "config.json", "importance_map.png", "selected_frames.png"):
        assert (tmp_path / "out" / name).is_file()
    assert json.loads((tmp_path / "out" / "config.json").read_text())["probe_scale"] == 0.5
    # human output, cross-model
    argv = ["ask", str(clip), *ASK, "-K", "2", "--vlm", vlm, "--answerer", str(tiny_vlm_dirs["qwen3-vl"]), "--no-progress"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("answer: ") and "full-frame" in text and "of 4 (M_eff)" in text


def test_ask_from_a_saved_pipeline(tiny_vlm_dirs, clip, tmp_path, capsys):
    from pipelines.gridprobe import GridProbeConfig, GridProbePipeline
    from planners.loading import load_vlm

    pipe = GridProbePipeline(GridProbeConfig(grid=2, probe_scale=0.5), selector=load_vlm(str(tiny_vlm_dirs["qwen3-vl"])))
    pipe.save_pretrained(tmp_path / "pipe")
    assert main(["ask", str(clip), *ASK, "--pipeline", str(tmp_path / "pipe"), "--json", "--no-progress",
                 "-o", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["pool_size"] == 4
    assert json.loads((tmp_path / "out" / "config.json").read_text())["probe_scale"] == 0.5  # the saved config
    assert main(["ask", str(clip), *ASK, "--pipeline", str(tmp_path / "pipe"), "--grid", "3", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["pool_size"] == 9  # flags override it


def test_ask_errors(tiny_vlm_dirs, clip, capsys, monkeypatch):
    vlm = str(tiny_vlm_dirs["qwen2.5-vl"])
    assert main(["ask", str(clip), *ASK, "--grid", "1", "--vlm", vlm]) == 2
    assert "grid=1" in capsys.readouterr().err
    assert main(["ask", str(clip), "-q", "q?", "--options", "only one", "--vlm", vlm]) == 2
    assert "options" in capsys.readouterr().err
    assert main(["ask", str(clip) + ".missing", *ASK, "--vlm", vlm]) == 1
    # no builtin VLM installed (simulated): a clear message and exit code 1
    monkeypatch.setitem(sys.modules, "planners.builtin", None)
    clear_caches()
    assert main(["ask", str(clip), *ASK]) == 1
    err = capsys.readouterr().err
    assert "builtin VLM is not available" in err and "--vlm PATH" in err and "make weights" in err


def test_ask_uses_the_builtin_vlm_by_default(clip, monkeypatch, capsys):
    import types

    from gridprobe_fakes import FakeVLM, holistic_rule

    seen = {}

    def load_builtin_vlm(device=None):
        seen["device"] = device
        return FakeVLM(holistic_rule(1))

    monkeypatch.setitem(sys.modules, "planners.builtin", types.SimpleNamespace(load_builtin_vlm=load_builtin_vlm))
    clear_caches()
    try:
        assert main(["ask", str(clip), *ASK, "--grid", "2", "--device", "cpu", "--json", "--no-progress"]) == 0
    finally:
        clear_caches()
    res = json.loads(capsys.readouterr().out)
    assert res["answer"] == "B" and res["m_eff"] == 4 and seen == {"device": "cpu"}


def test_batch_verb_ask(tiny_vlm_dirs, clip, tmp_path):
    assert "ask" in VERBS
    item = {"video": str(clip), "question": "Which?", "options": ["x", "y"], "grid": 2, "vlm": str(tiny_vlm_dirs["qwen3-vl"])}
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "q1", "verb": "ask", "args": item}) + "\n"
                        + json.dumps({"id": "bad", "verb": "ask", "args": {**item, "grid": 0}}) + "\n")
    s = run_batch(manifest, tmp_path / "out", progress=False)
    assert (s.ok, s.failed) == (1, 1)
    res = json.loads((tmp_path / "out" / "q1" / "result.json").read_text())
    assert res["answer"] in "AB" and res["m_eff"] <= 4
    assert (tmp_path / "out" / "q1" / "gridprobe" / "importance_map.png").is_file()
    assert res["files"]["result.json"].startswith(str(tmp_path / "out" / "q1"))


def test_web_tab_builds_and_answers(tiny_vlm_dirs, clip):
    gr = pytest.importorskip("gradio")
    from app.web import WebSettings, build_app, run_in_web, tabs
    from pipelines.registry import get_app

    assert "GridProbe QA" in [title for title, _ in tabs()]
    app = get_app("ask")
    vlm = str(tiny_vlm_dirs["qwen3-vl"])
    settings = WebSettings(models=("builtin", vlm))
    build_app(settings)
    names = [s.name for s in app.settings()]

    def values(question, options, **changes):
        chosen = [changes.get(n) for n in names]
        return (str(clip), question, options, *chosen, vlm, "")

    text, heat, strip, chart, summary = run_in_web(app, settings, values("Which?", "x\ny\n\nz\n", grid=2, probe_scale=0.5))
    assert summary["pool_size"] == 4 and text.startswith("### ") and "TFLOPs" in text
    assert heat.dtype == np.uint8 and heat.ndim == 3 and strip.shape[-1] == 3
    assert set(chart) == {"A. x", "B. y", "C. z"} and sum(chart.values()) == pytest.approx(1, abs=1e-5)
    assert app.web_check({"video": str(clip)}, {"grid": 12}) and "30 frames" in app.web_check({"video": str(clip)}, {"grid": 12})[0]
    assert app.web_check({"video": str(clip)}, {"grid": 4}) == []  # 16 <= 30 frames: no warning
    with pytest.raises(gr.Error, match="options") as e:
        run_in_web(app, settings, values("Which?", "only one", grid=2))
    assert str(clip.parent) not in str(e.value)  # no server paths
    with pytest.raises(gr.Error, match="question"):
        run_in_web(app, settings, values(" ", "a\nb", grid=2))
    with pytest.raises(gr.Error, match="probe_scale"):
        run_in_web(app, settings, values("Which?", "a\nb", grid=2, probe_scale=0.0))
    with pytest.raises(gr.Error, match="offers"):
        run_in_web(app, settings, (str(clip), "Which?", "a\nb", *[None] * len(names), "/etc", ""))


def test_benchmark_script_at_toy_scale(tiny_vlm_dirs, tmp_path):
    from PIL import Image

    from benchmarks.gridprobe import main as bench, spearman

    assert spearman([1, 2, 3, 4], [10, 20, 20, 40]) == pytest.approx(np.corrcoef([1, 2, 3, 4], [1, 2.5, 2.5, 4])[0, 1])
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    out = tmp_path / "bench"
    assert bench(["--vlm", str(tiny_vlm_dirs["qwen3-vl"]), "--n", "2", "--grids", "2", "--probe-scales", "1,0.5",
                  "--levels", "1", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    labels = {m["label"] for m in data["summary"]["methods"]}
    assert {"full_frame", "uniform_m", "gridprobe@1", "gridprobe@0.5", "probe_ensemble@0.5", "gridprobe@file"} <= labels
    assert "gridprobe through the file" in (out / "results.md").read_text()  # the user's path: the clip as an H.264 file
    assert len({r["item"] for r in data["rows"]}) == 2
    md = (out / "results.md").read_text()
    assert "| K | method |" in md and "Spearman" in md and "within each question kind" in md
    gp = next(m for m in data["summary"]["methods"] if m["method"] == "gridprobe")
    assert set(gp["spearman_meff_level_by_kind"]) == {r["kind"] for r in data["rows"]}
    assert Image.open(out / "pareto.png").size == (2000, 640)  # TFLOPs and wall-time panels
    # --methods and --budgets: only the asked methods, GridProbe under each budget on the same probes
    sweep = tmp_path / "sweep"
    assert bench(["--vlm", str(tiny_vlm_dirs["qwen3-vl"]), "--n", "1", "--grids", "2", "--probe-scales", "0.5", "--levels", "1",
                  "--methods", "gridprobe,full_frame", "--budgets", "gamma=6;max_frames=2,tie_break=spread", "--probe-batch", "1",
                  "--out", str(sweep)]) == 0
    data = json.loads((sweep / "results.json").read_text())
    assert {m["label"] for m in data["summary"]["methods"]} == {"full_frame", "gridprobe@0.5", "gridprobe@0.5/gamma=6",
                                                                 "gridprobe@0.5/max_frames=2,tie_break=spread", "gridprobe@file"}
    assert {d["gridprobe"] for d in data["summary"]["paired"]} == {"gridprobe@0.5", "gridprobe@0.5/gamma=6", "gridprobe@0.5/max_frames=2,tie_break=spread",
                                                                  "gridprobe@file"}
    assert "gridprobe (gamma=6)" in (sweep / "results.md").read_text()
    # squashed probes (HEIGHTxWIDTH fractions): labelled, merged and filtered like any scale
    squash = tmp_path / "squash"
    assert bench(["--vlm", str(tiny_vlm_dirs["qwen3-vl"]), "--n", "1", "--grids", "2", "--probe-scales", "0.5x1", "--levels", "1",
                  "--methods", "gridprobe", "--out", str(squash)]) == 0
    assert bench(["--merge", str(sweep), str(squash), "--probe-scales", "0.5x1", "--out", str(tmp_path / "sq_merged")]) == 0
    data = json.loads((tmp_path / "sq_merged" / "results.json").read_text())
    assert {m["label"] for m in data["summary"]["methods"]} == {"full_frame", "gridprobe@0.5x1", "gridprobe@file"}  # the headline stays
    assert data["meta"]["probe_scales"] == [[0.5, 1.0]] and "| 0.5x1 |" in (tmp_path / "sq_merged" / "results.md").read_text()
    for bad in (["--methods", "gridprobe,nope"], ["--budgets", "grid=3"], ["--budgets", "gamma=x"], ["--probe-scales", "0.5xx"], ["--probe-scales", "0.1x0.2x0.3"]):
        with pytest.raises(SystemExit):
            bench([*bad, "--n", "1", "--out", str(tmp_path / "bad")])
    # shards: a second process takes items 2-3; a re-run of the first shard skips its finished items
    shard = tmp_path / "shard"
    common = ["--vlm", str(tiny_vlm_dirs["qwen3-vl"]), "--grids", "2", "--levels", "1"]
    args = [*common, "--probe-scales", "1,0.5"]
    assert bench([*common, "--probe-scales", "0.5", "--n", "2", "--start", "2", "--out", str(shard)]) == 0
    lines = (out / "rows.jsonl").read_text().splitlines()
    assert bench([*args, "--n", "2", "--out", str(out)]) == 0
    assert (out / "rows.jsonl").read_text().splitlines() == lines  # nothing re-run
    merged = tmp_path / "merged"
    assert bench(["--merge", str(shard), str(out), "--out", str(merged)]) == 0
    data = json.loads((merged / "results.json").read_text())
    assert sorted({r["item"] for r in data["rows"]}) == [0, 1, 2, 3] and data["meta"]["n"] == 4
    assert data["meta"]["probe_scales"] == [1, 0.5]  # every shard's scales, not the first shard's
    # --probe-scales keeps one resolution's rows (and the scale-free baselines)
    assert bench(["--merge", str(shard), str(out), "--probe-scales", "0.5", "--out", str(merged)]) == 0
    data = json.loads((merged / "results.json").read_text())
    assert {r["probe_scale"] for r in data["rows"] if r["label"] != "gridprobe@file"} == {None, 0.5} and data["meta"]["probe_scales"] == [0.5]
    assert {m["label"] for m in data["summary"]["methods"]} >= {"full_frame", "gridprobe@0.5"}
    # --items keeps a range of questions (to compare K values on the same ones); bad ranges name the fix
    assert bench(["--merge", str(out), str(shard), "--items", "1:3", "--out", str(merged)]) == 0
    data = json.loads((merged / "results.json").read_text())
    assert sorted({r["item"] for r in data["rows"]}) == [1, 2] and data["meta"]["n"] == 2
    # --max-options keeps the answer among fewer choices (same clip and evidence)
    from benchmarks.gridprobe import _fewer_options

    rec = {"options": ["a", "b", "c", "d", "e", "f"], "answer": "e", "answer_index": 4}
    assert _fewer_options(rec, 4) == {"options": ["a", "b", "c", "e"], "answer": "e", "answer_index": 3}
    assert _fewer_options(rec, 5)["options"] == ["a", "b", "c", "d", "e"]
    with pytest.raises(SystemExit):
        bench([*args, "--n", "1", "--max-options", "1", "--out", str(tmp_path / "x")])
    for bad in ("3:1", "a:b", "7"):
        with pytest.raises(SystemExit):
            bench(["--merge", str(out), "--items", bad, "--out", str(merged)])
    with pytest.raises(SystemExit):
        bench(["--merge", str(out), "--items", "50:60", "--out", str(merged)])  # no rows there


def test_only_the_pool_frames_are_decoded_from_a_real_file(tmp_path, monkeypatch):
    """Through the real PyAV reader: of a 600-frame file, GridProbe converts exactly the K² pool
    frames to pixels (and never holds more than those in memory), whatever the probes and focus do."""
    from core import video as video_io
    from pipelines.gridprobe import GridProbeConfig, GridProbePipeline
    from pipelines.gridprobe.grid import GridLayout
    from tests.gridprobe_fakes import FakeVLM, holistic_rule

    frames = np.zeros((600, 32, 48, 3), np.uint8)
    frames[:, 8:24, :, 0] = (np.arange(600) % 200)[:, None, None]
    path = write_video(tmp_path / "long.mp4", frames, fps=24)
    converted: list[int] = []
    real_read = video_io._PyAVReader.read

    def counting_read(self, indices, size):
        converted.extend(indices)
        return real_read(self, indices, size)

    monkeypatch.setattr(video_io._PyAVReader, "read", counting_read)
    pipe = GridProbePipeline(GridProbeConfig(grid=4, probe_scale=0.5), selector=FakeVLM(holistic_rule(1)))
    pipe.set_progress_bar_config(disable=True)
    out = pipe(str(path), "q?", ["a", "b", "c"])
    assert converted == GridLayout(4).pool_indices(600) == out.pool
    assert len(converted) == 16 and out.answer_index == 1


def test_the_default_rule_takes_the_largest_saving_within_a_point_of_full_frame():
    from benchmarks.gridprobe import default_rule

    def row(label, diff, ratio, vs="full_frame", kind="all"):
        return {"K": 12, "gridprobe": label, "vs": vs, "kind": kind, "n": 500, "diff_pp": diff, "ci_pp": [diff - 2, diff + 2],
                "tflops_ratio": ratio}

    paired = [row("gridprobe@0.5", 3.0, 1.9), row("gridprobe@0.5/max_frames=32", -0.9, 2.46), row("gridprobe@0.25", -3.0, 2.95),
              row("gridprobe@0.25/gamma=6", -0.5, 2.46), row("gridprobe@0.5/gamma=9", 5.0, 9.0, vs="uniform_meff@0.5"),
              row("gridprobe@0.5/max_frames=64", 9.0, 9.0, kind="counting")]
    rule = default_rule(paired)
    assert rule["label"] == "gridprobe@0.25/gamma=6" and not rule["meets_saving"]  # a tie in saving goes to the more accurate
    assert default_rule(paired, max_loss_pp=5.0)["label"] == "gridprobe@0.25" and default_rule(paired, max_loss_pp=5.0)["tflops_ratio"] == 2.95
    assert default_rule([row("gridprobe@0.25", -3.0, 3.5)]) is None
    assert default_rule([row("gridprobe@0.25", -0.2, 3.5)])["meets_saving"]
