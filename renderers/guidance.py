"""Bernini's guidance cascade ("wvitcfg") with optional APG, spec bernini.md b.8.

Each rung adds one condition to the one before it, and each delta gets its own scale:

    base   = eps(wovae,   wotxt_wovit)   noisy target only, negative prompt, no plan
    e_V    = eps(wvidvae, wotxt_wovit)   + source videos            (omega_vid)
    e_VI   = eps(wvae,    wotxt_wovit)   + source images            (omega_img)
    e_VTI  = eps(wvae,    wtxt_wovit)    + prompt text              (omega_txt)
    e_VTIC = eps(wvae,    wtxt_wvit)     + the planner's target plan (omega_tgt)
    eps_hat = base + w_vid (e_V - base) + w_img (e_VI - e_V) + w_txt (e_VTI - e_VI) + w_tgt (e_VTIC - e_VTI)

A rung whose scale is 0 is not computed and stands in as the rung below it, so the model runs once per
active rung plus once for the base. With every scale 1 the sum telescopes to e_VTIC, the plain
conditional prediction. ``CascadeGuidance.branches`` lists the forwards one step needs, so a renderer
can batch them; ``combine`` turns their predictions into the guided one.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from core.errors import InputError


@dataclass(frozen=True)
class Branch:
    """One DiT forward of the cascade: which latents enter the sequence and which context (spec b.4, b.8).

    ``latents``: "wovae" (noisy target only), "wvidvae" (+ source-video segments), "wvae" (+ all sources).
    ``context``: "wotxt_wovit" (negative prompt, no plan), "wtxt_wovit" (prompt), "wtxt_wvit" (prompt + plan).
    """

    name: str
    latents: str
    context: str


BASE = Branch("base", "wovae", "wotxt_wovit")
VIDEO = Branch("video", "wvidvae", "wotxt_wovit")
IMAGE = Branch("image", "wvae", "wotxt_wovit")
TEXT = Branch("text", "wvae", "wtxt_wovit")
PLAN = Branch("plan", "wvae", "wtxt_wvit")
LADDER: tuple[Branch, ...] = (BASE, VIDEO, IMAGE, TEXT, PLAN)
RUNGS = tuple(b.name for b in LADDER[1:])


def _real(name: str, value: object, lo: float, hint: str, *, strict: bool = False) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (value <= lo if strict else value < lo):
        raise InputError(name, value, hint)
    return float(value)


@dataclass(frozen=True)
class GuidanceScales:
    """The cascade's scales: omega_vid, omega_img, omega_txt, omega_tgt, and the low-noise-expert factor.

    Defaults are the official demo's base table (spec b.8): omega_img 4.5, omega_txt 4.0, omega_tgt 0.5,
    omega_scale 0.8. ``video`` defaults to 0 [DEFAULT]: the base table has no video scale (the v2v table
    uses 1.25, rv2v 1.75), and at 0 the image rung guides all sources at once. Per-task tables belong to
    the pipeline. ``omega_scale`` multiplies every scale once when sampling moves to the low-noise expert.
    """

    video: float = 0.0
    image: float = 4.5
    text: float = 4.0
    plan: float = 0.5
    omega_scale: float = 0.8

    def __post_init__(self) -> None:
        for rung in RUNGS:
            _real(rung, getattr(self, rung), 0.0, "use a guidance scale >= 0 (0 skips the rung)")
        _real("omega_scale", self.omega_scale, 0.0, "use a positive factor (the official demo uses 0.8)", strict=True)

    def scaled(self, factor: float) -> GuidanceScales:
        """Every rung's scale times ``factor`` (``omega_scale`` itself unchanged)."""
        f = _real("factor", factor, 0.0, "use a non-negative factor")
        return replace(self, **{r: getattr(self, r) * f for r in RUNGS})

    def for_sources(self, has_video: bool, has_images: bool) -> GuidanceScales:
        """Zero the rungs that cannot change anything: with no source video ``wvidvae`` is ``wovae``
        (e_V = base), and with no sources at all ``wvae`` is too (e_VI = base). Saves their forwards."""
        return replace(self, video=self.video if has_video else 0.0,
                       image=self.image if (has_video or has_images) else 0.0)


@dataclass(frozen=True)
class APG:
    """Adaptive projected guidance per delta (Sadat et al., arXiv 2410.02416; the "*_wapg" modes, spec b.8).

    ``eta`` 0.5 scales the part of a delta parallel to its rung's prediction, ``norm_threshold`` 50 caps
    each sample's delta norm (0 disables), and ``momentum`` defaults to 0.0: the official demo's value,
    which corrects the port's -0.5. ``deltas`` names the rungs whose delta is projected; [PROPOSED] all of
    them (the port projects every delta of the cascade; which ones the official modes project was not
    retrieved).
    """

    eta: float = 0.5
    momentum: float = 0.0
    norm_threshold: float = 50.0
    deltas: tuple[str, ...] = RUNGS

    def __post_init__(self) -> None:
        _real("eta", self.eta, 0.0, "use a parallel scale >= 0 (the official demo uses 0.5)")
        _real("norm_threshold", self.norm_threshold, 0.0, "use a norm cap >= 0 (0 disables it; official 50)")
        m = _real("momentum", self.momentum, -1.0, "use a momentum in (-1, 1) (official 0.0)", strict=True)
        if m >= 1:
            raise InputError("momentum", self.momentum, "use a momentum in (-1, 1) (official 0.0)")
        if not isinstance(self.deltas, tuple) or any(d not in RUNGS for d in self.deltas):
            raise InputError("deltas", self.deltas, f"use a tuple drawn from {RUNGS}")


