"""trackers.pose: the PoseReader protocol, the classic stick-figure reader on worldgen clips, the
mediapipe backend's conversion (through a stand-in module) and its missing-package error."""

from __future__ import annotations

import sys
import types

import cv2
import numpy as np
import pytest

from core.errors import InputError
from core.keypoints import COCO17_NAMES
from scorers.pose import pck
from trackers.pose import (
    ClassicPoseReader,
    MediaPipePoseReader,
    PoseReader,
    figure_colour,
    load_pose_reader,
)
from worldgen.tasks import motion_edit
from worldgen.vocab import COLORS

cv2.setNumThreads(1)

J = {name: i for i, name in enumerate(COCO17_NAMES)}


def _clip(seed: int, world: str = "source", frames: int = 12, level: int = 2, size: int = 64):
    sample = motion_edit.generate(seed, motion_edit.Config(size=size, num_frames=frames, level=level))
    w = sample.worlds[world]
    rendered = [w.render(t) for t in range(w.num_frames)]
    return np.stack([f.rgb for f in rendered]), np.stack([f.keypoints[1] for f in rendered]), w


@pytest.fixture(scope="module")
def clip():
    """Seed 1's source: raise both arms (a big limb motion), on a checker background."""
    return _clip(1, "source")


@pytest.fixture(scope="module")
def read_clip(clip):
    rgb = clip[0]
    return ClassicPoseReader().read(rgb)


# ------------------------------------------------------------------------------ the classic reader


def test_reads_the_figure(clip, read_clip):
    rgb, gt, _ = clip
    assert read_clip.shape == (len(rgb), 17, 3) and read_clip.dtype == np.float32
    assert pck(read_clip, gt, (0.1,))[0.1] >= 0.9
    assert pck(read_clip, gt, (0.05,))[0.05] >= 0.8


def test_left_is_on_the_image_right(clip, read_clip):
    """COCO: the person faces the viewer, so their left joints have the larger x."""
    for a, b in (("left_shoulder", "right_shoulder"), ("left_hip", "right_hip"), ("left_eye", "right_eye")):
        assert (read_clip[:, J[a], 0] > read_clip[:, J[b], 0]).all()


def test_visibility(clip, read_clip):
    rgb = clip[0]
    v = read_clip[..., 2]
    assert set(np.unique(v)) <= {0.0, 1.0, 2.0}
    h, w = rgb.shape[1:3]
    x, y = read_clip[..., 0], read_clip[..., 1]
    inside = (x >= 0) & (y >= 0) & (x < w) & (y < h)
    assert np.array_equal(v > 0, inside)  # 0 exactly outside the frame
    # v = 2 where the joint's pixel shows the figure's colour
    colour = figure_colour(rgb)
    t, j = np.nonzero(v == 2)
    px = rgb[t, y[t, j].astype(int), x[t, j].astype(int)].astype(np.float32)
    assert np.median(np.linalg.norm(px - colour, axis=1)) < 40


def test_deterministic(clip, read_clip):
    rgb, _, _ = clip
    again = ClassicPoseReader().read(rgb.copy())
    assert np.array_equal(again, read_clip)


def test_target_world_and_a_shape_in_front():
    """Level 3: a distractor shape in front of the figure (joints under it have GT v = 1)."""
    rgb, gt, _ = _clip(9, "source", frames=10, level=3)
    assert (gt[..., 2] == 1).sum() >= 5
    pred = ClassicPoseReader().read(rgb)
    assert pck(pred, gt, (0.1,))[0.1] >= 0.9
    hidden = gt[..., 2] == 1  # guessed from the limbs around them
    assert np.hypot(*(pred[..., :2] - gt[..., :2])[hidden].T).max() < 0.1 * np.hypot(*np.ptp(gt[0, :, :2], axis=0))


def test_single_frame_frame_source_and_given_colour(clip):
    rgb, gt, world = clip
    one = ClassicPoseReader().read(rgb[6])
    assert one.shape == (17, 3)
    assert pck(one, gt[6], (0.1,))[0.1] >= 0.9

    class Source:  # core.frames.FrameSource
        def __len__(self):
            return 3

        def get_frames(self, indices):
            return rgb[list(indices)]

    kp = ClassicPoseReader(colour=COLORS[world.obj(1).color]).read(Source())
    assert kp.shape == (3, 17, 3)
    assert pck(kp, gt[:3], (0.1,))[0.1] >= 0.9


def test_large_frames_are_read_at_work_size():
    rgb, gt, _ = _clip(3, "source", frames=4, size=128)
    pred = ClassicPoseReader(work_size=64).read(rgb)
    assert pck(pred, gt, (0.1,))[0.1] >= 0.9  # keypoints come back in the frame's own pixels


