"""Pose readers: COCO-17 keypoints ``(T, 17, 3)`` in pixels from frames, behind one protocol.

    reader = load_pose_reader("classic")          # or "mediapipe" (the optional ``pose`` extra)
    kp = reader.read(frames)                      # (T, H, W, 3) uint8 RGB -> (T, 17, 3) float32 (x, y, v)

Backends
- ``classic`` (``ClassicPoseReader``, builtin, no weights): reads the stick figures the synthetic world
  draws (``worldgen.raster.figure_coverage``: thick lines between the joints, a spine and a neck, a
  disk for the head, one flat colour) by *analysis by synthesis*: it draws a parametric stick figure
  by the same rule (cv2 lines in fixed point on a 4 x 4 supersampled canvas) and moves its parameters
  until the drawn coverage matches the coverage seen in the frame. Per clip:
  1. the figure's colour (unless ``colour`` is given): among the main colours standing out from each
     frame's median, the one whose largest region is the thinnest (area over squared mean distance
     to the edge: lines score high, filled shapes low); its value is the median of that region's
     pixels farthest from the background, so H.264's smeared edges do not bias it;
  2. per frame, the figure's coverage ``alpha`` (each pixel's colour projected on the segment from
     an inpainted background to the figure's colour) and a *don't-care* mask where the figure may be
     hidden: regions of 6+ pixels standing out in a colour off that segment (other objects) with
     their mixed edges, and figure-coloured blobs much thicker than the head (a same-coloured shape);
  3. the figure's parameters: head centre and radius, shoulders' and hips' midpoints and half widths,
     line thickness, one arm and one leg length, and two absolute angles per limb; the elbow and knee
     sit at the synthetic figures' fixed fraction of the limb, so a straight limb still places them,
     and lengths stay within 25% of the figures' proportions (weak priors pull them to those). First
     the clip constants (head radius, thickness, limb lengths) from fresh reads of a few frames; then
     each frame from the previous frame's figure: a pattern search on the squared coverage error,
     and a grid search over the two angles of any limb whose reach is still badly explained. A fresh
     start (head at the distance-transform peak, a neutral body below it, every limb on the grid)
     competes when tracking leaves 6 more pixels unexplained than on the frame before, and every 8
     frames; the figure leaving fewer pixels unexplained wins;
  4. keypoints from the figure, with COCO's convention that the person faces the viewer (their left
     on the image's right); the face points at the synthetic figures' layout on the head disk (the
     disk shows no face), narrowed as the shoulders narrow; ``v`` = 2 where the joint's pixel is
     figure-coloured, 1 inside the frame otherwise (covered), 0 outside it; all zero on frames
     without a figure (or where the figure explains less than half of what was seen).
  Limits: one person per clip (the thinnest region of one colour); a figure seen from the back
  (worldgen's ``turn``) is read as facing the viewer, so its left and right come out swapped; joints
  under another object are guessed from the limb lengths and angles around them; fitted to the
  synthetic figures' drawing rule and proportions, it is no detector for real people.
- ``mediapipe`` (``MediaPipePoseReader``): MediaPipe Pose (the legacy ``mediapipe.solutions.pose``
  API of mediapipe 0.10.14, ``pip install 'atelier[pose]'``), its 33 landmarks converted with
  ``core.keypoints.from_mediapipe33``. Meant for real footage; it does not find the stick figures.

measured (the classic reader, against the worlds' own keypoint annotations, GT ``v > 0``): see
``ClassicPoseReader``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import cv2
import numpy as np

from core.errors import InputError
from core.frames import FrameSource, resize_frames

# ---------------------------------------------------------------------------------- the protocol


@runtime_checkable
class PoseReader(Protocol):
    """Reads one person's COCO-17 keypoints from every frame."""

    def read(self, frames: Any) -> np.ndarray:
        """``(T, H, W, 3)`` uint8 RGB (or a ``FrameSource``) -> float32 ``(T, 17, 3)`` ``(x, y, v)`` in pixels;
        one ``(H, W, 3)`` frame -> ``(17, 3)``."""
        ...


def _as_frames(frames: Any) -> tuple[np.ndarray, bool]:
    """Frames as uint8 ``(T, H, W, 3)``, and whether a single ``(H, W, 3)`` frame was given."""
    if isinstance(frames, FrameSource) and not isinstance(frames, np.ndarray):
        n = len(frames)
        if n < 1:
            raise InputError("frames", f"frame source of length {n}", "pass a video with at least one frame")
        frames = frames.get_frames(list(range(n)))
    arr = np.asarray(frames)
    if arr.dtype != np.uint8 or arr.ndim not in (3, 4) or arr.shape[-1] != 3 or 0 in arr.shape:
        raise InputError("frames", f"array {arr.shape} {arr.dtype}", "pass uint8 RGB frames (T, H, W, 3) or one frame (H, W, 3)")
    single = arr.ndim == 3
    return (arr[None] if single else arr), single


