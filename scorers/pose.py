"""Pose accuracy of COCO-17 keypoints: PCK, OKS, COCO keypoint AP/AR and MPJPE (AnyMotion spec b.7).

OKS and keypoint AP are the official COCO definitions, so that numbers can be compared with published
ones: ``oks`` redoes pycocotools' ``COCOeval.computeOks`` arithmetic step by step (same sigmas, same
``np.spacing(1)``, same rule for a person with no labelled keypoints), and ``oks_ap`` runs pycocotools'
``COCOeval(iouType="keypoints")`` itself. On ``coco_val2017_kpts_mini`` they reproduce every number of
``expected_pycocotools.json`` (pycocotools 2.0.11): the 10 stats of each shift exactly, each per-GT OKS
bit for bit against a live pycocotools call and to 1 ulp against the stored values (numpy's vectorised
``exp`` can differ in the last bit between CPUs).

PCK and MPJPE have no single official evaluator; the rules used here:

- Only GT keypoints with ``v > 0`` are scored. The prediction's ``v`` is ignored, as OKS ignores it:
  every predicted coordinate counts.
- **PCK@t**: a keypoint is correct when its distance to the prediction is ``<= t x scale``. ``scale`` is
  the diagonal of the person's box (``normalise="bbox"``; the box around its GT labelled keypoints,
  or a given COCO ``[x, y, w, h]`` box) or its torso length (``normalise="torso"``: the mean of its
  labelled shoulders to the mean of its labelled hips). A person whose scale is 0 or missing (one
  labelled keypoint, no shoulder or no hip) is not scored and is counted in ``unscored``.
- **MPJPE**: the mean distance in pixels over the scored keypoints; ``normalised`` divides each by
  its person's box diagonal first (persons with a zero diagonal are left out of that mean).

``pose_report`` scores two COCO keypoint files; its docstring says how persons are paired and how
fields a file lacks are filled.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import InputError, MediaError
from core.keypoints import COCO17_NAMES, from_coco_json, keypoints_box

# COCO's per-keypoint OKS sigmas, written as pycocotools writes them (``/ 10.0``), so the float64
# values, and hence every OKS, are bit-identical to the library's.
COCO_SIGMAS = np.array([.26, .25, .25, .35, .35, .79, .79, .72, .72, .62, .62, 1.07, 1.07, .87, .87, .89, .89]) / 10.0
PCK_THRESHOLDS = (0.05, 0.1, 0.2)
NORMALISERS = ("bbox", "torso")
# COCOeval.summarize's 10 keypoint stats, in its order (maxDets 20; areas all, medium, large)
STAT_NAMES = ("AP", "AP50", "AP75", "AP_M", "AP_L", "AR", "AR50", "AR75", "AR_M", "AR_L")

_SHOULDERS = (COCO17_NAMES.index("left_shoulder"), COCO17_NAMES.index("right_shoulder"))
_HIPS = (COCO17_NAMES.index("left_hip"), COCO17_NAMES.index("right_hip"))


# ------------------------------------------------------------------------------------------ arrays


def _people(kp: Any, name: str, channels: tuple[int, ...] = (3,)) -> np.ndarray:
    """``(..., 17, C)`` as float64 ``(P, 17, C)``; float64 so OKS matches pycocotools to the last bit."""
    try:
        arr = np.asarray(kp, np.float64)
    except (TypeError, ValueError):
        raise InputError(name, type(kp).__name__, "pass numbers: an array of shape (17, 3) or (N, 17, 3)") from None
    if arr.ndim < 2 or arr.shape[-2] != 17 or arr.shape[-1] not in channels:
        want = " or ".join(f"(..., 17, {c})" for c in channels)
        raise InputError(name, f"array of shape {arr.shape}", f"expected COCO-17 keypoints {want} in pixels")
    if not np.isfinite(arr).all():
        raise InputError(name, "array with NaN or inf", "keypoints must be finite; mark a missing GT keypoint with v=0")
    return arr.reshape(-1, 17, arr.shape[-1])


def _pair(pred: Any, gt: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    g = _people(gt, "gt")
    p = _people(pred, "pred", (2, 3))
    lead = np.shape(np.asarray(gt))[:-2]
    if p.shape[0] != g.shape[0] or np.shape(np.asarray(pred))[:-2] != lead:
        raise InputError("pred", f"array of shape {np.shape(np.asarray(pred))}", f"needs one person per GT person: gt is {np.shape(np.asarray(gt))}")
    return p, g, lead


def _boxes(bbox: Any, n: int, lead: tuple[int, ...]) -> np.ndarray | None:
    """Given COCO ``[x, y, w, h]`` boxes, one per person, as ``(n, 4)``."""
    if bbox is None:
        return None
    try:
        b = np.asarray(bbox, np.float64)
    except (TypeError, ValueError):
        raise InputError("bbox", type(bbox).__name__, "pass COCO [x, y, w, h] boxes as numbers") from None
    if b.shape != (*lead, 4) or not np.isfinite(b).all() or (b[..., 2:] < 0).any():
        raise InputError("bbox", f"array of shape {b.shape}", f"expected one finite COCO [x, y, w, h] box (w, h >= 0) per person: shape {(*lead, 4)}")
    return b.reshape(n, 4)


def _diagonal(g: np.ndarray, box: np.ndarray | None) -> float:
    """Box diagonal of one GT person: the given box's, else that of its labelled keypoints (0 if none)."""
    if box is not None:
        return float(math.hypot(box[2], box[3]))
    xyxy = keypoints_box(g)
    return 0.0 if xyxy is None else float(math.hypot(xyxy[2] - xyxy[0], xyxy[3] - xyxy[1]))


