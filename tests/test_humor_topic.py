"""HUMOR and the user's topic: group RL's topic prompts and topic reward, and the notice for a topic outside the
builtin writer's world (issue 48)."""

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


def test_a_topic_outside_the_builtin_writers_world_gets_a_notice(shipped):
    assert shipped.topics and "monday" in shipped.topics
    note = shipped.topic_notice("exams")
    assert note and "'exams'" in note and "--writer" in note and sum(t in note for t in shipped.topics) >= 3
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

