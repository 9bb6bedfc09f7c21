"""scorers/preference.py on hand-made captions: the hidden preference, win rates with ties, a reward model's
pairwise accuracy, distinct-n, and one scene's samples graded (unreadable ones win nothing)."""

import pytest

from core.errors import InputError
from scorers.preference import distinct_n, grade_samples, pairwise_accuracy, preference, win_rate

WORDS = {"red", "circle", "blue", "square"}


def test_the_hidden_preference_rewards_grounding_incongruity_and_brevity():
    grounded = preference(("red circle at 3 am", "blue square"), WORDS)
    assert grounded == pytest.approx(1.0 + 0.8 + 0.6)
    assert preference(("me", "also me"), WORDS) == pytest.approx(0.8 * (1 - 1 / 2) + 0.6)
    long = preference(("a " * 20, "b"), WORDS)
    assert long < preference(("a", "b"), WORDS)


def test_win_rate_counts_ties_as_half_and_needs_references():
    refs = [("me", "also me"), ("red circle", "blue square"), ("x", "y")]
    assert win_rate(("x", "y"), refs, WORDS) == pytest.approx((1 + 0 + 0.5) / 3)
    assert win_rate(("red circle", "blue square"), refs, WORDS) == pytest.approx((1 + 0.5 + 1) / 3)
    with pytest.raises(InputError, match="references"):
        win_rate(("a", "b"), [], WORDS)
    with pytest.raises(InputError, match="boxes"):
        win_rate("one string", refs, WORDS)


def test_pairwise_accuracy_skips_ties_of_the_truth():
    assert pairwise_accuracy([3, 2, 1], [3, 2, 1]) == (3, 3)
    assert pairwise_accuracy([1, 2, 3], [3, 2, 1]) == (0, 3)
    assert pairwise_accuracy([1, 2, 3], [1, 1, 2]) == (2, 2)
    with pytest.raises(InputError, match="predicted"):
        pairwise_accuracy([1, 2], [1, 2, 3])


def test_distinct_n():
    assert distinct_n(["a b", "a b"], 1) == 0.5 and distinct_n(["a b", "a c"], 2) == 1.0 and distinct_n([], 2) == 0.0


def test_grade_samples_on_hand_made_outputs():
    good = "Text on the Meme:\nbox1: red circle\nbox2: blue square\n"
    other = "Text on the Meme:\nbox1: me\nbox2: also me\n"
    g = grade_samples([good, good, other, "garbage"], 0, [("x", "y"), ("me", "also me")], WORDS)
    assert g["valid"] == 0.75 and g["distinct_captions"] == 2 and g["boxes"][3] is None
    assert g["win"] == pytest.approx((1 + 1 + 0.25 + 0) / 4)  # "me / also me" loses to "x / y" (setup = punchline)
