"""HUMOR and the user's topic: group RL's topic prompts and topic reward, the notice for a topic outside the
builtin writer's world, and what the shipped writer does with a topic (its topic slot) and on the two templates that
were once held out of its training (issue 48)."""

from types import SimpleNamespace

import numpy as np
import pytest

from planners.meme_lm import WEIGHTS, mentions_topic, singular

pytestmark = pytest.mark.usefixtures("one_thread")


def _cot(top: str, bottom: str) -> str:
    return ("[Comprehensive Description Section]\nA fall scene.\n\n[Usage Scenarios Section]\nFailure.\n\n"
            "[Text Analysis Section]\nBox 1 sets up.\n\n[Specific Analysis with User Input]\nUser input: mondays.\n"
            f"Step 1: short\nStep 2: setup, punchline\n\nText on the Meme:\nbox1: {top}\nbox2: {bottom}\n")


def test_topic_words_match_case_and_number():
    assert singular("mondays") == "monday" and singular("responsibilities") == "responsibility" and singular("boss") == "boss"
    assert mentions_topic("mondays", ["Monday", "my motivation"]) and mentions_topic("Monday", "me on mondays")
    assert mentions_topic("the exams", ["my exam", "me"]) and not mentions_topic("the exams", ["the diet", "the cake"])
    assert not mentions_topic(None, ["monday", "x"]) and not mentions_topic("pizza", ["pizzazz", "x"])


def test_the_rl_topic_reward_scores_the_boxes_only():
    from training.humor_rl import topic_reward

    hit, miss = _cot("monday", "my motivation"), _cot("the diet", "the cake")
    assert topic_reward([hit, miss], topic=["mondays", "mondays"]) == [1.0, 0.0]
    assert topic_reward([hit, miss], topic=[None, None]) == [0.0, 0.0]  # a prompt without a topic: 0
    assert topic_reward([hit], topic="Monday") == [1.0]
    # the topic in the reasoning but not in the boxes, or boxes that do not read: 0
    assert topic_reward([_cot("the diet", "the cake").replace("A fall scene.", "mondays"), "box1: monday"], topic=["mondays"] * 2) == [0.0, 0.0]
    # a TRL conversational completion reads as its assistant text
    assert topic_reward([[{"role": "assistant", "content": hit}]], topic=["monday"]) == [1.0]


def _scenes(n: int):
    from training.humor_data import make_scene, scene_indices

    return [make_scene("train", i, perception="-") for i in scene_indices("train", n)]


def test_rl_prompts_carry_a_topic_of_their_scene_at_the_asked_rate_deterministically():
    from training.humor_data import scene_topics
    from training.humor_rl import RLRecipe, prompt_topic

    scenes = _scenes(120)
    for rate in (0.25, 0.5):
        topics = [prompt_topic(s, rate, 0) for s in scenes]
        assert abs(np.mean([t is not None for t in topics]) - rate) < 0.12
        assert all(t in scene_topics(s) for s, t in zip(scenes, topics) if t is not None)  # a word of a human meme
        assert topics == [prompt_topic(s, rate, 0) for s in scenes]  # the same scene, the same topic
        assert topics[7:] == [prompt_topic(s, rate, 0) for s in scenes[7:]]  # whatever scenes come before it
        assert topics != [prompt_topic(s, rate, 1) for s in scenes]  # the recipe's seed draws them
    assert all(prompt_topic(s, 0.0, 0) is None for s in scenes)
    assert RLRecipe().topic_rate == 0.0 and RLRecipe().topic_weight > 0  # the shipped writer's recipe has no topics


def test_rl_reward_weights_add_the_topic_weight_only_with_topics(tmp_path):
    from dataclasses import replace

    from training.humor_rl import RLRecipe, grpo_config

    r = RLRecipe(topic_rate=0.5, topic_weight=0.7)
    assert grpo_config(tmp_path, r).reward_weights == [1.0, r.format_weight, 0.7]
    assert grpo_config(tmp_path, replace(r, topic_rate=0.0)).reward_weights == [1.0, r.format_weight]


