"""scorers/pose.py: OKS and keypoint AP against pycocotools (stored reference numbers and live calls),
PCK and MPJPE on hand-made cases, and ``atelier score pose`` / ``score.pose`` on good and broken files."""

from __future__ import annotations

import contextlib
import copy
import io
import json

import numpy as np
import pytest

from app.batch import run_batch
from app.cli import main
from core.errors import InputError, MediaError
from scorers.pose import COCO_SIGMAS, STAT_NAMES, mpjpe, oks, oks_ap, pck, pose_report
from tests.shared_data import COCO_KPTS, need

EXPECTED = COCO_KPTS.parent / "expected_pycocotools.json"


def _shifted(gt: dict, dx: float, dy: float) -> list[dict]:
    """The README recipe: one prediction per non-crowd GT with keypoints, shifted, v = 1, score 1."""
    out = []
    for a in gt["annotations"]:
        if a["iscrowd"] or a["num_keypoints"] == 0:
            continue
        k = a["keypoints"]
        flat = [v for i in range(17) for v in (k[3 * i] + dx, k[3 * i + 1] + dy, 1)]
        out.append({"image_id": a["image_id"], "category_id": 1, "keypoints": flat, "score": 1.0})
    return out


def _cases():
    for name, case in json.loads(need(EXPECTED).read_text())["cases"].items():
        dx, dy = (int(part.split("=")[1]) for part in name.split(","))
        yield name, dx, dy, case


def _live_eval(gt: dict, dts: list[dict]):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = copy.deepcopy(gt)
        coco_gt.createIndex()
        ev = COCOeval(coco_gt, coco_gt.loadRes(copy.deepcopy(dts)), iouType="keypoints")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev


# ------------------------------------------------------------------------------ pycocotools numbers


def test_reproduces_every_stored_pycocotools_number():
    gt = json.loads(need(COCO_KPTS).read_text())
    for name, dx, dy, case in _cases():
        preds = _shifted(gt, dx, dy)
        stats = oks_ap(preds, COCO_KPTS)
        assert list(stats) == list(STAT_NAMES)
        assert stats == case["stats"], name  # exactly: every float equal
        own = case["oks_own_pair_per_gt_id"]
        mine = {str(a["id"]): oks(np.reshape(p["keypoints"], (17, 3)), np.reshape(a["keypoints"], (17, 3)), a["area"])
                for a, p in zip([a for a in gt["annotations"] if a["num_keypoints"]], preds)}
        # numpy's SIMD exp may differ in the last bit between CPUs: the stored values agree to 1 ulp
        assert mine == pytest.approx(own, abs=1e-15, rel=0), name
        ev = _live_eval(gt, preds)  # and bit for bit with pycocotools on this machine
        for (img, _), m in ev.ious.items():
            gts = ev._gts[img, 1]
            for j, g in enumerate(gts):
                if g["num_keypoints"]:
                    i = next(i for i, d in enumerate(ev._dts[img, 1]) if d["keypoints"][0] == g["keypoints"][0] + dx and d["keypoints"][1] == g["keypoints"][1] + dy)
                    assert m[i, j] == mine[str(g["id"])], (name, g["id"])
        report = pose_report(preds, COCO_KPTS)  # a results list: paired greedily by OKS
        assert report.matching == "oks" and report.ap == stats and (report.missed, report.extra_predictions) == (0, 0)
        assert {str(p.gt_id): p.oks for p in report.pairs} == mine
        assert report.mpjpe.pixels == pytest.approx(np.hypot(dx, dy))
        by_image = [dict(p, id=a["id"]) for p, a in zip(preds, [a for a in gt["annotations"] if a["num_keypoints"]])]
        report = pose_report({"annotations": by_image}, gt)  # an annotations file carrying the GT ids: paired by id
        assert report.matching == "id" and {str(p.gt_id): p.oks for p in report.pairs} == mine
    assert report.gt_persons == 12 and report.gt_without_keypoints == 2


def test_coco_sigmas_are_pycocotools_own():
    from pycocotools.cocoeval import Params

    assert np.array_equal(Params(iouType="keypoints").kpt_oks_sigmas, COCO_SIGMAS)


