"""core.skeleton: OpenPose-style limb maps and per-joint heatmaps (AnyMotion spec b.5, d.4)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from core.errors import InputError
from core.keypoints import COCO17_NAMES
from core.skeleton import (
    LIMB_COLORS,
    OPENPOSE_COLORS,
    OPENPOSE_LIMBS,
    default_sigma,
    default_thickness,
    render_heatmaps,
    render_limbs,
)

cv2.setNumThreads(1)

J = {name: i for i, name in enumerate(COCO17_NAMES)}
# OpenPose-18 indices of the joints used below
OP_NECK, OP_RSH, OP_LSH, OP_LEL, OP_LWR = 1, 2, 5, 6, 7
LIMB = {pair: k for k, pair in enumerate(OPENPOSE_LIMBS)}


def _person(**joints) -> np.ndarray:
    """A COCO-17 person with only the named joints present (v=2), at the given (x, y)."""
    kp = np.zeros((17, 3), np.float32)
    for name, (x, y) in joints.items():
        kp[J[name]] = (x, y, 2)
    return kp


def _has(img: np.ndarray, colour) -> bool:
    return bool(np.all(img == np.asarray(colour, np.uint8), axis=-1).any())


def _full_person() -> np.ndarray:
    """A standing person facing the viewer on a 64 x 64 image (their left on the image's right)."""
    pts = {
        "nose": (32, 12), "left_eye": (33.5, 11), "right_eye": (30.5, 11), "left_ear": (35, 12), "right_ear": (29, 12),
        "left_shoulder": (38, 20), "right_shoulder": (26, 20), "left_elbow": (40, 30), "right_elbow": (24, 30),
        "left_wrist": (41, 39), "right_wrist": (23, 39), "left_hip": (36, 38), "right_hip": (28, 38),
        "left_knee": (37, 49), "right_knee": (27, 49), "left_ankle": (37, 60), "right_ankle": (27, 60),
    }  # fmt: skip
    return _person(**pts)


# ------------------------------------------------------------------------------- shapes, dtypes


def test_shapes_and_dtypes():
    kp = _full_person()
    assert render_limbs(kp, 48, 64).shape == (48, 64, 3) and render_limbs(kp, 48, 64).dtype == np.uint8
    video = np.stack([kp, kp, kp])
    assert render_limbs(video, 48, 64).shape == (3, 48, 64, 3)
    assert render_limbs(video[:, None].repeat(2, 1), 48, 64).shape == (3, 48, 64, 3)  # (T, P, 17, 3)
    hm = render_heatmaps(kp, 48, 64)
    assert hm.shape == (17, 48, 64) and hm.dtype == np.float32
    assert render_heatmaps(video, 48, 64).shape == (3, 17, 48, 64)
    assert render_heatmaps(video[:, None].repeat(2, 1), 48, 64).shape == (3, 17, 48, 64)
    assert 0.0 <= hm.min() and hm.max() <= 1.0


def test_deterministic_and_input_untouched():
    kp = _full_person()
    before = kp.copy()
    a, b = render_limbs(kp, 64, 64), render_limbs(kp.copy(), 64, 64)
    assert np.array_equal(a, b)
    assert np.array_equal(render_heatmaps(kp, 64, 64), render_heatmaps(kp.copy(), 64, 64))
    assert np.array_equal(kp, before)
    # a video's frame is drawn as that frame alone
    assert np.array_equal(render_limbs(np.stack([kp, kp * 0]), 64, 64)[0], a)


def test_defaults_follow_the_image_size():
    assert default_thickness(512, 512) == 8 and default_thickness(64, 64) == 1
    assert default_sigma(300, 400) == pytest.approx(10.0)
    assert LIMB_COLORS[0] == (153, 0, 0)  # 60% of OpenPose's red


# ----------------------------------------------------------------------------------- limb pixels


def test_limb_lies_between_its_joints():
    # left shoulder (40.5, 20.5) to left elbow (40.5, 40.5): a vertical bar through pixel column 40
    kp = _person(left_shoulder=(40.5, 20.5), left_elbow=(40.5, 40.5))
    img = render_limbs(kp, 64, 64, thickness=3, radius=2)
    limb = LIMB_COLORS[LIMB[(OP_LSH, OP_LEL)]]
    for y in (26, 30, 34):
        assert tuple(img[y, 40]) == limb
        assert tuple(img[y, 39]) == limb and tuple(img[y, 41]) == limb  # 3 px wide
        assert not img[y, 43].any() and not img[y, 37].any()
    assert tuple(img[20, 40]) == OPENPOSE_COLORS[OP_LSH]  # the joints are dots on top, in their own colour
    assert tuple(img[40, 40]) == OPENPOSE_COLORS[OP_LEL]
    assert not img[:15].any() and not img[47:].any() and not img[:, :36].any() and not img[:, 45:].any()
    # only this limb's colour and its two joints' colours are drawn
    colours = {tuple(c) for c in img.reshape(-1, 3)} - {(0, 0, 0)}
    assert colours == {limb, OPENPOSE_COLORS[OP_LSH], OPENPOSE_COLORS[OP_LEL]}


def test_diagonal_limb_pixels_are_on_the_segment():
    a, b = np.array([10.5, 50.5]), np.array([50.5, 12.5])
    kp = _person(left_elbow=tuple(a), left_wrist=tuple(b))
    img = render_limbs(kp, 64, 64, thickness=2, radius=1)
    ys, xs = np.nonzero(np.all(img == LIMB_COLORS[LIMB[(OP_LEL, OP_LWR)]], axis=-1))
    assert len(xs) > 40
    p = np.stack([xs + 0.5, ys + 0.5], 1)  # pixel centres
    t = np.clip(((p - a) @ (b - a)) / ((b - a) @ (b - a)), 0, 1)
    dist = np.linalg.norm(p - (a + t[:, None] * (b - a)), axis=1)
    assert dist.max() <= 1.6  # half the width plus rasterisation
    # and the segment's midpoint is covered
    mid = ((a + b) / 2).astype(int)
    assert tuple(img[mid[1], mid[0]]) == LIMB_COLORS[LIMB[(OP_LEL, OP_LWR)]]


def test_every_drawn_pixel_is_near_a_limb_or_joint():
    kp = _full_person()
    img = render_limbs(kp, 64, 64, thickness=2, radius=1)
    from core.keypoints import to_openpose18

    op = to_openpose18(kp)[:, :2]
    ys, xs = np.nonzero(img.any(-1))
    p = np.stack([xs + 0.5, ys + 0.5], 1)
    best = np.full(len(p), np.inf)
    for i, j in OPENPOSE_LIMBS:
        a, b = op[i], op[j]
        t = np.clip(((p - a) @ (b - a)) / max((b - a) @ (b - a), 1e-9), 0, 1)
        best = np.minimum(best, np.linalg.norm(p - (a + t[:, None] * (b - a)), axis=1))
    assert best.max() <= 1.6
    # the neck is the shoulders' midpoint, drawn in OpenPose's neck colour
    assert tuple(img[20, 32]) == OPENPOSE_COLORS[OP_NECK]


def test_invisible_joint_draws_no_limb_and_a_zero_heatmap():
    kp = _full_person()
    kp[J["left_wrist"], 2] = 0
    img = render_limbs(kp, 64, 64, thickness=2, radius=1)
    assert not _has(img, LIMB_COLORS[LIMB[(OP_LEL, OP_LWR)]])  # the left forearm
    assert not _has(img, OPENPOSE_COLORS[OP_LWR])
    assert _has(img, LIMB_COLORS[LIMB[(OP_LSH, OP_LEL)]])  # the left upper arm still is
    hm = render_heatmaps(kp, 64, 64)
    assert not hm[J["left_wrist"]].any()
    assert all(hm[j].max() > 0.5 for j in range(17) if j != J["left_wrist"])


def test_missing_shoulder_removes_the_neck():
    kp = _full_person()
    kp[J["right_shoulder"], 2] = 0
    img = render_limbs(kp, 64, 64, thickness=2, radius=1)
    for k, (i, j) in enumerate(OPENPOSE_LIMBS):
        if OP_NECK in (i, j):
            assert not _has(img, LIMB_COLORS[k])
    assert not _has(img, OPENPOSE_COLORS[OP_NECK]) and not _has(img, OPENPOSE_COLORS[OP_RSH])


def test_min_visibility_drops_occluded_joints():
    kp = _person(left_shoulder=(40.5, 20.5), left_elbow=(40.5, 40.5))
    kp[J["left_elbow"], 2] = 1  # labelled but occluded
    assert render_limbs(kp, 64, 64, thickness=3).any()  # drawn by default
    drawn = render_limbs(kp, 64, 64, thickness=3, radius=2, min_visibility=2)
    assert not _has(drawn, LIMB_COLORS[LIMB[(OP_LSH, OP_LEL)]]) and _has(drawn, OPENPOSE_COLORS[OP_LSH])
    assert not render_heatmaps(kp, 64, 64, min_visibility=2)[J["left_elbow"]].any()


def test_joints_far_outside_are_safe():
    kp = _person(left_shoulder=(1e9, -1e9), left_elbow=(10.5, 10.5))
    img = render_limbs(kp, 32, 32)
    assert img.shape == (32, 32, 3)
    assert not render_heatmaps(kp, 32, 32)[J["left_shoulder"]].any()


# -------------------------------------------------------------------------------------- heatmaps


def test_heatmap_peak_sits_at_the_joint():
    kp = _full_person()
    kp[:, :2] += 0.37  # off the pixel centres
    hm = render_heatmaps(kp, 64, 64, sigma=2.0)
    for j in range(17):
        # the pixel holding the joint has the nearest centre, so it is the peak
        y, x = np.unravel_index(int(np.argmax(hm[j])), hm[j].shape)
        assert (y, x) == (int(np.floor(kp[j, 1])), int(np.floor(kp[j, 0])))


def test_heatmap_is_the_gaussian_of_the_distance():
    kp = _person(nose=(20.5, 10.5))  # on a pixel centre: exactly 1 there
    hm = render_heatmaps(kp, 32, 40, sigma=3.0)[J["nose"]]
    assert hm[10, 20] == pytest.approx(1.0)
    assert hm[10, 23] == pytest.approx(np.exp(-0.5), rel=1e-5)  # one sigma away
    assert hm[14, 23] == pytest.approx(np.exp(-25 / 18), rel=1e-5)  # 5 px away
    assert hm[10, 17] == pytest.approx(hm[10, 23])  # symmetric


def test_heatmaps_of_several_persons_take_the_maximum():
    a, b = _person(nose=(8.5, 8.5)), _person(nose=(24.5, 20.5))
    both = render_heatmaps(np.stack([a, b])[None], 32, 32, sigma=2.0)[0, J["nose"]]
    one, two = render_heatmaps(a, 32, 32, sigma=2.0)[J["nose"]], render_heatmaps(b, 32, 32, sigma=2.0)[J["nose"]]
    assert np.array_equal(both, np.maximum(one, two))


def test_worldgen_figure_skeleton_lies_on_the_figure():
    """The synthetic world's GT keypoints, rendered, land on the figure's own pixels."""
    from worldgen.tasks import motion_edit

    world = motion_edit.generate(3, motion_edit.Config(num_frames=8)).worlds["source"]
    frame = world.render(4)
    kp = frame.keypoints[1]
    img = render_limbs(kp, world.height, world.width, thickness=1, radius=1, min_visibility=2)
    drawn = img.any(-1)
    assert drawn.sum() > 50
    near = cv2.dilate((frame.ids == 1).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    assert (drawn & near).sum() / drawn.sum() > 0.95
    hm = render_heatmaps(kp, world.height, world.width)
    for j in np.nonzero(kp[:, 2] == 2)[0]:
        y, x = np.unravel_index(int(np.argmax(hm[j])), hm[j].shape)
        assert frame.ids[y, x] == 1 or near[y, x]


# ---------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [np.zeros((17, 2)), np.zeros((5, 17)), np.zeros((2, 2, 2, 17, 3)), "x"])
def test_bad_keypoints(bad):
    with pytest.raises(InputError, match="keypoints"):
        render_limbs(bad, 8, 8)
    with pytest.raises(InputError, match="keypoints"):
        render_heatmaps(bad, 8, 8)


def test_bad_values():
    kp = _full_person()
    nan = kp.copy()
    nan[0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        render_limbs(nan, 8, 8)
    for h, w in ((0, 8), (8, -1), (8.5, 8)):
        with pytest.raises(InputError, match="height, width"):
            render_limbs(kp, h, w)
        with pytest.raises(InputError, match="height, width"):
            render_heatmaps(kp, h, w)
    for t in (0, 2.5, True):
        with pytest.raises(InputError, match="thickness"):
            render_limbs(kp, 8, 8, thickness=t)
    with pytest.raises(InputError, match="radius"):
        render_limbs(kp, 8, 8, radius=0)
    for s in (0, -1, float("nan"), "a"):
        with pytest.raises(InputError, match="sigma"):
            render_heatmaps(kp, 8, 8, sigma=s)
