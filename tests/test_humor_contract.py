"""HUMOR runs the shared pipeline contract (``PipelineTesterMixin``) on tiny real builtin components, plus the
edges the issue names: unreadable samples are re-drawn and reported, repeats are dropped, ranking by Borda and
by Bradley-Terry agree with the reward model, and the outputs carry every reasoning path."""

import numpy as np
import pytest

from humor_fakes import scene_and_perception, tiny_reward_model, tiny_writer
from pipeline_tester import PipelineTesterMixin
from pipelines.humor import HumorConfig, HumorPipeline

pytestmark = pytest.mark.usefixtures("one_thread")

WRITER = None


def components():
    global WRITER
    if WRITER is None:
        WRITER = tiny_writer()
    return {"writer": WRITER, "reward_model": tiny_reward_model()}


class TestHumorContract(PipelineTesterMixin):
    pipeline_class = HumorPipeline
    # memes kept, the best one's reward, the best meme's mean pixel, rejected samples (computed once, then frozen)
    expected_slice = [3.0, 0.5024, 65.9688, 4.0]
    slice_atol = 0.05
    bad_inputs = (
        ({"topic": ""}, "topic"),
        ({"topic": "x" * 500}, "characters"),
        ({"image": np.zeros((8, 8), np.uint8)}, "image"),
        ({"image": 3}, "image"),
    )

    def make_pipeline(self, **config):
        cfg = HumorConfig(**{"num_memes": 3, "num_paths": 0, **config})
        pipe = HumorPipeline(cfg, **self.get_dummy_components())
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def get_dummy_components(self):
        return components()

    def get_dummy_inputs(self, seed=0):
        return {"image": scene_and_perception().still, "generator": seed}

    def output_slice(self, out):
        return np.array([len(out.memes), out.rewards[0] if out.rewards else 0.0, out.memes[0].astype(np.float64).mean() if out.memes else 0.0, len(out.rejected)])


def test_settings_are_checked_with_their_range():
    from core.errors import InputError

    for bad in ({"num_memes": 0}, {"num_memes": 1000}, {"num_paths": -1}, {"ranking": "elo"}, {"temperature": 0}):
        with pytest.raises(InputError, match=next(iter(bad))):
            HumorConfig(**bad)


def test_memes_are_distinct_ranked_best_first_and_carry_their_reasoning(tmp_path):
    pipe = HumorPipeline(HumorConfig(num_memes=3, num_paths=0, max_rounds=4), **components())
    pipe.set_progress_bar_config(disable=True)
    out = pipe(scene_and_perception().still, generator=1)
    assert out.memes and len({tuple(c) for c in out.captions}) == len(out.captions)
    assert out.rewards == sorted(out.rewards, reverse=True) and all(0 <= r <= 1 for r in out.rewards)
    assert out.memes[0].shape[0] >= 384 and out.memes[0].dtype == np.uint8  # a 64x64 still is enlarged before the text
    assert all(c["anchor"] is None and c["paths"] == [] for c in out.cots)  # num_paths=0: the caption alone
    assert all(r["why"] for r in out.rejected)
    bt = HumorPipeline(HumorConfig(num_memes=3, num_paths=0, max_rounds=4, ranking="bradley_terry"), **components())
    bt.set_progress_bar_config(disable=True)
    assert bt(scene_and_perception().still, generator=1).captions == out.captions  # one pointwise RM: both orders agree
    files = {p.name for p in out.save(tmp_path / "o").iterdir()}
    assert {"meme_1.png", "gallery.png", "image.png", "result.json", "config.json"} <= files
    s = out.summary()
    assert s["memes"][0]["rank"] == 1 and s["memes"][0]["boxes"] == out.captions[0]


class _Writer:
    """Writes a fixed sequence of texts (two unreadable first)."""

    def __init__(self, texts):
        self.texts, self.calls = list(texts), 0

    def write(self, image, topic=None, num_paths=3, n=4, **kw):
        self.calls += 1
        out, self.texts = self.texts[:n], self.texts[n:]
        return out

    def save_pretrained(self, d):
        raise NotImplementedError


def test_unreadable_samples_are_redrawn_and_a_writer_that_never_follows_the_format_is_reported():
    good = "Text on the Meme:\nbox1: {}\nbox2: bottom\n"
    writer = _Writer(["nonsense", "box1 only", good.format("a"), good.format("a"), good.format("b"), good.format("c")])
    pipe = HumorPipeline(HumorConfig(num_memes=2, num_paths=0, max_rounds=3), writer=writer, reward_model=tiny_reward_model())
    pipe.set_progress_bar_config(disable=True)
    out = pipe(scene_and_perception().still, generator=0)
    assert sorted(c[0] for c in out.captions) == ["a", "b"] and writer.calls == 2 and len(out.rejected) == 3
    assert any("repeats" in r["why"] for r in out.rejected)
    pipe = HumorPipeline(HumorConfig(num_memes=2, num_paths=0, max_rounds=2), writer=_Writer(["x"] * 4), reward_model=tiny_reward_model())
    pipe.set_progress_bar_config(disable=True)
    out = pipe(scene_and_perception().still, generator=0)
    assert not out.memes and "no readable meme" in out.message and len(out.rejected) == 4
    assert out.summary()["memes"] == [] and "best: '-'" in str(out)


def test_a_multi_path_cot_is_parsed_into_paths_and_the_anchor():
    from training.humor_data import trace

    s = scene_and_perception()
    texts = [trace(s, gt, [k for k in range(len(s.candidates)) if k != gt][:2], 3) for gt in (0, 1)]
    pipe = HumorPipeline(HumorConfig(num_memes=2, num_paths=3), writer=_Writer(texts), reward_model=tiny_reward_model())
    pipe.set_progress_bar_config(disable=True)
    out = pipe(s.still, topic="loyalty", generator=0)
    assert out.topic == "loyalty" and out.intent and all(len(c["paths"]) == 3 and c["anchor"] in (0, 1, 2) for c in out.cots)
    best = out.cots[0]
    assert out.captions[0][1] in best["paths"][best["anchor"]]["text"]


def test_anchored_boxes_write_the_caption_the_anchored_path_quotes():
    from training.humor_data import trace

    s = scene_and_perception()
    gt, other = 0, next(k for k in range(1, len(s.candidates)) if s.candidates[k] != s.candidates[0])
    text = trace(s, gt, [other], 2)
    # the boxes say another candidate than the anchored path, as the builtin writer's often do
    loose = text.split("Text on the Meme:")[0] + "Text on the Meme:\nbox1: {}\nbox2: {}\n".format(*s.candidates[other])

    def run(**config):
        pipe = HumorPipeline(HumorConfig(num_memes=1, num_paths=2, max_rounds=1, **config), writer=_Writer([loose]),
                             reward_model=tiny_reward_model())
        pipe.set_progress_bar_config(disable=True)
        return pipe(s.still, generator=0)

    assert HumorConfig().anchored_boxes is False
    assert run().captions == [list(s.candidates[other])]
    assert run(anchored_boxes=True).captions == [list(s.candidates[gt])]
