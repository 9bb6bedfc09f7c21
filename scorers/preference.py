"""Meme quality and diversity for HUMOR, judged by worldgen's hidden preference function (the stand-in for human
judges: pipelines never see it, only scorers and benchmarks do).

- ``preference(boxes, scene_words)``: the hidden score of a (top, bottom) caption on a scene (grounding in the
  scene's objects, incongruity between setup and punchline, brevity: ``worldgen.tasks.meme.preference``);
- ``win_rate(boxes, references, scene_words)``: the share of a reference set (the scene's human memes) the caption
  beats under that score, a tie counting one half;
- ``pairwise_accuracy(predicted, true)``: how often a reward model orders a pair as the noise-free preference does,
  over the pairs whose true scores differ;
- ``distinct_n(texts, n)``: distinct n-grams / all n-grams over a set of captions (Li et al. 2016);
- ``grade_samples(texts, num_paths, references, scene_words)``: one scene's samples of a method: format validity,
  mean preference and win rate of the readable ones (an unreadable sample wins nothing), distinct captions,
  distinct-1 / -2, and the distinct ideas its reasoning paths explored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.errors import InputError


def _two(boxes: Any) -> dict:
    if isinstance(boxes, dict):
        return boxes
    if isinstance(boxes, str) or not isinstance(boxes, Sequence) or len(boxes) != 2:
        raise InputError("boxes", boxes, "pass a (top, bottom) pair of texts")
    return {"top": str(boxes[0]), "bottom": str(boxes[1])}


def preference(boxes: Any, scene_words: set[str]) -> float:
    """The hidden preference score of a caption on a scene whose objects are named by ``scene_words``."""
    from worldgen.tasks.meme import preference as hidden

    return float(hidden(_two(boxes), set(scene_words)))


def win_rate(boxes: Any, references: Sequence[Any], scene_words: set[str]) -> float:
    """Share of ``references`` beaten by ``boxes`` under the hidden preference (ties count 1/2)."""
    if not references:
        raise InputError("references", references, "pass at least one reference caption")
    mine = preference(boxes, scene_words)
    refs = np.array([preference(r, scene_words) for r in references])
    return float(((mine > refs) + 0.5 * (mine == refs)).mean())


def pairwise_accuracy(predicted: Sequence[float], true: Sequence[float]) -> tuple[int, int]:
    """(pairs ordered as ``true`` orders them, pairs whose true scores differ)."""
    p, t = np.asarray(predicted, float), np.asarray(true, float)
    if p.shape != t.shape:
        raise InputError("predicted", p.shape, f"give one score per item ({t.shape})")
    i, j = np.triu_indices(len(t), 1)
    differ = t[i] != t[j]
    hits = (np.sign(p[i] - p[j]) == np.sign(t[i] - t[j])) & differ
    return int(hits.sum()), int(differ.sum())


def _words(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.lower())


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct n-grams over all n-grams of ``texts`` (0 when there are none)."""
    grams = [tuple(w[k:k + n]) for w in map(_words, texts) for k in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def _idea(path_text: str) -> str:
    """A reasoning path's candidate idea: its quoted caption if it quotes one, else its text, normalised."""
    quoted = re.findall(r'"([^"]+)"', path_text)
    return " / ".join(q.strip().lower() for q in quoted) if quoted else " ".join(_words(path_text))


def parse_sample(text: str, num_paths: int) -> dict | None:
    """A sample's boxes and path ideas, None when it does not follow the format (``num_paths`` 0: boxes only)."""
    from planners.meme_cot import MemeFormatError, parse_meme_cot, read_boxes

    try:
        if num_paths == 0:
            return {"boxes": read_boxes(text, 2), "ideas": []}
        cot = parse_meme_cot(text, 2, num_paths)
    except MemeFormatError:
        return None
    return {"boxes": cot.text_on_meme, "ideas": [_idea(p.text) for p in cot.paths]}


def grade_samples(texts: Sequence[str], num_paths: int, references: Sequence[Any], scene_words: set[str]) -> dict:
    """One scene's samples of one method (see the module docstring)."""
    parsed = [parse_sample(t, num_paths) for t in texts]
    ok = [p for p in parsed if p is not None]
    wins = [win_rate(p["boxes"], references, scene_words) if p else 0.0 for p in parsed]
    prefs = [preference(p["boxes"], scene_words) for p in ok]
    captions = [" / ".join(p["boxes"]) for p in ok]
    ideas = {i for p in ok for i in p["ideas"]} | {c.lower() for c in captions}
    return {"samples": len(texts), "valid": len(ok) / max(1, len(texts)), "win": float(np.mean(wins)) if wins else 0.0,
            "preference": float(np.mean(prefs)) if prefs else float("nan"), "distinct_captions": len(set(captions)),
            "distinct_1": distinct_n(captions, 1), "distinct_2": distinct_n(captions, 2), "ideas": len(ideas),
            "boxes": [p["boxes"] if p else None for p in parsed]}
