"""`atelier generate` / `atelier edit` on the shipped builtin models: folders and `-o NAME.mp4`, the batch
verbs, the web tab's run with its preview, and the benchmark script at toy scale."""

import json

import numpy as np
import pytest

from app.batch import run_batch
from app.cli import main
from core.video import Video, write_video

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = ["--steps", "2", "--planning-steps", "2", "--no-progress"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    frames = np.full((20, 48, 64, 3), 40, np.uint8)
    for i in range(20):
        frames[i, 12:28, 2 + 2 * i : 18 + 2 * i] = (40, 60, 220)
    return write_video(tmp_path_factory.mktemp("clip") / "blue square.mp4", frames, fps=12)


def test_generate_to_a_folder_and_to_an_mp4(tmp_path, capsys):
    assert main(["generate", "a red star bouncing to the left", "--seed", "3", "--json", "-o", str(tmp_path / "gen"), *FAST]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["task"] == "t2v" and res["seed"] == 3 and res["plan_grid"] == [4, 8, 8] and res["frames"] == 16
    for name in ("video.mp4", "plan.png", "frames.png", "plan_tokens.npy", "result.json", "config.json"):
        assert (tmp_path / "gen" / name).is_file(), name
    assert json.loads((tmp_path / "gen" / "config.json").read_text())["steps"] == 2
    assert main(["generate", "a red star bouncing to the left", "--seed", "3", "-o", str(tmp_path / "star.mp4"), *FAST]) == 0
    assert "star.mp4" in capsys.readouterr().out
    with Video(tmp_path / "star.mp4") as v:
        assert len(v) == 16 and (v.info.height, v.info.width) == (256, 256)  # a 64x64 clip written 4x (core.video.viewable)
    assert (tmp_path / "star" / "plan.png").is_file()
    # a second run may replace the mp4 it wrote, never someone else's
    assert main(["generate", "a red star", "--seed", "3", "-o", str(tmp_path / "star.mp4"), *FAST]) == 0
    (tmp_path / "mine.mp4").write_bytes(b"not ours")
    assert main(["generate", "a red star", "-o", str(tmp_path / "mine.mp4"), *FAST]) == 2
    assert (tmp_path / "mine.mp4").read_bytes() == b"not ours"


def test_edit_and_reference_verbs_in_a_batch(clip, tmp_path):
    from PIL import Image

    ref = tmp_path / "ref.png"
    Image.fromarray(np.full((32, 32, 3), (220, 40, 40), np.uint8)).save(ref)
    fast = {"steps": 2, "planning_steps": 2, "seed": 0, "progress": False}
    items = [{"id": "edit", "verb": "edit", "args": {"video": str(clip), "instruction": "make the blue square green", **fast}},
             {"id": "rv2v", "verb": "edit", "args": {"video": str(clip), "instruction": "replace it with this", "references": [str(ref)], **fast}},
             {"id": "r2v", "verb": "generate", "args": {"prompt": "the object in image 1 moves right", "references": [str(ref)], **fast}},
             {"id": "six", "verb": "generate", "args": {"prompt": "dance", "references": [str(ref)] * 6, **fast}}]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(it) + "\n" for it in items))
    summary = run_batch(manifest, tmp_path / "out", progress=False)
    assert (summary.ok, summary.failed) == (3, 1)
    status = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "out" / "status.jsonl").read_text().splitlines()}
    assert "1 to 5" in status["six"]["error"]
    tasks = {k: json.loads((tmp_path / "out" / k / "result.json").read_text())["task"] for k in ("edit", "rv2v", "r2v")}
    assert tasks == {"edit": "v2v", "rv2v": "rv2v", "r2v": "r2v"}
    # an edit saves its source above its result; a generation has no source to show
    assert (tmp_path / "out" / "edit" / "bernini" / "source_and_result.png").is_file()
    assert not (tmp_path / "out" / "r2v" / "bernini" / "source_and_result.png").exists()


