"""benchmarks.common: the resumable row log, shard merge, interval tables and the Pareto plot."""

import argparse
import json

import numpy as np
import pytest

from benchmarks.common import (ROWS_FILE, ArgumentsDiffer, RowLog, accuracy_cell, describe, header_diff, in_range,
                               item_range, markdown_table, merge_rows, paired_bootstrap, paired_cell, pareto_front,
                               pareto_plot, read_rows, spearman)
from scorers.videoqa import accuracy, wilson_interval

HEADER = {"benchmark": "test", "vlm": "builtin", "grids": (6, 12), "probe_scales": [0.5]}


def item(i: int, n: int = 2) -> list[dict]:
    return [{"item": i, "method": f"m{j}", "correct": bool((i + j) % 2), "tflops": np.float64(0.5 + j)} for j in range(n)]


def test_rows_are_appended_and_a_rerun_skips_finished_items(tmp_path):
    log = RowLog(tmp_path, HEADER)
    assert log.todo(range(3)) == [0, 1, 2] and json.loads((tmp_path / "run.json").read_text())["grids"] == [6, 12]
    for i in log.todo(range(3)):
        log.append(item(i))
    again = RowLog(tmp_path, {**HEADER, "grids": [6, 12]})  # a tuple and its list are one argument
    assert again.todo(range(5)) == [3, 4] and again.rows == read_rows(tmp_path) == log.rows
    assert again.select(range(1, 2)) == json.loads(json.dumps(item(1)))  # plain Python values, as the file holds them
    assert (tmp_path / ROWS_FILE).read_text().count("\n") == 6


def test_resume_after_a_torn_last_line(tmp_path):
    log = RowLog(tmp_path, HEADER)
    for i in range(3):
        log.append(item(i))
    whole = (tmp_path / ROWS_FILE).read_text()
    # killed while writing item 3: its first row made it, the second is cut off
    torn = whole + json.dumps(item(3)[0]) + "\n" + json.dumps(item(3)[1])[:17]
    (tmp_path / ROWS_FILE).write_text(torn)
    assert [r["item"] for r in read_rows(tmp_path)] == [0, 0, 1, 1, 2, 2]  # item 3 may be short: dropped
    log = RowLog(tmp_path, HEADER)
    assert log.todo(range(5)) == [3, 4] and (tmp_path / ROWS_FILE).read_text() == whole  # the tail cut off the file
    log.append(item(3))
    assert [r["item"] for r in read_rows(tmp_path)] == [0, 0, 1, 1, 2, 2, 3, 3]
    # torn inside the first row of an item: the item before it goes too (a finished item run again at worst)
    (tmp_path / ROWS_FILE).write_text(whole + '{"item": 3, "met')
    assert RowLog(tmp_path, HEADER).todo(range(4)) == [2, 3]


def test_resume_with_other_arguments_is_refused_naming_them(tmp_path):
    RowLog(tmp_path, HEADER).append(item(0))
    with pytest.raises(ArgumentsDiffer) as e:
        RowLog(tmp_path, {**HEADER, "probe_scales": [1.0, 0.5], "seed": 3})
    msg = str(e.value)
    assert "--probe-scales 0.5 (now 1,0.5)" in msg and "--seed None (now 3)" in msg and "--vlm" not in msg
    assert "another --out" in msg and str(tmp_path) in msg
    assert header_diff({"a": 1}, {"a": 1}) == {} and describe({"max_options": (None, 4)}) == "--max-options None (now 4)"
    assert read_rows(tmp_path) == json.loads(json.dumps(item(0)))  # nothing touched


