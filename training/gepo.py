"""GePO: geometry-preserving policy optimisation over a hybrid action space (specs/gelvr.md B.3-B.4) [PROPOSED].

Text tokens are categorical actions; each latent slot is a continuous action, a direction on the sphere drawn
from vMF(mu_theta,k, kappa) around the policy's mean ``n(h_{k-1})``. For a fixed kappa the normaliser cancels,
so a slot's importance ratio is ``exp(kappa (mu_theta - mu_old).z)``. Per rollout i with group-relative
advantage A_i:

    J = (1/|T_i|) sum_text min(rho A, clip(rho, 1-eps_lo, 1+eps_hi) A)
        + alpha (1/|L_i|) sum_latent min(r A, clip(r, 1-eps'_lo, 1+eps'_hi) A)
        - beta_txt KL_k3(pi || pi_ref) - beta_vmf mean_k kappa A_d(kappa) (1 - mu.mu_ref) - lambda_geo R_geo

``latent_policy`` swaps the slot policy for the benchmark's baselines: ``"gaussian"`` (z = mu + sigma eps, with
sigma matched to the vMF's mean squared step 2 (1 - A_d(kappa)), closed-form Gaussian KL), ``"replay"`` (LVR's
RL: greedy slots recorded and replayed, only text tokens optimised).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from planners import latent_geometry as geo
from planners import vmf

LATENT_POLICIES = ("vmf", "gaussian", "replay")


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``(P, G)`` rewards -> GRPO advantages ``(R - mean_G) / (std_G + eps)`` (unbiased std, as TRL)."""
    return (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + eps)


def accuracy_band(accuracy: torch.Tensor, low: float = 0.1, high: float = 0.9) -> torch.Tensor:
    """Prompts worth a gradient: group accuracy in [low, high] (an all-right or all-wrong group has zero advantage)."""
    return (accuracy >= low) & (accuracy <= high)


def clipped_surrogate(log_ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, eps_low: float, eps_high: float
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per rollout, the mean over its masked actions of ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)``
    (``log_ratio``, ``mask`` ``(B, n)``, ``adv`` ``(B,)``), and the fraction of masked actions whose term was clipped."""
    r = log_ratio.exp()
    a = adv[:, None]
    unclipped, clipped = r * a, r.clamp(1 - eps_low, 1 + eps_high) * a
    term = torch.minimum(unclipped, clipped)
    m = mask.to(term.dtype)
    per = (term * m).sum(-1) / m.sum(-1).clamp(min=1)
    was_clipped = ((clipped < unclipped) & mask).float().sum() / m.sum().clamp(min=1)
    return per, was_clipped


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """The k3 estimator of KL(pi || pi_ref) at sampled actions: ``exp(ref - logp) - (ref - logp) - 1`` (>= 0)."""
    d = logp_ref - logp
    return d.exp() - d - 1


def vmf_log_ratio(mu_new: torch.Tensor, mu_old: torch.Tensor, z: torch.Tensor, kappa: float) -> torch.Tensor:
    """``log r = kappa (mu_new.z - mu_old.z)`` over the last axis (same kappa: the normalisers cancel)."""
    return kappa * ((mu_new - mu_old) * z).sum(-1)


def gaussian_sigma(d: int, kappa: float) -> float:
    """The isotropic Gaussian step whose mean squared length equals the vMF's, ``2 (1 - A_d(kappa))``."""
    return math.sqrt(2 * (1 - float(vmf.mean_resultant_length(d, kappa))) / d)


def gaussian_log_ratio(mu_new: torch.Tensor, mu_old: torch.Tensor, z: torch.Tensor, sigma: float) -> torch.Tensor:
    return (((z - mu_old) ** 2).sum(-1) - ((z - mu_new) ** 2).sum(-1)) / (2 * sigma**2)


@dataclass
class GePOLoss:
    """The objective's hyper-parameters (spec B.4 proposals) and its evaluation from log-probs and slot means."""

    eps_text_low: float = 0.2
    eps_text_high: float = 0.28
    eps_latent_low: float = 0.1
    eps_latent_high: float = 0.1
    alpha: float = 1.0
    beta_text: float = 0.02
    beta_vmf: float = 0.01
    lambda_geo: float = 0.1
    kappa: float = 50.0
    tau: float = 0.07
    latent_policy: str = "vmf"

    def __post_init__(self):
        if self.latent_policy not in LATENT_POLICIES:
            raise ValueError(f"latent_policy {self.latent_policy!r}: choose one of {LATENT_POLICIES}")

    def latent_log_ratio(self, mu_new, mu_old, z) -> torch.Tensor:
        if self.latent_policy == "gaussian":
            return gaussian_log_ratio(mu_new, mu_old, z, gaussian_sigma(z.shape[-1], self.kappa))
        return vmf_log_ratio(mu_new, mu_old, z, self.kappa)

    def latent_kl(self, mu_new, mu_ref) -> torch.Tensor:
        if self.latent_policy == "gaussian":
            return ((mu_new - mu_ref) ** 2).sum(-1) / (2 * gaussian_sigma(mu_new.shape[-1], self.kappa) ** 2)
        return vmf.kl_same_kappa(mu_new, mu_ref, self.kappa)

    def __call__(self, *, adv: torch.Tensor, logp: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor,
                 text_mask: torch.Tensor, mu: torch.Tensor, mu_old: torch.Tensor, mu_ref: torch.Tensor, z: torch.Tensor,
                 latent_mask: torch.Tensor, image_tokens: torch.Tensor,
                 image_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
        """``adv`` ``(B,)``; text ``(B, T)`` log-probs of the sampled tokens now / at rollout / under the reference and
        their mask; slots ``(B, K, d)`` the policy's means now / at rollout / the reference's on the same inputs, the
        directions fed back ``z``, and ``latent_mask`` ``(B,)`` (rollouts that ran slots); ``image_tokens`` ``(B, N, d)``
        for R_geo, ``image_mask`` ``(B, N)`` its real tokens (None: all). Returns (loss to minimise, metrics)."""
        text_obj, clip_t = clipped_surrogate(logp - logp_old, adv, text_mask, self.eps_text_low, self.eps_text_high)
        tm = text_mask.to(logp.dtype)
        kl_text = (k3_kl(logp, logp_ref) * tm).sum(-1) / tm.sum(-1).clamp(min=1)
        objective = text_obj - self.beta_text * kl_text
        metrics = {"clipfrac_text": float(clip_t.detach()), "kl_text": float(kl_text.detach().mean())}
        lat = latent_mask.bool()
        if self.latent_policy != "replay" and lat.any():
            k = z.shape[1]
            lmask = lat[:, None].expand(-1, k)
            lr = self.latent_log_ratio(mu, mu_old, z)
            lat_obj, clip_l = clipped_surrogate(lr, adv, lmask, self.eps_latent_low, self.eps_latent_high)
            kl_lat = self.latent_kl(mu, mu_ref).mean(-1)
            objective = objective + self.alpha * lat_obj * lat - self.beta_vmf * kl_lat * lat
            metrics.update(clipfrac_latent=float(clip_l.detach()), kl_latent=float(kl_lat[lat].detach().mean()))
        mask = None if image_mask is None else image_mask[lat]
        r_geo = geo.geometry_regulariser(mu[lat], mu_ref[lat], image_tokens[lat], self.tau, mask) if lat.any() else mu.sum() * 0
        metrics["r_geo"] = float(r_geo.detach())
        loss = -objective.mean() + self.lambda_geo * r_geo
        return loss, metrics


def sample_tokens(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from ``softmax(logits / temperature)``."""
    probs = F.softmax(logits.float() / temperature, -1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