def _torso(g: np.ndarray) -> float:
    """Mean labelled shoulder to mean labelled hip of one GT person; 0 when either side is missing."""
    sh = [g[i, :2] for i in _SHOULDERS if g[i, 2] > 0]
    hp = [g[i, :2] for i in _HIPS if g[i, 2] > 0]
    if not sh or not hp:
        return 0.0
    return float(np.linalg.norm(np.mean(sh, axis=0) - np.mean(hp, axis=0)))


def _scale(g: np.ndarray, box: np.ndarray | None, normalise: str) -> float:
    return _diagonal(g, box) if normalise == "bbox" else _torso(g)


def _check_thresholds(thresholds: Sequence[float]) -> tuple[float, ...]:
    try:
        ts = tuple(float(t) for t in thresholds)
    except (TypeError, ValueError):
        raise InputError("thresholds", thresholds, "pass positive numbers, e.g. (0.05, 0.1, 0.2)") from None
    if not ts or not all(math.isfinite(t) and t > 0 for t in ts):
        raise InputError("thresholds", thresholds, "pass one or more positive finite fractions of the scale, e.g. (0.05, 0.1, 0.2)")
    return ts


def _check_normalise(normalise: str) -> str:
    if normalise not in NORMALISERS:
        raise InputError("normalise", normalise, f"use one of {NORMALISERS}")
    return normalise


def _undefined(x: float) -> float | None:
    """NaN (nothing scored) as None, so JSON output stays standard."""
    return None if isinstance(x, float) and math.isnan(x) else x


@dataclass(frozen=True)
class PCKResult:
    """PCK at each threshold with its counts: ``correct[t]`` of ``keypoints`` scored keypoints.

    ``persons`` were scored, ``unscored`` had no usable scale (see the module docstring); a value is
    NaN when no keypoint was scored.
    """

    thresholds: tuple[float, ...]
    correct: tuple[int, ...]
    keypoints: int
    persons: int
    unscored: int
    normalise: str

    @property
    def values(self) -> dict[float, float]:
        return {t: (c / self.keypoints if self.keypoints else math.nan) for t, c in zip(self.thresholds, self.correct)}

    def __getitem__(self, t: float) -> float:
        return self.values[float(t)]

    def to_dict(self) -> dict:
        return {"normalise": self.normalise, **{f"PCK@{t:g}": _undefined(v) for t, v in self.values.items()},
                "correct": {f"{t:g}": c for t, c in zip(self.thresholds, self.correct)},
                "keypoints": self.keypoints, "persons": self.persons, "unscored": self.unscored}


