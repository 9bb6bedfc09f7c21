"""Video QA scoring: NExT-QA accuracy matches the published numbers; intervals and grouped reports."""

import csv
import json

import numpy as np
import pytest

from core.errors import InputError
from scorers.videoqa import (accuracy, accuracy_report, bootstrap_interval, format_nextqa, load_nextqa_questions,
                             nextqa_accuracy, wilson_interval)
from tests.shared_data import DATA, need

NEXTQA = DATA / "nextqa_val_mc"

PUBLISHED = {"all": 49.74, "C": 46.26, "T": 50.74, "D": 59.33,
             "CW": 46.99, "CH": 44.22, "TN": 49.53, "TC": 52.49, "DC": 44.07, "DL": 72.54, "DO": 55.41}
COUNTS = {"all": 4996, "C": 2607, "T": 1612, "D": 777, "CW": 1924, "CH": 683, "TN": 949, "TC": 663, "DC": 177, "DL": 295, "DO": 305}


def test_nextqa_reproduces_the_published_hga_accuracy():
    csv_path = need(NEXTQA / "val.csv")
    preds = need(NEXTQA / "HGA-bert-ft-h256-val.json")
    result = nextqa_accuracy(csv_path, preds)
    assert {k: round(result[k].percent, 2) for k in PUBLISHED} == PUBLISHED
    assert {k: result[k].n for k in COUNTS} == COUNTS
    assert result["all"].low < result["all"].value < result["all"].high
    text = format_nextqa(result)
    assert text.splitlines()[0].startswith("Why\tHow\tBef&Aft") and text.endswith("Acc: 49.74")


def test_nextqa_grouping_rules(tmp_path):
    rows = [("v1", 0, "TP", 1, 1), ("v1", 1, "TN", 2, 0), ("v2", 0, "CW", 0, 0), ("v2", 1, "DL", 3, 3)]
    path = tmp_path / "q.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["video", "frame_count", "width", "height", "question", "answer", "qid", "type", "a0", "a1", "a2", "a3", "a4"])
        for video, qid, qtype, pred, ans in rows:
            w.writerow([video, 10, 64, 48, "why?", ans, qid, qtype, "a", "b", "c", "d", "e"])
    preds = {f"{v}_{q}": {"prediction": p, "answer": a} for v, q, _, p, a in rows}
    res = nextqa_accuracy(path, preds)
    assert res["TN"].n == 2 and res["TN"].correct == 1  # TP counted as TN
    assert res["T"].n == 2 and res["C"].value == 1.0 and res["all"].correct == 3
    assert load_nextqa_questions(path)[0]["options"] == ["a", "b", "c", "d", "e"]
    with pytest.raises(InputError, match="predictions"):
        nextqa_accuracy(path, {k: v for k, v in list(preds.items())[1:]})
    (tmp_path / "p.json").write_text(json.dumps(preds))
    assert nextqa_accuracy(load_nextqa_questions(path), tmp_path / "p.json")["all"].correct == 3


def test_wilson_interval_known_values():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(InputError):
        wilson_interval(3, 2)


def test_accuracy_and_bootstrap_are_reproducible():
    flags = [True] * 30 + [False] * 10
    a = accuracy(flags)
    assert (a.correct, a.n, a.value) == (30, 40, 0.75) and a.low < 0.75 < a.high
    b1, b2 = accuracy(flags, "bootstrap"), accuracy(flags, "bootstrap")
    assert b1 == b2 and b1.low < 0.75 < b1.high
    lo, hi = bootstrap_interval(np.arange(100.0))
    assert lo < 49.5 < hi
    with pytest.raises(InputError, match="interval"):
        accuracy(flags, "exact")


def test_accuracy_report_groups_and_compute():
    records = [{"correct": i % 3 != 0, "kind": ["needle", "counting"][i % 2], "level": 1 + i % 3, "tflops": 2.0 + i % 2}
               for i in range(12)]
    rep = accuracy_report(records, by=("kind", "level"))
    assert rep["overall"].n == 12 and rep["overall"].correct == 8
    assert set(rep["by"]["kind"]) == {"needle", "counting"} and rep["by"]["level"][1].correct == 0
    assert rep["compute"]["mean"] == pytest.approx(2.5) and rep["compute"]["low"] <= 2.5 <= rep["compute"]["high"]
    assert accuracy_report([{"correct": True}])["compute"] is None
    with pytest.raises(InputError, match="records"):
        accuracy_report([{"kind": "x"}])
