"""GeLVR / GePO mathematics: specs/gelvr.md (d) 1-12 (geometry, vMF, the hybrid PPO pieces, the slot recurrence)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from planners import latent_geometry as geo
from planners import vmf
from training import gepo


def _orthogonal(d: int, seed: int = 0) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return q


# ---- geometry (d 1-3)
def test_gram_loss_invariant_to_rotation_and_row_scaling_only():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(2, 5, 16, generator=g, dtype=torch.float64)
    scale = torch.rand(2, 5, 1, generator=g, dtype=torch.float64) + 0.1
    assert float(geo.gram_loss(v @ _orthogonal(16) * scale, v)) < 1e-20
    assert float(geo.gram_loss(torch.randn(2, 5, 16, generator=g, dtype=torch.float64), v)) > 1e-3


def test_cross_kl_is_not_rotation_invariant():
    g = torch.Generator().manual_seed(1)
    v = torch.randn(4, 16, generator=g, dtype=torch.float64)
    p = torch.randn(30, 16, generator=g, dtype=torch.float64)
    assert float(geo.cross_kl(v, v, p)) < 1e-12
    assert float(geo.cross_kl(v @ _orthogonal(16, 3), v, p)) > 1e-2
    mask = torch.ones(30, dtype=torch.bool)
    mask[20:] = False  # masked image tokens drop out without NaNs
    assert math.isfinite(float(geo.cross_kl(v @ _orthogonal(16, 3), v, p, mask=mask)))


def test_gram_loss_with_one_slot_is_zero_with_finite_zero_gradient():
    h = torch.randn(1, 8, requires_grad=True)
    loss = geo.gram_loss(h, torch.randn(1, 8))
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-12)
    assert torch.isfinite(h.grad).all() and float(h.grad.abs().max()) < 1e-6


def test_cka_and_rkd_variants_vanish_on_identical_structure():
    v = torch.randn(6, 12, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert float(geo.cka_loss(v @ _orthogonal(12) * 3.0, v)) < 1e-10  # CKA: rotation and isotropic scale
    assert float(geo.rkd_loss(v @ _orthogonal(12) * 2.0, v)) < 1e-10  # RKD: distances and angles
    assert float(geo.cka_loss(torch.randn(6, 12, dtype=torch.float64), v)) > 1e-3


# ---- vMF (d 4-8)
@pytest.mark.parametrize("d,kappa", [(3, 2.0), (16, 10.0), (256, 50.0)])
def test_vmf_samples_unit_norm_and_mean_resultant_length(d, kappa):
    mu = torch.nn.functional.normalize(torch.randn(d, generator=torch.Generator().manual_seed(d), dtype=torch.float64), dim=0)
    z = vmf.sample(mu.expand(20000, d), kappa, torch.Generator().manual_seed(0))
    assert torch.allclose(z.norm(dim=-1), torch.ones(20000, dtype=torch.float64), atol=1e-9)
    w = (z @ mu).numpy()
    a = float(vmf.mean_resultant_length(d, kappa))
    assert abs(w.mean() - a) < 3 * w.std() / math.sqrt(len(w))


def test_vmf_sampling_is_a_function_of_the_generator():
    mu = torch.nn.functional.normalize(torch.randn(5, 32), dim=-1)
    a = vmf.sample(mu, 20.0, torch.Generator().manual_seed(7))
    b = vmf.sample(mu, 20.0, torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and not torch.equal(a, vmf.sample(mu, 20.0, torch.Generator().manual_seed(8)))


def test_vmf_normaliser_d3_closed_form():
    for kappa in (0.5, 3.0, 40.0):
        closed = math.log(kappa / (4 * math.pi * math.sinh(kappa)))
        assert float(vmf.log_normalizer(3, kappa)) == pytest.approx(closed, rel=1e-10)


def test_vmf_kl_properties():
    d, kappa = 16, 8.0
    g = torch.Generator().manual_seed(3)
    mu = torch.nn.functional.normalize(torch.randn(d, generator=g, dtype=torch.float64), dim=0)
    assert float(vmf.kl_same_kappa(mu, mu, kappa)) == pytest.approx(0.0, abs=1e-12)
    a = float(vmf.mean_resultant_length(d, kappa))
    assert float(vmf.kl_same_kappa(mu, -mu, kappa)) == pytest.approx(2 * kappa * a, rel=1e-10)
    # monotone in the angle between the means
    other = torch.nn.functional.normalize(torch.randn(d, generator=g, dtype=torch.float64), dim=0)
    other = torch.nn.functional.normalize(other - (other @ mu) * mu, dim=0)
    angles = np.linspace(0, math.pi, 7)
    kls = [float(vmf.kl_same_kappa(mu, math.cos(t) * mu + math.sin(t) * other, kappa)) for t in angles]
    assert all(b > a_ for a_, b in zip(kls, kls[1:]))
    # Monte-Carlo E_p[log p - log q]
    mu2 = math.cos(1.0) * mu + math.sin(1.0) * other
    z = vmf.sample(mu.expand(40000, d), kappa, torch.Generator().manual_seed(4))
    mc = (vmf.log_prob(z, mu, kappa) - vmf.log_prob(z, mu2, kappa)).mean()
    assert float(mc) == pytest.approx(float(vmf.kl_same_kappa(mu, mu2, kappa)), rel=0.02)
    # the general formula agrees with the same-kappa one, and is >= 0 across kappas
    assert float(vmf.kl(mu, kappa, mu2, kappa)) == pytest.approx(float(vmf.kl_same_kappa(mu, mu2, kappa)), rel=1e-9)
    assert float(vmf.kl(mu, 3.0, mu, 9.0)) > 0


def test_debye_log_bessel_matches_scipy():
    from scipy.special import ive

    for nu in (10.0, 25.5, 63.0, 127.0, 200.0):
        for x in (0.5, 5.0, 50.0, 300.0, 2000.0):
            if ive(nu, x) < 1e-300:  # scipy underflows here: exactly why the expansion exists
                continue
            exact = math.log(ive(nu, x)) + x
            approx = float(vmf._debye_log_iv(torch.tensor(nu, dtype=torch.float64), torch.tensor(x, dtype=torch.float64)))
            assert abs(approx - exact) <= 1e-3 * abs(exact) + 1e-9, (nu, x)


def test_log_normaliser_finite_at_real_hidden_sizes():
    # d = 3584 (Qwen2.5-VL-7B): I_nu(kappa) underflows float64, the log does not
    for kappa in (20.0, 50.0, 200.0):
        assert math.isfinite(float(vmf.log_normalizer(3584, kappa)))
        a = float(vmf.mean_resultant_length(3584, kappa))
        assert a == pytest.approx(float(vmf.mean_resultant_length_approx(3584, kappa)), rel=1e-3)


def test_ratio_is_one_at_the_old_policy_and_log_ratio_formula():
    g = torch.Generator().manual_seed(5)
    mu_old = torch.nn.functional.normalize(torch.randn(4, 3, 32, generator=g), dim=-1)
    z = vmf.sample(mu_old, 30.0, g)
    assert torch.equal(gepo.vmf_log_ratio(mu_old, mu_old, z, 30.0), torch.zeros(4, 3))
    mu_new = torch.nn.functional.normalize(mu_old + 0.1 * torch.randn(4, 3, 32, generator=g), dim=-1)
    expected = vmf.log_prob(z, mu_new, 30.0) - vmf.log_prob(z, mu_old, 30.0)
    assert torch.allclose(gepo.vmf_log_ratio(mu_new, mu_old, z, 30.0), expected, atol=1e-4)


# ---- hybrid PPO (d 9-11)
def test_decoupled_clipping_uses_each_action_kinds_own_range():
    loss = gepo.GePOLoss(eps_text_low=0.2, eps_text_high=0.28, eps_latent_low=0.1, eps_latent_high=0.1, alpha=1.0,
                         beta_text=0.0, beta_vmf=0.0, lambda_geo=0.0, kappa=1.0)
    d = 4
    mu_old = torch.nn.functional.normalize(torch.tensor([[[1.0, 0, 0, 0]]]), dim=-1)
    z = torch.tensor([[[1.0, 0, 0, 0]]])
    mu = torch.tensor([[[1.0 + math.log(1.5), 0, 0, 0]]]).requires_grad_()  # log r = kappa (mu - mu_old).z = log 1.5
    logp_old = torch.zeros(1, 2)
    logp = torch.tensor([[math.log(1.5), math.log(1.1)]])  # token ratios 1.5 (clipped at 1.28) and 1.1 (not clipped)
    _, metrics = loss(adv=torch.ones(1), logp=logp, logp_old=logp_old, logp_ref=logp, text_mask=torch.ones(1, 2, dtype=torch.bool),
                      mu=mu, mu_old=mu_old, mu_ref=mu_old, z=z, latent_mask=torch.ones(1, dtype=torch.bool),
                      image_tokens=torch.randn(1, 6, d))
    per_text, frac_text = gepo.clipped_surrogate(logp - logp_old, torch.ones(1), torch.ones(1, 2, dtype=torch.bool), 0.2, 0.28)
    assert float(per_text) == pytest.approx((1.28 + 1.1) / 2)
    assert metrics["clipfrac_text"] == pytest.approx(0.5)
    per_lat, frac_lat = gepo.clipped_surrogate(torch.tensor([[math.log(1.5)]]), torch.ones(1), torch.ones(1, 1, dtype=torch.bool), 0.1, 0.1)
    assert float(per_lat) == pytest.approx(1.1) and float(frac_lat) == 1.0
    assert metrics["clipfrac_latent"] == pytest.approx(1.0)
    # a negative advantage clips the other side
    per_neg, _ = gepo.clipped_surrogate(torch.tensor([[math.log(0.5)]]), -torch.ones(1), torch.ones(1, 1, dtype=torch.bool), 0.1, 0.1)
    assert float(per_neg) == pytest.approx(-0.9)


def test_group_advantages_and_accuracy_band():
    r = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0, 1.0], [1.0] * 6])
    a = gepo.group_advantages(r)
    assert torch.allclose(a[0].mean(), torch.tensor(0.0), atol=1e-6)
    assert float(a[0].std()) == pytest.approx(1.0, abs=1e-4)
    assert torch.equal(a[1], torch.zeros(6))
    assert gepo.accuracy_band(r.mean(-1)).tolist() == [True, False]


def test_r_geo_zero_at_reference_positive_after_perturbation():
    g = torch.Generator().manual_seed(6)
    m = torch.nn.functional.normalize(torch.randn(2, 4, 16, generator=g), dim=-1)
    p = torch.randn(2, 20, 16, generator=g)
    assert float(geo.geometry_regulariser(m, m.clone(), p)) == pytest.approx(0.0, abs=1e-7)
    bent = m.clone()
    bent[0, 1] = torch.nn.functional.normalize(torch.randn(16, generator=g), dim=-1)
    assert float(geo.geometry_regulariser(bent, m, p)) > 1e-3


def test_gaussian_baseline_matches_the_vmf_step_length():
    d, kappa = 64, 20.0
    sigma = gepo.gaussian_sigma(d, kappa)
    assert d * sigma**2 == pytest.approx(2 * (1 - float(vmf.mean_resultant_length(d, kappa))))
