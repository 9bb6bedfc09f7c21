"""CLEAR's Contrastive Concept Dictionary (specs/clear.md B.5) [PROPOSED structure].

The explicit anchor that replaces a learned [SEG] token: what the target is in words (category,
attributes, relations, temporal cues), how each distractor differs from it, and visual prototypes
of the target (``positive``) and of distractors (``negative``). Slow mode pre-ranks candidates with
``score`` and renders the text part into the planner's prompt with ``render_prompt``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from core.errors import InputError


@dataclass
class TargetConcept:
    """The target in words, as the planner parsed the query."""

    category: str = ""
    attributes: list[str] = field(default_factory=list)
    relations: list[str] = field(default_factory=list)
    temporal_cues: list[str] = field(default_factory=list)


@dataclass
class Contrast:
    """How distractor ``distractor_id`` differs from the target (``"unlike the target: ..."``)."""

    distractor_id: int
    differing: list[str] = field(default_factory=list)
    sentence: str = ""


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32).reshape(-1)
    n = float(np.linalg.norm(x))
    if not np.isfinite(n) or n == 0:
        raise InputError("embedding", "zero or not finite", "pass a non-zero appearance embedding")
    return x / n


@dataclass
class ConceptDictionary:
    """Target concept, contrasts and visual prototypes, updated on confirmed frames.

    Admission [PROPOSED]: a tracked embedding joins the positive prototypes only if its cosine to
    their mean is at least ``admit_cosine`` and no event fired in the last ``quiet_frames`` frames
    (so a drifting track does not contaminate the target); when full, the most redundant prototype
    (highest mean cosine to the others) is replaced. ``score = alpha * max cos(pos) - beta * max cos(neg)``.
    """

    target: TargetConcept = field(default_factory=TargetConcept)
    contrasts: list[Contrast] = field(default_factory=list)
    max_positive: int = 8
    max_negative: int = 16
    admit_cosine: float = 0.7
    quiet_frames: int = 5
    alpha: float = 1.0
    beta: float = 0.5
    positive: list[np.ndarray] = field(default_factory=list, repr=False)
    negative: deque = field(default_factory=deque, repr=False)
    last_seen: dict = field(default_factory=dict)

    def __post_init__(self):
        self.negative = deque(self.negative, maxlen=self.max_negative)

    def add_anchor(self, embedding: np.ndarray, frame: int, box: tuple | None = None, area: int | None = None) -> None:
        """The selected instance at the anchor: always admitted."""
        self._add_positive(_unit(embedding))
        self.last_seen = {"frame": int(frame), "box": box, "area": area}

    def add_distractor(self, embedding: np.ndarray, contrast: Contrast | None = None) -> None:
        self.negative.append(_unit(embedding))
        if contrast is not None:
            self.contrasts.append(contrast)

    def admit(self, embedding: np.ndarray, frame: int, last_event_frame: int | None = None) -> bool:
        """Offer a tracked frame's embedding; returns whether it became a prototype."""
        e = _unit(embedding)
        if last_event_frame is not None and frame - last_event_frame < self.quiet_frames:
            return False
        if self.positive and float(_unit(np.mean(self.positive, axis=0)) @ e) < self.admit_cosine:
            return False
        self._add_positive(e)
        self.last_seen["frame"] = int(frame)
        return True

    def _add_positive(self, e: np.ndarray) -> None:
        if len(self.positive) < self.max_positive:
            self.positive.append(e)
            return
        P = np.stack(self.positive)
        sim = P @ P.T
        np.fill_diagonal(sim, 0)
        self.positive[int(sim.mean(1).argmax())] = e  # the most redundant makes room

    def score(self, embedding: np.ndarray) -> float:
        """How much a candidate looks like the target rather than like a distractor."""
        e = _unit(embedding)
        pos = max((float(p @ e) for p in self.positive), default=0.0)
        neg = max((float(n @ e) for n in self.negative), default=0.0)
        return self.alpha * pos - self.beta * neg

    def render_prompt(self) -> str:
        """The text part as a structured prompt line for the planner."""
        t = self.target
        parts = [f"Target: {t.category or 'object'}"]
        if t.attributes:
            parts.append("attributes: " + ", ".join(t.attributes))
        if t.relations:
            parts.append("relations: " + ", ".join(t.relations))
        if t.temporal_cues:
            parts.append("when: " + ", ".join(t.temporal_cues))
        unlike = [c.sentence for c in self.contrasts if c.sentence]
        if unlike:
            parts.append("unlike distractors: " + "; ".join(unlike))
        return "; ".join(parts) + "."

    def to_dict(self) -> dict:
        """A JSON snapshot (for outputs): the text parts and the prototype counts."""
        return {"target": vars(self.target), "contrasts": [vars(c) for c in self.contrasts],
                "positive_prototypes": len(self.positive), "negative_prototypes": len(self.negative), "last_seen": self.last_seen}