# ------------------------------------------------------------------------- the figure model
#
# The synthetic figures' proportions, in head radii (worldgen draws the head disk at 0.075 body
# heights): used for the first guess, the weak length priors and the face layout.
_SHOULDER_HALF = 0.11 / 0.075
_HIP_HALF = 0.07 / 0.075
_HEAD_TO_SHOULDERS = 0.13 / 0.075  # head centre to the shoulders' midpoint
_TORSO = 0.28 / 0.075  # shoulders' midpoint to the hips' midpoint
_ARM = 0.29 / 0.075  # shoulder to wrist when straight
_LEG = 0.48 / 0.075
_ARM_SPLIT = 0.15 / 0.29  # the elbow's place along the arm
_LEG_SPLIT = 0.5
# face points relative to the head centre, in head radii, x scaled by the facing factor w in [0, 1]:
# nose, left eye, right eye, left ear, right ear (left is on the image's right)
_FACE = ((0.0, 0.2), (0.028 / 0.075, -0.16), (-0.028 / 0.075, -0.16), (0.05 / 0.075, 0.0), (-0.05 / 0.075, 0.0))

SS = 4  # supersampling per axis, as worldgen's rasteriser
_SHIFT = 4

# parameter vector layout
HX, HY, SX_, SY_, PX, PY, SW, HW = range(8)  # head centre, shoulders' midpoint, hips' midpoint, half widths
ANG = 8  # 8 angles: left arm upper/lower, right arm upper/lower, left leg upper/lower, right leg upper/lower
RH, TH, LA, LL = 16, 17, 18, 19  # head radius, line thickness, arm length, leg length
NPARAM = 20
_LIMB_ANGLES = ((8, 9), (10, 11), (12, 13), (14, 15))
_CLIP_CONSTANTS = (RH, TH, LA, LL)
# pattern-search step units: pixels for positions, widths and lengths; radians for angles
_UNIT = np.array([1, 1, 1, 1, 1, 1, 0.7, 0.7] + [0.12] * 8 + [0.35, 0.35, 1, 1], np.float64)


def _joints(p: np.ndarray) -> np.ndarray:
    """The 17 COCO joints ``(17, 2)`` plus head centre, shoulders' and hips' midpoints (rows 17, 18, 19)."""
    q = p.tolist()
    r, sw, hw, la, ll = q[RH], q[SW], q[HW], q[LA], q[LL]
    w = min(max(sw / (_SHOULDER_HALF * r), 0.0), 1.0) if r > 0 else 1.0
    hx, hy, mx, my, px, py = q[HX], q[HY], q[SX_], q[SY_], q[PX], q[PY]
    s = [math.sin(a) for a in q[ANG : ANG + 8]]
    c = [math.cos(a) for a in q[ANG : ANG + 8]]
    out = [(hx + r * fx * w, hy + r * fy) for fx, fy in _FACE]  # 0..4
    out += [None] * 12 + [(hx, hy), (mx, my), (px, py)]
    for side, (sh, el, wr, hip, kn, an), base in ((1.0, (5, 7, 9, 11, 13, 15), 0), (-1.0, (6, 8, 10, 12, 14, 16), 2)):
        sx, sy = mx + side * sw, my
        ex, ey = sx + _ARM_SPLIT * la * s[base], sy + _ARM_SPLIT * la * c[base]
        out[sh], out[el] = (sx, sy), (ex, ey)
        out[wr] = (ex + (1 - _ARM_SPLIT) * la * s[base + 1], ey + (1 - _ARM_SPLIT) * la * c[base + 1])
        ix, iy = px + side * hw, py
        kx, ky = ix + _LEG_SPLIT * ll * s[base + 4], iy + _LEG_SPLIT * ll * c[base + 4]
        out[hip], out[kn] = (ix, iy), (kx, ky)
        out[an] = (kx + (1 - _LEG_SPLIT) * ll * s[base + 5], ky + (1 - _LEG_SPLIT) * ll * c[base + 5])
    return np.array(out, np.float64)


_TORSO_SEGMENTS = ((5, 6), (11, 12), (18, 19), (18, 17))  # shoulder line, hip line, spine, neck
_LIMB_SEGMENTS = (((5, 7), (7, 9)), ((6, 8), (8, 10)), ((11, 13), (13, 15)), ((12, 14), (14, 16)))
_LIMB_ROOTS = (5, 6, 11, 12)
_LIMB_LENGTH = (LA, LA, LL, LL)
TORSO, ALL = -1, (-1, 0, 1, 2, 3)  # parts: the torso (with the head), limbs 0..3


