"""The von Mises-Fisher distribution on the unit sphere S^{d-1}: GePO's policy over latent-slot directions
(specs/gelvr.md B.3).

    log p(z | mu, kappa) = kappa mu.z + log C_d(kappa),   C_d = kappa^nu / ((2 pi)^{d/2} I_nu(kappa)),  nu = d/2 - 1

``torch.distributions`` has no vMF, and at the hidden sizes of real VLMs (d = 3584) ``I_nu(kappa)`` underflows
float64 for every kappa a policy would use, so the log-Bessel function here switches to the uniform (Debye)
asymptotic expansion for large order, where it is accurate to ~1e-8 relative; scipy's exponentially scaled
``ive`` covers small orders. Sampling is Wood's (1994) rejection scheme for the component along mu.
Noise comes only from the caller's ``torch.Generator``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from core.errors import InputError

DEBYE_MIN_ORDER = 10.0  # below this order scipy's ive is exact and finite; above it the expansion is accurate


def _debye_log_iv(nu: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """log I_nu(x) by the uniform asymptotic expansion in 1/nu (Abramowitz & Stegun 9.7.7), four terms."""
    z = x / nu
    s = torch.sqrt(1 + z * z)
    t = 1 / s
    eta = s + torch.log(z / (1 + s))
    t2 = t * t
    u1 = t * (3 - 5 * t2) / 24
    u2 = t2 * (81 - 462 * t2 + 385 * t2 * t2) / 1152
    u3 = t * t2 * (30375 - 369603 * t2 + 765765 * t2**2 - 425425 * t2**3) / 414720
    series = 1 + u1 / nu + u2 / nu**2 + u3 / nu**3
    return -0.5 * torch.log(2 * math.pi * nu) + nu * eta - 0.5 * torch.log(s) + torch.log(series)


def log_bessel_iv(nu: float | torch.Tensor, x: float | torch.Tensor) -> torch.Tensor:
    """``log I_nu(x)`` for ``nu >= 0``, ``x > 0`` (broadcast, float64), finite where ``I_nu`` itself under- or
    overflows: Debye expansion for ``nu >= DEBYE_MIN_ORDER``, scipy's scaled ``ive`` below."""
    from scipy.special import ive

    nu_t = torch.as_tensor(nu, dtype=torch.float64)
    x_t = torch.as_tensor(x, dtype=torch.float64)
    nu_t, x_t = torch.broadcast_tensors(nu_t, x_t)
    if (x_t <= 0).any() or (nu_t < 0).any():
        raise InputError("kappa", "a value <= 0", "the vMF concentration must be positive")
    large = nu_t >= DEBYE_MIN_ORDER
    out = torch.empty_like(x_t)
    if large.any():
        out[large] = _debye_log_iv(nu_t[large], x_t[large])
    if (~large).any():
        small = torch.from_numpy(np.log(ive(nu_t[~large].numpy(), x_t[~large].numpy()))) + x_t[~large]
        out[~large] = small
    return out


def log_normalizer(d: int, kappa: float | torch.Tensor) -> torch.Tensor:
    """``log C_d(kappa)``: the vMF density's log normalising constant on S^{d-1}."""
    nu = d / 2 - 1
    kappa = torch.as_tensor(kappa, dtype=torch.float64)
    return nu * torch.log(kappa) - (d / 2) * math.log(2 * math.pi) - log_bessel_iv(nu, kappa)


def mean_resultant_length(d: int, kappa: float | torch.Tensor) -> torch.Tensor:
    """``A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa) = E[mu.z]``."""
    nu = d / 2 - 1
    kappa = torch.as_tensor(kappa, dtype=torch.float64)
    return torch.exp(log_bessel_iv(nu + 1, kappa) - log_bessel_iv(nu, kappa))


