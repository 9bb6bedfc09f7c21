"""HUMOR's group-wise RL math on tensors: GRPO advantages, the k3 KL, the clipped surrogate and loss, the published
reward mix, the reward-model loss, and TRL-style reward functions (specs/humor.md, "Update (2026-12): the group-RL
code is public [RL-CODE]" and b.4). No model here: an RL loop (ours, or TRL's ``GRPOTrainer``) calls these.

Published settings [RL-CODE]: G = 8 samples per prompt; reward = 1.0 x pairwise + 0.1 x format
(``total_reward``); group-normalised advantages (``group_advantages``); KL coefficient 0.01 with the k3 estimator
as a loss term (``grpo_loss``, ``beta=0.01``). Conventions follow TRL's ``GRPOConfig`` (``num_generations`` = G,
``beta``, ``epsilon`` 0.2, ``scale_rewards="group"``, ``loss_type``) and ``RewardConfig``
(``center_rewards_coefficient``), so values here equal TRL's for the same settings:

- advantages (r - group mean) / (group std + 1e-4), std with Bessel's correction (TRL's ``nanstd``; the LightRFT
  recipe's ``group_norm`` uses the same std with 1e-9);
- the per-token loss -min(rho A, clip(rho, 1 - eps, 1 + eps_high) A) + beta k3, averaged over each sequence's
  tokens, then over sequences: TRL's ``loss_type="grpo"`` (the GRPO paper's 1/|o_i| normalisation). TRL's other
  ``loss_type``s only change that aggregation ("bnpo" / "dapo": one mean over all tokens of the batch,
  "dr_grpo": a constant); TRL's default is "dapo";
- ``TRL reward functions`` take ``(completions, **kwargs)`` and return ``list[float]``; TRL sums them weighted by
  ``GRPOConfig.reward_weights`` before normalising, so ``reward_weights=[1.0, 0.1]`` over
  ``[make_group_pairwise_reward(...), format_reward_func]`` is ``total_reward``.

Tensors: ``logp``, ``old_logp``, ``ref_logp`` are per-token log-probabilities of the sampled tokens, shape (B, T);
``mask`` (B, T) marks completion tokens (1) versus padding (0); ``advantages`` (B,) broadcasts over tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from typing import Any, Literal

import torch
import torch.nn.functional as F

from core.errors import InputError
from planners.meme_cot import format_reward
from planners.meme_ranking import group_pairwise_reward, pair_rewards, sample_pairs

# published [RL-CODE]
GROUP_SIZE = 8
KL_BETA = 0.01
FORMAT_WEIGHT = 0.1
PAIRWISE_WEIGHT = 1.0
# TRL's defaults: GRPOConfig.epsilon, the advantage eps, RewardConfig's recommended center_rewards_coefficient
CLIP_EPSILON = 0.2
ADV_EPS = 1e-4
CENTERING = 0.01

Scale = Literal["group", "batch", "none"]


def _float_tensor(x: object, name: str) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    if not t.is_floating_point():
        t = t.to(torch.float32)
    return t


def _positive(value: object, name: str, allow_zero: bool = False) -> float:
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if not ok or float(value) < 0 or (not allow_zero and float(value) == 0):
        raise InputError(name, value, f"pass a finite number {'>= 0' if allow_zero else '> 0'}")
    return float(value)


# ---- rewards ---------------------------------------------------------------------------------------


def group_advantages(rewards: torch.Tensor | Sequence[float], group_size: int = GROUP_SIZE, scale: Scale = "group",
                     eps: float = ADV_EPS) -> torch.Tensor:
    """GRPO advantages of rewards laid out group after group (``B * G`` values, each prompt's G samples adjacent, as
    TRL orders them): r minus its group's mean, divided by ``std + eps`` with std the group's (``scale="group"``,
    published and TRL's default), the whole batch's (``"batch"``) or not at all (``"none"``, Dr. GRPO). Every group
    has zero mean. A group whose rewards are all equal (or a group of one) gets exactly zero advantages, never NaN
    or amplified rounding noise: it carries no preference signal."""
    r = _float_tensor(rewards, "rewards")
    if r.ndim != 1:
        raise InputError("rewards.shape", tuple(r.shape), "pass a 1-D tensor of B * group_size rewards")
    if not torch.isfinite(r).all():
        raise InputError("rewards", "non-finite values", "score every sample with a finite reward")
    if isinstance(group_size, bool) or not isinstance(group_size, Integral) or group_size < 1 or r.numel() % group_size:
        raise InputError("group_size", group_size, f"pass a positive integer dividing the {r.numel()} rewards")
    if scale not in ("group", "batch", "none"):
        raise InputError("scale", scale, "pass 'group', 'batch' or 'none'")
    eps = _positive(eps, "eps", allow_zero=True)
    g = r.view(-1, int(group_size))
    centred = g - g.mean(dim=1, keepdim=True)
    if scale == "group" and group_size > 1:
        centred = centred / (g.std(dim=1, keepdim=True) + eps)
    elif scale == "batch" and r.numel() > 1:
        centred = centred / (r.std() + eps)
    flat = (g.amax(dim=1, keepdim=True) == g.amin(dim=1, keepdim=True))
    return torch.where(flat, torch.zeros_like(centred), centred).reshape(-1)


def total_reward(pairwise: Any, format_score: Any, format_weight: float = FORMAT_WEIGHT,
                 pairwise_weight: float = PAIRWISE_WEIGHT) -> Any:
    """The published reward, ``pairwise_weight * pairwise + format_weight * format_score`` (1.0 and 0.1 [RL-CODE]):
    ``pairwise`` from ``group_pairwise_reward`` in [0, 1], ``format_score`` from ``planners.meme_cot.format_reward``
    in [0, 1]. Numbers give a float, tensors a tensor, sequences a ``list[float]``."""
    fw, pw = _positive(format_weight, "format_weight", True), _positive(pairwise_weight, "pairwise_weight", True)
    if isinstance(pairwise, torch.Tensor) or isinstance(format_score, torch.Tensor):
        return pw * _float_tensor(pairwise, "pairwise") + fw * _float_tensor(format_score, "format_score")
    if isinstance(pairwise, Real) and isinstance(format_score, Real):
        return pw * float(pairwise) + fw * float(format_score)
    try:
        a, b = [float(x) for x in pairwise], [float(x) for x in format_score]
    except (TypeError, ValueError):
        raise InputError("pairwise, format_score", (type(pairwise).__name__, type(format_score).__name__),
                         "pass two numbers, two tensors or two sequences of numbers") from None
    if len(a) != len(b):
        raise InputError("format_score", f"{len(b)} values for {len(a)} samples", "give one format score per sample")
    return [pw * x + fw * y for x, y in zip(a, b)]


# ---- per-token terms -------------------------------------------------------------------------------


def _check_pair(a: torch.Tensor, b: torch.Tensor, names: str) -> None:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        raise InputError(names, (getattr(a, "shape", a), getattr(b, "shape", b)), "pass tensors of the same shape")


def _mask(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if mask is None:
        return torch.ones_like(like)
    if not isinstance(mask, torch.Tensor) or mask.shape != like.shape:
        raise InputError("mask.shape", tuple(getattr(mask, "shape", ())), f"pass a mask of shape {tuple(like.shape)}")
    return mask.to(like.dtype)


def k3_kl_per_token(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """The k3 estimator of KL(pi_theta || pi_ref) per sampled token (Schulman 2020, as TRL and LightRFT use it):
    exp(d) - d - 1 with d = ref_logp - logp. Non-negative (e^d >= 1 + d), zero exactly where the policies agree,
    unbiased for the KL when tokens are sampled from pi_theta. ``ref_logp`` is treated as a constant."""
    _check_pair(logp, ref_logp, "logp, ref_logp")
    d = ref_logp.detach() - logp
    return torch.exp(d) - d - 1.0


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The mean k3 KL over the tokens ``mask`` keeps (all when None): the value TRL logs as ``kl``."""
    kl = k3_kl_per_token(logp, ref_logp)
    m = _mask(mask, kl)
    return (kl * m).sum() / m.sum().clamp(min=1.0)


def _seq_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each sequence's kept tokens (an empty sequence counts 0), then over sequences: TRL's "grpo"."""
    return ((x * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)).mean()


def _ratio_terms(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor | Sequence[float],
                 mask: torch.Tensor | None, epsilon: float, epsilon_high: float | None):
    _check_pair(logp, old_logp, "logp, old_logp")
    if logp.ndim != 2:
        raise InputError("logp.shape", tuple(logp.shape), "pass per-token log-probabilities of shape (B, T)")
    eps_lo = _positive(epsilon, "epsilon")
    eps_hi = eps_lo if epsilon_high is None else _positive(epsilon_high, "epsilon_high")
    adv = _float_tensor(advantages, "advantages").to(device=logp.device, dtype=logp.dtype).detach()
    if adv.ndim == 1 and adv.shape[0] == logp.shape[0]:
        adv = adv[:, None]
    elif not (adv.ndim == 2 and adv.shape[0] == logp.shape[0] and adv.shape[1] in (1, logp.shape[1])):
        raise InputError("advantages.shape", tuple(adv.shape), f"pass (B,), (B, 1) or (B, T) with B = {logp.shape[0]}")
    m = _mask(mask, logp)
    rho = torch.exp(logp - old_logp.detach())
    surrogate = torch.min(rho * adv, torch.clamp(rho, 1.0 - eps_lo, 1.0 + eps_hi) * adv)
    clipped = ((rho < 1.0 - eps_lo) & (adv < 0)) | ((rho > 1.0 + eps_hi) & (adv > 0))
    return surrogate, clipped, m


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor | Sequence[float],
                      mask: torch.Tensor | None = None, epsilon: float = CLIP_EPSILON,
                      epsilon_high: float | None = None) -> torch.Tensor:
    """b.4's GRPO objective to maximise, (1/B) sum_i (1/|o_i|) sum_t min(rho A_i, clip(rho, 1 - eps, 1 + eps_high)
    A_i), rho = exp(logp - old_logp) per token (``old_logp`` a constant). Sequence mean then batch mean, TRL's
    ``loss_type="grpo"``; ``epsilon_high`` (default ``epsilon``) is TRL's asymmetric upper bound. At rho = 1 it
    equals the unclipped surrogate, the mean advantage."""
    surrogate, _, m = _ratio_terms(logp, old_logp, advantages, mask, epsilon, epsilon_high)
    return _seq_mean(surrogate, m)


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
              advantages: torch.Tensor | Sequence[float], mask: torch.Tensor | None = None, beta: float = KL_BETA,
              epsilon: float = CLIP_EPSILON, epsilon_high: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss to minimise: per token -min(rho A, clip(rho) A) + beta k3(pi_theta, pi_ref), sequence mean then
    batch mean (TRL ``loss_type="grpo"``, the KL as a loss term as published, beta = 0.01 [RL-CODE]). ``ref_logp``
    may be None when ``beta == 0``. Returns ``(loss, stats)`` with stats (floats, detached): ``kl`` (token mean of
    k3; 0 without a reference), ``clip_fraction`` (share of kept tokens whose ratio left the trust region on the side
    where clipping binds, TRL's ``clip_ratio/region_mean``) and ``surrogate``."""
    beta = _positive(beta, "beta", allow_zero=True)
    surrogate, clipped, m = _ratio_terms(logp, old_logp, advantages, mask, epsilon, epsilon_high)
    per_token = -surrogate
    kl_mean = 0.0
    if ref_logp is not None:
        kl = k3_kl_per_token(logp, ref_logp)
        kl_mean = float(((kl * m).sum() / m.sum().clamp(min=1.0)).detach())
        if beta:
            per_token = per_token + beta * kl
    elif beta:
        raise InputError("ref_logp", None, "pass the reference model's per-token log-probabilities, or beta=0")
    loss = _seq_mean(per_token, m)
    stats = {"kl": kl_mean,
             "clip_fraction": float(((clipped.to(m.dtype) * m).sum() / m.sum().clamp(min=1.0)).detach()),
             "surrogate": float(_seq_mean(surrogate, m).detach())}
    return loss, stats