def _random_coco(rng: np.random.Generator, n_images: int = 4) -> tuple[dict, list[dict]]:
    images, anns, dts = [], [], []
    for img in range(1, n_images + 1):
        images.append({"id": img})
        for _ in range(int(rng.integers(1, 4))):
            x0, y0 = rng.uniform(0, 300, 2)
            w, h = rng.uniform(20, 200, 2)
            kp = np.stack([rng.uniform(x0, x0 + w, 17).round(), rng.uniform(y0, y0 + h, 17).round(), rng.choice([0, 1, 2], 17)], 1)
            if len(anns) == 2:
                kp[:, 2] = 0  # a GT with no labelled keypoint: the bbox rule
            kp[kp[:, 2] == 0, :2] = 0
            anns.append({"id": len(anns) + 1, "image_id": img, "category_id": 1, "iscrowd": 0, "bbox": [x0, y0, w, h],
                         "area": float(w * h * rng.uniform(0.3, 0.9)), "num_keypoints": int((kp[:, 2] > 0).sum()),
                         "keypoints": [int(v) for v in kp.reshape(-1)]})
            for _ in range(int(rng.integers(0, 3))):
                guess = np.stack([rng.uniform(x0, x0 + w, 17), rng.uniform(y0, y0 + h, 17), np.ones(17)], 1)
                dts.append({"image_id": img, "category_id": 1, "keypoints": guess.reshape(-1).tolist(), "score": float(rng.uniform())})
    return {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "person"}]}, dts


def test_oks_and_ap_match_a_live_pycocotools_call_on_random_data():
    rng = np.random.default_rng(7)
    gt, dts = _random_coco(rng)
    ev = _live_eval(gt, dts)
    checked = 0
    for (img, _), m in ev.ious.items():
        if len(m) == 0:
            continue
        gts, ds = ev._gts[img, 1], ev._dts[img, 1]
        order = np.argsort([-d["score"] for d in ds], kind="mergesort")
        for i, d in enumerate(ds[k] for k in order):
            for j, g in enumerate(gts):
                assert oks(np.reshape(d["keypoints"], (17, 3)), np.reshape(g["keypoints"], (17, 3)), g["area"], bbox=g["bbox"]) == m[i, j]
                checked += 1
    assert checked > 10
    assert oks_ap(dts, gt) == dict(zip(STAT_NAMES, map(float, ev.stats)))
    # a batch of pairs gives an array; a GT with nothing labelled needs its box
    g = np.reshape([a["keypoints"] for a in gt["annotations"][:2]], (2, 17, 3))
    assert oks(g, g, [1000.0, 2000.0]).tolist() == [1.0, 1.0]
    with pytest.raises(InputError, match="bbox"):
        oks(g[0], np.zeros((17, 3)), 100.0)


# ------------------------------------------------------------------------------------- PCK, MPJPE


def _person(rng: np.random.Generator) -> np.ndarray:
    kp = np.zeros((17, 3))
    kp[:, 0], kp[:, 1] = rng.uniform(100, 200, 17), rng.uniform(50, 250, 17)
    kp[:, 2] = 2
    return kp


def test_pck_is_one_on_identity_and_drops_monotonically_with_noise():
    rng = np.random.default_rng(0)
    gt = np.stack([_person(rng) for _ in range(8)])  # (T, 17, 3)
    gt[0, 3, 2] = 0  # not labelled: not scored
    r = pck(gt, gt)
    assert r.values == {0.05: 1.0, 0.1: 1.0, 0.2: 1.0} and r.keypoints == 8 * 17 - 1 and r.persons == 8
    assert pck(gt, gt, normalise="torso").values == {0.05: 1.0, 0.1: 1.0, 0.2: 1.0}
    direction = rng.normal(size=gt[..., :2].shape)
    last = None
    for sigma in (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0):
        noisy = gt.copy()
        noisy[..., :2] += sigma * direction
        values = [pck(noisy, gt, thresholds=(t,)).values[t] for t in (0.05, 0.1, 0.2)]
        assert values == sorted(values)  # a looser threshold never scores less
        if last is not None:
            assert all(v <= w for v, w in zip(values, last))
        last = values
    assert last[0] < 0.2 and last[2] < 1.0


