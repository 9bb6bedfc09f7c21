"""Every slot of every verb takes a hub id (issue 60): an id placed in a Hugging Face cache loads its snapshot folder and
gives what the folder gives; an id absent offline is one error naming it and the command that downloads it."""

import json
import shutil
from pathlib import Path

import pytest

from app.cli import main
from core.errors import InputError
from core.hub import parse_hub_id, resolve_model
from test_cli_parity import _files, _item, _without_times

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def place(folder: Path, repo_id: str, cache: Path, commit: str = COMMIT, ref: str = "main") -> Path:
    """``folder`` as the hub's cache holds a downloaded snapshot of ``repo_id`` (``refs/<ref>`` -> ``commit``)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(folder, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "hf_cache"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def test_what_reads_as_a_hub_id():
    assert parse_hub_id("facebook/sam2.1-hiera-tiny") == ("facebook/sam2.1-hiera-tiny", None)
    assert parse_hub_id("ByteDance/Bernini-R-Diffusers@v1.0") == ("ByteDance/Bernini-R-Diffusers", "v1.0")
    for text in ("builtin", "classic", "./a/b", "/abs/path", "~/models/x", "a/b/c", "a//b", "-x/y", "a/b@", "a b/c"):
        assert parse_hub_id(text) is None, text


def _state(component) -> dict:
    """What a loaded component computes with: its tensors (torch modules inside it) and its settings."""
    import torch

    def modules(obj, depth=0):  # the torch modules an object holds, in attributes, dicts and lists (TaskPlanners)
        if isinstance(obj, torch.nn.Module):
            return [obj]
        if depth > 2:
            return []
        values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else \
            vars(obj).values() if hasattr(obj, "__dict__") else []
        return [m for v in values for m in modules(v, depth + 1)]

    tensors = {f"{i}.{k}": v for i, m in enumerate(modules(component)) for k, v in m.state_dict().items()}
    config = component.config() if callable(getattr(component, "config", None)) else None
    return {"type": type(component), "tensors": tensors, "config": config}


def _saved_slots(verb: str, tmp_path: Path, cache: Path) -> tuple[dict, dict]:
    """The verb's default models saved as folders, each placed in the cache under an id: ``(folders, ids)`` by slot."""
    from pipelines.registry import get_app

    app = get_app(verb)
    saved = app.pipeline_class.build(defaults=app.defaults).save_pretrained(tmp_path / "saved")
    folders = {slot: saved / slot for slot in app.components if (saved / slot).is_dir()}
    if verb == "ask":
        folders["answerer"] = saved / "selector"  # the optional slot, filled so that it is tried too
    assert set(folders) == set(app.components), "a slot without a folder is not tried"
    ids = {slot: f"atelier-tests/{verb}-{slot.replace('_', '-')}" for slot in folders}
    for slot, folder in folders.items():
        place(folder, ids[slot], cache)
    return folders, ids


@pytest.mark.parametrize("verb", ["ask", "motion", "generate", "edit", "meme"])
def test_every_slot_of_a_verb_loads_the_same_model_from_a_hub_id_as_from_its_folder(verb, tmp_path, cache):
    """Each slot's loader, given the id, returns the model it returns for the folder: same class, same tensors, same
    settings (so the same outputs; the CLI runs below check whole outputs on two verbs)."""
    import torch

    from pipelines.registry import get_app

    specs = get_app(verb).component_specs
    folders, ids = _saved_slots(verb, tmp_path, cache)
    for slot in folders:
        a, b = (_state(specs[slot].load(slot, src)) for src in (ids[slot], str(folders[slot])))
        assert a["tensors"] or a["config"], f"{slot}: nothing to compare"
        assert a["type"] is b["type"] and a["config"] == b["config"] and a["tensors"].keys() == b["tensors"].keys(), slot
        assert all(torch.equal(a["tensors"][k], b["tensors"][k]) for k in a["tensors"]), slot


