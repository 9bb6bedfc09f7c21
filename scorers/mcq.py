"""Multiple-choice accuracy from generated text, as the common image-MCQ evaluators score V*Bench, HR-Bench and
MME-RealWorld: the option letter is extracted by VLMEvalKit's rules (``can_infer``), accuracy is reported overall
and per category with 95% Wilson intervals.

Extraction (``can_infer``): first the letter rule (``can_infer_option``): the refusal phrases map to "Z"; the
characters ``.()[],:;!*#{}`` become spaces and the text is split on whitespace; exactly one choice letter among
the words is the answer, none but a lone "Z" is "Z", anything else fails. VLMEvalKit's current release applies
its "'A' might be an article" guard (more than three words containing "A" fail) only when ``VERBOSE`` is set,
older releases and Qwen's evaluation always: ``article_guard`` chooses. Failing that, the text rule
(``can_infer_text``): exactly one option text occurring in the lower-cased answer. A question whose answer
cannot be extracted counts as wrong.

Input files (JSON lines or a JSON list): questions ``{"question_id", "label" (the right letter), "options"
([text, ...], optional: enables the text rule), "category" (optional)}``; predictions ``{"question_id",
"prediction" (the model's text)}``; V*Bench's own field names (``test_image`` ids, ``answer`` letters) are
read too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.errors import InputError, MediaError
from scorers.videoqa import Accuracy, accuracy

PUNCTUATION = ".()[],:;!*#{}"
REFUSALS = ("Sorry, I can't help with images of people yet.", "I can't process this file.",
            "I'm sorry, but without the image provided", "Cannot determine the answer")
API_FAILURE = "Failed to obtain answer via API"


def can_infer_option(answer: str, choices: Sequence[str], article_guard: bool = False) -> str | None:
    """The letter rule: a letter of ``choices``, "Z" (refusal / no answer) or None."""
    if API_FAILURE in answer:
        return None
    if any(r in answer for r in REFUSALS):
        return "Z"
    text = answer
    for ch in PUNCTUATION:
        text = text.replace(ch, " ")
    words = text.split()
    found = [c for c in choices if c in words]
    if len(found) == 1:
        if article_guard and "A" in words and len(words) > 3:
            return None
        return found[0]
    if not found and sum(c in words for c in ("Z", "")) == 1:
        return "Z"
    return None


def can_infer_text(answer: str, choices: Mapping[str, str]) -> str | None:
    """The text rule: the letter whose option text is the only one found in the answer (case-insensitive)."""
    low = answer.lower()
    found = [k for k, v in choices.items() if str(v).lower() in low]
    return found[0] if len(found) == 1 else None


def can_infer(answer: Any, choices: Mapping[str, str] | Sequence[str], article_guard: bool = False) -> str | None:
    """VLMEvalKit's ``can_infer``: the letter rule, then (with option texts) the text rule."""
    answer = str(answer)
    letters = list(choices)
    got = can_infer_option(answer, letters, article_guard)
    if got is None and isinstance(choices, Mapping):
        got = can_infer_text(answer, choices)
    return got


def _read(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise MediaError(path, "no such file", "pass a JSON lines or JSON file")
    try:
        text = path.read_text()
        if text.lstrip().startswith("["):
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (ValueError, UnicodeDecodeError) as e:
        raise MediaError(path, f"not JSON lines or a JSON list ({e})") from None
    except RecursionError:
        raise MediaError(path, "not JSON lines or a JSON list (nested too deeply to read)") from None
    _check_rows(rows, str(path))
    return rows


def _check_rows(rows: Sequence[Any], source: str) -> None:
    """Each row is an object; a number or a list would fail later with a TypeError far from its cause."""
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            shown = row if len(repr(row)) <= 60 else f"{repr(row)[:57]}..."
            raise InputError(f"{source} record {i + 1}", shown, 'each record is an object such as {"question_id": "1", "label": "A"}')
        opts = row.get("options")
        if opts is not None and not isinstance(opts, list):
            raise InputError(f"{source} record {i + 1} options", opts, 'options is a list of the option texts, e.g. ["red", "blue"]')


def _id(row: dict, where: str) -> str:
    for key in ("question_id", "id", "test_image"):
        if key in row:
            return str(row[key])
    raise InputError(where, sorted(row), "each row needs a question_id")


def mcq_accuracy(questions: str | Path | Sequence[dict], predictions: str | Path | Sequence[dict],
                 article_guard: bool = False) -> dict[str, Accuracy]:
    """``{"overall": Accuracy, <category>: Accuracy, ...}`` over every question (a missing prediction is wrong)."""
    qs = _read(questions) if isinstance(questions, (str, Path)) else list(questions)
    ps = _read(predictions) if isinstance(predictions, (str, Path)) else list(predictions)
    _check_rows(qs, "questions")
    _check_rows(ps, "predictions")
    pred = {_id(p, "predictions"): str(p.get("prediction", p.get("text", ""))) for p in ps}
    rows: dict[str, list[bool]] = {"overall": []}
    for q in qs:
        qid = _id(q, "questions")
        label = str(q.get("label", q.get("answer", ""))).strip()
        opts = q.get("options")
        n = len(opts) if opts else max(4, "ABCDEFGHIJ".find(label) + 1)
        letters = "ABCDEFGHIJ"[:n]
        if label not in letters:
            raise InputError(f"questions {qid} label", label, f"use a letter among {list(letters)}")
        choices = dict(zip(letters, opts)) if opts else list(letters)
        ok = qid in pred and can_infer(pred[qid], choices, article_guard) == label
        rows["overall"].append(ok)
        if q.get("category"):
            rows.setdefault(str(q["category"]), []).append(ok)
    return {k: accuracy(v) for k, v in rows.items()}


def format_mcq(result: Mapping[str, Accuracy]) -> str:
    return "\n".join(f"{k}: {100 * a.value:.2f}% [{100 * a.low:.1f}, {100 * a.high:.1f}] ({a.correct}/{a.n})" for k, a in result.items())
