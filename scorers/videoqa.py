"""Multiple-choice video QA scoring: accuracy overall and by group, with 95% intervals, plus compute.

Two entry points:

- ``accuracy_report(records, by=(...))`` for our own runs: each record is a dict with ``correct``
  (bool), any grouping keys (``kind``, ``level``, ...) and optionally ``tflops``; accuracies come
  with Wilson score intervals (or percentile bootstrap), compute with its mean and a bootstrap
  interval.
- ``nextqa_accuracy(csv, predictions)`` for NExT-QA multiple choice, grouped exactly as the
  official ``eval_mc.py`` (github.com/doc-doc/NExT-QA): question types CW, CH, TN (TP merged into
  TN), TC, DC, DL, DO; groups C (causal), T (temporal), D (descriptive) by the type's first letter;
  overall accuracy over every question in the CSV. The published HGA predictions score 49.74.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import InputError, MediaError

Z95 = 1.959963984540054  # two-sided 95% normal quantile


@dataclass(frozen=True)
class Accuracy:
    """``correct`` of ``n`` right, ``value`` = correct / n, ``[low, high]`` its 95% interval."""

    correct: int
    n: int
    value: float
    low: float
    high: float

    @property
    def percent(self) -> float:
        return 100.0 * self.value

    def to_dict(self) -> dict:
        return asdict(self)


def wilson_interval(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion: well behaved at 0, 1 and small n."""
    if not isinstance(n, (int, np.integer)) or n < 0 or not 0 <= correct <= n:
        raise InputError("correct/n", (correct, n), "need integers with 0 <= correct <= n")
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_interval(values: Sequence[float], statistic=np.mean, n_boot: int = 2000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``values`` (seeded, so reports are reproducible)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    stats = np.array([statistic(x[rng.integers(0, x.size, x.size)]) for _ in range(n_boot)])
    alpha = (1 - level) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def accuracy(correct: Iterable[bool], interval: str = "wilson", seed: int = 0) -> Accuracy:
    """Accuracy of a sequence of right/wrong flags with a 95% ``wilson`` or ``bootstrap`` interval."""
    flags = np.asarray(list(correct), dtype=bool)
    k, n = int(flags.sum()), int(flags.size)
    if interval == "wilson":
        low, high = wilson_interval(k, n)
    elif interval == "bootstrap":
        low, high = bootstrap_interval(flags.astype(np.float64), seed=seed) if n else (0.0, 1.0)
    else:
        raise InputError("interval", interval, "use 'wilson' or 'bootstrap'")
    return Accuracy(k, n, k / n if n else float("nan"), low, high)


def accuracy_report(records: Sequence[Mapping[str, Any]], by: Sequence[str] = (), interval: str = "wilson",
                    compute_key: str = "tflops") -> dict:
    """Accuracy overall and per value of each key in ``by``, plus mean compute when records carry it.

    Returns ``{"overall": Accuracy, "by": {key: {value: Accuracy}}, "compute": {"mean", "low", "high", "n"} | None}``.
    Groups are sorted by value; a record missing a ``by`` key is counted under ``None``.
    """
    if any("correct" not in r for r in records):
        raise InputError("records", "a record without 'correct'", "each record needs a boolean 'correct'")
    report: dict[str, Any] = {"overall": accuracy([bool(r["correct"]) for r in records], interval), "by": {}}
    for key in by:
        groups: dict[Any, list[bool]] = {}
        for r in records:
            groups.setdefault(r.get(key), []).append(bool(r["correct"]))
        report["by"][key] = {v: accuracy(groups[v], interval) for v in sorted(groups, key=lambda v: (v is None, str(v)))}
    costs = [float(r[compute_key]) for r in records if r.get(compute_key) is not None]
    if costs:
        low, high = bootstrap_interval(costs)
        report["compute"] = {"mean": float(np.mean(costs)), "low": low, "high": high, "n": len(costs)}
    else:
        report["compute"] = None
    return report


# ---------------------------------------------------------------------------------- NExT-QA

NEXTQA_TYPES = ("CW", "CH", "TN", "TC", "DC", "DL", "DO")
NEXTQA_NAMES = {"CW": "Why", "CH": "How", "TN": "Bef&Aft", "TC": "When", "DC": "Cnt", "DL": "Loc", "DO": "Other",
                "C": "Acc_C", "T": "Acc_T", "D": "Acc_D"}


def load_nextqa_questions(path: str | Path) -> list[dict]:
    """Rows of a NExT-QA multiple-choice CSV (``video, frame_count, ..., qid, type, a0..a4``) with ``id`` =
    ``"<video>_<qid>"`` (the key of prediction files), ``answer`` as int and ``options`` ``[a0..a4]``."""
    path = Path(path)
    if not path.is_file():
        raise MediaError(path, "no such NExT-QA CSV file")
    rows = []
    with open(path, newline="") as f:
        for line, row in enumerate(csv.DictReader(f), 2):
            try:
                row["id"] = f"{row['video']}_{row['qid']}"
                row["answer"] = int(row["answer"])
                row["options"] = [row[f"a{i}"] for i in range(5)]
            except (KeyError, ValueError) as e:
                raise MediaError(path, f"line {line} is not a NExT-QA MC row ({e})") from None
            rows.append(row)
    return rows


def load_predictions(path: str | Path) -> dict[str, dict]:
    """A NExT-QA result file: ``{"<video>_<qid>": {"prediction": int, "answer": int}}``."""
    path = Path(path)
    if not path.is_file():
        raise MediaError(path, "no such predictions file")
    return json.loads(path.read_text())


def nextqa_type(qtype: str) -> str:
    """The official grouping: TP (temporal previous) is merged into TN (temporal next)."""
    return "TN" if qtype == "TP" else qtype


def nextqa_accuracy(questions: str | Path | Sequence[Mapping], predictions: str | Path | Mapping[str, Mapping],
                    interval: str = "wilson") -> dict[str, Accuracy]:
    """NExT-QA MC accuracy as the official ``eval_mc.py`` computes it.

    Every question of the CSV is scored (a question without a prediction is an error, as in the
    official script); correctness is ``prediction == answer`` as stored in the predictions file.
    Keys: the seven types, ``C``, ``T``, ``D`` and ``all``; ``Accuracy.percent`` rounded to 2
    decimals gives the published numbers.
    """
    rows = load_nextqa_questions(questions) if isinstance(questions, (str, Path)) else list(questions)
    preds = load_predictions(predictions) if isinstance(predictions, (str, Path)) else predictions
    flags: dict[str, list[bool]] = {t: [] for t in NEXTQA_TYPES}
    for row in rows:
        qid = row.get("id") or f"{row['video']}_{row['qid']}"
        qtype = nextqa_type(str(row["type"]))
        if qtype not in flags:
            raise InputError("type", row["type"], f"NExT-QA MC types are {NEXTQA_TYPES} and TP")
        if qid not in preds:
            raise InputError("predictions", qid, "every question of the CSV needs a prediction")
        p = preds[qid]
        flags[qtype].append(int(p["prediction"]) == int(p["answer"]))
    out = {t: accuracy(f, interval) for t, f in flags.items()}
    for group in ("C", "T", "D"):
        out[group] = accuracy([x for t, f in flags.items() if t[0] == group for x in f], interval)
    out["all"] = accuracy([x for f in flags.values() for x in f], interval)
    return out


def format_nextqa(result: Mapping[str, Accuracy]) -> str:
    """The official script's two lines (type names, then accuracies in %) plus ``Acc: xx.xx``."""
    keys = list(NEXTQA_TYPES) + ["C", "T", "D"]
    head = "\t".join(NEXTQA_NAMES[k] for k in keys)
    vals = "\t".join(f"{result[k].percent:.2f}" for k in keys)
    return f"{head}\n{vals}\nAcc: {result['all'].percent:.2f}"
