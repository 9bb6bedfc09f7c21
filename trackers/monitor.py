"""CLEAR's Heterogeneous Event Monitor and fast/slow mode controller (specs/clear.md B.6) [PROPOSED].

The paper names the monitor and its role (watch heterogeneous reliability signals of the fast
tracker, escalate to slow re-grounding only when an event fires) but publishes no signal, threshold
or aggregation rule; every one below is the spec's proposal and a ``MonitorConfig`` field.

Per frame the monitor reads the tracked mask, the tracker's presence score (and optional confidence),
an appearance embedding of the masked object and the frame itself, and emits events:

==============  ====================================================  ======
event           fires when                                             weight
==============  ====================================================  ======
DISAPPEAR       presence < presence_threshold for disappear_frames     0
REAPPEAR        presence is back after a DISAPPEAR                     1
SCALE_JUMP      area ratio to the previous mask > 2 or < 0.5           0.25
SHAPE_DRIFT     IoU with the previous mask < 0.3 while present         0.5
LOW_CONF        tracker confidence < 0.5                               0.25
ID_SWITCH       closer to a distractor prototype than to the target    1
APPEAR_DRIFT    cosine to the target prototypes < 0.5                  0.25
JUMP            centroid moves > 0.15 of the image diagonal            0.5
MOTION_BREAK    centroid off its constant-velocity prediction by more  0.5
                than 0.35 object sizes (a hop to a look-alike: the
                cue colour cannot give)
SIZE_DRIFT      area off the reference (median of recent frames) by a  0.5
                factor > 1.6 (a slow slide onto, or merge with, another)
TRACK_MERGE     the mask starts to coincide (IoU > 0.5) with another   0.5
                candidate's track: two tracks on one object
OUTLINE_DRIFT   IoU of the mask with the confirmed mask, centroids     0.5
                aligned, < 0.4: not the outline the target had (a
                mask spreading over a touching look-alike, or
                sliding onto one, changes it though colour holds)
SCENE_CUT       mean abs difference of 64x64 grey thumbnails > 0.35    hard
HEARTBEAT       every heartbeat_every frames: a cheap planner check    check
HEARTBEAT_FAIL  the caller's check said the target no longer matches   1
==============  ====================================================  ======

``ModeController`` turns events into modes: each kind of event fired in the last ``risk_window``
frames (either direction of tracking) adds its ``weights`` entry once to a risk (different signals
agreeing, not one signal lingering: a stale size or outline reference fires every frame, and summed
per frame one such signal alone made 61 of 203 slow calls of CLEAR on 200 val clips); slow mode
starts when the risk reaches ``risk_threshold``, but not within ``cooldown`` frames of the last slow call, unless the
frame's own events weigh ``escalate_risk`` (three signals agreeing on one frame: a hop onto a
look-alike, not the lingering size drift that used the last call) or an event is hard (a scene
cut): those start it at once.
The weights make single weak signals (a bounce reads as a motion break) wait for a second one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from core.errors import InputError
from core.frames import resize_frame

EVENTS = ("DISAPPEAR", "REAPPEAR", "SCALE_JUMP", "SHAPE_DRIFT", "LOW_CONF", "ID_SWITCH", "APPEAR_DRIFT", "JUMP", "MOTION_BREAK",
          "SIZE_DRIFT", "TRACK_MERGE", "OUTLINE_DRIFT", "SCENE_CUT", "HEARTBEAT", "HEARTBEAT_FAIL")
HARD_EVENTS = frozenset({"SCENE_CUT"})  # escalate at once, cool-down or not
# risk each event adds [PROPOSED; chosen on 120 val-split vrs clips, benchmarks/clear.py --split val;
# OUTLINE_DRIFT, escalate_risk and a soft ID_SWITCH on 600]: one event of weight 1 escalates alone,
# weaker ones must agree within risk_window frames. A colour-histogram ID_SWITCH is not hard: replaying
# the events recorded on 200 of those clips, none of its 45 escalations as a hard event was near a switch.
DEFAULT_WEIGHTS = {"REAPPEAR": 1.0, "HEARTBEAT_FAIL": 1.0, "ID_SWITCH": 1.0, "MOTION_BREAK": 0.5, "TRACK_MERGE": 0.5, "SIZE_DRIFT": 0.5, "SHAPE_DRIFT": 0.5, "JUMP": 0.5, "OUTLINE_DRIFT": 0.5,
                   "SCALE_JUMP": 0.25, "LOW_CONF": 0.25, "APPEAR_DRIFT": 0.25, "DISAPPEAR": 0.0}
CHECKS = frozenset({"HEARTBEAT"})  # requests for a cheap planner check: neither hard nor a risk


@dataclass
class MonitorConfig:
    """Thresholds of the monitor and the controller, all [PROPOSED] (spec B.6)."""

    presence_threshold: float = 0.5
    disappear_frames: int = 3
    area_ratio_high: float = 2.0
    area_ratio_low: float = 0.5
    min_area_fraction: float = 0.001  # SCALE_JUMP only when both masks cover more than this
    iou_drift: float = 0.3
    low_confidence: float = 0.5
    switch_margin: float = 0.0  # max cos to the target minus max cos to distractors below this: ID_SWITCH
    appearance_floor: float = 0.5
    jump_fraction: float = 0.15
    motion_break: float = 0.35  # prediction error in object sizes (sqrt of the reference area)
    motion_history: int = 4  # present frames the velocity is fitted on
    size_drift: float = 1.6
    merge_iou: float = 0.5
    outline_drift: float = 0.4  # centroid-aligned IoU with the confirmed mask below this: OUTLINE_DRIFT
    scene_cut: float = 0.35
    heartbeat_every: int = 30
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    risk_window: int = 5
    risk_threshold: float = 1.0
    cooldown: int = 20
    escalate_risk: float = 1.5  # one frame's own risk that escalates through the cool-down
    tighten: float = 1.5  # threshold factor after an ambiguous anchor (spec B.3)

    def __post_init__(self):
        for name in ("disappear_frames", "heartbeat_every", "risk_window", "cooldown", "motion_history"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name, value, "use a positive integer number of frames")
        if not 0 < self.presence_threshold < 1:
            raise InputError("presence_threshold", self.presence_threshold, "use a probability in (0, 1)")
        if not self.escalate_risk > 0:
            raise InputError("escalate_risk", self.escalate_risk, "use a positive risk (1.5: three weak signals on one frame)")
        if self.tighten < 1:
            raise InputError("tighten", self.tighten, "use a factor >= 1")
        unknown = sorted(set(self.weights) - set(EVENTS))
        if unknown:
            raise InputError("weights", unknown, f"weigh only the monitor's events: {', '.join(EVENTS)}")

    def tightened(self) -> MonitorConfig:
        """Stricter thresholds (the ambiguous-anchor rule): drift and change tests fire sooner."""
        t = self.tighten
        return MonitorConfig(**{**asdict(self), "iou_drift": min(0.95, self.iou_drift * t), "area_ratio_high": 1 + (self.area_ratio_high - 1) / t,
                                "area_ratio_low": 1 - (1 - self.area_ratio_low) / t, "jump_fraction": self.jump_fraction / t,
                                "motion_break": self.motion_break / t, "size_drift": 1 + (self.size_drift - 1) / t,
                                "appearance_floor": min(0.95, self.appearance_floor * t), "heartbeat_every": max(1, int(self.heartbeat_every / t))})


@dataclass(frozen=True)
class MonitorEvent:
    """One fired event: where, what, the signal's value against its threshold, and whether it is hard."""

    frame: int
    kind: str
    value: float
    threshold: float

    @property
    def hard(self) -> bool:
        return self.kind in HARD_EVENTS

    @property
    def check(self) -> bool:
        return self.kind in CHECKS

    def to_dict(self) -> dict:
        return {"frame": self.frame, "kind": self.kind, "value": round(float(self.value), 4),
                "threshold": round(float(self.threshold), 4), "hard": self.hard}


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def centroid(mask: np.ndarray) -> np.ndarray | None:
    ys, xs = np.nonzero(mask)
    return np.array([xs.mean(), ys.mean()]) if len(xs) else None


