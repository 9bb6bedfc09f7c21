"""A file atelier did not write is never replaced: every writing verb, by construction.

For every registered pipeline verb a first run into a fresh folder tells which files it writes; a
user's folder holding files of exactly those names (and a note of their own) is then refused before
the run starts, byte for byte intact; our own earlier folder is replaced; ``--overwrite`` replaces the
user's files on request. The video tools, worldgen and batch follow the same rule.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from core.outputs import MARKER, check_folder, matches, publish_file, publish_folder
from pipelines.registry import apps
from test_malformed_inputs import good_media, media, run_cli, to_argv, valid_args  # noqa: F401  (media is a fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def tree(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` (relative path -> sha256), the marker left out."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MARKER}


def plant(folder: Path, names) -> dict[str, str]:
    """A user's files under ``names`` plus an unrelated note; returns their hashes."""
    for rel in [*names, "notes.txt"]:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(f"the user's own {rel}\n")
    return tree(folder)


@pytest.mark.parametrize("verb", sorted(apps()))
def test_a_users_files_named_like_every_output_are_never_replaced(verb, media, tmp_path, capsys):
    app = apps()[verb]
    args = valid_args(app, good_media(app, media))
    ours = tmp_path / "ours"
    code, err = run_cli(to_argv(app, {**args, "out": str(ours)}), capsys)
    assert code == 0, err
    written = tree(ours)
    claims = app.pipeline_class.output_class().claims()
    assert written and all(matches(rel, claims) for rel in written), (sorted(written), claims)  # claims cover every output

    user = tmp_path / "user"
    before = plant(user, written)
    code, err = run_cli(to_argv(app, {**args, "out": str(user)}), capsys)
    assert code == 2 and "Traceback" not in err, err
    assert "--out" in err and "--overwrite" in err and "not written by atelier" in err, err
    assert tree(user) == before and not (user / MARKER).exists()  # refused before the run: nothing touched

    code, err = run_cli(to_argv(app, {**args, "out": str(ours)}), capsys)  # our own earlier run: replaced
    assert code == 0, err
    code, err = run_cli(to_argv(app, {**args, "out": str(user)}) + ["--overwrite"], capsys)
    assert code == 0, err
    assert (user / "notes.txt").read_text() == "the user's own notes.txt\n"  # unrelated names always stay


@pytest.mark.parametrize("verb", sorted(v for v, a in apps().items() if a.video_output))
def test_o_name_mp4_keeps_a_users_clip_and_folder(verb, media, tmp_path, capsys):
    app = apps()[verb]
    args = valid_args(app, good_media(app, media))
    (tmp_path / "star").mkdir()
    (tmp_path / "star" / "result.json").write_text("mine")
    (tmp_path / "clip.mp4").write_text("my clip")
    for out, culprit in ((tmp_path / "star.mp4", "result.json"), (tmp_path / "clip.mp4", "clip.mp4")):
        code, err = run_cli(to_argv(app, {**args, "out": str(out)}), capsys)
        assert code == 2 and culprit in err and "Traceback" not in err, err
    assert (tmp_path / "star" / "result.json").read_text() == "mine"
    assert (tmp_path / "clip.mp4").read_text() == "my clip"


def test_video_tools_keep_a_users_files(media, tmp_path, capsys):
    user = tmp_path / "frames"
    before = plant(user, ["contact_sheet.png", "frame_000005.png"])
    code, err = run_cli(["video", "sample", str(media["good"]), "-n", "4", "-o", str(user)], capsys)
    assert code == 2 and "--overwrite" in err, err
    assert tree(user) == before
    mine = tmp_path / "mine.mp4"
    mine.write_text("my clip")
    code, err = run_cli(["video", "overlay", str(media["good"]), "--motion", "-o", str(mine)], capsys)
    assert code == 2 and "not written by atelier" in err, err
    assert mine.read_text() == "my clip"
    ours = tmp_path / "ours.mp4"
    for _ in range(2):  # our own output is replaced by the next run
        code, err = run_cli(["video", "overlay", str(media["good"]), "--motion", "-o", str(ours)], capsys)
        assert code == 0, err
    code, err = run_cli(["video", "overlay", str(media["good"]), "--motion", "-o", str(mine), "--overwrite"], capsys)
    assert code == 0 and mine.read_bytes() != b"my clip"


