"""The malformed-input harness: every registered verb, through the CLI, the batch runner and the web,
meets broken files, absurd sizes, unicode paths and bad arguments with a one-line message that names
the input and no traceback. A pipeline inherits all of it by registering its ``PipelineApp``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from app.batch import run_batch
from app.cli import main
from core.video import write_video
from pipelines.registry import apps

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A good clip, a unicode copy of it, and every kind of broken "video"."""
    d = tmp_path_factory.mktemp("media")
    frames = np.zeros((40, 32, 32, 3), np.uint8)
    frames[:, 8:16, 8:16] = 200
    good = write_video(d / "good.mp4", frames, fps=10)
    (d / "vidéo ☃").mkdir()
    unicode = write_video(d / "vidéo ☃" / "clip ünï.mp4", frames, fps=10)
    data = good.read_bytes()
    bad = {"truncated": d / "truncated.mp4", "corrupt": d / "corrupt.mp4", "text": d / "text.mp4", "zero-frame": d / "empty.mp4"}
    bad["truncated"].write_bytes(data[: len(data) // 3])
    bad["corrupt"].write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    bad["text"].write_text("this is not a video\n" * 40)
    bad["zero-frame"].write_bytes(b"")
    (d / "folder.mp4").mkdir()
    bad["folder"] = d / "folder.mp4"
    bad["missing"] = d / "missing.mp4"
    # Safety III: inputs that block or never end, a metadata bomb, and a picture no encoder or viewer takes
    bad["fifo"] = d / "pipe.mp4"
    os.mkfifo(bad["fifo"])  # opening it would block forever: refused from its stat
    bad["device"] = Path("/dev/zero")
    bad["text-bomb"], bad["thin"] = d / "bomb.png", d / "thin.png"
    text_chunk_bomb(bad["text-bomb"])
    Image.fromarray(np.zeros((1, 2000, 3), np.uint8)).save(bad["thin"])  # 2000:1
    large = np.zeros((2, 128, 128, 3), np.uint8)
    large[:, 32:64, 32:64] = 200
    (d / "grand ☃").mkdir()
    big = {"good": write_video(d / "large.mp4", large, fps=10), "unicode": write_video(d / "grand ☃" / "image ünï.mp4", large, fps=10)}
    return {"good": good, "unicode": unicode, "bad": bad, "dir": d, "large": big, "figure": figure_clips(d)}


def text_chunk_bomb(path) -> None:
    """An 8 KB PNG whose compressed text chunk inflates to 8 MiB, past PIL's limit (which raises ValueError)."""
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "A" * (8 << 20), zip=True)
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(path, pnginfo=info)


def figure_clips(d) -> dict:
    """A short clip with a stick figure, at a plain and a unicode path: `motion` fails (exit 1, by design) on a clip
    where its pose reader finds no person, so its valid runs need one."""
    from worldgen.tasks import motion_edit

    world = motion_edit.generate(2_000_000_031, motion_edit.Config(level=1)).worlds["source"]
    person = np.stack([world.render(t, annotations=False).rgb for t in range(0, world.num_frames, 3)])
    (d / "personne ☃").mkdir()
    return {"good": write_video(d / "person.mp4", person, fps=4), "unicode": write_video(d / "personne ☃" / "clip ünï.mp4", person, fps=4)}


# verbs whose valid run needs more than the defaults: the latent reasoner reads images of at least 128 px and
# answers with its vocabulary's words
LARGE_MEDIA = {"reason"}
FIGURE_MEDIA = {"motion"}  # AnyMotion fails (exit 1) on a clip where its pose reader finds no person
VALID_INPUTS = {"reason": {"options": ["red", "blue", "green"]}}


def good_media(app, media: dict, kind: str = "good"):
    if app.verb in FIGURE_MEDIA:
        return media["figure"][kind]
    return media["large"][kind] if app.verb in LARGE_MEDIA else media[kind]


def media_input(app):
    """The input a broken file is fed through: the app's first video / image / images input."""
    return next(i for i in app.inputs if i.kind in ("video", "image", "images"))


def with_media(app, args: dict, path) -> dict:
    i = media_input(app)
    return {**args, i.name: [str(path)] if i.kind == "images" else str(path)}


def valid_args(app, video) -> dict:
    """Arguments that run: the inputs by kind, the shipped builtin models, the smallest grid."""
    args = {"progress": False}
    for i in app.inputs:
        args[i.name] = {"video": str(video), "image": str(video), "images": [str(video)], "text": "What is there?",
                        "texts": ["a", "b", "c"]}[i.kind]
    args.update(VALID_INPUTS.get(app.verb, {}))
    for s in app.settings():  # the lowest value of each bounded int setting keeps runs fast
        if s.type is int and s.range and s.range[0] is not None and not s.optional and s.name in ("grid",):
            args[s.name] = s.range[0]
    return args


def to_argv(app, args: dict) -> list[str]:
    argv = [app.verb]
    for i in app.inputs:
        value = args[i.name]
        if i.flag is None and i.kind not in ("texts", "images"):
            argv.append(str(value))
        else:
            argv += [f"--{i.name}", *([str(v) for v in value] if isinstance(value, list) else [str(value)])]
    for key, value in args.items():
        if key not in {i.name for i in app.inputs} and key != "progress":
            argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv + ["--no-progress"]


def run_cli(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse usage errors
        code = e.code
    err = capsys.readouterr().err
    return code, err


def assert_clean(code: int, err: str, names: str) -> None:
    assert code in (1, 2), err
    assert "Traceback" not in err and "internal error" not in err, err  # a named, expected error, not a bug caught late
    last = err.strip().splitlines()[-1]
    assert names in last, (names, last)


def absurd_settings(app) -> list[tuple[str, object]]:
    """A value far outside each bounded setting, and a wrong type for each numeric one."""
    out = []
    for s in app.settings():
        if s.range and s.range[1] is not None:
            out.append((s.name, s.range[1] * 1000 + 1))
        if s.type in (int, float) and not s.pair:
            out.append((s.name, "lots"))
    return out


@pytest.mark.parametrize("verb", sorted(apps()))
def test_cli_on_broken_files_absurd_sizes_and_bad_arguments(verb, media, capsys):
    app = apps()[verb]
    base = valid_args(app, good_media(app, media))
    for kind, path in media["bad"].items():
        code, err = run_cli(to_argv(app, with_media(app, base, path)), capsys)
        assert_clean(code, err, path.name)
    for name, value in absurd_settings(app):
        code, err = run_cli(to_argv(app, {**base, name: value}), capsys)
        assert_clean(code, err, name.replace("_", "-") if isinstance(value, str) else name)
    for name, value in (("seed", -1), ("seed", 2**70), ("device", "cuda:7"), ("vlm", str(media["dir"] / "folder.mp4")),
                        ("vlm", "no-such-org/no-such-model"), ("dtype", "float8"), ("out", str(media["good"]))):
        if name in ("vlm",) and "vlm" not in app.components.values():
            continue
        code, err = run_cli(to_argv(app, {**base, name: value}), capsys)
        assert_clean(code, err, name)
    code, err = run_cli(to_argv(app, base) + ["--no-such-flag"], capsys)
    assert code == 2 and "Traceback" not in err
    # a unicode path is not malformed: it works
    code, err = run_cli(to_argv(app, with_media(app, base, good_media(app, media, "unicode"))) + ["--json"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("verb", sorted(apps()))
def test_batch_isolates_every_malformed_item(verb, media, tmp_path):
    app = apps()[verb]
    base = valid_args(app, good_media(app, media))
    items = [{"id": f"bad-{k}", "verb": verb, "args": with_media(app, base, p)} for k, p in media["bad"].items()]
    items += [{"id": f"absurd-{n}-{i}", "verb": verb, "args": {**base, n: v}} for i, (n, v) in enumerate(absurd_settings(app))]
    items += [{"id": "unknown-arg", "verb": verb, "args": {**base, "no_such_arg": 1}},
              {"id": "unicode", "verb": verb, "args": with_media(app, base, good_media(app, media, "unicode"))}]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    summary = run_batch(manifest, tmp_path / "out", progress=False)
    assert (summary.ok, summary.failed) == (1, len(items) - 1)
    records = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "out" / "status.jsonl").read_text().splitlines()}
    for item in items[:-1]:
        rec = records[item["id"]]
        assert rec["status"] == "failed" and "traceback" not in rec and "\n" not in rec["error"], rec
    for kind, path in media["bad"].items():
        assert path.name in records[f"bad-{kind}"]["error"]
    assert "no_such_arg" in records["unknown-arg"]["error"]
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".partial")]


