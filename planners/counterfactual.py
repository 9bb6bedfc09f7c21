"""CLEAR's causal-counterfactual instance selection (specs/clear.md B.2-B.3) [PROPOSED].

Instead of regressing coordinates, the planner chooses a numbered candidate, then checks the choice
both ways through the VLM protocol:

- **forward** (query -> instance): a set-of-marks clip (each candidate outlined and numbered) and a
  multiple-choice question over "none" and the numbers: ``p_fwd(i)``;
- **sufficiency**: the keep-only clip (everything but candidate i greyed out) and "does the
  highlighted object satisfy the query?": ``p_suff(i) = P(yes)``;
- **necessity**: the remove clip (candidate i inpainted away) and "is there still an object that
  satisfies the query?": ``p_nec(i) = 1 - P(yes)``;
- **reverse** (instance -> query, optional): the VLM describes candidate i on its keep-only clip,
  then judges whether the description matches the query: ``p_rev(i)``.

``score(i) = log p_fwd(i) + w_suff log p_suff(i) + w_nec log p_nec(i) + w_rev log p_rev(i)``; the
winner is accepted when it is also the forward choice and both checks pass (>= ``accept``);
otherwise the selection is flagged ambiguous. "No object matches" when "none" wins the forward
choice and no shortlisted candidate is sufficient. Every weight and threshold is a parameter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import cv2
import numpy as np

from core.errors import InputError
from planners.protocol import check_frames, format_mcq_prompt, user_turn

MARK_COLOURS = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
                (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128), (220, 190, 255)]
EPS = 1e-6


@dataclass(frozen=True)
class Mark:
    """A candidate as the planner sees it: its number and its masks over the clip ``(T, H, W)`` bool."""

    number: int
    masks: np.ndarray


def _masks(masks: np.ndarray, frames: np.ndarray, name: str) -> np.ndarray:
    m = np.asarray(masks, bool)
    if m.ndim == 2:
        m = np.broadcast_to(m, frames.shape[:3])
    if m.shape != frames.shape[:3]:
        raise InputError(name, f"array {m.shape}", f"pass masks shaped (H, W) or (T, H, W) = {frames.shape[:3]}")
    return m


def set_of_marks(frames: np.ndarray, marks: Sequence[Mark], thickness: int = 1) -> np.ndarray:
    """Each candidate outlined in its colour with its number at its centroid, on every frame."""
    frames = check_frames(frames)
    out = frames.copy()
    scale = max(0.3, min(frames.shape[1:3]) / 160)
    for k, mark in enumerate(marks):
        colour = MARK_COLOURS[k % len(MARK_COLOURS)]
        masks = _masks(mark.masks, frames, f"marks[{k}].masks")
        for t in range(len(out)):
            m = masks[t].astype(np.uint8)
            if not m.any():
                continue
            contours, _ = cv2.findContours(m, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
            cv2.drawContours(out[t], contours, -1, colour, thickness)
            ys, xs = np.nonzero(m)
            org = (int(xs.mean()) - int(4 * scale), int(ys.mean()) + int(4 * scale))
            cv2.putText(out[t], str(mark.number), org, cv2.FONT_HERSHEY_SIMPLEX, 0.4 * scale, (0, 0, 0), 2, cv2.LINE_AA)
            cv2.putText(out[t], str(mark.number), org, cv2.FONT_HERSHEY_SIMPLEX, 0.4 * scale, (255, 255, 255), 1, cv2.LINE_AA)
    return out


def keep_only(frames: np.ndarray, masks: np.ndarray, mode: str = "grey") -> np.ndarray:
    """The frames with everything outside ``masks`` greyed out (``grey``) or blurred (``blur``,
    Gaussian sigma 15 [PROPOSED]); identical to the input inside the masks."""
    frames = check_frames(frames)
    m = _masks(masks, frames, "masks")
    if mode == "grey":
        faded = (frames.mean(-1, keepdims=True) * 0.3 + 40).astype(np.uint8).repeat(3, -1)
    elif mode == "blur":
        faded = np.stack([cv2.GaussianBlur(f, (0, 0), 15) for f in frames])
    else:
        raise InputError("mode", mode, "choose 'grey' or 'blur'")
    return np.where(m[..., None], frames, faded)


def remove(frames: np.ndarray, masks: np.ndarray, radius: int = 5) -> np.ndarray:
    """The frames with ``masks`` inpainted away (OpenCV TELEA, the mask dilated by 2 px so no rim stays)."""
    frames = check_frames(frames)
    m = _masks(masks, frames, "masks")
    kernel = np.ones((5, 5), np.uint8)
    out = frames.copy()
    for t in range(len(frames)):
        if m[t].any():
            out[t] = cv2.inpaint(frames[t], cv2.dilate(m[t].astype(np.uint8), kernel), radius, cv2.INPAINT_TELEA)
    return out


@dataclass
class CandidateScore:
    number: int
    forward: float
    sufficiency: float | None = None
    necessity: float | None = None
    reverse: float | None = None
    description: str | None = None
    total: float = -math.inf

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v) for k, v in vars(self).items()}


@dataclass
class Selection:
    """The planner's choice: ``number`` (None when no object matches), whether it is ``ambiguous``,
    every scored candidate, the probability of "none", and the reasoning as readable lines."""

    number: int | None
    ambiguous: bool
    p_none: float
    scores: list[CandidateScore] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)

    @property
    def no_match(self) -> bool:
        return self.number is None

    def to_dict(self) -> dict:
        return {"number": self.number, "ambiguous": self.ambiguous, "no_match": self.no_match, "p_none": round(self.p_none, 4),
                "scores": [s.to_dict() for s in self.scores], "reasoning": self.reasoning}


NONE_OPTION = "none of the numbered objects"


@dataclass
class CounterfactualSelector:
    """Choose the candidate a query refers to, checked counterfactually (see the module docstring).

    ``vlm``: any ``planners.protocol.VisionLanguageModel``. ``checks=False`` is the forward choice
    alone (the "without counterfactual checks" ablation); ``reverse=False`` skips the description
    round trip (it costs one generation per shortlisted candidate).
    """

    vlm: Any
    w_suff: float = 1.0
    w_nec: float = 1.0
    w_rev: float = 1.0
    shortlist: int = 3
    min_forward: float = 0.05
    accept: float = 0.5
    checks: bool = True
    reverse: bool = False
    keep_mode: str = "grey"
    calls: int = field(default=0, init=False)
    max_marks: ClassVar[int] = 9  # answer letters A-J: "none" and nine numbers
    SETTINGS_FILE: ClassVar[str] = "selector.json"

    def settings(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init and f.name != "vlm"}

    def save_pretrained(self, directory: str | Path) -> Path:
        """The VLM as its own backend saves it, and this selector's settings beside it (``selector.json``)."""
        from core.atomic import write_json_atomic

        path = Path(self.vlm.save_pretrained(directory) or directory)
        write_json_atomic(path / self.SETTINGS_FILE, {"selector": "causal-counterfactual", **self.settings()})
        return path

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None, trust_remote_code: bool = False,
                        **settings: Any) -> CounterfactualSelector:
        """The VLM in ``directory`` (any ``load_vlm`` spec) under the saved settings, ``settings`` overriding them."""
        import json

        from planners.loading import load_vlm

        path = Path(directory)
        saved = {}
        if (path / cls.SETTINGS_FILE).is_file():
            try:
                saved = json.loads((path / cls.SETTINGS_FILE).read_text())
            except ValueError:
                raise InputError(str(path / cls.SETTINGS_FILE), "not JSON", "re-save the selector") from None
            saved.pop("selector", None)
        known = {f.name for f in fields(cls) if f.init and f.name != "vlm"}
        unknown = sorted(set(saved) - known | set(settings) - known)
        if unknown:
            raise InputError("selector settings", unknown, f"known settings are {sorted(known)}")
        return cls(load_vlm(str(path), device, dtype, trust_remote_code), **{**saved, **settings})

    def _yes(self, frames: np.ndarray, question: str) -> float:
        self.calls += 1
        logp = self.vlm.option_posterior(frames, format_mcq_prompt(question, ["yes", "no"]), ["yes", "no"])
        return float(np.exp(logp[0]))

    def forward(self, frames: np.ndarray, marks: Sequence[Mark], query: str) -> np.ndarray:
        """``p_fwd`` over ``[none, mark 1, ..., mark N]`` from one set-of-marks pass."""
        options = [NONE_OPTION] + [f"object {m.number}" for m in marks]
        if len(options) > 10:
            raise InputError("marks", len(marks), "the forward choice takes at most 9 candidates (answer letters A-J); pass the best 9")
        question = f"The video shows numbered objects. Which numbered object is {query.strip().rstrip('?.')}?"
        self.calls += 1
        return np.exp(self.vlm.option_posterior(set_of_marks(frames, marks), format_mcq_prompt(question, options), options))

    def select(self, frames: np.ndarray, marks: Sequence[Mark], query: str) -> Selection:
        if not isinstance(query, str) or not query.strip():
            raise InputError("query", query, "pass what to segment as a non-empty string")
        frames = check_frames(frames)
        if not marks:
            return Selection(None, False, 1.0, [], ["no candidates were proposed: no object matches"])
        p = self.forward(frames, marks, query)
        p_none = float(p[0])
        scores = [CandidateScore(m.number, float(p[i + 1])) for i, m in enumerate(marks)]
        lines = ["forward choice: " + ", ".join(f"#{s.number} {s.forward:.2f}" for s in scores) + f", none {p_none:.2f}"]
        order, short = shortlist(scores, self.shortlist, self.min_forward)
        for i in short:
            s = scores[i]
            s.total = math.log(s.forward + EPS)
            if not self.checks:
                continue
            mask = marks[i].masks
            s.sufficiency = self._yes(keep_only(frames, mask, self.keep_mode), f"Does the highlighted object match: {query}?")
            s.necessity = 1.0 - self._yes(remove(frames, mask), f"Is there any object that matches: {query}?")
            s.total = combined_score(s, self.w_suff, self.w_nec)
            if self.reverse:
                kept = keep_only(frames, mask, self.keep_mode)
                self.calls += 1
                s.description = self.vlm.generate([user_turn(kept, "Describe the highlighted object in at most 20 words.")])[0]
                s.reverse = self._yes(kept, f"The highlighted object is {s.description}. Does that match: {query}?")
                s.total = combined_score(s, self.w_suff, self.w_nec, self.w_rev)
            lines.append(f"#{s.number}: keep-only says {s.sufficiency:.2f} it matches; without it, {1 - s.necessity:.2f} that another does"
                         + (f"; described as '{s.description}' ({s.reverse:.2f})" if s.reverse is not None else ""))
        return decide(scores, order, short, p_none, lines, self.checks, self.accept)