def test_pck_thresholds_on_a_hand_made_person():
    gt = np.zeros((17, 3))
    gt[:, 2] = 2
    gt[0, :2], gt[1, :2] = (0, 0), (30, 40)  # the keypoint box is 30 x 40: diagonal 50
    gt[2:, :2] = (15, 20)
    pred = gt.copy()
    pred[2, 0] += 2.5  # exactly 0.05 x 50: correct at 0.05 (<=)
    pred[3, 0] += 3.0  # correct from 0.1
    pred[4, 1] += 10.0  # correct at 0.2 only
    pred[5, 0] += 10.01  # wrong everywhere
    r = pck(pred, gt)
    assert r.correct == (14, 15, 16) and r.keypoints == 17
    assert r[0.1] == pytest.approx(15 / 17)
    assert pck(pred, gt, bbox=[0, 0, 300, 400]).correct == (17, 17, 17)  # a given box: diagonal 500
    # torso: shoulders (5, 6) and hips (11, 12); midpoints 20 px apart
    gt2 = gt.copy()
    gt2[5, :2], gt2[6, :2], gt2[11, :2], gt2[12, :2] = (10, 0), (20, 0), (10, 20), (20, 20)
    pred2 = gt2.copy()
    pred2[0, 0] += 1.0  # 0.05 x 20 = 1: correct
    pred2[1, 0] += 3.0  # 0.1 x 20 = 2 < 3 <= 4
    assert pck(pred2, gt2, normalise="torso").correct == (16, 16, 17)
    no_hips = gt2.copy()
    no_hips[[11, 12], 2] = 0
    r = pck(no_hips, no_hips, normalise="torso")
    assert (r.persons, r.unscored, r.keypoints) == (0, 1, 0) and np.isnan(r[0.05])
    assert r.to_dict()["PCK@0.05"] is None
    for bad in ({"thresholds": ()}, {"thresholds": (0.1, -1)}, {"normalise": "head"}):
        with pytest.raises(InputError, match=next(iter(bad))):
            pck(pred, gt, **bad)
    with pytest.raises(InputError, match="pred"):
        pck(pred[None].repeat(2, 0), gt)
    with pytest.raises(InputError, match="gt"):
        pck(pred, gt[:16])


def test_mpjpe_on_a_hand_computed_case():
    gt = np.zeros((17, 3))
    gt[:3] = [(0, 0, 2), (30, 0, 1), (30, 40, 2)]  # box 30 x 40, diagonal 50; the rest not labelled
    pred = gt.copy()
    pred[0, :2] = (3, 4)  # error 5
    pred[1, :2] = (30, 10)  # error 10
    pred[3, :2] = (999, 999)  # not labelled in the GT: ignored
    r = mpjpe(pred[:, :2], gt)  # a prediction may be (17, 2)
    assert (r.pixels, r.keypoints, r.persons) == (5.0, 3, 1)
    assert r.normalised == pytest.approx(15 / 50 / 3)
    assert mpjpe(pred, gt, bbox=[0, 0, 60, 80]).normalised == pytest.approx(15 / 100 / 3)


def test_pose_report_counts_missed_and_extra_persons(tmp_path):
    rng = np.random.default_rng(3)
    a, b = _person(rng), _person(rng)
    b[:, 0] += 400  # far from a
    gt = {"images": [{"id": 1}, {"id": 2}], "annotations": [
        {"id": 10, "image_id": 1, "keypoints": a.reshape(-1).tolist(), "area": 5000.0},
        {"id": 11, "image_id": 1, "keypoints": b.reshape(-1).tolist()},  # no area / bbox: filled from the keypoints
        {"id": 12, "image_id": 2, "keypoints": [0] * 51, "bbox": [0, 0, 10, 10], "area": 100}]}
    pred = [{"image_id": 1, "keypoints": (b + [1.0, 0, 0]).reshape(-1).tolist(), "score": 0.9},
            {"image_id": 2, "keypoints": a.reshape(-1).tolist(), "score": 0.5}]
    r = pose_report(pred, gt)
    assert r.matching == "oks" and [p.gt_id for p in r.pairs] == [11]
    assert (r.gt_persons, r.missed, r.extra_predictions, r.gt_without_keypoints) == (2, 1, 1, 1)
    assert r.pck.correct == (17, 17, 17) and r.pck.keypoints == 34  # a's keypoints count as wrong
    assert r.mean_oks == pytest.approx(r.pairs[0].oks / 2) and r.mpjpe.pixels == pytest.approx(1.0)
    assert 0 < r.ap["AP"] < 1
    json.dumps(r.to_dict(), allow_nan=False)
    assert "1 missed" in r.format()


# ------------------------------------------------------------------------------- CLI and batch


def _write_gt(tmp_path):
    rng = np.random.default_rng(5)
    gt, dts = _random_coco(rng, n_images=2)
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "pred.json").write_text(json.dumps(dts))
    return gt, dts