def mean_resultant_length_approx(d: int, kappa: float | torch.Tensor) -> torch.Tensor:
    """The large-d closed form of spec B.3: ``kappa / ((nu + 1) + sqrt(kappa^2 + (nu + 1)^2))``."""
    nu = d / 2 - 1
    kappa = torch.as_tensor(kappa, dtype=torch.float64)
    return kappa / ((nu + 1) + torch.sqrt(kappa**2 + (nu + 1) ** 2))


def log_prob(z: torch.Tensor, mu: torch.Tensor, kappa: float) -> torch.Tensor:
    """``log p(z | mu, kappa)`` over the last axis (``mu`` and ``z`` unit vectors)."""
    return kappa * (z * mu).sum(-1) + log_normalizer(z.shape[-1], kappa).to(z.dtype)


def kl_same_kappa(mu1: torch.Tensor, mu2: torch.Tensor, kappa: float) -> torch.Tensor:
    """``KL(vMF(mu1, kappa) || vMF(mu2, kappa)) = kappa A_d(kappa) (1 - mu1.mu2)`` over the last axis."""
    a = float(mean_resultant_length(mu1.shape[-1], kappa))
    return kappa * a * (1 - (mu1 * mu2).sum(-1))


def kl(mu1: torch.Tensor, kappa1: float, mu2: torch.Tensor, kappa2: float) -> torch.Tensor:
    """``KL(vMF(mu1, kappa1) || vMF(mu2, kappa2)) = log C(k1) - log C(k2) + A_d(k1) (k1 - k2 mu1.mu2)``."""
    d = mu1.shape[-1]
    const = float(log_normalizer(d, kappa1) - log_normalizer(d, kappa2))
    a = float(mean_resultant_length(d, kappa1))
    return const + a * (kappa1 - kappa2 * (mu1 * mu2).sum(-1))


def sample(mu: torch.Tensor, kappa: float, generator: torch.Generator | None = None, max_rounds: int = 1000) -> torch.Tensor:
    """One sample per row of the unit mean directions ``mu`` ``(..., d)``, by Wood's (1994) algorithm.

    The component ``w = mu.z`` is drawn by rejection from a Beta proposal; the rest is a uniform direction
    orthogonal to mu. The Beta and uniform draws use a numpy generator seeded from ``generator``, so the
    result depends on the caller's torch generator alone."""
    if kappa <= 0:
        raise InputError("kappa", kappa, "the vMF concentration must be positive")
    shape, d = mu.shape[:-1], mu.shape[-1]
    if d < 2:
        raise InputError("mu", f"dimension {d}", "a vMF direction needs d >= 2")
    flat = mu.reshape(-1, d).double()
    n = len(flat)
    seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
    rng = np.random.default_rng(seed)
    dm1 = d - 1.0
    b = dm1 / (2 * kappa + math.sqrt(4 * kappa**2 + dm1**2))  # = (-2k + sqrt(4k^2 + (d-1)^2)) / (d-1), stably
    x0 = (1 - b) / (1 + b)
    c = kappa * x0 + dm1 * math.log(1 - x0**2)
    w = np.empty(n)
    todo = np.arange(n)
    for _ in range(max_rounds):
        eps = rng.beta(dm1 / 2, dm1 / 2, size=len(todo))
        cand = (1 - (1 + b) * eps) / (1 - (1 - b) * eps)
        ok = kappa * cand + dm1 * np.log(1 - x0 * cand) - c >= np.log(rng.random(len(todo)))
        w[todo[ok]] = cand[ok]
        todo = todo[~ok]
        if not len(todo):
            break
    else:
        raise RuntimeError(f"vMF sampling did not finish in {max_rounds} rounds (kappa={kappa}, d={d})")
    v = torch.randn(n, d, generator=generator, dtype=torch.float64, device=flat.device)
    v = F.normalize(v - (v * flat).sum(-1, keepdim=True) * flat, dim=-1)
    wt = torch.from_numpy(w).to(flat.device)[:, None]
    z = wt * flat + torch.sqrt((1 - wt * wt).clamp(min=0)) * v
    return z.to(mu.dtype).reshape(*shape, d)
