"""HUMOR's pairwise reward and group ranking math (specs/humor.md [RL-CODE] judge format and reward, b.3, d-1..3)."""

import math
from itertools import combinations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from core.errors import InputError
from planners.meme_ranking import (
    JudgeVerdict,
    borda,
    bradley_terry,
    group_pairwise_reward,
    kendall_tau,
    pair_rewards,
    parse_judge_reply,
    preference_matrix,
    sample_pairs,
    symmetrise,
)

# ---- the judge's reply -----------------------------------------------------------------------------


def test_well_formed_reply():
    v = parse_judge_reply("Image 1 score: 7\nImage 2 score: 3\nWinner: 1\nReason: The first lands the twist.")
    assert v == JudgeVerdict(7.0, 3.0, 1, "The first lands the twist.")
    assert pair_rewards(v) == pytest.approx((0.7, 0.3))
    assert pair_rewards("Image 1 score: 7\nImage 2 score: 3") == pytest.approx((0.7, 0.3))  # raw text is parsed


@pytest.mark.parametrize("text", [
    "**Image 1 score:** 8\n**Image 2 score:** 2\n**Winner:** 1\n**Reason:** sharper.",
    "## Scores\n- image 1 SCORE : 8/10\n- Image 2 score: 2/10\n\nWinner: Image 1\nReason: sharper.",
    "  Image1 score：8.0  \n Image2 score：2.0\n winner：1\n",
    "Image 1 score: `8`\nImage 2 score: [2]\nWinner: **1**",
])
def test_markdown_case_and_spacing(text):
    v = parse_judge_reply(text)
    assert (v.score1, v.score2, v.winner) == (8.0, 2.0, 1)
    assert pair_rewards(v) == pytest.approx((0.8, 0.2))


def test_scores_missing_fall_back_to_winner():
    assert pair_rewards("Winner: 2\nReason: the second is funnier") == (0.0, 1.0)
    assert pair_rewards("Image 1 score: 9\nWinner: 2") == (0.0, 1.0)  # one score is not enough
    assert pair_rewards("Image 1 score: n/a\nImage 2 score: ?\n**Winner**: 1") == (1.0, 0.0)
    assert pair_rewards("winner: TIE") == (0.5, 0.5)
    assert parse_judge_reply("Winner: Image 2").winner == 2
    assert parse_judge_reply("Winner: 12").winner is None  # not a valid winner


def test_both_missing_and_garbage_give_half():
    for text in ["", "   ", "I like both of them a lot, 10 out of 10.", "Winner: the cat", None, 42, ["x"],
                 "\x00\xff garbage", "Image 1 score: <0-10>\nImage 2 score: <0-10>\nWinner: <1 or 2 or tie>"]:
        v = parse_judge_reply(text)
        assert (v.score1, v.score2, v.winner) == (None, None, None), text
        assert pair_rewards(v) == (0.5, 0.5)


def test_zero_sum_gives_half():
    v = parse_judge_reply("Image 1 score: 0\nImage 2 score: 0\nWinner: 1")
    assert (v.score1, v.score2) == (0.0, 0.0)
    assert pair_rewards(v) == (0.5, 0.5)  # published: the sum decides, the Winner line is not consulted


def test_reason_keeps_text_and_scores_not_clipped():
    v = parse_judge_reply("Image 1 score: 15\nImage 2 score: 5\nWinner: 1\nReason: **bold** claim\nsecond line")
    assert v.reason == "**bold** claim\nsecond line"
    assert pair_rewards(v) == pytest.approx((0.75, 0.25))


# ---- pairs and the group reward --------------------------------------------------------------------


def test_sample_pairs_all_and_capped():
    assert sample_pairs(4) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert sample_pairs(8) == list(combinations(range(8), 2)) == sample_pairs(8, 0) == sample_pairs(8, 100)
    capped = sample_pairs(8, 10, generator=123)
    assert len(capped) == 10 == len(set(capped)) and set(capped) <= set(combinations(range(8), 2))
    assert capped == sorted(capped) == sample_pairs(8, 10, generator=123)  # seeded, deterministic
    assert capped == sample_pairs(8, 10, generator=torch.Generator().manual_seed(123))
    assert sample_pairs(8, 10, generator=np.random.default_rng(5)) == sample_pairs(8, 10, np.random.default_rng(5))
    assert any(sample_pairs(8, 10, generator=s) != capped for s in range(5))
    assert sample_pairs(1) == [] and sample_pairs(0) == []
    with pytest.raises(InputError, match="generator"):
        sample_pairs(8, 10)  # a capped subset needs a seed
    with pytest.raises(InputError, match="max_pairs"):
        sample_pairs(8, -1, generator=0)


