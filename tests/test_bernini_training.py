"""The Bernini training scripts end to end at toy size: train, save, card, resume, and a refused --out."""

import json

import pytest

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
