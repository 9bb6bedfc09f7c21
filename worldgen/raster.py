"""Anti-aliased rasterisation with exact coverage, and z-order compositing into frames and id maps.

Each object is drawn as a binary image on a ``SS x SS`` supersampled grid (cv2.fillPoly / line /
circle in fixed point, local to the object's box), then summed per pixel: its coverage is
``k / SS**2`` with k the number of covered subsamples. Objects are composited front to back:
an object's *visible weight* at a pixel is its coverage times the transmittance of everything in
front of it; colour = sum of weights x colours + remaining transmittance x background.

**Mask rule** (documented and tested): a pixel belongs to the object with the largest visible
weight, provided the total coverage ``alpha = 1 - prod(1 - coverage)`` is at least 1/2; otherwise it
is background (0). Ties go to the front object, so a front object covering >= 50% always wins.
Hence: the union of instance masks is exactly ``alpha >= 0.5``; pixels with ``alpha == 0`` equal
the background exactly; pixels fully covered by their front object equal its colour exactly.
"""

from __future__ import annotations

import cv2
import numpy as np

from core.frames import resize_frame

SS = 4  # supersampling factor per axis: coverage resolution 1/16
_SHIFT = 4  # fixed-point bits for cv2 drawing: 1/16 of a subsample


def _star(points: int = 5, inner: float = 0.45) -> np.ndarray:
    a = -np.pi / 2 + np.arange(2 * points) * np.pi / points
    r = np.where(np.arange(2 * points) % 2 == 0, 1.0, inner)
    return np.stack([r * np.cos(a), r * np.sin(a)], 1)


def _circle(n: int = 48) -> np.ndarray:
    a = np.arange(n) * 2 * np.pi / n
    return np.stack([np.cos(a), np.sin(a)], 1)


def _heart(n: int = 48) -> np.ndarray:
    t = np.arange(n) * 2 * np.pi / n
    x = 16 * np.sin(t) ** 3
    y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
    pts = np.stack([x, y + 2.5], 1)
    return pts / np.abs(pts).max()


_C = 0.33  # cross arm half-width
# unit outlines: each shape fits the unit disk (circumradius 1, y down); a ring is (outer, hole)
OUTLINES = {
    "circle": [_circle()],
    "square": [np.array([[-0.8, -0.8], [0.8, -0.8], [0.8, 0.8], [-0.8, 0.8]]) * 0.88 / 0.8],
    "triangle": [np.array([[0.0, -1.0], [0.92, 0.7], [-0.92, 0.7]])],
    "star": [_star()],
    "diamond": [np.array([[0.0, -1.0], [0.7, 0.0], [0.0, 1.0], [-0.7, 0.0]])],
    "cross": [np.array([[-_C, -1], [_C, -1], [_C, -_C], [1, -_C], [1, _C], [_C, _C], [_C, 1], [-_C, 1], [-_C, _C], [-1, _C], [-1, -_C], [-_C, -_C]]) * 0.95],
    "ring": [_circle(), _circle() * 0.55],
    "heart": [_heart()],
}


def _box(cx: float, cy: float, r: float, h: int, w: int) -> tuple[int, int, int, int] | None:
    x0, y0 = max(int(np.floor(cx - r)) - 1, 0), max(int(np.floor(cy - r)) - 1, 0)
    x1, y1 = min(int(np.ceil(cx + r)) + 2, w), min(int(np.ceil(cy + r)) + 2, h)
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


def _fixed(pts: np.ndarray, x0: int, y0: int) -> np.ndarray:
    """Pixel coordinates -> cv2 fixed-point coordinates on the local supersampled grid.

    Pixel (i, j) spans [j, j+1) x [i, i+1); subsample k of it has centre j + (k + 0.5) / SS, which
    cv2 puts at integer grid position j * SS + k.
    """
    g = (pts - np.array([x0, y0])) * SS - 0.5
    return np.round(g * (1 << _SHIFT)).astype(np.int32)


def _reduce(canvas: np.ndarray) -> np.ndarray:
    h, w = canvas.shape[0] // SS, canvas.shape[1] // SS
    return canvas.reshape(h, SS, w, SS).sum(axis=(1, 3), dtype=np.uint8)


def shape_coverage(shape: str, cx: float, cy: float, r: float, angle: float, h: int, w: int):
    """Coverage of a shape on an ``h x w`` canvas: ``(x0, y0, counts)`` with counts in [0, SS*SS]."""
    box = _box(cx, cy, r, h, w)
    if box is None:
        return None
    x0, y0, x1, y1 = box
    canvas = np.zeros(((y1 - y0) * SS, (x1 - x0) * SS), np.uint8)
    c, s = np.cos(angle), np.sin(angle)
    rot = np.array([[c, s], [-s, c]]) * r
    for i, unit in enumerate(OUTLINES[shape]):
        off = unit @ rot
        # cv2 fills every subsample an edge touches (about half a subsample too much): pull the
        # outline in by that much (push a hole's outline out) so the area is unbiased
        dist = np.maximum(np.linalg.norm(off, axis=1, keepdims=True), 1e-6)
        off = off * (1 + (0.5 if i else -0.5) / SS / dist)
        pts = _fixed(off + np.array([cx, cy]), x0, y0)
        cv2.fillPoly(canvas, [pts], 0 if i else 1, lineType=cv2.LINE_8, shift=_SHIFT)
    return x0, y0, _reduce(canvas)


