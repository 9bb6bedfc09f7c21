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
