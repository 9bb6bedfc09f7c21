"""Safety III's harness cases beyond broken files (tests/test_malformed_inputs.py feeds every verb FIFOs, devices,
text-chunk bombs and 2000:1 pictures by construction): text that is not UTF-8, a large picture within the budget,
JSON that nests or counts past reason, a full disk, and a stop at every stage of output handling."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from PIL import Image

from app.batch import read_manifest
from app.cli import main
from core.outputs import MARKER
from pipelines.registry import apps
from test_malformed_inputs import assert_clean, good_media, media, run_cli, to_argv, valid_args, with_media  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_thread")

NOT_UTF8 = b"a red \xff\xfe star".decode("utf-8", "surrogateescape")  # what Python makes of such bytes in argv


@pytest.mark.parametrize("verb", sorted(v for v, a in apps().items() if any(i.kind in ("text", "texts") for i in a.inputs)))
def test_text_that_is_not_utf8_is_refused_by_name(verb, media, capsys):
    app = apps()[verb]
    base = valid_args(app, good_media(app, media))
    for i in (i for i in app.inputs if i.kind in ("text", "texts")):
        code, err = run_cli(to_argv(app, {**base, i.name: [NOT_UTF8] * 3 if i.kind == "texts" else NOT_UTF8}), capsys)
        assert_clean(code, err, i.name)
        assert "UTF-8" in err


@pytest.fixture(scope="module")
def large_picture(tmp_path_factory):
    """5000 x 5000 pixels, within the pixel budget: every verb must read it once, at its working size."""
    path = tmp_path_factory.mktemp("large") / "large.png"
    img = np.zeros((5000, 5000, 3), np.uint8)
    img[1000:3000, 1500:3500] = (220, 40, 40)
    Image.fromarray(img).save(path, compress_level=1)
    return path


@pytest.mark.parametrize("verb", sorted(apps()))
def test_a_large_picture_within_the_budget_runs_bounded(verb, media, large_picture, capsys):
    app = apps()[verb]
    args = with_media(app, valid_args(app, good_media(app, media)), large_picture)
    t0 = time.perf_counter()
    code, err = run_cli(to_argv(app, args), capsys)
    # 0; 1: the verb found nothing in a red square (motion: no person); 2: a verb that reads pictures only up to its own
    # size refuses it by name (reason); each said in one line
    assert code in (0, 1, 2), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert time.perf_counter() - t0 < 600  # a bound on a hang, far above any run (the 12000-px PNG once took 352 s)


@pytest.mark.parametrize("content, says", [("[" * 200_000 + "]" * 200_000, "nested"), ('{"format_version": ' + "9" * 400 + "}", "digits"),
                                           ('{"format_version": 1e999}', "out of range")])
def test_a_pipeline_index_that_nests_or_counts_past_reason(content, says, media, tmp_path, capsys):
    (tmp_path / "pipeline.json").write_text(content)
    for verb in sorted(apps()):
        app = apps()[verb]
        code, err = run_cli(to_argv(app, {**valid_args(app, good_media(app, media)), "pipeline": str(tmp_path)}), capsys)
        assert_clean(code, err, "pipeline.json")
        assert says in err


def test_a_manifest_with_a_huge_number_or_a_line_separator_inside_a_string(tmp_path):
    from core.errors import InputError

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"verb": "video.probe", "args": {"video": "a.mp4", "n": ' + "1" * 5000 + "}}\n")
    with pytest.raises(InputError, match="line 1.*5000 digits"):
        read_manifest(bad)
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"id": "a", "verb": "video.probe", "args": {"video": "a\u2028b\u0085c.mp4"}}, ensure_ascii=False) + "\n")
    (item,) = read_manifest(good)  # one line: U+2028 and U+0085 are characters of its string, not line ends
    assert "a\u2028b\u0085c.mp4" in json.dumps(item, ensure_ascii=False)


def test_a_quoted_value_is_capped(tmp_path):
    from core.errors import InputError

    message = str(InputError("options", list(range(1_000_000)), "fewer"))
    assert len(message) < 400 and "characters)" in message


@pytest.mark.parametrize("verb", sorted(apps()))
def test_a_full_disk_met_inside_a_library_is_said_as_such(verb, media, tmp_path, capsys, monkeypatch):
    from safetensors import SafetensorError

    app = apps()[verb]

    def full(*a, **k):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No space left on device\" })")

    monkeypatch.setattr("core.outputs.publish_folder", full)  # where the run's files are written
    code, err = run_cli(to_argv(app, {**valid_args(app, good_media(app, media)), "out": str(tmp_path / "o")}), capsys)
    assert code == 1 and "no space left" in err and "internal error" not in err
    assert not (tmp_path / "o").exists()  # the folder it made for the run went with it


STAGES = [("core.paths", "check_output_dir"), ("core.outputs", "check_folder"), ("core.outputs", "_write_staging_marker"),
          ("core.outputs", "_write_marker"), ("core.outputs", "_remove_empty_parents")]


# for every verb the stages before its compute and inside the publishing of its files; the clean-up of stale files
# (the same code for every verb) for two
STOPS = [(v, m, f) for v in sorted(apps()) for m, f in STAGES[:4]] + [(v, m, f) for v in ("segment", "meme") for m, f in STAGES[4:]]


@pytest.mark.parametrize("verb, module, function", STOPS)
def test_a_stop_at_every_stage_of_output_handling_leaves_only_what_was_there(verb, module, function, media, tmp_path, capsys, monkeypatch):
    import importlib

    app = apps()[verb]
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("the user's")
    mod = importlib.import_module(module)
    original = getattr(mod, function)

    def stop(*a, **k):  # SIGTERM's handler raises KeyboardInterrupt just after the stage ran
        original(*a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(mod, function, stop)
    code, err = run_cli(to_argv(app, {**valid_args(app, good_media(app, media)), "out": str(folder)}), capsys)
    assert "Traceback" not in err
    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    marker = json.loads((folder / MARKER).read_text())["files"] if (folder / MARKER).is_file() else {}
    # the user's file, and at most a finished run's own files, each recorded in the marker: nothing half-made, no strays
    assert (folder / "notes.txt").read_text() == "the user's"
    strays = [p for p in left if p not in marker and p not in ("notes.txt", MARKER) and not (folder / p).is_dir()]
    assert strays == [], (code, strays)
    assert not [p for p in left if ".atelier-staging-" in p or ".atelier-write-check" in p or ".tmp" in p]
