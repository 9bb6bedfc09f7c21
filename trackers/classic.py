"""The classic tracker: OpenCV mask propagation with a per-object appearance model, no weights.

Backend ``classic`` of ``trackers.load_tracker``; the session API is ``trackers.protocol``'s. Each
frame, for every object (all rules below are [PROPOSED]: this is a baseline of ours, not a paper's):

1. **Warp.** Dense optical flow (``cv2.DISOpticalFlow``) from the current frame back to the frame of
   the object's last mask, computed on grey crops around that mask (resized so their longer side
   lies in ``[flow_min_side, flow_side]``), pulls the last mask into the current frame (a soft mask
   ``w`` in [0, 1]); then a shift of at most ``align_shift`` pixels lays ``w`` on object-coloured
   pixels (small, fast or textureless objects the flow misses).
2. **Snap to colour.** A Lab colour histogram of the object and one of its surroundings give every
   pixel a posterior ``c = P(object | colour)``; inside a band around the warped mask a pixel joins
   the mask when ``(1 - colour_weight) * w + colour_weight * c > 0.5``, and only connected parts
   that overlap the warped mask are kept. Confident colours decide; where colour is ambiguous
   (real scenes) the flow does. A mask that would outgrow ``max_growth`` x the object's usual area
   (it leaks into something of the same colour) keeps only the warped mask's object-coloured
   pixels; parts under ``min_part`` of the largest part are dropped. A flat-coloured object's
   histograms (``flat_share`` of it in three bins) spread ``colour_spread`` to neighbouring bins:
   a decoded file jitters its one colour across bin edges.
3. **Presence.** ``score`` = the Bhattacharyya coefficient between the mask's colour histogram and
   the object's, rescaled so ``presence_floor`` maps to 0, times a size term that falls once the
   mask shrinks below ``min_area_ratio`` of the object's usual area. Below
   ``presence_threshold`` the object counts as lost: its mask is emptied (as SAM 2 empties the
   mask of an absent object) and the score says how much of it was left.
4. **Re-detection.** While lost, every connected region of object-like colour in the whole frame
   is a candidate, scored by colour match x shape match (a ``template_size`` binary template) x
   size match x a Gaussian prior around where the object should be now (its last position plus
   its velocity); the prior widens by ``redetect_growth`` per lost frame, so a long absence becomes
   a global search. The best candidate above ``redetect_threshold`` becomes the mask.

Prompts become an initial mask [PROPOSED]: a mask is used as given; a box runs ``cv2.grabCut``
(``grabcut_iters`` iterations) inside it, falling back to the box itself when the cut keeps less
than ``box_min_fill`` of it; points flood-fill the Lab colour region around each positive point
(``point_tolerance``, halved while the fill leaks over ``point_max_fraction`` of the frame, then a
disc of ``point_radius``), negative points cut their own fill out. A prompted frame re-initialises
the object's mask and appearance (the newest prompt wins).

Memory: the session's bounded output window, two working-resolution frames, and per object its last
mask, two histograms, a template and a few numbers. Nothing grows with the video.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from core.config_io import ConfigComponent
from core.errors import InputError
from core.masks import mask_to_box
from trackers.protocol import Prompt, SessionBase, TrackedFrame

MODEL_NAME = "classic-tracker"
FLOW_PRESETS = {"ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST, "fast": cv2.DISOPTICAL_FLOW_PRESET_FAST,
                "medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM}
EPS = 1e-6


@dataclass
class ClassicTracker(ConfigComponent):
    """OpenCV tracker (see the module docstring); every field is a tunable [PROPOSED] default.

    Working resolution and flow:
      work_max_side: frames with a longer side are downscaled to it for all the work (masks come
        back at the video's size).
      flow_side: the optical flow runs on the grey crop resized so that its longer side is at
        most this many pixels and at least ``flow_min_side`` (small objects are enlarged).
      flow_min_side: see ``flow_side``.
      flow_preset: ``cv2.DISOpticalFlow`` preset, ``ultrafast``, ``fast`` or ``medium``.
      flow_finest_scale: the finest pyramid level the flow is computed at (0 = full crop
        resolution; None keeps the preset's, 2 for ultrafast and fast).
      roi_margin: the crop around the last mask, as a fraction of its larger side, at least
        ``min_margin`` pixels.
      min_margin: see ``roi_margin`` (working-resolution pixels).
    Appearance:
      bins: Lab histogram bins per channel (L, a, b).
      colour_weight: how much colour counts against the warped mask in step 2 (0: flow only).
      band: how far (fraction of the object's equivalent radius, at least 2 px) the mask may grow
        past the warped mask in one frame.
      max_band: the band's largest radius in pixels (large objects grow by what moves, not by
        their size).
      max_growth: when the grown mask exceeds this multiple of the object's usual area (it leaks
        into a touching region of the same colour), growth is dropped for that frame and the mask
        is the warped mask's object-coloured pixels.
      align_shift: after the flow, the warped mask may move by up to this many pixels to lie on
        object-coloured pixels (0 turns it off); it catches small, fast or textureless objects
        the flow misses.
      align_penalty: the cost of that move at ``align_shift`` pixels, in units of mean evidence.
      ring: width of the surroundings whose colours form the background histogram, as a fraction
        of the equivalent radius (at least 2 px).
      global_bg_weight: share of the whole prompt frame (outside the object) in the background
        histogram; the rest is the ring, updated over time.
      colour_spread: for a flat-coloured object, the share of each histogram bin given to each
        neighbouring bin (L, a and b), so that its colour jittered across a bin edge by compression
        keeps its likelihood (0: off). A textured object's histogram already samples its variation;
        spreading it costs contrast against its surroundings (real DAVIS clips), so it is not spread.
      flat_share: an object is flat-coloured when its three largest bins hold at least this share
        of its prompt mask's pixels.
      hist_update: rate at which confident frames (score >= ``update_min``) update the histograms,
        template and usual area.
      update_min: see ``hist_update``.
    Presence:
      presence_floor: the Bhattacharyya coefficient that maps to presence 0 (1 maps to 1).
      min_area_ratio: mask area / usual area below which presence falls proportionally.
      presence_threshold: below it the object is lost and its mask emptied.
    Re-detection:
      redetect_threshold: the least candidate score that re-finds a lost object.
      redetect_sigma: the position prior's standard deviation, as a fraction of the image diagonal.
      redetect_growth: how much that fraction grows per lost frame (the search turns global).
      area_range: (low, high) candidate area / usual area kept as candidates.
      shape_weight: exponent of the template match in the candidate score (0 ignores shape).
      template_size: side of the binary shape template.
    Prompts:
      grabcut_iters: ``cv2.grabCut`` iterations for a box prompt.
      box_min_fill: below this fraction of the box the cut is replaced by the box.
      point_tolerance: Lab flood-fill tolerance per channel for point prompts.
      point_max_fraction: a fill larger than this fraction of the frame is retried tighter.
      point_radius: the disc fallback, as a fraction of the shorter frame side.
    """

    work_max_side: int = 512
    flow_side: int = 128
    flow_min_side: int = 64
    flow_preset: str = "fast"
    flow_finest_scale: int | None = 1
    roi_margin: float = 0.5
    min_margin: int = 8
    bins: tuple = (8, 32, 32)
    colour_weight: float = 0.6
    band: float = 1.0
    max_band: int = 8
    min_part: float = 0.2
    max_growth: float = 1.2
    align_shift: int = 6
    align_penalty: float = 0.3
    ring: float = 0.6
    global_bg_weight: float = 0.5
    hist_update: float = 0.05
    update_min: float = 0.7
    presence_floor: float = 0.3
    min_area_ratio: float = 0.3
    presence_threshold: float = 0.5
    redetect_threshold: float = 0.4
    redetect_sigma: float = 0.1
    redetect_growth: float = 0.02
    area_range: tuple = (0.3, 3.0)
    shape_weight: float = 1.0
    template_size: int = 16
    grabcut_iters: int = 3
    box_min_fill: float = 0.1
    point_tolerance: float = 20.0
    point_max_fraction: float = 0.5
    point_radius: float = 0.05
    colour_spread: float = 0.12
    flat_share: float = 0.7
    backend: str = field(default="builtin", init=False, repr=False)
    MODEL_NAME = MODEL_NAME

    def __post_init__(self):
        self.bins = tuple(int(b) for b in self.bins)
        self.area_range = tuple(float(a) for a in self.area_range)
        if self.flow_preset not in FLOW_PRESETS:
            raise InputError("flow_preset", self.flow_preset, f"choose one of {sorted(FLOW_PRESETS)}")
        if len(self.bins) != 3 or not all(1 <= b <= 256 for b in self.bins):
            raise InputError("bins", self.bins, "pass three bin counts (L, a, b), each 1..256")
        for name in ("work_max_side", "flow_side", "flow_min_side", "template_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 8:
                raise InputError(name, v, "pass an integer of at least 8 pixels")
        if not 0 <= self.colour_spread < 0.5:
            raise InputError("colour_spread", self.colour_spread, "pass a share in [0, 0.5)")
        for name in ("colour_weight", "flat_share", "presence_floor", "presence_threshold", "hist_update", "update_min", "box_min_fill"):
            v = getattr(self, name)
            if not 0 <= v <= 1 or (name == "presence_floor" and v == 1):
                raise InputError(name, v, "pass a number in [0, 1]" + (" (below 1)" if name == "presence_floor" else ""))

    def init_session(self, video: Any, *, window: int = 16) -> ClassicSession:
        """A tracking session over ``video`` (path, ``Video``, ``(T, H, W, 3)`` array or frame source)."""
        return ClassicSession(video, window, tracker=self)


# ---------------------------------------------------------------------------------- colour


def bin_index(lab: np.ndarray, bins: tuple) -> np.ndarray:
    """Each pixel's Lab histogram bin, ``int32`` of the image's shape."""
    lab = lab.astype(np.int32)
    nl, na, nb = bins
    return ((lab[..., 0] * nl) >> 8) * (na * nb) + ((lab[..., 1] * na) >> 8) * nb + ((lab[..., 2] * nb) >> 8)


def histogram(idx: np.ndarray, mask: np.ndarray, nbins: int) -> np.ndarray:
    """Normalised histogram of the bins under ``mask`` (zeros when the mask is empty)."""
    h = np.bincount(idx[mask], minlength=nbins).astype(np.float32)
    return h / max(h.sum(), 1.0)


def spread(hist: np.ndarray, bins: tuple, share: float) -> np.ndarray:
    """``hist`` with ``share`` of each bin's mass given to each neighbour along L, a and b (renormalised).

    A decoded file's colours jitter by a few levels (quantisation, 4:2:0 chroma), and a neutral colour
    sits on the a/b bin edge (128): without the spread, one level moves a pixel into a bin the object
    never had and its likelihood drops to zero."""
    if share <= 0:
        return hist
    h = hist.reshape(bins)
    for axis in range(3):
        if h.shape[axis] > 1:
            lo = np.take(h, [0] + list(range(h.shape[axis] - 1)), axis=axis)  # the neighbour below (edge repeated)
            hi = np.take(h, list(range(1, h.shape[axis])) + [h.shape[axis] - 1], axis=axis)
            h = (1 - 2 * share) * h + share * (lo + hi)
    h = h.reshape(-1)
    return h / max(float(h.sum()), EPS)


def bhattacharyya(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.sqrt(p * q).sum())


def shape_template(mask: np.ndarray, size: int) -> np.ndarray:
    """The mask's box resized to ``size x size``, as a boolean shape signature."""
    x0, y0, x1, y1 = mask_to_box(mask)
    crop = mask[y0:y1, x0:x1].astype(np.float32)
    return cv2.resize(crop, (size, size), interpolation=cv2.INTER_AREA) > 0.5


def template_match(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 0.0


def disc(radius: int) -> np.ndarray:
    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))


