"""ClearPipeline end to end on held-out worldgen vrs clips with the classic tracker and proposer and
scripted selectors (the planner's quality is measured in its own tests and the benchmark)."""

import numpy as np
import pytest

from pipelines.clear.pipeline import ClearConfig, ClearPipeline
from planners.counterfactual import CandidateScore, Selection
from trackers import load_tracker
from trackers.proposals import ColourProposer
from worldgen.tasks import vrs
from worldgen.tasks.base import split_seed


def clip(i: int):
    s = vrs.generate(split_seed("test", 300, i), vrs.Config(level=1))
    world = s.worlds["video"]
    frames = np.stack([world.render(t).rgb for t in range(world.num_frames)])
    ids = np.stack([world.render(t).ids for t in range(world.num_frames)])
    return frames, ids == s.record["target_id"], s.record["query"]


class OracleSelector:
    """Picks the candidate whose track overlaps the true target most (the tracker's ceiling)."""

    def __init__(self, truth: np.ndarray, sub_of):
        self.truth, self.sub_of, self.calls = truth, sub_of, 0

    def select(self, frames, marks, query):
        self.calls += 1
        truth = self.truth[self.sub_of(len(frames))]
        iou = [np.logical_and(m.masks, truth).sum() / max(1, np.logical_or(m.masks, truth).sum()) for m in marks]
        k = int(np.argmax(iou))
        scores = [CandidateScore(m.number, 1.0 if i == k else 0.0) for i, m in enumerate(marks)]
        return Selection(marks[k].number, False, 0.0, scores, [f"oracle: #{marks[k].number}"])


class NothingSelector:
    calls = 0

    def select(self, frames, marks, query):
        return Selection(None, False, 1.0, [], ["none"])


def sub_indices(n_total):
    return lambda k: [int(i) for i in ((np.arange(k) + 0.5) * n_total / k).astype(int)]


def j_mean(pred, truth):
    vis = truth.reshape(len(truth), -1).any(1)
    inter = np.logical_and(pred > 0, truth).reshape(len(truth), -1).sum(1)
    union = np.logical_or(pred > 0, truth).reshape(len(truth), -1).sum(1)
    return float((inter[vis] / np.maximum(union[vis], 1)).mean())


@pytest.mark.parametrize("monitor", [False, True])
def test_oracle_anchor_tracks_the_target(monitor):
    js = []
    for i in range(3):
        frames, truth, query = clip(i)
        pipe = ClearPipeline(ClearConfig(monitor=monitor), planner=OracleSelector(truth, sub_indices(len(frames))),
                             tracker=load_tracker("classic"), proposer=ColourProposer())
        out = pipe(frames, query)
        assert out.masks.shape == truth.shape and out.target_id is not None and len(out.modes) == len(frames)
        assert out.marks.ndim == 3 and str(out).startswith("target: candidate #")
        js.append(j_mean(out.masks, truth))
    assert np.mean(js) > 0.5, js


def test_no_object_matches_gives_empty_masks_not_an_error(tmp_path):
    frames, truth, query = clip(0)
    out = ClearPipeline(planner=NothingSelector(), tracker=load_tracker("classic"), proposer=ColourProposer())(frames, "a purple elephant")
    assert out.no_match and out.target_id is None and not out.masks.any() and str(out).startswith("no object matches")
    out.save(tmp_path / "o")
    assert (tmp_path / "o" / "masks").is_dir() and (tmp_path / "o" / "marks.png").is_file()


def test_bad_inputs():
    from core.errors import AtelierError, InputError

    pipe = ClearPipeline(planner=NothingSelector(), tracker=load_tracker("classic"), proposer=ColourProposer())
    with pytest.raises(InputError, match="query"):
        pipe(np.zeros((4, 32, 32, 3), np.uint8), " ")
    with pytest.raises(AtelierError, match="no frames"):
        pipe(np.zeros((0, 32, 32, 3), np.uint8), "the red one")


