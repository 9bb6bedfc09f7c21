"""AnyMotion's pieces one at a time: the SCoT planner's person frame, labels and reasoning; the pose maps; the
renderer's pose-guided mode; windowed rendering; the motion grades; the training scripts at toy size."""

import json

import numpy as np
import pytest
import torch

from core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def sample():
    from worldgen.tasks import motion_edit

    s = motion_edit.generate(3, motion_edit.Config(num_frames=12))
    src, tgt = s.worlds["source"], s.worlds["target"]
    fs, ft = [src.render(t) for t in range(12)], [tgt.render(t) for t in range(12)]
    return {"source": np.stack([f.rgb for f in fs]), "target": np.stack([f.rgb for f in ft]),
            "source_kp": np.stack([f.keypoints[1] for f in fs]), "target_kp": np.stack([f.keypoints[1] for f in ft]),
            "person": np.stack([(a.ids == 1) | (b.ids == 1) for a, b in zip(fs, ft)])}


def test_the_planner_label_space_is_worldgens_taxonomy():
    from planners.skeleton_cot import CATEGORIES, FINE_CLASSES, NO_CHANGE, PARTS
    from training.motion_data import PARTS as DATA_PARTS
    from worldgen.figures import ACTIONS
    from worldgen.figures import CATEGORIES as WORLD_CATEGORIES

    assert FINE_CLASSES == (*sorted(ACTIONS), NO_CHANGE) and CATEGORIES == (*WORLD_CATEGORIES, NO_CHANGE)
    assert PARTS == DATA_PARTS


def test_person_frame_features_and_pixels_round_trip(sample):
    from planners.skeleton_cot import FEATURES, person_frame, skeleton_features, to_pixels

    kp = sample["source_kp"]
    origin, scale = person_frame(kp)
    assert np.allclose(origin, kp[0, [11, 12], :2].mean(0)) and 5 < scale < 30
    f = skeleton_features(kp, origin, scale, 64, 64)
    assert f.shape == (12, FEATURES)
    back = to_pixels(f[:, :34].reshape(12, 17, 2), origin, scale, 64, 64)
    assert np.allclose(back[..., :2], kp[..., :2], atol=1e-4) and (back[..., 2] == 2).all()
    with pytest.raises(InputError, match="no person"):
        person_frame(np.zeros((3, 17, 3), np.float32))


def test_motion_summary_and_reasoning_name_what_moves(sample):
    from planners.skeleton_cot import motion_summary, person_frame, reasoning_text

    src = sample["source_kp"]
    tgt = src.copy()
    tgt[4:8, 9, 1] -= 15  # the left wrist goes up
    _, scale = person_frame(src)
    moved = motion_summary(src, tgt, scale)
    assert [m["part"] for m in moved] == ["left arm"] and moved[0]["direction"] == "up" and moved[0]["joint"] == "left wrist"
    text = reasoning_text("upper_body", "raise_left_arm", 0.9, ("left arm",), moved)
    assert "left wrist moves up" in text and "(4) Fixed: head, torso, right arm" in text
    assert motion_summary(src, src, scale) == [] and "no change" in reasoning_text("no_change", "no_change", 1.0, (), [])