# ---------------------------------------------------------------------------------- session


class _View:
    """One frame at working resolution; Lab and bins are computed on demand."""

    def __init__(self, rgb: np.ndarray, bins: tuple):
        self.rgb, self.bins = rgb, bins
        self.grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        self._idx = None

    def idx(self, roi: tuple | None = None) -> np.ndarray:
        """Histogram bins of the whole frame or of ``roi = (x0, y0, x1, y1)``."""
        if roi is None:
            if self._idx is None:
                self._idx = bin_index(cv2.cvtColor(self.rgb, cv2.COLOR_RGB2LAB), self.bins)
            return self._idx
        x0, y0, x1, y1 = roi
        if self._idx is not None:
            return self._idx[y0:y1, x0:x1]
        return bin_index(cv2.cvtColor(np.ascontiguousarray(self.rgb[y0:y1, x0:x1]), cv2.COLOR_RGB2LAB), self.bins)


@dataclass
class _Object:
    """What the session knows about one object: its last mask and its appearance."""

    frame: int  # the frame ``mask`` belongs to (the last confident one when lost)
    mask: np.ndarray | None  # working resolution, None while lost
    fg: np.ndarray  # colour histogram of the object
    ring: np.ndarray  # colour histogram of its surroundings (updated)
    scene: np.ndarray  # colour histogram of the prompt frame outside the object (fixed)
    template: np.ndarray
    area: float
    centre: np.ndarray
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(2))
    lost: int = 0
    lut: np.ndarray | None = None
    spread: float = 0.0  # the share its histograms spread to neighbouring bins (``colour_spread`` when flat-coloured)


