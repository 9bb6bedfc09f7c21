"""The Bernini training scripts end to end at toy size: train, save, card, resume, and a refused --out."""

import json

import pytest
import torch

from core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("module", ["training.renderer", "training.planner"])
def test_tiny_run_writes_weights_card_and_resumes(module, tmp_path):
    import importlib

    main = importlib.import_module(module).main
    out = tmp_path / "run"
    assert main(["--tiny", "--out", str(out)]) == 0
    for name in ("config.json", "model.safetensors", "train_config.json", "eval.json", "card.md"):
        assert (out / name).is_file(), name
    ev = json.loads((out / "eval.json").read_text())
    assert ev["steps"] == 3 and set(ev["test"]) == {"t2v", "v2v", "r2v"}
    assert main(["--tiny", "--out", str(out), "--eval-only"]) == 0  # the saved model loads and evaluates again
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="--out"):
        main(["--tiny", "--out", str(tmp_path / "other")])
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_planner_regression_loss_flag_trains_the_read_out_and_guards_resume(tmp_path):
    from planners.semantic import SemanticPlanner
    from training.planner import main

    out = tmp_path / "reg"
    assert main(["--tiny", "--out", str(out), "--regression-loss", "0.5", "--stop-at", "2"]) == 0
    assert json.loads((out / "train_config.json").read_text())["planner"]["regression_weight"] == 0.5
    with pytest.raises(InputError, match="--regression-loss"):  # the checkpoint holds the read-out
        main(["--tiny", "--out", str(out), "--regression-loss", "0"])
    for bad in (["--regression-loss", "-1"], ["--regression-loss", "1", "--head", "codebook"]):
        with pytest.raises(InputError, match="--regression-loss"):
            main(["--tiny", "--out", str(tmp_path / "bad"), *bad])
    assert not (tmp_path / "bad").exists()  # refused before the run folder is made
    assert main(["--tiny", "--out", str(out)]) == 0  # resumes with its saved recipe
    assert SemanticPlanner.from_pretrained(out).config.regression_weight == 0.5
    assert "--regression-loss 0.5" in (out / "card.md").read_text()


def test_planner_position_mask_tokens_flag_sizes_the_table_and_guards_resume(tmp_path):
    from planners.semantic import SemanticPlanner
    from training.planner import main

    out = tmp_path / "pos"
    assert main(["--tiny", "--out", str(out), "--position-mask-tokens", "--stop-at", "2"]) == 0
    planner = json.loads((out / "train_config.json").read_text())["planner"]
    cells = planner["plan_grid"][0] * planner["plan_grid"][1] * planner["plan_grid"][2]
    assert planner["position_mask_tokens"] and planner["num_mask_tokens"] == cells
    plain = tmp_path / "plain"
    assert main(["--tiny", "--out", str(plain), "--stop-at", "1"]) == 0
    with pytest.raises(InputError, match="--position-mask-tokens"):  # its checkpoint holds one shared row
        main(["--tiny", "--out", str(plain), "--position-mask-tokens"])
    assert main(["--tiny", "--out", str(out)]) == 0  # resumes with its saved recipe
    saved = SemanticPlanner.from_pretrained(out)
    assert saved.config.position_mask_tokens and saved.mask_tokens.shape[1] == cells
    assert "--position-mask-tokens" in (out / "card.md").read_text()


