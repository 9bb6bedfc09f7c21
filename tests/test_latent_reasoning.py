"""Latent reasoning end to end at tiny size: the slot recurrence (spec d 12), SFT and one GePO step on a few
worldgen ``spatial`` items, and the pipeline's contract (outputs, files, reload, errors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from planners import latent
from planners.builtin.vit import ViTConfig
from planners.latent_builtin import BuiltinLatentReasoner, BuiltinReasoner, ReasonerConfig
from training.gelvr_sft import answer_vocab
from latent_fakes import SpatialItems


@pytest.fixture(scope="module")
def text():
    from planners.builtin.text import MiniLM

    return MiniLM()


def tiny_model(slot_norm: str = "image", seed: int = 0, **config) -> BuiltinLatentReasoner:
    torch.manual_seed(seed)
    cfg = ReasonerConfig(d_model=32, layers=config.pop("layers", 2), heads=2, mlp_ratio=2, num_slots=3, slot_norm=slot_norm,
                         answers=answer_vocab(), vit=ViTConfig(width=32, depth=1, heads=2), **config)
    return BuiltinLatentReasoner(cfg).eval()


@pytest.fixture(scope="module")
def spatial_items():
    from worldgen.tasks import spatial
    from worldgen.tasks.base import split_seed

    return [spatial.generate(split_seed("test", 5, i), spatial.Config(level=1 + i % 3)) for i in range(6)]


def _prefix(model, text, samples):
    feats = model.features(np.stack([s.images["image"] for s in samples]))
    return model.prefix(feats, text.tokens([s.record["question"] for s in samples]),
                        [text.encode(s.record["options"]) for s in samples])


def test_slot_input_is_the_previous_positions_last_hidden_state(text, spatial_items):
    model = tiny_model(slot_norm="hidden")
    pre = _prefix(model, text, spatial_items[:2])
    seen = []
    hook = model.lm.layers[0].register_forward_pre_hook(lambda mod, args, kwargs: seen.append(kwargs.get("hidden_states", args[0] if args else None)),
                                                        with_kwargs=True)
    try:
        r = latent.rollout(model, pre, 3, slot_norm="hidden")
    finally:
        hook.remove()
    # calls: prefix, <start>, slot 1, slot 2, slot 3, <end>; the layer-0 input of slot k is the fed-back vector
    assert len(seen) == 6
    for k in range(3):
        fed = seen[2 + k][:, -1]
        assert torch.allclose(fed, r.hidden_before[:, k], atol=1e-6)  # = h_{k-1}, its norm restored
        assert torch.allclose(fed, r.slot_inputs[:, k])
    with pytest.raises(Exception, match="num_slots"):
        latent.rollout(model, pre, 40)


@pytest.mark.parametrize("sampled", [False, True])
def test_replay_reproduces_the_rollout(text, spatial_items, sampled):
    from training.gepo import vmf_log_ratio

    model = tiny_model()
    pre = _prefix(model, text, spatial_items[:3])
    sampler = latent.vmf_sampler(20.0, torch.Generator().manual_seed(0)) if sampled else None
    with torch.no_grad():
        r = latent.rollout(model, pre, 3, sampler=sampler)
        rp = latent.replay(model, pre, r.slot_inputs)
    assert torch.allclose(rp["answer_logits"], r.answer_logits, atol=1e-5)
    assert torch.allclose(rp["first_logits"], r.first_logits, atol=1e-5)
    assert torch.allclose(rp["means"], r.means, atol=1e-6)
    ratio = vmf_log_ratio(rp["means"], r.means, r.directions, 20.0).exp()
    assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-4)
    if sampled:
        assert not torch.allclose(r.directions, r.means)


@pytest.mark.parametrize("prefix_lm", [False, True])
def test_answer_bottleneck_reads_only_the_slots(text, spatial_items, prefix_lm):
    """``answer_reads="slots"``: rollout and replay agree, and in a one-layer model (where the answer position sees
    only its layer's inputs) the answer on fixed slot inputs no longer depends on the image and question."""
    model = tiny_model(layers=1, answer_reads="slots", prefix_lm=prefix_lm)
    pre_a, pre_b = _prefix(model, text, spatial_items[:2]), _prefix(model, text, spatial_items[2:4])
    with torch.no_grad():
        r = latent.rollout(model, pre_a, 3)
        rp = latent.replay(model, pre_a, r.slot_inputs)
        other = latent.replay(model, pre_b, r.slot_inputs)
        model.config.answer_reads = "all"
        seeing = latent.replay(model, pre_b, r.slot_inputs)
    assert torch.allclose(rp["answer_logits"], r.answer_logits, atol=1e-5)
    assert torch.allclose(rp["slot_states"], r.slot_states, atol=1e-5)
    assert torch.allclose(other["answer_logits"], rp["answer_logits"], atol=1e-5)
    assert not torch.allclose(other["slot_states"], rp["slot_states"], atol=1e-3)  # the slots still read the image
    assert not torch.allclose(seeing["answer_logits"], rp["answer_logits"], atol=1e-3)
    with pytest.raises(ValueError, match="answer_reads"):
        ReasonerConfig(answer_reads="image")


def test_pointing_first_leaves_the_answer_out_before_answer_from(text, spatial_items):
    from training.gelvr_sft import SFTRecipe, latent_sft_losses

    model = tiny_model()
    pre = _prefix(model, text, spatial_items[:2])
    targets = pre["image"][:, :3].detach()
    answers = torch.tensor([model.answer_ids(["red"])[0]] * 2)
    recipe = SFTRecipe(variant="pointwise", num_slots=3)
    start_only = latent_sft_losses(model, pre, targets, answers, recipe, with_answer=False)["ce"].detach()
    both = latent_sft_losses(model, pre, targets, answers, recipe)["ce"].detach()
    start = torch.nn.functional.cross_entropy(latent.replay(model, pre, latent.teacher_forced_inputs(model, pre, targets))["first_logits"],
                                              torch.full((2,), model.start_id))
    assert torch.allclose(start_only, start, atol=1e-6)
    assert both.item() > start_only.item() + 1e-3


def test_the_answer_still_learns_when_it_starts_after_pointing_first(text, spatial_items):
    from training.gelvr_sft import SFTRecipe, sft_losses

    model = tiny_model().train()
    data = SpatialItems(model, text, spatial_items)
    recipe, idx = SFTRecipe(variant="full", num_slots=3, lambda_pointer=1.0, answer_from=30), np.arange(len(spatial_items))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)

    def answer_ce() -> float:
        with torch.no_grad():
            return float(sft_losses(model, data, idx, recipe)["ce"] - sft_losses(model, data, idx, recipe, with_answer=False)["ce"])

    for step in range(90):
        if step == recipe.answer_from:
            before = answer_ce()
        loss = sum(sft_losses(model, data, idx, recipe, with_answer=step >= recipe.answer_from).values())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert answer_ce() < min(0.5, before / 4)  # the switch turns a real gradient on: six answers are memorised


