"""The shipped built-in weights: cards match their evaluation, and a small held-out slice re-run agrees.

Skipped when weights/builtin/<model> has not been trained yet (`make weights`).
"""

import json
import re
from pathlib import Path

import pytest

WEIGHTS = Path(__file__).resolve().parents[1] / "weights" / "builtin"


def _need(model: str) -> Path:
    d = WEIGHTS / model
    if not (d / "model.safetensors").is_file():
        pytest.skip(f"no shipped {model} weights (run `make weights`)")
    return d


def _card_numbers(d: Path) -> dict:
    rows = re.findall(r"^\| (\S+) \| ([-0-9.]+|None) \|$", (d / "card.md").read_text(), re.M)
    return {k: (None if v == "None" else float(v)) for k, v in rows}


@pytest.mark.parametrize("model", ["vit", "vlm"])
def test_card_reports_the_evaluation_and_size_limit(model):
    d = _need(model)
    evaluation = json.loads((d / "eval.json").read_text())
    scalars = {k: v for k, v in evaluation.items() if not isinstance(v, list)}  # lists (sample counts) are shown as text
    assert _card_numbers(d) == {k: (None if v is None else float(v)) for k, v in scalars.items()}
    assert (d / "model.safetensors").stat().st_size <= 40 * 2**20
    assert "Reproduce" in (d / "card.md").read_text() and "## Design notes and measurements" in (d / "card.md").read_text()


@pytest.mark.parametrize("model", ["vit", "vlm"])
def test_train_config_beside_the_weights_is_the_recipe_default(model):
    """The shipped runs predate train_config.json: theirs is reconstructed from the cards and the code defaults."""
    from planners.builtin.vit import ViTConfig
    from training.common import load_recipe
    from training.vit import ViTTrainConfig
    from training.vlm import VLMTrainConfig

    d = _need(model)
    cls = {"vit": ViTTrainConfig, "vlm": VLMTrainConfig}[model]
    saved = load_recipe(cls, d)
    if model == "vlm":  # filled in from the ViT and the vocabulary when the run started
        assert saved.architecture.vit == ViTConfig() and len(saved.architecture.vocab) > 3
        saved.architecture.vit, saved.architecture.vocab, saved.architecture.count_words = ViTConfig(), [], []
    assert saved == cls().resolved()
    assert "reconstructed" in json.loads((d / "train_config.json").read_text())["provenance"]


def test_vit_slice_reproduces_the_card():
    from planners.builtin.text import MiniLM
    from planners.builtin.vit import BuiltinViT
    from training.vit import evaluate_vit

    d = _need("vit")
    card = json.loads((d / "eval.json").read_text())
    got = evaluate_vit(BuiltinViT.from_pretrained(d), MiniLM(), n_attr=80, n_retrieval=100, sizes=(64,))
    for key in ("zeroshot_color_acc@64", "zeroshot_shape_acc@64", "zeroshot_size_acc@64"):
        assert abs(got[key] - card[key]) <= 0.12, (key, got[key], card[key])  # 80-frame slice of the 300-frame set
    assert got["t2i_R@1_of_100"] == card["t2i_R@1_of_100"]  # the same 100 candidates: exactly reproducible


def test_vlm_slice_reproduces_the_card():
    from planners.builtin.text import MiniLM
    from planners.builtin.vlm import BuiltinVLMModel
    from training.vlm import VLMObjective, evaluate_vlm

    d = _need("vlm")
    card = json.loads((d / "eval.json").read_text())
    model = BuiltinVLMModel.from_pretrained(d)
    got = evaluate_vlm(model, VLMObjective(MiniLM(), model.config.vocab), n_per_kind=8, n_probe=8, n_caption=20)
    assert abs(got["acc_overall"] - card["acc_overall"]) <= 0.15, (got, card)
    assert abs(got["caption_color_shape_motion"] - card["caption_color_shape_motion"]) <= 0.2, (got, card)


def test_vlm_perception_benchmark_runs_on_the_shipped_weights(tmp_path):
    from benchmarks.vlm_perception import main

    _need("vlm")
    out = tmp_path / "p.json"
    assert main(["--n", "3", "--calib-questions", "2", "--sizes", "64,16", "--out", str(out)]) == 0
    big, tiny = json.loads(out.read_text())["rows"]
    assert (big["size"], tiny["size"]) == (64, 16) and big["probes_determined"] > 0
    assert abs(big["object_diameter_px"]["small"] - 4 * tiny["object_diameter_px"]["small"]) < 0.3
    # a 16x16 frame shows a large object ~5 px wide: the count probes see it far less often than at 64x64
    seen = lambda r: sum(r["recall_by_object_size"].get(k, 0) * r["objects_by_size"][k] for k in r["objects_by_size"])  # noqa: E731
    assert seen(tiny) < seen(big)
    assert set(big["calibration"]) >= {"calib_gap_overall", "calib_n_counting"}


@pytest.mark.parametrize("model", ["latent_reasoner_sft", "latent_reasoner"])
def test_latent_reasoner_weights_have_a_card_and_reproduce_a_val_slice(model, tmp_path):
    from planners.builtin.text import MiniLM
    from planners.latent_builtin import BuiltinLatentReasoner
    from training.gelvr_data import SpatialSet
    from training.gelvr_sft import evaluate

    d = _need(model)
    card = (d / "card.md").read_text()
    assert "Reproduce" in card and (d / "model.safetensors").stat().st_size <= 40 * 2**20
    history = json.loads((d / "eval.json").read_text())["val_history"]
    last = history[-1]
    reported = last.get("val_accuracy", last.get("accuracy"))
    m = BuiltinLatentReasoner.from_pretrained(d)
    got = evaluate(m, SpatialSet("val", 40, m, MiniLM()), m.config.num_slots)
    assert abs(got["accuracy"] - reported) <= 0.2, (got, reported)  # 40 of the 300 items the card reports
