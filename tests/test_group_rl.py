"""HUMOR's group-wise RL math (specs/humor.md [RL-CODE] reward mix, GRPO settings, TRL conventions; b.4; d-6)."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from core.errors import InputError
from planners.meme_cot import MemeCoT, format_reward, render_cot
from training.group_rl import (
    FORMAT_WEIGHT,
    GROUP_SIZE,
    KL_BETA,
    clipped_surrogate,
    format_reward_func,
    group_advantages,
    grpo_loss,
    k3_kl,
    k3_kl_per_token,
    make_group_pairwise_reward,
    reward_model_loss,
    total_reward,
)


def test_published_constants():
    assert (GROUP_SIZE, KL_BETA, FORMAT_WEIGHT) == (8, 0.01, 0.1)


# ---- advantages ------------------------------------------------------------------------------------


def test_group_advantages_zero_mean_unit_std():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(4 * 8, generator=g)
    adv = group_advantages(rewards, 8)
    groups = adv.view(4, 8)
    assert torch.allclose(groups.mean(dim=1), torch.zeros(4), atol=1e-6)
    assert torch.allclose(groups.std(dim=1), torch.ones(4), atol=1e-3)  # std + 1e-4 in the denominator
    r = rewards.view(4, 8)
    assert torch.allclose(groups, (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4))
    none = group_advantages(rewards, 8, scale="none").view(4, 8)
    assert torch.allclose(none, r - r.mean(1, keepdim=True))
    batch = group_advantages(rewards, 8, scale="batch").view(4, 8)
    assert torch.allclose(batch, (r - r.mean(1, keepdim=True)) / (rewards.std() + 1e-4))


def test_group_advantages_equal_rewards_are_zero():
    rewards = torch.tensor([0.1] * 8 + [0.3, 0.7, 0.3, 0.7, 0.5, 0.5, 0.2, 0.9])
    adv = group_advantages(rewards, 8)
    assert torch.isfinite(adv).all() and (adv[:8] == 0).all() and adv[8:].abs().sum() > 0
    assert (group_advantages([0.55] * 16, 8, eps=0.0) == 0).all()  # no NaN even without eps
    assert (group_advantages([0.2, 0.9, 0.4], 1) == 0).all()  # a group of one carries no signal
    with pytest.raises(InputError, match="group_size"):
        group_advantages(torch.rand(10), 8)
    with pytest.raises(InputError, match="rewards"):
        group_advantages(torch.tensor([0.5, float("nan")]), 2)


def test_total_reward_published_mix():
    assert total_reward(0.6, 0.5) == pytest.approx(0.65)
    assert total_reward([0.6, 0.2], [1.0, 0.0]) == pytest.approx([0.7, 0.2])
    t = total_reward(torch.tensor([0.6, 0.2]), torch.tensor([1.0, 0.0]))
    assert torch.allclose(t, torch.tensor([0.7, 0.2]))
    with pytest.raises(InputError):
        total_reward([0.1, 0.2], [0.3])


# ---- KL, surrogate, loss ---------------------------------------------------------------------------


def batch(seed=0, B=4, T=6):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g) * 3
    old = logp + 0.3 * torch.randn(B, T, generator=g)
    ref = logp + 0.5 * torch.randn(B, T, generator=g)
    mask = torch.ones(B, T)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    adv = torch.randn(B, generator=g)
    return logp, old, ref, mask, adv


def test_k3_non_negative_and_zero_at_equality():
    logp, _, ref, mask, _ = batch()
    kl = k3_kl_per_token(logp, ref)
    d = ref - logp
    assert torch.allclose(kl, torch.exp(d) - d - 1) and (kl >= 0).all() and kl.sum() > 0
    assert (k3_kl_per_token(logp, logp) == 0).all() and k3_kl(logp, logp, mask) == 0
    assert torch.isclose(k3_kl(logp, ref, mask), (kl * mask).sum() / mask.sum())
    assert torch.isclose(k3_kl(logp, ref), kl.mean())


def test_surrogate_at_ratio_one_is_unclipped():
    logp, _, _, mask, adv = batch()
    s = clipped_surrogate(logp, logp.clone(), adv, mask)
    unclipped = (((torch.ones_like(logp) * adv[:, None]) * mask).sum(1) / mask.sum(1)).mean()
    assert torch.isclose(s, unclipped) and torch.isclose(s, adv.mean())


def test_surrogate_clips_and_sequence_mean():
    logp, old, _, mask, adv = batch(1)
    rho = torch.exp(logp - old)
    per_token = torch.min(rho * adv[:, None], rho.clamp(0.8, 1.2) * adv[:, None])
    expected = ((per_token * mask).sum(1) / mask.sum(1)).mean()  # 1/|o_i| per sequence, then the batch mean
    assert torch.isclose(clipped_surrogate(logp, old, adv, mask), expected)
    # far outside the trust region the gradient vanishes for the clipped side
    lp = torch.zeros(1, 1, requires_grad=True)
    clipped_surrogate(lp, torch.tensor([[-1.0]]), torch.tensor([1.0])).backward()  # rho = e > 1.2, A > 0
    assert lp.grad.abs().item() == 0.0


def test_grpo_loss_value_and_stats():
    logp, old, ref, mask, adv = batch(2)
    loss, stats = grpo_loss(logp, old, ref, adv, mask, beta=0.01)
    rho = torch.exp(logp - old)
    kl = torch.exp(ref - logp) - (ref - logp) - 1
    per_token = -torch.min(rho * adv[:, None], rho.clamp(0.8, 1.2) * adv[:, None]) + 0.01 * kl
    assert torch.isclose(loss, ((per_token * mask).sum(1) / mask.sum(1)).mean())
    assert stats["kl"] == pytest.approx(float((kl * mask).sum() / mask.sum()), rel=1e-5)
    region = ((rho < 0.8) & (adv[:, None] < 0)) | ((rho > 1.2) & (adv[:, None] > 0))
    assert stats["clip_fraction"] == pytest.approx(float((region * mask).sum() / mask.sum()))
    assert 0 < stats["clip_fraction"] < 1


def test_grpo_loss_zero_gradient_without_signal():
    logp, old, ref, mask, _ = batch(3)
    lp = logp.clone().requires_grad_(True)
    loss, _ = grpo_loss(lp, old, ref, torch.zeros(4), mask, beta=0.0)
    loss.backward()
    assert loss.item() == 0.0 and (lp.grad == 0).all()
    # from equal rewards: zero advantages, so only the KL term would move the policy
    adv = group_advantages(torch.full((4,), 0.5), 4)
    lp.grad = None
    grpo_loss(lp, old, None, adv, mask, beta=0.0)[0].backward()
    assert (lp.grad == 0).all()
    with pytest.raises(InputError, match="ref_logp"):
        grpo_loss(lp, old, None, adv, mask, beta=0.01)


def test_grpo_loss_kl_gradient_pulls_towards_reference():
    logp, _, ref, mask, _ = batch(4)
    lp = logp.clone().requires_grad_(True)
    loss, _ = grpo_loss(lp, lp.detach(), ref, torch.zeros(4), mask, beta=1.0)
    loss.backward()
    keep = mask.bool()
    # d/dlogp [exp(ref - logp) - (ref - logp) - 1] = 1 - exp(ref - logp): positive where logp > ref
    assert (torch.sign(lp.grad[keep]) == torch.sign((logp - ref)[keep])).all()


# ---- reward model loss -----------------------------------------------------------------------------


RC = torch.tensor([1.2, -0.3, 0.8, 2.0])
RR = torch.tensor([0.1, 0.4, -0.5, 1.9])


def test_reward_model_loss_formula():
    expected = -F.logsigmoid(RC - RR).mean() + 0.01 * torch.mean((RC + RR) ** 2)
    assert torch.isclose(reward_model_loss(RC, RR), expected)
    assert torch.isclose(reward_model_loss(RC, RR, centering=None), -F.logsigmoid(RC - RR).mean())
    assert torch.isclose(reward_model_loss(RC, RR, centering=0.0, margin=0.5), -F.logsigmoid(RC - RR - 0.5).mean())


def test_reward_model_loss_equals_trl():
    """Our value against TRL's own ``RewardTrainer.compute_loss`` on the same logits (skipped without TRL)."""
    trl = pytest.importorskip("trl")
    from collections import defaultdict

    logits = torch.cat([RC, RR])[:, None]  # TRL chunks the batch: first half chosen, second half rejected
    stub = SimpleNamespace(
        model=SimpleNamespace(training=False), args=SimpleNamespace(center_rewards_coefficient=0.01),
        accelerator=SimpleNamespace(gather=lambda x: x, gather_for_metrics=lambda x: x),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0, _tp_size=1)

    def model(**kw):
        return SimpleNamespace(logits=logits)

    theirs = trl.RewardTrainer.compute_loss(stub, model, {"attention_mask": torch.ones(8, 3)})
    assert torch.isclose(reward_model_loss(RC, RR, centering=0.01), theirs)


