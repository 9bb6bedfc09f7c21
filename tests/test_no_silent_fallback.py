"""No silent fallback in loading: a loader loads what the folder names, or raises.

Two checks. The grep-level one reads every loader's source (``load*`` / ``from_pretrained`` in the
model packages) and refuses the two shapes a fallback takes: an ``except`` that swallows the failure
instead of raising, and a non-strict ``load_state_dict`` whose missing / unexpected keys are not then
refused. The few reviewed exceptions are listed below with why they are not fallbacks; a new one
fails until it is reviewed. The behavioural one hands every component slot of every pipeline a copy
of each shipped model folder with its weights removed: each must raise, none may return a component.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from core.errors import AtelierError
from pipelines.registry import apps

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("planners", "renderers", "trackers", "pipelines", "core", "scorers")

# (file, function, the handler's first line or the call) -> why it is not a fallback
REVIEWED = {
    ("planners/skeleton_cot.py", "load_skeleton_planner", "except"):
        "an unreadable config.json only routes the folder to the transformers loader, which raises if it is not one",
    ("renderers/loading.py", "load_renderer", "except"):
        "an unreadable config.json leaves no builtin kind, and the function ends in an InputError",
    ("planners/semantic/planner.py", "from_pretrained", "strict"):
        "the backbone loads on its own; every other missing or unexpected key is refused right after",
    ("trackers/sam2_package.py", "load_weights", "strict"):
        "missing and unexpected keys are refused right after, naming them",
}


def loader_functions():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for fn in ast.walk(tree):
                if isinstance(fn, ast.FunctionDef) and (fn.name.startswith(("load", "_load")) or fn.name == "from_pretrained"):
                    yield str(path.relative_to(ROOT)), fn


def test_no_loader_swallows_a_failure_or_loads_weights_loosely():
    found = set()
    for rel, fn in loader_functions():
        for node in ast.walk(fn):
            if isinstance(node, ast.ExceptHandler) and not any(isinstance(n, ast.Raise) for n in ast.walk(node)):
                found.add((rel, fn.name, "except"))
            if isinstance(node, ast.Call) and any(k.arg == "strict" and isinstance(k.value, ast.Constant) and k.value.value is False
                                                  for k in node.keywords):
                found.add((rel, fn.name, "strict"))
    unreviewed = sorted(found - set(REVIEWED))
    assert not unreviewed, f"a loader may swallow a failure or load weights loosely; raise instead, or review it here: {unreviewed}"
    stale = sorted(set(REVIEWED) - found)
    assert not stale, f"reviewed exceptions that no longer exist; remove them: {stale}"


def slots():
    return [(verb, slot) for verb, app in sorted(apps().items()) for slot in app.components]


@pytest.fixture(scope="module")
def hollow_folders(tmp_path_factory):
    """Each shipped model folder with its weights taken out: it names a model it cannot load."""
    root = tmp_path_factory.mktemp("hollow")
    out = []
    for src in sorted((ROOT / "weights" / "builtin").iterdir()):
        dst = root / src.name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
        out.append(dst)
    return out


@pytest.mark.parametrize("verb,slot", slots())
def test_a_folder_that_names_a_model_it_cannot_load_raises_in_every_slot(verb, slot, hollow_folders):
    spec = apps()[verb].pipeline_class.component_specs[slot]
    for folder in hollow_folders:
        with pytest.raises(AtelierError):
            spec.load(slot, str(folder))
