"""A fast cold start (issue 50): `atelier --help` and the light verbs never import torch; the verb list it prints
is the apps' own."""

from __future__ import annotations

import subprocess
import sys

from pipelines.registry import PIPELINE_HELP, apps


def _imports_torch(args: list[str]) -> tuple[bool, int]:
    code = ("import sys\nfrom app.cli import main\ntry:\n    rc = main(%r)\nexcept SystemExit as e:\n    rc = e.code\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', rc)") % (args,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    word, rc = out.stdout.split()[-2:]
    return word == "TORCH", int(rc) if rc != "None" else 0


def test_help_and_light_verbs_do_not_import_torch():
    assert _imports_torch(["--help"]) == (False, 0)
    assert _imports_torch(["nosuch"]) == (False, 2)
    assert _imports_torch(["video", "--help"]) == (False, 0)


def test_the_verb_list_is_the_apps_own():
    assert PIPELINE_HELP == {verb: app.help for verb, app in apps().items()}


def test_threads_default_to_one_for_the_builtin_models_and_are_recorded(tmp_path, monkeypatch, capsys):
    import json

    import torch

    from app.cli import main
    from test_malformed_inputs import run_cli

    monkeypatch.delenv("ATELIER_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        still = tmp_path / "still.png"
        import cv2
        import numpy as np

        cv2.imwrite(str(still), np.full((128, 128, 3), 128, np.uint8))
        base = ["reason", str(still), "-q", "What colour is the star?", "--options", "red", "blue", "--no-progress"]
        assert main([*base, "-o", str(tmp_path / "a")]) == 0
        assert json.loads((tmp_path / "a" / "config.json").read_text())["threads"] == 1
        assert main([*base, "--threads", "2", "-o", str(tmp_path / "b")]) == 0
        assert json.loads((tmp_path / "b" / "config.json").read_text())["threads"] == 2
        monkeypatch.setenv("ATELIER_THREADS", "3")
        assert main([*base, "-o", str(tmp_path / "c")]) == 0
        assert json.loads((tmp_path / "c" / "config.json").read_text())["threads"] == 3
        monkeypatch.setenv("ATELIER_THREADS", "many")
        code, err = run_cli([*base, "-o", str(tmp_path / "d")], capsys)
        assert code == 2 and "ATELIER_THREADS" in err and "Traceback" not in err
        monkeypatch.delenv("ATELIER_THREADS")
        code, err = run_cli([*base, "--threads", "0", "-o", str(tmp_path / "e")], capsys)
        assert code == 2 and "threads" in err and "Traceback" not in err
    finally:
        torch.set_num_threads(before)
