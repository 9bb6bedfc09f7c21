"""`atelier meme` on the shipped builtin models: files, --json, clear errors for bad images, topics and counts,
the batch verb, the web tab's ranked gallery with expandable reasoning, `atelier train humor-*`'s refusals and
the benchmark at toy scale."""

import json

import numpy as np
import pytest
from PIL import Image

from app.batch import run_batch
from app.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = ["-n", "2", "--no-progress"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    from worldgen.tasks import meme

    path = tmp_path_factory.mktemp("img") / "chase template.png"
    Image.fromarray(meme.generate(7).images["still"]).save(path)
    return path


def test_meme_writes_ranked_memes_and_their_reasoning(template, tmp_path, capsys):
    out = tmp_path / "memes"
    assert main(["meme", str(template), "--topic", "mondays", "--seed", "3", "--json", "-o", str(out), *FAST]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["seed"] == 3 and res["topic"] == "mondays" and 1 <= len(res["memes"]) <= 2
    best = res["memes"][0]
    assert best["rank"] == 1 and len(best["boxes"]) == 2 and len(best["paths"]) == 3 and best["anchored_path"] in (1, 2, 3)
    for name in ("meme_1.png", "gallery.png", "image.png", "result.json", "config.json"):
        assert (out / name).is_file(), name
    assert Image.open(out / "meme_1.png").size[0] >= 384
    # the same seed gives the same memes
    assert main(["meme", str(template), "--topic", "mondays", "--seed", "3", "--json", *FAST]) == 0
    assert json.loads(capsys.readouterr().out)["memes"] == res["memes"]


@pytest.mark.parametrize("argv, names", [
    (["-n", "0"], "num_memes"), (["-n", "500"], "num_memes"), (["--topic", ""], "topic"), (["--topic", "x" * 300], "topic"),
    (["--num-paths", "9"], "num_paths"), (["--ranking", "elo"], "ranking")])
def test_bad_counts_and_topics_are_one_line_errors(template, argv, names, capsys):
    try:
        code = main(["meme", str(template), *argv, "--no-progress"])
    except SystemExit as e:  # argparse's own checks (choices)
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and names in err.strip().splitlines()[-1]


def test_an_image_that_cannot_be_read_is_named(tmp_path, capsys):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG not really")
    code = main(["meme", str(bad), *FAST])
    err = capsys.readouterr().err
    assert code in (1, 2) and "broken.png" in err and "Traceback" not in err


def test_the_batch_verb_isolates_a_bad_item(template, tmp_path):
    items = [{"id": "ok", "verb": "meme", "args": {"image": str(template), "num_memes": 1, "seed": 0, "progress": False}},
             {"id": "empty-topic", "verb": "meme", "args": {"image": str(template), "topic": " ", "progress": False}}]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(it) + "\n" for it in items))
    summary = run_batch(manifest, tmp_path / "out", progress=False)
    assert (summary.ok, summary.failed) == (1, 1)
    saved = tmp_path / "out" / "ok" / "humor"
    assert (saved / "image.png").is_file() and len(json.loads((saved / "result.json").read_text())["captions"]) <= 1


def test_web_run_shows_a_ranked_gallery_with_expandable_reasoning(template):
    pytest.importorskip("gradio")
    from app.web import RunControl, WebSettings, stream_run
    from pipelines.registry import get_app

    app = get_app("meme")
    names = [s.name for s in app.settings()]
    preset = {"num_memes": 2}
    values = [str(template), ""] + [preset.get(n) for n in names] + ["builtin", "builtin"]
    gallery, text, details = list(stream_run(app, WebSettings(), tuple(values), RunControl(), interval=0.05))[-1]
    assert gallery and gallery[0][1].startswith("#1") and gallery[0][0].ndim == 3
    assert "<details>" in text and "(anchored)" in text and details["memes"][0]["rank"] == 1


def test_train_refuses_a_folder_that_is_not_a_humor_run(tmp_path, capsys):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    assert main(["train", "humor-rm", "--out", str(tmp_path / "other")]) == 2
    assert "not an earlier `atelier train humor-rm` run" in capsys.readouterr().err
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_benchmark_at_toy_scale(tmp_path):
    from benchmarks.humor import main as bench

    out = tmp_path / "bench"
    assert bench(["--n", "1", "--samples", "2", "--methods", "direct,multi", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert {r["method"] for r in res["rows"]} == {"direct", "multi", "rm"}
    assert 0 <= res["summary"]["multi"]["valid"] <= 1 and np.isfinite(res["summary"]["rm"]["accuracy_seen"])
    for r in res["rows"]:  # the reward model's ordering of each writer's own samples
        if r["method"] != "rm":
            assert 0 <= r["rm_hits"] <= r["rm_pairs"] <= 1  # 2 samples: at most one pair
    # the CoT checks and the topic word ride on every row; an anchored method grades its base method's very samples
    multi = next(r for r in res["rows"] if r["method"] == "multi")
    assert multi["topic_word"] and len(multi["texts"]) == 2 and all(k in multi for k in ("topic", "anchored", "consistent", "described"))
    assert "consistent crowd+hide" in (out / "results.md").read_text()
    # a second run of another method on the same scene merges in beside the first (one row per scene and method)
    other = tmp_path / "bench_single"
    assert bench(["--n", "1", "--samples", "2", "--methods", "single", "--out", str(other)]) == 0
    merged = tmp_path / "merged"
    assert bench(["--merge", str(out), str(other), "--out", str(merged)]) == 0
    rows = json.loads((merged / "results.json").read_text())["rows"]
    assert sorted(r["method"] for r in rows) == ["direct", "multi", "rm", "single"]
    # --versus compares each method both runs have, paired by scene (a run against itself: no difference)
    assert bench(["--merge", str(out), "--versus", str(merged), "--out", str(tmp_path / "versus")]) == 0
    vs = json.loads((tmp_path / "versus" / "results.json").read_text())["summary"]["versus"]
    assert vs["multi:win"]["diff"] == 0 and vs["multi:win"]["n"] == 1 and not any(k.startswith("single:") for k in vs)