def test_sft_lowers_every_loss_term_and_a_gepo_step_runs(text, spatial_items):
    from training.gelvr_rl import RLRecipe, collect, replayed
    from training.gelvr_sft import SFTRecipe, evaluate, sft_losses
    from training.gepo import GePOLoss, group_advantages

    model = tiny_model().train()
    data = SpatialItems(model, text, spatial_items)
    recipe = SFTRecipe(variant="full", num_slots=3)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    idx = np.arange(len(data))
    first = {k: float(v.detach()) for k, v in sft_losses(model, data, idx, recipe).items()}
    for _ in range(40):
        loss = sum(sft_losses(model, data, idx, recipe).values())
        opt.zero_grad()
        loss.backward()
        opt.step()
    last = {k: float(v.detach()) for k, v in sft_losses(model, data, idx, recipe).items()}
    assert set(first) == {"ce", "pt", "gram", "cross"}
    assert all(last[k] < first[k] for k in first), (first, last)
    metrics = evaluate(model, data, 3)
    assert 0 <= metrics["accuracy"] <= 1 and "pointing" in metrics and "level_1" in metrics

    # one GePO step: rollouts, reference replay, the objective; at the old policy every ratio is 1 (nothing clipped)
    reference = tiny_model()
    reference.load_state_dict(model.state_dict())
    rl = RLRecipe(group=4, kappa=20.0)
    roll = collect(model.eval(), data, np.arange(3), rl, torch.Generator().manual_seed(0))
    assert roll["z"].shape == (12, 3, 32) and roll["tokens"].shape == (12, 2)
    adv = group_advantages(roll["reward"].view(-1, 4)).reshape(-1)
    with torch.no_grad():
        ref = replayed(reference, data, roll, rl)
    now = replayed(model.train(), data, roll, rl)
    loss, m = GePOLoss(kappa=20.0)(adv=adv, logp=now["logp"], logp_old=roll["logp_old"], logp_ref=ref["logp"], text_mask=roll["text_mask"],
                                   mu=now["mu"], mu_old=roll["mu_old"], mu_ref=ref["mu"], z=roll["z"], latent_mask=roll["started"],
                                   image_tokens=ref["image"])
    loss.backward()
    assert torch.isfinite(loss)
    assert m["clipfrac_text"] == 0.0 and m.get("clipfrac_latent", 0.0) == 0.0
    assert m["r_geo"] == pytest.approx(0.0, abs=1e-5)