def test_group_pairwise_reward_means_and_uncompared():
    rewards = group_pairwise_reward(4, [(0, 1, 0.7, 0.3), (0, 2, 0.4, 0.6), (1, 2, 0.5, 0.5)])
    assert rewards == pytest.approx([0.55, 0.4, 0.55, 0.5])  # sample 3 never compared -> 0.5
    assert group_pairwise_reward(3, []) == [0.5, 0.5, 0.5]
    # end to end from judge replies over a capped subset: uncompared samples get 0.5
    pairs = sample_pairs(8, 3, generator=0)
    replies = {p: f"Image 1 score: {p[0] + 1}\nImage 2 score: {p[1] + 1}" for p in pairs}
    out = group_pairwise_reward(8, [(i, j, *pair_rewards(replies[(i, j)])) for i, j in pairs])
    seen = {k for p in pairs for k in p}
    assert all(out[k] == 0.5 for k in range(8) if k not in seen) and len(seen) < 8
    with pytest.raises(InputError):
        group_pairwise_reward(3, [(0, 3, 0.5, 0.5)])
    with pytest.raises(InputError):
        group_pairwise_reward(3, [(1, 1, 0.5, 0.5)])


# ---- Borda, symmetrisation, Kendall tau ------------------------------------------------------------


def transitive(true_scores):
    """P[i, j] = 1 when i's true score is higher (a transitive 0/1 tournament)."""
    s = np.asarray(true_scores, dtype=float)
    return (s[:, None] > s[None, :]).astype(float)


def test_borda_recovers_transitive_order():
    true = np.array([0.3, 2.0, -1.0, 0.9, 5.0, 1.5])
    ranking = borda(transitive(true))
    assert ranking.order.tolist() == np.argsort(-true).tolist()
    n = len(true)
    assert ranking.scores.min() == pytest.approx(1 / n) and ranking.scores.max() == 1.0
    assert sorted(ranking.scores.tolist()) == pytest.approx([(k + 1) / n for k in range(n)])
    assert ranking.counts.tolist() == [float(sum(true[i] > true)) for i in range(n)]
    assert ranking.scores[ranking.order[0]] == 1.0 and (ranking.ranks[ranking.order] == np.arange(n)).all()
    assert kendall_tau(ranking.scores, true) == pytest.approx(1.0)
    assert kendall_tau(ranking.scores, -true) == pytest.approx(-1.0)


def test_borda_from_comparisons_and_ties():
    true = [3.0, 1.0, 2.0]
    comps = [(i, j, float(true[i] > true[j])) for i, j in combinations(range(3), 2)]
    P = preference_matrix(3, comps)
    assert np.allclose(P + P.T, 1 - np.eye(3))
    assert borda(P).order.tolist() == [0, 2, 1]
    assert borda(np.zeros((3, 3))).order.tolist() == [0, 1, 2]  # ties keep index order
    with pytest.raises(InputError):
        borda(np.ones((2, 3)))


def test_symmetrise_is_antisymmetric():
    rng = np.random.default_rng(0)
    Q = rng.random((6, 6))  # an order-sensitive judge: Q[i, j] = P(first better | i first)
    P = symmetrise(Q)
    off = ~np.eye(6, dtype=bool)
    assert np.allclose((P + P.T)[off], 1.0) and (np.diag(P) == 0).all()
    i, j = 1, 4
    assert P[i, j] == pytest.approx(0.5 * (Q[i, j] + (1 - Q[j, i])))
    # a judge with a pure position bias (always prefers the first shown) becomes 0.5 everywhere
    assert np.allclose(symmetrise(np.ones((4, 4)))[~np.eye(4, dtype=bool)], 0.5)


def test_symmetrise_with_one_order_missing():
    Q = preference_matrix(3, [(0, 1, 0.8), (1, 0, 0.4), (0, 2, 0.9)], ordered=True)
    assert np.isnan(Q[2, 0]) and np.isnan(Q[1, 2]) and np.isnan(Q[2, 1])
    P = symmetrise(Q)
    assert P[0, 1] == pytest.approx(0.5 * (0.8 + 0.6)) and P[1, 0] == pytest.approx(1 - P[0, 1])
    assert P[0, 2] == pytest.approx(0.9) and P[2, 0] == pytest.approx(0.1)  # one order only
    assert P[1, 2] == 0.0 == P[2, 1]  # never compared: counts nothing
    assert borda(P).order[0] == 0