@dataclass
class _PCKCounts:
    """Running PCK counts, so ``pose_report`` can add the keypoints of persons nobody predicted."""

    thresholds: tuple[float, ...]
    normalise: str
    correct: np.ndarray = field(init=False)
    keypoints: int = 0
    persons: int = 0
    unscored: int = 0

    def __post_init__(self) -> None:
        self.correct = np.zeros(len(self.thresholds), np.int64)

    def add(self, p: np.ndarray | None, g: np.ndarray, box: np.ndarray | None) -> None:
        """One GT person against its prediction ``p`` (None: missed, every keypoint wrong)."""
        vis = g[:, 2] > 0
        if not vis.any():
            return
        s = _scale(g, box, self.normalise)
        if not s > 0:
            self.unscored += 1
            return
        self.persons += 1
        self.keypoints += int(vis.sum())
        if p is not None:
            d = np.hypot(p[vis, 0] - g[vis, 0], p[vis, 1] - g[vis, 1])
            self.correct += np.array([np.count_nonzero(d <= t * s) for t in self.thresholds], np.int64)

    def result(self) -> PCKResult:
        return PCKResult(self.thresholds, tuple(int(c) for c in self.correct), self.keypoints, self.persons, self.unscored, self.normalise)


def pck(pred: Any, gt: Any, thresholds: Sequence[float] = PCK_THRESHOLDS, normalise: str = "bbox", bbox: Any = None) -> PCKResult:
    """PCK@t of predicted against GT keypoints ``(17, 3)`` or ``(N, 17, 3)`` in pixels, pooled over persons.

    ``bbox``: optional COCO ``[x, y, w, h]`` box per person for ``normalise="bbox"`` (default: the box of
    the GT labelled keypoints). ``pred`` may be ``(..., 17, 2)``.
    """
    ts, norm = _check_thresholds(thresholds), _check_normalise(normalise)
    p, g, lead = _pair(pred, gt)
    boxes = _boxes(bbox, len(g), lead)
    counts = _PCKCounts(ts, norm)
    for i in range(len(g)):
        counts.add(p[i], g[i], None if boxes is None else boxes[i])
    return counts.result()


def _oks_one(p: np.ndarray, g: np.ndarray, area: float, box: np.ndarray | None, sigmas: np.ndarray) -> float:
    """pycocotools' ``computeOks`` for one (prediction, GT) pair, operation for operation."""
    variances = (sigmas * 2) ** 2
    xg, yg, vg = g[:, 0], g[:, 1], g[:, 2]
    xd, yd = p[:, 0], p[:, 1]
    k1 = np.count_nonzero(vg > 0)
    if k1 > 0:
        dx, dy = xd - xg, yd - yg
    else:  # no labelled keypoint: distance of each prediction outside the GT box doubled on every side
        if box is None:
            raise InputError("bbox", None, "a GT person with no labelled keypoint needs its COCO [x, y, w, h] box for OKS")
        x0, x1 = box[0] - box[2], box[0] + box[2] * 2
        y0, y1 = box[1] - box[3], box[1] + box[3] * 2
        z = np.zeros(len(sigmas))
        dx = np.max((z, x0 - xd), axis=0) + np.max((z, xd - x1), axis=0)
        dy = np.max((z, y0 - yd), axis=0) + np.max((z, yd - y1), axis=0)
    e = (dx**2 + dy**2) / variances / (area + np.spacing(1)) / 2
    if k1 > 0:
        e = e[vg > 0]
    return float(np.sum(np.exp(-e)) / e.shape[0])


