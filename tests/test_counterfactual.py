"""Causal-counterfactual instance selection on synthetic shapes with a scripted VLM (spec CLEAR d-7, d-8)."""

import numpy as np
import pytest

from core.errors import InputError
from planners.counterfactual import NONE_OPTION, CounterfactualSelector, Mark, keep_only, remove, set_of_marks

H = W = 64


def disk(cx, cy, r=7):
    yy, xx = np.mgrid[:H, :W]
    return (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r


def box(x, y, s=13):
    m = np.zeros((H, W), bool)
    m[y:y + s, x:x + s] = True
    return m


RED, BLUE = (220, 30, 30), (30, 30, 220)


def scene(objects):
    """``objects``: list of (mask, colour); returns 3 identical frames and the masks."""
    frame = np.full((H, W, 3), 15, np.uint8)
    for m, c in objects:
        frame[m] = c
    return np.stack([frame] * 3), [m for m, _ in objects]


def red_round(frame, region=None):
    """Is there (in ``region``, else anywhere) a red blob whose fill of its box is disk-like?"""
    import cv2

    red = (frame[..., 0] > 150) & (frame[..., 2] < 100)
    if region is not None:
        red &= region
    n, labels, stats, _ = cv2.connectedComponentsWithStats(red.astype(np.uint8))
    for k in range(1, n):
        x, y, w, h, area = stats[k]
        if area > 20 and area / (w * h) < 0.9:
            return True
    return False


class ScriptedVLM:
    """Answers yes/no by looking at the pixels; the forward choice is whatever the test scripts."""

    backend = "fake"

    def __init__(self, forward):
        self.forward_p = np.asarray(forward, float)

    def option_posterior(self, frames, prompt, options, relative_times=None):
        if options == ["yes", "no"]:
            f = frames[0]
            if "highlighted" in prompt:
                saturated = f.max(-1).astype(int) - f.min(-1) > 60  # the kept object keeps its colour
                yes = red_round(f, saturated)
            else:
                yes = red_round(f)
            p = np.array([0.9, 0.1]) if yes else np.array([0.1, 0.9])
        else:
            assert options[0] == NONE_OPTION
            p = self.forward_p / self.forward_p.sum()
        return np.log(p)

    def generate(self, messages, **kw):
        return ["a red circle"]

    def flops(self, *a, **k):
        return 0.0


def marks(masks):
    return [Mark(i + 1, m) for i, m in enumerate(masks)]


def test_renders():
    frames, masks = scene([(box(5, 5), RED), (disk(40, 40), BLUE)])
    som = set_of_marks(frames, marks(masks))
    assert som.shape == frames.shape and not np.array_equal(som, frames)
    ys, xs = np.nonzero(masks[0])
    assert (som[0, ys.min():ys.max() + 1, xs.min():xs.max() + 1] != frames[0, ys.min():ys.max() + 1, xs.min():xs.max() + 1]).any()
    kept = keep_only(frames, masks[1])
    assert np.array_equal(kept[:, masks[1]], frames[:, masks[1]]) and not np.array_equal(kept[:, masks[0]], frames[:, masks[0]])
    gone = remove(frames, masks[1])
    assert gone[0][masks[1]].mean() < 60  # the blue disk is painted over with the dark background


def test_checks_agree_with_the_forward_choice():
    frames, masks = scene([(box(5, 5), RED), (disk(45, 12), BLUE), (disk(20, 45), RED)])
    sel = CounterfactualSelector(ScriptedVLM([0.05, 0.1, 0.1, 0.75])).select(frames, marks(masks), "the red round thing")
    assert sel.number == 3 and not sel.ambiguous and not sel.no_match
    s3 = next(s for s in sel.scores if s.number == 3)
    assert s3.sufficiency > 0.5 and s3.necessity > 0.5 and any("#3" in line for line in sel.reasoning)


def test_checks_overrule_a_wrong_forward_choice_and_flag_it():
    frames, masks = scene([(box(5, 5), RED), (disk(45, 12), BLUE), (disk(20, 45), RED)])
    sel = CounterfactualSelector(ScriptedVLM([0.05, 0.5, 0.1, 0.35])).select(frames, marks(masks), "the red round thing")
    assert sel.number == 3 and sel.ambiguous
    alone = CounterfactualSelector(ScriptedVLM([0.05, 0.5, 0.1, 0.35]), checks=False).select(frames, marks(masks), "the red round thing")
    assert alone.number == 1  # the ablation follows the forward choice


def test_a_second_matching_object_fails_necessity():
    frames, masks = scene([(disk(15, 15), RED), (disk(45, 45), RED), (box(40, 5), BLUE)])
    sel = CounterfactualSelector(ScriptedVLM([0.05, 0.6, 0.3, 0.05])).select(frames, marks(masks), "the red round thing")
    assert sel.ambiguous
    assert all(s.necessity < 0.5 for s in sel.scores if s.necessity is not None)


def test_no_object_matches():
    frames, masks = scene([(box(5, 5), RED), (disk(45, 12), BLUE)])
    sel = CounterfactualSelector(ScriptedVLM([0.7, 0.15, 0.15])).select(frames, marks(masks), "the red round thing")
    assert sel.no_match and sel.number is None
    assert CounterfactualSelector(ScriptedVLM([1.0])).select(frames, [], "the red round thing").no_match
    with pytest.raises(InputError, match="query"):
        CounterfactualSelector(ScriptedVLM([1.0])).select(frames, marks(masks), " ")


def test_reverse_description_round_trip():
    frames, masks = scene([(box(5, 5), RED), (disk(20, 45), RED)])
    sel = CounterfactualSelector(ScriptedVLM([0.05, 0.15, 0.8]), reverse=True).select(frames, marks(masks), "the red round thing")
    s2 = next(s for s in sel.scores if s.number == 2)
    assert sel.number == 2 and s2.description == "a red circle" and s2.reverse is not None


def test_on_a_real_protocol_model(tiny_vlm_dirs):
    """The tiny random Qwen2.5-VL runs every call of the selection (outputs are random; the API is real)."""
    from planners.loading import load_vlm

    frames, masks = scene([(box(5, 5), RED), (disk(45, 12), BLUE)])
    sel = CounterfactualSelector(load_vlm(str(tiny_vlm_dirs["qwen2.5-vl"]), "cpu"), reverse=True).select(frames, marks(masks), "the red square")
    assert sel.number in (None, 1, 2) and len(sel.scores) == 2 and 0 <= sel.p_none <= 1