# ---- the pipeline
@pytest.fixture(scope="module")
def saved_reasoner(tmp_path_factory):
    path = tmp_path_factory.mktemp("reasoner")
    tiny_model().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def pipe(saved_reasoner):
    from pipelines.latent_reasoning import LatentReasoningPipeline

    return LatentReasoningPipeline.build(components={"reasoner": str(saved_reasoner)})


def test_pipeline_output_files_and_reload(pipe, spatial_items, tmp_path):
    from pipelines.latent_reasoning import LatentReasoningPipeline

    s = spatial_items[0]
    out = pipe(s.images["image"], s.record["question"], s.record["options"])
    assert out.answer in s.record["options"] and out.answer == out.options[out.answer_index]
    assert sum(out.posterior.values()) == pytest.approx(1.0)
    assert out.slots.shape == (3, 32) and out.attention.shape == (3, 16, 16)
    assert np.allclose(out.attention.sum((1, 2)), 1.0, atol=1e-4)
    assert len(out.peaks) == 3 and all(0 <= p["box"][0] < p["box"][2] <= 512 for p in out.peaks)
    x0, y0, x1, y1 = out.region
    assert 0 <= x0 < x1 <= 512 and 0 <= y0 < y1 <= 512
    out.save(tmp_path / "o")
    assert {"slots.png", "zoom.png", "slots.npy", "attention.npy", "result.json", "config.json"} <= {p.name for p in (tmp_path / "o").iterdir()}
    pipe.save_pretrained(tmp_path / "p")
    again = LatentReasoningPipeline.from_pretrained(tmp_path / "p")(s.images["image"], s.record["question"], s.record["options"])
    assert again.posterior == out.posterior and np.array_equal(again.slots, out.slots)
    direct = LatentReasoningPipeline.build(tmp_path / "p", config={"num_slots": 0})(s.images["image"], s.record["question"], s.record["options"])
    assert direct.num_slots == 0 and direct.attention.shape == (0, 16, 16)