def thumbnail(frame: np.ndarray) -> np.ndarray:
    """A 64x64 grey thumbnail in [0, 1] (the scene-cut signal)."""
    grey = np.asarray(frame, np.float32).mean(-1) if np.ndim(frame) == 3 else np.asarray(frame, np.float32)
    return resize_frame(grey, (64, 64), "area") / 255.0


@dataclass
class EventMonitor:
    """Watch one tracked object frame by frame; ``update`` returns the events of that frame.

    ``set_prototypes(positive, negative)`` gives the appearance signals their reference (the
    Contrastive Concept Dictionary's visual prototypes); without them the appearance events stay off.
    """

    config: MonitorConfig = field(default_factory=MonitorConfig)
    _prev_mask: np.ndarray | None = field(default=None, init=False, repr=False)
    _outline: np.ndarray | None = field(default=None, init=False, repr=False)  # the confirmed mask's pixels about its centroid
    _prev_thumb: np.ndarray | None = field(default=None, init=False, repr=False)
    _absent_run: int = field(default=0, init=False)
    _gone: bool = field(default=False, init=False)
    _since_heartbeat: int = field(default=0, init=False)
    _pos: np.ndarray | None = field(default=None, init=False, repr=False)
    _neg: np.ndarray | None = field(default=None, init=False, repr=False)
    _path: deque = field(default_factory=deque, init=False, repr=False)  # (frame, centroid) of recent present frames
    _areas: deque = field(default_factory=lambda: deque(maxlen=16), init=False, repr=False)
    _merged: frozenset = field(default=frozenset(), init=False, repr=False)
    _before_break: list = field(default_factory=list, init=False, repr=False)  # the path up to the last break

    def set_prototypes(self, positive: Sequence[np.ndarray], negative: Sequence[np.ndarray] = ()) -> None:
        self._pos = _unit(np.asarray(positive, np.float32)) if len(positive) else None
        self._neg = _unit(np.asarray(negative, np.float32)) if len(negative) else None

    def confirm(self, mask: np.ndarray) -> None:
        """After a re-anchor: this mask is the new reference (shape, size; the motion path restarts),
        disappearance is cleared."""
        self._prev_mask, self._absent_run, self._gone = np.asarray(mask, bool), 0, False
        self._outline = _about_centroid(self._prev_mask) if self._prev_mask.any() else None
        self._path.clear()
        self._before_break = []
        self._areas.clear()
        if self._prev_mask.any():
            self._areas.append(int(self._prev_mask.sum()))

    def reference_area(self) -> float | None:
        """The median area of the recent confirmed (present) frames."""
        return float(np.median(self._areas)) if self._areas else None

    def predicted_centroid(self, frame_idx: int) -> np.ndarray | None:
        """Where the object's centroid should be on ``frame_idx`` at constant velocity (either direction
        in time); just after a motion break, from the path before it (the hop is what is in doubt)."""
        path = self._path if len(self._path) >= 2 or not self._before_break else self._before_break
        if len(path) < 2:
            return path[-1][1] if path else None
        (f0, c0), (f1, c1) = path[0], path[-1]
        return c1 + (c1 - c0) / (f1 - f0) * (frame_idx - f1)

    def update(self, frame_idx: int, mask: np.ndarray, presence: float, frame: np.ndarray | None = None,
               embedding: np.ndarray | None = None, confidence: float | None = None,
               others: dict[int, np.ndarray] | None = None) -> list[MonitorEvent]:
        """``others``: other candidates' masks on this frame by id (the TRACK_MERGE signal)."""
        c = self.config
        mask = np.asarray(mask, bool)
        events: list[MonitorEvent] = []

        def fire(kind: str, value: float, threshold: float) -> None:
            events.append(MonitorEvent(int(frame_idx), kind, float(value), float(threshold)))

        present = presence >= c.presence_threshold and mask.any()
        if not present:
            self._absent_run += 1
            if self._absent_run == c.disappear_frames:
                self._gone = True
                fire("DISAPPEAR", presence, c.presence_threshold)
        else:
            if self._gone:
                fire("REAPPEAR", presence, c.presence_threshold)
            self._absent_run, self._gone = 0, False
        prev = self._prev_mask
        if present and prev is not None and prev.any():
            size = mask.size
            a_now, a_prev = mask.sum(), prev.sum()
            ratio = a_now / (a_prev + 1)
            if min(a_now, a_prev) > c.min_area_fraction * size and (ratio > c.area_ratio_high or ratio < c.area_ratio_low):
                fire("SCALE_JUMP", ratio, c.area_ratio_high if ratio > 1 else c.area_ratio_low)
            iou = mask_iou(mask, prev)
            if iou < c.iou_drift:
                fire("SHAPE_DRIFT", iou, c.iou_drift)
            p0, p1 = centroid(prev), centroid(mask)
            jump = float(np.linalg.norm(p1 - p0) / np.hypot(*mask.shape))
            if jump > c.jump_fraction:
                fire("JUMP", jump, c.jump_fraction)
        if present:
            self._motion_and_size(frame_idx, mask, fire)
        if present and self._outline is not None:
            overlap = outline_iou(self._outline, _about_centroid(mask))
            if overlap < c.outline_drift:
                fire("OUTLINE_DRIFT", overlap, c.outline_drift)
        if present and others:
            merged = frozenset(k for k, m in others.items() if mask_iou(mask, m) > c.merge_iou)
            for k in sorted(merged - self._merged):  # the onset only: a lasting overlap is one event
                fire("TRACK_MERGE", mask_iou(mask, others[k]), c.merge_iou)
            self._merged = merged
        if present and confidence is not None and confidence < c.low_confidence:
            fire("LOW_CONF", confidence, c.low_confidence)
        if present and embedding is not None and self._pos is not None:
            e = _unit(np.asarray(embedding, np.float32)[None])[0]
            to_target = float((self._pos @ e).max())
            if self._neg is not None and to_target - float((self._neg @ e).max()) < c.switch_margin:
                fire("ID_SWITCH", to_target - float((self._neg @ e).max()), c.switch_margin)
            elif to_target < c.appearance_floor:
                fire("APPEAR_DRIFT", to_target, c.appearance_floor)
        if frame is not None:
            thumb = thumbnail(frame)
            if self._prev_thumb is not None:
                diff = float(np.abs(thumb - self._prev_thumb).mean())
                if diff > c.scene_cut:
                    fire("SCENE_CUT", diff, c.scene_cut)
            self._prev_thumb = thumb
        self._since_heartbeat += 1
        if self._since_heartbeat >= c.heartbeat_every:
            self._since_heartbeat = 0
            fire("HEARTBEAT", c.heartbeat_every, c.heartbeat_every)
        if present:
            self._prev_mask = mask
        return events

    def _motion_and_size(self, frame_idx: int, mask: np.ndarray, fire) -> None:
        c = self.config
        now, area, ref = centroid(mask), float(mask.sum()), self.reference_area()
        predicted = self.predicted_centroid(frame_idx)
        if predicted is not None and ref and len(self._path) >= 2:
            error = float(np.linalg.norm(now - predicted) / np.sqrt(ref))
            if error > c.motion_break:
                fire("MOTION_BREAK", error, c.motion_break)
                self._before_break = list(self._path)
                self._path.clear()  # the break starts a new path (no repeated firing on the same hop)
        if ref and max(area / ref, ref / max(area, 1.0)) > c.size_drift:
            fire("SIZE_DRIFT", area / ref, c.size_drift)
        else:
            self._areas.append(area)
        self._path.append((int(frame_idx), now))
        while len(self._path) > c.motion_history:
            self._path.popleft()