@pytest.mark.parametrize("verb", ["segment", "reason"])
def test_every_slot_of_a_verb_loads_from_a_hub_id_as_from_its_folder(verb, tmp_path, cache, capsys):
    """The CLI with every slot given as its id writes the files it writes with the folders."""
    from pipelines.registry import get_app

    app = get_app(verb)
    folders, ids = _saved_slots(verb, tmp_path, cache)
    args, _, _ = _item(verb, tmp_path)
    for name, chosen in (("folders", folders), ("ids", ids)):
        flags = [x for slot, value in chosen.items() for x in (f"--{app.components[slot]}", str(value))]
        assert main([verb, *args, *flags, "--seed", "0", "-o", str(tmp_path / name), "--no-progress"]) == 0, capsys.readouterr().err
    by_folder, by_id = _files(tmp_path / "folders"), _files(tmp_path / "ids")
    assert sorted(by_folder) == sorted(by_id)
    for name in by_folder:
        if name.endswith(".json"):
            assert _without_times(json.loads(by_folder[name])) == _without_times(json.loads(by_id[name])), name
        else:
            assert by_folder[name] == by_id[name], name


def test_a_saved_pipeline_loads_from_its_hub_id_at_a_revision(tmp_path, cache, capsys):
    """``--pipeline`` by id, and ``--revision`` / ``@revision`` choose the snapshot: a second revision holding a
    different reasoner folder gives that folder's answer."""
    from pipelines.registry import get_app

    app = get_app("reason")
    saved = app.pipeline_class.build(defaults=app.defaults).save_pretrained(tmp_path / "saved")
    place(saved, "atelier-tests/reason-pipeline", cache)
    args, _, _ = _item("reason", tmp_path)
    runs = {"folder": ["--pipeline", str(saved)], "id": ["--pipeline", "atelier-tests/reason-pipeline"],
            "pinned": ["--pipeline", f"atelier-tests/reason-pipeline@{COMMIT}"],
            "flag": ["--pipeline", "atelier-tests/reason-pipeline", "--revision", "main"]}
    for name, flags in runs.items():
        assert main(["reason", *args, *flags, "--seed", "0", "-o", str(tmp_path / name), "--no-progress"]) == 0, capsys.readouterr().err
    results = {name: _without_times(json.loads((tmp_path / name / "result.json").read_text())) for name in runs}
    assert all(r == results["folder"] for r in results.values())
    assert main(["reason", *args, "--pipeline", "atelier-tests/reason-pipeline", "--revision", "v9", "-o", str(tmp_path / "v9")]) == 2
    err = capsys.readouterr().err
    assert "atelier-tests/reason-pipeline" in err and "hf download atelier-tests/reason-pipeline --revision v9" in err
    assert "Traceback" not in err and not (tmp_path / "v9").exists()


def test_an_absent_id_offline_is_one_error_with_the_download_command(tmp_path, cache, capsys):
    args, _, _ = _item("segment", tmp_path)
    code = main(["segment", *args, "--tracker", "facebook/sam2.1-hiera-large", "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and err.count("error:") == 1
    assert "facebook/sam2.1-hiera-large" in err and "`hf download facebook/sam2.1-hiera-large`" in err
    assert "about 0.9 GB" in err and not (tmp_path / "out").exists()  # the catalog's size; nothing written
    with pytest.raises(InputError, match="hf download ByteDance/Bernini-Diffusers"):
        resolve_model("pipeline", "ByteDance/Bernini-Diffusers")


def test_a_path_or_keyword_is_never_looked_up(tmp_path, cache, monkeypatch):
    folder = tmp_path / "owner" / "name"
    folder.mkdir(parents=True)
    assert resolve_model("tracker", "classic") == "classic"
    assert resolve_model("tracker", folder) == str(folder)
    monkeypatch.chdir(tmp_path)  # a relative path that exists is that folder, though it reads like an id
    assert resolve_model("tracker", "owner/name") == "owner/name"


def test_a_tiny_bernini_r_in_the_cache_loads_by_its_id(tmp_path, cache):
    """The issue's case: a Bernini-R placed in the cache under its id was refused while its snapshot folder loaded."""
    import torch

    from pipelines.bernini import BerniniPipeline
    from tiny_wan import build_tiny_bernini_r

    folder = build_tiny_bernini_r(tmp_path / "r")
    snapshot = place(folder, "ByteDance/Bernini-R-Diffusers", cache)
    by_id = BerniniPipeline.from_pretrained("ByteDance/Bernini-R-Diffusers")
    by_folder = BerniniPipeline.from_pretrained(snapshot)
    assert by_id.release == by_folder.release == "r"
    a, b = by_id.renderer.transformer.state_dict(), by_folder.renderer.transformer.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
