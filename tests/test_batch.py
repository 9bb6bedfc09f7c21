"""The batch runner: failures isolated, deterministic kill-and-resume, SIGTERM, never touching what it
did not write, clean errors for bad outputs and manifests, and the Ray engine matching the local one."""

import codecs
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from app.batch import ITEM_MARKER, VERBS, BatchVerb, finished_ids, read_manifest, run_batch
from app.cli import main
from core.errors import InputError, MissingDependencyError
from tests.test_app import REPO, _clip


def _manifest(path, items):
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    return path


def _status(out):
    return [json.loads(line) for line in (out / "status.jsonl").read_text().splitlines()]


@pytest.fixture
def step_calls(monkeypatch):
    """A test-only verb ``test.step`` that writes a file and returns its args; the ids it ran."""
    calls = []

    def step(args, out):
        calls.append(args.get("n"))
        (out / "part.txt").write_text("done")
        return dict(args)

    monkeypatch.setitem(VERBS, "test.step", BatchVerb("test.step", step, "test only"))
    return calls


def test_batch_help_teaches_engines_and_the_path_rule(capsys):
    with pytest.raises(SystemExit):
        main(["batch", "--help"])
    text = capsys.readouterr().out
    for phrase in ("--engine {local,ray}", "--ray-address", "ray://HOST:10001", "resolved against the manifest's folder", "ever deleted or overwritten"):
        assert phrase in text


# --- what the runner records ----------------------------------------------------------------------


def test_batch_isolates_failures_and_reports(tmp_path):
    clip = _clip(tmp_path / "c.mp4")
    bad = tmp_path / "bad.mp4"
    bad.write_text("not a video")
    man = _manifest(tmp_path / "m.jsonl", [
        {"id": "good", "verb": "video.probe", "args": {"video": str(clip)}},
        {"id": "bad", "verb": "video.sample", "args": {"video": str(bad)}},
        {"id": "typo", "verb": "video.sample", "args": {"video": str(clip), "frames": 3}},
        {"id": "also-good", "verb": "video.sample", "args": {"video": str(clip), "n": 2}},
    ])
    s = run_batch(man, tmp_path / "out", progress=False)
    assert (s.ok, s.failed, s.skipped, s.exit_code) == (2, 2, 0, 1)
    errors = {r["id"]: r.get("error", "") for r in _status(tmp_path / "out")}
    assert "bad.mp4" in errors["bad"] and "frames" in errors["typo"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".atelier-batch", "also-good", "good", "status.jsonl"]
    assert json.loads((tmp_path / "out" / "good" / "result.json").read_text())["num_frames"] == 30
    assert main(["batch", str(man), "-o", str(tmp_path / "out"), "--no-progress"]) == 1  # failures retried, still failing


def test_batch_resume_after_a_torn_status_line(tmp_path):
    clip = _clip(tmp_path / "c.mp4")
    man = _manifest(tmp_path / "m.jsonl", [{"id": f"p{i}", "verb": "video.probe", "args": {"video": str(clip)}} for i in range(3)])
    out = tmp_path / "out"
    assert run_batch(man, out, progress=False).ok == 3
    status = out / "status.jsonl"
    lines = status.read_text().splitlines()
    status.write_text("\n".join(lines[:2]) + "\n" + lines[2][:15])  # killed while writing p2's line
    s = run_batch(man, out, progress=False)
    assert (s.skipped, s.ok) == (2, 1)
    assert [r["id"] for r in _status(out)] == ["p0", "p1", "p2"]  # every line readable again
    assert run_batch(man, out, progress=False).skipped == 3  # and nothing is redone after that