_SPAN = 1 << 15  # offsets are encoded as (dy + span) * 2 span + (dx + span): any frame up to 32k pixels a side


def _about_centroid(mask: np.ndarray) -> np.ndarray:
    """A mask's pixels as integer offsets from its rounded centroid, encoded one int each."""
    ys, xs = np.nonzero(mask)
    dy, dx = ys - int(round(ys.mean())), xs - int(round(xs.mean()))
    return np.unique((dy + _SPAN) * (2 * _SPAN) + (dx + _SPAN))


def outline_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two shapes given as ``_about_centroid`` codes: how alike their outlines are wherever they are."""
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter) if len(a) + len(b) else 1.0


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-8)


@dataclass
class ModeController:
    """Fast/slow decisions from the monitor's events, with soft-event risk and a cool-down."""

    config: MonitorConfig = field(default_factory=MonitorConfig)
    _risk: deque = field(default_factory=deque, init=False, repr=False)
    _last_slow: int | None = field(default=None, init=False)
    slow_calls: int = field(default=0, init=False)

    def decide(self, frame_idx: int, events: Sequence[MonitorEvent]) -> str:
        """``"slow"`` when this frame needs re-grounding, else ``"fast"``."""
        c = self.config
        kinds = {e.kind for e in events if not e.check}
        now = sum(c.weights.get(k, 0.0) for k in kinds)
        self._risk.append((frame_idx, kinds))
        while self._risk and abs(frame_idx - self._risk[0][0]) >= c.risk_window:
            self._risk.popleft()
        hard = any(e.hard for e in events)
        risky = sum(c.weights.get(k, 0.0) for k in set().union(*(k for _, k in self._risk))) >= c.risk_threshold
        cooling = self._last_slow is not None and abs(frame_idx - self._last_slow) < c.cooldown
        if hard or (risky and (not cooling or now >= c.escalate_risk)):
            self._last_slow = frame_idx
            self.slow_calls += 1
            self._risk.clear()
            return "slow"
        return "fast"


__all__ = ["EVENTS", "HARD_EVENTS", "DEFAULT_WEIGHTS", "CHECKS", "MonitorConfig", "MonitorEvent", "EventMonitor", "ModeController", "mask_iou", "outline_iou", "centroid"]