@pytest.mark.parametrize("verb", sorted(apps()))
def test_web_maps_malformed_inputs_to_gr_errors_without_server_paths(verb, media):
    gr = pytest.importorskip("gradio")
    from app.web import WebSettings, run_in_web

    app = apps()[verb]
    settings = WebSettings()
    n_settings = len(app.settings())
    for kind, path in media["bad"].items():
        values = [[str(path)] if i is media_input(app) and i.kind == "images" else str(path) if i is media_input(app)
                  else ("What?" if i.kind == "text" else None if i.kind in ("image", "images") else "a\nb") for i in app.inputs]
        values += [None] * n_settings + [""] * len(app.components)
        with pytest.raises(gr.Error) as e:
            run_in_web(app, settings, tuple(values))
        message = str(e.value)
        assert str(media["dir"]) not in message and "Errno" not in message, message
        assert os.sep + "tmp" not in message, message


VIDEO_TOOLS = {  # verb -> (CLI argv after the video, batch args besides the video)
    "video.probe": ([], {}),
    "video.sample": (["-n", "4"], {"n": 4}),
    "video.overlay": (["--motion"], {"motion": True}),
}


@pytest.mark.parametrize("verb", sorted(VIDEO_TOOLS))
def test_video_tools_on_broken_files(verb, media, tmp_path, capsys):
    extra, batch_args = VIDEO_TOOLS[verb]
    out = ["-o", str(tmp_path / ("o.mp4" if verb == "video.overlay" else "o"))] if verb != "video.probe" else []
    for kind, path in media["bad"].items():
        code, err = run_cli([*verb.split("."), str(path), *extra, *out], capsys)
        assert_clean(code, err, path.name)
    code, err = run_cli([*verb.split("."), str(media["unicode"]), *extra, *out], capsys)
    assert code == 0, err
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"id": k, "verb": verb, "args": {"video": str(p), **batch_args}}) + "\n"
                                for k, p in media["bad"].items()), encoding="utf-8")
    summary = run_batch(manifest, tmp_path / "batch", progress=False)
    assert summary.failed == len(media["bad"])
    for line in (tmp_path / "batch" / "status.jsonl").read_text().splitlines():
        assert "traceback" not in json.loads(line)


def test_absurd_requests_are_bounded_before_allocating(media, tmp_path, capsys):
    code, err = run_cli(["video", "sample", str(media["good"]), "-n", "100000000", "-o", str(tmp_path / "s")], capsys)
    assert_clean(code, err, "n=")
    assert "GiB" in err
    code, err = run_cli(["video", "overlay", str(media["good"]), "--motion", "-o", str(media["good"])], capsys)
    assert_clean(code, err, "--out")  # the output may not be the input
    code, err = run_cli(["serve", "--port", "99999"], capsys)
    assert code == 2 and "65535" in err


def test_sigterm_leaves_no_temp_files(tmp_path):
    """A run killed with SIGTERM while writing its output removes its half-written temp file."""
    import signal
    import subprocess
    import sys
    import time

    frames = np.random.default_rng(0).integers(0, 256, (600, 240, 320, 3), dtype=np.uint8)
    clip = write_video(tmp_path / "long.mp4", frames, fps=24)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "video", "overlay", str(clip), "--motion", "-o", str(out / "o.mp4")],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not any(p.name.startswith(".") for p in out.iterdir()) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)  # wait for the temp file to appear
    assert proc.poll() is None, "finished before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err
    assert list(out.iterdir()) == []
