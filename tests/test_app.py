"""The CLI, the batch runner (kill halfway, resume) and the web app."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from app.batch import finished_ids, read_manifest, run_batch
from app.cli import main
from core.errors import InputError
from core.video import Video, write_video
from tests.shared_data import BBB, need

REPO = Path(__file__).resolve().parents[1]


def _clip(path, t=30):
    frames = np.zeros((t, 48, 64, 3), np.uint8)
    for i in range(t):
        frames[i, 10:30, i : i + 16] = 220
    return write_video(path, frames, fps=10)


def test_help_teaches_every_verb(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for verb in ("info", "video", "batch", "serve", "demo", "examples:"):
        assert verb in text
    for argv in (["video", "overlay", "--help"], ["batch", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "--" in capsys.readouterr().out


def test_info_json(capsys):
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["device"] == "cpu" and info["versions"]["torch"].startswith("2.14")
    assert "pyav" in info["backends"]["video_decoders"]


def test_video_verbs(tmp_path, capsys):
    clip = _clip(tmp_path / "c.mp4")
    assert main(["video", "probe", str(clip), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_frames"] == 30
    assert main(["video", "sample", str(clip), "-n", "4", "-o", str(tmp_path / "f"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["indices"] == [3, 11, 18, 26] and Path(res["contact_sheet"]).is_file()
    masks = tmp_path / "m"
    from core.masks import write_mask_folder

    write_mask_folder(masks, np.ones((30, 48, 64), np.uint8))
    assert main(["video", "overlay", str(clip), "--masks", str(masks), "--caption", "hi", "-o", str(tmp_path / "o.mp4")]) == 0
    assert "wrote" in capsys.readouterr().out
    over = Video(tmp_path / "o.mp4").get_frames(range(30))
    assert over.shape == (30, 48, 64, 3) and over[:, 5, 50, 0].mean() > 40  # id 1 tints dark red over the black background
    assert main(["video", "overlay", str(clip), "--motion", "-o", str(tmp_path / "m.mp4"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mean_foreground_fraction"] > 0  # the square moves


def test_cli_errors_exit_codes(tmp_path, capsys):
    assert main(["video", "probe", str(tmp_path / "missing.mp4")]) == 1
    assert "missing.mp4" in capsys.readouterr().err
    assert main(["video", "sample", str(_clip(tmp_path / "c.mp4")), "-n", "-3"]) == 2
    assert "n=-3" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["video", "nope"])
    assert e.value.code == 2


def _manifest(path, items):
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    return path


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
    status = [json.loads(line) for line in (tmp_path / "out" / "status.jsonl").read_text().splitlines()]
    errors = {r["id"]: r.get("error", "") for r in status}
    assert "bad.mp4" in errors["bad"] and "frames" in errors["typo"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["also-good", "good", "status.jsonl"]
    assert json.loads((tmp_path / "out" / "good" / "result.json").read_text())["num_frames"] == 30
    assert main(["batch", str(man), "-o", str(tmp_path / "out"), "--no-progress"]) == 1  # failures retried, still failing


def test_manifest_validation_names_the_line(tmp_path):
    with pytest.raises(InputError, match="line 2"):
        read_manifest(_manifest(tmp_path / "m.jsonl", [{"verb": "video.probe"}, {"verb": "video.explode"}]))
    (tmp_path / "m.jsonl").write_text('{"verb": "video.probe"}\n{oops\n')
    with pytest.raises(InputError, match="line 2"):
        read_manifest(tmp_path / "m.jsonl")


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
    records = [json.loads(line) for line in status.read_text().splitlines()]  # every line readable again
    assert [r["id"] for r in records] == ["p0", "p1", "p2"]
    assert run_batch(man, out, progress=False).skipped == 3  # and nothing is redone after that


def test_batch_killed_halfway_resumes_without_loss_or_rework(tmp_path):
    clip = need(BBB)
    n = 8
    man = _manifest(tmp_path / "m.jsonl", [
        {"id": f"item-{i}", "verb": "video.overlay", "args": {"video": str(clip), "motion": True, "height": 180}} for i in range(n)
    ])
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "app.cli", "batch", str(man), "-o", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    status = out / "status.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if status.is_file() and len(status.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    time.sleep(0.3)  # let it get well into the next item
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_first = finished_ids(out)  # tolerates a status line the kill cut short
    assert 2 <= len(done_first) < n, "the kill should land mid-batch"
    s = run_batch(man, out, progress=False)
    assert s.skipped == len(done_first) and s.ok == n - len(done_first) and s.failed == 0
    records = [json.loads(line) for line in status.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(f"item-{i}" for i in range(n))  # each done exactly once
    assert not list(out.glob(".partial-*"))
    for i in range(n):
        assert len(Video(out / f"item-{i}" / "overlay.mp4")) == 132


def test_web_app_answers_on_localhost(tmp_path):
    pytest.importorskip("gradio")
    from gradio_client import Client, handle_file

    from app.web import launch

    clip = _clip(tmp_path / "c.mp4")
    demo = launch(port=None, prevent_thread_lock=True, quiet=True)
    try:
        assert demo.server_name == "127.0.0.1"
        client = Client(demo.local_url, verbose=False)
        info = client.predict(handle_file(str(clip)), api_name="/probe")
        assert info["num_frames"] == 30
        gallery = client.predict(handle_file(str(clip)), 3, api_name="/sample")
        assert len(gallery) == 3
    finally:
        demo.close()


def test_serve_refuses_non_loopback_without_opt_in():
    from app.web import launch

    with pytest.raises(InputError, match="allow-remote"):
        launch(host="192.0.2.1", prevent_thread_lock=True)
    assert main(["serve", "--host", "10.1.2.3"]) == 2  # usage error, nothing started
