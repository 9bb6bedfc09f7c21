"""VOS scoring: J, F and J&F equal the official DAVIS-2017 evaluation on real OSVOS results; metric properties."""

import json

import numpy as np
import pytest

from app.batch import run_batch
from app.cli import main
from core.errors import InputError
from core.masks import rle_encode, write_mask_folder
from scorers.vos import (bound_pix, db_eval_iou, db_statistics, disk, evaluate, f_measure, score_sequence,
                         seg2bmap)
from tests.shared_data import DAVIS, need

STATS = ("J_mean", "J_recall", "J_decay", "F_mean", "F_recall", "F_decay", "JF_mean")


# ------------------------------------------------------------------------- the official numbers


def test_reproduces_the_official_davis2017_numbers_on_osvos():
    expected = json.loads(need(DAVIS / "expected_davis2017_official.json").read_text())
    result = evaluate(DAVIS / "predictions" / "osvos_davis2017", DAVIS / "Annotations" / "480p").to_dict()
    assert result["protocol"] == "semi-supervised" and set(result["sequences"]) == set(expected["sequences"])
    for name, exp in expected["sequences"].items():
        got = result["sequences"][name]
        assert got["frames_evaluated"] == exp["frames_evaluated"], name  # first and last frame left out
        (obj,) = got["objects"]  # one object per DAVIS-2016 sequence: the 255 of the GT is object 1
        np.testing.assert_allclose(obj["J_per_frame"], exp["J_per_frame"], rtol=0, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(obj["F_per_frame"], exp["F_per_frame"], rtol=0, atol=1e-6, err_msg=name)
        for key in STATS:
            assert got[key] == pytest.approx(exp[key], abs=1e-9), (name, key)
    for key, value in expected["global"].items():
        assert result["global"][key] == pytest.approx(value, abs=1e-9), key
    assert result["global"]["num_objects"] == 5 and result["global"]["num_frames"] == 279


def test_cli_scores_one_real_sequence(capsys):
    pred, gt = need(DAVIS / "predictions" / "osvos_davis2017" / "blackswan"), DAVIS / "Annotations" / "480p" / "blackswan"
    assert main(["score", "vos", str(pred), str(gt), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["global"]["J_mean"] == pytest.approx(0.9430200107249278, abs=1e-9)
    assert main(["score", "vos", str(pred), str(gt)]) == 0
    table = capsys.readouterr().out
    assert "J&F-Mean" in table and "F-Decay" in table and "0.943" in table and "all (1 object)" in table


# ------------------------------------------------------------------------------ metric properties


def _square(shape=(480, 854), top=100, left=200, side=120):
    m = np.zeros(shape, bool)
    m[top:top + side, left:left + side] = True
    return m


def test_both_empty_scores_one_and_a_missed_object_scores_zero():
    empty = np.zeros((48, 64), bool)
    assert db_eval_iou(empty, empty) == 1.0 and f_measure(empty, empty) == 1.0
    gt = _square((48, 64), 10, 10, 20)
    assert db_eval_iou(gt, empty) == 0.0 and f_measure(empty, gt) == 0.0  # P = 1, R = 0
    assert f_measure(gt, empty) == 0.0  # P = 0, R = 1
    assert db_eval_iou(gt, gt) == 1.0 and f_measure(gt, gt) == 1.0


def test_void_pixels_count_for_neither_side():
    gt, pred = _square((48, 64), 10, 10, 20), _square((48, 64), 10, 10, 20)
    pred[0:5, 0:5] = True
    void = np.zeros_like(gt)
    void[0:5, 0:5] = True
    assert db_eval_iou(gt, pred) < 1.0 and db_eval_iou(gt, pred, void) == 1.0
    assert f_measure(pred, gt) < 1.0 and f_measure(pred, gt, void) == 1.0


def test_boundary_tolerance_is_0_8_percent_of_the_diagonal():
    assert bound_pix((480, 854)) == 8.0 and bound_pix((480, 854), 3) == 3.0
    assert disk(1).tolist() == [[0, 1, 0], [1, 1, 1], [0, 1, 0]] and disk(8).shape == (17, 17)
    gt = _square()
    for d in (1, 5, 8):
        assert f_measure(np.roll(gt, d, axis=1), gt) == 1.0, d
        assert f_measure(np.roll(gt, d, axis=0), gt) == 1.0, d
    assert f_measure(np.roll(gt, 9, axis=1), gt) < 1.0
    assert f_measure(np.roll(gt, 30, axis=1), gt) < 0.5
    with pytest.raises(InputError, match="bound_th"):
        f_measure(gt, gt, bound_th=0)


def test_seg2bmap_outlines_a_rectangle_half_a_pixel_toward_the_origin():
    m = np.zeros((40, 50), bool)
    m[10:20, 5:25] = True  # h = 10, w = 20
    b = seg2bmap(m)
    assert b.sum() == 2 * (10 + 20)
    outline = np.zeros_like(b)
    outline[9:20, 4:25] = True
    outline[10:19, 5:24] = False
    assert np.array_equal(b, outline)
    corner = np.zeros((40, 50), bool)
    corner[30:, 40:] = True  # touches the bottom and right image border: those sides are no boundary
    assert seg2bmap(corner).sum() == 10 + 10 + 1
    assert not seg2bmap(np.ones((40, 50), bool)).any()


def test_db_statistics_on_hand_made_vectors():
    s = db_statistics([1.0] * 4 + [0.2] * 4)  # bins cut at 0, 2, 4, 5, 7
    assert (s.mean, s.recall, s.decay) == pytest.approx((0.6, 0.5, 0.8))
    s = db_statistics(np.arange(8) / 8)  # first bin values[0:3], last bin values[5:8]
    assert s.decay == pytest.approx(0.125 - 0.75)
    s = db_statistics([1, 1, 0, 0, 0, 0, 0])  # linspace(1, 7, 5) = 1, 2.5, 4, 5.5, 7: halves round up
    assert s.decay == pytest.approx(2 / 3) and s.recall == pytest.approx(2 / 7)
    assert db_statistics([0.7]).decay == 0.0


# ---------------------------------------------------------------------------------- protocols


def _two_objects(t=6, shape=(60, 80)):
    """Id maps with object 1 (a square moving right) and object 2 (a bar); frame 3 shows neither."""
    ids = np.zeros((t, *shape), np.uint8)
    for k in range(t):
        if k != 3:
            ids[k, 10:30, 5 + 2 * k:25 + 2 * k] = 1
            ids[k, 40:50, 10:70] = 2
    return ids


def test_semi_supervised_multi_object_and_missing_ids():
    gt = _two_objects()
    s = score_sequence(gt, gt)
    assert s.frames == ("00001", "00002", "00003", "00004") and [o.object_id for o in s.objects] == [1, 2]
    assert all(o.j_per_frame == (1.0,) * 4 and o.f_per_frame == (1.0,) * 4 for o in s.objects)  # frame 3: empty vs empty
    pred = gt.copy()
    pred[2][pred[2] == 2] = 0  # object 2 missing from frame 2: an empty mask there
    s = score_sequence(pred, gt)
    assert s.objects[1].j_per_frame == (1.0, 0.0, 1.0, 1.0) and s.objects[1].f_per_frame[1] == 0.0
    only_one = np.where(gt == 2, 0, gt).astype(np.uint8)  # id 2 never predicted: zero-padded as the official code
    assert score_sequence(only_one, gt).objects[1].j.mean == pytest.approx(0.25)  # only the empty frame 3 scores
    with pytest.raises(InputError, match="object id 3"):
        score_sequence(np.where(gt == 2, 3, gt).astype(np.uint8), gt)


def test_unsupervised_matches_swapped_ids_by_hungarian_assignment():
    gt = _two_objects()
    swapped = np.choose(gt, [0, 2, 1]).astype(np.uint8)
    assert [o.j.mean for o in score_sequence(swapped, gt).objects] == [0.25, 0.25]  # semi: id k is object k
    assert [o.pred_id for o in score_sequence(swapped, gt, protocol="unsupervised").objects] == [2, 1]
    pred = np.zeros_like(gt)
    pred[gt == 1], pred[gt == 2] = 2, 3  # objects under other ids, plus a junk proposal 1
    pred[:, 0:5, 0:5] = 1
    s = score_sequence(pred, gt, protocol="unsupervised")
    assert len(s.frames) == 6  # every frame is scored
    assert [(o.object_id, o.pred_id) for o in s.objects] == [(1, 2), (2, 3)]
    assert s.jf_mean == 1.0
    lonely = score_sequence(np.zeros_like(gt), gt, protocol="unsupervised")  # no proposals: padded, pred_id 0
    assert [o.pred_id for o in lonely.objects] == [0, 0]


def test_unsupervised_excludes_void_pixels():
    gt = _two_objects()
    gt[:, 0:8, 0:8] = 255
    pred = np.where(gt == 255, 0, gt).astype(np.uint8)
    pred[:, 0:8, 0:8] = 1  # painting over void costs nothing
    assert score_sequence(pred, gt, protocol="unsupervised").jf_mean == 1.0


# -------------------------------------------------------------------------------------- inputs


def _masklet(path, ids):
    n = int(ids.max())
    path.write_text(json.dumps({"masklet": [[rle_encode(frame == k) for k in range(1, n + 1)] for frame in ids]}))
    return path


def test_masklet_json_and_png_folders_give_the_same_scores(tmp_path):
    gt = _two_objects()
    pred = gt.copy()
    pred[1:, 10:30] = np.roll(pred[1:, 10:30], 3, axis=-1)
    write_mask_folder(tmp_path / "gt", gt)
    write_mask_folder(tmp_path / "pred", pred)
    from_pngs = evaluate(tmp_path / "pred", tmp_path / "gt")
    from_masklet = evaluate(_masklet(tmp_path / "pred.json", pred), tmp_path / "gt")
    both_masklets = evaluate(_masklet(tmp_path / "pred.json", pred), _masklet(tmp_path / "gt.json", gt))
    assert from_pngs.jf_mean < 1.0
    for other in (from_masklet, both_masklets):
        assert [o.j_per_frame for o in other.objects] == [o.j_per_frame for o in from_pngs.objects]
        assert [o.f_per_frame for o in other.objects] == [o.f_per_frame for o in from_pngs.objects]


def test_folders_of_sequences_pair_by_name_and_mismatches_name_both_paths(tmp_path, capsys):
    gt = _two_objects()
    for name in ("a", "b"):
        write_mask_folder(tmp_path / "gt" / name, gt)
        write_mask_folder(tmp_path / "pred" / name, gt)
    r = evaluate(tmp_path / "pred", tmp_path / "gt")
    assert [s.name for s in r.sequences] == ["a", "b"] and r.jf_mean == 1.0 and len(r.objects) == 4
    assert main(["score", "vos", str(tmp_path / "pred"), str(tmp_path / "gt")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in table[2:]] == ["a", "b", "all"]

    write_mask_folder(tmp_path / "middle", gt[1:-1], start=1)  # the first and last frame are not needed
    assert evaluate(tmp_path / "middle", tmp_path / "gt" / "a").jf_mean == 1.0
    write_mask_folder(tmp_path / "short", gt[:4])
    with pytest.raises(InputError, match="lacks 1 frame") as e:
        evaluate(tmp_path / "short", tmp_path / "gt" / "a")
    assert str(tmp_path / "short") in str(e.value) and str(tmp_path / "gt" / "a") in str(e.value)
    with pytest.raises(InputError, match="has 4 frames but the ground truth") as e:
        evaluate(_masklet(tmp_path / "short.json", gt[:4]), tmp_path / "gt" / "a")
    write_mask_folder(tmp_path / "small", gt[:, :30])
    with pytest.raises(InputError, match="80x30 but the ground truth") as e:
        evaluate(tmp_path / "small", tmp_path / "gt" / "a")
    assert str(tmp_path / "small") in str(e.value) and str(tmp_path / "gt" / "a") in str(e.value)
    with pytest.raises(InputError, match="no prediction for 1 sequence"):
        evaluate(tmp_path / "pred" / "a", tmp_path / "gt")


def test_cli_bad_path_is_a_one_line_usage_error(tmp_path, capsys):
    assert main(["score", "vos", str(tmp_path / "nope"), str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "PRED" in err and "nope" in err


def test_batch_verb_score_vos(tmp_path):
    gt = _two_objects()
    write_mask_folder(tmp_path / "gt", gt)
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text(json.dumps({"id": "vos", "verb": "score.vos", "args": {"pred": "gt", "gt": "gt", "unsupervised": True}}) + "\n")
    summary = run_batch(manifest, tmp_path / "out", progress=False)
    assert summary.ok == 1
    result = json.loads((tmp_path / "out" / "vos" / "result.json").read_text())
    assert result["protocol"] == "unsupervised" and result["global"]["JF_mean"] == 1.0