def test_worldgen_keeps_a_users_files_and_other_splits(tmp_path, capsys):
    out = tmp_path / "data"
    before = plant(out, ["train.jsonl", "train.config.json"])
    code, err = run_cli(["worldgen", "vrs", "--n", "1", "-o", str(out)], capsys)
    assert code == 2 and "--overwrite" in err, err
    assert tree(out) == before
    ours = tmp_path / "ours"
    for split in ("train", "val", "train"):  # a split run replaces only its own split
        code, err = run_cli(["worldgen", "vrs", "--n", "1", "--split", split, "-o", str(ours)], capsys)
        assert code == 0, err
    assert (ours / "val.jsonl").is_file() and (ours / "train.jsonl").is_file()


@pytest.mark.parametrize("argv", [["worldgen", "vrs", "--n", "1", "-o", ""], ["batch", "MANIFEST", "-o", ""]])
def test_an_empty_out_never_means_the_current_folder(argv, tmp_path, monkeypatch, capsys):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "a", "verb": "video.probe", "args": {"video": "x.mp4"}}) + "\n")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    code, err = run_cli([str(manifest) if a == "MANIFEST" else a for a in argv], capsys)
    assert code == 2 and "--out" in err and "Traceback" not in err, err
    assert list(work.iterdir()) == []


def test_publish_never_writes_over_a_file_that_appeared_during_the_run(tmp_path):
    """The claims checked before a run may miss a name; the move after it still refuses, moving nothing."""
    folder = tmp_path / "out"
    check_folder(folder, ["result.json"])
    folder.mkdir()
    (folder / "late.png").write_text("the user's")
    with pytest.raises(Exception, match="not written by atelier"):
        with publish_folder(folder, ["result.json"]) as stage:
            (stage / "result.json").write_text("{}")
            (stage / "late.png").write_text("ours")
    assert sorted(p.name for p in folder.iterdir()) == ["late.png"] and (folder / "late.png").read_text() == "the user's"
    edited = tmp_path / "clip.json"
    with publish_file(edited) as tmp:
        tmp.write_text("ours")
    edited.write_text("ours, edited by the user")  # an output of ours the user changed is theirs now
    with pytest.raises(Exception, match="not written by atelier"):
        with publish_file(edited) as tmp:
            tmp.write_text("a new run")
    assert edited.read_text() == "ours, edited by the user"


def test_batch_never_writes_through_a_link_nor_trusts_a_foreign_record(media, tmp_path):
    from app.batch import run_batch

    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "x", "verb": "video.probe", "args": {"video": str(media["good"])}}) + "\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    users = tmp_path / "users.jsonl"
    users.write_text('{"id": "y", "status": "ok"}\n')
    (linked / "status.jsonl").symlink_to(users)
    with pytest.raises(Exception, match="link"):
        run_batch(manifest, linked, progress=False)
    assert users.read_text() == '{"id": "y", "status": "ok"}\n'

    foreign = tmp_path / "foreign"
    (foreign / "x").mkdir(parents=True)
    (foreign / "x" / "thesis.txt").write_text("mine")
    (foreign / ".partial-x").mkdir()  # an empty folder of the user's is theirs too
    (foreign / "status.jsonl").write_text('{"id": "x", "status": "ok"}\n')
    summary = run_batch(manifest, foreign, progress=False)
    assert (summary.failed, summary.skipped) == (1, 0)  # not skipped on the word of a record it did not write
    assert (foreign / "x" / "thesis.txt").read_text() == "mine" and (foreign / ".partial-x").is_dir()


def test_demo_keeps_a_users_files_and_names_them_before_any_work(tmp_path):
    from app.demo import run_demo
    from core.errors import InputError

    (tmp_path / "index.html").write_text("my page")
    with pytest.raises(InputError, match="index.html"):
        run_demo(tmp_path)
    assert (tmp_path / "index.html").read_text() == "my page" and sorted(p.name for p in tmp_path.iterdir()) == ["index.html"]
