"""The Heterogeneous Event Monitor and the fast/slow controller on hand-made mask sequences (spec CLEAR d-9, d-10)."""

import numpy as np
import pytest

from core.errors import InputError
from trackers.monitor import EventMonitor, ModeController, MonitorConfig, MonitorEvent

H = W = 64


def square(x: int, y: int = 20, side: int = 12) -> np.ndarray:
    m = np.zeros((H, W), bool)
    m[y:y + side, x:x + side] = True
    return m


def run(monitor, masks, presences, frames=None, embeddings=None):
    events = []
    for t, (m, p) in enumerate(zip(masks, presences)):
        events += monitor.update(t, m, p, frame=None if frames is None else frames[t],
                                 embedding=None if embeddings is None else embeddings[t])
    return events


def kinds(events):
    return [e.kind for e in events if e.kind != "HEARTBEAT"]


def test_a_quiet_track_fires_nothing():
    masks = [square(10 + t) for t in range(20)]
    assert kinds(run(EventMonitor(), masks, [0.9] * 20)) == []


def test_disappearance_then_return_fires_disappear_then_reappear():
    empty = np.zeros((H, W), bool)
    masks = [square(10)] * 5 + [empty] * 3 + [square(12)] * 3
    pres = [0.9] * 5 + [0.1] * 3 + [0.9] * 3
    events = run(EventMonitor(), masks, pres)
    assert kinds(events) == ["DISAPPEAR", "REAPPEAR"]
    assert [e.frame for e in events if e.kind != "HEARTBEAT"] == [7, 8]
    assert events[-1].hard and not events[0].hard
    # two absent frames are not a disappearance
    assert kinds(run(EventMonitor(), [square(10)] * 3 + [empty] * 2 + [square(10)], [0.9] * 3 + [0.1] * 2 + [0.9])) == []


def test_area_times_three_fires_scale_jump_and_a_teleport_fires_drift_and_jump():
    big = np.zeros((H, W), bool)
    big[14:35, 4:25] = True  # about 3x the area, overlapping
    assert "SCALE_JUMP" in kinds(run(EventMonitor(), [square(8, 20), big], [0.9, 0.9]))
    ev = kinds(run(EventMonitor(), [square(2), square(48)], [0.9, 0.9]))
    assert "SHAPE_DRIFT" in ev and "JUMP" in ev


def test_swapping_to_a_same_shape_distractor_of_another_colour_fires_id_switch():
    """Embeddings are colour histograms: the tracked red square is replaced by a blue one."""
    red, blue = np.array([1.0, 0, 0]), np.array([0, 0, 1.0])
    mon = EventMonitor()
    mon.set_prototypes([red], [blue])
    ev = run(mon, [square(10 + t) for t in range(6)], [0.9] * 6, embeddings=[red] * 3 + [blue] * 3)
    assert kinds(ev) == ["ID_SWITCH"] * 3 and ev[0].frame == 3 and ev[0].hard


def test_scene_cut_and_heartbeat():
    frames = [np.full((H, W, 3), 20, np.uint8)] * 3 + [np.full((H, W, 3), 230, np.uint8)] * 2
    ev = run(EventMonitor(MonitorConfig(heartbeat_every=2)), [square(10)] * 5, [0.9] * 5, frames=frames)
    assert [e.kind for e in ev if e.kind == "SCENE_CUT"] == ["SCENE_CUT"] and [e.frame for e in ev if e.kind == "SCENE_CUT"] == [3]
    assert [e.frame for e in ev if e.kind == "HEARTBEAT"] == [1, 3]
    assert all(e.check and not e.hard for e in ev if e.kind == "HEARTBEAT")


def test_controller_fast_path_one_slow_call_per_hard_event_and_cooldown():
    ctl = ModeController()
    assert [ctl.decide(t, []) for t in range(50)] == ["fast"] * 50 and ctl.slow_calls == 0
    hard = MonitorEvent(50, "REAPPEAR", 0.9, 0.5)
    assert ctl.decide(50, [hard]) == "slow" and ctl.slow_calls == 1
    soft = [MonitorEvent(0, "SHAPE_DRIFT", 0.1, 0.3), MonitorEvent(0, "JUMP", 0.3, 0.15)]
    assert ctl.decide(52, soft) == "fast"  # risk 1.0 but within the cool-down of the slow call at 50
    assert ctl.decide(61, soft) == "slow"  # cool-down over
    assert ctl.decide(62, [MonitorEvent(62, "HEARTBEAT", 30, 30)]) == "fast"  # a check request is no risk
    assert ctl.decide(63, [MonitorEvent(63, "ID_SWITCH", -0.2, 0.0)]) == "slow"  # hard events ignore the cool-down
    assert ctl.slow_calls == 3


def test_tightened_thresholds_and_bad_config():
    c = MonitorConfig()
    t = c.tightened()
    assert t.iou_drift > c.iou_drift and t.jump_fraction < c.jump_fraction and t.heartbeat_every < c.heartbeat_every
    with pytest.raises(InputError, match="cooldown"):
        MonitorConfig(cooldown=0)