def test_relative_paths_resolve_against_the_manifest_folder(tmp_path, monkeypatch, step_calls):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    _clip(jobs / "c.mp4")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    man = _manifest(jobs / "m.jsonl", [
        {"id": "p", "verb": "video.probe", "args": {"video": "c.mp4"}},
        {"id": "s", "verb": "test.step", "args": {"video": "./c.mp4", "caption": "c.mp4 is nice", "n": 1, "missing": "nope.mp4"}},
    ])
    args = read_manifest(man)[1]["args"]
    assert args["video"] == str(jobs / "c.mp4") and args["caption"] == "c.mp4 is nice" and args["missing"] == "nope.mp4"
    assert run_batch(man, "out", progress=False).ok == 2
    assert json.loads(Path("out/p/result.json").read_text())["num_frames"] == 30


# --- kill, SIGTERM, resume --------------------------------------------------------------------------

# A batch in a subprocess whose test-only verb sends ``signal`` to its own process on the item with
# ``die`` set: the kill lands in the middle of that item, deterministically.
_SELF_SIGNAL = """
import os, signal, sys
from app.batch import BatchVerb, register_verb
from app.cli import main

def step(args, out):
    (out / "part.txt").write_text("half done")
    if args.get("die"):
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    return dict(args)

register_verb(BatchVerb("test.step", step, "test only: signals its own process on the item with die"))
sys.exit(main(["batch", sys.argv[2], "-o", sys.argv[3], "--no-progress"]))
"""


def _batch_that_signals_itself(tmp_path, sig, n=5, die_at=2):
    man = _manifest(tmp_path / "m.jsonl", [{"id": f"item-{i}", "verb": "test.step", "args": {"n": i, "die": i == die_at}} for i in range(n)])
    script = tmp_path / "self_signal.py"
    script.write_text(_SELF_SIGNAL)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(script), sig, str(man), str(out)], env=env, capture_output=True, text=True, timeout=120)
    return man, out, proc


def test_batch_killed_mid_item_resumes_only_the_unfinished(tmp_path, step_calls):
    man, out, proc = _batch_that_signals_itself(tmp_path, "SIGKILL")
    assert proc.returncode == -signal.SIGKILL
    assert finished_ids(out) == {"item-0", "item-1"}
    assert (out / ".partial-item-2" / "part.txt").is_file()  # what a SIGKILL leaves behind
    before = (out / "item-0" / "part.txt").stat().st_ino
    s = run_batch(man, out, progress=False)
    assert (s.skipped, s.ok, s.failed) == (2, 3, 0)
    assert step_calls == [2, 3, 4]  # only the unfinished items ran again
    assert sorted(r["id"] for r in _status(out)) == [f"item-{i}" for i in range(5)]  # each recorded once
    assert not list(out.glob(".partial-*"))
    assert (out / "item-0" / "part.txt").stat().st_ino == before  # finished results are left alone