def test_planner_attribute_loss_flag_trains_the_read_out_and_guards_resume(tmp_path):
    from planners.semantic import SemanticPlanner
    from training.planner import attribute_groups, main

    out = tmp_path / "attr"
    assert main(["--tiny", "--out", str(out), "--attribute-loss", "0.5", "--stop-at", "2"]) == 0
    recipe = json.loads((out / "train_config.json").read_text())
    assert recipe["planner"]["attribute_classes"] == list(attribute_groups()) and recipe["planner"]["attribute_weight"] == 0.5
    with pytest.raises(InputError, match="--attribute-loss"):  # the checkpoint holds the read-out
        main(["--tiny", "--out", str(out), "--attribute-loss", "0"])
    with pytest.raises(InputError, match="--attribute-loss"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--attribute-loss", "-1"])
    with pytest.raises(InputError, match="--full-mask"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--full-mask", "2"])
    assert not (tmp_path / "bad").exists()  # refused before the run folder is made
    assert main(["--tiny", "--out", str(out)]) == 0  # resumes with its saved recipe
    assert SemanticPlanner.from_pretrained(out).config.attribute_classes == attribute_groups()
    full = tmp_path / "full"
    assert main(["--tiny", "--out", str(full), "--full-mask", "0.5"]) == 0
    assert SemanticPlanner.from_pretrained(full).config.full_mask_prob == 0.5
    # an inference setting: --eval-only may change it on the saved model
    assert main(["--tiny", "--out", str(full), "--eval-only", "--denoising-steps", "4", "--txt-cfg", "6"]) == 0
    assert SemanticPlanner.from_pretrained(full).config.denoising_steps == 4
    assert SemanticPlanner.from_pretrained(full).config.txt_cfg == 6
    with pytest.raises(InputError, match="--txt-cfg"):
        main(["--tiny", "--out", str(full), "--eval-only", "--txt-cfg", "0.5"])
    assert json.loads((full / "train_config.json").read_text())["planner"]["denoising_steps"] == 4
    with pytest.raises(InputError, match="--denoising-steps"):
        main(["--tiny", "--out", str(full), "--eval-only", "--denoising-steps", "0"])


def test_renderer_fine_tune_flags_start_from_saved_weights_and_set_the_noise_levels(tmp_path):
    from renderers.builtin import BuiltinRenderer
    from training.renderer import main

    base = tmp_path / "base"
    assert main(["--tiny", "--out", str(base), "--stop-at", "1"]) == 0
    fine = tmp_path / "fine"
    assert main(["--tiny", "--out", str(fine), "--init", str(base), "--lr", "3e-4", "--sigma-logit-mean", "0",
                 "--sigma-logit-std", "1.2", "--stop-at", "1"]) == 0
    recipe = json.loads((fine / "train_config.json").read_text())
    assert recipe["init"] == str(base) and recipe["train"]["lr"] == 3e-4
    assert (recipe["renderer"]["sigma_logit_mean"], recipe["renderer"]["sigma_logit_std"]) == (0.0, 1.2)
    assert BuiltinRenderer.from_pretrained(fine).config.sigma_logit_std == 1.2
    with pytest.raises(InputError, match="--init"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--init", str(tmp_path / "nothing")])
    with pytest.raises(InputError, match="--sigma-logit-std"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--sigma-logit-std", "0"])
    with pytest.raises(InputError, match="--lr"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--lr", "-1"])
    drafted = tmp_path / "drafted"  # the tiny recipe's renderer has patch 8 = plan_patch, so a conv draft fits
    assert main(["--tiny", "--out", str(drafted), "--init", str(base), "--plan-draft", "8", "--draft-kind", "conv",
                 "--draft-residual", "--stop-at", "1"]) == 0
    cfg = BuiltinRenderer.from_pretrained(drafted).config
    assert (cfg.plan_draft, cfg.draft_kind, cfg.draft_residual) == (8, "conv", True)
    with pytest.raises(InputError, match="--draft-residual"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--draft-residual"])
    stage = tmp_path / "draft_only"  # the first stage: only the draft learns, and no EMA holds it at its zero start
    assert main(["--tiny", "--out", str(stage), "--init", str(drafted), "--plan-draft", "8", "--draft-kind", "conv",
                 "--draft-residual", "--draft-only", "--lr", "1e-2", "--stop-at", "2"]) == 0
    before, after = BuiltinRenderer.from_pretrained(drafted).state_dict(), BuiltinRenderer.from_pretrained(stage).state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(k.startswith("draft.") for k in moved)
    assert json.loads((stage / "train_config.json").read_text())["train"]["ema"] is None
    no_ema = tmp_path / "no_ema"
    assert main(["--tiny", "--out", str(no_ema), "--init", str(base), "--ema", "0", "--guidance-scale", "1.5", "--stop-at", "1"]) == 0
    assert json.loads((no_ema / "train_config.json").read_text())["train"]["ema"] is None
    assert BuiltinRenderer.from_pretrained(no_ema).config.guidance_scale == 1.5
    with pytest.raises(InputError, match="--guidance-scale"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--guidance-scale", "0.5"])
    with pytest.raises(InputError, match="--ema"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--ema", "1.5"])


def test_planner_mrope_layout_flag_is_saved_and_guards_resume(tmp_path):
    from planners.semantic import SemanticPlanner
    from training.planner import main

    out = tmp_path / "irope"
    assert main(["--tiny", "--out", str(out), "--mrope-layout", "interleaved", "--stop-at", "1"]) == 0
    assert json.loads((out / "train_config.json").read_text())["backbone"]["mrope_layout"] == "interleaved"
    with pytest.raises(InputError, match="--mrope-layout"):  # the checkpoint's positions were learnt that way
        main(["--tiny", "--out", str(out), "--mrope-layout", "sections"])
    assert main(["--tiny", "--out", str(out)]) == 0  # resumes with its saved layout
    assert SemanticPlanner.from_pretrained(out).backbone.config.mrope_layout == "interleaved"
    # a fine-tune from that run's raw checkpoint weights, with the inference guidance saved in the config
    raw = tmp_path / "raw"
    assert main(["--tiny", "--out", str(raw), "--init", str(out), "--init-raw", "--mrope-layout", "interleaved",
                 "--img-cfg", "2.5", "--stop-at", "1"]) == 0
    recipe = json.loads((raw / "train_config.json").read_text())
    assert recipe["init_raw"] is True and recipe["planner"]["img_cfg"] == 2.5
    assert SemanticPlanner.from_pretrained(raw).config.img_cfg == 2.5
    with pytest.raises(InputError, match="--init-raw"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--init", str(raw / "backbone"), "--init-raw"])
    with pytest.raises(InputError, match="--img-cfg"):
        main(["--tiny", "--out", str(tmp_path / "bad"), "--img-cfg", "0.5"])


def test_a_recipe_script_reports_a_bad_flag_in_one_line(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "training.renderer", "--out", str(tmp_path / "run"), "--lr", "-1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "error: invalid --lr=-1.0: use a positive learning rate, e.g. 2e-4"
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()  # checked before the run folder is made
