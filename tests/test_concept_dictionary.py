"""The Contrastive Concept Dictionary (spec CLEAR B.5, d-12)."""

import numpy as np
import pytest

from core.errors import InputError
from pipelines.clear.dictionary import ConceptDictionary, Contrast, TargetConcept


def test_admission_rejects_drift_and_recent_events_and_respects_maxlen():
    d = ConceptDictionary(max_positive=3, max_negative=2)
    d.add_anchor(np.array([1.0, 0, 0]), frame=0)
    assert not d.admit(np.array([0.5, 1.0, 0]), frame=10)  # cos 0.45 < 0.7
    assert not d.admit(np.array([1.0, 0.1, 0]), frame=10, last_event_frame=7)  # an event 3 frames ago
    assert d.admit(np.array([1.0, 0.1, 0]), frame=10, last_event_frame=2)
    for i in range(5):
        d.admit(np.array([1.0, 0.05 * i, 0.01]), frame=20 + i)
    assert len(d.positive) == 3
    for i in range(4):
        d.add_distractor(np.array([0, 1.0, 0.1 * i]))
    assert len(d.negative) == 2


def test_score_prefers_the_target_over_distractors_and_prompt_reads_well():
    d = ConceptDictionary(target=TargetConcept("circle", ["red"], temporal_cues=["disappears first"]))
    d.add_anchor(np.array([1.0, 0, 0]), frame=0)
    d.add_distractor(np.array([0, 1.0, 0]), Contrast(2, ["colour"], "the target is red, #2 is blue"))
    assert d.score(np.array([0.9, 0.1, 0])) > d.score(np.array([0.1, 0.9, 0]))
    assert d.render_prompt() == "Target: circle; attributes: red; when: disappears first; unlike distractors: the target is red, #2 is blue."
    assert d.to_dict()["positive_prototypes"] == 1
    with pytest.raises(InputError, match="embedding"):
        d.score(np.zeros(3))
