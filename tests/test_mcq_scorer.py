"""The V*-style MCQ scorer: VLMEvalKit's letter and text rules on the answers models actually write."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scorers.mcq import can_infer, mcq_accuracy

CHOICES = {"A": "red", "B": "blue", "C": "green", "D": "yellow"}


@pytest.mark.parametrize("answer,expected", [
    ("B", "B"), ("(B)", "B"), ("B. blue", "B"), ("The answer is (C) green.", "C"), ("**D**", "D"),
    ("Answer: A", "A"), ("blue", "B"), ("The star is yellow.", "D"), ("A or B", None), ("red and blue", None),
    ("Cannot determine the answer", "Z"), ("Z", "Z"), ("I think so", None), ("A colour like green", "A"),
])
def test_can_infer_follows_vlmevalkit(answer, expected):
    assert can_infer(answer, CHOICES) == expected


def test_article_guard_of_older_releases():
    assert can_infer("A colour like green", CHOICES, article_guard=True) == "C"  # letter rule fails, the text rule finds green
    assert can_infer("A B", list("ABCD"), article_guard=True) is None


def test_accuracy_by_category_and_cli(tmp_path):
    qs = [{"question_id": 1, "label": "A", "options": ["red", "blue"], "category": "direct_attributes"},
          {"question_id": 2, "label": "B", "options": ["left", "right"], "category": "relative_position"},
          {"question_id": 3, "label": "C", "category": "relative_position"}]
    ps = [{"question_id": 1, "prediction": "(A) red"}, {"question_id": 2, "prediction": "left"}]
    r = mcq_accuracy(qs, ps)
    assert (r["overall"].correct, r["overall"].n) == (1, 3)
    assert r["direct_attributes"].value == 1.0 and r["relative_position"].value == 0.0
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(q) for q in qs))
    (tmp_path / "p.json").write_text(json.dumps(ps))
    out = subprocess.run([sys.executable, "-m", "app.cli", "score", "mcq", str(tmp_path / "q.jsonl"), str(tmp_path / "p.json"), "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["overall"]["correct"] == 1
    bad = subprocess.run([sys.executable, "-m", "app.cli", "score", "mcq", str(tmp_path / "missing.jsonl"), str(tmp_path / "p.json")],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "missing.jsonl" in bad.stderr