def test_pipeline_clear_errors(pipe, spatial_items):
    from core.errors import InputError
    from pipelines.latent_reasoning import LatentReasoningConfig

    s = spatial_items[0]
    img, q = s.images["image"], s.record["question"]
    with pytest.raises(InputError, match="options"):
        pipe(img, q, [])
    with pytest.raises(InputError, match="options"):
        pipe(img, q, ["red"])
    with pytest.raises(InputError, match="options"):
        pipe(img, q, ["red", "a sports car"])  # outside the builtin reasoner's answer words
    with pytest.raises(InputError, match="128 px"):
        pipe(np.zeros((64, 64, 3), np.uint8), q, ["red", "blue"])
    with pytest.raises(InputError, match="question"):
        pipe(img, "  ", ["red", "blue"])
    with pytest.raises(InputError, match="num_slots"):
        LatentReasoningConfig(num_slots=99)


def test_builtin_reasoner_component_answers_directly_and_with_slots(saved_reasoner, spatial_items):
    r = BuiltinReasoner.from_pretrained(saved_reasoner)
    s = spatial_items[1]
    a = r.answer(s.images["image"], s.record["question"], s.record["options"], num_slots=5)
    assert a.slots.shape == (5, 32) and a.attention.shape == (5, 16, 16) and a.grid == (16, 16)
    assert np.isclose(a.posterior.sum(), 1.0)


def test_chain_targets_follow_the_search(spatial_items):
    from training.gelvr_data import box_cells, cell_centres, record_item, target_groups

    inside = 0
    for s in spatial_items:
        it = record_item(s.record)
        anchor, region, target, centre = target_groups(it, 4, 16, "chain")
        xy = cell_centres(16)
        ax, ay, tx, ty = it.path
        assert np.hypot(*(xy[anchor].mean(0) - (ax, ay))) < it.radii[0] + 32  # the anchor's cells surround it
        assert np.hypot(*(xy[centre[0]] - (tx, ty))) <= 16 * 2**0.5 + 1e-6  # the cell under the target's centre
        inside += int(centre[0] in region)  # the target lies in the relation's region (up to a cell's rounding)
        assert set(target) <= set(range(256)) and len(box_cells(it.box, 16)) >= 1
        assert [len(g) for g in target_groups(it, 2, 16, "chain")] == [len(anchor), 1]
        assert len(target_groups(it, 5, 16, "chunks")) == 5 and len(target_groups(it, 3, 16, "roi")) == 3
    assert inside >= len(spatial_items) - 2


def test_a_resumed_run_keeps_its_saved_recipe(tmp_path):
    import json
    from dataclasses import asdict

    from training.common import resumed_recipe
    from training.gelvr_sft import SFTRecipe

    (tmp_path / "run").mkdir()
    (tmp_path / "train_config.json").write_text(json.dumps({"recipe": asdict(SFTRecipe(variant="pointwise", lr=5e-4))}))
    assert resumed_recipe(tmp_path, SFTRecipe(steps=50), True) == SFTRecipe(steps=50)  # no checkpoint yet: the caller's
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"")
    got = resumed_recipe(tmp_path, SFTRecipe(steps=50), True)
    assert got == SFTRecipe(variant="pointwise", lr=5e-4, steps=50)
    assert resumed_recipe(tmp_path, SFTRecipe(steps=50), False) == SFTRecipe(steps=50)


@pytest.mark.parametrize("flag", ["--candidates", "--prompts", "--steps", "--train-items"])
def test_gelvr_rl_refuses_a_count_below_one_before_any_work(flag, capsys):
    from training.gelvr_rl import main

    with pytest.raises(SystemExit) as e:
        main(["--init", "nowhere", flag, "0"])
    assert e.value.code == 2 and f"{flag} 0: pass 1 or more" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1000", "500"])
def test_gelvr_rl_refuses_a_prompt_start_off_the_cache_chunks(value, capsys):
    from training.gelvr_rl import main

    with pytest.raises(SystemExit) as e:
        main(["--init", "nowhere", "--prompt-start", value])
    assert e.value.code == 2 and f"--prompt-start {value}: pass 0 or a multiple of 1000" in capsys.readouterr().err
