"""The training loop (determinism, resume) and a few real steps of each built-in objective."""

import json
import re

import numpy as np
import pytest
import torch
from torch import nn

from planners.builtin.text import MiniLM
from planners.builtin.vit import BuiltinViT, ViTConfig
from planners.builtin.vlm import BuiltinVLMModel, VLMConfig
from training.loop import Trainer, TrainConfig, lr_at


def _toy_batches(start=0):
    step = start
    while True:
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 4, generator=g)
        yield x, x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
        step += 1


def _toy_loss(model, batch):
    x, y = batch
    loss = nn.functional.mse_loss(model(x).squeeze(-1), y)
    return loss, {}


def _toy(tmp, steps, resume=False, ema=None, until=None):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    cfg = TrainConfig(steps=steps, lr=0.2, warmup=2, weight_decay=0.0, ckpt_every=3, eval_every=100, log_every=1, ema=ema)
    tr = Trainer(model, _toy_loss, cfg, tmp, evaluate=lambda m: {"w0": float(m.weight[0, 0].detach())}, progress=False)
    if resume:
        tr.load_checkpoint()
    tr.fit(_toy_batches(tr.step), until=until)
    return tr


def test_schedule_warmup_and_cosine():
    cfg = TrainConfig(steps=100, lr=1.0, warmup=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == 0.1 and abs(lr_at(9, cfg) - 1.0) < 1e-9
    assert abs(lr_at(100, cfg) - 0.1) < 1e-9 and lr_at(50, cfg) < lr_at(20, cfg)


def test_trainer_learns_is_deterministic_and_resumes_exactly(tmp_path):
    a = _toy(tmp_path / "a", 60)
    b = _toy(tmp_path / "b", 60)
    wa = a.eval_model().weight.detach()
    assert torch.equal(wa, b.eval_model().weight.detach())
    assert torch.allclose(wa, torch.tensor([[1.0, -2.0, 0.5, 3.0]]), atol=0.2)
    _toy(tmp_path / "c", 60, until=10)  # stopped after a checkpoint at step 10 ...
    c = _toy(tmp_path / "c", 60, resume=True)  # ... and resumed
    assert c.history[0]["step"] == 1 and torch.allclose(c.eval_model().weight, wa, atol=1e-6)
    assert (tmp_path / "a" / "checkpoint" / "model.safetensors").is_file() and (tmp_path / "a" / "history.json").is_file()
    e = _toy(tmp_path / "e", 60, ema=0.9)
    assert not torch.equal(e.eval_model().weight, e.accelerator.unwrap_model(e.model).weight)


def test_periodic_and_final_evaluation(tmp_path):
    evals = {}
    for at_end in (True, False):
        torch.manual_seed(0)
        cfg = TrainConfig(steps=7, lr=0.1, warmup=1, ckpt_every=100, eval_every=3, eval_at_end=at_end)
        tr = Trainer(nn.Linear(4, 1), _toy_loss, cfg, tmp_path / str(at_end), evaluate=lambda m: {"ok": 1.0}, progress=False)
        tr.fit(_toy_batches(0))
        evals[at_end] = [h["step"] for h in tr.history if "eval" in h]
    assert evals == {True: [3, 6, 7], False: [3, 6]}


def test_vit_objective_steps(tmp_path):
    from training.vit import ViTDataConfig, ViTObjective, ViTWithAux, evaluate_vit, make_batch

    torch.manual_seed(0)
    vit = BuiltinViT(ViTConfig(width=32, depth=1, heads=2))
    text = MiniLM()
    batch = make_batch(0, ViTDataConfig(batch_size=8))
    assert batch["images"].shape[0] == 8 and len(batch["texts"]) == 24 and batch["attributes"].shape == (8, 21)
    assert batch["positives"][np.arange(8), np.arange(8)].all() and batch["positives"][np.arange(8), 8 + np.arange(8)].all()
    tr = Trainer(ViTWithAux(vit), ViTObjective(text), TrainConfig(steps=2, warmup=1, ckpt_every=2), tmp_path, progress=False)
    tr.fit(iter([make_batch(i, ViTDataConfig(batch_size=8)) for i in range(2)]))
    metrics = evaluate_vit(tr.eval_model().vit, text, n_attr=10, n_retrieval=10, sizes=(64,))
    assert 0 <= metrics["zeroshot_color_acc@64"] <= 1 and "t2i_R@1_of_100" in metrics


def test_vlm_objective_steps(tmp_path):
    from training.vlm import VLMDataConfig, VLMObjective, caption_vocab, evaluate_vlm, make_items

    torch.manual_seed(0)
    vit_cfg = ViTConfig(width=32, depth=1, heads=2)
    model = BuiltinVLMModel(VLMConfig(d_model=32, layers=1, heads=2, vit=vit_cfg, vocab=caption_vocab()))
    objective = VLMObjective(MiniLM(), model.config.vocab)
    data = VLMDataConfig(batch_size=3, caption_items=2, max_frames_start=4, max_frames_end=6)
    items = make_items(0, data)
    assert all(len(it["frames"]) >= 1 for it in items if "trajectories" not in it)
    qa = [it for it in items if "target" in it]
    assert all(abs(it["target"].sum() - 1) < 1e-6 for it in qa)
    (traj,) = [it for it in items if "trajectories" in it]
    assert traj["trajectories"].shape == (data.trajectories, 12, 2) and len(traj["motions"]) == data.trajectories
    tr = Trainer(model, objective, TrainConfig(steps=2, warmup=1, ckpt_every=2), tmp_path, progress=False)
    tr.fit(iter([make_items(i, data) for i in range(2)]))
    metrics = evaluate_vlm(tr.eval_model(), objective, n_per_kind=1, n_probe=2, n_caption=2)
    assert 0 <= metrics["acc_overall"] <= 1 and "caption_color_shape_motion" in metrics


def test_vlm_motion_warm_start_fits_only_the_motion_path():
    from training.vlm import caption_vocab, warm_start_motion

    torch.manual_seed(0)
    model = BuiltinVLMModel(VLMConfig(d_model=32, layers=1, heads=2, vit=ViTConfig(width=32, depth=1, heads=2), vocab=caption_vocab()))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = warm_start_motion(model, seed=0, clips=2, steps=3, trajectories=32)
    assert np.isfinite(out["position_rmse"]) and np.isfinite(out["motion_loss"])
    changed = {k.split(".")[0] for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {"objectness", "where_offset", "trajectory", "motion_head"}


def test_vlm_attribute_warm_start_fits_and_freezes_only_the_detector():
    from training.vlm import attribute_phrases, caption_vocab, warm_start_attributes

    torch.manual_seed(0)
    model = BuiltinVLMModel(VLMConfig(d_model=32, layers=1, heads=2, vit=ViTConfig(width=32, depth=1, heads=2), vocab=caption_vocab()))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = warm_start_attributes(model, MiniLM(), seed=0, worlds=2, frames=2, steps=150)
    changed = {k.split(".")[0] for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {"attributes", "text_attributes"}
    assert not any(p.requires_grad or p.grad is not None for p in [*model.attributes.parameters(), *model.text_attributes.parameters()])
    # the phrase templates are few and fixed: the text head learns them outright
    assert out["text_acc"] > 0.9 and len(attribute_phrases()) > 100
    assert out["patches"] == 2 * 2 * (64 + 16)  # worlds x frames x (8x8 patches at 64 px + 4x4 at 32 px)


def test_vlm_posterior_mixes_with_uniform_by_sufficiency():
    from planners.builtin.vlm import collate
    from training.vlm import caption_vocab

    torch.manual_seed(0)
    model = BuiltinVLMModel(VLMConfig(d_model=32, layers=1, heads=2, vit=ViTConfig(width=32, depth=1, heads=2), vocab=caption_vocab())).eval()
    items = [{"patches": torch.randn(3, 8, 8, 32), "frame_emb": torch.randn(3, 384), "question": torch.randn(5, 384), "options": torch.randn(n, 384)} for n in (4, 2)]
    batch = collate(items)
    with torch.no_grad():
        enc = model.encode(batch)
        assert enc.option_grounding is None and enc.sufficiency_logit is None  # caches, filled by the read-outs
        logp = model.option_logits(enc, batch["option_mask"])
        assert torch.allclose(logp.exp().sum(-1), torch.ones(2), atol=1e-5) and torch.isinf(logp[1, 2:]).all()
        assert enc.sufficiency_logit.shape == (2,) and enc.option_grounding.shape == (2, 4, 3) and enc.probe_grounding is not None
        assert model.grounding(enc) is enc.option_grounding  # computed once per encoding
        torch.nn.init.constant_(model.sufficiency_out.bias, -40.0)  # "the frames decide nothing" -> uniform
        p = model.option_logits(model.encode(batch), batch["option_mask"]).exp()
    assert torch.allclose(p[0], torch.full((4,), 0.25), atol=1e-4) and torch.allclose(p[1, :2], torch.full((2,), 0.5), atol=1e-4)


def test_card_target_summary_names_every_miss_with_its_value():
    from training.vlm import target_summary

    metrics = {"acc_needle": 0.9, "acc_counting": 0.55, "acc_overall": 0.86, "calib_gap_needle": 0.6,
               "calib_n_needle": [10, 10], "calib32_gap_counting": 0.1, "caption_color_shape_motion": 0.7}
    lines = target_summary(metrics).splitlines()
    assert "`acc_overall` >= 0.85: met (0.860)" in lines[0]
    assert "below target: acc_counting 0.550" in lines[1] and "needle" not in lines[1]
    assert "`calib_gap_*` >= 0.25: met by all 1" in lines[2]
    assert "calib32_gap_counting 0.100" in lines[3]
    assert "missed (0.700)" in lines[4]


# ---------------------------------------------------------------------------- recipes, output folders, the package


def test_vlm_training_package_keeps_its_names_and_entry_point(capsys):
    import training.vlm as vlm
    from training.vlm import data, evaluation, objective, train, warm_starts

    used_elsewhere = ["VLMDataConfig", "VLMObjective", "caption_vocab", "evaluate_vlm", "make_items", "warm_start_motion", "attribute_phrases",
                      "warm_start_attributes", "target_summary", "calibration_gaps", "frame_times", "render", "train_vlm", "main", "VLMTrainConfig"]
    assert all(callable(getattr(vlm, name)) for name in used_elsewhere)
    assert (vlm.make_items, vlm.VLMObjective, vlm.warm_start_motion, vlm.evaluate_vlm, vlm.train_vlm) == (
        data.make_items, objective.VLMObjective, warm_starts.warm_start_motion, evaluation.evaluate_vlm, train.train_vlm)
    with pytest.raises(SystemExit) as exit_:
        vlm.main(["--help"])
    assert exit_.value.code == 0 and "--vit" in capsys.readouterr().out


def test_recipes_round_trip_through_train_config_json(tmp_path):
    from training.common import load_recipe, save_recipe
    from training.vit import ViTTrainConfig
    from training.vlm import VLMDataConfig, VLMTrainConfig

    vlm = VLMTrainConfig(steps=20).resolved()
    assert (vlm.warmup, vlm.data.curriculum_steps) == (3, 10) and VLMTrainConfig().resolved().warmup == 141  # the shipped run's
    save_recipe(vlm, tmp_path, "vlm", "a test")
    back = load_recipe(VLMTrainConfig, tmp_path)
    assert back == vlm and isinstance(back.data, VLMDataConfig) and isinstance(back.data.kind_weights, tuple)
    assert isinstance(back.architecture.vit, ViTConfig)
    saved = json.loads((tmp_path / "train_config.json").read_text())
    assert (saved["model"], saved["recipe"], saved["provenance"]) == ("builtin-vlm", "VLMTrainConfig", "a test")
    vit = ViTTrainConfig().resolved()
    save_recipe(vit, tmp_path / "vit", "vit", "a test")
    assert load_recipe(ViTTrainConfig, tmp_path / "vit") == vit and vit.warmup == 81 and load_recipe(ViTTrainConfig, tmp_path / "none") is None


def test_train_vit_saves_its_recipe_and_a_resumed_run_reads_it_back(tmp_path, monkeypatch):
    import training.vit as tv
    from training.common import load_recipe

    monkeypatch.setattr(tv, "evaluate_vit", lambda model, text, *a, **k: {"zeroshot_color_acc@64": 0.5})  # the full one takes minutes
    recipe = tv.ViTTrainConfig(steps=2, ckpt_every=1, data=tv.ViTDataConfig(batch_size=4), architecture=ViTConfig(width=32, depth=1, heads=2))
    out = tmp_path / "vit"
    tv.train_vit(out, recipe=recipe, progress=False)
    assert {"model.safetensors", "config.json", "train_config.json", "card.md", "eval.json"} <= {p.name for p in out.iterdir()}
    assert load_recipe(tv.ViTTrainConfig, out) == recipe.resolved()
    assert "Design notes and measurements" in (out / "card.md").read_text()  # carried over from the shipped card
    tv.train_vit(out, steps=3, progress=False)  # resumes: the saved recipe (this tiny ViT), one more step
    again = load_recipe(tv.ViTTrainConfig, out)
    assert again.steps == 3 and again.architecture.width == 32 and again.data.batch_size == 4
    assert json.loads((out / "run" / "history.json").read_text())["history"][-1]["step"] == 3


def test_train_vlm_saves_its_recipe_and_a_resumed_run_reads_it_back(tmp_path, monkeypatch):
    import training.vlm.train as tt
    from training.common import load_recipe
    from training.vlm import VLMDataConfig, VLMTrainConfig, caption_vocab

    BuiltinViT(ViTConfig(width=32, depth=1, heads=2)).save_pretrained(tmp_path / "vit")
    monkeypatch.setattr(tt, "evaluate_vlm", lambda model, objective, *a, **k: {"acc_overall": 0.5})
    monkeypatch.setattr(tt, "native_bf16", lambda: False)  # as on an AVX2-only CPU: bf16 autocast would be emulated
    recipe = VLMTrainConfig(steps=1, ckpt_every=1, vit=str(tmp_path / "vit"), attribute_worlds=1, attribute_frames=1, attribute_steps=2,
                            motion_clips=1, motion_steps=1, motion_trajectories=8, architecture=VLMConfig(d_model=32, layers=1, heads=2),
                            data=VLMDataConfig(batch_size=2, caption_items=1, max_frames_start=4, max_frames_end=4, trajectories=8))
    out = tmp_path / "vlm"
    tt.train_vlm(out, recipe=recipe, progress=False)
    saved = load_recipe(VLMTrainConfig, out)
    assert saved.architecture.vit == ViTConfig(width=32, depth=1, heads=2) and saved.architecture.vocab == caption_vocab()
    assert BuiltinVLMModel.is_saved_in(out) and "Design notes and measurements" in (out / "card.md").read_text()
    assert saved.fast_vit is False  # adjusted (with a warning) and recorded
    tt.train_vlm(out, steps=2, progress=False)  # resumes with the saved recipe
    again = load_recipe(VLMTrainConfig, out)
    assert again.steps == 2 and again.architecture.d_model == 32 and again.vit == str(tmp_path / "vit")


def test_output_folder_rules(tmp_path):
    from core.errors import InputError
    from training.common import SHIPPED, check_out_dir, check_vit_dir

    assert check_out_dir(tmp_path / "new", "vit") == tmp_path / "new" and check_out_dir(tmp_path, "vlm") == tmp_path  # new / empty
    assert check_out_dir(SHIPPED / "vit", "vit") == SHIPPED / "vit"  # named explicitly: allowed
    refusals = {
        "shipped vit weights; to overwrite them, pass --out": lambda: check_out_dir(SHIPPED / "vit", "vit", explicit=False),
        "shipped vlm weights, not a vit run": lambda: check_out_dir(SHIPPED / "vlm", "vit"),
    }
    (tmp_path / "file.txt").write_text("x")
    refusals["that is a file"] = lambda: check_out_dir(tmp_path / "file.txt", "vit")
    (tmp_path / "unrelated").mkdir()
    (tmp_path / "unrelated" / "notes.txt").write_text("x")
    refusals["1 entries and no saved model"] = lambda: check_out_dir(tmp_path / "unrelated", "vlm")
    BuiltinViT(ViTConfig(width=32, depth=1, heads=2)).save_pretrained(tmp_path / "a_vit")
    refusals["a saved builtin-vit model, not an earlier `atelier train vlm` run"] = lambda: check_out_dir(tmp_path / "a_vit", "vlm")
    refusals["no built-in ViT there"] = lambda: check_vit_dir(tmp_path / "unrelated")
    for message, call in refusals.items():
        with pytest.raises(InputError, match=re.escape(message)):
            call()
    assert check_out_dir(tmp_path / "a_vit", "vit") == tmp_path / "a_vit" and check_vit_dir(tmp_path / "a_vit") == tmp_path / "a_vit"


def test_cli_train_refuses_bad_out_and_vit_before_training(tmp_path, capsys):
    from app.cli import main
    from training.common import SHIPPED

    (tmp_path / "file.txt").write_text("x")
    cases = {("vit", "--out", str(tmp_path / "file.txt")): "that is a file",
             ("vit", "--out", str(SHIPPED / "vlm")): "shipped vlm weights",
             ("vlm", "--out", str(tmp_path / "new"), "--vit", str(tmp_path / "missing")): "no built-in ViT there"}
    for args, message in cases.items():
        assert main(["train", *args]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_eval_only_facts_come_from_eval_json_else_the_loops_own_log(tmp_path):
    import json

    from training.common import earlier_run_facts

    assert earlier_run_facts(tmp_path) == {"steps": None, "train_minutes": None, "sec_per_step": None}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "history.json").write_text(json.dumps({"config": {}, "history": [
        {"step": 1400, "loss": 1.0, "sec_per_step": 0.7}, {"step": 1500, "eval": {"x": 1}}]}))
    assert earlier_run_facts(tmp_path) == {"steps": 1500, "train_minutes": None, "sec_per_step": 0.7}
    (tmp_path / "eval.json").write_text(json.dumps({"steps": 1500, "train_minutes": 17.5, "sec_per_step": 0.69}))
    assert earlier_run_facts(tmp_path) == {"steps": 1500, "train_minutes": 17.5, "sec_per_step": 0.69}