class MomentumBuffer:
    """APG's running delta: ``avg <- delta + momentum * avg``; negative momentum damps repeated pushes."""

    def __init__(self, momentum: float) -> None:
        self.momentum = momentum
        self.average: torch.Tensor | None = None

    def update(self, delta: torch.Tensor) -> torch.Tensor:
        self.average = delta if self.average is None else delta + self.momentum * self.average
        return self.average


def apg_update(delta: torch.Tensor, ref: torch.Tensor, *, eta: float = 0.5, norm_threshold: float = 50.0,
               momentum_buffer: MomentumBuffer | None = None) -> torch.Tensor:
    """The APG form of ``delta = ref - prev``: orthogonal part + ``eta`` x the part parallel to ``ref``.

    Per sample (dim 0) over all other dims: momentum first, then the norm cap, then the projection, in
    float64, in the order of the APG paper and diffusers' ``normalized_guidance``. The parallel part is
    what oversaturates at high scales, hence ``eta < 1``.
    """
    if delta.shape != ref.shape or delta.ndim < 2:
        raise InputError("delta", tuple(delta.shape), f"use (B, ...) tensors of one shape; ref is {tuple(ref.shape)}")
    if momentum_buffer is not None:
        delta = momentum_buffer.update(delta)
    dims = tuple(range(1, delta.ndim))
    if norm_threshold > 0:
        norm = delta.norm(p=2, dim=dims, keepdim=True)
        delta = delta * torch.clamp(norm_threshold / norm, max=1.0)  # a zero norm gives inf -> 1
    d, r = delta.double(), F.normalize(ref.double(), dim=dims)
    parallel = (d * r).sum(dim=dims, keepdim=True) * r
    return (d - parallel + eta * parallel).to(delta.dtype)


class CascadeGuidance:
    """The b.8 ladder for one sampling run; holds the APG momentum and the expert-switch state.

    ``guide = CascadeGuidance(scales, apg=APG())``; per step ``eps = guide(predict)`` where
    ``predict(branch)`` runs the DiT on that branch's latents and context, or ``guide.combine(preds)``
    with ``preds[branch.name]`` for every ``branch`` in ``guide.branches``. Call ``switch_expert()`` when
    sampling moves to the low-noise expert (scales times ``omega_scale``, once) and ``reset()`` before
    another run.
    """

    def __init__(self, scales: GuidanceScales | None = None, apg: APG | None = None) -> None:
        if scales is not None and not isinstance(scales, GuidanceScales):
            raise InputError("scales", scales, "pass a GuidanceScales")
        if apg is not None and not isinstance(apg, APG):
            raise InputError("apg", apg, "pass an APG or None (APG off)")
        self.initial_scales = scales or GuidanceScales()
        self.apg = apg
        self.reset()

    def reset(self) -> None:
        self.scales = self.initial_scales
        self.switched = False
        use_momentum = self.apg is not None and self.apg.momentum != 0
        self._buffers = {r: MomentumBuffer(self.apg.momentum) for r in self.apg.deltas} if use_momentum else {}

    def switch_expert(self) -> None:
        """Scale every omega by ``omega_scale`` the first time it is called (spec b.8); later calls do nothing."""
        if not self.switched:
            self.scales = self.scales.scaled(self.scales.omega_scale)
            self.switched = True

    @property
    def branches(self) -> tuple[Branch, ...]:
        """The forwards this step needs: the base and every rung with a non-zero scale, in ladder order."""
        return (BASE,) + tuple(b for b in LADDER[1:] if getattr(self.scales, b.name) > 0)

    def combine(self, preds: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``eps_hat`` from the predictions of ``self.branches`` (keyed by branch name)."""
        missing = [b.name for b in self.branches if b.name not in preds]
        if missing:
            raise InputError("preds", sorted(preds), f"missing the prediction(s) of {missing}")
        base = preds[BASE.name]
        out, prev = base, base
        for branch in self.branches[1:]:
            cur = preds[branch.name]
            if cur.shape != base.shape:
                raise InputError(f"preds[{branch.name!r}]", tuple(cur.shape), f"must match base {tuple(base.shape)}")
            delta = cur - prev
            if self.apg is not None and branch.name in self.apg.deltas:
                delta = apg_update(delta, cur, eta=self.apg.eta, norm_threshold=self.apg.norm_threshold,
                                   momentum_buffer=self._buffers.get(branch.name))
            out = out + getattr(self.scales, branch.name) * delta
            prev = cur
        return out

    def __call__(self, predict: Callable[[Branch], torch.Tensor]) -> torch.Tensor:
        return self.combine({b.name: predict(b) for b in self.branches})
