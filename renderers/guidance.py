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
from typing import Any

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


# ---------------------------------------------------------------- the official guidance modes
#
# The released code picks one formula per task ("guidance_mode"; bytedance/Bernini gradio_demo.py
# GUIDANCE_MODE_BY_TASK and the BERNINI_V1/V2 tables). Each mode below is written from its definition;
# sources: Bernini-R's modes from neuregex/ComfyUI-BerniniR bernini/sampler.py + guidance.py (a "port
# verbatim" of bernini/models/wan_diffusion.py), the full-Bernini modes from T8mars/comfyui-bernini-v2-T8
# bernini_v2/guidance.py (BF16 tensor parity vs the official commit, docs/TENSOR_PARITY.md), which
# xocialize/bernini-r-mlx-swift's WvitcfgSampling agrees with. ``CascadeGuidance`` above is our earlier
# ladder, kept as the named mode "cascade" (APG per ``APG``) for the builtin models and for comparison.

# Branches the official modes add to the ladder's: the prompt with no sources (t2v_apg), and the
# reference images alone (r2v_apg's I-stream), with the negative prompt and with the prompt.
TEXT_ONLY = Branch("text_only", "wovae", "wtxt_wvit")
REFS = Branch("refs", "wimgvae", "wotxt_wovit")
REFS_TEXT = Branch("refs_text", "wimgvae", "wtxt_wvit")
SOURCES_TEXT = Branch("sources_text", "wvae", "wtxt_wvit")

GUIDANCE_MODES = ("t2v_apg", "v2v_apg", "r2v_apg", "rv2v", "v2v", "vae_txt_vit_wapg", "cascade")
X0_MODES = ("t2v_apg", "v2v_apg", "r2v_apg")


def per_frame_apg(diff: torch.Tensor, ref: torch.Tensor, *, eta: float = 0.5, norm_threshold: float = 50.0,
                  momentum_buffer: MomentumBuffer | None = None) -> torch.Tensor:
    """Bernini-R's APG of one delta on 5-D latents ``(B, C, T, H, W)``: every norm and projection is taken
    per frame over (C, H, W) (dims -1, -2, -4), never across frames.

    Order as the official ``_normalize_diff``: momentum, then the norm cap (``norm_threshold`` 0 = off),
    then ``orthogonal + eta * parallel`` with the parallel part along ``ref`` (unit-normalised per frame,
    norm floored at 1e-12), in float64, cast back to ``diff``'s dtype.
    """
    if diff.shape != ref.shape or diff.ndim != 5:
        raise InputError("diff", tuple(diff.shape), f"use (B, C, T, H, W) tensors of one shape; ref is {tuple(ref.shape)}")
    dims = (-1, -2, -4)
    if momentum_buffer is not None:
        diff = momentum_buffer.update(diff)
    if norm_threshold > 0:
        norm = diff.norm(p=2, dim=dims, keepdim=True)
        diff = diff * torch.clamp(norm_threshold / norm, max=1.0)
    d, r = diff.double(), ref.double()
    r = r / r.norm(p=2, dim=dims, keepdim=True).clamp_min(1e-12)
    parallel = (d * r).sum(dim=dims, keepdim=True) * r
    return ((d - parallel).to(diff.dtype) + eta * parallel.to(diff.dtype))


@dataclass(frozen=True)
class APGDelta:
    """Full Bernini's projection of a guidance delta (``vae_txt_vit_wapg``): ``parallel`` x the part of the
    delta along its rung's prediction + ``orthogonal`` x the rest, over the whole flattened latent per
    sample; no norm cap, no momentum; ``eps`` floors the reference's squared norm."""

    parallel: float = 0.2
    orthogonal: float = 1.0
    eps: float = 1e-8

    def __post_init__(self) -> None:
        _real("parallel", self.parallel, 0.0, "use a scale >= 0 (the release uses 0.2)")
        _real("orthogonal", self.orthogonal, 0.0, "use a scale >= 0 (the release uses 1.0)")
        _real("eps", self.eps, 0.0, "use a small positive floor (1e-8)", strict=True)