def test_known_topics_come_from_the_training_captions_most_common_first():
    from training.humor_data import known_topics, scene_topics

    scenes = _scenes(40)
    known = known_topics(scenes)
    assert set(known) == {w for s in scenes for w in scene_topics(s)}
    counts = [sum(w in scene_topics(s) for s in scenes) for w in known]
    assert counts == sorted(counts, reverse=True)


@pytest.fixture(scope="module")
def shipped():
    from planners.meme_lm import BuiltinMemeWriter

    return BuiltinMemeWriter.from_pretrained(WEIGHTS)


def _boxes(texts: list[str]) -> list[list[str]]:
    from planners.meme_cot import MemeFormatError, read_boxes

    out = []
    for t in texts:
        try:
            out.append(read_boxes(t, 2))
        except MemeFormatError:
            pass
    return out


# Issue 48, item 4: the shipped writer (2026-12-05) predates the topic slot and never trained on `crowd` / `hide`. The
# retrained writers that pass these two tests were not shipped (their win rate or their variety fell: docs/history/
# humor.md, "All six templates and a topic slot"); strict, so that shipping a writer that passes turns them red until
# the marker goes.
NOT_SHIPPED = pytest.mark.xfail(strict=True, reason="known limitation of the shipped builtin writer (issue 48, item 4)")


@NOT_SHIPPED
def test_the_shipped_writer_writes_the_asked_topic_in_its_world_and_out_of_it(shipped):
    """The shipped writer wrote this scene's topic word in 0 of these 8 samples at every seed tried (0-5), and
    "exams" in 0; the topic-slot writers of the trial in 5-8 and 3-7."""
    import torch

    from training.humor_data import load_scenes, scene_topics

    scene = load_scenes("test", 3)[2]  # an `ignore` scene; its first topic word (how the benchmark asks): "choosing"
    for topic, least in ((scene_topics(scene)[0], 3), ("exams", 2)):
        texts = shipped.write(scene.still, topic, 3, 8, top_p=0.95, generator=torch.Generator().manual_seed(0))
        assert sum(mentions_topic(topic, b) for b in _boxes(texts)) >= least, (topic, texts)
    plain = shipped.write(scene.still, None, 0, 8, top_p=0.95, generator=torch.Generator().manual_seed(0))
    assert not any("<topic>" in t for t in plain)  # no topic: the slot is never written


@NOT_SHIPPED
def test_the_shipped_writer_describes_a_crowd_scene_as_one_with_its_intent(shipped):
    """The shipped writer, which never saw `crowd`, describes this scene as another template in every sample (and
    splices two templates' notes in some); the trial's writers trained on all six templates, at seeds 0-5, in none."""
    import torch

    from planners.meme_cot import MemeFormatError, parse_meme_cot
    from training.humor_data import load_scenes

    scene = load_scenes("test", 2)[1]
    assert scene.template == "crowd"
    cots = []
    for t in shipped.write(scene.still, None, 3, 8, top_p=0.95, generator=torch.Generator().manual_seed(0)):
        try:
            cots.append(parse_meme_cot(t, 2, 3))
        except MemeFormatError:
            pass
    assert len(cots) >= 4
    assert all(c.description.startswith("A crowd scene:") and c.usage_scenarios.startswith("Overwhelm:") for c in cots), \
        [(c.description, c.usage_scenarios) for c in cots]


def test_a_topic_outside_the_builtin_writers_world_gets_a_notice(shipped):
    assert shipped.topics and "monday" in shipped.topics
    note = shipped.topic_notice("exams")
    assert note and "'exams'" in note and "--writer" in note and sum(t in note for t in shipped.topics) >= 3
    assert "will not follow it" in note  # it has no topic slot (a writer with one: below)
    assert shipped.topic_notice("mondays") is None and shipped.topic_notice("Pizza") is None  # in its world
    assert shipped.topic_notice(None) is None
    assert "\n" not in note


