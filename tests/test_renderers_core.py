"""SA-3D RoPE, flow matching and the guidance cascade (spec bernini.md d.1 and d.3, items 13-15 and 18)."""

from __future__ import annotations

import math

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler
from diffusers.guiders import adaptive_projected_guidance as diffusers_apg
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

from core.errors import InputError
from renderers import flow, guidance, rope

F64 = torch.float64


def _logits(q: torch.Tensor, k: torch.Tensor, tables: rope.RotaryTables) -> torch.Tensor:
    """Per-head attention logits (heads, L, L) of rotated q and k, each (1, L, heads, D)."""
    qr, kr = rope.apply_rotary(q, tables), rope.apply_rotary(k, tables)
    return torch.einsum("blhd,bmhd->hlm", qr, kr)


def _qk(n: int, heads: int = 2, d: int = 128, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, n, heads, d, generator=g, dtype=F64), torch.randn(1, n, heads, d, generator=g, dtype=F64)


# ---------------------------------------------------------------- SA-3D RoPE (d.1)

def test_axis_split_follows_wan() -> None:
    assert rope.axis_pairs(128) == (22, 21, 21)
    for d in (12, 64, 96, 130):
        c = d // 2
        assert rope.axis_pairs(d) == (c - 2 * (c // 3), c // 3, c // 3)
        wan = WanRotaryPosEmbed(d, (1, 2, 2), 8)
        assert (wan.t_dim, wan.h_dim, wan.w_dim) == tuple(2 * p for p in rope.axis_pairs(d))


@pytest.mark.parametrize("head_dim,latent_fhw", [(128, (3, 8, 10)), (64, (2, 6, 14)), (12, (1, 2, 2))])
def test_segment_zero_is_wan_rope_bit_for_bit(head_dim: int, latent_fhw: tuple[int, int, int]) -> None:
    f, h, w = latent_fhw
    cos, sin = WanRotaryPosEmbed(head_dim, (1, 2, 2), 1024)(torch.zeros(1, 1, f, h, w))
    ours = rope.sa3d_freqs((f, h // 2, w // 2), 0, head_dim)
    assert ours.cos.dtype == cos.dtype and ours.cos.shape == cos.shape
    assert torch.equal(ours.cos, cos) and torch.equal(ours.sin, sin)
    packed = rope.multi_segment_freqs([((f, h // 2, w // 2), 0.0)], head_dim)
    assert torch.equal(packed.cos, cos) and torch.equal(packed.sin, sin)


def test_apply_rotary_is_the_complex_rotation() -> None:
    grid = (2, 3, 4)
    x = _qk(24)[0]
    ang = rope.sa3d_angles(grid, 1.5)
    expect = torch.view_as_real(torch.view_as_complex(x.reshape(1, 24, 2, 64, 2)) * torch.polar(torch.ones_like(ang), ang)[None, :, None])
    out = rope.apply_rotary(x, rope.sa3d_freqs(grid, 1.5, dtype=F64))
    torch.testing.assert_close(out, expect.flatten(-2), rtol=0, atol=1e-12)
    # d.1.4: a rotation keeps every head's norm.
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=0)


def test_equal_segment_ids_give_plain_3d_rope() -> None:
    segs = [((2, 2, 3), 0.0), ((1, 2, 3), 0.0), ((2, 2, 2), 0.0)]
    q, k = _qk(sum(math.prod(g) for g, _ in segs))
    plain = _logits(q, k, rope.multi_segment_freqs(segs, dtype=F64))
    for s in (1.0, 2.5, -3.0):
        same = [(g, s) for g, _ in segs]
        torch.testing.assert_close(_logits(q, k, rope.multi_segment_freqs(same, dtype=F64)), plain, rtol=0, atol=1e-10)


def test_logits_are_shift_invariant_in_segment_ids() -> None:
    segs = [((1, 2, 2), 1.0), ((2, 2, 2), 2.0), ((2, 3, 2), 0.0)]
    q, k = _qk(sum(math.prod(g) for g, _ in segs), seed=1)
    ref = _logits(q, k, rope.multi_segment_freqs(segs, dtype=F64))
    shifted = [(g, s + 3.7) for g, s in segs]
    torch.testing.assert_close(_logits(q, k, rope.multi_segment_freqs(shifted, dtype=F64)), ref, rtol=0, atol=1e-10)


def test_segment_id_tells_colocated_tokens_apart() -> None:
    q, k = _qk(1, heads=1, seed=2)
    qk2 = (torch.cat([q, q], 1), torch.cat([k, k], 1))
    cross = _logits(*qk2, rope.multi_segment_freqs([((1, 1, 1), 0), ((1, 1, 1), 1)], dtype=F64))[0]
    same = _logits(*qk2, rope.multi_segment_freqs([((1, 1, 1), 1), ((1, 1, 1), 1)], dtype=F64))[0]
    plain = (q * k).sum()
    assert abs(cross[0, 1] - plain) > 1e-3  # (0,0,0) of the target vs (0,0,0) of source 1
    torch.testing.assert_close(same, torch.full_like(same, float(plain)), rtol=0, atol=1e-10)


def test_fractional_ids_are_continuous() -> None:
    q, k = _qk(2, seed=3)
    def logit(s: float) -> torch.Tensor:
        return _logits(q, k, rope.multi_segment_freqs([((1, 1, 1), 0.0), ((1, 1, 1), s)], dtype=F64))[:, 0, 1]
    for s in (1.0, 2.4):
        step = (logit(s + 1e-3) - logit(s)).abs().max()
        assert 0 < step < 1e-3 * q.norm() * k.norm()  # |d logit / ds| <= |q| |k| since every frequency <= 1


def test_multi_segment_tables_concatenate_in_sequence_order() -> None:
    segs = [((1, 2, 3), 1.0), ((2, 1, 2), 2.5), ((2, 2, 2), 0.0)]
    packed = rope.multi_segment_freqs(segs, 64)
    parts = [rope.sa3d_freqs(g, s, 64) for g, s in segs]
    assert torch.equal(packed.cos, torch.cat([p.cos for p in parts], 1))
    assert torch.equal(packed.sin, torch.cat([p.sin for p in parts], 1))
    # each segment restarts at (0, 0, 0): source 1 and the target differ only by the segment phase
    torch.testing.assert_close(rope.sa3d_angles((2, 2, 2), 1.0), rope.sa3d_angles((2, 2, 2), 0.0) + rope.segment_phase(1.0))


def test_source_segment_ids() -> None:
    assert rope.source_segment_ids(0) == [] and rope.source_segment_ids(3) == [1.0, 2.0, 3.0]
    ids = rope.source_segment_ids(9)
    assert len(ids) == 9 and ids[0] == 1.0 and ids[-1] == 5.0 and ids == sorted(ids)


@pytest.mark.parametrize("call", [
    lambda: rope.axis_pairs(7), lambda: rope.sa3d_freqs((2, 0, 2)), lambda: rope.sa3d_freqs((2, 2)),
    lambda: rope.sa3d_freqs((2, 2, 2), float("nan")), lambda: rope.sa3d_freqs((2, 2, 2), theta=1.0),
    lambda: rope.multi_segment_freqs([]), lambda: rope.multi_segment_freqs([((1, 1, 1),)]),
    lambda: rope.apply_rotary(torch.zeros(1, 3, 2, 128), rope.sa3d_freqs((1, 1, 2))),
    lambda: rope.source_segment_ids(-1),
])
def test_rope_bad_arguments(call) -> None:
    with pytest.raises(InputError):
        call()


# ---------------------------------------------------------------- flow matching (d.3)

def test_noising_endpoints_and_velocity() -> None:
    g = torch.Generator().manual_seed(0)
    x0, eps = torch.randn(3, 4, 2, 5, generator=g, dtype=F64), torch.randn(3, 4, 2, 5, generator=g, dtype=F64)
    assert torch.equal(flow.add_noise(x0, eps, 0.0), x0) and torch.equal(flow.add_noise(x0, eps, 1.0), eps)
    assert torch.equal(flow.velocity_target(x0, eps), eps - x0)
    assert flow.velocity_target(x0.bfloat16(), eps.bfloat16()).dtype == torch.float32
    sig = torch.tensor([0.0, 0.3, 1.0], dtype=F64)
    xt = flow.add_noise(x0, eps, sig)
    assert torch.equal(xt[0], x0[0]) and torch.equal(xt[2], eps[2])
    # one Euler step from sigma to 0 with the exact velocity lands on the clean sample (d.3.13)
    sig = torch.tensor([0.9, 0.37, 0.05], dtype=F64)
    back = flow.euler_step(flow.add_noise(x0, eps, sig), eps - x0, sig, 0.0)
    torch.testing.assert_close(back, x0, rtol=0, atol=1e-12)


def test_convention_matches_diffusers_flow_match_euler() -> None:
    sched = flow.make_scheduler("euler", shift=5.0)
    sched.set_timesteps(6)
    g = torch.Generator().manual_seed(1)
    x0, eps, v = (torch.randn(1, 4, 2, 3, 3, generator=g) for _ in range(3))
    t, s, s_next = sched.timesteps[2], sched.sigmas[2], sched.sigmas[3]
    torch.testing.assert_close(sched.scale_noise(x0, t[None], eps), flow.add_noise(x0, eps, s))
    sched._step_index = 2
    torch.testing.assert_close(sched.step(v, t, x0, return_dict=False)[0], flow.euler_step(x0, v, s, s_next))
    assert torch.allclose(flow.training_sigmas(5.0), flow.shift_sigmas(torch.arange(1000, 0, -1) / 1000, 5.0))


def test_loss_counts_target_tokens_only() -> None:
    g = torch.Generator().manual_seed(2)
    b, n, c = 2, 7, 3
    x0, eps = torch.randn(b, n, c, generator=g), torch.randn(b, n, c, generator=g)
    pred = torch.randn(b, n, c, generator=g, requires_grad=True)
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[0, 4:] = True  # sample 0: 4 sources then 3 target tokens
    mask[1, 1:] = True
    loss = flow.flow_matching_loss(pred, x0, eps, mask)
    err = (pred.detach() - (eps - x0)) ** 2
    expect = (err[0, 4:].mean() + err[1, 1:].mean()) / 2
    torch.testing.assert_close(loss, expect)
    # sources' targets do not matter (d.3.14) ...
    x0b, epsb = x0.clone(), eps.clone()
    x0b[~mask] += 10.0
    epsb[~mask] -= 3.0
    assert torch.equal(flow.flow_matching_loss(pred, x0b, epsb, mask), loss)
    # ... nor get gradients
    loss.backward()
    assert bool((pred.grad[~mask] == 0).all()) and bool((pred.grad[mask] != 0).all())
    assert torch.allclose(flow.flow_matching_loss(pred, x0, eps), err.mean())
    with pytest.raises(InputError):
        flow.flow_matching_loss(pred, x0, eps, torch.zeros(b, n, dtype=torch.bool))
    with pytest.raises(InputError):
        flow.flow_matching_loss(pred, x0, eps, mask.float())


def test_sigma_sampling() -> None:
    for expert in ("high", "low"):
        lo, hi = flow.expert_sigma_range(expert)
        s = flow.sample_sigmas(500, generator=torch.Generator().manual_seed(0), density="mode", sigma_range=(lo, hi))
        assert bool(((s >= lo) & ((s <= hi) if hi == 1 else (s < hi))).all())
    table = flow.training_sigmas(5.0)
    assert bool(torch.isin(s, table).all())  # every draw is a point of the shifted schedule
    # unshifted logit-normal(0.5, 1): u's median is sigmoid(0.5), so sigma's (descending table) is 1 - that
    s = flow.sample_sigmas(4000, generator=torch.Generator().manual_seed(1), density="logit_normal", shift=1.0)
    assert abs(float(s.median()) - (1 - 1 / (1 + math.exp(-0.5)))) < 0.03
    m = flow.sample_sigmas(2000, generator=torch.Generator().manual_seed(2), density="mode", shift=1.0)
    assert 0 < float(m.min()) and float(m.max()) <= 1
    a = flow.sample_sigmas(8, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, flow.sample_sigmas(8, generator=torch.Generator().manual_seed(3)))
    with pytest.raises(InputError):
        flow.sample_sigmas(4, density="normal")
    with pytest.raises(InputError):
        flow.sample_sigmas(4, sigma_range=(0.5, 0.2))


@pytest.mark.parametrize("kind", ["euler", "unipc"])
def test_sampling_with_the_exact_velocity_recovers_the_data_point(kind: str) -> None:
    x0 = torch.randn(1, 4, 2, 3, 3, generator=torch.Generator().manual_seed(4))
    steps = []

    def velocity(x: torch.Tensor, t: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return (x - x0) / sigma  # the flow of a point mass at x0: x_sigma - x0 = sigma * v

    noise = flow.initial_noise(x0.shape, torch.Generator().manual_seed(5))
    out = flow.sample_flow(velocity, noise, flow.make_scheduler(kind), 8, callback=lambda i, t, x: steps.append(i))
    assert steps == list(range(8))
    torch.testing.assert_close(out, x0, rtol=0, atol=1e-4)


def test_sampling_loop_is_deterministic_with_a_generator() -> None:
    torch.manual_seed(0)
    net = torch.nn.Conv3d(4, 4, 1)

    def velocity(x: torch.Tensor, t: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return net(x) * (t / 1000)

    def run(seed: int, scheduler) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            return flow.sample_flow(velocity, flow.initial_noise((1, 4, 2, 4, 4), g), scheduler, 5, generator=g)

    for sched in (flow.make_scheduler("unipc"), FlowMatchEulerDiscreteScheduler(shift=5.0, stochastic_sampling=True)):
        a, b, c = run(0, sched), run(0, sched), run(1, sched)
        assert torch.equal(a, b) and not torch.allclose(a, c)
    with pytest.raises(InputError):
        flow.sample_flow(velocity, torch.zeros(1, 4, 1, 2, 2), UniPCMultistepScheduler(), 4)
    with pytest.raises(InputError):
        flow.sample_flow(velocity, torch.zeros(1, 4, 1, 2, 2), flow.make_scheduler(), 0)


# ---------------------------------------------------------------- guidance cascade (d.3.18)

def _ladder(seed: int = 0, shape=(2, 4, 2, 3, 3)) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {b.name: torch.randn(*shape, generator=g, dtype=F64) for b in guidance.LADDER}


def _counting(preds: dict[str, torch.Tensor]):
    calls: list[guidance.Branch] = []

    def predict(branch: guidance.Branch) -> torch.Tensor:
        calls.append(branch)
        return preds[branch.name]
    return predict, calls


def test_all_scales_one_collapse_to_the_conditional_prediction() -> None:
    preds = _ladder()
    predict, calls = _counting(preds)
    out = guidance.CascadeGuidance(guidance.GuidanceScales(1.0, 1.0, 1.0, 1.0))(predict)
    torch.testing.assert_close(out, preds["plan"], rtol=0, atol=1e-12)
    assert calls == list(guidance.LADDER)
    assert calls[-1] == guidance.Branch("plan", "wvae", "wtxt_wvit")


def test_all_scales_zero_give_the_base_with_one_forward() -> None:
    preds = _ladder()
    predict, calls = _counting(preds)
    out = guidance.CascadeGuidance(guidance.GuidanceScales(0.0, 0.0, 0.0, 0.0), apg=guidance.APG())(predict)
    assert torch.equal(out, preds["base"]) and calls == [guidance.BASE]


def test_cascade_formula_and_zero_scale_short_circuits() -> None:
    p = _ladder(1)
    w = guidance.GuidanceScales(video=1.25, image=3.0, text=4.0, plan=0.5)
    full = (p["base"] + 1.25 * (p["video"] - p["base"]) + 3.0 * (p["image"] - p["video"])
            + 4.0 * (p["text"] - p["image"]) + 0.5 * (p["plan"] - p["text"]))
    torch.testing.assert_close(guidance.CascadeGuidance(w)(_counting(p)[0]), full, rtol=0, atol=1e-12)
    # omega_vid = 0: e_V is the base, and the video rung is never run
    predict, calls = _counting(p)
    out = guidance.CascadeGuidance(guidance.GuidanceScales(0.0, 3.0, 4.0, 0.5))(predict)
    manual = p["base"] + 3.0 * (p["image"] - p["base"]) + 4.0 * (p["text"] - p["image"]) + 0.5 * (p["plan"] - p["text"])
    torch.testing.assert_close(out, manual, rtol=0, atol=1e-12)
    assert [b.name for b in calls] == ["base", "image", "text", "plan"]
    # t2v: no sources, so neither source rung can matter
    assert guidance.GuidanceScales().for_sources(False, False).image == 0.0
    assert guidance.GuidanceScales(video=2.0).for_sources(False, True).video == 0.0


def test_expert_switch_scales_omegas_once() -> None:
    guide = guidance.CascadeGuidance(guidance.GuidanceScales(1.0, 2.0, 4.0, 0.5, omega_scale=0.75))
    guide.switch_expert()
    guide.switch_expert()
    assert (guide.scales.video, guide.scales.image, guide.scales.text, guide.scales.plan) == (0.75, 1.5, 3.0, 0.375)
    guide.reset()
    assert guide.scales.text == 4.0 and not guide.switched


def test_apg_projection_cases() -> None:
    ref = torch.zeros(2, 3, 4, dtype=F64)
    ref[:, 0] = 1.0
    ortho = torch.zeros_like(ref)
    ortho[:, 1] = 2.0
    # no parallel component: APG leaves the delta alone whatever eta
    for eta in (0.0, 0.5, 1.0):
        torch.testing.assert_close(guidance.apg_update(ortho, ref, eta=eta), ortho)
    # all parallel: only eta of it survives
    torch.testing.assert_close(guidance.apg_update(3 * ref, ref, eta=0.5), 1.5 * ref)
    # eta 1, no cap, no momentum: plain CFG
    mixed = ortho + 0.7 * ref
    torch.testing.assert_close(guidance.apg_update(mixed, ref + ortho, eta=1.0, norm_threshold=0.0), mixed)
    # the norm cap bounds each sample's delta
    big = 100 * ortho
    capped = guidance.apg_update(big, ref, norm_threshold=50.0)
    torch.testing.assert_close(capped.flatten(1).norm(dim=1), torch.full((2,), 50.0, dtype=F64))
    assert guidance.APG().momentum == 0.0 and guidance.APG().eta == 0.5 and guidance.APG().norm_threshold == 50.0


def test_apg_rung_matches_diffusers_normalized_guidance() -> None:
    apg = guidance.APG(eta=0.5, momentum=-0.5, norm_threshold=3.0, deltas=("text",))
    guide = guidance.CascadeGuidance(guidance.GuidanceScales(0.0, 0.0, 4.0, 0.0), apg=apg)
    buf = diffusers_apg.MomentumBuffer(-0.5)
    for step in range(3):
        p = _ladder(10 + step)
        ours = guide(_counting(p)[0])
        ref = diffusers_apg.normalized_guidance(p["text"], p["base"], 4.0, buf, eta=0.5, norm_threshold=3.0)
        torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("call", [
    lambda: guidance.GuidanceScales(text=-1.0), lambda: guidance.GuidanceScales(omega_scale=0.0),
    lambda: guidance.APG(momentum=1.0), lambda: guidance.APG(deltas=("txt",)), lambda: guidance.APG(eta=float("nan")),
    lambda: guidance.CascadeGuidance(guidance.GuidanceScales()).combine({"base": torch.zeros(1, 2)}),
])
def test_guidance_bad_arguments(call) -> None:
    with pytest.raises(InputError):
        call()