def test_no_figure_gives_zeros():
    blank = np.full((3, 48, 48, 3), 25, np.uint8)
    assert not ClassicPoseReader().read(blank).any()
    shapes = blank.copy()
    cv2.circle(shapes[1], (20, 20), 8, (220, 40, 40), -1)  # a filled disk is no figure
    cv2.rectangle(shapes[2], (5, 30), (18, 44), (40, 80, 220), -1)
    assert not ClassicPoseReader().read(shapes).any()
    # a frame without the figure, in a clip with one, is all zero
    rgb, _, _ = _clip(2, "source", frames=4)
    rgb = rgb.copy()
    rgb[2] = rgb[2, :1, :1]  # background colour everywhere
    kp = ClassicPoseReader().read(rgb)
    assert not kp[2].any() and kp[[0, 1, 3], :, 2].max() == 2


def test_protocol_and_loader():
    assert isinstance(ClassicPoseReader(), PoseReader)
    assert isinstance(load_pose_reader("classic"), ClassicPoseReader)
    assert load_pose_reader("classic", grid=8).grid == 8
    with pytest.raises(InputError, match="choose one of"):
        load_pose_reader("openpose")


@pytest.mark.parametrize("kw", [{"colour": (1, 2)}, {"colour": "red"}, {"colour": (0, 0, 300)}, {"grid": 2}, {"grid": 1.5},
                                {"calibration_frames": 0}, {"work_size": 8}, {"prior_weight": -1}])
def test_bad_settings(kw):
    with pytest.raises(InputError, match=next(iter(kw))):
        ClassicPoseReader(**kw)


@pytest.mark.parametrize("bad", [np.zeros((2, 8, 8), np.uint8), np.zeros((2, 8, 8, 3), np.float32), np.zeros((0, 8, 8, 3), np.uint8), "clip.mp4"])
def test_bad_frames(bad):
    with pytest.raises(InputError, match="frames"):
        ClassicPoseReader().read(bad)


# ------------------------------------------------------------------------------------- mediapipe


def test_mediapipe_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mediapipe", None)  # import mediapipe -> ImportError
    with pytest.raises(InputError, match=r"pip install 'atelier\[pose\]'"):
        load_pose_reader("mediapipe")


def test_mediapipe_landmarks_become_coco17(monkeypatch):
    """A stand-in for mediapipe.solutions.pose: the reader converts its 33 normalised landmarks."""
    marks = np.zeros((33, 4), np.float32)
    marks[:, 0] = np.linspace(0.1, 0.9, 33)
    marks[:, 1] = np.linspace(0.2, 0.8, 33)
    marks[:, 3] = 0.9
    marks[15, 3] = 0.1  # the left wrist (MediaPipe 15), barely visible
    seen = []

    class Pose:
        def __init__(self, **kw):
            seen.append(kw)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def process(self, image):
            assert image.dtype == np.uint8 and image.shape == (20, 40, 3)
            if image.mean() > 100:  # a bright frame: nobody found
                return types.SimpleNamespace(pose_landmarks=None)
            lm = [types.SimpleNamespace(x=float(x), y=float(y), z=float(z), visibility=float(v)) for x, y, z, v in marks]
            return types.SimpleNamespace(pose_landmarks=types.SimpleNamespace(landmark=lm))

    fake = types.ModuleType("mediapipe")
    fake.solutions = types.SimpleNamespace(pose=types.SimpleNamespace(Pose=Pose))
    monkeypatch.setitem(sys.modules, "mediapipe", fake)
    reader = load_pose_reader("mediapipe", model_complexity=0)
    assert isinstance(reader, MediaPipePoseReader) and isinstance(reader, PoseReader)
    frames = np.zeros((2, 20, 40, 3), np.uint8)
    frames[1] = 200
    kp = reader.read(frames)
    assert seen[0]["model_complexity"] == 0 and seen[0]["static_image_mode"] is False
    assert kp.shape == (2, 17, 3)
    assert kp[0, J["nose"], 0] == pytest.approx(0.1 * 40) and kp[0, J["nose"], 1] == pytest.approx(0.2 * 20)
    lsh = 11  # MediaPipe's left shoulder
    assert kp[0, J["left_shoulder"], 0] == pytest.approx(marks[lsh, 0] * 40)
    assert kp[0, J["left_wrist"], 2] == 1 and kp[0, J["left_shoulder"], 2] == 2
    assert not kp[1].any()  # no person: v = 0
    with pytest.raises(InputError, match="model_complexity"):
        MediaPipePoseReader(model_complexity=3)