# ---- Bradley-Terry ---------------------------------------------------------------------------------

# 4 players, 5 games per pair; W[i, j] = games i won against j (strongly connected: 2 beat 0 once, 3 beat 1, 2)
W4 = np.array([[0, 4, 4, 5],
               [1, 0, 3, 4],
               [1, 2, 0, 3],
               [0, 1, 2, 0]], dtype=float)


def reference_mle(W):
    """The BT MLE by direct minimisation of the negative log-likelihood over log-strengths (theta_0 = 0)."""
    n = len(W)

    def nll(free):
        theta = np.concatenate([[0.0], free])
        d = theta[:, None] - theta[None, :]
        return float(np.sum(W * np.logaddexp(0.0, -d)))

    res = minimize(nll, np.zeros(n - 1), method="BFGS", options={"gtol": 1e-10})
    pi = np.exp(np.concatenate([[0.0], res.x]))
    return pi / pi.sum()


def test_bradley_terry_matches_reference_mle():
    pi = bradley_terry(W4)
    assert pi.sum() == pytest.approx(1.0)
    assert np.argsort(-pi).tolist() == [0, 1, 2, 3]
    assert np.allclose(pi, reference_mle(W4), atol=1e-4, rtol=0)
    # the MLE's score equations: each player's wins equal its expected wins
    games = W4 + W4.T
    expected = (games * pi[:, None] / (pi[:, None] + pi[None, :])).sum(axis=1)
    assert np.allclose(expected, W4.sum(axis=1), atol=1e-6)


def test_bradley_terry_two_players_by_hand():
    pi = bradley_terry([[0, 3], [1, 0]])  # 3 wins to 1: pi_0 / pi_1 = 3
    assert pi == pytest.approx([0.75, 0.25], abs=1e-9)


def test_bradley_terry_prior_keeps_undefeated_finite():
    W = W4.copy()
    W[1:, 0] = 0  # player 0 never loses
    with pytest.raises(InputError, match="strongly connected"):
        bradley_terry(W)
    pi = bradley_terry(W, prior=0.1)
    assert np.isfinite(pi).all() and (pi > 0).all() and int(np.argmax(pi)) == 0
    assert bradley_terry(W, prior=1.0).max() < pi.max()  # a stronger prior pulls strengths together


def test_bradley_terry_on_soft_preferences():
    true = np.array([0.5, -1.0, 2.0, 0.0, 1.0])
    P = 1 / (1 + np.exp(-(true[:, None] - true[None, :])))
    np.fill_diagonal(P, 0)
    pi = bradley_terry(P)  # one comparison per pair with its expected outcome: the fit recovers exp(true)
    assert np.allclose(np.log(pi) - np.log(pi).mean(), true - true.mean(), atol=1e-6)


# ---- noise consistency (b.3, d-3) ------------------------------------------------------------------


def noisy_borda_tau(theta, eta, per_pair, rng):
    """Borda on labels drawn from BT(theta) and flipped at rate eta, ``per_pair`` comparisons per pair."""
    n = len(theta)
    P = np.zeros((n, n))
    for i, j in combinations(range(n), 2):
        p = 1 / (1 + math.exp(-(theta[i] - theta[j])))
        clean = rng.random(per_pair) < p
        flip = rng.random(per_pair) < eta
        P[i, j] = np.mean(clean ^ flip)
        P[j, i] = 1 - P[i, j]
    return kendall_tau(borda(P).scores, theta), P


def test_noise_consistency():
    theta = np.linspace(1.5, -1.5, 6)
    rng = np.random.default_rng(7)
    sizes = (2, 10, 1000)  # comparisons per pair
    taus = {m: np.array([noisy_borda_tau(theta, 0.3, m, rng)[0] for _ in range(20)]) for m in sizes}
    means = [taus[m].mean() for m in sizes]
    assert means[0] < means[1] <= means[2] + 1e-12 and np.allclose(taus[1000], 1.0)  # converges to the true order
    _, P = noisy_borda_tau(theta, 0.3, 20000, rng)
    p = 1 / (1 + np.exp(-(theta[0] - theta[1])))
    assert P[0, 1] == pytest.approx((1 - 2 * 0.3) * p + 0.3, abs=0.015)  # the affine map of b.3
    assert np.allclose([noisy_borda_tau(theta, 0.7, 1000, rng)[0] for _ in range(5)], -1.0)  # eta > 1/2 reverses


def test_kendall_tau_checks():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3], [3, 1, 2]) == pytest.approx(-1 / 3)
    with pytest.raises(InputError):
        kendall_tau([1, 2], [1, 2, 3])