def oks(pred: Any, gt: Any, area: Any, sigmas: Any = COCO_SIGMAS, bbox: Any = None) -> float | np.ndarray:
    """COCO object keypoint similarity of each (prediction, GT) pair, exactly as pycocotools computes it.

    ``exp(-d^2 / (2 * area * (2 sigma)^2))`` averaged over the GT's labelled keypoints (``area`` + eps,
    eps = ``np.spacing(1)``). A GT with no labelled keypoint is scored by each prediction's distance
    outside its box doubled on every side, over all 17 keypoints; that case needs ``bbox`` (COCO
    ``[x, y, w, h]``). One pair gives a float, ``(N, 17, 3)`` arrays an ``(N,)`` array.
    """
    p, g, lead = _pair(pred, gt)
    try:
        a = np.broadcast_to(np.asarray(area, np.float64), lead).reshape(len(g))
    except (TypeError, ValueError):
        raise InputError("area", area, f"pass the GT area (a number, or one per person: shape {lead})") from None
    if not (np.isfinite(a).all() and (a >= 0).all()):
        raise InputError("area", area, "areas must be finite and >= 0 (COCO's segmentation area in pixels)")
    s = np.asarray(sigmas, np.float64)
    if s.shape != (17,) or not (s > 0).all():
        raise InputError("sigmas", sigmas, "pass 17 positive per-keypoint sigmas (default: COCO_SIGMAS)")
    boxes = _boxes(bbox, len(g), lead)
    out = np.array([_oks_one(p[i], g[i], float(a[i]), None if boxes is None else boxes[i], s) for i in range(len(g))])
    return float(out[0]) if lead == () else out.reshape(lead)


@dataclass(frozen=True)
class MPJPEResult:
    """Mean per-joint position error: ``pixels`` over ``keypoints`` GT-labelled joints of ``persons``;
    ``normalised`` is the mean of each error divided by its person's box diagonal (NaN if none)."""

    pixels: float
    normalised: float
    keypoints: int
    persons: int

    def to_dict(self) -> dict:
        return {"pixels": _undefined(self.pixels), "normalised": _undefined(self.normalised), "keypoints": self.keypoints, "persons": self.persons}


def _mpjpe(pairs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray | None]]) -> MPJPEResult:
    errors, ratios, persons = [], [], 0
    for p, g, box in pairs:
        vis = g[:, 2] > 0
        if not vis.any():
            continue
        persons += 1
        d = np.hypot(p[vis, 0] - g[vis, 0], p[vis, 1] - g[vis, 1])
        errors.append(d)
        diag = _diagonal(g, box)
        if diag > 0:
            ratios.append(d / diag)
    n = int(sum(len(e) for e in errors))
    px = float(np.concatenate(errors).mean()) if n else math.nan
    norm = float(np.concatenate(ratios).mean()) if ratios else math.nan
    return MPJPEResult(px, norm, n, persons)


def mpjpe(pred: Any, gt: Any, bbox: Any = None) -> MPJPEResult:
    """MPJPE in pixels over GT-labelled joints of ``(17, 3)`` / ``(N, 17, 3)`` keypoints, plus the
    box-diagonal-normalised variant (``bbox``: optional COCO ``[x, y, w, h]`` per person)."""
    p, g, lead = _pair(pred, gt)
    boxes = _boxes(bbox, len(g), lead)
    return _mpjpe([(p[i], g[i], None if boxes is None else boxes[i]) for i in range(len(g))])


# ------------------------------------------------------------------------------------- COCO files


@dataclass(frozen=True)
class _Source:
    data: Any
    name: str  # the file, or "<gt>" / "<pred>" for in-memory data