def reward_model_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor, centering: float | None = CENTERING,
                      margin: torch.Tensor | float | None = None) -> torch.Tensor:
    """A pointwise (Bradley-Terry) reward model's pair loss, TRL ``RewardTrainer.compute_loss``:
    mean(-logsigmoid(r_c - r_r [- margin])) + c * mean((r_c + r_r)^2), the second term (``center_rewards_coefficient``,
    Eisenstein et al. 2023, c = 0.01 recommended) keeping rewards centred on 0. ``centering`` None or 0 drops it.
    (The author's own RM is a two-image classifier trained with cross-entropy, b.3; this is the BT variant.)"""
    _check_pair(r_chosen, r_rejected, "r_chosen, r_rejected")
    diff = r_chosen - r_rejected
    if margin is not None:
        diff = diff - margin
    loss = -F.logsigmoid(diff).mean()
    if centering:
        loss = loss + _positive(centering, "centering") * torch.mean((r_chosen + r_rejected) ** 2)
    return loss


# ---- TRL-style reward functions --------------------------------------------------------------------


def _completion_text(completion: Any) -> str:
    """A TRL completion as text: a string (standard format) or a list of chat messages (conversational format),
    whose assistant content may itself be a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        if isinstance(content, str):
            return content
        if isinstance(content, Sequence):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _per_sample(value: Any, n: int, name: str) -> list[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return [value] * n
    if len(value) != n:
        raise InputError(name, f"{len(value)} values for {n} completions", "give one value per completion")
    return list(value)


def format_reward_func(completions: Sequence[Any], num_boxes: int | Sequence[int], **kwargs: Any) -> list[float]:
    """The format reward as a TRL reward function: ``planners.meme_cot.format_reward(text, num_boxes)`` of each
    completion. ``num_boxes`` is a dataset column (one value per completion, as TRL passes columns) or one int."""
    boxes = _per_sample(num_boxes, len(completions), "num_boxes")
    return [format_reward(_completion_text(c), b) for c, b in zip(completions, boxes)]


Judge = Callable[[str, str, dict[str, Any]], str]


def make_group_pairwise_reward(judge: Judge, group_size: int = GROUP_SIZE, max_pairs: int | None = None,
                               seed: int = 0) -> Callable[..., list[float]]:
    """The pairwise reward as a TRL reward function ``fn(completions, **kwargs) -> list[float]``. Completions come
    group after group (TRL's layout, ``group_size`` = ``num_generations``); within each group the pairs of
    ``sample_pairs(group_size, max_pairs, gen)`` go to ``judge(text_a, text_b, row_a)`` (``row_a`` = the dataset
    columns of sample a, e.g. its template; the judge renders both memes and returns its reply text), each reply
    through ``pair_rewards``, then ``group_pairwise_reward``. ``gen`` is one ``torch.Generator`` seeded from
    ``seed`` and advanced call after call, so a run's subsets are reproducible."""
    if not callable(judge):
        raise InputError("judge", type(judge).__name__, "pass a callable (text_a, text_b, row) -> reply text")
    if isinstance(group_size, bool) or not isinstance(group_size, Integral) or group_size < 1:
        raise InputError("group_size", group_size, "pass a positive integer (GRPOConfig.num_generations)")
    gen = torch.Generator().manual_seed(int(seed))

    def pairwise_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        if n % group_size:
            raise InputError("completions", f"{n} completions", f"pass whole groups of {group_size}")
        texts = [_completion_text(c) for c in completions]
        columns = {k: v for k, v in kwargs.items() if isinstance(v, Sequence) and not isinstance(v, (str, bytes))
                   and len(v) == n}
        out: list[float] = []
        for start in range(0, n, group_size):
            scored = []
            for i, j in sample_pairs(group_size, max_pairs, gen):
                row = {k: v[start + i] for k, v in columns.items()}
                r_i, r_j = pair_rewards(judge(texts[start + i], texts[start + j], row))
                scored.append((i, j, r_i, r_j))
            out.extend(group_pairwise_reward(group_size, scored))
        return out

    pairwise_reward.__name__ = "pairwise_reward"  # TRL logs each reward function under its __name__
    return pairwise_reward
