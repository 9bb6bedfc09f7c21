"""HUMOR's hf backend on a tiny random Qwen2.5-VL built offline: the writer samples through the protocol's seeded
``generate``, the published pairwise reward head scores two rendered memes, TRL's GRPOTrainer takes one RL step
on the VLM itself, and a saved hf pipeline reloads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from humor_fakes import tiny_reward_model

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tiny_vlms import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)


def test_the_vlm_writer_samples_several_seeded_answers(tiny_dir, image):
    from planners.meme_lm import VLMMemeWriter, load_meme_writer

    w = load_meme_writer(str(tiny_dir))
    assert isinstance(w, VLMMemeWriter)
    w.max_new_tokens = 8
    a = w.write(image, "mondays", 3, 2, generator=torch.Generator().manual_seed(0))
    assert len(a) == 2 and all(isinstance(t, str) for t in a)
    assert w.write(image, "mondays", 3, 2, generator=torch.Generator().manual_seed(0)) == a


def test_a_checkpoint_without_a_head_judges_with_the_published_prompt(tiny_dir, image):
    from planners.meme_reward import VLMJudgeRM, load_reward_model

    judge = load_reward_model(str(tiny_dir))
    assert isinstance(judge, VLMJudgeRM)
    judge.max_new_tokens = 6
    p = judge.prefer(image, ("a", "b"), ("c", "d"))
    assert p == 0.5  # random weights write no readable verdict: the published fallback is a tie


def test_the_pairwise_head_starts_at_a_tie_is_symmetrised_and_reloads(tiny_dir, image, tmp_path):
    from planners.loading import load_vlm
    from planners.meme_reward import HFPairwiseRM, load_reward_model

    rm = HFPairwiseRM(load_vlm(str(tiny_dir)))
    a, b = ("when the code works", "it does not"), ("me", "also me")
    assert rm.prefer(image, a, b) == pytest.approx(0.5)  # the zero-initialised head has no opinion
    torch.nn.init.normal_(rm.head.weight, std=1.0)
    p = rm.prefer(image, a, b)
    assert 0 < p < 1 and p + rm.prefer(image, b, a) == pytest.approx(1.0, abs=1e-5)
    logits = rm(np.zeros((56, 56, 3), np.uint8), np.zeros((56, 56, 3), np.uint8))
    assert logits.shape == (1, 2)
    rm.save_pretrained(tmp_path / "rm")
    assert load_reward_model(str(tmp_path / "rm")).prefer(image, a, b) == pytest.approx(p, abs=1e-5)


def test_one_grpo_step_on_the_vlm_through_trl(tiny_dir, tmp_path, monkeypatch):
    from dataclasses import replace

    from training.humor_rl import tiny_recipe, train_rl

    import training.humor_data as data

    real = data.load_scenes
    monkeypatch.setattr(data, "load_scenes", lambda split, count, seed=0, cache_dir=tmp_path / "cache", held_out=():
                        real(split, count, seed, cache_dir, held_out))
    facts = train_rl(tmp_path / "rl", tiny_dir, replace(tiny_recipe(), scenes=4, max_completion_length=8), reward_model=tiny_reward_model())
    assert facts["steps"] == 1 and facts["curve"] and "rewards/pairwise_reward/mean" in facts["curve"][0]
    assert (tmp_path / "rl" / "config.json").is_file() and list((tmp_path / "rl" / "run").glob("checkpoint-1"))


def test_an_hf_pipeline_runs_and_reloads_with_identical_output(tiny_dir, image, tmp_path):
    from pipelines.humor import HumorConfig, HumorPipeline

    pipe = HumorPipeline.build(components={"writer": str(tiny_dir), "reward_model": str(tiny_dir)},  # the judge-prompt RM
                               config={"num_memes": 2, "max_rounds": 1})
    pipe.writer.max_new_tokens = 8
    pipe.set_progress_bar_config(disable=True)
    out = pipe(image, generator=0)
    assert out.memes == [] and "no readable meme" in out.message and len(out.rejected) == 2  # random weights write noise
    pipe.save_pretrained(tmp_path / "p")
    again = HumorPipeline.from_pretrained(tmp_path / "p")
    again.writer.max_new_tokens = 8
    again.set_progress_bar_config(disable=True)
    assert [r["text"] for r in again(image, generator=0).rejected] == [r["text"] for r in out.rejected]
    assert isinstance(again.config, HumorConfig)