def test_web_run_shows_previews_then_the_result():
    pytest.importorskip("gradio")
    from app.web import RunControl, WebSettings, stream_run
    from pipelines.registry import get_app

    app = get_app("generate")
    names = [s.name for s in app.settings()]
    values = ["a red star bouncing to the left", None, None] + [2 if n in ("steps", "planning_steps") else None for n in names] + ["", "", ""]
    updates = list(stream_run(app, WebSettings(), tuple(values), RunControl(), interval=0.05))
    final = updates[-1]
    assert len(final) == 1 + len(app.web_outputs)
    text, video, plan, frames, details = final[1:]
    assert "t2v" in text and video.endswith(".mp4") and plan.ndim == 3 and frames.ndim == 3 and details["frames"] == 16


def test_benchmark_at_toy_scale(tmp_path):
    from benchmarks.bernini import main as bench

    out = tmp_path / "bench"
    assert bench(["--n", "1", "--tasks", "t2v,v2v", "--methods", "bernini,no_plan,copy_source,plan_rerank", "--plan-candidates", "2",
                  "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert {r["key"] for r in res["rows"]} == {"t2v:0:bernini", "t2v:0:no_plan", "v2v:0:bernini", "v2v:0:no_plan", "v2v:0:copy_source",
                                               "t2v:0:plan_rerank", "v2v:0:plan_rerank"}
    assert res["summary"]["v2v/copy_source"]["psnr_outside_edit"] == 60.0
    assert "t2v/plan_rerank-bernini" in res["summary"]
    with pytest.raises(SystemExit):
        bench(["--n", "1", "--methods", "plan_rerank", "--plan-candidates", "0", "--out", str(out / "bad")])


def test_benchmark_grades_an_edit_against_its_own_splits_region(tmp_path, monkeypatch):
    """A VAL edit's "PSNR outside the edit" excludes that VAL item's edited object, not the TEST item's of the same index."""
    import training.bernini_data as data
    from benchmarks.bernini import main as bench

    seen, real = [], data.edit_region
    monkeypatch.setattr(data, "edit_region", lambda split, *a, **k: seen.append(split) or real(split, *a, **k))
    assert bench(["--n", "1", "--split", "val", "--tasks", "v2v", "--methods", "copy_source", "--out", str(tmp_path / "b")]) == 0
    assert seen == ["val"]


def test_benchmark_merges_shards_of_other_tasks_and_refuses_other_settings(tmp_path):
    from benchmarks.bernini import main as bench

    a, b = tmp_path / "a", tmp_path / "b"
    assert bench(["--n", "1", "--tasks", "v2v", "--methods", "copy_source", "--out", str(a)]) == 0
    assert bench(["--start", "1", "--n", "1", "--tasks", "v2v,t2v", "--methods", "copy_source", "--out", str(b)]) == 0
    assert bench(["--merge", str(a), str(b), "--out", str(tmp_path / "m")]) == 0  # rows are keyed by task: other --tasks merge
    res = json.loads((tmp_path / "m" / "results.json").read_text())
    assert sorted(r["key"] for r in res["rows"]) == ["v2v:0:copy_source", "v2v:1:copy_source"]
    # --versus: every attribute paired by clip against another run on the same items (here the run itself: no change)
    assert bench(["--merge", str(a), "--versus", str(a), "--out", str(tmp_path / "v")]) == 0
    vs = json.loads((tmp_path / "v" / "results.json").read_text())["summary"]["versus"]
    assert vs["v2v/copy_source/color"]["n"] == 1 and vs["v2v/copy_source/color"]["diff"] == 0.0 and "v2v/copy_source/asked" in vs
    with pytest.raises(SystemExit):
        bench(["--merge", str(a), "--versus", str(tmp_path / "nothing"), "--out", str(tmp_path / "v2")])
    header = json.loads((b / "run.json").read_text())
    (b / "run.json").write_text(json.dumps({**header, "planner": "elsewhere"}))
    with pytest.raises(SystemExit):  # another planner's rows: a clear error, no traceback
        bench(["--merge", str(a), str(b), "--out", str(tmp_path / "m2")])
    assert not (tmp_path / "m2").exists()


def test_planner_settings_parse_and_name_a_bad_field():
    from benchmarks.planner_settings import FIELDS, parse_settings

    assert parse_settings("planning_steps=4;txt_cfg=2.5,img_cfg=2;", FIELDS) == [{"planning_steps": 4.0}, {"txt_cfg": 2.5, "img_cfg": 2.0}]
    for bad in ("steps=4", "txt_cfg", "txt_cfg=high"):
        with pytest.raises(SystemExit, match="invalid --settings"):
            parse_settings(bad, FIELDS)


def test_planner_settings_reads_plans_through_a_renderers_draft(tmp_path):
    from benchmarks.planner_settings import main as settings
    from renderers.builtin import BuiltinRenderer, BuiltinRendererConfig

    tiny = dict(width=32, depth=2, heads=2, steps=2)
    BuiltinRenderer(BuiltinRendererConfig(**tiny)).save_pretrained(tmp_path / "plain")
    with pytest.raises(SystemExit, match="--draft"):  # no plan draft: refused before any planning
        settings(["--n", "1", "--settings", "", "--draft", str(tmp_path / "plain"), "--out", str(tmp_path / "bad")])
    BuiltinRenderer(BuiltinRendererConfig(**tiny, plan_draft=16, draft_kind="conv")).save_pretrained(tmp_path / "draft")
    assert settings(["--n", "1", "--settings", "", "--draft", str(tmp_path / "draft"), "--out", str(tmp_path / "out")]) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {r["setting"] for r in res["rows"]} == {"truth", "saved"} and len(res["rows"]) == 6
    for row in res["rows"]:
        assert all(0.0 <= row[a] <= 1.0 for a in ("color", "shape", "direction", "size"))
    assert set(res["summary"]["truth/t2v"]["drafted"]) == {"color", "shape", "direction", "size"}
    assert "| truth | t2v | 1 |" in (tmp_path / "out" / "results.md").read_text()
    assert settings(["--n", "1", "--settings", "", "--tasks", "t2v", "--draft", str(tmp_path / "draft"), "--out", str(tmp_path / "t2v")]) == 0
    res = json.loads((tmp_path / "t2v" / "results.json").read_text())
    assert {r["task"] for r in res["rows"]} == {"t2v"} and len(res["rows"]) == 2
    with pytest.raises(SystemExit):
        settings(["--n", "1", "--tasks", "t2v,x2v", "--out", str(tmp_path / "bad_task")])


def test_direction_ceiling_counts_what_the_captions_say():
    """The t2v direction bound: a bounce / circle / stop-and-go is captioned in words that do not depend on where it
    ends, a linear or accelerating mover by its direction; the ceiling adds the best per-motion guesses."""
    from benchmarks.bernini import direction_ceiling
    from training.bernini_data import world_sample
    from worldgen.captions import _MOTION_PHRASES, _MOVES

    items = range(12)
    c = direction_ceiling("test", 0, items)
    unstated = {k: sum(v.values()) for k, v in c["unstated"].items()}
    assert set(unstated) <= {"bounce", "circular", "stop_and_go"}
    assert c["graded_objects"] == c["stated"] + sum(unstated.values())
    hits = sum(c["unstated"][k][g] for k, g in c["best_guesses"].items())
    assert c["ceiling"] == round((c["stated"] + hits) / c["graded_objects"], 4) < 1
    for i in items:  # the premise, from the captions themselves
        rec = world_sample("t2v", "test", 0, i).record
        text = rec["caption"].lower()
        for o in rec["attributes"]["objects"]:
            if o.get("motion") in unstated:
                assert any(p in text for p in _MOTION_PHRASES[o["motion"]])
            elif o.get("motion") in ("linear", "accelerate") and o["direction"]:
                assert any(p in text for p in _MOVES[o["direction"]])
