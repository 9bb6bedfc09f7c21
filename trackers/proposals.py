"""Candidate objects for one frame, each with an id: what CLEAR's selection numbers (spec B.2).

    proposer = ColourProposer()
    candidates = proposer.propose(frame)            # [Candidate(id, mask, box, score, area)], ids 1..N by score
    candidates = select(raw, iou=0.7, min_area=0.003, max_area=0.6, max_candidates=12)   # B.2's filters

``Proposer`` is the protocol every proposer meets (``propose(frame, phrase=None)``); the
``ColourProposer`` here is the classic one, for the synthetic world and simple real scenes, and an
hf proposer (SAM 2 automatic masks, SAM 3 concept prompts) implements the same call.

``ColourProposer`` [PROPOSED]: the background is what the frame's border looks like: its colours,
clustered with k-means into ``background_colours`` centres (a cluster holding under
``background_share`` of the border is an object touching it); pixels farther than
``background_distance`` (RGB) from every centre are foreground. Foreground colours are quantised
(``quant`` levels per channel); every quantised colour held by at least ``min_pixels`` pixels
becomes a palette entry (the mean colour of its pixels), entries closer than ``merge_distance``
merge, and a colour lying between two taken ones is dropped as their mix along an edge unless its
insides are flat. Each pixel then takes the nearest of the background centres and of the palette
entries whose pure pixels lie within ``reach`` pixels: an edge pixel that mixes an object colour with
the background joins the object when it is the closer one, which is the >= 50 % coverage rule of
the world's masks. Each connected region of one palette colour is a candidate; its score is how
clearly its pixels chose their colour (the mean of ``(d2 - d1) / (d2 + d1)``, d1 and d2 the distances
to the nearest and second-nearest colour), times how much it differs from the background. Touching
objects of one colour come out as one candidate: a colour proposer cannot split them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import cv2
import numpy as np

from core.config_io import ConfigComponent
from core.errors import InputError
from core.masks import mask_to_box
from trackers.classic import disc
from trackers.monitor import mask_iou


@dataclass(frozen=True)
class Candidate:
    """One proposed object: ``mask`` bool ``(H, W)``, ``box`` xyxy pixels (exclusive max),
    ``score`` in [0, 1] (higher first), ``area`` in pixels."""

    id: int
    mask: np.ndarray
    box: tuple[int, int, int, int]
    score: float
    area: int


@runtime_checkable
class Proposer(Protocol):
    """Anything that proposes candidates for one RGB ``(H, W, 3)`` uint8 frame; ``phrase`` (e.g. the
    planner's category) may narrow them, a proposer that cannot read text ignores it."""

    def propose(self, frame: np.ndarray, phrase: str | None = None) -> list[Candidate]: ...


def candidate(mask: np.ndarray, score: float, id: int = 0) -> Candidate:
    """A ``Candidate`` from a boolean mask (its box and area computed)."""
    mask = np.asarray(mask, bool)
    box = mask_to_box(mask)
    if box is None:
        raise InputError("mask", "empty", "a candidate needs at least one pixel")
    return Candidate(int(id), mask, box, float(score), int(mask.sum()))


def mask_nms(candidates: Sequence[Candidate], iou: float = 0.7) -> list[Candidate]:
    """Greedy mask-IoU non-maximum suppression: in score order, a candidate is dropped when its
    mask IoU with one already kept is >= ``iou``."""
    if not 0 < iou <= 1:
        raise InputError("iou", iou, "pass an IoU threshold in (0, 1]")
    kept: list[Candidate] = []
    for c in sorted(candidates, key=lambda c: -c.score):
        if all(_box_disjoint(c.box, k.box) or mask_iou(c.mask, k.mask) < iou for k in kept):
            kept.append(c)
    return kept


def size_filter(candidates: Sequence[Candidate], min_area: float = 0.003, max_area: float = 0.6) -> list[Candidate]:
    """Keep candidates covering at least ``min_area`` and at most ``max_area`` of the image."""
    if not 0 <= min_area <= max_area <= 1:
        raise InputError("min_area, max_area", (min_area, max_area), "pass fractions of the image with 0 <= min_area <= max_area <= 1")
    return [c for c in candidates if min_area <= c.area / c.mask.size <= max_area]


def select(candidates: Sequence[Candidate], iou: float = 0.7, min_area: float = 0.003, max_area: float = 0.6,
           max_candidates: int = 12) -> list[Candidate]:
    """Spec B.2's clean-up: size filter, mask NMS, the ``max_candidates`` best by score, ids 1..N."""
    if isinstance(max_candidates, bool) or not isinstance(max_candidates, int) or max_candidates < 1:
        raise InputError("max_candidates", max_candidates, "pass a positive integer")
    kept = mask_nms(size_filter(candidates, min_area, max_area), iou)[:max_candidates]
    return [replace(c, id=i + 1) for i, c in enumerate(kept)]


def id_map(candidates: Sequence[Candidate], shape: tuple[int, int] | None = None) -> np.ndarray:
    """The candidates as a uint8 id map (0 = none; later candidates win overlaps)."""
    if shape is None:
        if not candidates:
            raise InputError("shape", None, "pass the frame's (H, W) when there are no candidates")
        shape = candidates[0].mask.shape
    out = np.zeros(shape, np.uint8)
    for c in candidates:
        out[c.mask] = c.id
    return out


def _box_disjoint(a: tuple, b: tuple) -> bool:
    return a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


@dataclass
class ColourProposer(ConfigComponent):
    """Colour-quantisation proposals (see the module docstring); every field is a [PROPOSED] default.

    background_colours: k-means centres fitted to the border pixels.
    border: width of the border, in pixels, that shows the background.
    background_share: a border colour cluster smaller than this share of the border is an object
      touching the border, not background.
    background_distance: RGB distance to the nearest background centre beyond which a pixel is
      foreground.
    quant: levels per RGB channel when counting foreground colours.
    min_pixels: a quantised colour needs this many pixels to become a palette entry; a candidate
      needs this many pure pixels.
    merge_distance: palette entries closer than this (RGB) merge.
    mix_tolerance: a colour within this distance (RGB) of the line between two palette or
      background colours (10-90 % of the way) is their mix along an edge, not an entry, unless
      ``flat_share`` of its pixels are flat: their 3x3 neighbourhood varies less than
      ``flat_tolerance`` (edge pixels never are).
    flat_tolerance, flat_share: see ``mix_tolerance``.
    core_distance: pixels this close to an entry are its pure pixels; a pixel may take an entry
      only within ``reach`` pixels of that entry's pure pixels (the background is always allowed).
    reach: see ``core_distance``.
    iou, min_area, max_area, max_candidates: ``select``'s filters (spec B.2: NMS at 0.7, 0.3 % to
      60 % of the image, at most 12).
    """

    background_colours: int = 4
    border: int = 2
    background_share: float = 0.1
    background_distance: float = 40.0
    quant: int = 8
    min_pixels: int = 6
    merge_distance: float = 30.0
    mix_tolerance: float = 12.0
    flat_tolerance: float = 12.0
    flat_share: float = 0.2
    core_distance: float = 20.0
    reach: int = 2
    iou: float = 0.7
    min_area: float = 0.003
    max_area: float = 0.6
    max_candidates: int = 12
    MODEL_NAME = "colour-proposer"

    def propose(self, frame: np.ndarray, phrase: str | None = None) -> list[Candidate]:
        """Candidates of ``frame`` (RGB uint8 ``(H, W, 3)``), best first, ids 1..N; ``phrase`` is ignored."""
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8 or min(frame.shape[:2]) <= 2 * self.border:
            raise InputError("frame", f"array {frame.shape} {frame.dtype}", f"pass one RGB uint8 image (H, W, 3), sides over {2 * self.border}")
        h, w = frame.shape[:2]
        rgb = frame.reshape(-1, 3).astype(np.float32)
        background = self.background(frame)
        d_bg = _distances(rgb, background)
        foreground = d_bg.min(1) > self.background_distance
        flat = flat_pixels(frame, self.flat_tolerance).reshape(-1)
        palette = self.palette(rgb[foreground], flat[foreground], self.min_pixels, background)
        if not len(palette):
            return []
        d = _distances(rgb, palette)
        core = foreground & (d.min(1) < self.core_distance)
        core_label = np.argmin(d, 1)
        reach = disc(self.reach)
        for k in range(len(palette)):  # a colour is a choice only near its own pure pixels
            seeds = (core & (core_label == k)).reshape(h, w).astype(np.uint8)
            d[~cv2.dilate(seeds, reach).reshape(-1).astype(bool), k] = np.inf
        d = np.concatenate([d_bg, d], 1)
        order = np.argsort(d, axis=1)[:, :2]
        d1, d2 = (np.take_along_axis(d, order[:, i:i + 1], 1)[:, 0] for i in (0, 1))
        with np.errstate(invalid="ignore"):
            clarity = np.where(np.isfinite(d2), (d2 - d1) / np.maximum(d2 + d1, 1e-6), 1.0).reshape(h, w)
        labels = order[:, 0].reshape(h, w)
        core = core.reshape(h, w)
        raw = []
        for k, colour in enumerate(palette):
            contrast = min(1.0, float(_distances(colour[None], background).min()) / 100.0)
            n, comps = cv2.connectedComponents((labels == len(background) + k).astype(np.uint8), connectivity=8)
            for i in range(1, n):
                mask = comps == i
                if (mask & core).sum() >= self.min_pixels:
                    raw.append(candidate(mask, float(clarity[mask].mean()) * contrast))
        return select(raw, self.iou, self.min_area, self.max_area, self.max_candidates)

    def background(self, frame: np.ndarray) -> np.ndarray:
        """``(K, 3)`` float32 RGB centres of the border's colours; a centre that holds less than
        ``background_share`` of the border is an object touching it, and is dropped."""
        b = self.border
        ring = np.concatenate([frame[:b].reshape(-1, 3), frame[-b:].reshape(-1, 3), frame[b:-b, :b].reshape(-1, 3),
                               frame[b:-b, -b:].reshape(-1, 3)]).astype(np.float32)
        centres = kmeans(ring, self.background_colours)
        share = np.bincount(_distances(ring, centres).argmin(1), minlength=len(centres)) / len(ring)
        return centres[share >= self.background_share] if (share >= self.background_share).any() else centres

    def palette(self, pixels: np.ndarray, flat: np.ndarray, min_count: float, background: np.ndarray) -> np.ndarray:
        """``(P, 3)`` mean colours of the frequent quantised foreground colours, most frequent first;
        close ones merge, and one that lies between two colours already taken (or one and the
        ``background``) is dropped as their mix along an edge when few of its pixels are ``flat``
        (a real colour such as brown between orange and a dark background has flat insides)."""
        if not len(pixels):
            return np.zeros((0, 3), np.float32)
        step = 256 / self.quant
        q = (pixels // step).astype(np.int64)
        key = (q[:, 0] * self.quant + q[:, 1]) * self.quant + q[:, 2]
        keys, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        sums = np.zeros((len(keys), 3))
        np.add.at(sums, inverse, pixels)
        flat_share = np.bincount(inverse, weights=flat, minlength=len(keys)) / counts
        entries: list[list] = []  # [colour sum, count]
        for j in np.argsort(-counts, kind="stable"):
            if counts[j] < min_count:
                break
            mean = sums[j] / counts[j]
            near = [e for e in entries if np.linalg.norm(e[0] / e[1] - mean) < self.merge_distance]
            if near:
                near[0][0], near[0][1] = near[0][0] + sums[j], near[0][1] + counts[j]
            elif flat_share[j] >= self.flat_share or not self._is_mix(mean, [e[0] / e[1] for e in entries] + list(background)):
                entries.append([sums[j].copy(), int(counts[j])])
        return np.array([s / c for s, c in entries], np.float32).reshape(-1, 3)

    def _is_mix(self, colour: np.ndarray, colours: list) -> bool:
        for i, a in enumerate(colours):
            for b in colours[i + 1:]:
                ab = b - a
                t = float(np.dot(colour - a, ab) / max(float(np.dot(ab, ab)), 1e-6))
                if 0.1 < t < 0.9 and np.linalg.norm(a + t * ab - colour) < self.mix_tolerance:
                    return True
        return False


def kmeans(points: np.ndarray, k: int, iters: int = 10) -> np.ndarray:
    """``(<= k, 3)`` k-means centres of ``points``, deterministic: farthest-point initialisation
    from the median, then Lloyd iterations (empty clusters dropped)."""
    centres = [np.median(points, 0)]
    for _ in range(k - 1):
        d = _distances(points, np.array(centres)).min(1)
        if d.max() < 1.0:
            break
        centres.append(points[int(np.argmax(d))])
    centres = np.array(centres, np.float32)
    for _ in range(iters):
        assign = np.argmin(((points[:, None] - centres[None]) ** 2).sum(-1), 1)
        centres = np.array([points[assign == j].mean(0) for j in range(len(centres)) if (assign == j).any()], np.float32)
    return centres


def flat_pixels(frame: np.ndarray, tolerance: float) -> np.ndarray:
    """``(H, W)`` bool: pixels whose 3x3 neighbourhood varies by less than ``tolerance`` in every channel."""
    box = np.ones((3, 3), np.uint8)
    spread = cv2.dilate(frame, box).astype(np.int16) - cv2.erode(frame, box).astype(np.int16)
    return spread.max(-1) < tolerance


def _distances(pixels: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """``(N, K)`` RGB distances of ``pixels (N, 3)`` to ``colours (K, 3)``."""
    return np.sqrt(((pixels[:, None, :] - colours[None]) ** 2).sum(-1))


__all__ = ["Candidate", "Proposer", "ColourProposer", "candidate", "mask_nms", "size_filter", "select", "id_map"]


def load_proposer(spec: str = "classic", device=None, dtype=None, trust_remote_code: bool = False, **kwargs):
    """A proposer for ``spec``: ``classic`` (colours, no weights), a saved colour-proposer folder, or
    a SAM 2 / SAM 3 checkpoint directory (automatic masks / concept prompts)."""
    import json
    from pathlib import Path

    if spec == "classic":
        return ColourProposer(**kwargs)
    path = Path(str(spec)).expanduser()
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        raise InputError("proposer", str(spec), "pass 'classic' or a folder with a config.json (a SAM 2 / SAM 3 checkpoint)") from None
    if config.get("model") == ColourProposer.MODEL_NAME:
        return ColourProposer.from_pretrained(path, **kwargs)
    from trackers import hf_proposals

    kind = config.get("model_type")
    if kind in ("sam2_video", "sam2"):
        return hf_proposals.Sam2AutoMaskProposer.from_pretrained(path, device=device, dtype=dtype, **kwargs)
    if kind in ("sam3_video", "sam3"):
        return hf_proposals.Sam3ConceptProposer.from_pretrained(path, device=device, dtype=dtype, **kwargs)
    raise InputError("proposer", str(spec), f"its config.json says model_type={kind!r}, not a SAM 2 / SAM 3 model")