def test_segment_verb_runs_on_the_builtin_backend(tmp_path, capsys):
    """`atelier segment` with the shipped builtin planner, classic tracker and proposer, end to end."""
    import json

    from app.cli import main
    from core.video import write_video

    frames, truth, query = clip(1)
    video = write_video(tmp_path / "clip.mp4", frames, fps=12)
    assert main(["segment", str(video), query, "-o", str(tmp_path / "seg"), "--json", "--no-progress"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["frames"] == len(frames) and s["planner_calls"] >= 1
    for name in ("masks", "masks.rle.json", "overlay.mp4", "marks.png", "timeline.png", "result.json"):
        assert (tmp_path / "seg" / name).exists(), name


def test_web_tab_segments_with_the_default_components(tmp_path):
    pytest.importorskip("gradio")
    from app.web import WebSettings, run_in_web, slot_choices
    from core.video import write_video
    from pipelines.registry import get_app

    app, settings = get_app("segment"), WebSettings()
    assert slot_choices(app, "tracker", settings) == ["classic"] and slot_choices(app, "planner", settings) == ["builtin"]
    frames, truth, query = clip(2)
    video = write_video(tmp_path / "clip.mp4", frames, fps=12)
    values = (str(video), query, *[None] * len(app.settings()), *[slot_choices(app, s, settings)[0] for s in app.components])
    text, overlay, marks, timeline, summary = run_in_web(app, settings, values)
    assert text.startswith("### ") and marks.ndim == 3 and timeline.ndim == 3 and summary["frames"] == len(frames)
    assert overlay.endswith(".mp4")  # a file: the web video player cannot take an array


def test_benchmark_script_runs_every_method_on_one_clip(tmp_path):
    import json

    from benchmarks.clear import INPUTS, METHODS, main

    assert main(["--n", "1", "--out", str(tmp_path / "b")]) == 0
    data = json.loads((tmp_path / "b" / "results.json").read_text())
    assert {(r["method"], r["input"]) for r in data["rows"]} == {(m, i) for m in METHODS for i in INPUTS}
    md = (tmp_path / "b" / "results.md").read_text()
    assert "vs prompt-then-track" in md and "hard-distractor" in md
    assert md.index("Through files") < md.index("raw rendered frames (reference)") and "files - frames" in md  # the file row heads
    assert main(["--merge", str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 0  # shards merge by (clip, method, input)
    assert len(json.loads((tmp_path / "m" / "results.json").read_text())["rows"]) == len(METHODS) * len(INPUTS)


def vanishing_square_clip(t_len: int = 24, gone_at: int = 12):
    """A red square moving right that vanishes at ``gone_at``, and a static red look-alike far away."""
    frames = np.full((t_len, 64, 64, 3), 200, np.uint8)
    truth = np.zeros((t_len, 64, 64), bool)
    for t in range(t_len):
        frames[t, 44:54, 44:54] = (220, 30, 30)
        if t < gone_at:
            x = 4 + 2 * t
            frames[t, 10:20, x:x + 10] = (220, 30, 30)
            truth[t, 10:20, x:x + 10] = True
    return frames, truth


def test_a_target_that_is_gone_is_lost_not_swapped_for_a_look_alike():
    frames, truth = vanishing_square_clip()
    outs = {}
    for repair in (False, True):
        pipe = ClearPipeline(ClearConfig(overlay=False, repair=repair), planner=OracleSelector(truth, sub_indices(len(frames))),
                             tracker=load_tracker("classic"), proposer=ColourProposer())
        pipe.set_progress_bar_config(disable=True)
        outs[repair] = pipe(frames, "the red square that disappears")
    on_look_alike = {r: (o.masks[:, 44:54, 44:54] > 0).any((1, 2)) for r, o in outs.items()}
    assert on_look_alike[False].any()  # the tracker alone re-detects the look-alike...
    assert not on_look_alike[True].any()  # ...CLEAR escalates, finds nothing where the target should be, and calls it lost
    assert "lost" in outs[True].modes and set(outs[False].modes) == {"fast"}
    flagged = {e["kind"] for e in outs[False].events if e["action"] == "flag"}
    assert {"MOTION_BREAK", "TRACK_MERGE"} <= flagged  # watching only: the escalation is recorded, nothing changes
    np.testing.assert_array_equal(outs[True].masks[:12] > 0, outs[False].masks[:12] > 0)


def test_watching_without_repair_leaves_the_tracker_masks_unchanged():
    frames, truth, query = clip(0)
    masks = []
    for config in (ClearConfig(monitor=False, overlay=False), ClearConfig(repair=False, overlay=False)):
        pipe = ClearPipeline(config, planner=OracleSelector(truth, sub_indices(len(frames))), tracker=load_tracker("classic"), proposer=ColourProposer())
        pipe.set_progress_bar_config(disable=True)
        out = pipe(frames, query)
        masks.append(out.masks)
        assert set(out.modes) == {"fast"}
    np.testing.assert_array_equal(*masks)


def test_tracks_that_converged_on_one_object_are_one_candidate():
    from pipelines.clear.pipeline import distinct_tracks

    a = np.zeros((10, 16, 16), bool)
    a[:, 2:8, 2:8] = True
    b = a.copy()
    b[:2] = False
    b[:2, 10:14, 10:14] = True  # another object at first, then on a's object for 8 of 10 frames
    c = np.zeros_like(a)
    c[:, 10:14, 10:14] = True
    assert distinct_tracks(np.stack([a, b, c]), 0.7) == [0, 2]
    assert distinct_tracks(np.stack([a, b, c]), 0.7, share=0.9) == [0, 1, 2]


def test_the_heartbeat_asks_the_planner_again_and_a_changed_mind_escalates():
    frames, truth, query = clip(0)

    class ChangesItsMind(OracleSelector):
        def select(self, frames, marks, query):
            first = super().select(frames, marks, query)
            if self.calls == 1:
                return first
            return Selection(None, False, 1.0, [], ["no longer sure"])

    planner = ChangesItsMind(truth, sub_indices(len(frames)))
    pipe = ClearPipeline(ClearConfig(overlay=False, heartbeat_every=10, cooldown=1), planner=planner, tracker=load_tracker("classic"),
                         proposer=ColourProposer())
    pipe.set_progress_bar_config(disable=True)
    out = pipe(frames, query)
    fails = [e for e in out.events if e["kind"] == "HEARTBEAT_FAIL"]
    assert fails and all(e["action"] == "re-anchor" for e in fails) and planner.calls > 1
    assert out.planner_calls == planner.calls

    class Uncounted:  # a planner that keeps no call count: each selection and heartbeat counts one
        def __init__(self):
            self.inner = OracleSelector(truth, sub_indices(len(frames)))

        def select(self, frames, marks, query):
            return self.inner.select(frames, marks, query)

    uncounted = Uncounted()
    pipe = ClearPipeline(ClearConfig(overlay=False, heartbeat_every=10), planner=uncounted, tracker=load_tracker("classic"), proposer=ColourProposer())
    pipe.set_progress_bar_config(disable=True)
    assert pipe(frames, query).planner_calls == uncounted.inner.calls > 1


def test_a_file_is_decoded_once_and_every_stage_shows_progress(tmp_path, capsys, monkeypatch):
    """The 720p real clip showed no progress for ~40 s (issue 58): its tracker sessions decoded it frame by frame,
    backward from a keyframe each time. Now the working-size frames are decoded once, and each stage has a bar."""
    from core.video import Video, _PyAVReader, write_video

    frames, truth, query = clip(4)
    path = write_video(tmp_path / "clip.mp4", frames, fps=12)
    reads = []
    original = _PyAVReader.read
    monkeypatch.setattr(_PyAVReader, "read", lambda self, idx, size: reads.append(len(idx)) or original(self, idx, size))
    pipe = ClearPipeline(ClearConfig(overlay=False), planner=OracleSelector(truth, sub_indices(len(frames))),
                         tracker=load_tracker("classic"), proposer=ColourProposer())
    pipe.set_progress_bar_config(disable=False, mininterval=0)
    out = pipe(str(path), query)
    err = capsys.readouterr().err
    assert all(stage in err for stage in ("CLEAR decoding", "CLEAR tracking", "CLEAR watching the target"))
    assert sum(reads) <= 2 * len(frames)  # the first frame for the size, then one sequential pass
    on_frames = ClearPipeline(ClearConfig(overlay=False, chroma="guided"), planner=OracleSelector(truth, sub_indices(len(frames))),
                              tracker=load_tracker("classic"), proposer=ColourProposer())
    on_frames.set_progress_bar_config(disable=True)
    assert np.array_equal(out.masks, on_frames(Video(path, chroma="guided").get_frames(range(len(frames))), query).masks)