def test_the_planner_trains_saves_and_plans(sample, tmp_path):
    from planners.skeleton_cot import BuiltinSkeletonPlanner, SkeletonPlannerConfig, load_skeleton_planner
    from training.motion_data import MotionDataConfig, MotionPool
    from training.renderer import TextStates
    from training.skeleton_planner import Batches, SkeletonPlannerRecipe, loss_fn

    n = 2
    arrays = {"source": np.stack([sample["source"]] * n), "target": np.stack([sample["target"]] * n),
              "source_kp": np.stack([sample["source_kp"]] * n), "target_kp": np.stack([sample["target_kp"]] * n),
              "person": np.stack([sample["person"]] * n), "text": np.array(["Make the person squat instead."] * n),
              "fine": np.array(["squat"] * n), "category": np.array(["whole_body"] * n), "source_action": np.array(["jump"] * n),
              "color": np.array(["red"] * n), "level": np.ones(n, np.int64), "index": np.arange(n), "world_seed": np.arange(n)}
    pool = MotionPool(arrays, MotionDataConfig(num_frames=12))
    torch.manual_seed(0)
    cfg = SkeletonPlannerConfig(width=32, depth=1, heads=2, num_queries=2, query_depth=1, query_dim=16)
    model = BuiltinSkeletonPlanner(cfg)
    batches = Batches(pool, TextStates(), SkeletonPlannerRecipe(planner=cfg, batch=2, p_keep=0.0))
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    batch = next(batches)
    first = loss_fn(model, batch)[0].item()
    for _ in range(30):
        loss, logs = loss_fn(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first and set(logs) == {"kp", "labels", "aux", "fine_acc"}
    model.save_pretrained(tmp_path / "p")
    loaded = load_skeleton_planner(str(tmp_path / "p"))
    a = model.plan(sample["source"], sample["source_kp"], "make the person squat")
    b = loaded.plan(sample["source"], sample["source_kp"], "make the person squat")
    assert np.allclose(a.target_keypoints, b.target_keypoints, atol=1e-5) and torch.allclose(a.queries, b.queries, atol=1e-5)
    assert a.target_keypoints.shape == (12, 17, 3) and a.queries.shape == (2, 16) and a.reasoning == b.reasoning
    with pytest.raises(InputError, match="instruction"):
        model.plan(sample["source"], sample["source_kp"], "  ")
    with pytest.raises(InputError, match="source_keypoints"):
        model.plan(sample["source"], sample["source_kp"][:, :5], "squat")
    with pytest.raises(InputError, match="planner"):
        load_skeleton_planner(str(tmp_path / "missing"))


def test_queries_read_the_planned_skeleton_but_nothing_reads_them(sample):
    from planners.skeleton_cot import BuiltinSkeletonPlanner, SkeletonPlannerConfig, person_frame, skeleton_features

    torch.manual_seed(0)
    m = BuiltinSkeletonPlanner(SkeletonPlannerConfig(width=32, depth=1, heads=2, num_queries=3, query_depth=1, query_dim=8)).eval()
    kp = sample["source_kp"]
    o, s = person_frame(kp)
    feats = torch.from_numpy(skeleton_features(kp, o, s, 64, 64))[None]
    text, mask = m.encode_text(["raise the left arm"])
    out = m(text, mask, feats)
    planned = torch.from_numpy(skeleton_features(sample["target_kp"], o, s, 64, 64))[None]
    q1 = m.query_states(out["memory"], out["valid"], planned)
    q2 = m.query_states(out["memory"], out["valid"], planned + 0.5)
    assert q1.shape == (1, 3, 8) and not torch.allclose(q1, q2)


def test_pose_maps_channels_and_peaks(sample):
    from core.skeleton import POSE_MAP_CHANNELS, pose_maps

    kp = sample["target_kp"][:2]
    maps = pose_maps(kp, 64, 64)
    assert maps.shape == (2, 64, 64, POSE_MAP_CHANNELS) and maps.dtype == np.float32 and 0 <= maps.min() and maps.max() <= 1
    y, x = np.unravel_index(np.argmax(maps[0, ..., 3 + 9]), (64, 64))  # the left wrist's heatmap peaks at the joint
    assert abs(x + 0.5 - kp[0, 9, 0]) <= 1 and abs(y + 0.5 - kp[0, 9, 1]) <= 1
    assert np.array_equal(maps, pose_maps(kp, 64, 64))


def test_the_pose_guider_starts_at_zero_and_the_residual_copies_the_source(sample):
    from core.skeleton import pose_maps
    from renderers.builtin import BuiltinRenderer
    from training.motion_renderer import motion_renderer_config

    torch.manual_seed(0)
    r = BuiltinRenderer(motion_renderer_config(width=32, depth=1, num_frames=4, steps=2)).eval()
    src = sample["source"][:4]
    maps = pose_maps(sample["target_kp"][:4], 64, 64)
    out = r.generate(None, "squat", sources=[src], pose=maps, guidance=None, generator=0)
    assert np.array_equal(out, src)  # zero-initialised guider and head: x0 = the source frame
    for p in r.parameters():
        if p.ndim > 1 and not p.abs().sum():
            torch.nn.init.normal_(p, std=0.05)
    with_pose = r.generate(None, "squat", sources=[src], pose=maps, guidance=None, generator=0)
    without = r.generate(None, "squat", sources=[src], guidance=None, generator=0)
    assert not np.array_equal(with_pose, without)
    with pytest.raises(InputError, match="pose"):
        r.generate(None, "squat", sources=[src], pose=maps[:2], guidance=None, generator=0)
    with pytest.raises(InputError, match="queries"):
        r.generate(None, "squat", sources=[src], pose=maps, queries=torch.zeros(2, 4), guidance=None, generator=0)


def test_render_motion_covers_any_length_in_windows(sample):
    from renderers.builtin import BuiltinRenderer
    from renderers.pose_guided import render_motion, windows
    from training.motion_renderer import motion_renderer_config

    assert windows(12, 4) == [(0, 4), (4, 8), (8, 12)] and windows(10, 4) == [(0, 4), (4, 8), (6, 10)] and windows(3, 8) == [(0, 3)]
    torch.manual_seed(0)
    r = BuiltinRenderer(motion_renderer_config(width=32, depth=1, num_frames=4, steps=1)).eval()
    seen = []
    out = render_motion(r, sample["source"][:10], sample["target_kp"][:10], "squat", generator=0, callback=lambda s, i: seen.append(i["window"]))
    assert out.shape == (10, 64, 64, 3) and sorted(set(seen)) == [(0, 4), (4, 8), (6, 10)]
    with pytest.raises(InputError, match="target_keypoints"):
        render_motion(r, sample["source"][:10], sample["target_kp"][:4], "squat")


def test_motion_grades_of_the_truth_and_of_the_source(sample):
    from scorers.motion import grade_motion_edit, identity

    g = grade_motion_edit(sample["target"], sample["source"], sample["target"], sample["target_kp"], sample["source_kp"], sample["person"],
                          output_kp=sample["target_kp"])
    assert g["pck@0.1"] == 1.0 and g["identity_kept"] and g["background_psnr"] == 60.0
    copy = grade_motion_edit(sample["source"], sample["source"], sample["target"], sample["target_kp"], sample["source_kp"], sample["person"],
                             output_kp=sample["source_kp"])
    assert copy["moving_pck@0.1"] is None or copy["moving_pck@0.1"] < 0.5
    other = sample["target"].copy()
    other[sample["person"]] = 255 - other[sample["person"]]  # recoloured figure: identity lost
    assert not identity(other, sample["source"], sample["target_kp"], sample["source_kp"])["colour_kept"]


def test_identity_is_judged_against_the_readers_reading_of_the_truth(sample):
    """Read by the reader, the true target keeps identity whatever the reader's own error; a figure
    with stretched limbs does not."""
    from scorers.motion import grade_motion_edit, identity
    from trackers.pose import ClassicPoseReader

    reader = ClassicPoseReader()
    args = (sample["source"], sample["target"], sample["target_kp"], sample["source_kp"], sample["person"])
    truth = grade_motion_edit(sample["target"], *args, reader=reader)
    assert truth["person_found"] and truth["identity_kept"] and set(truth["proportion_ratios"].values()) == {1.0}
    stretched = sample["target_kp"].copy()
    stretched[:, 5:, :2] = stretched[:, 5:, :2] * 1.5  # every limb joint away from the origin: lengths x1.5
    assert not identity(sample["target"], sample["source"], stretched, sample["target_kp"])["proportions_kept"]
    misread = grade_motion_edit(sample["target"], *args, reader=reader, reference_kp=stretched)  # the reader got the truth wrong
    assert misread["identity_kept"] is None and misread["identity_measurable"] is False


@pytest.mark.parametrize("module", ["training.skeleton_planner", "training.motion_renderer"])
def test_tiny_training_runs_write_weights_and_cards(module, tmp_path):
    import importlib

    main = importlib.import_module(module).main
    out = tmp_path / "run"
    assert main(["--tiny", "--out", str(out)]) == 0
    for name in ("config.json", "model.safetensors", "train_config.json", "eval.json", "card.md"):
        assert (out / name).is_file(), name
    ev = json.loads((out / "eval.json").read_text())
    assert ev["steps"] == 3 and "test" in ev
    assert main(["--tiny", "--out", str(out), "--eval-only"]) == 0