def _read(obj: Any, what: str) -> _Source:
    """A COCO JSON path, or already-loaded data (dict / list) passed through."""
    if isinstance(obj, (dict, list)):
        return _Source(obj, f"<{what.lower()}>")
    if not isinstance(obj, (str, Path)):
        raise InputError(what, type(obj).__name__, "pass a COCO keypoint .json path (or its loaded dict / list)")
    path = Path(obj)
    if not path.is_file():
        raise InputError(what, str(path), "no such file; pass a COCO keypoint .json (results list or annotations file)")
    try:
        return _Source(json.loads(path.read_text(encoding="utf-8-sig")), str(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise MediaError(path, f"cannot read it as JSON ({' '.join(str(e).split())})", "expected a COCO keypoint .json") from None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int_id(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _flat_keypoints(ann: Mapping, where: str, src: _Source) -> list:
    flat = ann.get("keypoints")
    if not isinstance(flat, list) or not all(_number(v) for v in flat):
        raise MediaError(src.name, f"{where}: 'keypoints' is not a list of finite numbers", "COCO-17 keypoints are 51 numbers [x1, y1, v1, ...]")
    try:
        from_coco_json(flat)  # the COCO-17 length check
    except InputError as e:
        raise MediaError(src.name, f"{where}: {e.hint}", f"it has {len(flat)}") from None
    return flat


def _kp(flat: list) -> np.ndarray:
    # float64, not core.keypoints.from_coco_json's float32: OKS of float predictions must match pycocotools bit for bit
    return np.asarray(flat, np.float64).reshape(17, 3)


def _box_of(kp: np.ndarray) -> list[float]:
    xyxy = keypoints_box(kp)
    return [0.0, 0.0, 0.0, 0.0] if xyxy is None else [xyxy[0], xyxy[1], xyxy[2] - xyxy[0], xyxy[3] - xyxy[1]]


def _ground_truth(src: _Source) -> dict:
    """A COCO keypoint annotations dict with every field ``COCOeval`` reads, missing ones filled."""
    data = src.data
    anns = data.get("annotations") if isinstance(data, dict) else None
    if not isinstance(anns, list):
        raise MediaError(src.name, "is not a COCO annotations file (no 'annotations' list)",
                         'expected {"images": [...], "annotations": [{"image_id", "keypoints", "area", "bbox", ...}], "categories": [...]}')
    out, ids = [], set()
    for n, ann in enumerate(anns):
        where = f"annotation {n}"
        if not isinstance(ann, dict):
            raise MediaError(src.name, f"{where} is not an object")
        if not _int_id(ann.get("image_id")):
            raise MediaError(src.name, f"{where}: 'image_id' is missing or not an integer")
        flat = _flat_keypoints(ann, where, src)
        kp = _kp(flat)
        ann_id = ann.get("id", n + 1)
        if not _int_id(ann_id) or ann_id in ids:
            raise MediaError(src.name, f"{where}: 'id' {ann_id!r} is not a unique integer", "every annotation needs its own integer id")
        ids.add(ann_id)
        bbox = ann.get("bbox", _box_of(kp))
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(_number(v) for v in bbox) and bbox[2] >= 0 and bbox[3] >= 0):
            raise MediaError(src.name, f"{where}: 'bbox' {bbox!r} is not [x, y, w, h]")
        area = ann.get("area", bbox[2] * bbox[3])
        if not _number(area) or area < 0:
            raise MediaError(src.name, f"{where}: 'area' {area!r} is not a number >= 0")
        num = ann.get("num_keypoints", int(np.count_nonzero(kp[:, 2] > 0)))
        cat = ann.get("category_id", 1)
        if not _int_id(num) or not _int_id(cat):
            raise MediaError(src.name, f"{where}: 'num_keypoints' and 'category_id' must be integers")
        out.append({"id": ann_id, "image_id": ann["image_id"], "category_id": cat, "keypoints": flat, "num_keypoints": num,
                    "area": area, "bbox": bbox, "iscrowd": 1 if ann.get("iscrowd") else 0})
    images = data.get("images")
    if images is None:
        images = [{"id": i} for i in sorted({a["image_id"] for a in out})]
    if not isinstance(images, list) or not all(isinstance(i, dict) and _int_id(i.get("id")) for i in images):
        raise MediaError(src.name, "'images' is not a list of objects with integer 'id'")
    known = {i["id"] for i in images}
    stray = sorted({a["image_id"] for a in out} - known)
    if stray:
        raise MediaError(src.name, f"annotations refer to image_id {stray[:3]} that 'images' does not list")
    cats = data.get("categories")
    if cats is None:
        cats = [{"id": c, "name": "person"} for c in sorted({a["category_id"] for a in out})]
    if not isinstance(cats, list) or not all(isinstance(c, dict) and _int_id(c.get("id")) for c in cats):
        raise MediaError(src.name, "'categories' is not a list of objects with integer 'id'")
    return {"images": [{"id": i["id"]} for i in images], "annotations": out, "categories": [{"id": c["id"], "name": c.get("name", "")} for c in cats]}


def _predictions(src: _Source, gt: dict, gt_name: str) -> list[dict]:
    """COCO keypoint results ``{image_id, category_id, keypoints, score}`` (+ ``id`` when given, and
    ``index``, the position in the file). From an annotations file, a person with no labelled keypoint
    is not a prediction (as a GT, COCO ignores it), so a GT file scored against itself gets AP 1."""
    data = src.data
    annotations_file = isinstance(data, dict)
    anns = data.get("annotations") if annotations_file else data
    if not isinstance(anns, list):
        raise MediaError(src.name, "is neither a COCO results list nor an annotations file",
                         'expected [{"image_id", "keypoints", "score"}, ...] or {"annotations": [...]}')
    images = {i["id"] for i in gt["images"]}
    out = []
    for n, ann in enumerate(anns):
        where = f"prediction {n}"
        if not isinstance(ann, dict):
            raise MediaError(src.name, f"{where} is not an object")
        if not _int_id(ann.get("image_id")):
            raise MediaError(src.name, f"{where}: 'image_id' is missing or not an integer")
        if ann["image_id"] not in images:
            raise MediaError(src.name, f"{where}: image_id {ann['image_id']} is not an image of {gt_name}", "results must refer to the GT's images")
        flat = _flat_keypoints(ann, where, src)
        if annotations_file and not any(v > 0 for v in flat[2::3]):
            continue
        score, cat = ann.get("score", 1.0), ann.get("category_id", 1)
        if not _number(score) or not _int_id(cat):
            raise MediaError(src.name, f"{where}: 'score' must be a number and 'category_id' an integer")
        rec = {"image_id": ann["image_id"], "category_id": cat, "keypoints": flat, "score": score, "index": n}
        if _int_id(ann.get("id")):
            rec["id"] = ann["id"]
        out.append(rec)
    return out


def _coco_eval(gt: dict, results: list[dict]) -> dict[str, float]:
    """pycocotools ``COCOeval(iouType="keypoints")`` with default params; its printing is swallowed so
    ``--json`` output stays clean."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = json.loads(json.dumps(gt))  # the library adds fields to what it is given
        coco_gt.createIndex()
        dts = [{k: v for k, v in r.items() if k not in ("id", "index")} for r in json.loads(json.dumps(results))]
        if dts:
            coco_dt = coco_gt.loadRes(dts)
        else:  # loadRes cannot take an empty list; no detections score 0 (or -1 where nothing is evaluated)
            coco_dt = COCO()
            coco_dt.dataset = {"images": list(gt["images"]), "categories": list(gt["categories"]), "annotations": []}
            coco_dt.createIndex()
        ev = COCOeval(coco_gt, coco_dt, iouType="keypoints")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {name: float(v) for name, v in zip(STAT_NAMES, ev.stats)}


def oks_ap(pred: Any, gt: Any) -> dict[str, float]:
    """COCO keypoint AP/AR (``AP, AP50, AP75, AP_M, AP_L, AR, AR50, AR75, AR_M, AR_L``) by pycocotools itself.

    ``pred``: a COCO results list (or its .json), or a COCO annotations file whose annotations with a
    labelled keypoint are the predictions (a missing ``score`` is 1.0). ``gt``: a COCO keypoint annotations file or dict. Values
    are pycocotools', including its -1 where a range holds nothing to evaluate.
    """
    g = _read(gt, "GT")
    truth = _ground_truth(g)
    return _coco_eval(truth, _predictions(_read(pred, "PRED"), truth, g.name))


# ---------------------------------------------------------------------------------------- report


@dataclass(frozen=True)
class PosePair:
    """One matched person: GT annotation ``gt_id`` of ``image_id`` and prediction ``pred_index`` (its
    position in the predictions list), with their OKS and MPJPE in pixels."""

    image_id: int
    gt_id: int
    pred_index: int
    oks: float
    mpjpe: float


@dataclass(frozen=True)
class PoseReport:
    """Every pose metric of a predictions file against a GT file (see ``pose_report``)."""

    pred: str
    gt: str
    matching: str  # "id" or "oks"
    ap: dict[str, float]
    pck: PCKResult
    mean_oks: float
    mpjpe: MPJPEResult
    pairs: tuple[PosePair, ...]
    gt_persons: int  # non-crowd GT persons with a labelled keypoint: those that are matched or missed
    gt_without_keypoints: int
    missed: int
    extra_predictions: int

    def to_dict(self) -> dict:
        return {"pred": self.pred, "gt": self.gt, "matching": self.matching, "ap": self.ap, "pck": self.pck.to_dict(),
                "mean_oks": _undefined(self.mean_oks), "mpjpe": self.mpjpe.to_dict(),
                "gt_persons": self.gt_persons, "gt_without_keypoints": self.gt_without_keypoints, "matched": len(self.pairs),
                "missed": self.missed, "extra_predictions": self.extra_predictions,
                "pairs": [{"image_id": p.image_id, "gt_id": p.gt_id, "pred_index": p.pred_index, "oks": p.oks, "mpjpe": p.mpjpe} for p in self.pairs]}

    def format(self) -> str:
        a = self.ap
        ap = " ".join(f"{k} {a[k]:.3f}" for k in STAT_NAMES)
        pk = "  ".join(f"@{t:g} {v:.3f}" for t, v in self.pck.values.items())
        scale = "box diagonal" if self.pck.normalise == "bbox" else "torso length"
        return "\n".join([
            (f"{self.gt_persons} GT persons with keypoints ({self.gt_without_keypoints} without), {len(self.pairs)} matched by {self.matching}, "
             f"{self.missed} missed, {self.extra_predictions} extra predictions"),
            f"COCO keypoint AP (pycocotools): {ap}",
            f"PCK ({scale}): {pk}  over {self.pck.keypoints} keypoints of {self.pck.persons} persons",
            f"mean OKS {self.mean_oks:.4f}   MPJPE {self.mpjpe.pixels:.2f} px ({self.mpjpe.normalised:.4f} of the box diagonal)",
        ])  # fmt: skip


def _match_by_id(preds: list[dict], gts: list[dict]) -> dict[int, int] | None:
    """GT index -> prediction index when every prediction carries the id of a GT of its own image."""
    where = {(a["image_id"], a["id"]): i for i, a in enumerate(gts)}
    if not preds or any("id" not in p or (p["image_id"], p["id"]) not in where for p in preds):
        return None
    if len({p["id"] for p in preds}) != len(preds):
        return None
    return {where[(p["image_id"], p["id"])]: j for j, p in enumerate(preds)}


def _match_by_oks(preds: list[dict], gts: list[dict], scoreable: list[int]) -> dict[int, int]:
    """Greedy per image, as COCOeval matches: predictions by descending score (stable), each taking the
    unmatched GT of highest OKS (first in file order on ties); no OKS threshold."""
    by_image: dict[int, list[int]] = {}
    for i in scoreable:
        by_image.setdefault(gts[i]["image_id"], []).append(i)
    order = np.argsort([-p["score"] for p in preds], kind="mergesort")
    match: dict[int, int] = {}
    for j in order:
        p = preds[j]
        free = [i for i in by_image.get(p["image_id"], []) if i not in match]
        if not free:
            continue
        pk = _kp(p["keypoints"])
        sims = [_oks_one(pk, _kp(gts[i]["keypoints"]), float(gts[i]["area"]), np.asarray(gts[i]["bbox"], np.float64), COCO_SIGMAS) for i in free]
        match[free[int(np.argmax(sims))]] = int(j)
    return match


def pose_report(pred: Any, gt: Any, thresholds: Sequence[float] = PCK_THRESHOLDS, normalise: str = "bbox") -> PoseReport:
    """PCK, OKS, COCO keypoint AP/AR and MPJPE of a predictions file against a GT file.

    Persons are paired within each image: by annotation id when every prediction carries the id of a
    GT of its image (an annotations file predicted for the GT's own annotations), else greedily by OKS
    (see ``_match_by_oks``). Only non-crowd GT persons with a labelled keypoint are scored (an id match
    to another GT is neither scored nor extra); a prediction left unpaired is *extra*. A GT person
    left without a prediction is *missed*: its keypoints count as wrong in PCK and it scores OKS 0 in
    ``mean_oks`` (the mean over GT persons); MPJPE is over the pairs. AP/AR come from pycocotools on
    the same files (``oks_ap``). GT fields a file lacks are filled as follows: ``id`` = position + 1,
    ``bbox`` = box of the labelled keypoints, ``area`` = bbox w x h, ``num_keypoints`` = labelled count,
    ``iscrowd`` = 0, ``category_id`` = 1, ``images`` = the annotations' image ids.
    """
    ts, norm = _check_thresholds(thresholds), _check_normalise(normalise)
    g, p = _read(gt, "GT"), _read(pred, "PRED")
    truth = _ground_truth(g)
    preds = _predictions(p, truth, g.name)
    gts = truth["annotations"]
    scoreable = [i for i, a in enumerate(gts) if not a["iscrowd"] and np.count_nonzero(_kp(a["keypoints"])[:, 2] > 0)]
    match = _match_by_id(preds, gts)
    matching = "id"
    if match is None:
        match, matching = _match_by_oks(preds, gts, scoreable), "oks"
    counts = _PCKCounts(ts, norm)
    pairs, mpjpe_pairs, oks_sum = [], [], 0.0
    for i in scoreable:
        a = gts[i]
        gk = _kp(a["keypoints"])
        j = match.get(i)
        if j is None:
            counts.add(None, gk, None)
            continue
        pk = _kp(preds[j]["keypoints"])
        counts.add(pk, gk, None)
        o = _oks_one(pk, gk, float(a["area"]), np.asarray(a["bbox"], np.float64), COCO_SIGMAS)
        oks_sum += o
        mpjpe_pairs.append((pk, gk, None))
        pairs.append(PosePair(a["image_id"], a["id"], preds[j]["index"], o, _mpjpe([(pk, gk, None)]).pixels))
    n_gt = len(scoreable)
    return PoseReport(
        pred=p.name, gt=g.name, matching=matching, ap=_coco_eval(truth, preds), pck=counts.result(),
        mean_oks=oks_sum / n_gt if n_gt else math.nan, mpjpe=_mpjpe(mpjpe_pairs), pairs=tuple(pairs),
        gt_persons=n_gt, gt_without_keypoints=sum(1 for a in gts if not a["iscrowd"]) - n_gt,
        missed=n_gt - len(pairs), extra_predictions=len(preds) - len(match),
    )  # fmt: skip