def figure_coverage(kp: np.ndarray, head: np.ndarray, head_r: float, thickness: float, h: int, w: int):
    """Coverage of a stick figure: thick limbs between ``kp`` (17, 2) points, a neck and a head disk."""
    allpts = np.vstack([kp, head[None]])
    lo, hi = allpts.min(0) - head_r - thickness, allpts.max(0) + head_r + thickness
    c, r = (lo + hi) / 2, float((hi - lo).max() / 2)
    box = _box(c[0], c[1], r, h, w)
    if box is None:
        return None
    x0, y0, x1, y1 = box
    canvas = np.zeros(((y1 - y0) * SS, (x1 - x0) * SS), np.uint8)
    th = max(1, int(round(thickness * SS)))
    fp = _fixed(kp, x0, y0)
    mid_sh, mid_hip = _fixed((kp[5] + kp[6])[None] / 2, x0, y0)[0], _fixed((kp[11] + kp[12])[None] / 2, x0, y0)[0]
    hc = _fixed(head[None], x0, y0)[0]
    segments = [(fp[a], fp[b]) for a, b in _LIMBS] + [(mid_sh, mid_hip), (mid_sh, hc)]
    for a, b in segments:
        cv2.line(canvas, tuple(int(v) for v in a), tuple(int(v) for v in b), 1, th, cv2.LINE_8, _SHIFT)
    cv2.circle(canvas, tuple(int(v) for v in hc), int(round(head_r * SS * (1 << _SHIFT))), 1, -1, cv2.LINE_8, _SHIFT)
    return x0, y0, _reduce(canvas)


_LIMBS = ((5, 6), (5, 7), (7, 9), (6, 8), (8, 10), (11, 12), (11, 13), (13, 15), (12, 14), (14, 16))


def composite(background: np.ndarray, layers: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Composite ``layers`` = [(obj_id, (x0, y0, counts), rgb)] given FRONT TO BACK over ``background``.

    Returns ``(rgb uint8 (H, W, 3), ids uint8 (H, W), alpha float32 (H, W))`` under the mask rule.
    """
    h, w = background.shape[:2]
    trans = np.ones((h, w), np.float32)  # transmittance of everything drawn so far (in front)
    best = np.zeros((h, w), np.float32)
    ids = np.zeros((h, w), np.uint8)
    acc = np.zeros((h, w, 3), np.float32)
    for obj_id, (x0, y0, counts), color in layers:
        ph, pw = counts.shape
        cov = counts.astype(np.float32) * (1.0 / (SS * SS))
        t = trans[y0 : y0 + ph, x0 : x0 + pw]
        wgt = cov * t
        win = wgt > best[y0 : y0 + ph, x0 : x0 + pw]
        best[y0 : y0 + ph, x0 : x0 + pw][win] = wgt[win]
        ids[y0 : y0 + ph, x0 : x0 + pw][win] = obj_id
        acc[y0 : y0 + ph, x0 : x0 + pw] += wgt[..., None] * np.asarray(color, np.float32)
        t *= 1.0 - cov
    alpha = 1.0 - trans
    ids[alpha < 0.5] = 0
    rgb = acc + trans[..., None] * background
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8), ids, alpha


def make_background(kind: str, tone: tuple, accent: tuple, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A float32 ``(h, w, 3)`` background: solid, gradient, checker, stripes or noise."""
    base = np.asarray(tone, np.float32)
    acc = np.asarray(accent, np.float32)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    if kind == "solid":
        return np.broadcast_to(base, (h, w, 3)).copy()
    if kind == "gradient":
        f = (xx / max(w - 1, 1) * 0.5 + yy / max(h - 1, 1) * 0.5)[..., None]
        return base * (1 - f) + acc * f
    if kind == "checker":
        cell = max(4, min(h, w) // 8)
        f = (((xx // cell) + (yy // cell)) % 2)[..., None]
        return base * (1 - 0.5 * f) + acc * 0.5 * f
    if kind == "stripes":
        period = max(6, min(h, w) // 6)
        f = ((xx + yy) % period < period / 2)[..., None].astype(np.float32)
        return base * (1 - 0.4 * f) + acc * 0.4 * f
    if kind == "noise":
        small = rng.random((max(h // 8, 2), max(w // 8, 2), 1)).astype(np.float32)
        f = resize_frame(small, (h, w), "linear")  # keeps the channel axis
        return base * (1 - 0.5 * f) + acc * 0.5 * f
    raise ValueError(f"unknown background kind {kind!r}")
