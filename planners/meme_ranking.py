"""Ranking a group of memes from pairwise judgements: HUMOR's pairwise reward and group ranking, model-free math
(specs/humor.md, "Update (2026-12): the group-RL code is public [RL-CODE]", b.3 and b.4).

The judge (a VLM shown two rendered memes of one template) answers in the published format::

    Image 1 score: <0-10>
    Image 2 score: <0-10>
    Winner: 1|2|tie
    Reason: ...

``parse_judge_reply`` reads it into a ``JudgeVerdict``; ``pair_rewards`` turns a verdict into the published per-pair
rewards (``s_a / (s_a + s_b)``; 0.5 / 0.5 when the sum is 0; no usable scores -> the Winner line -> 0.5 / 0.5);
``group_pairwise_reward`` averages each sample's pair rewards (0.5 when it was never compared), over the pairs
``sample_pairs`` chose (all C(G, 2) or a capped, seeded random subset). That is the RL reward's pairwise term.

For evaluation and analysis (b.3, the author's ``scripts/group_rank_eval.py``): ``preference_matrix`` builds
P[i, j] = p(i beats j) from comparisons, ``symmetrise`` averages both presentation orders of an order-sensitive
judge, ``borda`` ranks by Borda counts with the author's scores ``1 - rank / n``, ``bradley_terry`` fits BT strengths
by the MM (Zermelo) iteration, ``kendall_tau`` compares two rankings (scipy's tau-b).

Indices are 0-based positions in the group. Nothing here needs a model, a GPU or randomness other than the
caller's generator.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from numbers import Integral, Real
from typing import Literal

import numpy as np
import torch

from core.errors import InputError

Winner = Literal[1, 2, "tie"]

# ---- the judge's reply -----------------------------------------------------------------------------

# markdown emphasis / code / header marks, dropped before matching ("**Image 1 score:** 7", "## Winner: 2")
_MARKS = re.compile(r"[*_`#]+")
_COLON = r"[ \t]*[:\uff1a=][ \t]*"  # ":" or the full-width "：" (and "=", which models write too)
# a score: a plain non-negative number, optionally in <> or [] brackets; "<0-10>" (the prompt's placeholder echoed
# back) is not a score, hence the look-ahead refusing a range
_NUMBER = r"[<\[(]?[ \t]*(?P<s>\d+(?:\.\d+)?)(?![ \t]*[-\u2013][ \t]*\d)"
_SCORE = {k: re.compile(r"\b(?:image|meme|candidate)[ \t]*" + str(k) + r"[ \t]*(?:'s[ \t]*)?score" + _COLON + _NUMBER,
                        re.IGNORECASE) for k in (1, 2)}
_WINNER = re.compile(r"\bwinner" + _COLON + r"[<\[(]?[ \t]*(?:(?:image|meme|candidate)[ \t]*)?#?[ \t]*(?P<w>1|2|tie)\b"
                     r"(?![ \t]*(?:or|/|\|)[ \t]*(?:1|2|tie)\b)", re.IGNORECASE)  # not the echoed "<1 or 2 or tie>"
_REASON = re.compile(r"\breason" + _COLON + r"(?P<r>.*)", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class JudgeVerdict:
    """What a judge's reply says about one pair (image 1 shown first): each score (None when absent or unreadable),
    the Winner line (1, 2, "tie" or None) and the Reason text (None when absent)."""

    score1: float | None = None
    score2: float | None = None
    winner: Winner | None = None
    reason: str | None = None


def parse_judge_reply(text: str | None) -> JudgeVerdict:
    """The judge's reply as a ``JudgeVerdict``. Never raises: a reply that is empty, garbage or not a string gives
    Nones, which ``pair_rewards`` turns into 0.5 / 0.5.

    Tolerant of case, spacing, markdown marks (``**Image 1 score:** 7``, ``- Winner: **2**``), a full-width colon,
    ``7/10`` and ``Winner: Image 2``. The first occurrence of each line counts (the published parser's ``re.search``).
    Scores are not clipped to 0-10: the normalisation is a ratio, so a judge on another scale still ranks correctly
    (as published)."""
    if not isinstance(text, str) or not text.strip():
        return JudgeVerdict()
    flat = _MARKS.sub("", text)
    scores: list[float | None] = []
    for k in (1, 2):
        m = _SCORE[k].search(flat)
        value = float(m.group("s")) if m else None
        scores.append(value if value is not None and math.isfinite(value) else None)
    m = _WINNER.search(flat)
    winner: Winner | None = None
    if m:
        w = m.group("w").lower()
        winner = "tie" if w == "tie" else int(w)  # type: ignore[assignment]
    m = _REASON.search(text)  # the reason keeps its own markdown
    reason = m.group("r").strip() if m else None
    return JudgeVerdict(scores[0], scores[1], winner, reason or None)


def pair_rewards(verdict: JudgeVerdict | str | None) -> tuple[float, float]:
    """The published per-pair rewards ``(r_a, r_b)`` of a verdict (or of a raw reply, parsed first), summing to 1:
    both scores read -> ``s_a / (s_a + s_b)`` and ``s_b / (s_a + s_b)``, 0.5 / 0.5 when the sum is 0; otherwise the
    Winner line (1 -> 1 / 0, 2 -> 0 / 1, tie -> 0.5 / 0.5); otherwise 0.5 / 0.5.

    This is our tolerant reading (``parser="tolerant"`` of the judges). The published parser has one more fallback,
    the first two numbers anywhere in the reply, left out here on purpose (any "10" in the Reason would become a
    score) [PROPOSED]; ``official_pair_rewards`` is the published parser with it."""
    if not isinstance(verdict, JudgeVerdict):
        verdict = parse_judge_reply(verdict)
    a, b = verdict.score1, verdict.score2
    if a is not None and b is not None:
        return normalise_pair(a, b)
    if verdict.winner == 1:
        return 1.0, 0.0
    if verdict.winner == 2:
        return 0.0, 1.0
    return 0.5, 0.5


# ---- the published parser (LightRFT examples/godsmeme/reward_model.py, parse_pair_judge_response) ---------

# its patterns: "Image <k> score" then ":" or the full-width colon, a plain decimal; "Winner" 1 / 2 / tie; and, last,
# any decimal anywhere (so "Image 1 score: 7" alone reads as scores 1 and 7, as published)
_OFFICIAL_SCORE = {k: re.compile(rf"Image\s*{k}\s*score\s*[:\uff1a]\s*([0-9]+(?:\.[0-9]+)?)", re.IGNORECASE) for k in (1, 2)}
_OFFICIAL_WINNER = re.compile(r"Winner\s*[:\uff1a]\s*(1|2|tie)", re.IGNORECASE)
_OFFICIAL_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def official_pair_scores(text: str | None) -> tuple[float, float]:
    """The published judge parser: the raw scores ``(s_1, s_2)`` of a reply. Both "Image k score" lines ->
    their numbers; else the Winner line (1 -> (1, 0), 2 -> (0, 1), tie -> (0.5, 0.5)); else the first two numbers
    anywhere in the reply; else (0.5, 0.5). An empty or non-string reply is (0.5, 0.5)."""
    text = text.strip() if isinstance(text, str) else ""
    if not text:
        return 0.5, 0.5
    found = [_OFFICIAL_SCORE[k].search(text) for k in (1, 2)]
    if found[0] and found[1]:
        return float(found[0].group(1)), float(found[1].group(1))
    m = _OFFICIAL_WINNER.search(text)
    if m:
        w = m.group(1).lower()
        return (1.0, 0.0) if w == "1" else (0.0, 1.0) if w == "2" else (0.5, 0.5)
    numbers = _OFFICIAL_NUMBER.findall(text)
    if len(numbers) >= 2:
        return float(numbers[0]), float(numbers[1])
    return 0.5, 0.5


def normalise_pair(s_a: float, s_b: float) -> tuple[float, float]:
    """The published per-pair normalisation (``aggregate_pairwise_preferences``): ``s_a / (s_a + s_b)`` and
    ``s_b / (s_a + s_b)``; 0.5 / 0.5 when the sum is not positive."""
    total = float(s_a) + float(s_b)
    return (0.5, 0.5) if total <= 0 else (float(s_a) / total, float(s_b) / total)


def official_pair_rewards(text: str | None) -> tuple[float, float]:
    """A judge reply read and normalised exactly as published: ``normalise_pair(*official_pair_scores(text))``."""
    return normalise_pair(*official_pair_scores(text))


# ---- pairs and the group reward --------------------------------------------------------------------


def _count(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < minimum:
        raise InputError(name, value, f"pass an integer >= {minimum}")
    return int(value)


def _index(value: object, n: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or not 0 <= int(value) < n:
        raise InputError(name, value, f"use a sample index in 0..{n - 1}")
    return int(value)


def _prob(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not 0.0 <= float(value) <= 1.0:
        raise InputError(name, value, "pass a probability in [0, 1]")
    return float(value)


def sample_pairs(n: int, max_pairs: int | None = None,
                 generator: int | torch.Generator | np.random.Generator | None = None) -> list[tuple[int, int]]:
    """The pairs ``(i, j)``, ``i < j``, of a group of ``n`` that the judge compares: all C(n, 2) in lexicographic
    order when ``max_pairs`` is None, 0 (the published "0 means all pairs") or at least C(n, 2); otherwise a random
    subset of ``max_pairs`` pairs drawn without replacement from ``generator`` (a seed, a ``torch.Generator`` or a
    ``numpy`` Generator; required then, so the subset is reproducible), returned sorted. A capped subset may leave a
    sample uncompared; ``group_pairwise_reward`` gives it 0.5, as published."""
    n = _count(n, "n", 0)
    pairs = list(combinations(range(n), 2))
    if max_pairs is None or max_pairs == 0:
        return pairs
    max_pairs = _count(max_pairs, "max_pairs", 0)
    if max_pairs >= len(pairs):
        return pairs
    if isinstance(generator, np.random.Generator):
        chosen = generator.permutation(len(pairs))[:max_pairs].tolist()
    elif isinstance(generator, torch.Generator):
        chosen = torch.randperm(len(pairs), generator=generator, device=generator.device).tolist()[:max_pairs]
    elif isinstance(generator, Integral) and not isinstance(generator, bool) and 0 <= int(generator) < 2**63:
        chosen = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(int(generator))).tolist()[:max_pairs]
    else:
        raise InputError("generator", generator, "capping the pairs draws a random subset: pass an integer seed in "
                                                 "[0, 2**63), a torch.Generator or a numpy Generator")
    return [pairs[k] for k in sorted(chosen)]


def group_pairwise_reward(n: int, pairs_with_rewards: Iterable[tuple[int, int, float, float]]) -> list[float]:
    """Each sample's pairwise reward in a group of ``n``: the mean of its per-pair rewards over the comparisons it
    took part in, 0.5 when it took part in none (published). ``pairs_with_rewards`` holds ``(i, j, r_i, r_j)``, the
    two indices and their rewards from ``pair_rewards``; a pair may appear more than once (both presentation orders,
    say) and each appearance counts."""
    n = _count(n, "n", 0)
    totals, counts = [0.0] * n, [0] * n
    for k, item in enumerate(pairs_with_rewards):
        if not isinstance(item, (tuple, list)) or len(item) != 4:
            raise InputError(f"pairs_with_rewards[{k}]", item, "give (i, j, r_i, r_j) tuples")
        i, j = _index(item[0], n, f"pairs_with_rewards[{k}][0]"), _index(item[1], n, f"pairs_with_rewards[{k}][1]")
        if i == j:
            raise InputError(f"pairs_with_rewards[{k}]", item, "a sample is never compared with itself")
        for idx, r in ((i, item[2]), (j, item[3])):
            if isinstance(r, bool) or not isinstance(r, Real) or not math.isfinite(float(r)):
                raise InputError(f"pairs_with_rewards[{k}]", item, "rewards must be finite numbers")
            totals[idx] += float(r)
            counts[idx] += 1
    return [t / c if c else 0.5 for t, c in zip(totals, counts)]


# ---- preference matrices ---------------------------------------------------------------------------


def _square(P: object, name: str) -> np.ndarray:
    try:
        arr = np.asarray(P, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(name, type(P).__name__, "pass a square (n, n) array of numbers") from None
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise InputError(f"{name}.shape", arr.shape, "pass a square (n, n) array")
    return arr


def preference_matrix(n: int, comparisons: Iterable[tuple[int, int, float]], ordered: bool = False,
                      missing: float | None = None) -> np.ndarray:
    """The (n, n) matrix of ``(i, j, p)`` comparisons, ``p`` the probability (or 0/1 label) that i beats j.

    ``ordered=False``: P[i, j] = p and P[j, i] = 1 - p, so P[i, j] + P[j, i] = 1 for every compared pair; repeated
    comparisons of a pair (in either order) are averaged. Uncompared pairs get ``missing`` (default 0.0: they count
    nothing in a Borda sum, as in the author's ``build_preference_matrix``; 0.5 counts them as ties [PROPOSED]).

    ``ordered=True``: the raw, order-sensitive judge output that ``symmetrise`` expects. ``(i, j, p)`` means "i shown
    first, j second, P(first is better) = p" and sets Q[i, j] = p only; repeats of the same order are averaged;
    unmeasured orders get ``missing`` (default NaN, which ``symmetrise`` understands). The diagonal is 0."""
    n = _count(n, "n", 0)
    if not isinstance(ordered, bool):
        raise InputError("ordered", ordered, "pass True (order-sensitive judge output) or False")
    fill = (math.nan if ordered else 0.0) if missing is None else missing
    if isinstance(fill, bool) or not isinstance(fill, Real) or not (math.isnan(fill) or 0.0 <= fill <= 1.0):
        raise InputError("missing", missing, "pass None, NaN or a value in [0, 1]")
    sums, counts = np.zeros((n, n)), np.zeros((n, n))
    for k, item in enumerate(comparisons):
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise InputError(f"comparisons[{k}]", item, "give (i, j, p_i_beats_j) triples")
        i, j = _index(item[0], n, f"comparisons[{k}][0]"), _index(item[1], n, f"comparisons[{k}][1]")
        if i == j:
            raise InputError(f"comparisons[{k}]", item, "an item is never compared with itself")
        p = _prob(item[2], f"comparisons[{k}][2]")
        sums[i, j] += p
        counts[i, j] += 1
        if not ordered:
            sums[j, i] += 1.0 - p
            counts[j, i] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        P = np.where(counts > 0, sums / np.maximum(counts, 1), fill)
    np.fill_diagonal(P, 0.0)
    return P


def symmetrise(Q: object, missing: float = 0.0) -> np.ndarray:
    """b.3's order-averaged preference of an order-sensitive judge: p(i > j) = 0.5 [p(i, j)_0 + p(j, i)_1], with
    Q[i, j] = p(i, j)_0 the judge's P(first better) when i is shown first, so p(j, i)_1 = 1 - Q[j, i]; the result is
    0.5 (Q + 1 - Q^T), and P[i, j] + P[j, i] = 1 off the diagonal. A NaN entry is an order not measured: the other
    order is used alone; a pair measured in neither order gets ``missing`` both ways (0.0: counts nothing in Borda,
    the author's convention). The diagonal is 0."""
    Q = _square(Q, "Q")
    finite = Q[np.isfinite(Q)]
    if np.isinf(Q).any() or ((finite < 0) | (finite > 1)).any():
        raise InputError("Q", "values outside [0, 1]", "pass probabilities (NaN for an order not measured)")
    if isinstance(missing, bool) or not isinstance(missing, Real) or not 0.0 <= float(missing) <= 1.0:
        raise InputError("missing", missing, "pass a value in [0, 1]")
    forward, backward = Q, 1.0 - Q.T
    P = np.where(np.isnan(forward), backward, np.where(np.isnan(backward), forward, 0.5 * (forward + backward)))
    P = np.where(np.isnan(P), float(missing), P)
    np.fill_diagonal(P, 0.0)
    return P


@dataclass(frozen=True)
class GroupRanking:
    """A Borda ranking of a group. ``counts[i]`` = sum_j P[i, j] (the Borda count); ``order`` the indices best first;
    ``ranks[i]`` item i's 0-based position in ``order``; ``scores[i]`` = 1 - ranks[i] / n, in {1/n, ..., 1}, the
    best item 1 (the author's ``compute_ebc_scores``)."""

    counts: np.ndarray
    order: np.ndarray
    ranks: np.ndarray
    scores: np.ndarray


def borda(P: object) -> GroupRanking:
    """Borda ranking of a preference matrix (b.3, ``group_rank_eval.py``): counts b_i = sum_{j != i} P[i, j], order
    = argsort(-b), score_i = 1 - rank_i / n. Works on 0/1 labels, soft probabilities or win counts; the diagonal is
    ignored. Ties keep index order (a stable sort [PROPOSED]: the author's default ``np.argsort`` does not promise
    it). Under symmetric label noise at rate eta < 1/2 the expected counts are an increasing affine map of the clean
    ones (b.3), so the expected order is unchanged; at eta > 1/2 it reverses."""
    P = _square(P, "P")
    if not np.isfinite(P).all() or (P < 0).any():
        raise InputError("P", "non-finite or negative entries", "pass non-negative finite preferences (symmetrise "
                                                                 "an ordered matrix with NaNs first)")
    n = P.shape[0]
    counts = P.sum(axis=1) - np.diag(P)
    order = np.argsort(-counts, kind="stable")
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = np.arange(n)
    return GroupRanking(counts=counts, order=order, ranks=ranks, scores=1.0 - ranks / max(n, 1))


def bradley_terry(wins: object, iters: int = 10_000, prior: float = 0.0, tol: float = 1e-12) -> np.ndarray:
    """Bradley-Terry strengths pi (summing to 1; p(i beats j) = pi_i / (pi_i + pi_j)) from ``wins[i, j]``, the number
    (or summed probability) of comparisons i won against j; a preference matrix P works as one comparison per pair.

    The maximum-likelihood fit by the MM iteration (Zermelo 1929; Hunter 2004, Ann. Stat. 32(1)):
    pi_i <- W_i / sum_{j != i} n_ij / (pi_i + pi_j), W_i = sum_j wins[i, j], n_ij = wins[i, j] + wins[j, i],
    renormalised each step, until the largest change of log pi is below ``tol`` or ``iters`` steps. The MLE exists
    only if the "i beat j" graph is strongly connected (an undefeated item's strength would grow without bound);
    ``prior > 0`` adds ``prior`` virtual wins to every ordered pair (a pseudo-count, i.e. the MAP under a symmetric
    prior [PROPOSED], 0.1 say), which keeps every strength finite and pulls them slightly together. With
    ``prior=0`` a graph that is not strongly connected raises ``InputError``."""
    W = _square(wins, "wins")
    if not np.isfinite(W).all() or (W < 0).any():
        raise InputError("wins", "non-finite or negative entries", "pass non-negative win counts")
    iters = _count(iters, "iters", 1)
    if isinstance(prior, bool) or not isinstance(prior, Real) or not (0.0 <= float(prior) < math.inf):
        raise InputError("prior", prior, "pass a pseudo-count >= 0")
    if isinstance(tol, bool) or not isinstance(tol, Real) or not float(tol) > 0:
        raise InputError("tol", tol, "pass a positive tolerance")
    n = W.shape[0]
    if n <= 1:
        return np.ones(n)
    W = W.copy()
    np.fill_diagonal(W, 0.0)
    W = W + float(prior) * (1.0 - np.eye(n))
    from scipy.sparse.csgraph import connected_components

    n_comp, _ = connected_components(W > 0, directed=True, connection="strong")
    if n_comp > 1:
        raise InputError("wins", f"{n_comp} strongly connected components", "the MLE needs every item to have "
                         "beaten, through some chain, every other; pass prior > 0 (e.g. 0.1) for a finite fit")
    games = W + W.T
    won = W.sum(axis=1)
    pi = np.full(n, 1.0 / n)
    for _ in range(iters):
        denom = (games / (pi[:, None] + pi[None, :])).sum(axis=1)
        new = won / denom
        new /= new.sum()
        change = np.max(np.abs(np.log(new) - np.log(pi)))
        pi = new
        if change < tol:
            break
    return pi


def kendall_tau(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Kendall's tau-b between two equal-length score (or rank) vectors, via ``scipy.stats.kendalltau`` (as the
    author's ``group_rank_eval.py`` does): 1 for the same order, -1 for the reverse; NaN when either is constant."""
    from scipy.stats import kendalltau

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape or x.size < 2:
        raise InputError("a, b", (x.shape, y.shape), "pass two 1-D sequences of the same length >= 2")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise InputError("a, b", "non-finite values", "pass finite scores")
    return float(kendalltau(x, y).statistic)
