"""The classic generation judge and the generation / editing metrics of scorers.generation."""

import numpy as np
import pytest

from core.errors import InputError
from scorers.generation import (ClipJudgement, edit_preservation, judge_against, judge_clip, psnr, ssim, temporal_consistency,
                                text_alignment)
from worldgen.motion import Motion
from worldgen.tasks import t2v
from worldgen.tasks.base import split_seed
from worldgen.world import Background, Obj, World


def render(world: World) -> np.ndarray:
    return np.stack([world.render(t, annotations=False).rgb for t in range(world.num_frames)])


def t2v_clip(index: int, level: int, num_frames: int = 16) -> tuple[dict, np.ndarray]:
    s = t2v.generate(split_seed("test", 700, index), t2v.Config(level=level, num_frames=num_frames))
    return s.record, render(s.worlds["video"])


@pytest.mark.parametrize("index", [0, 1, 2, 3, 4, 5])
def test_judge_reads_held_out_single_object_clips(index):
    record, frames = t2v_clip(index, level=1)
    result = judge_against(frames, record["attributes"])
    assert result["all_correct"], (record["attributes"]["objects"], result["judgement"]["objects"])
    assert result["extra_detections"] == 0 and result["accuracy"] == {"color": 1.0, "shape": 1.0, "direction": 1.0, "size": 1.0}


def test_judge_reads_a_two_object_clip_and_reuses_a_judgement():
    record, frames = t2v_clip(2, level=2, num_frames=32)
    judged = judge_clip(frames)
    assert isinstance(judged, ClipJudgement) and (judged.num_frames, judged.height, judged.width) == (32, 64, 64)
    result = judge_against(judged, record["attributes"])
    assert result["all_correct"] and len(result["objects"]) == len(record["attributes"]["objects"]) >= 2


def test_a_hand_built_scene_colour_shape_size_and_direction():
    objs = [Obj(1, "square", "red", "large", 0, Motion("linear", (14.0, 32.0), (1.2, 0.0))),
            Obj(2, "star", "cyan", "medium", 1, Motion("static", (48.0, 14.0))),
            Obj(3, "triangle", "brown", "small", 2, Motion("linear", (50.0, 52.0), (0.0, -1.0)))]
    world = World(64, 64, 24, 12.0, objs, Background("gradient", (45, 40, 30), (104, 79, 50)))  # a bright, brownish corner
    judged = judge_clip(render(world))
    got = {(o.color, o.shape, o.size, o.direction) for o in judged.objects}
    assert got == {("red", "square", "large", "right"), ("cyan", "star", "medium", None), ("brown", "triangle", "small", "up")}
    for o in judged.objects:  # the centre track, to a fraction of a pixel, even where the triangle passes over the square
        truth = world.track["pos"][:, [x.color for x in objs].index(o.color)]
        assert o.frames.tolist() == list(range(24)) and np.abs(o.track - truth).max() < 0.3
        assert o.to_dict()["shape_score"] > 0.9


def test_an_unmatched_record_object_is_wrong_and_a_person_is_labelled():
    from worldgen.scene import SceneConfig, sample_person

    person, p0 = sample_person(np.random.default_rng(3), SceneConfig(64, 64, 16), "medium")
    world = World(64, 64, 16, 12.0, [Obj(1, "person", "green", "medium", 0, Motion("static", p0), person=person),
                                     Obj(2, "circle", "yellow", "small", 1, Motion("static", (52.0, 10.0)))])
    frames = render(world)
    assert {(o.color, o.shape, o.size) for o in judge_clip(frames).objects} == {("green", "person", "medium"), ("yellow", "circle", "small")}
    record = {"objects": [{"id": 1, "shape": "person", "color": "green", "size": "medium", "actions": ["wave_left_arm"]},
                          {"id": 2, "shape": "circle", "color": "yellow", "size": "small", "direction": None},
                          {"id": 3, "shape": "heart", "color": "pink", "size": "large", "direction": "left"}]}
    result = judge_against(frames, record)
    person_row, circle_row, missing = result["objects"]
    assert person_row["color"] and person_row["shape"] and person_row["direction"] is None  # a person's record has actions
    assert circle_row["color"] and circle_row["shape"] and circle_row["direction"]
    assert not missing["matched"] and not any(missing[k] for k in ("color", "shape", "size", "direction"))
    assert not result["all_correct"] and result["accuracy"]["color"] == pytest.approx(2 / 3)


def test_psnr_and_ssim_of_identical_and_shifted_clips():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (3, 32, 40, 3), dtype=np.uint8)
    assert psnr(a, a) == float("inf") and ssim(a, a) == pytest.approx(1.0)
    b = np.clip(a.astype(int) + 1, 0, 255).astype(np.uint8)
    b[a == 255] = 254  # every pixel off by exactly 1
    assert psnr(a, b) == pytest.approx(10 * np.log10(255.0**2), abs=1e-9)
    noisy = np.clip(a + rng.normal(0, 20, a.shape), 0, 255).astype(np.uint8)
    s = ssim(a, noisy)
    assert 0 < s < 1 and s == pytest.approx(ssim(noisy, a))
    assert psnr(a, noisy) < psnr(a, b)


