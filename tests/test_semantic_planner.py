"""Bernini's semantic planner (planners/semantic): block mask, reveal schedule, flow head, CFG, loss, backbones.

Spec bernini.md b.2-b.4, b.9 and d.16-d.22. Everything runs at toy size on the CPU, offline.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from core.errors import InputError
from planners.semantic import flow_head, maskgit
from planners.semantic.backbones import HFPlannerBackbone, TinyBackboneConfig
from planners.semantic.layout import (
    PlannerSequence,
    TokenType,
    VisualTokens,
    additive_mask,
    block_attention_mask,
)
from planners.semantic.planner import (
    PlanExample,
    PlanRequest,
    SemanticPlanner,
    SemanticPlannerConfig,
    builtin_planner,
)

T, P, I, O, PAD = (int(TokenType.TEXT), int(TokenType.PLANNING), int(TokenType.INPUT), int(TokenType.TARGET),
                   int(TokenType.PAD))
TOKEN_DIM = 16


def tiny_planner(**overrides) -> SemanticPlanner:
    torch.manual_seed(0)
    cfg = {"token_dim": TOKEN_DIM, "plan_grid": (1, 2, 3), "head_width": 32, "head_depth": 1, "cot": False,
               "max_cot_tokens": 3, "planning_steps": 3, "denoising_steps": 2, "txt_cfg": 2.0, "img_cfg": 1.5}
    cfg.update(overrides)
    return builtin_planner(SemanticPlannerConfig(**cfg), TinyBackboneConfig(hidden_size=32, num_layers=2, num_heads=2))


def source(grid=(2, 2, 2), seed=1) -> VisualTokens:
    return VisualTokens(torch.randn(*grid, TOKEN_DIM, generator=torch.Generator().manual_seed(seed)))


# ---- the block mask (b.2, d.19) ------------------------------------------------------------------------


def test_block_mask_truth_table():
    # t t i i p p o o o: the planning run shares segment 4, the target run segment 9
    tt = torch.tensor([T, T, I, I, P, P, O, O, O])
    seg = torch.tensor([0, 1, 2, 3, 4, 4, 9, 9, 9])
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0, 0],   # p sees context causally and its own run both ways, never o
        [1, 1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 1, 1, 1],   # o sees t / i keys before it and its whole run; p keys are not t / i
        [1, 1, 1, 1, 0, 0, 1, 1, 1],
        [1, 1, 1, 1, 0, 0, 1, 1, 1],
    ], dtype=torch.bool)
    assert torch.equal(block_attention_mask(tt, seg)[0], expected)


def test_block_mask_later_text_and_second_target_do_not_see_a_target():
    tt = torch.tensor([T, O, O, T, O, O, PAD])
    seg = torch.tensor([0, 5, 5, 3, 7, 7, 6])
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 0, 0, 1, 0, 0, 0],   # text after a target block does not see it
        [1, 0, 0, 1, 1, 1, 0],   # another target block does not see the first one
        [1, 0, 0, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 1],   # padding: seen by nobody, sees itself only
    ], dtype=torch.bool)
    allowed = block_attention_mask(tt[None], seg[None])
    assert torch.equal(allowed[0], expected)
    add = additive_mask(allowed, torch.float32)
    assert add.shape == (1, 1, 7, 7)
    assert torch.equal(add[0, 0] == 0, expected)
    assert float(add.min()) == torch.finfo(torch.float32).min


def test_block_mask_rejects_bad_roles():
    with pytest.raises(InputError, match="token_type"):
        block_attention_mask(torch.tensor([0, 7]), torch.tensor([0, 1]))
    with pytest.raises(InputError, match="segment_ids"):
        block_attention_mask(torch.tensor([0, 3]), torch.tensor([0]))


def test_sequence_positions_follow_mrope_rule():
    seq = PlannerSequence()
    seq.add_text(torch.zeros(3, 4))
    seq.add_visual(torch.zeros(12, 4), (2, 2, 3), TokenType.TARGET, t_step=2)
    seq.add_text(torch.zeros(1, 4))
    out = seq.tensors()
    pos = out["position_ids"]
    assert pos[:, :3].tolist() == [[0, 1, 2]] * 3
    block = pos[:, 3:15].reshape(3, 2, 2, 3)
    assert block[0, :, 0, 0].tolist() == [3, 5]          # t = base + k * t_step
    assert block[1, 0, :, 0].tolist() == [3, 4]          # h = base + row
    assert block[2, 0, 0, :].tolist() == [3, 4, 5]       # w = base + col
    assert pos[:, 15].tolist() == [6, 6, 6]              # text resumes at the block's max + 1
    assert out["target_index"].tolist() == list(range(3, 15))
    assert out["segment_ids"][3:15].unique().tolist() == [1]  # visual_id 0 + 1, shared by the run
    assert out["token_type"].tolist() == [T] * 3 + [O] * 12 + [T]


def test_interleaved_mrope_deals_fast_frequencies_to_every_axis():
    from planners.semantic.backbones import TinyPlannerBackbone, mrope_axes, mrope_tables

    assert mrope_axes((8, 12, 12)).tolist() == [0] * 8 + [1] * 12 + [2] * 12  # Qwen2.5-VL: contiguous runs
    axes = mrope_axes((12, 10, 10), "interleaved")  # Qwen3-VL: t, h, w, t, h, w, ..., the tail to time
    assert axes[:6].tolist() == [0, 1, 2, 0, 1, 2] and axes[-2:].tolist() == [0, 0]
    assert [int((axes == a).sum()) for a in range(3)] == [12, 10, 10]
    assert TinyBackboneConfig(hidden_size=128, num_heads=2, mrope_layout="interleaved").mrope_section == (12, 10, 10)
    assert TinyBackboneConfig(hidden_size=128, num_heads=2).mrope_section == (8, 12, 12)  # the shipped weights' layout

    def fastest_turn(layout: str, axis: int) -> float:
        """The largest angle (rad) any rotary frequency turns between grid positions 0 and 1 along ``axis``."""
        c = TinyBackboneConfig(hidden_size=128, num_heads=2, mrope_layout=layout)
        pos = torch.full((3, 1, 2), 50)
        pos[axis, 0, 1] += 1
        cos, sin = mrope_tables(pos, 64, c.rope_theta, c.mrope_section, c.mrope_layout)
        turn = torch.atan2(sin[0, 0, 1] * cos[0, 0, 0] - cos[0, 0, 1] * sin[0, 0, 0],
                           cos[0, 0, 1] * cos[0, 0, 0] + sin[0, 0, 1] * sin[0, 0, 0])
        return float(turn.abs().max())

    # contiguous runs: width's fastest frequency turns 0.003 rad a step, height's 0.1: neighbours look alike
    assert [round(fastest_turn("sections", a), 4) for a in range(3)] == [1.0, 0.1, 0.0032]
    assert [round(fastest_turn("interleaved", a), 2) for a in range(3)] == [1.0, 0.75, 0.56]
    # text carries one position on all axes, so both layouts encode a text-only sequence identically
    text_pos = torch.arange(6).expand(3, 1, 6)
    a = mrope_tables(text_pos, 64, 1e4, (8, 12, 12), "sections")
    b = mrope_tables(text_pos, 64, 1e4, (12, 10, 10), "interleaved")
    assert torch.allclose(a[0], b[0]) and torch.allclose(a[1], b[1])
    with pytest.raises(InputError, match="mrope_layout"):
        TinyBackboneConfig(mrope_layout="spiral")
    with pytest.raises(InputError, match="mrope_section"):
        TinyBackboneConfig(hidden_size=128, num_heads=2, mrope_layout="interleaved", mrope_section=(8, 12, 12))
    # a backbone saved before the field existed loads with the layout it was trained with
    bb = TinyPlannerBackbone(TinyBackboneConfig(hidden_size=32, num_layers=2, num_heads=2))
    assert bb.config.mrope_layout == "sections"


def test_planner_sequence_layout():
    planner = tiny_planner()
    req = PlanRequest(prompt="a red square", sources=[source()], task="v2v")
    rows = planner._mask_row(6)
    cond = planner._build(req, (1, 2, 3), target_rows=rows)
    no_text = planner._build(req, (1, 2, 3), text=False, target_rows=rows)
    uncond = planner._build(req, (1, 2, 3), text=False, visuals=False, target_rows=rows)
    tt = cond["token_type"]
    assert int((tt == I).sum()) == 8 and int((tt == O).sum()) == 6
    assert cond["target_index"].tolist() == list(range(len(tt) - 7, len(tt) - 1))  # just before <|vision_end|>
    assert int((no_text["token_type"] == I).sum()) == 8 and len(no_text["token_type"]) == len(tt) - len("a red square")
    assert int((uncond["token_type"] == I).sum()) == 0


# ---- the reveal schedule (b.4, d.20) ------------------------------------------------------------------


def spec_counts(n: int, s_total: int) -> list[int]:
    counts, remaining = [], n
    for s in range(s_total):
        ratio = math.cos(math.pi / 2 * (s + 1) / s_total)
        keep = 0 if s == s_total - 1 else max(1, min(remaining - 1, math.floor(n * ratio)))
        counts.append(remaining - keep)
        remaining = keep
    return counts


@pytest.mark.parametrize("n,steps", [(300, 25), (300, 50), (32, 25), (6, 3), (10, 10), (1, 1), (7, 1)])
def test_reveal_counts_follow_cosine_rule(n, steps):
    counts = maskgit.reveal_counts(n, steps)
    assert counts == spec_counts(n, steps)
    assert len(counts) == steps and sum(counts) == n and min(counts) >= 1


def test_reveal_sets_partition_and_too_many_steps(caplog):
    order = maskgit.reveal_order(20, torch.Generator().manual_seed(3))
    sets = maskgit.reveal_sets(order, 6)
    assert len(sets) == 6 and all(len(s) >= 1 for s in sets)
    assert sorted(torch.cat(sets).tolist()) == list(range(20))
    with caplog.at_level(logging.WARNING):
        assert maskgit.reveal_counts(4, 25) == [1, 1, 1, 1]
    assert "using 4 steps" in caplog.text
    with pytest.raises(InputError, match="steps"):
        maskgit.reveal_counts(4, 0)


# ---- the flow head, its schedule and CFG (b.3-b.4, d.16-d.17) ------------------------------------------


def test_head_sigmas_and_zero_init():
    s = flow_head.sampling_sigmas(3)
    assert s.shape == (4,) and float(s[0]) == 1.0 and float(s[-1]) == 0.0 and bool((s.diff() < 0).all())
    assert flow_head.sampling_sigmas(1).tolist() == [1.0, 0.0]
    head = flow_head.SimpleMLPAdaLN(8, 12, 16, 2)
    v = head(torch.randn(5, 8), torch.rand(5) * 1000, torch.randn(5, 12))
    assert torch.equal(v, torch.zeros(5, 8))


def test_three_stream_cfg_limits():
    g = torch.Generator().manual_seed(0)
    v_c, v_ic, v_u = (torch.randn(4, 8, generator=g) for _ in range(3))
    assert torch.allclose(flow_head.three_stream_cfg(v_c, v_ic, v_u, 1.0, 1.0), v_c, atol=1e-6)
    assert torch.equal(flow_head.three_stream_cfg(v_c, v_ic, v_u, 0.0, 0.0), v_u)
    assert flow_head.needed_streams(1.0, 1.0, imgcond_is_cond=False) == (False, False)
    assert flow_head.needed_streams(1.4, 1.2, imgcond_is_cond=True) == (False, True)
    assert flow_head.needed_streams(1.4, 1.2, imgcond_is_cond=False) == (True, True)


def test_sampler_with_unit_scales_is_the_conditional_sampler():
    torch.manual_seed(0)
    head = flow_head.SimpleMLPAdaLN(8, 12, 16, 1)
    for p in head.parameters():  # a non-trivial head (the zero init would make every stream agree)
        torch.nn.init.normal_(p, std=0.3)
    z_c, z_ic, z_u = torch.randn(3, 5, 12).unbind(0)
    kw = {"token_dim": 8, "steps": 3, "txt_scale": 1.0, "img_scale": 1.0}
    three = flow_head.sample_tokens(head, z_c, z_ic, z_u, generator=torch.Generator().manual_seed(1), **kw)
    only_cond = flow_head.sample_tokens(head, z_c, None, None, generator=torch.Generator().manual_seed(1), **kw)
    assert torch.allclose(three, only_cond, atol=1e-5)
    guided = flow_head.sample_tokens(head, z_c, z_ic, z_u, generator=torch.Generator().manual_seed(1),
                                     **{**kw, "txt_scale": 2.0, "img_scale": 1.5})
    assert not torch.allclose(guided, only_cond, atol=1e-3)


# ---- the MaskGIT loop on the builtin backbone (b.4, d.22) ---------------------------------------------


def test_plan_writes_every_position_once_into_every_stream():
    planner = tiny_planner().eval()
    req = PlanRequest(prompt="a red square moves left", sources=[source()], task="v2v")
    n = 6
    mask_row = planner._mask_row(n)[0]
    rows = planner._mask_row(n)
    streams = [planner._build(req, (1, 2, 3), target_rows=rows),
               planner._build(req, (1, 2, 3), text=False, target_rows=rows),
               planner._build(req, (1, 2, 3), text=False, visuals=False, target_rows=rows)]
    seen: list[torch.Tensor] = []
    forward = planner.backbone.forward

    def recording_forward(inputs_embeds, attention_mask, position_ids):
        seen.append(inputs_embeds.clone())
        return forward(inputs_embeds, attention_mask, position_ids)

    planner.backbone.forward = recording_forward
    steps: list[torch.Tensor] = []
    out = planner.plan(req, generator=torch.Generator().manual_seed(0),
                       callback=lambda step, info: steps.append(info["positions"].clone()))
    assert len(seen) == 3 == len(steps) and seen[0].shape[0] == 3  # one batched forward of 3 streams per step
    written = torch.cat(steps)
    assert sorted(written.tolist()) == list(range(n)) and torch.equal(written, out.order)
    flat = out.tokens.reshape(n, TOKEN_DIM)
    for k, embeds in enumerate(seen):  # before step k exactly the earlier steps' tokens are in, in all streams
        done = torch.cat(steps[:k]) if k else torch.zeros(0, dtype=torch.long)
        for b, s in enumerate(streams):
            target_rows = embeds[b, s["target_index"]]
            is_mask = (target_rows == mask_row).all(-1)
            assert sorted((~is_mask).nonzero()[:, 0].tolist()) == sorted(done.tolist())
            assert torch.allclose(target_rows[done], planner.vit_in(flat[done]), atol=1e-6)


def test_plan_is_deterministic_for_a_generator():
    planner = tiny_planner().eval()
    for p in planner.head.final.parameters():  # a head that does not predict 0, so tokens depend on the state
        torch.nn.init.normal_(p, std=0.2)
    a = planner.plan("a blue circle", generator=torch.Generator().manual_seed(5))
    b = planner.plan("a blue circle", generator=torch.Generator().manual_seed(5))
    c = planner.plan("a blue circle", generator=torch.Generator().manual_seed(6))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.order, b.order)
    assert not torch.equal(a.tokens, c.tokens)
    assert a.tokens.shape == (1, 2, 3, TOKEN_DIM) and a.reveal_counts == [1, 2, 3]
    assert bool(torch.isfinite(a.tokens).all())


def test_plan_with_cot_and_contexts_and_prompt_embeds():
    planner = tiny_planner(cot=True, context_dim=24, text_embed_dim=20)
    out = planner.plan(prompt_embeds=torch.randn(5, 20), generator=0)
    assert out.cot_text is not None and out.contexts is not None
    with_t, without_t, unc = out.contexts
    assert with_t.shape[-1] == 24 and with_t.shape[1] == without_t.shape[1] + 6
    assert unc.shape[1] < without_t.shape[1]
    forced = planner.plan(prompt_embeds=torch.randn(5, 20), generator=0, cot=False)
    assert forced.cot_text is None


# ---- the training objective (b.3) ----------------------------------------------------------------------


def test_masked_flow_loss_ignores_unmasked_targets():
    planner = tiny_planner()
    for p in planner.head.parameters():
        torch.nn.init.normal_(p, std=0.2)
    z = torch.randn(6, 32)
    y0 = torch.randn(6, TOKEN_DIM)
    mask = torch.tensor([True, False, True, False, False, True])
    base = planner.masked_flow_loss(z, y0, mask, torch.Generator().manual_seed(0))
    other = y0.clone()
    other[~mask] = torch.randn(3, TOKEN_DIM) * 100
    assert base.shape == (3,)
    assert torch.equal(planner.masked_flow_loss(z, other, mask, torch.Generator().manual_seed(0)), base)
    other[mask] += 1.0
    assert not torch.allclose(planner.masked_flow_loss(z, other, mask, torch.Generator().manual_seed(0)), base)


def test_loss_scores_masked_positions_and_cot():
    planner = tiny_planner(cot=True)
    target = torch.randn(1, 2, 3, TOKEN_DIM)
    mask = torch.tensor([[[True, False, True], [False, False, True]]])
    ex = PlanExample(PlanRequest(prompt="a red square", cot_text="red, left"), target, mask, dropout=False)
    ex2 = PlanExample(PlanRequest(prompt="edit", sources=[source()], task="v2v"), torch.randn(2, 2, 2, TOKEN_DIM))
    out = planner.loss([ex, ex2], generator=0)
    assert out.per_token.numel() == out.num_masked >= 3 + 1  # ex: its 3 masked; ex2: at least one
    assert out.cot is not None and torch.allclose(out.loss, out.plan + out.cot)
    out.loss.backward()
    assert planner.head.final.linear.weight.grad is not None
    assert planner.backbone.embed.weight.grad is not None and planner.mask_tokens.grad is not None
    no_cot = planner.loss(PlanExample(PlanRequest(prompt="x"), target, mask, dropout=False), generator=0)
    assert no_cot.cot is None and no_cot.num_masked == 3


# ---- local context [PROPOSED] ------------------------------------------------------------------------------


def test_local_context_starts_as_the_planner_without_it():
    plain = tiny_planner().eval()
    local = tiny_planner(local_context=3).eval()
    missing, unexpected = local.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing and all(k.startswith("local.") for k in missing)
    for p in (plain.head.final.parameters(), local.head.final.parameters()):
        for w in p:
            torch.nn.init.constant_(w, 0.1)
    a = plain.plan("a red square", generator=torch.Generator().manual_seed(3))
    b = local.plan("a red square", generator=torch.Generator().manual_seed(3))
    assert torch.allclose(a.tokens, b.tokens, atol=1e-6)
    edit = {"sources": [source((1, 2, 3))], "task": "v2v"}  # a source with the target's grid reaches the module
    a = plain.plan("make it blue", generator=torch.Generator().manual_seed(3), **edit)
    b = local.plan("make it blue", generator=torch.Generator().manual_seed(3), **edit)
    assert torch.allclose(a.tokens, b.tokens, atol=1e-6)
    target = torch.randn(1, 2, 3, TOKEN_DIM)
    ex = PlanExample(PlanRequest(prompt="x"), target, dropout=False)
    assert torch.allclose(plain.loss(ex, generator=0).loss, local.loss(ex, generator=0).loss, atol=1e-6)


def test_local_context_reaches_neighbours_only_and_trains():
    planner = tiny_planner(local_context=3)
    torch.nn.init.normal_(planner.local.outer.weight, std=0.1)
    grid = (3, 5, 5)
    rows = torch.randn(75, 32)
    src = torch.randn(75, 32)
    base = planner.local(rows, grid, src)
    for moved in (rows, src):
        changed = moved.clone()
        changed[0] += 5.0  # position (0, 0, 0): two 3x3x3 layers reach (t, y, x) with every coordinate <= 2
        args = (changed, grid, src) if moved is rows else (rows, grid, changed)
        diff = (planner.local(*args) - base).abs().sum(-1).reshape(grid)
        assert float(diff[:, :3, :3].sum()) > 0 and float(diff[:, 3:, :].sum()) == 0 and float(diff[:, :, 3:].sum()) == 0
    # streams that drop the sources (CFG's uncond) see none
    seen, blind = planner._stream_locals(rows, grid, src, [True, False])
    assert torch.equal(seen, base) and torch.equal(blind, planner.local(rows, grid, None))
    for p in planner.head.final.parameters():  # a zero-initialised head passes no gradient to its condition
        torch.nn.init.normal_(p, std=0.2)
    ex = PlanExample(PlanRequest(prompt="x"), torch.randn(1, 2, 3, TOKEN_DIM), dropout=False)
    planner.loss(ex, generator=0).loss.backward()
    assert planner.local.outer.weight.grad is not None and float(planner.local.outer.weight.grad.abs().sum()) > 0


def test_init_weights_fills_the_local_context_and_refuses_other_sizes(tmp_path):
    from training.planner import init_weights

    tiny_planner().save_pretrained(tmp_path / "plain")
    local = tiny_planner(local_context=3)
    init_weights(local, str(tmp_path / "plain"))
    assert torch.equal(local.mask_tokens, SemanticPlanner.from_pretrained(tmp_path / "plain").mask_tokens)
    with pytest.raises(InputError, match="--init"):
        init_weights(tiny_planner(head_width=48), str(tmp_path / "plain"))


def test_local_context_saves_and_reloads(tmp_path):
    planner = tiny_planner(local_context=3).eval()
    torch.nn.init.normal_(planner.local.outer.weight, std=0.1)
    for p in planner.head.final.parameters():
        torch.nn.init.normal_(p, std=0.2)
    planner.save_pretrained(tmp_path / "planner")
    again = SemanticPlanner.from_pretrained(tmp_path / "planner")
    a = planner.plan("a red square", generator=torch.Generator().manual_seed(2))
    b = again.plan("a red square", generator=torch.Generator().manual_seed(2))
    assert torch.equal(a.tokens, b.tokens) and again.config.local_context == 3
    for bad in (2, -1, 1.5):
        with pytest.raises(InputError, match="local_context"):
            SemanticPlannerConfig(local_context=bad)


# ---- attribute supervision [PROPOSED] -----------------------------------------------------------------------


def test_attribute_loss_scores_labelled_masked_tokens_and_leaves_the_plan_alone(tmp_path):
    plain = tiny_planner().eval()
    attr = tiny_planner(attribute_classes=(3, 2), attribute_weight=0.5).eval()
    missing, unexpected = attr.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing and all(k.startswith("attribute_head.") for k in missing)
    for p in list(plain.head.final.parameters()) + list(attr.head.final.parameters()):
        torch.nn.init.constant_(p, 0.1)
    # training only: the plan is the flow head's, with or without the read-out
    a = plain.plan("a red square", generator=torch.Generator().manual_seed(3))
    b = attr.plan("a red square", generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.tokens, b.tokens)
    target = torch.randn(1, 2, 3, TOKEN_DIM)
    mask = torch.tensor([[[True, True, False], [True, True, True]]])
    labels = torch.full((1, 2, 3, 2), -100, dtype=torch.long)
    labels[0, 0, 0] = torch.tensor([2, 1])  # a labelled masked token
    labels[0, 0, 2] = torch.tensor([0, 0])  # labelled but given: not scored
    ex = PlanExample(PlanRequest(prompt="x"), target, mask, dropout=False, token_classes=labels)
    out = attr.loss(ex, generator=0)
    z = torch.randn(6, 32)
    logits = attr.attribute_head(z).split([3, 2], -1)
    want = (torch.nn.functional.cross_entropy(logits[0][:1], torch.tensor([2]))
            + torch.nn.functional.cross_entropy(logits[1][:1], torch.tensor([1])))
    assert torch.allclose(attr.attribute_loss(z, labels.reshape(6, 2), mask.reshape(-1)), want)
    assert out.attributes is not None and float(out.attributes.detach()) > 0
    assert torch.allclose(out.loss, out.plan + 0.5 * out.attributes)
    assert torch.allclose(out.plan, plain.loss(PlanExample(PlanRequest(prompt="x"), target, mask, dropout=False), generator=0).plan)
    out.loss.backward()
    assert float(attr.attribute_head.weight.grad.abs().sum()) > 0 and attr.backbone.embed.weight.grad is not None
    none = PlanExample(PlanRequest(prompt="x"), target, mask, dropout=False, token_classes=torch.full((1, 2, 3, 2), -100))
    assert float(attr.loss(none, generator=0).attributes.detach()) == 0.0  # no labelled token: nothing to read
    with pytest.raises(InputError, match="token_classes"):
        attr.loss(PlanExample(PlanRequest(prompt="x"), target, mask, dropout=False), generator=0)
    attr.save_pretrained(tmp_path / "attr")
    again = SemanticPlanner.from_pretrained(tmp_path / "attr")
    assert again.config.attribute_classes == (3, 2) and torch.equal(again.attribute_head.weight, attr.attribute_head.weight)
    for bad in ((1,), (3, "x"), (0, 2)):
        with pytest.raises(InputError, match="attribute_classes"):
            SemanticPlannerConfig(attribute_classes=bad)
    with pytest.raises(InputError, match="attribute_weight"):
        SemanticPlannerConfig(attribute_weight=-1)


def test_regression_loss_scores_masked_tokens_only_and_leaves_the_plan_alone(tmp_path):
    plain = tiny_planner().eval()
    reg = tiny_planner(regression_weight=0.5).eval()
    missing, unexpected = reg.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing and all(k.startswith("regression_head.") for k in missing)
    a = plain.plan("a red square", generator=torch.Generator().manual_seed(3))
    b = reg.plan("a red square", generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.tokens, b.tokens)  # training only
    target = torch.randn(1, 2, 3, TOKEN_DIM)
    mask = torch.tensor([[[True, True, False], [True, False, True]]])
    out = reg.loss(PlanExample(PlanRequest(prompt="x"), target, mask, dropout=False), generator=0)
    assert out.regression is not None and torch.allclose(out.loss, out.plan + 0.5 * out.regression)
    changed = target.clone()
    changed[0, 0, 2] += 5.0  # a given token's own target is not scored (it still enters as input)
    changed_in = reg.loss(PlanExample(PlanRequest(prompt="x"), changed, mask, dropout=False), generator=0)
    moved = target.clone()
    moved[0, 0, 0] += 5.0  # a masked token's target is
    moved_out = reg.loss(PlanExample(PlanRequest(prompt="x"), moved, mask, dropout=False), generator=0)
    assert float(moved_out.regression.detach()) > float(out.regression.detach()) + 1.0
    assert abs(float(changed_in.regression.detach()) - float(out.regression.detach())) < float(moved_out.regression.detach()) - float(out.regression.detach())
    out.loss.backward()
    assert float(reg.regression_head.weight.grad.abs().sum()) > 0
    reg.save_pretrained(tmp_path / "reg")
    again = SemanticPlanner.from_pretrained(tmp_path / "reg")
    assert again.config.regression_weight == 0.5 and torch.equal(again.regression_head.weight, reg.regression_head.weight)
    with pytest.raises(InputError, match="regression_weight"):
        SemanticPlannerConfig(regression_weight=-1)
    with pytest.raises(InputError, match="regression_weight"):
        SemanticPlannerConfig(regression_weight=1, head="codebook")


def test_position_mask_tokens_give_each_masked_place_its_own_row_and_start_from_the_shared_one(tmp_path):
    from training.planner import init_weights

    plain = tiny_planner().eval()
    with torch.no_grad():  # a live head (a fresh one is zero-initialised: no gradient reaches the conditions)
        for w in plain.head.parameters():
            w.normal_(0, 0.1, generator=torch.Generator().manual_seed(w.numel()))
    plain.save_pretrained(tmp_path / "plain")
    placed = tiny_planner(position_mask_tokens=True, num_mask_tokens=6).eval()
    init_weights(placed, str(tmp_path / "plain"))  # every row starts as the shared one: the same planner
    assert placed.mask_tokens.shape[1] == 6 and torch.equal(placed.mask_tokens[0, 5], plain.mask_tokens[0, 0])
    a = plain.plan("a red square", generator=torch.Generator().manual_seed(3))
    b = placed.plan("a red square", generator=torch.Generator().manual_seed(3))
    assert torch.allclose(a.tokens, b.tokens, atol=1e-5)
    target = torch.randn(1, 2, 3, TOKEN_DIM)
    out = placed.loss(PlanExample(PlanRequest(prompt="x"), target, dropout=False), generator=0)
    out.loss.backward()
    grads = placed.mask_tokens.grad[0]
    assert float(grads.abs().sum()) > 0 and not torch.allclose(grads[0], grads[1])  # each row learns its own place
    with torch.no_grad():
        placed.mask_tokens[0, 4] += 1.0  # a row reaches its own place only
    c = placed.plan("a red square", generator=torch.Generator().manual_seed(3))
    assert not torch.allclose(b.tokens, c.tokens)
    placed.save_pretrained(tmp_path / "placed")
    again = SemanticPlanner.from_pretrained(tmp_path / "placed")
    assert again.config.position_mask_tokens and torch.equal(again.mask_tokens, placed.mask_tokens)
    with pytest.raises(InputError, match="grid"):  # more target places than rows
        placed.plan("a red square", grid=(2, 2, 3), generator=torch.Generator().manual_seed(3))
    with pytest.raises(InputError, match="num_mask_tokens"):
        SemanticPlannerConfig(plan_grid=(1, 2, 3), position_mask_tokens=True, num_mask_tokens=5)
    with pytest.raises(InputError, match="position_mask_tokens"):
        SemanticPlannerConfig(position_mask_tokens="yes")


def test_full_mask_prob_masks_every_target_token():
    target = torch.randn(2, 2, 3, TOKEN_DIM)
    ex = [PlanExample(PlanRequest(prompt="x"), target, dropout=False) for _ in range(4)]
    assert tiny_planner(full_mask_prob=1.0).loss(ex, generator=0).num_masked == 4 * 12
    spec = tiny_planner().loss(ex, generator=0)  # off: the spec's ratio range, its random draws unchanged
    assert 4 * 6 <= spec.num_masked < 4 * 12
    assert torch.equal(tiny_planner(full_mask_prob=0.0).loss(ex, generator=0).per_token, spec.per_token)
    for bad in (-0.1, 1.5):
        with pytest.raises(InputError, match="full_mask_prob"):
            SemanticPlannerConfig(full_mask_prob=bad)


def test_token_labels_read_the_vlm_on_the_target_tokens():
    from training.bernini_data import load_pools
    from training.planner import attribute_groups, token_labels

    pools = load_pools("test", 0, 1, tasks=("t2v",), workers=1)
    labels = token_labels(pools)["t2v"]
    assert labels.shape == (*pools["t2v"].plan.shape[:4], 3)
    colours, shapes, objectness = attribute_groups()
    on = labels[..., 2] == 1
    assert on.any() and (~on).any() and objectness == 2  # a clip shows objects on some tokens, background on others
    assert (labels[on, 0] >= 0).all() and (labels[on, 0] < colours).all() and (labels[on, 1] < shapes).all()
    assert (labels[~on, :2] == -100).all() and (labels[~on, 2] == 0).all()


# ---- persistence and arguments ---------------------------------------------------------------------------


def test_save_reload_gives_identical_plans(tmp_path):
    planner = tiny_planner(context_dim=8).eval()
    for p in planner.head.final.parameters():
        torch.nn.init.normal_(p, std=0.2)
    planner.save_pretrained(tmp_path / "planner")
    again = SemanticPlanner.from_pretrained(tmp_path / "planner")
    kw = {"sources": [source()], "task": "v2v"}
    a = planner.plan("a red square", generator=torch.Generator().manual_seed(2), **kw)
    b = again.plan("a red square", generator=torch.Generator().manual_seed(2), **kw)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.contexts[0], b.contexts[0])
    assert again.config == planner.config


def test_bad_arguments_name_the_argument(tmp_path):
    planner = tiny_planner()
    cases = [
        ({"grid": (0, 2, 2)}, "grid"), ({"steps": 0}, "steps"), ({"denoising_steps": 0}, "denoising_steps"),
        ({"txt_cfg": -1.0}, "txt_cfg"), ({"img_cfg": float("nan")}, "img_cfg"), ({"generator": "seed"}, "generator"),
        ({"callback": 5}, "callback"), ({"max_cot_tokens": -1}, "max_cot_tokens"), ({"task": "nope"}, "task"),
    ]
    for kwargs, name in cases:
        with pytest.raises(InputError, match=name):
            planner.plan("x", **kwargs)
    with pytest.raises(InputError, match="prompt"):
        planner.plan()
    with pytest.raises(InputError, match="sources"):
        planner.plan("x", sources=[VisualTokens(torch.randn(1, 2, 2, TOKEN_DIM + 1))])
    with pytest.raises(InputError, match="prompt_embeds"):
        planner.plan(prompt_embeds=torch.randn(3, 7))
    with pytest.raises(InputError, match=r"batch\[0\].target"):
        planner.loss(PlanExample(PlanRequest(prompt="x"), torch.randn(1, 2, 2, TOKEN_DIM + 1)))
    with pytest.raises(InputError, match="target_mask"):
        planner.loss(PlanExample(PlanRequest(prompt="x"), torch.randn(1, 2, 2, TOKEN_DIM), torch.zeros(1, 2, 2, dtype=torch.bool)))
    with pytest.raises(InputError, match="token_dim"):
        SemanticPlannerConfig(token_dim=0)
    with pytest.raises(InputError, match="imgcond_without_sources"):
        SemanticPlannerConfig(imgcond_without_sources="maybe")
    with pytest.raises(InputError, match="temperature"):
        SemanticPlannerConfig(temperature=-0.5)
    with pytest.raises(InputError, match="directory"):
        SemanticPlanner.from_pretrained(tmp_path)


# ---- the transformers adapter on a tiny random Qwen2.5-VL --------------------------------------------------


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    from tiny_vlms import build_tiny_qwen2_5_vl
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("semantic") / "qwen2.5-vl")


def test_hf_backbone_honours_the_block_mask(tiny_qwen):
    backbone = HFPlannerBackbone.from_pretrained(tiny_qwen, device="cpu", dtype="float32")
    torch.manual_seed(0)
    planner = SemanticPlanner(SemanticPlannerConfig(token_dim=backbone.hidden_size, plan_grid=(1, 2, 2), head_width=32,
                                                    head_depth=1, cot=False), backbone)
    req = PlanRequest(prompt="a red circle")
    rows = torch.randn(4, backbone.hidden_size)
    a = planner._build(req, (1, 2, 2), target_rows=rows)
    changed = rows.clone()
    changed[-1] += 1.0
    b = planner._build(req, (1, 2, 2), target_rows=changed)
    _, sa = planner._forward([a])
    _, sb = planner._forward([b])
    assert len(sa) == backbone.model.config.text_config.num_hidden_layers + 1
    first = int(a["target_index"][0])
    assert torch.equal(sa[-2][0, :first], sb[-2][0, :first])        # the context never sees the target
    assert not torch.allclose(sa[-2][0, first], sb[-2][0, first])  # the first target sees the last one
    assert torch.equal(sa[-2][0, -1], sb[-2][0, -1])               # the closing text token does not see it


def test_hf_plan_end_to_end_and_reload(tiny_qwen, tmp_path):
    backbone = HFPlannerBackbone.from_pretrained(tiny_qwen, device="cpu", dtype="float32")
    image = np.random.default_rng(0).integers(0, 255, (56, 56, 3), dtype=np.uint8)
    src = backbone.encode_visual(image)
    assert src.grid == (1, 2, 2) and src.tokens.shape[-1] == backbone.hidden_size
    torch.manual_seed(0)
    cfg = SemanticPlannerConfig(token_dim=backbone.hidden_size, plan_grid=(2, 2, 2), head_width=32, head_depth=1,
                                max_cot_tokens=2, planning_steps=2, denoising_steps=1, txt_cfg=1.4, img_cfg=1.2,
                                context_dim=16)
    planner = SemanticPlanner(cfg, backbone).eval()
    for p in planner.head.final.parameters():
        torch.nn.init.normal_(p, std=0.2)
    req = PlanRequest(prompt="a red circle", sources=[src], task="v2v")
    out = planner.plan(req, generator=torch.Generator().manual_seed(0))
    assert out.tokens.shape == (2, 2, 2, backbone.hidden_size) and bool(torch.isfinite(out.tokens).all())
    assert sorted(out.order.tolist()) == list(range(8)) and isinstance(out.cot_text, str)
    loss = planner.loss(PlanExample(req, out.tokens, dropout=False), generator=0)
    assert bool(torch.isfinite(loss.loss))
    planner.save_pretrained(tmp_path / "hf_planner")
    again = SemanticPlanner.from_pretrained(tmp_path / "hf_planner", device="cpu", dtype="float32")
    assert isinstance(again.backbone, HFPlannerBackbone)
    out2 = again.plan(req, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out.tokens, out2.tokens) and out.cot_text == out2.cot_text


def test_target_token_count_worked_example():
    from planners.semantic.layout import target_grid, target_token_count

    assert target_grid(81, 480, 832) == (5, 6, 10)  # the patch grid (5, 12, 20) after the 2x2 merge
    assert target_token_count(81, 480, 832) == 300
    assert target_grid(17, 20, 20) == (1, 2, 2)      # tiny frames are scaled up to min_pixels (56 x 56)
    assert target_grid(33, 2000, 2000)[1:] == (8, 8)  # large ones down to max_pixels (224 x 224)
    with pytest.raises(InputError, match="height"):
        target_grid(17, 10, 2800)
    with pytest.raises(InputError, match="num_frames"):
        target_grid(1, 64, 64)