def test_the_pipeline_carries_the_notice_into_its_summary(shipped):
    from pipelines.humor import HumorConfig, HumorPipeline

    seen = []

    class HFWriter:  # a real writer follows any topic: it says nothing
        def write(self, image, topic=None, num_paths=3, n=4, **kw):
            seen.append(topic)
            return [_cot("me", "also me"), _cot("exams", "me")][:n]

    class Writer(HFWriter):  # the builtin writer's notice, without running its model
        topic_notice = staticmethod(shipped.topic_notice)

    class RM:
        def prefer(self, image, a, b):
            return 0.5

        def score(self, image, captions):
            return np.zeros(len(captions))

    def pipe(writer):
        p = HumorPipeline(HumorConfig(num_memes=2, num_paths=0, max_rounds=1), writer=writer, reward_model=RM())
        p.set_progress_bar_config(disable=True)
        return p

    image = np.zeros((16, 16, 3), np.uint8)
    out = pipe(Writer())(image, topic="exams", generator=0)
    assert "'exams'" in out.notice and out.summary()["notice"] == out.notice and seen == ["exams"] and len(out.captions) == 2
    assert pipe(Writer())(image, topic="mondays", generator=0).notice is None
    assert pipe(Writer())(image, generator=0).summary()["notice"] is None
    assert pipe(HFWriter())(image, topic="exams", generator=0).notice is None


def test_the_saved_writer_folders_list_their_topics():
    from planners.meme_lm import writer_topics

    for folder in (WEIGHTS, WEIGHTS.parent / "meme_writer_sft"):
        topics = writer_topics(folder)
        assert topics and len(topics) == len(set(topics)) and {"monday", "pizza", "deadlines"} <= set(topics)
        assert not {"exams", "exam"} & set(topics)



def test_a_topic_slot_writers_notice_says_it_writes_the_topic_in_but_jokes_about_its_world():
    from humor_fakes import tiny_writer
    from planners.meme_lm import add_topic_slot

    w = tiny_writer(steps=1)
    w.topics = ["monday", "pizza", "deadlines", "motivation", "weekend", "responsibilities"]
    assert not w.topic_slot and "will not follow it" in w.topic_notice("exams")
    add_topic_slot(w.tokenizer, w.model)
    w.topic_slot = True
    note = w.topic_notice("exams")
    assert "into its captions" in note and "not about 'exams'" in note and "--writer" in note and "\n" not in note
    assert w.topic_notice("Mondays") is None


def test_rl_reads_a_topic_slot_writers_slot_as_the_topic_and_suppresses_it_without_topics(tmp_path):
    from humor_fakes import tiny_writer
    from planners.meme_lm import add_topic_slot
    from training.humor_rl import RLRecipe, _suppress_topic_slot, grpo_config, make_rm_group_reward, topic_reward

    slotted = _cot("<topic>", "my motivation")
    assert topic_reward([slotted], topic=["mondays"]) == [1.0] and topic_reward([slotted], topic=[None]) == [0.0]

    class RM:  # scores a caption by whether it says "mondays"
        def score(self, image, captions):
            return np.array([float("mondays" in " ".join(c)) for c in captions])

    img = {0: np.zeros((8, 8, 3), np.uint8)}
    filled = make_rm_group_reward(RM(), img, 2, topic_slot=True)([slotted, _cot("me", "x")], scene=[0, 0], topic=["mondays"] * 2)
    assert filled[0] > filled[1] and make_rm_group_reward(RM(), img, 2)([slotted, _cot("me", "x")], scene=[0, 0]) == [0.5, 0.5]
    w = tiny_writer(steps=1)
    slot = add_topic_slot(w.tokenizer, w.model)
    plain = _suppress_topic_slot(grpo_config(tmp_path, RLRecipe()), w.tokenizer, RLRecipe(), True)
    assert plain.generation_kwargs["suppress_tokens"] == [slot]  # the shipped recipe: no topics, so never the slot
    asked = RLRecipe(topic_rate=0.5)
    assert not (_suppress_topic_slot(grpo_config(tmp_path, asked), w.tokenizer, asked, True).generation_kwargs or {}).get("suppress_tokens")
    assert _suppress_topic_slot(grpo_config(tmp_path, RLRecipe()), w.tokenizer, RLRecipe(), False).generation_kwargs is None
