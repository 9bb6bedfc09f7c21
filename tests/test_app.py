"""The CLI and the web app (the batch runner: tests/test_batch.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from core.errors import InputError
from core.video import Video, write_video

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
    # an empty required input is named, with what to give, before any model loads
    assert main(["generate", "", "-o", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert "prompt=''" in err and "required: what to show" in err and not (tmp_path / "g").exists()


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
