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
    w = MonitorConfig().weights
    assert w[events[-1].kind] >= MonitorConfig().risk_threshold > w[events[0].kind]  # a return escalates alone
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
    assert kinds(ev) == ["ID_SWITCH"] * 3 and ev[0].frame == 3 and not ev[0].hard


def test_scene_cut_and_heartbeat():
    frames = [np.full((H, W, 3), 20, np.uint8)] * 3 + [np.full((H, W, 3), 230, np.uint8)] * 2
    ev = run(EventMonitor(MonitorConfig(heartbeat_every=2)), [square(10)] * 5, [0.9] * 5, frames=frames)
    assert [e.kind for e in ev if e.kind == "SCENE_CUT"] == ["SCENE_CUT"] and [e.frame for e in ev if e.kind == "SCENE_CUT"] == [3]
    assert [e.frame for e in ev if e.kind == "HEARTBEAT"] == [1, 3]
    assert all(e.check and not e.hard for e in ev if e.kind == "HEARTBEAT")


def test_controller_weights_agreement_cooldown_and_hard_events():
    ctl = ModeController(MonitorConfig(cooldown=10))
    assert [ctl.decide(t, []) for t in range(50)] == ["fast"] * 50 and ctl.slow_calls == 0
    assert ctl.decide(50, [MonitorEvent(50, "REAPPEAR", 0.9, 0.5)]) == "slow" and ctl.slow_calls == 1  # weight 1: alone
    soft = [MonitorEvent(0, "SHAPE_DRIFT", 0.1, 0.3), MonitorEvent(0, "JUMP", 0.3, 0.15)]
    assert ctl.decide(52, soft) == "fast"  # risk 1.0 but within the cool-down of the slow call at 50
    assert ctl.decide(61, [MonitorEvent(61, "MOTION_BREAK", 0.6, 0.35)]) == "fast"  # one weak signal waits...
    assert ctl.decide(63, [MonitorEvent(63, "TRACK_MERGE", 0.7, 0.5)]) == "slow"  # ...for a second within the window
    assert ctl.decide(64, [MonitorEvent(64, "HEARTBEAT", 30, 30)]) == "fast"  # a check request is no risk
    assert ctl.decide(65, [MonitorEvent(65, "ID_SWITCH", -0.2, 0.0)]) == "fast"  # weight 1, but cooling down
    strong = [MonitorEvent(66, k, 0.0, 0.0) for k in ("SHAPE_DRIFT", "MOTION_BREAK", "SIZE_DRIFT")]
    assert ctl.decide(66, strong) == "slow"  # three signals on one frame break through the cool-down
    assert ctl.decide(67, [MonitorEvent(67, "SCENE_CUT", 0.5, 0.35)]) == "slow"  # hard events ignore the cool-down
    assert ctl.slow_calls == 4
    late = ModeController(MonitorConfig(risk_window=3))
    assert late.decide(0, [MonitorEvent(0, "SIZE_DRIFT", 2.0, 1.6)]) == "fast"
    assert late.decide(3, [MonitorEvent(3, "SIZE_DRIFT", 2.0, 1.6)]) == "fast"  # the first has left the window
    lingering = ModeController()
    assert [lingering.decide(t, [MonitorEvent(t, "SIZE_DRIFT", 2.0, 1.6)]) for t in range(10)] == ["fast"] * 10  # one signal lingering
    assert lingering.decide(10, [MonitorEvent(10, "OUTLINE_DRIFT", 0.3, 0.4)]) == "slow"  # a second kind agrees
    backward = ModeController()
    assert backward.decide(20, [MonitorEvent(20, "SIZE_DRIFT", 2.0, 1.6)]) == "fast"
    assert backward.decide(19, [MonitorEvent(19, "SHAPE_DRIFT", 0.1, 0.3)]) == "slow"  # frames counted either way


def test_motion_break_size_drift_and_track_merge():
    path = [square(4 + 2 * t, side=8) for t in range(6)]  # steady motion: no event
    assert kinds(run(EventMonitor(), path, [0.9] * 6)) == []
    hop = path[:4] + [square(44, side=8)]  # a look-alike far from where the object should be
    assert "MOTION_BREAK" in kinds(run(EventMonitor(), hop, [0.9] * 5))
    grow = [square(10, side=8)] * 4 + [square(10, side=12)]  # area x2.25 against the recent median
    assert "SIZE_DRIFT" in kinds(run(EventMonitor(), grow, [0.9] * 5))
    mon, other = EventMonitor(), square(20)
    ev = [mon.update(t, square(20 if t >= 2 else 4 + t), 0.9, others={7: other}) for t in range(5)]
    merges = [e for frame in ev for e in frame if e.kind == "TRACK_MERGE"]
    assert [e.frame for e in merges] == [2]  # the onset only
    with pytest.raises(InputError, match="weights"):
        MonitorConfig(weights={"NOT_AN_EVENT": 1.0})


def test_outline_drift_fires_when_the_mask_spreads_over_a_touching_look_alike():
    from trackers.monitor import _about_centroid, outline_iou

    assert outline_iou(_about_centroid(square(4, side=8)), _about_centroid(square(40, 30, side=8))) == 1.0  # wherever it is
    mon = EventMonitor()
    mon.confirm(square(10, side=8))
    moving = [square(10 + 2 * t, side=8) for t in range(5)]
    assert "OUTLINE_DRIFT" not in kinds(run(mon, moving, [0.9] * 5))  # moving keeps the outline
    spread = square(20, side=8)
    spread[20:28, 28:44] = True  # an 8x24 bar: the target and two same-colour neighbours in one mask
    ev = [e for e in mon.update(5, spread, 0.9) if e.kind == "OUTLINE_DRIFT"]
    assert len(ev) == 1 and ev[0].value == pytest.approx(64 / 192)


def test_tightened_thresholds_and_bad_config():
    c = MonitorConfig()
    t = c.tightened()
    assert t.iou_drift > c.iou_drift and t.jump_fraction < c.jump_fraction and t.heartbeat_every < c.heartbeat_every
    with pytest.raises(InputError, match="cooldown"):
        MonitorConfig(cooldown=0)