def test_cli_and_batch_on_good_files(tmp_path, capsys):
    gt, dts = _write_gt(tmp_path)
    assert main(["score", "pose", str(tmp_path / "pred.json"), str(tmp_path / "gt.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)  # pycocotools' printing does not reach stdout
    assert out["ap"] == oks_ap(dts, gt) and set(out["pck"]) >= {"PCK@0.05", "PCK@0.1", "PCK@0.2"}
    assert main(["score", "pose", str(tmp_path / "gt.json"), str(tmp_path / "gt.json"), "--thresholds", "0.1", "--normalise", "torso"]) == 0
    text = capsys.readouterr().out
    assert "matched by id" in text and "PCK (torso length): @0.1 1.000" in text and "AR 1.000" in text
    assert "0 missed, 0 extra predictions" in text
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text(json.dumps({"id": "pose", "verb": "score.pose", "args": {"pred": "pred.json", "gt": "gt.json", "thresholds": [0.2]}}) + "\n")
    summary = run_batch(manifest, tmp_path / "out", progress=False)
    assert summary.ok == 1
    result = json.loads((tmp_path / "out" / "pose" / "result.json").read_text())
    assert result["ap"] == out["ap"] and list(result["pck"]["correct"]) == ["0.2"]


def test_cli_on_the_real_coco_annotations(capsys):
    gt = need(COCO_KPTS)
    assert main(["score", "pose", str(gt), str(gt), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["matching"] == "id" and out["ap"]["AP"] == 1.0 and out["matched"] == 12 and out["mean_oks"] == 1.0


def _broken(tmp_path) -> dict:
    d = tmp_path / "broken"
    d.mkdir()
    files = {"missing": d / "missing.json", "folder": d / "folder.json", "not-json": d / "notjson.json", "binary": d / "binary.json",
             "wrong-schema": d / "schema.json", "short-keypoints": d / "short.json", "text-keypoints": d / "text.json",
             "unknown-image": d / "image.json", "duplicate-id": d / "dup.json"}
    files["folder"].mkdir()
    files["not-json"].write_text("{not json\n")
    files["binary"].write_bytes(bytes(range(256)))
    files["wrong-schema"].write_text(json.dumps({"info": {}}))
    files["short-keypoints"].write_text(json.dumps([{"image_id": 1, "keypoints": [1, 2, 2] * 16, "score": 1}]))
    files["text-keypoints"].write_text(json.dumps({"annotations": [{"image_id": 1, "keypoints": ["x"] * 51}]}))
    files["unknown-image"].write_text(json.dumps([{"image_id": 999, "keypoints": [1, 2, 2] * 17, "score": 1}]))
    files["duplicate-id"].write_text(json.dumps({"annotations": [{"id": 1, "image_id": 1, "keypoints": [1, 2, 2] * 17}] * 2}))
    return files


def test_cli_and_batch_on_broken_files_give_one_line_naming_the_file(tmp_path, capsys):
    _write_gt(tmp_path)
    good_pred, good_gt = str(tmp_path / "pred.json"), str(tmp_path / "gt.json")
    broken = _broken(tmp_path)
    items = []
    for kind, path in broken.items():
        for argv, role in (([str(path), good_gt], "pred"), ([good_pred, str(path)], "gt")):
            if (kind, role) in (("unknown-image", "gt"), ("duplicate-id", "pred")):
                continue  # valid in the other role
            try:
                code = main(["score", "pose", *argv, "--json"])
            except SystemExit as e:
                code = e.code
            captured = capsys.readouterr()
            assert code in (1, 2) and captured.out == "", (kind, role)
            lines = captured.err.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in captured.err and path.name in lines[0], (kind, role, captured.err)
            items.append({"id": f"{kind}-{role}", "verb": "score.pose", "args": {"pred": argv[0], "gt": argv[1]}})
    items.append({"id": "unknown-arg", "verb": "score.pose", "args": {"pred": good_pred, "gt": good_gt, "no_such_arg": 1}})
    items.append({"id": "good", "verb": "score.pose", "args": {"pred": good_pred, "gt": good_gt}})
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    summary = run_batch(manifest, tmp_path / "batch", progress=False)
    assert (summary.ok, summary.failed) == (1, len(items) - 1)
    records = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "batch" / "status.jsonl").read_text().splitlines()}
    for item in items[:-2]:
        rec = records[item["id"]]
        name = (item["args"]["pred"] if item["id"].endswith("-pred") else item["args"]["gt"]).rsplit("/", 1)[-1]
        assert rec["status"] == "failed" and "traceback" not in rec and "\n" not in rec["error"] and name in rec["error"], rec
    assert "no_such_arg" in records["unknown-arg"]["error"]


def test_api_errors_name_the_argument(tmp_path):
    with pytest.raises(InputError, match="GT"):
        oks_ap([], tmp_path / "nope.json")
    with pytest.raises(InputError, match="PRED"):
        pose_report(42, {"annotations": []})
    with pytest.raises(MediaError, match="<gt>"):
        pose_report([], {"images": "x", "annotations": []})
    with pytest.raises(InputError, match="area"):
        oks(np.zeros((17, 3)), np.ones((17, 3)), -1)
    with pytest.raises(InputError, match="sigmas"):
        oks(np.zeros((17, 3)), np.ones((17, 3)), 1, sigmas=[0.1] * 16)
    with pytest.raises(InputError, match="pred"):
        oks(np.full((17, 3), np.nan), np.ones((17, 3)), 1)
    assert oks_ap([], {"annotations": [{"image_id": 1, "keypoints": [5, 5, 2] * 17, "area": 10}]})["AP"] == 0.0