class _Fit:
    """The coverage error of figure parameters against one frame's observed coverage, inside a box.

    The figure is drawn on a ``SS x SS`` supersampled uint8 canvas of the box (cv2 lines and a disk in
    fixed point, as worldgen's rasteriser draws it) and averaged down to pixel coverage.
    """

    def __init__(self, alpha: np.ndarray, care: np.ndarray, box: tuple[int, int, int, int], prior_weight: float = 0.0):
        self.box = box
        x0, y0, x1, y1 = box
        self.size = (x1 - x0, y1 - y0)
        self.alpha = alpha[y0:y1, x0:x1].astype(np.float32)
        self.care = care[y0:y1, x0:x1].astype(np.float32)
        self.prior_weight = prior_weight
        self.evals = 0

    def blank(self) -> np.ndarray:
        return np.zeros((self.size[1] * SS, self.size[0] * SS), np.uint8)

    def draw(self, canvas: np.ndarray, p: np.ndarray, joints: np.ndarray, parts: Sequence[int]) -> None:
        g = (joints - np.array(self.box[:2], np.float64)) * SS - 0.5  # subsample k of pixel j sits at j*SS + k
        fp = np.clip(np.round(g * (1 << _SHIFT)), -(1 << 22), 1 << 22).astype(np.int64).tolist()
        th = max(1, int(round(p[TH] * SS)))
        for part in parts:
            for a, b in _TORSO_SEGMENTS if part == TORSO else _LIMB_SEGMENTS[part]:
                cv2.line(canvas, fp[a], fp[b], 255, th, cv2.LINE_8, _SHIFT)
            if part == TORSO:
                cv2.circle(canvas, fp[17], max(1, int(round(p[RH] * SS * (1 << _SHIFT)))), 255, -1, cv2.LINE_8, _SHIFT)

    def error(self, canvas: np.ndarray) -> float:
        self.evals += 1
        cov = cv2.resize(canvas, self.size, interpolation=cv2.INTER_AREA).astype(np.float32) * (1.0 / 255.0)
        d = (cov - self.alpha) * self.care
        return float(np.vdot(d, d))

    def prior(self, p: np.ndarray) -> float:
        if not self.prior_weight:
            return 0.0
        r = max(p[RH], 1e-3)
        d = ((p[LA] - _ARM * r) / r, (p[LL] - _LEG * r) / r, (p[TH] - 0.8 * r) / r)
        return self.prior_weight * float(sum(v * v for v in d))

    def cost(self, p: np.ndarray, parts: Sequence[int] = ALL) -> float:
        c = self.blank()
        self.draw(c, p, _joints(p), parts)
        return self.error(c) + self.prior(p)


def _valid(p: np.ndarray) -> bool:
    """Within the synthetic figures' proportions (limb lengths within 25% of theirs, relative to the head)."""
    r = p[RH]
    return (r > 0.5 and p[SW] >= 0 and p[HW] >= 0 and 0.3 * r <= p[TH] <= 1.6 * r and p[TH] > 0.5
            and 0.75 * _ARM * r <= p[LA] <= 1.25 * _ARM * r and 0.75 * _LEG * r <= p[LL] <= 1.25 * _LEG * r)


def _pattern_search(fit: _Fit, p: np.ndarray, free: Sequence[int], scales=(2.0, 1.0, 0.5, 0.25), rounds: int = 3) -> tuple[np.ndarray, float]:
    """Coordinate pattern search: each free parameter (and the whole figure's x / y shift) tries
    +-step, a move is kept when it lowers the cost; the step halves when a round changes nothing."""
    p = p.copy()
    best = fit.cost(p)
    moves: list = [((i, 1.0),) for i in free]
    if HX in free and SX_ in free and PX in free:  # the whole figure at once
        moves += [((HX, 1.0), (SX_, 1.0), (PX, 1.0)), ((HY, 1.0), (SY_, 1.0), (PY, 1.0))]
    for s in scales:
        for _ in range(rounds):
            improved = False
            for move in moves:
                for sign in (1.0, -1.0):
                    q = p.copy()
                    for i, f in move:
                        q[i] += sign * s * f * _UNIT[i]
                    if not _valid(q):
                        continue
                    c = fit.cost(q)
                    if c < best - 1e-6:
                        p, best, improved = q, c, True
                        break
            if not improved:
                break
    return p, best


def _limb_box(alpha: np.ndarray, p: np.ndarray, joints: np.ndarray, k: int) -> tuple[int, int, int, int]:
    """The pixels limb ``k`` can reach from its root joint, clipped to the frame."""
    h, w = alpha.shape
    reach = p[_LIMB_LENGTH[k]] + p[TH] + 1.5
    x, y = joints[_LIMB_ROOTS[k]]
    x0, y0 = max(0, int(math.floor(x - reach))), max(0, int(math.floor(y - reach)))
    x1, y1 = min(w, int(math.ceil(x + reach)) + 1), min(h, int(math.ceil(y + reach)) + 1)
    return (x0, y0, max(x1, x0 + 1), max(y1, y0 + 1))


