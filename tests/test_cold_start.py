"""A fast cold start (issue 50): `atelier --help`, the light verbs, every pipeline verb's --help and its argument
errors never import torch (nor transformers / diffusers); the verb list it prints is the apps' own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipelines.registry import PIPELINE_APPS, PIPELINE_HELP, apps

HEAVY = ("torch", "transformers", "diffusers")


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


def _run_in_fresh_python(cases: list[list[str]]) -> tuple[list[tuple[int, str, str]], list[str]]:
    """``main(argv)`` for each case in one new interpreter: ``[(exit code, stdout, stderr)]`` and the heavy modules
    imported by then (an import by any case stays in ``sys.modules``)."""
    code = ("import contextlib, io, json, sys\nfrom app.cli import main\nresults = []\n"
            "for argv in %r:\n"
            "    out, err = io.StringIO(), io.StringIO()\n"
            "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
            "        try:\n            rc = main(argv)\n        except SystemExit as e:\n            rc = e.code\n"
            "    results.append([0 if rc is None else rc, out.getvalue(), err.getvalue()])\n"
            "print(json.dumps({'results': results, 'heavy': [m for m in %r if m in sys.modules]}))") % (cases, HEAVY)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return [tuple(r) for r in got["results"]], got["heavy"]


def _inputs_argv(app) -> list[str]:
    """The verb and its required inputs (placeholders: nothing is read before the arguments are checked)."""
    positional, flagged = [], []
    for i in app.inputs:
        if not i.required:
            continue
        if i.kind in ("texts", "images"):
            flagged += [f"--{i.name}", "a", "b"]
        elif i.flag is None:
            positional.append("x")
        else:
            flagged += [f"--{i.name}", "x"]
    return [app.verb, *positional, *flagged]


def _bad_cases(app) -> list[tuple[list[str], str]]:
    """Argument errors of ``app``'s verb and a piece of each error line: a setting below its range (the config's own
    check), the same against a saved pipeline (checked value by value), a bad choice, an unknown flag, no input."""
    settings = app.settings()
    low = next(s for s in settings if s.type is int and not s.pair and s.range and s.range[0] is not None)
    choices = [s for s in settings if s.choices]
    flag = lambda s: f"--{s.name.replace('_', '-')}"  # noqa: E731
    bad = str(int(low.range[0]) - 1)
    base = _inputs_argv(app)
    return [
        ([*base, flag(low), bad], f"atelier {app.verb}: error: invalid {low.name}={bad}: use a value in"),
        ([*base, "--pipeline", "no/such/folder", flag(low), bad], f"atelier {app.verb}: error: invalid {low.name}={bad}: use a value in"),
        ([*base, "--seed", "-1"], f"atelier {app.verb}: error: invalid generator=-1"),
        *[([*base, flag(s), "no-such-choice"], f"argument {flag(s)}: invalid choice: 'no-such-choice'") for s in choices[:1]],
        ([*base, "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        ([app.verb], "the following arguments are required"),
    ]


@pytest.mark.parametrize("verb", sorted(PIPELINE_APPS))
def test_a_verbs_help_and_argument_errors_do_not_import_torch(verb):
    app = apps()[verb]
    cases = _bad_cases(app)
    results, heavy = _run_in_fresh_python([[verb, "--help"], *(argv for argv, _ in cases)])
    assert heavy == [], f"atelier {verb} imported {heavy} before its run started"
    rc, out, err = results[0]
    assert rc == 0 and f"usage: atelier {verb}" in out and app.description.split(":")[0] in out, (out, err)
    for (argv, says), (rc, out, err) in zip(cases, results[1:]):
        assert rc == 2, (argv, rc, err)  # a usage error, as argparse's own
        assert says in err and "Traceback" not in err, (argv, err)
        if says.startswith("atelier "):  # the config's and the seed's checks: that line alone, no builtin-model notice
            assert err.strip() == err.strip().splitlines()[-1], (argv, err)


def test_the_apps_and_their_configs_do_not_import_torch():
    code = ("import sys\nfrom pipelines.registry import apps\n"
            "for app in apps().values():\n    app.settings(), app.component_specs, app.config_class()\n"
            "print([m for m in %r if m in sys.modules])") % (HEAVY,)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "[]", done.stdout


def test_an_apps_config_and_slots_are_its_pipelines():
    for app in apps().values():
        assert app.config and app.specs, app.verb  # named, so the CLI reads them without the pipeline module
        assert app.config_class is app.pipeline_class.config_class, app.verb
        assert app.component_specs is app.pipeline_class.component_specs, app.verb


def test_the_torch_free_copies_of_constants_match_their_sources():
    from pipelines.bernini.config import GUIDANCE_MODES
    from pipelines.gridprobe.config import PROMPT_STYLES
    from pipelines.latent_reasoning.config import MAX_SLOTS
    from pipelines.render_cache import CACHE_MODES
    from planners import latent, protocol
    from renderers import caching, guidance

    assert CACHE_MODES == caching.CACHE_MODES
    assert GUIDANCE_MODES == guidance.GUIDANCE_MODES
    assert PROMPT_STYLES == protocol.PROMPT_STYLES
    assert MAX_SLOTS == latent.MAX_SLOTS


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


def test_a_builtin_run_sets_one_thread_for_every_library_before_torch_loads():
    """OpenMP, MKL and OpenBLAS read their thread counts once, at load: a run of builtin models sets them first (where
    the environment names none), an asked-for count always, a run with a checkpoint leaves them alone."""
    import os

    code = """
import os, sys
from app.runner import only_builtin
from core.threads import THREAD_VARS, preset_threads
from pipelines.registry import get_app
app = get_app("ask")
_, _, comps, opts = app.split_args({"video": "x.mp4", "question": "q", "options": ["a", "b"], "selector": sys.argv[1] or None,
                                     "threads": int(sys.argv[2]) if sys.argv[2] else None})
n = preset_threads(opts.get("threads"), only_builtin(app, comps, opts))
print(n, only_builtin(app, comps, opts), [os.environ.get(v) for v in THREAD_VARS], "torch" in sys.modules)
"""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ATELIER_THREADS")}

    def run(selector: str, threads: str, **extra) -> str:
        done = subprocess.run([sys.executable, "-c", code, selector, threads], capture_output=True, text=True, timeout=120, env={**env, **extra})
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run("", "") == "1 True ['1', '1', '1'] False"
    assert run("", "", OMP_NUM_THREADS="4") == "1 True ['4', '1', '1'] False"  # the user's own setting stays
    assert run("", "3", OMP_NUM_THREADS="4") == "3 True ['3', '3', '3'] False"  # an asked-for count wins
    assert run("/some/checkpoint", "") == "None False [None, None, None] False"  # a real model: decided by its size later
    # `segment` at its defaults: a builtin planner beside the classic (OpenCV, weight-free) tracker and proposer
    from app.world_check import only_builtin
    from pipelines.registry import get_app

    segment = get_app("segment")
    assert only_builtin(segment, {}, {}) and not only_builtin(segment, {"tracker": "/models/sam2"}, {})
