"""The builtin latent reasoner's object tokens: the proposals, the token layout, padding kept out of every map and
loss, chain targets on objects, SFT / GePO on them, and the pipeline's pictures and reload."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from planners import latent
from planners.builtin.vit import ViTConfig
from planners.latent_builtin import PICTURE_GRID, BuiltinLatentReasoner, ReasonerConfig, paint_on_grid
from planners.object_proposals import propose_objects
from training.gelvr_sft import answer_vocab
from latent_fakes import SpatialItems


@pytest.fixture(scope="module")
def text():
    from planners.builtin.text import MiniLM

    return MiniLM()


def tiny_objects_model(seed: int = 0, **config) -> BuiltinLatentReasoner:
    torch.manual_seed(seed)
    cfg = ReasonerConfig(d_model=32, layers=2, heads=2, mlp_ratio=2, num_slots=3, answers=answer_vocab(), image_tokens="objects",
                         max_objects=40, vit=ViTConfig(width=32, depth=1, heads=2), **config)
    return BuiltinLatentReasoner(cfg).eval()


@pytest.fixture(scope="module")
def spatial_items():
    from worldgen.tasks import spatial
    from worldgen.tasks.base import split_seed

    return [spatial.generate(split_seed("test", 7, i), spatial.Config(level=1 + i % 3)) for i in range(6)]


def test_proposals_find_the_objects_of_spatial_scenes(spatial_items):
    found = total = 0
    for s in spatial_items:
        props = propose_objects(s.images["image"])
        assert [p.area for p in props] == sorted((p.area for p in props), reverse=True)
        xy = np.array([p.centre for p in props])
        for o in s.record["objects"]:
            total += 1
            found += int(np.hypot(xy[:, 0] - o["x"], xy[:, 1] - o["y"]).min() < 0.5 * o["r"])
        p = props[0]
        assert p.mask.shape == (p.box[3] - p.box[1], p.box[2] - p.box[0]) and p.mask.sum() == p.area
    assert found >= 0.95 * total, (found, total)


def test_proposals_of_a_plain_image_are_empty_and_colours_are_read():
    img = np.full((256, 256, 3), 30, np.uint8)
    assert propose_objects(img) == []
    img[40:60, 100:130] = (220, 40, 40)
    (p,) = propose_objects(img)
    assert p.box == (100, 40, 130, 60) and p.area == 600 and np.allclose(p.color, (220, 40, 40))
    assert p.centre == pytest.approx((114.5, 49.5))


def test_object_tokens_layout_and_padding(text, spatial_items):
    from training.gelvr_data import record_item, target_groups, token_layout

    model = tiny_objects_model().requires_grad_(False)
    feats = model.features(np.stack([s.images["image"] for s in spatial_items[:3]]))
    assert feats.shape == (3, 40, model.config.feature_dim)
    centres, boxes, valid = model.token_geometry(feats)
    counts = valid.sum(1).tolist()
    assert all(min(len(s.record["objects"]), 40) - 3 <= n <= min(len(s.record["objects"]) + 3, 40) for n, s in zip(counts, spatial_items))
    assert all(valid[b, :n].all() and not valid[b, n:].any() for b, n in enumerate(counts))  # real tokens first
    pre = model.prefix(feats, text.tokens([s.record["question"] for s in spatial_items[:3]]),
                       [text.encode(s.record["options"]) for s in spatial_items[:3]])
    assert torch.equal(pre["image_mask"], valid)
    r = latent.rollout(model, pre, 3)
    maps = latent.slot_attention(r.slot_inputs, pre["image"], mask=pre["image_mask"])
    assert torch.allclose(maps.sum(-1), torch.ones(3, 3)) and float(maps[~valid[:, None].expand_as(maps)].abs().max()) == 0.0
    norms = model.image_norm(pre)
    assert norms[0] == pytest.approx(float(pre["image"][0, : counts[0]].norm(dim=-1).mean()), rel=1e-5)

    items = [record_item(s.record) for s in spatial_items[:3]]
    xy, bx = token_layout(model, feats, items)
    for it, c in zip(items, xy):
        anchor, region, target, centre = target_groups(it, 4, model.config.grid, "chain", c)
        ax, ay, tx, ty = it.path
        assert len(anchor) == 1 and np.hypot(*(c[anchor[0]] - (ax, ay))) < 0.5 * it.radii[0]  # the anchor's own token
        assert list(target) == list(centre) and np.hypot(*(c[centre[0]] - (tx, ty))) < 0.5 * it.radii[1]
        assert centre[0] in region and anchor[0] not in region


def test_blank_image_keeps_the_maps_defined(text):
    model = tiny_objects_model().requires_grad_(False)
    feats = model.features(np.full((1, 256, 256, 3), 30, np.uint8))
    assert float(feats[..., -7].max()) == 0.0
    pre = model.prefix(feats, text.tokens(["What colour is the small star right of the large triangle?"]),
                       [text.encode(["red", "blue"])])
    r = latent.rollout(model, pre, 2)
    maps = latent.slot_attention(r.slot_inputs, pre["image"], mask=pre["image_mask"])
    assert torch.isfinite(maps).all() and torch.allclose(maps.sum(-1), torch.ones(1, 2))


def test_paint_on_grid_keeps_each_maps_mass():
    boxes = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.6, 0.6, 0.62, 0.62], [0.0, 0.0, 0.0, 0.0]])
    w = torch.tensor([[0.7, 0.3, 0.0], [0.0, 1.0, 0.0]])
    m = paint_on_grid(w, boxes, 8)
    assert m.shape == (2, 8, 8) and torch.allclose(m.sum((1, 2)), torch.ones(2))
    assert float(m[0, :4, :4].sum()) == pytest.approx(0.7) and float(m[1, 4, 4]) == pytest.approx(1.0)  # a tiny box: its cell


def test_sft_and_a_gepo_step_on_object_tokens(text, spatial_items):
    from training.gelvr_rl import RLRecipe, collect, replayed
    from training.gelvr_sft import SFTRecipe, evaluate, sft_losses, slot_diagnostics
    from training.gepo import GePOLoss, group_advantages

    model = tiny_objects_model().train()
    data = SpatialItems(model, text, spatial_items)
    recipe = SFTRecipe(variant="full", num_slots=3, image_tokens="objects", lambda_pointer=1.0)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    idx = np.arange(len(data))
    first = {k: float(v.detach()) for k, v in sft_losses(model, data, idx, recipe).items()}
    for _ in range(30):
        loss = sum(sft_losses(model, data, idx, recipe).values())
        opt.zero_grad()
        loss.backward()
        opt.step()
    last = {k: float(v.detach()) for k, v in sft_losses(model, data, idx, recipe).items()}
    assert set(first) == {"ce", "pt", "gram", "cross", "pointer"}
    assert all(last[k] < first[k] for k in first), (first, last)
    metrics = evaluate(model, data, 3)
    assert 0 <= metrics["pointing"] <= 1
    diag = slot_diagnostics(model, data, 3, n=6)
    assert len(diag["peak_on_target"]) == 3

    reference = tiny_objects_model()
    reference.load_state_dict(model.state_dict())
    rl = RLRecipe(group=4, kappa=20.0)
    roll = collect(model.eval(), data, np.arange(3), rl, torch.Generator().manual_seed(0))
    adv = group_advantages(roll["reward"].view(-1, 4)).reshape(-1)
    with torch.no_grad():
        ref = replayed(reference, data, roll, rl)
    now = replayed(model.train(), data, roll, rl)
    assert ref["image_mask"] is not None
    loss, m = GePOLoss(kappa=20.0)(adv=adv, logp=now["logp"], logp_old=roll["logp_old"], logp_ref=ref["logp"], text_mask=roll["text_mask"],
                                   mu=now["mu"], mu_old=roll["mu_old"], mu_ref=ref["mu"], z=roll["z"], latent_mask=roll["started"],
                                   image_tokens=ref["image"], image_mask=ref["image_mask"])
    loss.backward()
    assert torch.isfinite(loss) and m["r_geo"] == pytest.approx(0.0, abs=1e-5)


def test_pipeline_on_object_tokens_pictures_and_reload(spatial_items, tmp_path):
    from pipelines.latent_reasoning import LatentReasoningPipeline

    tiny_objects_model().save_pretrained(tmp_path / "r")
    pipe = LatentReasoningPipeline.build(components={"reasoner": str(tmp_path / "r")})
    s = spatial_items[2]
    out = pipe(s.images["image"], s.record["question"], s.record["options"])
    assert out.attention.shape == (3, PICTURE_GRID, PICTURE_GRID) and np.allclose(out.attention.sum((1, 2)), 1.0, atol=1e-4)
    assert all(0 <= p["box"][0] < p["box"][2] <= 512 for p in out.peaks)
    out.save(tmp_path / "o")
    assert (tmp_path / "o" / "slots.png").is_file()
    again = LatentReasoningPipeline.build(components={"reasoner": str(tmp_path / "r")})(s.images["image"], s.record["question"], s.record["options"])
    assert again.posterior == out.posterior and np.array_equal(again.slots, out.slots)


def test_attribute_targets_name_each_tokens_object_and_skip_padding(spatial_items):
    from training.gelvr_data import object_attribute_targets
    from worldgen.vocab import COLOR_NAMES, SHAPES, SIZE_NAMES

    model = tiny_objects_model().requires_grad_(False)
    s = spatial_items[0]
    feats = model.features(s.images["image"])
    y = object_attribute_targets(feats, [s.record])
    valid = model.token_geometry(feats)[2][0]
    assert (y[0, ~valid] == -100).all() and (y[0, valid, 0] >= 0).float().mean() > 0.9
    centres = model.token_geometry(feats)[0][0] * 512
    for k in torch.nonzero(y[0, :, 0] >= 0)[:5, 0].tolist():  # each matched token's class ids are its nearest object's
        o = min(s.record["objects"], key=lambda o: float(np.hypot(o["x"] - centres[k, 0], o["y"] - centres[k, 1])))
        assert y[0, k].tolist() == [SHAPES.index(o["shape"]), SIZE_NAMES.index(o["size"]), COLOR_NAMES.index(o["color"])]


def test_attribute_loss_ignores_unmatched_tokens_and_is_finite_when_none_match():
    from planners.object_attributes import WIDTH, attribute_loss, attribute_probabilities

    logits = torch.randn(2, 5, WIDTH, requires_grad=True)
    none = torch.full((2, 5, 3), -100)
    assert float(attribute_loss(logits.detach(), none)) == 0.0
    y = none.clone()
    y[0, 1] = torch.tensor([3, 2, 9])
    loss = attribute_loss(logits, y)
    loss.backward()
    assert torch.isfinite(loss) and logits.grad[0, 1].abs().sum() > 0 and logits.grad[1].abs().sum() == 0
    p = attribute_probabilities(logits)
    assert torch.allclose(p[..., :8].sum(-1), torch.ones(2, 5)) and torch.allclose(p[..., 11:].sum(-1), torch.ones(2, 5))


def test_symbol_tokens_come_from_a_frozen_fitted_attribute_head(text, spatial_items, tmp_path):
    from planners.latent_builtin import BuiltinLatentReasoner as Model
    from training.gelvr_sft import train_object_attributes

    with pytest.raises(ValueError, match="object_reads"):
        ReasonerConfig(object_reads="pixels")
    with pytest.raises(ValueError, match="image_tokens='objects'"):
        ReasonerConfig(object_reads="symbols")
    model = tiny_objects_model(object_reads="symbols")
    assert not any(p.requires_grad for p in model.perceive.parameters()) and model.symbols.weight.requires_grad
    data = SpatialItems(model, text, spatial_items)
    facts = train_object_attributes(model, data, data, steps=150, batch=6, lr=3e-3)
    assert not any(p.requires_grad for p in model.perceive.parameters())  # frozen again once fitted
    assert facts["val_accuracy"]["color"] > 0.9 and facts["val_accuracy"]["shape"] > 0.5, facts  # on its training images
    feats = data.features.float()
    before = model.image_tokens(feats)
    with torch.no_grad():
        model.symbols.weight.mul_(2.0)  # the tokens read the head's probabilities, and nothing of the descriptor
        model.project[1].weight.zero_()
    after = model.image_tokens(feats)
    valid = model.token_geometry(feats)[2]
    assert not torch.allclose(before[valid], after[valid])
    both = tiny_objects_model(object_reads="both")
    assert both.image_tokens(feats).shape == before.shape
    model.save_pretrained(tmp_path / "r")
    again = Model.from_pretrained(tmp_path / "r")
    assert again.config.object_reads == "symbols" and torch.equal(again.image_tokens(feats), model.eval().image_tokens(feats))


@pytest.mark.parametrize("answer_reads", ["all", "slots"])
def test_shared_image_positions_make_the_objects_a_set_and_replay_still_matches(text, spatial_items, answer_reads):
    with pytest.raises(ValueError, match="image_positions"):
        ReasonerConfig(image_positions="raster")
    model = tiny_objects_model(image_positions="shared", answer_reads=answer_reads, prefix_lm=True)
    assert model._positions(0, 43, 1)[0].tolist() == [0] * 40 + [1, 2, 3]
    assert model._positions(45, 2, 3).tolist() == [[6, 7]] * 3
    data = SpatialItems(model, text, spatial_items[:3])
    feats = data.features.float()
    pre = model.prefix(feats, data.questions, list(data.options))
    with torch.no_grad():
        r = latent.rollout(model, pre, 3)
        rp = latent.replay(model, pre, r.slot_inputs)
        assert torch.allclose(rp["answer_logits"], r.answer_logits, atol=1e-5)
        assert torch.allclose(rp["means"], r.means, atol=1e-6)
        # reordering the object tokens changes nothing: their order is not seen (padding stays last; the prefix-LM
        # mask lets them attend both ways)
        n = int(model.token_geometry(feats)[2][0].sum())
        perm = torch.cat([torch.randperm(n, generator=torch.Generator().manual_seed(1)), torch.arange(n, feats.shape[1])])
        shuffled = model.prefix(feats[:1, perm], data.questions[:1], [data.options[0]])
        r1 = latent.rollout(model, shuffled, 3)
        assert torch.allclose(r1.answer_logits, r.answer_logits[:1], atol=1e-4)
        ordered = tiny_objects_model(answer_reads=answer_reads, prefix_lm=True)
        ordered.load_state_dict(model.state_dict())
        assert not torch.allclose(latent.rollout(ordered, pre, 3).answer_logits, r.answer_logits, atol=1e-4)


def test_feature_cache_chunks_filled_by_shards_read_back_as_one_set(text, tmp_path, monkeypatch):
    from training import gelvr_data

    monkeypatch.setattr(gelvr_data, "CHUNK", 2)
    model = tiny_objects_model()
    folder = gelvr_data.cache_folder(tmp_path / "val", model)
    assert folder.name == "val_objects"
    for shard in (1, 0):  # two processes' shares, in either order: chunk c belongs to shard c % 2
        for c, start in enumerate(range(0, 5, gelvr_data.CHUNK)):
            if c % 2 == shard:
                gelvr_data.cached_chunk("val", 0, start, min(5, start + gelvr_data.CHUNK), model, folder)
    assert sorted(p.name for p in folder.glob("*.json")) == ["chunk_000000.json", "chunk_000002.json", "chunk_000004.json"]
    cached = gelvr_data.SpatialSet("val", 5, model, text, cache=tmp_path / "val")
    fresh = gelvr_data.SpatialSet("val", 5, model, text)
    assert torch.equal(cached.features, fresh.features) and cached.records == fresh.records
    assert len(gelvr_data.SpatialSet("val", 3, model, text, cache=tmp_path / "val")) == 3  # a prefix of a chunk
    later = gelvr_data.SpatialSet("val", 3, model, text, cache=tmp_path / "val", start=2)  # items 2..4: RL's unseen prompts
    assert torch.equal(later.features, fresh.features[2:]) and later.records == fresh.records[2:]
    with pytest.raises(ValueError, match="start=1"):
        gelvr_data.SpatialSet("val", 3, model, text, start=1)


def test_feature_cache_cli_rejects_a_bad_shard(capsys):
    from training.gelvr_data import main

    with pytest.raises(SystemExit):
        main(["--items", "10", "--shard", "2/2"])
    assert "--shard '2/2'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--items", "0"])
    assert "--items 0" in capsys.readouterr().err


def test_a_pointer_answer_is_the_word_read_off_where_the_last_slot_looks(text, spatial_items):
    from planners.latent_geometry import cross_structure

    with pytest.raises(ValueError, match="pointer_tau"):
        ReasonerConfig(pointer_tau=0)
    model = tiny_objects_model(answer_pointer=True, image_positions="shared", prefix_lm=True)
    data = SpatialItems(model, text, spatial_items[:3])
    pre = model.prefix(data.features.float(), data.questions, list(data.options))
    with torch.no_grad():
        r = latent.rollout(model, pre, 3)
        rp = latent.replay(model, pre, r.slot_inputs)
        assert torch.allclose(rp["answer_logits"], r.answer_logits, atol=1e-5)  # GePO's ratios start at 1
        # the answer is a distribution: the last slot's map over the tokens times each token's word distribution
        w = cross_structure(r.slot_inputs[:, -1:], pre["image"], model.config.pointer_tau, pre["image_mask"])[:, 0]
        expected = (w[..., None] * torch.softmax(model.read(pre["image"]), -1)).sum(1)
        assert torch.allclose(r.answer_logits.exp(), expected, atol=1e-5)
        # a slot pointing at one token gives that token's words; the <start> token still comes from the LM head
        j = int(pre["image_mask"][0].nonzero()[2])
        sharp = model.pointer_answer(pre["image"][:1, j] * 10, pre["image"][:1], pre["image_mask"][:1])
        one = torch.softmax(model.read(pre["image"][:1, j]), -1)
        assert torch.allclose(sharp.exp(), one, atol=0.2)
        plain = tiny_objects_model(image_positions="shared", prefix_lm=True)
        plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("read.")})
        assert torch.allclose(latent.rollout(plain, pre, 3).first_logits, r.first_logits, atol=1e-6)
        no_slots = latent.rollout(model, pre, 0)  # K = 0: nothing to point with, the LM head answers
        assert torch.allclose(no_slots.answer_logits, latent.rollout(plain, pre, 0).answer_logits, atol=1e-6)


def test_the_symbolic_solver_answers_everything_from_perfect_attribute_reads(text, spatial_items):
    """The benchmark's reference search: given attribute reads that are worldgen's truth, it finds every answer;
    given reads that say nothing, it does no better than the options allow."""
    from benchmarks.latent_reasoning import symbolic_solver
    from planners.object_attributes import GROUPS
    from training.gelvr_data import object_attribute_targets

    model = tiny_objects_model(object_reads="symbols")
    data = SpatialItems(model, text, spatial_items)
    truth = object_attribute_targets(data.features, data.records)  # (n, N, 3): shape, size, colour ids

    def perfect(features):
        i = next(k for k in range(len(data.features)) if torch.equal(data.features[k].float(), features[0]))
        logits = torch.full((1, features.shape[1], GROUPS["color"][1]), -20.0)
        for g, (a, _) in enumerate(GROUPS.values()):
            hit = truth[i, :, g] >= 0
            logits[0, hit, a + truth[i, hit, g]] = 20.0
        return logits

    model.object_attributes = perfect
    # 5 of the 6: this tiny model keeps 40 object tokens, and one level-3 image's asked objects are not all among them
    assert symbolic_solver(model, data) == pytest.approx(5 / 6)
    model.object_attributes = lambda f: torch.zeros(1, f.shape[1], GROUPS["color"][1])
    assert symbolic_solver(model, data) <= 0.5  # uniform reads: the first option that comes up, right by chance


def test_atelier_train_gelvr_sft_runs_the_shipped_models_recipe():
    import json
    from dataclasses import asdict
    from pathlib import Path

    from training.gelvr_sft import shipped_recipe

    saved = json.loads((Path(__file__).parents[1] / "weights/builtin/latent_reasoner_sft/train_config.json").read_text())["recipe"]
    assert asdict(shipped_recipe()) == saved
    assert shipped_recipe(variant="pointwise", steps=10).answer_pointer and shipped_recipe(steps=10).steps == 10


def test_atelier_train_gelvr_rl_runs_the_shipped_models_recipe():
    import json
    from dataclasses import asdict
    from pathlib import Path

    from training.gelvr_rl import RLRecipe

    saved = json.loads((Path(__file__).parents[1] / "weights/builtin/latent_reasoner/train_config.json").read_text())
    assert asdict(RLRecipe()) == saved["recipe"] and saved["stage"] == "rl"


def test_the_latent_benchmark_runs_a_saved_model_with_no_diagnostics(tmp_path):
    import json

    from benchmarks.latent_reasoning import main

    tiny_objects_model(object_reads="symbols", answer_pointer=True).save_pretrained(tmp_path / "m")
    args = ["--n", "2", "--methods", "full", "--models", f"full={tmp_path / 'm'}", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    assert main([*args, "--diagnose", "0"]) == 0
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    full = summary["summary"]["full"]
    assert full["accuracy"]["n"] == 2 and "slot_diagnostics" not in full
    assert main([*args, "--diagnose", "0", "--files", "full"]) == 0  # the user's path: PNGs through `atelier reason`
    summary = json.loads((tmp_path / "out" / "results.json").read_text())["summary"]
    assert summary["full@file"]["accuracy"]["n"] == 2
    with pytest.raises(SystemExit):
        main([*args, "--diagnose", "-1"])


def test_a_gepo_run_logs_every_step_and_the_benchmark_reads_its_clip_fractions(tmp_path):
    from benchmarks.latent_reasoning import summarise
    from training.gelvr_rl import RLRecipe, train_rl

    tiny_objects_model(object_reads="symbols", answer_pointer=True).save_pretrained(tmp_path / "sft")
    recipe = RLRecipe(steps=3, prompts=1, candidates=2, group=2, train_items=2, val_items=2, eval_every=3, band_low=0.0, band_high=1.0)
    facts = train_rl(tmp_path / "rl", tmp_path / "sft", recipe, cache=tmp_path / "cache")
    assert [s["step"] for s in facts["step_log"]] == [1, 2, 3] and [h["step"] for h in facts["val_history"]] == [0, 3]
    facts["step_log"] = [{"clipfrac_latent": 0.3}, {"clipfrac_latent": 0.0}, {"clipfrac_latent": 0.0}]
    rows = [{"method": "gepo", "item": 0, "correct": True, "level": 1, "size": "small", "pointing": True}]
    assert summarise(rows, {"gepo": facts})["gepo"]["rl"]["clipfrac_latent_mean"] == 0.1  # every step, not the evaluations'


def test_gepo_with_greedy_wrong_only_learns_from_no_prompt_the_greedy_policy_gets_right(tmp_path, monkeypatch):
    from training import gelvr_rl

    tiny_objects_model(object_reads="symbols", answer_pointer=True).save_pretrained(tmp_path / "sft")
    recipe = gelvr_rl.RLRecipe(steps=2, prompts=2, candidates=2, group=2, train_items=2, val_items=2, eval_every=2,
                               band_low=0.0, band_high=1.0, greedy_wrong_only=True)
    seen = []
    real = gelvr_rl.greedy_right

    def spy(model, data, idx):
        got = real(model, data, idx)
        seen.append(got)
        return torch.ones_like(got)  # as if the greedy policy were right on every prompt

    monkeypatch.setattr(gelvr_rl, "greedy_right", spy)
    facts = gelvr_rl.train_rl(tmp_path / "rl", tmp_path / "sft", recipe, cache=tmp_path / "cache")
    assert len(seen) == 2 and all(s.dtype == torch.bool and s.shape == (2,) for s in seen)
    assert [s["kept_prompts"] for s in facts["step_log"]] == [0, 0]