def test_sigterm_leaves_no_temp_files(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    man, out, proc = _batch_that_signals_itself(tmp_path, "SIGTERM")
    assert proc.returncode == 130 and "interrupted" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(out.glob(".partial-*"))
    assert finished_ids(out) == {"item-0", "item-1"}
    run_batch(_manifest(tmp_path / "one.jsonl", [{"verb": "video.probe", "args": {"video": "x"}}]), tmp_path / "o2", progress=False)
    assert signal.getsignal(signal.SIGTERM) is before  # run_batch puts the old handler back


# --- never lose a user's data -----------------------------------------------------------------------


def test_batch_never_deletes_what_it_did_not_write(tmp_path, step_calls):
    out = tmp_path / "out"
    (out / "Documents").mkdir(parents=True)
    (out / "Documents" / "thesis.txt").write_text("four years")
    (out / ".partial-notes").mkdir()
    (out / ".partial-notes" / "n.txt").write_text("mine")
    (out / ".partial-x").mkdir()
    (out / ".partial-x" / "y.txt").write_text("also mine")
    (out / ".partial-old").mkdir()
    (out / ".partial-old" / ITEM_MARKER).write_text("{}")  # a crashed run's own leftovers
    (out / "copied").mkdir()
    (out / "copied" / ITEM_MARKER).write_text("{}")  # a marker with no file list outside .partial: not scratch
    (out / "copied" / "keep.txt").write_text("a user's")
    man = _manifest(tmp_path / "m.jsonl", [{"id": i, "verb": "test.step", "args": {"n": n}} for n, i in enumerate(["Documents", "x", "ok", "copied"])])
    s = run_batch(man, out, progress=False)
    assert (s.ok, s.failed) == (1, 3) and step_calls == [2]  # the refused items never computed
    assert (out / "copied" / "keep.txt").read_text() == "a user's"
    errors = {r["id"]: r.get("error") for r in _status(out)}
    assert "Documents: exists and was not written by atelier batch (move it or choose another -o)" in errors["Documents"]
    assert ".partial-x: exists and was not written by atelier batch" in errors["x"]
    assert (out / "Documents" / "thesis.txt").read_text() == "four years"
    assert (out / ".partial-notes" / "n.txt").read_text() == "mine"
    assert (out / ".partial-x" / "y.txt").read_text() == "also mine"
    assert not (out / ".partial-old").exists()
    assert (out / "ok" / ITEM_MARKER).is_file()
    # the runner's own result folder is replaced when its item is redone (its status line lost)
    (out / "status.jsonl").write_text("")
    assert run_batch(man, out, progress=False).ok == 1 and step_calls == [2, 2]
    # ... but not once someone put a file of their own into it
    (out / "ok" / "my_notes.txt").write_text("keep me")
    (out / "status.jsonl").write_text("")
    assert run_batch(man, out, progress=False).ok == 0 and step_calls == [2, 2]
    assert (out / "ok" / "my_notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("case", ["manifest", "input-file", "input-dir", "inside-input-dir", "a-file", "under-a-file", "too-long", "foreign-status"])
def test_bad_output_folders_are_refused_before_any_work(tmp_path, step_calls, case, capsys):
    masks = tmp_path / "masks"
    masks.mkdir()
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "taken.txt").write_text("x")
    man = _manifest(tmp_path / "m.jsonl", [{"verb": "test.step", "args": {"n": 0, "video": "f.txt", "masks": "masks"}}])
    foreign = tmp_path / "logs"
    foreign.mkdir()
    (foreign / "status.jsonl").write_text("server started\n")
    out = {
        "manifest": man, "input-file": tmp_path / "f.txt", "input-dir": masks, "inside-input-dir": masks / "out",
        "a-file": tmp_path / "taken.txt", "under-a-file": tmp_path / "f.txt" / "out", "too-long": tmp_path / ("x" * 300),
        "foreign-status": foreign,
    }[case]
    hint = {"manifest": "manifest itself", "input-file": "the input video", "input-dir": "the input masks", "inside-input-dir": "inside the input masks",
            "a-file": "it is a file", "under-a-file": "cannot write there", "too-long": "cannot write there", "foreign-status": "not written by atelier batch"}[case]
    with pytest.raises(InputError, match="-o/--out") as e:
        run_batch(man, out, progress=False)
    assert hint in str(e.value)
    assert step_calls == [] and (foreign / "status.jsonl").read_text() == "server started\n"
    assert main(["batch", str(man), "-o", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-o/--out" in err and "Traceback" not in err


def test_a_read_only_output_gives_one_line(tmp_path, capsys):
    man = _manifest(tmp_path / "m.jsonl", [{"verb": "video.probe", "args": {"video": "x.mp4"}}])
    readonly = Path("/sys/atelier-out")  # sysfs makes no folders, whoever asks (root too)
    if not Path("/sys/kernel").is_dir():
        pytest.skip("no sysfs to test an unwritable folder with")
    assert main(["batch", str(man), "-o", str(readonly), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "cannot write there" in err and err.count("\n") == 1


def test_an_oserror_mid_batch_is_one_line(tmp_path, monkeypatch, capsys):
    import app.batch

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "out" / "status.jsonl"))

    monkeypatch.setattr(app.batch, "run_batch", disk_full)
    assert main(["batch", "m.jsonl", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "re-run" in err and err.count("\n") == 1


# --- manifests --------------------------------------------------------------------------------------


def test_manifest_validation_names_the_line(tmp_path):
    with pytest.raises(InputError, match="line 2"):
        read_manifest(_manifest(tmp_path / "m.jsonl", [{"verb": "video.probe"}, {"verb": "video.explode"}]))
    (tmp_path / "m.jsonl").write_text('{"verb": "video.probe"}\n{oops\n')
    with pytest.raises(InputError, match="line 2"):
        read_manifest(tmp_path / "m.jsonl")


@pytest.mark.parametrize("line,match", [
    ({"verb": 3}, "line 2 verb=3: a verb is a string"),
    ({"verb": ["video.probe"]}, "line 2 verb"),
    ({"verb": "video.probe", "id": ["a"]}, "line 2 id=.* an id is a string or an integer"),
    ({"verb": "video.probe", "id": True}, "line 2 id=True"),
    ({"verb": "video.probe", "id": 1.5}, "line 2 id=1.5"),
    ({"verb": "video.probe", "args": ["a.mp4"]}, "line 2 args=.* args is an object"),
    ({"verb": "video.probe", "args": "a.mp4"}, "line 2 args"),
    ({"verb": "video.probe", "id": "p"}, "line 2 id='p': ids must be unique"),
])
def test_manifest_fields_of_the_wrong_type_name_the_line(tmp_path, line, match):
    man = _manifest(tmp_path / "m.jsonl", [{"id": "p", "verb": "video.probe"}, line])
    with pytest.raises(InputError, match=match):
        read_manifest(man)


def test_manifest_encodings(tmp_path):
    text = '{"id": 7, "verb": "video.probe", "args": {"video": "clip é.mp4"}}\n'
    for name, data in [("utf16", text.encode("utf-16")), ("utf8bom", codecs.BOM_UTF8 + text.encode()), ("utf16be", codecs.BOM_UTF16_BE + text.encode("utf-16-be"))]:
        (tmp_path / name).write_bytes(data)
        assert read_manifest(tmp_path / name) == [{"id": "7", "verb": "video.probe", "args": {"video": "clip é.mp4"}}]
    bad = {
        "latin1": ('{"verb": "video.probe"}\n' + text).encode("latin-1"),  # é is not UTF-8
        "utf16-no-bom": text.encode("utf-16-le"),
        "binary": bytes(range(256)) * 4,
        "png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
    }
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(InputError, match="manifest line 2.*not valid utf-8 text .*save the manifest as UTF-8"):
        read_manifest(tmp_path / "latin1")
    for name in ("utf16-no-bom", "binary", "png"):
        with pytest.raises(InputError, match=r"manifest line \d.*binary"):
            read_manifest(tmp_path / name)
    with pytest.raises(Exception, match="is a folder"):
        read_manifest(tmp_path)


# --- the Ray engine ---------------------------------------------------------------------------------


def test_ray_missing_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    man = _manifest(tmp_path / "m.jsonl", [{"verb": "video.probe", "args": {"video": "x.mp4"}}])
    with pytest.raises(MissingDependencyError, match=r"pip install 'atelier\[distributed\]'"):
        run_batch(man, tmp_path / "out", engine="ray")
    assert not (tmp_path / "out").exists()  # refused before any work
    assert main(["batch", str(man), "-o", str(tmp_path / "out"), "--ray-address", "auto"]) == 2  # needs --engine ray
    assert "--engine ray" in capsys.readouterr().err


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def _tree(out: Path) -> dict[str, object]:
    """Every file under ``out`` (status.jsonl aside): parsed JSON with ``out`` taken out, else bytes."""
    files = {}
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.name != "status.jsonl":
            data = p.read_bytes()
            files[str(p.relative_to(out))] = json.loads(data.decode().replace(str(out), "OUT")) if p.suffix == ".json" else data
    return files


def test_ray_engine_matches_the_local_engine(tmp_path, local_ray, capsys):
    _clip(tmp_path / "c.mp4")
    frames = np.full((12, 32, 40, 3), 90, np.uint8)
    frames[:, 8:20, 10:30] = 240
    from core.video import write_video

    write_video(tmp_path / "d.mp4", frames, fps=6)
    (tmp_path / "bad.mp4").write_text("not a video")
    man = _manifest(tmp_path / "m.jsonl", [
        {"id": "probe-c", "verb": "video.probe", "args": {"video": "c.mp4"}},
        {"id": "sample-c", "verb": "video.sample", "args": {"video": "c.mp4", "n": 3}},
        {"id": "sample-d", "verb": "video.sample", "args": {"video": "d.mp4", "n": 2, "height": 16}},
        {"id": 4, "verb": "video.probe", "args": {"video": "d.mp4"}},
        {"id": "bad", "verb": "video.sample", "args": {"video": "bad.mp4"}},
    ])
    outs = {engine: tmp_path / f"out-{engine}" for engine in ("local", "ray")}
    for engine, out in outs.items():
        assert main(["batch", str(man), "-o", str(out), "--engine", engine, "--no-progress", "--json"]) == 1
        assert json.loads(capsys.readouterr().out) == {"total": 5, "ok": 4, "failed": 1, "skipped": 0, "out": str(out)}
    assert _tree(outs["ray"]) == _tree(outs["local"])
    assert "sample-c/frame_000015.png" in _tree(outs["local"])

    def records(out):
        return {r["id"]: {k: (v if k != "seconds" else None) for k, v in json.loads(json.dumps(r).replace(str(out), "OUT")).items()} for r in _status(out)}

    assert records(outs["ray"]) == records(outs["local"])
    assert "bad.mp4" in records(outs["ray"])["bad"]["error"]
    # resume on Ray: only the failed item runs again; its status line is appended by the driver
    s = run_batch(man, outs["ray"], progress=False, engine="ray")
    assert (s.skipped, s.failed) == (4, 1) and len(_status(outs["ray"])) == 6
    assert not list(outs["ray"].glob(".partial-*"))


def test_ray_records_an_item_whose_actor_dies(tmp_path, local_ray, monkeypatch):
    def step(args, out):  # local, so Ray ships it by value to the actors
        if args["die"]:
            os._exit(1)  # the actor dies mid-item, as in a segfault or an OOM kill
        (out / "a.txt").write_text("x")
        return dict(args)

    monkeypatch.setitem(VERBS, "test.die", BatchVerb("test.die", step, "test only"))
    man = _manifest(tmp_path / "m.jsonl", [{"id": f"i{i}", "verb": "test.die", "args": {"die": i == 1}} for i in range(3)])
    s = run_batch(man, tmp_path / "out", progress=False, engine="ray", workers=2)
    assert (s.ok, s.failed) == (2, 1)
    died = {r["id"]: r for r in _status(tmp_path / "out")}["i1"]
    assert died["status"] == "failed" and "actor running this item died" in died["error"]
    assert sorted(died) == ["error", "id", "seconds", "status", "verb"]  # the fields of any failed record
    assert not list((tmp_path / "out").glob(".partial-*"))


def test_ray_sigterm_leaves_no_temp_files(tmp_path, local_ray, monkeypatch):
    def step(args, out):
        (out / "a.txt").write_text("x")
        if args["stop"]:
            # the driver is told to stop while this item runs; told again every 2 s, since under a loaded
            # machine Ray Data's iterator was seen to swallow the first interrupt (2 of 4 full-suite runs)
            for _ in range(30):
                os.kill(args["driver"], signal.SIGTERM)
                time.sleep(2)
        return dict(args)

    monkeypatch.setitem(VERBS, "test.stop", BatchVerb("test.stop", step, "test only"))
    out = tmp_path / "out"
    man = _manifest(tmp_path / "m.jsonl", [{"id": f"i{i}", "verb": "test.stop", "args": {"stop": i == 1, "driver": os.getpid()}} for i in range(2)])
    with pytest.raises(KeyboardInterrupt):
        run_batch(man, out, progress=False, engine="ray", workers=2)
    assert not list(out.glob(".partial-*")) and "i1" not in finished_ids(out)
