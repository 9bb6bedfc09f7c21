"""`atelier motion` on the shipped builtin models: a folder, `-o NAME.mp4`, `--keypoints-out` (and the files it
refuses to overwrite), the batch verb, the web tab's run with its preview and per-frame pictures, and the
benchmark script at toy scale."""

import json

import numpy as np
import pytest

from app.batch import run_batch
from app.cli import main
from core.video import Video, write_video

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = ["--steps", "2", "--num-frames", "8", "--no-progress"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from worldgen.tasks import motion_edit

    w = motion_edit.generate(11, motion_edit.Config(num_frames=12)).worlds["source"]
    return write_video(tmp_path_factory.mktemp("clip") / "person walks.mp4", (w.render(t).rgb for t in range(12)), fps=12)


def test_motion_to_a_folder_an_mp4_and_a_keypoints_file(clip, tmp_path, capsys):
    out = tmp_path / "edit"
    kp = tmp_path / "target.coco.json"
    assert main(["motion", str(clip), "make the person raise the left arm", "--seed", "1", "--json", "-o", str(out),
                 "--keypoints-out", str(kp), *FAST]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["person_found"] and res["frames"] == 8 and res["seed"] == 1 and res["reasoning"].startswith("(1) Who")
    for name in ("video.mp4", "side_by_side.png", "source_keypoints.coco.json", "target_keypoints.coco.json", "result.json", "config.json"):
        assert (out / name).is_file(), name
    coco = json.loads(kp.read_text())
    assert len(coco["annotations"]) == 8 and len(coco["annotations"][0]["keypoints"]) == 51
    # the keypoints file may replace one of ours, never someone else's
    assert main(["motion", str(clip), "raise the left arm", "-o", str(tmp_path / "e.mp4"), "--keypoints-out", str(kp), *FAST]) == 0
    with Video(tmp_path / "e.mp4") as v:
        assert len(v) == 8
    (tmp_path / "mine.json").write_text('{"mine": 1}')
    assert main(["motion", str(clip), "raise the left arm", "--keypoints-out", str(tmp_path / "mine.json"), *FAST]) == 2
    assert (tmp_path / "mine.json").read_text() == '{"mine": 1}'
    # without -o the keypoints still arrive, and nothing else is left behind
    assert main(["motion", str(clip), "raise the left arm", "--keypoints-out", str(tmp_path / "only.json"), *FAST]) == 0
    assert (tmp_path / "only.json").is_file()


def test_the_batch_verb_isolates_a_bad_item(clip, tmp_path):
    fast = {"steps": 2, "num_frames": 8, "seed": 0, "progress": False}
    items = [{"id": "ok", "verb": "motion", "args": {"video": str(clip), "instruction": "make the person squat", **fast}},
             {"id": "empty", "verb": "motion", "args": {"video": str(clip), "instruction": " ", **fast}}]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(it) + "\n" for it in items))
    summary = run_batch(manifest, tmp_path / "out", progress=False)
    assert (summary.ok, summary.failed) == (1, 1)
    assert json.loads((tmp_path / "out" / "ok" / "result.json").read_text())["person_found"]


def test_web_run_shows_previews_then_frames_under_a_slider(clip):
    pytest.importorskip("gradio")
    from app.web import RunControl, WebSettings, stream_run
    from pipelines.registry import get_app

    app = get_app("motion")
    names = [s.name for s in app.settings()]
    preset = {"steps": 2, "num_frames": 8}
    values = [str(clip), "make the person raise the left arm"] + [preset.get(n) for n in names] + ["builtin", "builtin"]
    updates = list(stream_run(app, WebSettings(), tuple(values), RunControl(), interval=0.05))
    final = updates[-1]
    text, video, frames, details = final[1:]
    assert "planned" in text and video.endswith(".mp4") and len(frames) == 8 and frames[0].ndim == 3 and details["frames"] == 8
    assert any(u[0] is not None for u in updates[:-1]) or len(updates) == 1  # a preview, when the run outlasted the interval


def test_benchmark_at_toy_scale(tmp_path):
    from benchmarks.anymotion import main as bench

    out = tmp_path / "bench"
    assert bench(["--n", "1", "--methods", "scot@file,oracle,copy_source", "--frame-stride", "6", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert {r["key"] for r in res["rows"]} == {"0:scot@file", "0:oracle", "0:copy_source"}
    assert "scot@file" in res["summary"] and "person_found" in res["rows"][0]  # the user's path: through an H.264 file
    assert res["summary"]["copy_source"]["background_psnr"] == 60.0 and np.isfinite(res["summary"]["oracle"]["pck@0.1"])


def test_a_clip_without_a_person_fails_and_says_what_the_reader_looks_for(tmp_path, capsys):
    from app.cli import main
    from core.video import write_video

    frames = np.full((12, 64, 64, 3), 40, np.uint8)
    frames[:, 20:40, 20:40] = (230, 30, 30)  # a square: no stick figure
    clip = write_video(tmp_path / "square.mp4", frames, fps=12)
    assert main(["motion", str(clip), "make the person raise the left arm", "--seed", "0", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "produced nothing" in err and "no person found" in err and "--pose-reader mediapipe" in err


def test_plain_figures_beside_a_shape_of_their_colour_are_read():
    """Issue 58: two held-out figures the reader missed, each beside a thick shape of its own colour (the shape's
    distance-transform peak beat the head's, and the only fresh start began there)."""
    from scorers.pose import pck
    from trackers.pose import ClassicPoseReader
    from worldgen.tasks import motion_edit

    for seed in (10**9 + 31337 + 9, 10**9 + 31337 + 5):
        world = motion_edit.generate(seed, motion_edit.Config(level=2)).worlds["source"]
        shown = [world.render(t) for t in range(0, world.num_frames, 3)]
        kp = ClassicPoseReader().read(np.stack([f.rgb for f in shown]))
        assert (kp[..., 2] > 0).all(axis=1).mean() == 1.0 and pck(kp, np.stack([f.keypoints[1] for f in shown]), (0.1,))[0.1] > 0.9