# ---- TRL-style reward functions --------------------------------------------------------------------


def test_format_reward_func_trl_signature():
    good = render_cot(MemeCoT(description="A cat stares.", usage_scenarios="Shock.", text_analysis="Deadpan.",
                              step1="Work.", step2="Shorter.", text_on_meme=["Top", "Bottom"]))
    completions = [good, "nothing", [{"role": "assistant", "content": good}],
                   [{"role": "assistant", "content": [{"type": "text", "text": good}]}]]
    out = format_reward_func(completions, num_boxes=[2, 2, 2, 1], prompts=["p"] * 4)
    assert out == [1.0, format_reward("nothing", 2), 1.0, format_reward(good, 1)] and out[3] < 1.0
    assert format_reward_func([good], num_boxes=2) == [1.0]


def test_group_pairwise_reward_function():
    quality = [3, 9, 1, 5, 2, 2, 8, 4]  # the fake judge scores each text by the number it holds

    def judge(a, b, row):
        assert row["template"] == "drake"
        return f"Image 1 score: {int(a)}\nImage 2 score: {int(b)}\nWinner: 1\nReason: fake"

    fn = make_group_pairwise_reward(judge, group_size=4)
    assert fn.__name__ == "pairwise_reward"
    out = fn([str(q) for q in quality], template=["drake"] * 8)
    assert len(out) == 8 and all(0 <= r <= 1 for r in out)
    for start in (0, 4):  # within each group the order of rewards is the order of quality
        q, r = quality[start:start + 4], out[start:start + 4]
        assert sorted(range(4), key=lambda k: q[k]) == sorted(range(4), key=lambda k: r[k])
    expected_0 = sum(3 / (3 + x) for x in (9, 1, 5)) / 3
    assert out[0] == pytest.approx(expected_0)
    capped = make_group_pairwise_reward(judge, group_size=4, max_pairs=1, seed=3)
    r = capped([str(q) for q in quality], template=["drake"] * 8)
    assert sum(x == 0.5 for x in r) >= 4  # each group: one pair judged, two samples uncompared
    assert r == make_group_pairwise_reward(judge, group_size=4, max_pairs=1, seed=3)(
        [str(q) for q in quality], template=["drake"] * 8)
    with pytest.raises(InputError, match="completions"):
        fn(["1", "2", "3"], template=["drake"] * 3)