@dataclass
class ClassicSession(SessionBase):
    """A classic-tracker session (``ClassicTracker.init_session``)."""

    tracker: ClassicTracker | None = None
    _objects: dict = field(init=False, default_factory=dict, repr=False)
    _views: OrderedDict = field(init=False, default_factory=OrderedDict, repr=False)
    _prompt_masks: dict = field(init=False, default_factory=dict, repr=False)  # (frame, obj) -> working mask

    def __post_init__(self):
        super().__post_init__()
        self.tracker = self.tracker or ClassicTracker()
        p = self.tracker
        h, w = self.frame_size
        self.scale = min(1.0, p.work_max_side / max(h, w))
        self.work_size = (max(1, round(h * self.scale)), max(1, round(w * self.scale)))
        self.nbins = int(np.prod(p.bins))
        self.diag = float(np.hypot(*self.work_size))
        self._flow = cv2.DISOpticalFlow_create(FLOW_PRESETS[p.flow_preset])
        if p.flow_finest_scale is not None:
            self._flow.setFinestScale(int(p.flow_finest_scale))

    # ---- frames and resolution
    def _view(self, f: int) -> _View:
        if f in self._views:
            self._views.move_to_end(f)
            return self._views[f]
        rgb = self.frames([f])[0]
        if self.scale < 1:
            rgb = cv2.resize(rgb, self.work_size[::-1], interpolation=cv2.INTER_AREA)
        view = self._views[f] = _View(np.ascontiguousarray(rgb), self.tracker.bins)
        while len(self._views) > 2:
            self._views.popitem(last=False)
        return view

    def _to_work(self, mask: np.ndarray) -> np.ndarray:
        if self.scale == 1:
            return mask
        return cv2.resize(mask.astype(np.float32), self.work_size[::-1], interpolation=cv2.INTER_AREA) >= 0.5

    def _to_video(self, mask: np.ndarray | None) -> np.ndarray:
        if mask is None:
            return np.zeros(self.frame_size, bool)
        if self.scale == 1:
            return mask
        h, w = self.frame_size
        return cv2.resize(mask.astype(np.uint8) * 255, (w, h), interpolation=cv2.INTER_LINEAR) >= 128

    def _frame_output(self, f: int, masks: dict, scores: dict) -> TrackedFrame:
        ids = self.obj_ids
        stack = np.stack([self._to_video(masks.get(o)) for o in ids]) if ids else np.zeros((0, *self.frame_size), bool)
        return TrackedFrame(f, ids, stack, np.array([scores.get(o, 0.0) for o in ids], np.float32))

    # ---- prompts
    def _apply_prompt(self, prompt: Prompt) -> TrackedFrame:
        f, view = prompt.frame_idx, self._view(prompt.frame_idx)
        mask = self._prompt_mask(prompt, view)
        self._prompt_masks[(f, prompt.obj_id)] = mask
        self._init_object(prompt.obj_id, f, mask, view)
        masks, scores = {}, {}
        for obj, st in self._objects.items():  # other objects: what is known of them on this frame
            if obj == prompt.obj_id or st.frame == f:
                masks[obj], scores[obj] = st.mask, 1.0 if st.mask is not None else 0.0
            elif f in self.outputs and obj in self.outputs[f].obj_ids:
                i = self.outputs[f].obj_ids.index(obj)
                masks[obj], scores[obj] = self._to_work(self.outputs[f].masks[i]), float(self.outputs[f].scores[i])
        return self._frame_output(f, masks, scores)

    def _prompt_mask(self, prompt: Prompt, view: _View) -> np.ndarray:
        p, h, w = self.tracker, *self.work_size
        if prompt.mask is not None:
            mask = self._to_work(prompt.mask)
            if not mask.any():  # smaller than a working pixel: keep the pixel under its centre
                x, y = (_centre(prompt.mask) * self.scale).astype(int)
                mask[min(y, h - 1), min(x, w - 1)] = True
            return mask
        if prompt.box is not None:
            x0, y0, x1, y1 = (prompt.box * self.scale).round().astype(int)
            x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)
            cut = grabcut_box(view.rgb, (x0, y0, x1, y1), p.grabcut_iters)
            if cut is None or cut.sum() < p.box_min_fill * (x1 - x0) * (y1 - y0):
                cut = np.zeros((h, w), bool)
                cut[y0:y1, x0:x1] = True
            return cut
        return flood_points(view.rgb, prompt.points * self.scale, prompt.labels, p.point_tolerance, p.point_max_fraction,
                            max(1, round(p.point_radius * min(h, w))))

    # ---- appearance
    def _init_object(self, obj: int, f: int, mask: np.ndarray, view: _View) -> None:
        p, idx = self.tracker, view.idx()
        ring = _dilate(mask, self._ring_px(mask.sum())) & ~mask
        own = histogram(idx, mask, self.nbins)
        share = p.colour_spread if np.sort(own)[-3:].sum() >= p.flat_share else 0.0
        st = _Object(f, mask, spread(own, p.bins, share), self._hist(idx, ring, share),
                     self._hist(idx, ~mask, share), shape_template(mask, p.template_size), float(mask.sum()),
                     _centre(mask), spread=share)
        self._objects[obj] = st
        self._refresh_lut(st)

    def _hist(self, idx: np.ndarray, mask: np.ndarray, share: float) -> np.ndarray:
        return spread(histogram(idx, mask, self.nbins), self.tracker.bins, share)

    def _refresh_lut(self, st: _Object) -> None:
        g = self.tracker.global_bg_weight
        bg = g * st.scene + (1 - g) * st.ring
        st.lut = ((st.fg + EPS) / (st.fg + bg + 2 * EPS)).astype(np.float32)

    def _ring_px(self, area: float) -> int:
        return max(2, round(self.tracker.ring * np.sqrt(area / np.pi)))

    def _presence(self, st: _Object, idx: np.ndarray, mask: np.ndarray) -> float:
        """Appearance match of ``mask`` (bins ``idx`` of the same region) with the object, in [0, 1]."""
        area = mask.sum()
        if area == 0:
            return 0.0
        p = self.tracker
        match = (bhattacharyya(self._hist(idx, mask, st.spread), st.fg) - p.presence_floor) / (1 - p.presence_floor)
        size = min(1.0, area / (p.min_area_ratio * st.area))
        return float(np.clip(match, 0, 1) * size)

    def _accept(self, st: _Object, f: int, mask: np.ndarray, roi: tuple, idx: np.ndarray, score: float) -> None:
        """``mask`` (inside ``roi``, bins ``idx``) is the object on frame ``f``: update its state."""
        p = self.tracker
        x0, y0, x1, y1 = roi
        full = np.zeros(self.work_size, bool)
        full[y0:y1, x0:x1] = mask
        centre = _centre(full)
        gap = max(1, abs(f - st.frame))
        st.velocity = 0.5 * st.velocity + 0.5 * (centre - st.centre) / gap
        st.centre, st.mask, st.frame, st.lost = centre, full, f, 0
        if score >= p.update_min:
            r, area = p.hist_update, float(mask.sum())
            ring = _dilate(mask, self._ring_px(area)) & ~mask
            st.fg = (1 - r) * st.fg + r * self._hist(idx, mask, st.spread)
            if ring.any():
                st.ring = (1 - r) * st.ring + r * self._hist(idx, ring, st.spread)
            st.area = (1 - r) * st.area + r * area
            self._refresh_lut(st)

    # ---- tracking
    def _track(self, frame_idx: int, reverse: bool) -> TrackedFrame:
        f, view = frame_idx, self._view(frame_idx)
        prev = f + 1 if reverse else f - 1
        masks, scores = {}, {}
        for obj in self.obj_ids:
            if (f, obj) in self._prompt_masks:  # a conditioning frame: the prompt is the answer
                self._init_object(obj, f, self._prompt_masks[(f, obj)], view)
                masks[obj], scores[obj] = self._objects[obj].mask, 1.0
                continue
            st = self._objects[obj]
            if st.frame != prev and prev in self.outputs and obj in self.outputs[prev].obj_ids:
                i = self.outputs[prev].obj_ids.index(obj)  # continue from the kept output of the previous frame
                m = self._to_work(self.outputs[prev].masks[i])
                st.mask, st.frame = (m, prev) if m.any() else (None, st.frame)
            masks[obj], scores[obj] = self._step(st, f, view)
        return self._frame_output(f, masks, scores)

    def _step(self, st: _Object, f: int, view: _View) -> tuple[np.ndarray | None, float]:
        p, best = self.tracker, 0.0
        if st.mask is not None and st.frame == f:
            return st.mask, 1.0
        if st.mask is not None:
            roi, mask, idx = self._warp(st, self._view(st.frame), view)
            score = self._presence(st, idx, mask)
            if score >= p.presence_threshold:
                self._accept(st, f, mask, roi, idx, score)
                return st.mask, score
            best = score
        found = self._redetect(st, f, view)
        if found is not None:
            mask, score = found
            self._accept(st, f, mask, (0, 0, self.work_size[1], self.work_size[0]), view.idx(), score)
            return st.mask, score
        if st.mask is not None:  # just lost: remember where it was heading
            st.mask = None
        st.lost += 1
        return None, best

    def _warp(self, st: _Object, ref: _View, cur: _View) -> tuple[tuple, np.ndarray, np.ndarray]:
        """Steps 1-2: the last mask carried into ``cur`` and snapped to colour, inside a crop."""
        p, (h, w) = self.tracker, self.work_size
        bx0, by0, bx1, by1 = mask_to_box(st.mask)
        m = max(p.min_margin, round(p.roi_margin * max(bx1 - bx0, by1 - by0)))
        roi = x0, y0, x1, y1 = max(0, bx0 - m), max(0, by0 - m), min(w, bx1 + m), min(h, by1 + m)
        rw, rh = x1 - x0, y1 - y0
        k = float(np.clip(max(rw, rh), p.flow_min_side, p.flow_side)) / max(rw, rh)  # longer side in [min, max]
        s = (max(8, round(rw * k)), max(8, round(rh * k)))
        small_prev = cv2.resize(ref.grey[y0:y1, x0:x1], s, interpolation=cv2.INTER_AREA)
        small_cur = cv2.resize(cur.grey[y0:y1, x0:x1], s, interpolation=cv2.INTER_AREA)
        flow = self._flow.calc(small_cur, small_prev, None)  # cur(x) ~ prev(x + flow(x))
        small_mask = cv2.resize(st.mask[y0:y1, x0:x1].astype(np.float32), s, interpolation=cv2.INTER_AREA)
        flow[..., 0] += np.arange(s[0], dtype=np.float32)
        flow[..., 1] += np.arange(s[1], dtype=np.float32)[:, None]
        warped = cv2.remap(small_mask, flow[..., 0], flow[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
        warped = cv2.resize(warped, (rw, rh), interpolation=cv2.INTER_LINEAR)
        idx = cur.idx(roi)
        colour = st.lut[idx]
        if p.align_shift > 0:
            warped = align(warped, colour, min(p.align_shift, m), p.align_penalty)
        combined = (1 - p.colour_weight) * warped + p.colour_weight * colour
        core = warped > 0.5
        radius = int(np.clip(round(p.band * np.sqrt(st.area / np.pi)), 2, p.max_band))
        likely = combined > 0.5
        mask = _touching(likely & _dilate(warped > 0.25, radius), core)
        if mask.sum() > p.max_growth * st.area:  # leaking into something of the same colour: trust the flow
            mask = likely & core
        if p.min_part > 0:
            mask = _main_parts(mask, p.min_part)
        return roi, mask, idx

    def _redetect(self, st: _Object, f: int, view: _View) -> tuple[np.ndarray, float] | None:
        """Step 4: the best object-coloured region of the whole frame, or None."""
        p = self.tracker
        idx = view.idx()
        likely = (st.lut[idx] > 0.5).astype(np.uint8)
        n, labels, stats, cents = cv2.connectedComponentsWithStats(likely, connectivity=8)
        if n <= 1:
            return None
        areas = stats[1:, cv2.CC_STAT_AREA].astype(np.float64)
        lo, hi = p.area_range
        keep = np.nonzero((areas >= max(2.0, lo * st.area)) & (areas <= hi * st.area))[0] + 1
        if not len(keep):
            return None
        gap = max(1, abs(f - st.frame))
        expected = st.centre + st.velocity * gap
        sigma = self.diag * (p.redetect_sigma + p.redetect_growth * st.lost)
        best, best_score = None, p.redetect_threshold
        for i in keep:
            x, y, bw, bh = stats[i, :4]
            comp = labels[y:y + bh, x:x + bw] == i
            d2 = float(np.sum((cents[i] - expected) ** 2))
            prior = np.exp(-d2 / (2 * sigma**2))
            if prior * min(areas[i - 1], st.area) / max(areas[i - 1], st.area) <= best_score:
                continue  # cannot win: the colour and shape terms are at most 1
            match = self._presence(st, idx[y:y + bh, x:x + bw], comp)
            shape = template_match(shape_template(comp, p.template_size), st.template) ** p.shape_weight
            size = min(areas[i - 1], st.area) / max(areas[i - 1], st.area)
            score = match * shape * size * prior
            if score > best_score:
                best, best_score = (i, match), score
        if best is None or best[1] < p.presence_threshold:
            return None
        return labels == best[0], best[1]

    def _forget(self, obj_id: int | None) -> None:
        if obj_id is None:
            self._objects.clear()
            self._prompt_masks.clear()
            return
        self._objects.pop(obj_id, None)
        for key in [k for k in self._prompt_masks if k[1] == obj_id]:
            del self._prompt_masks[key]


# ---------------------------------------------------------------------------------- helpers


def _dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    return cv2.dilate(mask.astype(np.uint8), disc(radius)).astype(bool)


def _centre(mask: np.ndarray) -> np.ndarray:
    ys, xs = np.nonzero(mask)
    return np.array([xs.mean(), ys.mean()]) if len(xs) else np.zeros(2)


def _main_parts(mask: np.ndarray, fraction: float) -> np.ndarray:
    """``mask`` without the connected parts smaller than ``fraction`` of its largest part."""
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    if n <= 2:
        return mask
    areas = stats[1:, cv2.CC_STAT_AREA]
    return np.isin(labels, np.nonzero(areas >= fraction * areas.max())[0] + 1)


def _touching(mask: np.ndarray, core: np.ndarray) -> np.ndarray:
    """The connected parts of ``mask`` that overlap ``core``."""
    n, labels = cv2.connectedComponents(mask.astype(np.uint8), connectivity=8)
    if n <= 2:
        return mask if (mask & core).any() else np.zeros_like(mask)
    hit = np.unique(labels[core & mask])
    return np.isin(labels, hit[hit > 0])


def align(soft: np.ndarray, colour: np.ndarray, shift: int, penalty: float, pad: int = 2) -> np.ndarray:
    """``soft`` moved by the translation (at most ``shift`` px) that best lays it on object-coloured
    pixels and its surroundings (``pad`` px) on other colours: the correlation of ``2 * soft - 1``
    with ``2 * colour - 1`` per pixel, minus ``penalty * (d / shift)^2`` for a move d."""
    ys, xs = np.nonzero(soft > 0.05)
    if not len(xs):
        return soft
    h, w = soft.shape
    y0, y1, x0, x1 = max(0, ys.min() - pad), min(h, ys.max() + 1 + pad), max(0, xs.min() - pad), min(w, xs.max() + 1 + pad)
    tmpl = np.ascontiguousarray(2 * soft[y0:y1, x0:x1] - 1)
    evidence = cv2.copyMakeBorder(2 * colour - 1, shift, shift, shift, shift, cv2.BORDER_CONSTANT, value=0.0)  # outside: no evidence
    search = evidence[y0:y1 + 2 * shift, x0:x1 + 2 * shift]
    r = cv2.matchTemplate(search, tmpl, cv2.TM_CCORR) / tmpl.size
    d = np.arange(-shift, shift + 1, dtype=np.float32)
    r -= penalty * (d[:, None] ** 2 + d[None] ** 2) / shift**2
    dy, dx = np.unravel_index(int(np.argmax(r)), r.shape)
    dy, dx = dy - shift, dx - shift
    if dx == 0 and dy == 0:
        return soft
    move = np.float32([[1, 0, dx], [0, 1, dy]])
    return cv2.warpAffine(soft, move, (w, h), flags=cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT)


def grabcut_box(rgb: np.ndarray, box: tuple, iters: int) -> np.ndarray | None:
    """``cv2.grabCut`` initialised with ``box`` (xyxy) on a crop around it; None when it cannot run."""
    h, w = rgb.shape[:2]
    x0, y0, x1, y1 = box
    m = max(4, (x1 - x0 + y1 - y0) // 4)
    cx0, cy0, cx1, cy1 = max(0, x0 - m), max(0, y0 - m), min(w, x1 + m), min(h, y1 + m)
    crop = np.ascontiguousarray(rgb[cy0:cy1, cx0:cx1, ::-1])
    gc = np.zeros(crop.shape[:2], np.uint8)
    try:
        cv2.grabCut(crop, gc, (x0 - cx0, y0 - cy0, x1 - x0, y1 - y0), np.zeros((1, 65)), np.zeros((1, 65)), iters,
                    cv2.GC_INIT_WITH_RECT)
    except cv2.error:  # e.g. a box covering the whole frame leaves no background sample
        return None
    out = np.zeros((h, w), bool)
    out[cy0:cy1, cx0:cx1] = (gc == cv2.GC_FGD) | (gc == cv2.GC_PR_FGD)
    return out


def flood_points(rgb: np.ndarray, points: np.ndarray, labels: np.ndarray, tolerance: float, max_fraction: float,
                 radius: int) -> np.ndarray:
    """The Lab colour region around each positive point minus those around negative points."""
    h, w = rgb.shape[:2]
    lab = cv2.cvtColor(rgb, cv2.COLOR_RGB2LAB)
    pts = [(min(w - 1, int(x)), min(h - 1, int(y))) for x, y in points]
    positive = [pt for pt, lab_ in zip(pts, labels) if lab_ == 1]
    negative = [pt for pt, lab_ in zip(pts, labels) if lab_ == 0]
    tol = tolerance
    for _ in range(4):
        mask = _fill(lab, positive, tol)
        if mask.sum() <= max_fraction * h * w:
            break
        tol /= 2
    else:
        mask = np.zeros((h, w), bool)
        for x, y in positive:
            mask |= cv2.circle(np.zeros((h, w), np.uint8), (x, y), radius, 1, -1).astype(bool)
    if negative:
        mask &= ~_fill(lab, negative, tol)
    if not mask.any():  # every positive point also lay in a negative region
        for x, y in positive:
            mask[y, x] = True
    return mask


def _fill(lab: np.ndarray, points: list, tol: float) -> np.ndarray:
    h, w = lab.shape[:2]
    out = np.zeros((h, w), bool)
    for x, y in points:
        ff = np.zeros((h + 2, w + 2), np.uint8)
        cv2.floodFill(lab, ff, (x, y), 0, (tol,) * 3, (tol,) * 3, 4 | cv2.FLOODFILL_FIXED_RANGE | cv2.FLOODFILL_MASK_ONLY | (1 << 8))
        out |= ff[1:-1, 1:-1].astype(bool)
    return out


__all__ = ["ClassicTracker", "ClassicSession", "MODEL_NAME", "grabcut_box", "flood_points", "bin_index", "histogram",
           "bhattacharyya"]