def _limb_grid(alpha: np.ndarray, care: np.ndarray, p: np.ndarray, k: int, steps: int) -> tuple[np.ndarray, int]:
    """Limb ``k``'s two angles on a ``steps x steps`` grid, the rest of the figure fixed, the best kept
    (the current angles compete). Scored inside the limb's reach only: nothing else changes."""
    a1, a2 = _LIMB_ANGLES[k]
    joints = _joints(p)
    fit = _Fit(alpha, care, _limb_box(alpha, p, joints, k))
    base = fit.blank()
    fit.draw(base, p, joints, [x for x in ALL if x != k])
    cur = base.copy()
    fit.draw(cur, p, joints, [k])
    best_p, best = p, fit.error(cur)
    grid = np.arange(steps) * (2 * math.pi / steps) - math.pi
    for g1 in grid:
        for g2 in grid:
            q = p.copy()
            q[a1], q[a2] = g1, g2
            c = base.copy()
            fit.draw(c, q, _joints(q), [k])
            e = fit.error(c)
            if e < best - 1e-6:
                best_p, best = q, e
    return best_p, fit.evals


def _misfit(alpha: np.ndarray, care: np.ndarray, p: np.ndarray, box: tuple[int, int, int, int] | None = None) -> int:
    """Pixels (of ``box``, default the whole frame) whose rendered and observed coverage differ by more
    than a half: what a misplaced part leaves; background noise hardly ever does."""
    fit = _Fit(alpha, care, box or (0, 0, alpha.shape[1], alpha.shape[0]))
    c = fit.blank()
    fit.draw(c, p, _joints(p), ALL)
    cov = cv2.resize(c, fit.size, interpolation=cv2.INTER_AREA).astype(np.float32) * (1.0 / 255.0)
    return int(np.count_nonzero((np.abs(cov - fit.alpha) > 0.5) & (fit.care > 0)))


def _limb_misfit(alpha: np.ndarray, care: np.ndarray, p: np.ndarray, k: int) -> int:
    return _misfit(alpha, care, p, _limb_box(alpha, p, _joints(p), k))


def _wrap(p: np.ndarray) -> np.ndarray:
    p = p.copy()
    p[ANG : ANG + 8] = (p[ANG : ANG + 8] + math.pi) % (2 * math.pi) - math.pi
    return p


# ------------------------------------------------------------------------- frame analysis


def _frame_median(frame: np.ndarray) -> np.ndarray:
    return np.median(frame.reshape(-1, 3), axis=0)


def _standing_out(frame: np.ndarray, threshold: float) -> np.ndarray:
    f = frame.astype(np.float32)
    return np.linalg.norm(f - _frame_median(frame).astype(np.float32), axis=-1) > threshold


def _thinness(mask: np.ndarray) -> float:
    """Area over squared mean distance-to-edge of the largest region: ~9 x length / width for a line."""
    n, lab, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    if n < 2:
        return 0.0
    k = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    region = (lab == k).astype(np.uint8)
    area = int(stats[k, cv2.CC_STAT_AREA])
    if area < 12:
        return 0.0
    dt = cv2.distanceTransform(np.pad(region, 1), cv2.DIST_L2, 3)[1:-1, 1:-1]
    m = float(dt[region > 0].mean())
    return area / max(m * m, 1e-6)


# a figure's largest region scores about 170 or more even half hidden; filled shapes score under 60,
# a ring of the largest size about 80
_MIN_THINNESS = 110.0


