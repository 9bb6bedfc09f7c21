"""HUMOR's parts below the pipeline: the perception text, the traced-back SFT data and its splits, the box reader,
the reward models' heads and the RL reward functions (against the published judge protocol)."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from core.errors import InputError
from planners.meme_cot import MemeFormatError, parse_meme_cot, read_boxes
from training.humor_data import HELD_OUT_TEMPLATES, make_scene, popular, scene_indices, sft_example, trace

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def scene():
    return make_scene("val", 3, perception="a medium red circle at the left; a medium blue square at the right")


def test_train_scenes_use_every_template_unless_the_study_holds_some_out():
    from training.humor_data import TEMPLATES, _template_of
    from worldgen.tasks.base import split_seed

    assert scene_indices("train", 60) == list(range(60))  # the default: all six templates
    assert {_template_of(split_seed("train", 0, i)) for i in range(60)} == set(TEMPLATES)
    idx = scene_indices("train", 60, held_out=HELD_OUT_TEMPLATES)  # the generalisation study, one setting away
    assert len(idx) == 60 and idx == sorted(set(idx))
    assert not any(_template_of(split_seed("train", 0, i)) in HELD_OUT_TEMPLATES for i in idx)
    skipped = set(range(idx[-1])) - set(idx)
    assert skipped and all(_template_of(split_seed("train", 0, i)) in HELD_OUT_TEMPLATES for i in skipped)
    assert scene_indices("test", 5, held_out=HELD_OUT_TEMPLATES) == list(range(5))
    for bad in (["crowds"], list(TEMPLATES)):
        with pytest.raises(InputError, match="held_out"):
            scene_indices("train", 5, held_out=bad)


def test_the_trainers_take_the_study_as_one_flag():
    from training.humor_rl import RLRecipe
    from training.humor_rm import RMRecipe
    from training.humor_sft import SFTRecipe, add_hold_out_argument

    assert SFTRecipe().held_out == RLRecipe().held_out == RMRecipe().held_out == ()
    import argparse

    ap = argparse.ArgumentParser()
    add_hold_out_argument(ap)
    assert ap.parse_args(["--hold-out", "hide,crowd"]).hold_out == ("crowd", "hide")
    assert ap.parse_args(["--hold-out", "none"]).hold_out == () and ap.parse_args([]).hold_out is None
    with pytest.raises(SystemExit):
        ap.parse_args(["--hold-out", "crowds"])


def test_a_trace_with_a_topic_writes_it_as_one_slot_that_the_writer_fills(scene):
    from planners.meme_lm import TOPIC_SLOT, fill_topic_slot, to_topic_slot
    from training.humor_data import topic_words

    assert to_topic_slot("Monday / my mondays, monday-ish", "monday") == "<topic> / my mondays, monday-ish"
    assert fill_topic_slot("me on <topic>", "exam week") == "me on exam week" and fill_topic_slot("a <topic>", None) == "a <topic>"
    seen = 0
    for k in range(40):
        prompt, completion = sft_example(scene, 3, np.random.default_rng(k), topic_rate=1.0, topic_slot=True)
        topic = prompt.split("User input: ")[1].split(".\n")[0]
        if topic == "none":  # a ground truth with no content word: no topic
            assert TOPIC_SLOT not in completion
            continue
        seen += 1
        cot = parse_meme_cot(completion, 2, 3)
        assert TOPIC_SLOT in " ".join(cot.text_on_meme) and f"User input: {TOPIC_SLOT}." in completion
        said = " ".join(cot.text_on_meme + [p.text for p in cot.paths] + [cot.specific_analysis, cot.step1]).lower()
        assert topic not in re.findall(r"[\w-]+", said)  # the captions and the analysis never write the word itself
        filled = [fill_topic_slot(b, topic) for b in cot.text_on_meme]
        assert tuple(filled) in scene.candidates and topic in topic_words(tuple(filled), scene.names)
        assert TOPIC_SLOT not in sft_example(scene, 3, np.random.default_rng(k), topic_rate=1.0)[1]  # the slot is an option
    assert seen >= 10
    assert TOPIC_SLOT not in sft_example(scene, 3, np.random.default_rng(0), topic_rate=0.0, topic_slot=True)[1]


def test_the_perception_text_names_what_the_builtin_vlm_reads():
    from planners.builtin import load_builtin_vlm
    from planners.meme_perception import perceive

    s = make_scene("test", 0, perception="-")
    p = perceive(load_builtin_vlm(), s.still)
    assert p.objects and p.text.count(";") == len(p.objects) - 1
    truth = {o["color"] for o in __import__("worldgen.tasks.meme", fromlist=["x"]).generate(s.seed).record["world"]["objects"]}
    assert {o.color for o in p.objects} & truth
    blank = perceive(load_builtin_vlm(), np.full((64, 64, 3), 25, np.uint8))
    assert blank.text == "nothing recognisable"
    with pytest.raises(InputError, match="image"):
        perceive(load_builtin_vlm(), np.zeros((64, 64), np.uint8))


def test_traces_parse_back_and_anchor_on_the_ground_truth(scene):
    gt = popular(scene)[0]
    others = [i for i in range(len(scene.candidates)) if i != gt][:2]
    for k in (1, 3):
        cot = parse_meme_cot(trace(scene, gt, others, k, rng=np.random.default_rng(k)), 2, k)
        assert cot.text_on_meme == list(scene.candidates[gt]) and len(cot.paths) == k
        assert scene.candidates[gt][1] in cot.paths[cot.anchor].text
        assert cot.intent.lower().startswith(scene.intent)
    direct = trace(scene, gt, others, 0)
    assert read_boxes(direct, 2) == list(scene.candidates[gt]) and "[" not in direct


def test_the_ground_truth_comes_from_the_noisy_votes_upper_half(scene):
    top = popular(scene)
    assert len(top) == len(scene.candidates) // 2
    rng = np.random.default_rng(0)
    for _ in range(20):
        prompt, completion = sft_example(scene, 3, rng, topic_rate=1.0)
        boxes = read_boxes(completion, 2)
        assert tuple(boxes) in {scene.candidates[i] for i in top}
        assert prompt.startswith("Meme template: " + scene.perception)
        if "User input: none" not in prompt:  # the topic is a word of the ground truth
            topic = prompt.split("User input: ")[1].split(".")[0]
            assert topic in " ".join(boxes).lower()


def test_hallucinated_negatives_name_only_objects_the_picture_does_not_show():
    from training.humor_data import hallucinated

    names = {"A": "red circle", "B": "blue square"}
    rng = np.random.default_rng(0)
    assert hallucinated(("me", "also me"), names, rng) is None
    shown = {"red", "circle", "blue", "square"}
    for _ in range(30):
        top, bottom = hallucinated(("red circle chasing blue square", "red circle: not today"), names, rng)
        words = (top + " " + bottom).replace(":", "").split()
        assert not shown & set(words)
        assert words[2] == "chasing" and words[-2:] == ["not", "today"]
        assert words[0:2] == words[-4:-2] and words[0:2] != words[3:5]  # one replacement per name, kept throughout


def test_read_boxes_reads_only_the_boxes_and_names_what_is_wrong():
    assert read_boxes("Text on the Meme:\nbox1: top\nbox2: bottom\n", 2) == ["top", "bottom"]
    assert read_boxes("**Text on the Meme:**\nbox1: \"a\"\nbox2: b\nthanks!", 2) == ["a", "b"]
    for bad, pattern in (("box1: a\nbox2: b", "Text on the Meme"), ("Text on the Meme:\nbox1: a", "exactly 2"),
                         ("Text on the Meme:\nbox1: a\nbox2:", "empty"), ("", "Text on the Meme")):
        with pytest.raises(MemeFormatError, match=pattern):
            read_boxes(bad, 2)


def test_the_builtin_reward_model_is_antisymmetric_and_its_judge_reply_round_trips():
    from planners.meme_ranking import pair_rewards
    from planners.meme_reward import BuiltinMemeRM, MemeRMConfig, judge_reply

    torch.manual_seed(0)
    rm = BuiltinMemeRM(MemeRMConfig(width=32, heads=2, layers=1)).eval()
    img = make_scene("test", 1, perception="-").still
    a, b = ("red circle at 3 am", "the last slice"), ("me", "also me")
    p = rm.prefer(img, a, b)
    assert 0 < p < 1 and abs(p + rm.prefer(img, b, a) - 1) < 1e-6
    assert pair_rewards(judge_reply(p)) == pytest.approx((p, 1 - p), abs=1e-3)
    assert pair_rewards(judge_reply(0.5)) == (0.5, 0.5)
    with pytest.raises(InputError, match="two-box"):
        rm.score(img, [["only one box"]])


def test_attention_pooling_head_starts_uniform_and_favours_later_positions():
    from planners.meme_reward import AttentionPooling

    pool = AttentionPooling(16, heads=4)
    bias = pool.position_bias(10)
    assert torch.all(bias[1:] > bias[:-1]) and bias[0] == 0
    h = torch.randn(2, 7, 16)
    assert pool(h).shape == (2, 16)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[:, 5:] = False
    h2 = h.clone()
    h2[:, 5:] = 99.0  # masked positions do not matter
    assert torch.allclose(pool(h, mask), pool(h2, mask), atol=1e-5)
    with pytest.raises(InputError, match="heads"):
        AttentionPooling(10, heads=4)


class _FixedRM:
    def __init__(self, scores):
        self.scores = scores

    def score(self, image, captions):
        return np.array([self.scores[c[0]] for c in captions])

    def prefer(self, image, a, b):
        r = self.score(image, [a, b])
        return float(1 / (1 + np.exp(-(r[0] - r[1]))))


def _completion(top):
    return f"Text on the Meme:\nbox1: {top}\nbox2: x\n"


def test_the_rl_group_reward_equals_the_published_judge_protocol():
    from planners.meme_reward import judge_reply
    from training.group_rl import make_group_pairwise_reward
    from training.humor_rl import make_rm_group_reward

    rm = _FixedRM({"a": 2.0, "b": 0.0, "c": -1.0, "d": 0.5})
    comps = [_completion(t) for t in "abcd"] + [_completion(t) for t in "dcba"]
    fast = make_rm_group_reward(rm, {0: np.zeros((8, 8, 3), np.uint8), 1: np.zeros((8, 8, 3), np.uint8)}, 4)(comps, scene=[0] * 4 + [1] * 4)

    def judge(ta, tb, row):
        return judge_reply(rm.prefer(None, read_boxes(ta, 2), read_boxes(tb, 2)))

    slow = make_group_pairwise_reward(judge, group_size=4)(comps)
    assert fast == pytest.approx(slow, abs=1e-3)
    assert fast[0] > fast[3] > fast[1] > fast[2] and fast[4:] == pytest.approx(fast[:4][::-1])


def test_an_unreadable_completion_loses_every_comparison_and_pointwise_scores_alone():
    from training.humor_rl import make_rm_group_reward

    rm = _FixedRM({"a": 0.0, "b": 0.0})
    img = {0: np.zeros((8, 8, 3), np.uint8)}
    r = make_rm_group_reward(rm, img, 3)([_completion("a"), "no boxes here", _completion("b")], scene=[0, 0, 0])
    assert r == pytest.approx([0.75, 0.0, 0.75])
    assert make_rm_group_reward(rm, img, 2)(["?", "!"], scene=[0, 0]) == [0.5, 0.5]
    point = make_rm_group_reward(rm, img, 3, pointwise=True)([_completion("a"), "x", _completion("b")], scene=[0, 0, 0])
    assert point == pytest.approx([0.5, 0.0, 0.5])
    with pytest.raises(InputError, match="whole groups"):
        make_rm_group_reward(rm, img, 2)(["a", "b", "c"], scene=[0, 0, 0])


def test_human_anchors_join_every_completions_opponents():
    from training.humor_rl import make_rm_group_reward

    rm = _FixedRM({"a": 1.0, "b": 0.0, "h": 1.0})
    img = {0: np.zeros((8, 8, 3), np.uint8)}
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    r = make_rm_group_reward(rm, img, 3, anchors={0: [("h", "x")]})([_completion("a"), "no boxes", _completion("b")], scene=[0, 0, 0])
    # a: against b, the unreadable one and the human; the unreadable one loses to all three, the human included
    assert r == pytest.approx([(sig(1.0) + 1 + sig(0.0)) / 3, 0.0, (sig(-1.0) + 1 + sig(-1.0)) / 3])
    assert make_rm_group_reward(rm, img, 3, anchors={})([_completion("a"), "x", _completion("b")], scene=[0, 0, 0]) == \
        make_rm_group_reward(rm, img, 3)([_completion("a"), "x", _completion("b")], scene=[0, 0, 0])


def test_the_distinct_reward_pays_a_caption_less_for_each_copy_in_its_group():
    from training.humor_rl import RLRecipe, grpo_config, make_distinct_reward

    reward = make_distinct_reward(4)
    group = [_completion("a"), _completion("a"), _completion("b"), "no boxes"]
    assert reward(group + [_completion(t) for t in "abcd"]) == pytest.approx([2 / 3, 2 / 3, 1.0, 0.0] + [1.0] * 4)
    with pytest.raises(InputError, match="whole groups"):
        reward(group[:3])
    on = grpo_config(Path("unused"), RLRecipe(distinct_weight=0.5))
    assert on.reward_weights == [1.0, 0.1, 0.5] and grpo_config(Path("unused"), RLRecipe()).reward_weights == [1.0, 0.1]


def test_name_slots_round_trip_through_the_perception_text_and_the_rl_reward():
    from planners.meme_perception import fill_name_slots, listed_names, to_name_slots
    from training.humor_rl import make_rm_group_reward

    text = "six small pink hearts around the centre; a medium white circle at the centre; a large blue cross at the left"
    names = listed_names(text)
    assert names == ["pink heart", "white circle", "blue cross"] and listed_names("nothing recognisable") == []
    caption = "white circle surrounded by pink hearts / blue cross"
    slotted = to_name_slots(caption, names)
    assert slotted == "<o2> surrounded by <o1>s / <o3>" and fill_name_slots(slotted, names) == caption
    assert fill_name_slots("<o4> and <o0>", names) == "<o4> and <o0>"  # a slot past the list stays as written
    rm = _FixedRM({"white circle": 1.0, "<o2>": 0.0, "b": 0.0})
    img = {0: np.zeros((8, 8, 3), np.uint8)}
    filled = make_rm_group_reward(rm, img, 2, slot_names={0: names})([_completion("<o2>"), _completion("b")], scene=[0, 0])
    raw = make_rm_group_reward(rm, img, 2)([_completion("<o2>"), _completion("b")], scene=[0, 0])
    assert filled[0] > filled[1] and raw == [0.5, 0.5]


def test_a_slot_writer_fills_its_slots_with_what_it_perceives_and_reloads_as_one(tmp_path, monkeypatch):
    from planners import meme_lm
    from humor_fakes import scene_and_perception, tiny_writer
    from planners.meme_perception import listed_names

    w = tiny_writer(steps=1)
    s = scene_and_perception()
    names = listed_names(s.perception)
    assert names, s.perception
    monkeypatch.setattr(meme_lm, "sample_texts", lambda *a, **k: [["box1: <o1> at 3 am\nbox2: <o9>"]])
    assert w.write(s.still, n=1, generator=0) == ["box1: <o1> at 3 am\nbox2: <o9>"]  # a writer without slots
    w.name_slots = True
    assert w.write(s.still, n=1, generator=0) == [f"box1: {names[0]} at 3 am\nbox2: <o9>"]
    w.save_pretrained(tmp_path / "w")
    assert meme_lm.BuiltinMemeWriter.from_pretrained(tmp_path / "w").name_slots


def test_a_topic_slot_writer_fills_the_topic_in_and_never_samples_the_slot_without_one(tmp_path, monkeypatch):
    from planners import meme_lm
    from humor_fakes import scene_and_perception, tiny_writer

    w = tiny_writer(steps=1)
    s = scene_and_perception()
    asked = []

    def fake(model, tokenizer, prompts, n, seed, temperature=1.0, top_p=1.0, banned=None):
        asked.append(banned)
        return [["box1: me on <topic>\nbox2: <topic>s"]]

    monkeypatch.setattr(meme_lm, "sample_texts", fake)
    assert not w.topic_slot and w.write(s.still, "exams", n=1, generator=0) == ["box1: me on <topic>\nbox2: <topic>s"]
    slot = meme_lm.add_topic_slot(w.tokenizer, w.model)
    assert w.tokenizer.tokenize(" on <topic>s") == ["Ġon", "Ġ", "<topic>", "s"]  # one token
    assert w.model.get_input_embeddings().weight.shape[0] == len(w.tokenizer)
    w.topic_slot = True
    assert w.write(s.still, " exam  week ", n=1, generator=0) == ["box1: me on exam week\nbox2: exam weeks"] and asked[-1] is None
    w.write(s.still, None, n=1, generator=0)
    assert asked[-1] == [slot]  # without a topic the slot is suppressed
    w.save_pretrained(tmp_path / "w")
    back = meme_lm.BuiltinMemeWriter.from_pretrained(tmp_path / "w")
    assert back.topic_slot and meme_lm.writer_uses_topic_slot(tmp_path / "w")


def test_anchored_boxes_are_the_anchored_paths_caption():
    from planners.meme_cot import anchor_boxes, anchored_caption

    text = ("[Comprehensive Description Section]\nA fall scene.\n\n[Usage Scenarios Section]\nFailure.\n\n"
            "[Text Analysis Section]\nBox 1 sets up.\nPath 1 (everyday life): a moment -> \"my grades\" / \"gravity\"\n"
            "Path 2 (a classic meme format): a moment -> \"me\" / \"also me\"\n\n[Specific Analysis with User Input]\n"
            "No user input.\nStep 1: Anchor on Path 2 (a classic meme format): short\nStep 2: setup, punchline\n\n"
            "Text on the Meme:\nbox1: expectations\nbox2: reality\n")
    fixed = anchor_boxes(text, 2)
    cot = parse_meme_cot(fixed, 2, 2)
    assert cot.text_on_meme == ["me", "also me"] == anchored_caption(cot) and fixed.startswith(text.split("Text on the Meme:")[0])
    assert anchor_boxes(fixed, 2) == fixed
    for unchanged in (text.replace('\"me\" / \"also me\"', "no quote"), text.replace("Anchor on Path 2 (a classic meme format): ", ""),
                      "box1: a\nbox2: b", "not a meme"):
        assert anchor_boxes(unchanged, 2) == unchanged
