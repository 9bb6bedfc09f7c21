"""Safety III, files a user owns: a dead run's staging folder loses only its own files, no verb writes over one of its
inputs (any flags, any name or link), and a failed run leaves neither a write-check file nor the folders it made."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from core.outputs import MARKER, STAGING, protecting, publish_folder, sha256
from core.paths import check_output_dir, keep_made_folders, made_folders, remove_made_folders
from core.video import write_video


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_dead_runs_staging_folder_loses_only_the_files_its_marker_lists(tmp_path):
    stage = tmp_path / f"{STAGING}{_dead_pid()}-abcd1234"
    (stage / "masks").mkdir(parents=True)
    (stage / "masks" / "00000.png").write_bytes(b"ours")
    (stage / "thesis.txt").write_text("four years of work")
    listed = {"masks/00000.png": sha256(stage / "masks" / "00000.png")}
    (stage / MARKER).write_text(json.dumps({"written_by": "atelier", "staging": True, "files": listed}))
    with publish_folder(tmp_path) as new_stage:
        (new_stage / "result.json").write_text("{}")
    assert (stage / "thesis.txt").read_text() == "four years of work"  # not listed: kept, and so is its folder
    assert not (stage / "masks").exists()  # listed with its hash: removed
    (stage / "thesis.txt").unlink()
    with publish_folder(tmp_path) as new_stage:
        (new_stage / "result.json").write_text("{}")
    assert not stage.exists()  # nothing left but the marker: the folder goes


def test_a_staging_marker_never_reaches_outside_its_folder(tmp_path):
    outside = tmp_path / "notes.txt"
    outside.write_text("mine")
    stage = tmp_path / "out" / f"{STAGING}{_dead_pid()}-abcd1234"
    stage.mkdir(parents=True)
    (stage / MARKER).write_text(json.dumps({"written_by": "atelier", "files": {"../../notes.txt": sha256(outside)}}))
    with publish_folder(tmp_path / "out") as new_stage:
        (new_stage / "a.txt").write_text("x")
    assert outside.read_text() == "mine"


def test_no_output_replaces_an_input_by_any_name(tmp_path):
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"the user's clip")
    out = tmp_path / "out"
    out.mkdir()
    os.link(clip, out / "overlay.mp4")  # the same file under the name an output takes
    with protecting([clip]), pytest.raises(ValueError, match="is an input of this run"):
        with publish_folder(out, ["overlay.mp4"], overwrite=True) as stage:
            (stage / "overlay.mp4").write_bytes(b"result")
    assert clip.read_bytes() == b"the user's clip"
    frames_dir = tmp_path / "frames"
    frames_dir.mkdir()
    with protecting([frames_dir]), pytest.raises(ValueError, match="is an input of this run"):
        with publish_folder(tmp_path, ["frames/**"], overwrite=True) as stage:
            (stage / "frames").mkdir()
            (stage / "frames" / "00000.png").write_bytes(b"x")
    assert list(frames_dir.iterdir()) == []


@pytest.mark.parametrize("flags", [["--overwrite"], []])
def test_segment_refuses_an_output_folder_that_holds_its_input_under_an_output_name(tmp_path, flags):
    folder = tmp_path / "DIR"
    folder.mkdir()
    clip = write_video(folder / "overlay.mp4", np.zeros((4, 32, 32, 3), np.uint8), fps=4)
    before = clip.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "app.cli", "segment", str(clip), "the red circle", "-o", str(folder), *flags],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "is an input of this run" in proc.stderr and "Traceback" not in proc.stderr
    assert clip.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["overlay.mp4"]


def test_a_failed_run_removes_the_empty_folders_it_made_and_the_write_check_leaves_no_name(tmp_path):
    keep_made_folders()
    (tmp_path / "kept").mkdir()
    deep = check_output_dir(tmp_path / "kept" / "a" / "b")
    assert list(deep.iterdir()) == []  # the write check's file never had a name there
    assert made_folders() == [tmp_path / "kept" / "a" / "b", tmp_path / "kept" / "a"]
    remove_made_folders()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and list((tmp_path / "kept").iterdir()) == []
    used = check_output_dir(tmp_path / "used")
    (used / "result.json").write_text("{}")
    remove_made_folders()
    assert (used / "result.json").is_file()  # a folder with something in it stays


def test_the_cli_removes_an_output_folder_it_made_for_a_run_that_failed(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video")
    still = tmp_path / "still.png"
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(still)
    out = tmp_path / "new" / "out"
    proc = subprocess.run([sys.executable, "-m", "app.cli", "meme", str(still), "-o", str(out), "--writer", str(tmp_path / "nowhere")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert not (tmp_path / "new").exists()