def figure_colour(frames: np.ndarray, max_frames: int = 6, stand_out: float = 60.0) -> np.ndarray | None:
    """The RGB colour of the stick figure in ``frames`` (T, H, W, 3), or None when nothing stands out.

    Candidates are the main colours of the pixels that stand out from each frame's median colour; the
    one whose largest region is the thinnest (see ``_thinness``) wins, if thin enough for a figure. The
    colour returned is the median of its pixels farthest from the background (the unmixed interior).
    """
    idx = np.unique(np.linspace(0, len(frames) - 1, min(max_frames, len(frames))).round().astype(int))
    picks = [frames[i][_standing_out(frames[i], stand_out)] for i in idx]
    pix = np.concatenate(picks) if picks else np.zeros((0, 3), np.uint8)
    if len(pix) < 12:
        return None
    bins = (pix // 32).astype(np.int64)
    key = bins[:, 0] * 64 + bins[:, 1] * 8 + bins[:, 2]
    keys, counts = np.unique(key, return_counts=True)
    cands: list[np.ndarray] = []
    for kk in keys[np.argsort(-counts)][:6]:
        c = np.median(pix[key == kk].astype(np.float32), axis=0)
        if all(np.linalg.norm(c - o) > 40 for o in cands):
            cands.append(c)
    best, best_score, best_pix = None, 0.0, None
    for c in cands:
        scores, inner = [], []
        for i in idx:
            f = frames[i].astype(np.float32)
            far = np.linalg.norm(f - _frame_median(frames[i]), axis=-1)
            mask = np.linalg.norm(f - c, axis=-1) < 0.5 * np.linalg.norm(c - _frame_median(frames[i]))
            scores.append(_thinness(mask))
            if mask.any():  # the pixels farthest from the background: the figure's unmixed colour
                inner.append(f[mask & (far >= np.percentile(far[mask], 60))])
        s = float(np.median(scores))
        if s > best_score:
            best, best_score, best_pix = c, s, inner
    if best is None or best_score <= _MIN_THINNESS:
        return None
    return np.median(np.concatenate(best_pix), axis=0) if best_pix else best


def figure_scale(alphas: np.ndarray) -> float:
    """A head radius guess from coverage maps ``(T, H, W)``: 0.08 of the median height of the largest
    figure-coloured region (the synthetic figures stand about 12 head radii tall)."""
    heights = []
    for a in alphas:
        n, _, stats, _ = cv2.connectedComponentsWithStats((a >= 0.5).astype(np.uint8), connectivity=8)
        if n > 1:
            heights.append(stats[1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA])), cv2.CC_STAT_HEIGHT])
    return max(1.5, 0.08 * float(np.median(heights))) if heights else 3.0


