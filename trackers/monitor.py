"""CLEAR's Heterogeneous Event Monitor and fast/slow mode controller (specs/clear.md B.6) [PROPOSED].

The paper names the monitor and its role (watch heterogeneous reliability signals of the fast
tracker, escalate to slow re-grounding only when an event fires) but publishes no signal, threshold
or aggregation rule; every one below is the spec's proposal and a ``MonitorConfig`` field.

Per frame the monitor reads the tracked mask, the tracker's presence score (and optional confidence),
an appearance embedding of the masked object and the frame itself, and emits events:

==============  ==================================================  ========
event           fires when                                            kind
==============  ==================================================  ========
DISAPPEAR       presence < presence_threshold for disappear_frames   soft
REAPPEAR        presence is back after a DISAPPEAR                    hard
SCALE_JUMP      area ratio to the previous mask > 2 or < 0.5          soft
SHAPE_DRIFT     IoU with the previous mask < 0.3 while present        soft
LOW_CONF        tracker confidence < 0.5                               soft
ID_SWITCH       closer to a distractor prototype than to the target   hard
APPEAR_DRIFT    cosine to the target prototypes < 0.5                 soft
JUMP            centroid moves > 0.15 of the image diagonal            soft
SCENE_CUT       mean abs difference of 64x64 grey thumbnails > 0.35    hard
HEARTBEAT       every heartbeat_every frames: run a cheap planner check  check
HEARTBEAT_FAIL  the caller's check said the target no longer matches  hard
==============  ==================================================  ========

``ModeController`` turns events into modes: a hard event starts slow mode at once, soft events add
``soft_weight`` each to a risk summed over ``risk_window`` frames and start it at
``risk_threshold``; no slow call within ``cooldown`` frames of the last one unless an event is hard.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from core.errors import InputError
from core.frames import resize_frame

EVENTS = ("DISAPPEAR", "REAPPEAR", "SCALE_JUMP", "SHAPE_DRIFT", "LOW_CONF", "ID_SWITCH", "APPEAR_DRIFT", "JUMP", "SCENE_CUT",
          "HEARTBEAT", "HEARTBEAT_FAIL")
HARD_EVENTS = frozenset({"REAPPEAR", "ID_SWITCH", "SCENE_CUT", "HEARTBEAT_FAIL"})
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
    scene_cut: float = 0.35
    heartbeat_every: int = 30
    soft_weight: float = 0.5
    risk_window: int = 5
    risk_threshold: float = 1.0
    cooldown: int = 10
    tighten: float = 1.5  # threshold factor after an ambiguous anchor (spec B.3)

    def __post_init__(self):
        for name in ("disappear_frames", "heartbeat_every", "risk_window", "cooldown"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name, value, "use a positive integer number of frames")
        if not 0 < self.presence_threshold < 1:
            raise InputError("presence_threshold", self.presence_threshold, "use a probability in (0, 1)")
        if self.tighten < 1:
            raise InputError("tighten", self.tighten, "use a factor >= 1")

    def tightened(self) -> MonitorConfig:
        """Stricter thresholds (the ambiguous-anchor rule): drift and change tests fire sooner."""
        t = self.tighten
        return MonitorConfig(**{**asdict(self), "iou_drift": min(0.95, self.iou_drift * t), "area_ratio_high": 1 + (self.area_ratio_high - 1) / t,
                                "area_ratio_low": 1 - (1 - self.area_ratio_low) / t, "jump_fraction": self.jump_fraction / t,
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
    _prev_thumb: np.ndarray | None = field(default=None, init=False, repr=False)
    _absent_run: int = field(default=0, init=False)
    _gone: bool = field(default=False, init=False)
    _since_heartbeat: int = field(default=0, init=False)
    _pos: np.ndarray | None = field(default=None, init=False, repr=False)
    _neg: np.ndarray | None = field(default=None, init=False, repr=False)

    def set_prototypes(self, positive: Sequence[np.ndarray], negative: Sequence[np.ndarray] = ()) -> None:
        self._pos = _unit(np.asarray(positive, np.float32)) if len(positive) else None
        self._neg = _unit(np.asarray(negative, np.float32)) if len(negative) else None

    def confirm(self, mask: np.ndarray) -> None:
        """After a re-anchor: this mask is the new reference, disappearance is cleared."""
        self._prev_mask, self._absent_run, self._gone = np.asarray(mask, bool), 0, False

    def update(self, frame_idx: int, mask: np.ndarray, presence: float, frame: np.ndarray | None = None,
               embedding: np.ndarray | None = None, confidence: float | None = None) -> list[MonitorEvent]:
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
        soft = sum(c.soft_weight for e in events if not e.hard and e.kind not in CHECKS)
        self._risk.append((frame_idx, soft))
        while self._risk and self._risk[0][0] <= frame_idx - c.risk_window:
            self._risk.popleft()
        hard = any(e.hard for e in events)
        risky = sum(r for _, r in self._risk) >= c.risk_threshold
        cooling = self._last_slow is not None and frame_idx - self._last_slow < c.cooldown
        if hard or (risky and not cooling):
            self._last_slow = frame_idx
            self.slow_calls += 1
            self._risk.clear()
            return "slow"
        return "fast"


__all__ = ["EVENTS", "HARD_EVENTS", "CHECKS", "MonitorConfig", "MonitorEvent", "EventMonitor", "ModeController", "mask_iou", "centroid"]
