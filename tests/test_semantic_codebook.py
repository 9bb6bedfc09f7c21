"""The discrete (codebook) plan head of Bernini's semantic planner [PROPOSED]: k-means codebook, quantisation,
MaskGIT's confidence loop, CFG on logits, the cross-entropy loss, persistence and config errors. Toy size, CPU."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

from core.errors import InputError
from planners.semantic import codebook as cb
from planners.semantic import flow_head, maskgit
from planners.semantic.backbones import TinyBackboneConfig
from planners.semantic.layout import VisualTokens
from planners.semantic.planner import (
    PlanExample,
    PlanRequest,
    SemanticPlanner,
    SemanticPlannerConfig,
    builtin_planner,
)

TOKEN_DIM = 16
GRID = (1, 2, 4)
K = 8


def tiny_codebook_planner(**overrides) -> SemanticPlanner:
    """A tiny codebook planner with a fitted codebook and a classifier that does not predict uniform logits."""
    torch.manual_seed(0)
    cfg = {"token_dim": TOKEN_DIM, "plan_grid": GRID, "head_width": 32, "head_depth": 1, "cot": False,
           "planning_steps": 3, "txt_cfg": 2.0, "img_cfg": 1.5, "head": "codebook", "codebook_size": K}
    cfg.update(overrides)
    planner = builtin_planner(SemanticPlannerConfig(**cfg), TinyBackboneConfig(hidden_size=32, num_layers=2, num_heads=2))
    data = torch.randn(200, TOKEN_DIM, generator=torch.Generator().manual_seed(1))
    planner.set_codebook(cb.fit_codebook(data, cfg["codebook_size"], iters=5, generator=torch.Generator().manual_seed(0)))
    for p in planner.head.classifier.parameters():
        torch.nn.init.normal_(p, std=0.5)
    return planner.eval()


def source(grid=(2, 2, 2), seed=1) -> VisualTokens:
    return VisualTokens(torch.randn(*grid, TOKEN_DIM, generator=torch.Generator().manual_seed(seed)))


# ---- k-means and quantisation ----------------------------------------------------------------------------


def separated_clusters(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(5, 8, generator=g) * 20
    labels = torch.arange(5).repeat_interleave(60)
    x = centres[labels] + 0.1 * torch.randn(300, 8, generator=g)
    perm = torch.randperm(300, generator=g)
    return centres, x[perm], labels[perm]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kmeans_recovers_well_separated_clusters(seed):
    centres, x, labels = separated_clusters(seed)
    book = cb.fit_codebook(x, 5, iters=20, generator=torch.Generator().manual_seed(seed), chunk_size=64)
    assert book.shape == (5, 8) and book.dtype == torch.float32
    match = cb.quantize(centres, book)  # every true centre has its own code, and that code sits on it
    assert sorted(match.tolist()) == list(range(5))
    assert torch.allclose(book[match], centres, atol=0.1)
    assert torch.equal(cb.quantize(x, book), match[labels])
    again = cb.fit_codebook(x, 5, iters=20, generator=torch.Generator().manual_seed(seed), chunk_size=64)
    assert torch.equal(book, again)  # seeded
    stats = cb.codebook_stats(x, book)
    assert stats["cosine"] > 0.99 and stats["used"] == 1.0 and stats["rel_mse"] < 1e-3
    assert abs(stats["perplexity"] - 5) < 1e-3


def test_kmeans_random_init_is_seeded_and_improves_on_its_seeds():
    # random seeding can put two seeds in one cluster (a local minimum Lloyd cannot leave), which is why
    # k-means++ is the default; it still only ever lowers the error of its seeds
    _, x, _ = separated_clusters(0)
    seeds = x[torch.randperm(300, generator=torch.Generator().manual_seed(3))[:5]]
    book = cb.fit_codebook(x, 5, iters=20, generator=torch.Generator().manual_seed(3), init="random")
    assert torch.equal(book, cb.fit_codebook(x, 5, iters=20, generator=torch.Generator().manual_seed(3), init="random"))
    assert torch.equal(cb.fit_codebook(x, 5, iters=0, generator=torch.Generator().manual_seed(3), init="random"), seeds)
    assert cb.codebook_stats(x, book)["rel_mse"] <= cb.codebook_stats(x, seeds)["rel_mse"]


def test_quantize_is_nearest_code():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randn(3, 5, 7, TOKEN_DIM, generator=g)
    book = torch.randn(11, TOKEN_DIM, generator=g)
    brute = torch.cdist(tokens.reshape(-1, TOKEN_DIM), book).argmin(-1).reshape(3, 5, 7)
    assert torch.equal(cb.quantize(tokens, book), brute)
    assert torch.equal(cb.quantize(tokens, book, chunk_size=4), brute)   # chunking changes nothing
    assert torch.equal(cb.quantize(tokens.half(), book), cb.quantize(tokens.half().float(), book))
    assert torch.equal(cb.quantize(book, book), torch.arange(11))


def test_kmeans_and_quantize_errors():
    x = torch.randn(10, 4)
    for kwargs, name in (({"size": 11}, "size"), ({"size": 0}, "size"), ({"size": 3, "init": "bad"}, "init"),
                         ({"size": 3, "iters": -1}, "iters"), ({"size": 3, "chunk_size": 0}, "chunk_size")):
        with pytest.raises(InputError, match=name):
            cb.fit_codebook(x, **kwargs)
    with pytest.raises(InputError, match="tokens"):
        cb.fit_codebook(torch.randn(2, 5, 4), 3)
    with pytest.raises(InputError, match="tokens"):
        cb.quantize(torch.randn(3, 5), torch.randn(4, 4))
    with pytest.raises(InputError, match="codebook"):
        cb.quantize(torch.randn(3, 4), torch.randn(4))


# ---- the confidence loop and code sampling --------------------------------------------------------------------


@pytest.mark.parametrize("n,steps,choice", [(10, 4, 4.5), (7, 7, 0.0), (1, 1, 4.5), (20, 25, 1.0)])
def test_confidence_loop_writes_every_position_once_following_reveal_counts(n, steps, choice):
    logits_of = torch.randn(n, 6, generator=torch.Generator().manual_seed(0))
    masked = set(range(n))
    writes, seen_steps = [], []

    def predict_logits(step, positions):
        assert sorted(positions.tolist()) == sorted(masked)  # every still-masked position is predicted
        return logits_of[positions]

    def write(positions, codes):
        assert set(positions.tolist()) <= masked
        masked.difference_update(positions.tolist())
        writes.append((positions.clone(), codes.clone()))

    order, counts = maskgit.run_confidence_loop(n, steps, predict_logits, write, generator=torch.Generator().manual_seed(1),
                                                temperature=1.0, choice_temperature=choice,
                                                callback=lambda s, p, c: seen_steps.append(s))
    assert counts == maskgit.reveal_counts(n, steps) and [len(p) for p, _ in writes] == counts
    assert sorted(order.tolist()) == list(range(n)) and torch.equal(order, torch.cat([p for p, _ in writes]))
    assert seen_steps == list(range(len(counts))) and not masked


def test_confidence_loop_without_noise_reveals_the_most_confident_first():
    # row i puts probability ~ (i + 1) / 10 on its best code: position 9 is the most confident
    n = 10
    logits = torch.full((n, 4), -5.0)
    for i in range(n):
        logits[i, i % 4] = float(i) / 2
    order, _ = maskgit.run_confidence_loop(n, 3, lambda s, p: logits[p], lambda p, c: None, temperature=0.0,
                                           choice_temperature=0.0)
    assert order.tolist() == list(range(n - 1, -1, -1))
    with pytest.raises(InputError, match="predict_logits"):
        maskgit.run_confidence_loop(4, 2, lambda s, p: torch.zeros(1, 3), lambda p, c: None)
    with pytest.raises(InputError, match="choice_temperature"):
        maskgit.run_confidence_loop(4, 2, lambda s, p: logits[p], lambda p, c: None, choice_temperature=-1.0)


def test_sample_codes_and_noise_schedule():
    logits = torch.randn(50, 9, generator=torch.Generator().manual_seed(0))
    codes, logp = maskgit.sample_codes(logits, 0.0)
    assert torch.equal(codes, logits.argmax(-1))
    assert torch.allclose(logp, torch.log_softmax(logits, -1).max(-1).values)
    a, _ = maskgit.sample_codes(logits, 1.0, torch.Generator().manual_seed(4))
    b, _ = maskgit.sample_codes(logits, 1.0, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, codes)
    with pytest.raises(InputError, match="temperature"):
        maskgit.sample_codes(logits, -0.5)
    scales = [maskgit.choice_noise_scale(s, 4, 4.5) for s in range(4)]
    assert scales == pytest.approx([3.375, 2.25, 1.125, 0.0])  # linear, 0 at the last step


# ---- the planner with the codebook head --------------------------------------------------------------------


def test_cfg_on_logits_uses_the_flow_cascade_and_unit_scales_give_the_conditional_logits(monkeypatch):
    planner = tiny_codebook_planner()
    req = PlanRequest(prompt="a red square moves left", sources=[source()], task="v2v")
    n = GRID[0] * GRID[1] * GRID[2]
    rows = planner._mask_row(n)
    streams = [planner._build(req, GRID, target_rows=rows), planner._build(req, GRID, text=False, target_rows=rows),
               planner._build(req, GRID, text=False, visuals=False, target_rows=rows)]
    logits = []
    for s in streams:  # each stream on its own, before anything is revealed
        _, states = planner._forward([s])
        logits.append(planner.head(planner._conditions(states[-2][0, s["target_index"]])).float())
    recorded = []
    real = maskgit.sample_codes

    def recording(lg, temperature, generator):
        recorded.append(lg.clone())
        return real(lg, temperature, generator)

    monkeypatch.setattr(maskgit, "sample_codes", recording)
    planner.plan(req, txt_cfg=1.0, img_cfg=1.0, generator=0)
    assert torch.allclose(recorded[0], logits[0], atol=1e-5)  # scales 1: the conditional logits
    recorded.clear()
    planner.plan(req, txt_cfg=2.0, img_cfg=1.5, generator=0)
    assert torch.allclose(recorded[0], flow_head.three_stream_cfg(*logits, 2.0, 1.5), atol=1e-5)
    assert not torch.allclose(recorded[0], logits[0], atol=1e-3)


def test_codebook_plan_writes_code_vectors_into_every_stream_in_reveal_order():
    planner = tiny_codebook_planner()
    req = PlanRequest(prompt="a red square moves left", sources=[source()], task="v2v")
    n = GRID[0] * GRID[1] * GRID[2]
    mask_row = planner._mask_row(n)[0]
    rows = planner._mask_row(n)
    streams = [planner._build(req, GRID, target_rows=rows), planner._build(req, GRID, text=False, target_rows=rows),
               planner._build(req, GRID, text=False, visuals=False, target_rows=rows)]
    seen: list[torch.Tensor] = []
    forward = planner.backbone.forward

    def recording_forward(inputs_embeds, attention_mask, position_ids):
        seen.append(inputs_embeds.clone())
        return forward(inputs_embeds, attention_mask, position_ids)

    planner.backbone.forward = recording_forward
    infos: list[dict] = []
    out = planner.plan(req, generator=torch.Generator().manual_seed(0), callback=lambda step, info: infos.append(info))
    assert out.reveal_counts == maskgit.reveal_counts(n, 3) and [len(i["positions"]) for i in infos] == out.reveal_counts
    assert all(set(i) == {"positions", "tokens", "codes", "num_steps"} and i["num_steps"] == 3 for i in infos)
    written = torch.cat([i["positions"] for i in infos])
    assert torch.equal(written, out.order) and sorted(out.order.tolist()) == list(range(n))
    flat, codes = out.tokens.reshape(n, TOKEN_DIM), out.codes.reshape(n)
    assert out.codes.shape == GRID and torch.equal(flat, planner.codebook[codes])
    assert torch.equal(torch.cat([i["codes"] for i in infos]), codes[out.order])
    assert len(seen) == 3 and seen[0].shape[0] == 3
    for k, embeds in enumerate(seen):  # before step k exactly the earlier steps' codes are in, in all streams
        done = torch.cat([i["positions"] for i in infos[:k]]) if k else torch.zeros(0, dtype=torch.long)
        for b, s in enumerate(streams):
            target_rows = embeds[b, s["target_index"]]
            is_mask = (target_rows == mask_row).all(-1)
            assert sorted((~is_mask).nonzero()[:, 0].tolist()) == sorted(done.tolist())
            assert torch.allclose(target_rows[done], planner.vit_in(flat[done]), atol=1e-6)


def test_keep_source_keeps_likely_source_codes_and_reveals_the_rest_once():
    src = source(GRID, seed=3)
    req = PlanRequest(prompt="make the red square blue", sources=[src], task="v2v")
    n = GRID[0] * GRID[1] * GRID[2]
    plain = tiny_codebook_planner().plan(req, generator=0)
    assert plain.reveal_counts == maskgit.reveal_counts(n, 3)  # keep_source None: unchanged
    planner = tiny_codebook_planner(keep_source=1e-9)  # every source code is kept
    infos: list[dict] = []
    out = planner.plan(req, generator=0, callback=lambda step, info: infos.append(info))
    src_codes = planner.quantize(src.tokens.reshape(n, TOKEN_DIM))
    assert torch.equal(out.codes.reshape(n), src_codes) and out.reveal_counts == [n] and len(infos) == 1
    some = tiny_codebook_planner(keep_source=0.15)
    with torch.no_grad():
        out = some.plan(req, generator=0, callback=lambda step, info: infos.append(info))
    kept = out.reveal_counts[0]
    assert 0 < kept < n, "pick a threshold that keeps some codes for this toy"
    assert sorted(out.order.tolist()) == list(range(n)) and sum(out.reveal_counts) == n
    assert torch.equal(out.codes.reshape(n)[out.order[:kept]], src_codes[out.order[:kept]])
    t2v = tiny_codebook_planner(keep_source=1e-9).plan(PlanRequest(prompt="a red square", task="t2v"), generator=0)
    assert t2v.reveal_counts == maskgit.reveal_counts(n, 3)  # no source video: nothing to keep
    with pytest.raises(InputError, match="keep_source"):
        SemanticPlannerConfig(head="codebook", keep_source=0.0)


def test_temperature_zero_plan_is_deterministic():
    planner = tiny_codebook_planner()
    a = planner.plan("a blue circle", temperature=0.0, generator=torch.Generator().manual_seed(5))
    b = planner.plan("a blue circle", temperature=0.0, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.order, b.order) and torch.equal(a.codes, b.codes)
    quiet = tiny_codebook_planner(choice_temperature=0.0)  # no Gumbel noise either: the generator does not matter
    c = quiet.plan("a blue circle", temperature=0.0, generator=1)
    d = quiet.plan("a blue circle", temperature=0.0, generator=2)
    assert torch.equal(c.tokens, d.tokens) and torch.equal(c.order, d.order)
    e = planner.plan("a blue circle", temperature=1.0, generator=3)
    assert bool(torch.isfinite(e.tokens).all()) and e.codes.min() >= 0 and e.codes.max() < K


def test_random_reveal_with_the_codebook_head():
    planner = tiny_codebook_planner(reveal="random")
    steps: list[torch.Tensor] = []
    out = planner.plan("a green star", generator=0, callback=lambda s, info: steps.append(info["positions"]))
    assert torch.equal(torch.cat(steps), out.order) and sorted(out.order.tolist()) == list(range(8))
    assert torch.equal(out.order, maskgit.reveal_order(8, torch.Generator().manual_seed(0)))


def test_codebook_survives_save_and_reload(tmp_path):
    planner = tiny_codebook_planner(context_dim=8)
    planner.save_pretrained(tmp_path / "planner")
    state = load_file(str(tmp_path / "planner" / "model.safetensors"))
    assert torch.equal(state["head.codebook"], planner.codebook) and bool(state["head.fitted"])
    again = SemanticPlanner.from_pretrained(tmp_path / "planner")
    assert again.config == planner.config and torch.equal(again.codebook, planner.codebook)
    kw = {"sources": [source()], "task": "v2v"}
    a = planner.plan("a red square", generator=torch.Generator().manual_seed(2), **kw)
    b = again.plan("a red square", generator=torch.Generator().manual_seed(2), **kw)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.order, b.order) and torch.equal(a.codes, b.codes)
    assert torch.equal(a.contexts[0], b.contexts[0])


def test_code_loss_is_finite_decreases_and_sees_quantised_inputs():
    planner = tiny_codebook_planner().train()
    n = GRID[0] * GRID[1] * GRID[2]
    codes = torch.tensor([1, 1, 1, 1, 5, 5, 5, 5])  # the toy target: two codes (a "background" and an "object")
    target = planner.codebook[codes].reshape(*GRID, TOKEN_DIM) + 0.01
    ex = PlanExample(PlanRequest(prompt="a toy target"), target, dropout=False)
    opt = torch.optim.Adam(planner.parameters(), lr=3e-3)
    losses = []
    for step in range(20):
        out = planner.loss(ex, generator=step)
        assert bool(torch.isfinite(out.loss)) and out.per_token.numel() == out.num_masked >= n // 2
        assert out.cot is None and torch.equal(out.loss, out.plan)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(float(out.loss.detach()))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.5 * first and last < 0.5 * math.log(K)  # below uniform: it learned which codes the target uses
    assert planner.codebook.grad is None and not planner.codebook.requires_grad  # a buffer, never trained
    # the given (unmasked) rows enter quantised: moving the targets within their cells changes nothing
    mask = torch.tensor([[[True, False, True, False], [False, False, True, True]]])
    a = planner.loss(PlanExample(PlanRequest(prompt="x"), target, mask, dropout=False), generator=0)
    b = planner.loss(PlanExample(PlanRequest(prompt="x"), target - 0.02, mask, dropout=False), generator=0)
    assert torch.equal(a.per_token, b.per_token) and a.num_masked == 4 and bool((a.per_token >= 0).all())


def test_bad_config_values_name_the_field():
    cases = [({"head": "vq"}, "head"), ({"head": "codebook", "codebook_size": 1}, "codebook_size"),
             ({"codebook_size": 2.5}, "codebook_size"), ({"reveal": "sideways"}, "reveal"),
             ({"reveal": "confidence"}, "reveal"),  # the flow head has no confidence
             ({"head": "codebook", "choice_temperature": -1.0}, "choice_temperature"),
             ({"choice_temperature": float("inf")}, "choice_temperature")]
    for kwargs, name in cases:
        with pytest.raises(InputError, match=name):
            SemanticPlannerConfig(**kwargs)
    assert SemanticPlannerConfig().head == "flow" and SemanticPlannerConfig().reveal_mode == "random"
    assert SemanticPlannerConfig(head="codebook").reveal_mode == "confidence"
    assert SemanticPlannerConfig(head="codebook", reveal="random").reveal_mode == "random"
    planner = tiny_codebook_planner()
    with pytest.raises(InputError, match="codebook"):
        planner.set_codebook(torch.randn(K + 1, TOKEN_DIM))
    with pytest.raises(InputError, match="temperature"):
        planner.plan("x", temperature=-1.0)
    flow = builtin_planner(SemanticPlannerConfig(token_dim=TOKEN_DIM, plan_grid=GRID, head_width=32, head_depth=1, cot=False),
                           TinyBackboneConfig(hidden_size=32, num_layers=2, num_heads=2))
    assert flow.codebook is None and not any("codebook" in k for k in flow.state_dict())
    with pytest.raises(InputError, match="quantize"):
        flow.quantize(torch.randn(3, TOKEN_DIM))