def apg_delta(delta: torch.Tensor, ref: torch.Tensor, proj: APGDelta | None = None) -> torch.Tensor:
    """``proj.parallel * parallel + proj.orthogonal * orthogonal`` of ``delta`` against ``ref``, per sample
    (dim 0) over everything else, computed in float64 and cast back."""
    p = proj or APGDelta()
    if delta.shape != ref.shape or delta.ndim < 2:
        raise InputError("delta", tuple(delta.shape), f"use (B, ...) tensors of one shape; ref is {tuple(ref.shape)}")
    d, r = delta.double().flatten(1), ref.double().flatten(1)
    coef = (d * r).sum(1, keepdim=True) / (r * r).sum(1, keepdim=True).clamp_min(p.eps)
    parallel = coef * r
    return (p.parallel * parallel + p.orthogonal * (d - parallel)).reshape(delta.shape).to(delta.dtype)


class ModeGuidance:
    """One official guidance mode for a sampling run (the same interface as ``CascadeGuidance``).

    ``branches`` lists the DiT forwards one step needs; ``combine(preds, sample=x_t, sigma=sigma)`` returns
    the guided velocity (``sample`` and ``sigma`` are needed by the x0-space modes). Scales come from
    ``GuidanceScales`` (video = omega_vid, image = omega_img, text = omega_txt, plan = omega_tgt) and are
    multiplied by ``omega_scale`` once at the expert switch, as the released samplers do. With v the
    velocity and eps_X the prediction of arm X:

    * ``t2v_apg``: u = (no sources, negative), c = (no sources, prompt); in x0 space x = x_t - sigma * v,
      x = x_u + w_txt * A(x_c - x_u; x_c); v = (x_t - x) / sigma.
    * ``v2v_apg``: the same with every source in both arms (the unconditional arm KEEPS the sources).
    * ``r2v_apg``: u = (none, neg), I = (references, neg), TI = (references, prompt); x0-space chain
      x = x_u + w_img * A(x_I - x_u; x_I) + w_txt * A(x_TI - x_I; x_TI), one momentum buffer per link.
      A is ``per_frame_apg`` with ``apg`` (eta 0.5, cap 50, momentum 0).
    * ``v2v``: u = (sources, neg), c = (sources, prompt); u + w_txt (c - u) (Bernini-R's i2i mode).
    * ``rv2v``: the plain chain u + w_vid (V - u) + w_img (VI - V) + w_txt (VTI - VI) [+ w_tgt (VTIC - VTI)
      with a plan]; the full release's ``rv2v_wapg`` runs this same chain (T8mars: "despite the upstream
      mode name rv2v_wapg, the released inference code uses direct chained deltas").
    * ``vae_txt_vit_wapg``: base + w_img P(S - base; S) + w_txt P(T - S; T) + w_tgt P(C - T; C) with
      S = (all sources, neg), T = (sources, prompt), C = (sources, prompt + plan) and P = ``apg_delta``
      (parallel 0.2, orthogonal 1.0); w_vid is unused. The other reading, our earlier APG (eta 0.5, cap
      50, all dims) on the five-rung ladder, is the named mode "cascade" with ``APG()``.

    An arm that would repeat another (no source video: V = u; no sources: S = base) stands in as that arm,
    as the ports' ``predictions.get(name, fallback)`` does, so it costs no forward.
    """

    def __init__(self, mode: str, scales: GuidanceScales | None = None, *, apg: APG | None = None,
                 wapg: APGDelta | None = None, has_video: bool = True, has_images: bool = True,
                 has_plan: bool = False) -> None:
        if mode not in GUIDANCE_MODES or mode == "cascade":
            raise InputError("guidance_mode", mode, f"use one of {[m for m in GUIDANCE_MODES if m != 'cascade']} "
                                                    "(or CascadeGuidance for 'cascade')")
        if scales is not None and not isinstance(scales, GuidanceScales):
            raise InputError("scales", scales, "pass a GuidanceScales")
        if apg is not None and not isinstance(apg, APG):
            raise InputError("apg", apg, "pass an APG (Bernini-R's eta / norm cap / momentum) or None (defaults)")
        if wapg is not None and not isinstance(wapg, APGDelta):
            raise InputError("wapg", wapg, "pass an APGDelta or None (parallel 0.2, orthogonal 1.0)")
        self.mode = mode
        self.initial_scales = scales or GuidanceScales()
        self.apg = apg or APG()
        self.wapg = wapg or APGDelta()
        self.has_video, self.has_images, self.has_plan = bool(has_video), bool(has_images), bool(has_plan)
        self.reset()

    def reset(self) -> None:
        self.scales = self.initial_scales
        self.switched = False
        m = self.apg.momentum
        self._buffers = [MomentumBuffer(m), MomentumBuffer(m)] if m != 0 else [None, None]

    def switch_expert(self) -> None:
        """Every omega times ``omega_scale``, the first time only."""
        if not self.switched:
            self.scales = self.scales.scaled(self.scales.omega_scale)
            self.switched = True

    @property
    def needs_sample(self) -> bool:
        """True for the x0-space modes: ``combine`` then needs ``sample`` and ``sigma``."""
        return self.mode in X0_MODES

    @property
    def branches(self) -> tuple[Branch, ...]:
        sources = self.has_video or self.has_images
        m = self.mode
        if m == "t2v_apg":
            return (BASE, TEXT_ONLY)
        if m in ("v2v_apg", "v2v"):
            return (IMAGE, SOURCES_TEXT) if sources else (BASE, TEXT_ONLY)
        if m == "r2v_apg":
            return (BASE, REFS, REFS_TEXT) if self.has_images else (BASE, TEXT_ONLY)
        if m == "rv2v":
            arms = [BASE] + [VIDEO] * self.has_video + [IMAGE] * sources + [TEXT] + [PLAN] * self.has_plan
            return tuple(arms)
        return (BASE,) + (IMAGE,) * sources + (TEXT,) + (PLAN,) * self.has_plan  # vae_txt_vit_wapg

    def combine(self, preds: Mapping[str, torch.Tensor], *, sample: torch.Tensor | None = None,
                sigma: torch.Tensor | float | None = None) -> torch.Tensor:
        """The guided velocity from the predictions of ``self.branches`` (keyed by branch name)."""
        missing = [b.name for b in self.branches if b.name not in preds]
        if missing:
            raise InputError("preds", sorted(preds), f"missing the prediction(s) of {missing}")
        s, m = self.scales, self.mode
        names = [b.name for b in self.branches]
        if m in X0_MODES:
            return self._x0_space([preds[n] for n in names], sample, sigma)
        if m == "v2v":
            u, c = (preds[n] for n in names)
            return u + s.text * (c - u)
        base = preds["base"]
        if m == "rv2v":
            video = preds.get("video", base)
            image = preds.get("image", video)
            text = preds["text"]
            out = base + s.video * (video - base) + s.image * (image - video) + s.text * (text - image)
            return out + s.plan * (preds["plan"] - text) if "plan" in preds and self.has_plan else out
        source = preds.get("image", base)
        text = preds["text"]
        out = base + s.image * apg_delta(source - base, source, self.wapg) + s.text * apg_delta(text - source, text, self.wapg)
        if self.has_plan:
            target = preds["plan"]
            out = out + s.plan * apg_delta(target - text, target, self.wapg)
        return out

    def _x0_space(self, arms: list[torch.Tensor], sample: torch.Tensor | None, sigma: Any) -> torch.Tensor:
        if sample is None or sigma is None:
            raise InputError("sample", None, f"guidance mode {self.mode} works in x0 space: pass sample (x_t) and sigma")
        sig = torch.as_tensor(sigma, dtype=torch.float64, device=sample.device)
        if bool((sig <= 0).any()):
            raise InputError("sigma", float(sig.flatten()[0]), "x0-space guidance needs sigma > 0")
        x_t = sample.double()
        xs = [x_t - sig * v.double() for v in arms]  # x0 estimates: x_t - sigma * velocity
        a, s = self.apg, self.scales
        if self.mode == "r2v_apg" and len(xs) == 3:
            weights = (s.image, s.text)
        else:
            weights = (s.text,)
        out = xs[0]
        for k, w in enumerate(weights):
            prev, cur = xs[k], xs[k + 1]
            out = out + w * per_frame_apg(cur - prev, cur, eta=a.eta, norm_threshold=a.norm_threshold,
                                          momentum_buffer=self._buffers[k])
        return ((x_t - out) / sig).to(arms[0].dtype)

    def __call__(self, predict: Callable[[Branch], torch.Tensor], **kwargs: Any) -> torch.Tensor:
        return self.combine({b.name: predict(b) for b in self.branches}, **kwargs)
