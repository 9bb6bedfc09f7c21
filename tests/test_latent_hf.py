"""The hf latent reasoner on a tiny random Qwen2.5-VL saved and reloaded offline: inference with forced slots,
one SFT step, one GePO step, and a saved pipeline that reloads with identical output."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tiny_vlms import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("qwen25"))


@pytest.fixture(scope="module")
def reasoner(tiny_dir):
    from planners.latent import load_latent_reasoner

    return load_latent_reasoner(str(tiny_dir), device="cpu")


@pytest.fixture(scope="module")
def scene():
    from worldgen.tasks import spatial

    s = spatial.generate(3, spatial.Config(level=1))
    return s.images["image"], s.record


def test_markers_added_and_answer_with_slots(reasoner, scene):
    from planners.latent_hf import MARKERS

    tok = reasoner.processor.tokenizer
    assert all(tok.convert_tokens_to_ids(m) != tok.unk_token_id for m in MARKERS)
    image, rec = scene
    a = reasoner.answer(image, rec["question"], rec["options"], num_slots=3)
    gh, gw = a.grid
    assert a.slots.shape == (3, 64) and a.attention.shape == (3, gh, gw)
    assert np.isclose(a.posterior.sum(), 1.0) and a.answer in rec["options"]
    d = reasoner.answer(image, rec["question"], rec["options"], num_slots=0)
    assert d.slots.shape == (0, 64)


def test_sft_and_one_gepo_step_on_the_tiny_vlm(reasoner, scene):
    from planners.latent import replay, rollout
    from training.gelvr_rl import RLRecipe, replay_group, rollout_group
    from training.gelvr_sft import SFTRecipe, latent_sft_losses
    from training.gepo import GePOLoss, group_advantages

    image, rec = scene
    model = reasoner.model.train()
    pre = reasoner.prefix([image], [rec["question"]], [rec["options"]])
    letter = torch.tensor([reasoner.letter_ids(4)[rec["answer_index"]]])
    targets = pre["image"][:, :3].detach()  # any three vision tokens: the loss path, not the ROI rule, is under test
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = latent_sft_losses(reasoner, pre, targets, letter, SFTRecipe(variant="full", num_slots=3))
    assert set(losses) == {"ce", "pt", "gram", "cross"}
    loss = sum(losses.values())
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)

    # replay reproduces the rollout; then one GePO step on G = 4 rollouts of the prompt
    with torch.no_grad():
        pre = reasoner.prefix([image] * 4, [rec["question"]] * 4, [rec["options"]] * 4)
        r = rollout(reasoner, pre, 3)
        rp = replay(reasoner, pre, r.slot_inputs)
    assert torch.allclose(rp["answer_logits"], r.answer_logits, atol=1e-4)
    recipe = RLRecipe(group=4, kappa=20.0)
    roll = rollout_group(reasoner, pre, lambda ans: ans == letter.item(), recipe, torch.Generator().manual_seed(0), 3)
    adv = group_advantages(roll["reward"].view(1, 4)).reshape(-1)
    with torch.no_grad():
        ref = replay_group(reasoner, pre, roll, recipe)
    now = replay_group(reasoner, pre, roll, recipe)
    loss, metrics = GePOLoss(kappa=20.0)(adv=adv, logp=now["logp"], logp_old=roll["logp_old"], logp_ref=ref["logp"],
                                         text_mask=roll["text_mask"], mu=now["mu"], mu_old=roll["mu_old"], mu_ref=ref["mu"],
                                         z=roll["z"], latent_mask=roll["started"], image_tokens=ref["image"])
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and metrics["clipfrac_text"] == 0.0
    model.eval()


def test_saved_hf_pipeline_reloads_with_identical_output(reasoner, scene, tmp_path):
    from pipelines.latent_reasoning import LatentReasoningPipeline

    image, rec = scene
    pipe = LatentReasoningPipeline.build(components={"reasoner": reasoner}, config={"num_slots": 2})
    out = pipe(image, rec["question"], rec["options"])
    pipe.save_pretrained(tmp_path / "p")
    again = LatentReasoningPipeline.from_pretrained(tmp_path / "p")(image, rec["question"], rec["options"])
    assert again.posterior == pytest.approx(out.posterior, abs=1e-6) and again.answer == out.answer
    assert np.allclose(again.slots, out.slots, atol=1e-5)