def coverage_maps(frame: np.ndarray, colour: np.ndarray, stand_out: float = 60.0, blob_radius: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The figure's observed coverage ``alpha`` in [0, 1] and the ``care`` mask (False = don't care) of one frame."""
    f = frame.astype(np.float32)
    c = np.asarray(colour, np.float32)
    objects = _standing_out(frame, stand_out)
    hole = cv2.dilate(objects.astype(np.uint8), np.ones((3, 3), np.uint8))
    bg = cv2.inpaint(frame, hole, 3, cv2.INPAINT_TELEA).astype(np.float32) if hole.any() else f
    d = c - bg
    alpha = np.clip(np.sum((f - bg) * d, -1) / np.maximum(np.sum(d * d, -1), 1.0), 0.0, 1.0)
    resid = np.linalg.norm(f - (bg + alpha[..., None] * d), axis=-1)
    # another object: a region standing out in a colour off the background-to-figure line
    off = max(45.0, 0.3 * float(np.linalg.norm(c - np.median(bg.reshape(-1, 3), 0))))
    other = (objects & (resid > off)).astype(np.uint8)
    n, lab, stats, _ = cv2.connectedComponentsWithStats(other, connectivity=8)
    big = np.isin(lab, [k for k in range(1, n) if stats[k, cv2.CC_STAT_AREA] >= 6])
    # its mixed edge pixels too, but not the figure's own clean pixels next to it
    care = ~(cv2.dilate(big.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0) | ((other == 0) & (resid < 0.5 * off))
    # figure-coloured blobs thicker than any limb or head are another object of the same colour
    mask = ((alpha >= 0.5) & care).astype(np.uint8)
    if mask.any():
        dt = cv2.distanceTransform(np.pad(mask, 1), cv2.DIST_L2, 3)[1:-1, 1:-1]
        r = blob_radius if blob_radius is not None else 1.6 * figure_scale(alpha[None])
        core = (dt > r).astype(np.uint8)
        if core.any():
            size = int(2 * math.ceil(r) + 3)
            blob = cv2.dilate(core, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (size, size))) > 0
            care &= ~blob
    return alpha.astype(np.float32), care


# ------------------------------------------------------------------------------ the reader


def _whole(value: Any, name: str, low: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise InputError(name, value, f"pass a whole number >= {low}")
    return int(value)


class ClassicPoseReader:
    """The builtin stick-figure pose reader (see the module docstring). No weights, deterministic.

    ``colour``: the figure's RGB colour (None: found by ``figure_colour``); ``grid``: angle steps per
    limb segment of the limb search (12 = 30 degrees); ``calibration_frames``: frames of the first pass
    that fixes the clip constants; ``work_size``: frames whose longer side is larger are read at this
    size (INTER_AREA) and the keypoints scaled back, which bounds the cost per frame;
    ``prior_weight``: weight of the weak limb-length and thickness priors.

    measured: PCK@0.1 0.995 (PCK@0.05 0.992, PCK@0.2 0.999, box-diagonal scale, ``scorers.pose.pck``) on
    40 clips: 20 worldgen motion_edit samples (seeds 0-19, the default level 2, 64 x 64, 36 frames) x
    their source and target worlds, 24,340 GT keypoints with v > 0 (all visible at this level); every
    clip >= 0.95 but seed 17's source, a ``turn`` (0.81: seen from the back). Command:
    ``python -m benchmarks.pose_reader --measure 20`` (about 3 s a clip on one CPU thread). Also run: seeds
    100-119 (``benchmarks.pose_reader --measure 20 --start 100``) 0.985, the clips below 0.95 being its three ``turn`` clips
    (0.79-0.82); level 3, a shape in front (``python -m benchmarks.pose_reader --measure 10 --level 3``), 1.000 on 20 clips including
    the 156 GT-occluded joints.
    """

    def __init__(self, colour: Sequence[float] | None = None, grid: int = 12, calibration_frames: int = 4, work_size: int = 96,
                 prior_weight: float = 0.5):
        if colour is not None:
            try:
                c = np.asarray(colour, np.float32)
            except (TypeError, ValueError):
                c = None
            if c is None or c.shape != (3,) or not np.isfinite(c).all() or (c < 0).any() or (c > 255).any():
                raise InputError("colour", colour, "pass the figure's RGB colour as three numbers in 0..255, or None to find it")
            colour = c
        self.colour = colour
        self.grid = _whole(grid, "grid", 4)
        self.calibration_frames = _whole(calibration_frames, "calibration_frames", 1)
        self.work_size = _whole(work_size, "work_size", 32)
        if not isinstance(prior_weight, (int, float)) or isinstance(prior_weight, bool) or not prior_weight >= 0:
            raise InputError("prior_weight", prior_weight, "pass a number >= 0")
        self.prior_weight = float(prior_weight)
        self.limb_tolerance = 3  # misfit pixels in a limb's reach above which its angles are searched on the grid
        self.restart_tolerance = 6  # misfit pixels more than the previous frame's: a fresh start competes
        self.restart_every = 8  # and at least every this many frames
        self.last_evals = 0  # figure renders of the last read (a cost measure)

    # -------------------------------------------------------------- per frame
    @staticmethod
    def _region(alpha: np.ndarray, care: np.ndarray) -> np.ndarray | None:
        """The figure's pixels: the largest figure-coloured region, with the regions near its box."""
        mask = ((alpha >= 0.5) & care).astype(np.uint8)
        n, lab, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
        if n < 2:
            return None
        k = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
        if stats[k, cv2.CC_STAT_AREA] < 8:
            return None
        x, y, w, h = stats[k, :4]
        grow = 0.25 * max(w, h)
        keep = [j for j in range(1, n) if j == k or (
            stats[j, 0] < x + w + grow and stats[j, 0] + stats[j, 2] > x - grow and stats[j, 1] < y + h + grow and stats[j, 1] + stats[j, 3] > y - grow)]
        return np.isin(lab, keep)

    @staticmethod
    def _box(shape: tuple[int, int], region: np.ndarray, p: np.ndarray) -> tuple[int, int, int, int]:
        h, w = shape
        ys, xs = np.nonzero(region)
        j = _joints(p)
        margin = p[TH] + 2
        x0 = min(xs.min(), j[:, 0].min() - margin)
        y0 = min(ys.min(), j[:, 1].min() - margin)
        x1 = max(xs.max() + 1, j[:, 0].max() + margin)
        y1 = max(ys.max() + 1, j[:, 1].max() + margin)
        x0, y0 = max(0, int(math.floor(x0)) - 2), max(0, int(math.floor(y0)) - 2)
        x1, y1 = min(w, int(math.ceil(x1)) + 2), min(h, int(math.ceil(y1)) + 2)
        return x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)

    def _fresh_fit(self, alpha, care, region: np.ndarray, consts: np.ndarray | None, free: list[int]) -> tuple[np.ndarray, float]:
        """The best fresh start: one from each of the region's largest parts (at most 3), so a thick object of the
        figure's colour beside it (a same-coloured shape, whose distance-transform peak beats the head's) is tried as
        the head and loses, instead of being the only start."""
        n, lab, stats, _ = cv2.connectedComponentsWithStats(region.astype(np.uint8), connectivity=8)
        parts = [k for k in 1 + np.argsort(-stats[1:, cv2.CC_STAT_AREA]) if stats[k, cv2.CC_STAT_AREA] >= 8][:3] or [None]
        best = None
        for k in parts:
            start = self._fresh(region if k is None else lab == k, consts, region)
            fit = self._fit_from(alpha, care, region, start, free, grid=True)
            if best is None or fit[1] < best[1]:
                best = fit
        return best

    def _fresh(self, part: np.ndarray, consts: np.ndarray | None, region: np.ndarray | None = None) -> np.ndarray:
        """A first guess: the head at the distance-transform peak of ``part`` (of the figure's ``region``), a neutral
        figure below it."""
        mask = part.astype(np.uint8)
        dt = cv2.distanceTransform(np.pad(mask, 1), cv2.DIST_L2, 5)[1:-1, 1:-1]
        y, x = np.unravel_index(int(np.argmax(dt)), dt.shape)
        ys = np.nonzero(mask if region is None else region)[0]
        if consts is not None:
            r = consts[0]
        else:  # head radius: the peak, at most what the figure's height allows
            r = max(1.0, min(float(dt[y, x]) + 0.5, (ys.max() - ys.min() + 1) * 0.08))
        p = np.zeros(NPARAM)
        p[[HX, HY]] = x + 0.5, y + 0.5
        p[[SX_, SY_]] = p[HX], p[HY] + _HEAD_TO_SHOULDERS * r
        p[[PX, PY]] = p[HX], p[SY_] + _TORSO * r
        p[SW], p[HW] = _SHOULDER_HALF * r, _HIP_HALF * r
        p[ANG : ANG + 8] = [0.15, 0.25, -0.15, -0.25, 0.08, 0.08, -0.08, -0.08]
        if consts is not None:
            p[list(_CLIP_CONSTANTS)] = consts
        else:
            p[RH], p[TH], p[LA], p[LL] = r, 0.8 * r, _ARM * r, _LEG * r
        return p

    def _fit_from(self, alpha, care, region, p0: np.ndarray, free: list[int], grid: bool) -> tuple[np.ndarray, float]:
        """From ``p0``: a fresh start (``grid``) searches every limb's angles on the grid (legs first) and
        refines everything, twice; a tracked start refines everything, then re-searches the limbs whose
        reach is still badly explained. Returns the figure and its misfit (``_misfit``)."""
        p = p0
        if grid:
            for _ in range(2):
                for k in (2, 3, 0, 1):
                    p, n = _limb_grid(alpha, care, p, k, self.grid)
                    self.last_evals += n
                fit = _Fit(alpha, care, self._box(alpha.shape, region, p), self.prior_weight)
                p, _ = _pattern_search(fit, _wrap(p), free, scales=(2.0, 1.0, 0.5, 0.25))
                self.last_evals += fit.evals
        else:
            fit = _Fit(alpha, care, self._box(alpha.shape, region, p), self.prior_weight)
            p, _ = _pattern_search(fit, p, free, scales=(1.0, 0.5, 0.25))
            self.last_evals += fit.evals
            redo = [k for k in range(4) if _limb_misfit(alpha, care, p, k) > self.limb_tolerance]
            if redo:
                for k in redo:
                    p, n = _limb_grid(alpha, care, p, k, self.grid)
                    self.last_evals += n
                fit = _Fit(alpha, care, self._box(alpha.shape, region, p), self.prior_weight)
                p, _ = _pattern_search(fit, _wrap(p), free, scales=(1.0, 0.5, 0.25))
                self.last_evals += fit.evals
        p = _wrap(p)
        return p, float(_misfit(alpha, care, p))

    def _keypoints(self, p: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        h, w = alpha.shape
        j = _joints(p)[:17]
        out = np.zeros((17, 3), np.float32)
        out[:, :2] = j
        xi, yi = np.floor(j[:, 0]).astype(int), np.floor(j[:, 1]).astype(int)
        inside = (xi >= 0) & (yi >= 0) & (xi < w) & (yi < h)
        seen = np.zeros(17, bool)
        seen[inside] = alpha[yi[inside], xi[inside]] >= 0.5
        out[:, 2] = np.where(seen, 2.0, np.where(inside, 1.0, 0.0))
        return out

    # -------------------------------------------------------------- per clip
    def read(self, frames: Any) -> np.ndarray:
        """COCO-17 keypoints ``(T, 17, 3)`` float32 in pixels of ``frames`` (``(17, 3)`` for one frame)."""
        video, single = _as_frames(frames)
        scale = min(1.0, self.work_size / max(video.shape[1:3]))
        if scale < 1.0:
            size = (max(1, int(round(video.shape[1] * scale))), max(1, int(round(video.shape[2] * scale))))
            small = resize_frames(video, size, "area")
            out = self._read(small)
            sx, sy = video.shape[2] / size[1], video.shape[1] / size[0]
            out[..., 0] *= sx
            out[..., 1] *= sy
        else:
            out = self._read(video)
        return out[0] if single else out

    def _read(self, video: np.ndarray) -> np.ndarray:
        self.last_evals = 0
        out = np.zeros((len(video), 17, 3), np.float32)
        colour = self.colour if self.colour is not None else figure_colour(video)
        if colour is None:
            return out
        # figure-coloured blobs much thicker than the head are another object: the head's size first
        idx = np.unique(np.linspace(0, len(video) - 1, min(8, len(video))).round().astype(int))
        scale = figure_scale(np.stack([coverage_maps(video[i], colour, blob_radius=math.inf)[0] for i in idx]))
        maps = [coverage_maps(f, colour, blob_radius=1.6 * scale) for f in video]
        regions = [self._region(a, c) for a, c in maps]
        have = [i for i, r in enumerate(regions) if r is not None]
        if not have:
            return out
        # pass 1: the clip constants (head radius, thickness, limb lengths) from fresh reads of a few
        # frames, keeping those read about as well as the best one
        everything = list(range(NPARAM))
        idx = sorted({have[int(round(x))] for x in np.linspace(0, len(have) - 1, min(self.calibration_frames, len(have)))})
        found = []
        for i in idx:
            p, miss = self._fresh_fit(*maps[i], regions[i], None, everything)
            found.append((miss, p[list(_CLIP_CONSTANTS)]))
        low = min(m for m, _ in found)
        consts = np.median(np.stack([c for m, c in found if m <= low + self.restart_tolerance]), axis=0)
        # pass 2: every frame from the previous one; a fresh start competes when tracking left pixels
        # unexplained that it explained before, and every few frames
        per_frame = [i for i in everything if i not in _CLIP_CONSTANTS]
        prev, prev_miss, since = None, 0.0, 0
        for t, ((alpha, care), region) in enumerate(zip(maps, regions)):
            if region is None:
                prev = None
                continue
            p, miss = (None, math.inf) if prev is None else self._fit_from(alpha, care, region, prev, per_frame, grid=False)
            since += 1
            if p is None or miss > prev_miss + self.restart_tolerance or since >= self.restart_every:
                q, m = self._fresh_fit(alpha, care, region, consts, per_frame)
                since = 0
                if m < miss:
                    p, miss = q, m
            if miss > 0.5 * np.count_nonzero(region):  # most of what was seen is not a figure
                prev = None
                continue
            prev, prev_miss = p, miss
            out[t] = self._keypoints(p, alpha)
        return out


# ------------------------------------------------------------------------------- mediapipe


class MediaPipePoseReader:
    """MediaPipe Pose through mediapipe 0.10.14's ``mediapipe.solutions.pose`` (the ``pose`` extra).

    Frames are read in order as a video (``static_image_mode=False``: tracking between frames) unless
    ``static_image_mode`` is True. A frame without a detected person gives zeros (v = 0).
    """

    def __init__(self, model_complexity: int = 1, min_detection_confidence: float = 0.5, min_tracking_confidence: float = 0.5,
                 min_visibility: float = 0.5, static_image_mode: bool = False):
        if model_complexity not in (0, 1, 2):
            raise InputError("model_complexity", model_complexity, "MediaPipe Pose has complexities 0, 1 and 2")
        self._mp_pose = _import_mediapipe_pose()
        self.settings = {"model_complexity": int(model_complexity), "min_detection_confidence": float(min_detection_confidence),
                         "min_tracking_confidence": float(min_tracking_confidence), "static_image_mode": bool(static_image_mode)}
        self.min_visibility = float(min_visibility)

    def read(self, frames: Any) -> np.ndarray:
        from core.keypoints import from_mediapipe33

        video, single = _as_frames(frames)
        h, w = video.shape[1:3]
        out = np.zeros((len(video), 17, 3), np.float32)
        with self._mp_pose.Pose(**self.settings) as pose:
            for t, frame in enumerate(video):
                result = pose.process(np.ascontiguousarray(frame))
                marks = getattr(result, "pose_landmarks", None)
                if marks is None:
                    continue
                lm = np.array([[m.x, m.y, m.z, m.visibility] for m in marks.landmark], np.float32)
                out[t] = from_mediapipe33(lm, w, h, self.min_visibility)
        return out[0] if single else out


def _import_mediapipe_pose():
    try:
        import mediapipe as mp

        return mp.solutions.pose
    except (ImportError, AttributeError):
        raise InputError("pose_reader", "mediapipe",
                         "mediapipe is not installed (or lacks mediapipe.solutions.pose): pip install 'atelier[pose]' "
                         "(mediapipe 0.10.14), or use the builtin 'classic' reader") from None


# --------------------------------------------------------------------------------- loading

POSE_READERS = {"classic": ClassicPoseReader, "mediapipe": MediaPipePoseReader}


def load_pose_reader(spec: str = "classic", **kwargs: Any) -> PoseReader:
    """A pose reader by name: ``classic`` (builtin) or ``mediapipe`` (``pip install 'atelier[pose]'``)."""
    if not isinstance(spec, str) or spec not in POSE_READERS:
        raise InputError("pose_reader", spec, f"choose one of {sorted(POSE_READERS)}")
    return POSE_READERS[spec](**kwargs)


__all__ = ["POSE_READERS", "ClassicPoseReader", "MediaPipePoseReader", "PoseReader", "coverage_maps", "figure_colour", "load_pose_reader"]