def shortlist(scores: Sequence[CandidateScore], k: int, min_forward: float) -> tuple[list[int], list[int]]:
    """(every candidate index by falling forward probability, the top ``k`` of them at or above
    ``min_forward``, or the top one when none is)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i].forward)
    return order, [i for i in order[:k] if scores[i].forward >= min_forward] or order[:1]


def combined_score(s: CandidateScore, w_suff: float = 1.0, w_nec: float = 1.0, w_rev: float = 1.0) -> float:
    """``log p_fwd + w_suff log p_suff + w_nec log p_nec + w_rev log p_rev`` over the checks that were run."""
    total = math.log(s.forward + EPS)
    for w, p in ((w_suff, s.sufficiency), (w_nec, s.necessity), (w_rev, s.reverse)):
        if p is not None:
            total += w * math.log(p + EPS)
    return total


def decide(scores: list[CandidateScore], order: list[int], short: list[int], p_none: float, lines: list[str],
           checks: bool = True, accept: float = 0.5) -> Selection:
    """The decision rule shared by every selector: the shortlisted candidate with the best ``total``,
    "no object matches" when "none" wins the forward choice and no shortlisted candidate is
    sufficient, and ambiguous unless the winner is also the forward choice and passes both checks."""
    best = max(short, key=lambda i: scores[i].total)
    winner = scores[best]
    if checks and p_none >= max(s.forward for s in scores) and all((scores[i].sufficiency or 0) < accept for i in short):
        lines.append("none is the forward choice and no candidate is sufficient: no object matches")
        return Selection(None, False, p_none, scores, lines)
    if not checks:
        lines.append(f"chosen #{winner.number} by the forward choice alone")
        return Selection(winner.number, False, p_none, scores, lines)
    agrees = best == order[0] and winner.sufficiency >= accept and winner.necessity >= accept
    lines.append(f"chosen #{winner.number}" + ("" if agrees else " (ambiguous: the forward choice and the checks disagree)"))
    return Selection(winner.number, not agrees, p_none, scores, lines)


__all__ = ["Mark", "Selection", "CandidateScore", "CounterfactualSelector", "shortlist", "combined_score", "decide", "set_of_marks", "keep_only", "remove", "NONE_OPTION"]