def test_ssim_matches_scikit_image_where_installed():
    metrics = pytest.importorskip("skimage.metrics")
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (1, 48, 48, 3), dtype=np.uint8)
    b = np.clip(a + rng.normal(0, 25, a.shape), 0, 255).astype(np.uint8)
    ref = metrics.structural_similarity(a[0], b[0], gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                        data_range=255, channel_axis=-1)
    assert ssim(a, b) == pytest.approx(ref, abs=1e-6)


def test_edit_preservation_ignores_the_edited_region():
    _, source = t2v_clip(0, level=1)
    edited = source.copy()
    edited[:, 10:20, 30:44] = 255 - edited[:, 10:20, 30:44]
    mask = np.zeros(source.shape[1:3], bool)
    mask[10:20, 30:44] = True
    kept = edit_preservation(source, edited, mask)
    assert kept["psnr"] == float("inf") and kept["ssim"] == pytest.approx(1.0) and kept["kept"] == pytest.approx(1 - 140 / 4096)
    whole = edit_preservation(source, edited, np.zeros_like(mask))
    assert np.isfinite(whole["psnr"]) and whole["ssim"] < 0.99
    per_frame = np.broadcast_to(mask, source.shape[:3]).copy()
    assert edit_preservation(source, edited, per_frame) == kept
    assert np.isnan(ssim(source, edited, np.ones(source.shape[:3], bool)))


def test_temporal_consistency_of_a_still_and_a_flickering_clip():
    still = np.repeat(np.full((1, 32, 32, 3), 90, np.uint8), 4, axis=0)
    assert temporal_consistency(still) == {"ssim": pytest.approx(1.0), "mad": 0.0, "flicker": 0.0}
    flicker = still.copy()
    flicker[1::2] += 40
    t = temporal_consistency(flicker)
    assert t["flicker"] == pytest.approx(40 / 255) and t["mad"] == pytest.approx(40 / 255) and t["ssim"] < 1


class FakeSpace:
    """encode_images / encode_text in one 3-d space: frames map to the x axis, 'x' texts too."""

    def encode_images(self, frames):
        return np.tile([1.0, 0.0, 0.0], (len(frames), 1))

    def encode_text(self, texts):
        return np.array([[1.0, 0.0, 0.0] if t.startswith("x") else [0.0, 2.0, 0.0] for t in texts])


def test_text_alignment_hook_uses_the_given_space():
    frames = np.zeros((2, 16, 16, 3), np.uint8)
    assert text_alignment(frames, ["x marks", "y axis"], model=FakeSpace()) == pytest.approx([1.0, 0.0])
    assert text_alignment(frames, "x", model=FakeSpace()).shape == (1,)


@pytest.mark.parametrize("call, name", [
    (lambda: judge_clip(np.zeros((2, 16, 16, 3), np.float32)), "frames"),
    (lambda: judge_clip([[0]]), "frames"),
    (lambda: judge_clip(np.zeros((2, 16, 16), np.uint8)), "frames"),
    (lambda: judge_clip(np.zeros((0, 16, 16, 3), np.uint8)), "frames"),
    (lambda: judge_against(np.zeros((2, 16, 16, 3), np.uint8), {"objects": [{"shape": "circle"}]}), "attributes"),
    (lambda: judge_against(np.zeros((2, 16, 16, 3), np.uint8), "a red circle"), "attributes"),
    (lambda: edit_preservation(np.zeros((2, 8, 8, 3), np.uint8), np.zeros((2, 8, 9, 3), np.uint8), np.zeros((8, 8), bool)), "edited"),
    (lambda: edit_preservation(np.zeros((2, 8, 8, 3), np.uint8), np.zeros((2, 8, 8, 3), np.uint8), np.zeros((8, 8), np.uint8)), "mask"),
    (lambda: edit_preservation(np.zeros((2, 8, 8, 3), np.uint8), np.zeros((2, 8, 8, 3), np.uint8), np.zeros((3, 8, 8), bool)), "mask"),
    (lambda: psnr(np.zeros((2, 8, 8, 3), np.int64), np.zeros((2, 8, 8, 3), np.uint8)), "a"),
    (lambda: temporal_consistency(np.zeros((1, 8, 8, 3), np.uint8)), "frames"),
    (lambda: text_alignment(np.zeros((1, 8, 8, 3), np.uint8), [], model=FakeSpace()), "texts"),
])
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(InputError) as err:
        call()
    assert err.value.name == name and f"invalid {name}=" in str(err.value)


def test_match_extra_limits_candidates_to_the_most_prominent_detections():
    from scorers.generation import ClipJudgement, DetectedObject, JudgeConfig, judge_against

    def obj(color, shape):
        return DetectedObject(color, shape, "medium", 6.0, np.arange(4), np.zeros((4, 2)), None, 0.9)

    judged = ClipJudgement([obj("blue", "square"), obj("green", "circle"), obj("red", "star")], 16, 64, 64)  # largest first
    record = {"objects": [{"id": 0, "color": "red", "shape": "star"}]}
    assert judge_against(judged, record, JudgeConfig(match_extra=None))["all_correct"]  # every blob a candidate
    limited = judge_against(judged, record)  # the default: the N + 1 most prominent only
    assert not limited["objects"][0]["color"] and limited["extra_detections"] == 2