def test_merge_of_two_shards_dedupes_by_item_and_checks_headers(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder, items, header in ((a, [0, 1, 2], HEADER), (b, [2, 3], {**HEADER, "grids": [8]}), (c, [4], {**HEADER, "vlm": "other"})):
        log = RowLog(folder, header)
        for i in items:
            log.append(item(i, n=3 if folder == b else 2))
    rows = merge_rows([a, b], agree=("vlm",))
    assert [r["item"] for r in rows] == [0, 0, 1, 1, 2, 2, 3, 3, 3]  # item 2 from the first shard only
    assert [r["item"] for r in in_range(rows, (1, 3))] == [1, 1, 2, 2]
    # a finer key keeps what only a later shard has (here: its third method on item 2)
    finer = merge_rows([a, b], row_key=lambda r: (r["item"], r["method"]))
    assert [(r["item"], r["method"]) for r in finer if r["item"] == 2] == [(2, "m0"), (2, "m1"), (2, "m2")]
    with pytest.raises(ArgumentsDiffer, match=r"different --vlm \(--vlm builtin in .*a; --vlm other in .*c\)"):
        merge_rows([a, c], agree=("vlm", "seed"))
    assert len(merge_rows([a, tmp_path / "missing"])) == 6  # a folder with no rows adds none


def test_item_range_and_markdown_table():
    assert item_range("0:200") == (0, 200)
    for bad in ("3:1", "a:b", "7"):
        with pytest.raises(argparse.ArgumentTypeError, match="START"):
            item_range(bad)
    assert markdown_table(["K", "method"], [[12, "gridprobe"], [6, "full"]]) == [
        "| K | method |", "|---|---|", "| 12 | gridprobe |", "| 6 | full |"]


def test_wilson_cells_match_known_values():
    # Wilson 95% intervals (z = 1.95996): 8/10 -> [0.4902, 0.9433]; 0/10 -> [0, 0.2775]; 50/100 -> [0.4038, 0.5962]
    for (k, n), (low, high) in {(8, 10): (0.4902, 0.9433), (0, 10): (0.0, 0.2775), (50, 100): (0.4038, 0.5962)}.items():
        assert wilson_interval(k, n) == pytest.approx((low, high), abs=1e-4)
    assert accuracy_cell(accuracy([True] * 8 + [False] * 2).to_dict()) == "80.0 [49, 94]"
    assert accuracy_cell(accuracy([False] * 10).to_dict()) == "0.0 [0, 28]"


def test_paired_bootstrap_is_seeded_and_centred_on_the_mean_difference():
    rng = np.random.default_rng(3)
    a, b = rng.random(40) < 0.7, rng.random(40) < 0.5
    first = paired_bootstrap(a, b, seed=0)
    assert first == paired_bootstrap(a, b, seed=0)
    scores = rng.random(40), rng.random(40)  # continuous: another seed moves the interval
    assert paired_bootstrap(*scores, seed=0) != paired_bootstrap(*scores, seed=1)
    assert first["n"] == 40 and first["diff"] == pytest.approx(np.mean(a.astype(float) - b))
    assert first["low"] < first["diff"] < first["high"]
    # the same resamples as the scorer's percentile bootstrap of the differences
    from scorers.videoqa import bootstrap_interval

    assert (first["low"], first["high"]) == pytest.approx(bootstrap_interval(a.astype(float) - b, seed=0), abs=1e-12)
    same = paired_bootstrap([1, 0, 1], [1, 0, 1])
    assert (same["diff"], same["low"], same["high"]) == (0.0, 0.0, 0.0)
    assert paired_cell({"diff": 0.03, "low": -0.01, "high": 0.07}) == "+3.0 [-1.0, +7.0]"
    assert np.isnan(paired_bootstrap([], [])["diff"])


def test_spearman_and_pareto_front():
    assert spearman([1, 2, 3, 4], [10, 20, 20, 40]) == pytest.approx(np.corrcoef([1, 2, 3, 4], [1, 2.5, 2.5, 4])[0, 1])
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert pareto_front([(1, 50), (2, 40), (2, 60), (3, 60), (0.5, 10)]) == [(0.5, 10), (1, 50), (2, 60)]


def test_pareto_png_is_written(tmp_path):
    from PIL import Image

    colours = {"gridprobe": (214, 39, 40), "full_frame": (31, 119, 180)}
    points = [{"x": 0.02, "y": 0.6, "group": "gridprobe", "tag": "K12@0.5"},
              {"x": 0.04, "y": 0.55, "group": "full_frame", "tag": "K12"}, {"x": 0.0, "y": 0.1, "group": "x", "tag": "free"}]
    path = pareto_plot(points, tmp_path / "pareto.png", colours)
    img = np.asarray(Image.open(path).convert("RGB"))
    assert img.shape == (640, 1000, 3) and (img == (214, 39, 40)).all(-1).sum() > 20  # the GridProbe point, drawn
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pareto.png"]  # no temporary file left
    assert Image.open(pareto_plot([], tmp_path / "empty.png", colours)).size == (1000, 640)


def test_pareto_labels_are_never_drawn_over_one_another(tmp_path):
    from PIL import Image

    colours = {"gridprobe": (214, 39, 40)}

    def red(points) -> int:
        img = np.asarray(Image.open(pareto_plot(points, tmp_path / "p.png", colours)).convert("RGB")).astype(int)
        return int(((img[..., 0] - img[..., 1] > 60) & (img[..., 0] - img[..., 2] > 60)).sum())  # reddish, anti-aliased text too

    tag = "K12@0.25x0.5 max_frames=48,tie_break=spread"
    one = red([{"x": 0.02, "y": 0.6, "group": "gridprobe", "tag": tag}, {"x": 0.01, "y": 0.3, "group": "gridprobe", "tag": "low"}])
    dot = red([{"x": 0.02, "y": 0.6, "group": "gridprobe", "tag": ""}, {"x": 0.01, "y": 0.3, "group": "gridprobe", "tag": "low"}])
    # a second front point a hair costlier and better: its dot is drawn, its label (over the first) is not
    two = red([{"x": 0.02, "y": 0.6, "group": "gridprobe", "tag": tag}, {"x": 0.0201, "y": 0.601, "group": "gridprobe", "tag": tag[::-1]},
               {"x": 0.01, "y": 0.3, "group": "gridprobe", "tag": "low"}])
    assert one - dot > 100 and two - one < (one - dot) / 2


def test_the_threads_checks_interval_is_the_median_pair_ratios_bootstrap():
    from benchmarks.latency import median_ci

    assert median_ci([1.0] * 10) == [1.0, 1.0]
    ratios = [0.8, 0.9, 1.0, 1.1, 1.2, 0.95, 1.05, 1.0, 0.9, 1.1]
    low, high = median_ci(ratios)
    assert 0.8 <= low <= 1.0 <= high <= 1.2 and median_ci(ratios) == [low, high]  # seeded: a saved run recomputes exactly
