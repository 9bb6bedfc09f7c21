"""Stick-figure people: a COCO-17 skeleton posed by a few joint angles, and named actions.

A pose is a dict of angles (radians) and offsets; an action is a list of keyframes over its phase
in [0, 1], always starting and ending at the neutral pose, interpolated with cosine easing so
motion is smooth. Forward kinematics turns a pose into 17 ``(x, y)`` points in units of body
height around the hip centre (the "root"), y down. "left" is the person's left: they face the
viewer, so their left side is on the image's right (COCO's convention).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NEUTRAL = {
    "lsh": 0.15, "lel": 0.1, "rsh": 0.15, "rel": 0.1,  # shoulder abduction, elbow bend
    "lhip": 0.08, "lknee": 0.0, "rhip": 0.08, "rknee": 0.0,
    "lean": 0.0, "head": 0.0, "yaw": 0.0, "dy": 0.0,  # torso lean, head tilt, facing, root lift
}  # fmt: skip
PARAMS = tuple(NEUTRAL)


@dataclass(frozen=True)
class Action:
    """A named movement: keyframes ``(phase, {param: value})`` plus a root shift in body heights."""

    name: str
    category: str
    keys: tuple
    shift: float = 0.0  # horizontal root displacement over the whole action, in body heights
    description: str = ""


def _a(name, category, description, *keys, shift=0.0):
    return Action(name, category, tuple(keys), shift, description)


_WAVE = lambda s: tuple((0.15 + 0.7 * i / 5, {f"{s}sh": 2.5, f"{s}el": 0.6 if i % 2 else -0.3}) for i in range(6))  # noqa: E731
_WALK = tuple((0.1 + 0.8 * i / 6, {"lhip": 0.08 + (0.3 if i % 2 else -0.15), "rhip": 0.08 + (-0.15 if i % 2 else 0.3)}) for i in range(7))

ACTIONS = {a.name: a for a in (
    # upper body
    _a("raise_left_arm", "upper_body", "raise the left arm", (0.35, {"lsh": 2.9, "lel": 0.0}), (0.65, {"lsh": 2.9, "lel": 0.0})),
    _a("raise_right_arm", "upper_body", "raise the right arm", (0.35, {"rsh": 2.9, "rel": 0.0}), (0.65, {"rsh": 2.9, "rel": 0.0})),
    _a("raise_both_arms", "upper_body", "raise both arms", (0.35, {"lsh": 2.9, "rsh": 2.9, "lel": 0, "rel": 0}), (0.65, {"lsh": 2.9, "rsh": 2.9, "lel": 0, "rel": 0})),
    _a("arms_out", "upper_body", "stretch both arms out sideways", (0.35, {"lsh": 1.57, "rsh": 1.57, "lel": 0, "rel": 0}), (0.65, {"lsh": 1.57, "rsh": 1.57, "lel": 0, "rel": 0})),
    _a("hands_on_head", "upper_body", "put both hands on the head", (0.35, {"lsh": 2.5, "rsh": 2.5, "lel": 1.9, "rel": 1.9}), (0.65, {"lsh": 2.5, "rsh": 2.5, "lel": 1.9, "rel": 1.9})),
    # gestures
    _a("wave_left_arm", "gesture", "wave the left arm", *_WAVE("l")),
    _a("wave_right_arm", "gesture", "wave the right arm", *_WAVE("r")),
    _a("clap", "gesture", "clap the hands", *tuple((0.15 + 0.7 * i / 5, {"lsh": 0.2, "rsh": 0.2, "lel": -1.77 if i % 2 else -1.2, "rel": -1.77 if i % 2 else -1.2}) for i in range(6))),
    _a("point_left", "gesture", "point to the left", (0.3, {"rsh": 1.57, "rel": 0.0}), (0.7, {"rsh": 1.57, "rel": 0.0})),
    _a("point_right", "gesture", "point to the right", (0.3, {"lsh": 1.57, "lel": 0.0}), (0.7, {"lsh": 1.57, "lel": 0.0})),
    _a("salute", "gesture", "salute", (0.3, {"rsh": 1.3, "rel": 2.5}), (0.7, {"rsh": 1.3, "rel": 2.5})),
    # lower body
    _a("kick_left", "lower_body", "kick with the left leg", (0.4, {"lhip": 0.4, "lknee": 0.9}), (0.55, {"lhip": 1.2, "lknee": 0.0}), (0.7, {"lhip": 0.3, "lknee": 0.4})),
    _a("kick_right", "lower_body", "kick with the right leg", (0.4, {"rhip": 0.4, "rknee": 0.9}), (0.55, {"rhip": 1.2, "rknee": 0.0}), (0.7, {"rhip": 0.3, "rknee": 0.4})),
    _a("lift_left_knee", "lower_body", "lift the left knee", (0.35, {"lhip": 1.3, "lknee": 2.4}), (0.65, {"lhip": 1.3, "lknee": 2.4})),
    _a("lift_right_knee", "lower_body", "lift the right knee", (0.35, {"rhip": 1.3, "rknee": 2.4}), (0.65, {"rhip": 1.3, "rknee": 2.4})),
    _a("leg_out_left", "lower_body", "stretch the left leg out to the side", (0.35, {"lhip": 0.8}), (0.65, {"lhip": 0.8})),
    _a("leg_out_right", "lower_body", "stretch the right leg out to the side", (0.35, {"rhip": 0.8}), (0.65, {"rhip": 0.8})),
    # whole body
    _a("jump", "whole_body", "jump", (0.25, {"dy": 0.05, "lknee": 0.6, "rknee": 0.6, "lhip": 0.3, "rhip": 0.3}), (0.5, {"dy": -0.25}), (0.75, {"dy": 0.05, "lknee": 0.6, "rknee": 0.6, "lhip": 0.3, "rhip": 0.3})),
    _a("squat", "whole_body", "squat", (0.4, {"dy": 0.16, "lhip": 0.9, "rhip": 0.9, "lknee": 1.8, "rknee": 1.8, "lsh": 1.2, "rsh": 1.2}), (0.6, {"dy": 0.16, "lhip": 0.9, "rhip": 0.9, "lknee": 1.8, "rknee": 1.8, "lsh": 1.2, "rsh": 1.2})),
    _a("jumping_jack", "whole_body", "do a jumping jack", *tuple((0.1 + 0.8 * i / 4, {"lsh": 2.7, "rsh": 2.7, "lhip": 0.45, "rhip": 0.45, "dy": -0.05} if i % 2 else {"dy": -0.03}) for i in range(5))),
    _a("turn", "whole_body", "turn around", (0.5, {"yaw": np.pi}), (0.999, {"yaw": 2 * np.pi})),
    # locomotion
    _a("walk_left", "locomotion", "walk to the left", *_WALK, shift=-0.8),
    _a("walk_right", "locomotion", "walk to the right", *_WALK, shift=0.8),
    _a("hop_left", "locomotion", "hop to the left", (0.3, {"dy": -0.2, "lknee": 0.5, "rknee": 0.5}), (0.6, {"dy": 0.03}), shift=-0.4),
    _a("hop_right", "locomotion", "hop to the right", (0.3, {"dy": -0.2, "lknee": 0.5, "rknee": 0.5}), (0.6, {"dy": 0.03}), shift=0.4),
    _a("side_step_left", "locomotion", "step sideways to the left", (0.3, {"rhip": 0.5}), (0.6, {"lhip": 0.4}), shift=-0.3),
    _a("side_step_right", "locomotion", "step sideways to the right", (0.3, {"lhip": 0.5}), (0.6, {"rhip": 0.4}), shift=0.3),
    # posture
    _a("lean_left", "posture", "lean to the left", (0.35, {"lean": -0.35}), (0.65, {"lean": -0.35})),
    _a("lean_right", "posture", "lean to the right", (0.35, {"lean": 0.35}), (0.65, {"lean": 0.35})),
    _a("crouch", "posture", "crouch down and hold", (0.3, {"dy": 0.12, "lhip": 0.7, "rhip": 0.7, "lknee": 1.4, "rknee": 1.4}), (0.7, {"dy": 0.12, "lhip": 0.7, "rhip": 0.7, "lknee": 1.4, "rknee": 1.4})),
    _a("tilt_head_left", "posture", "tilt the head to the left", (0.35, {"head": 0.45}), (0.65, {"head": 0.45})),
    _a("tilt_head_right", "posture", "tilt the head to the right", (0.35, {"head": -0.45}), (0.65, {"head": -0.45})),
    _a("hands_on_hips", "posture", "put the hands on the hips", (0.35, {"lsh": 0.7, "rsh": 0.7, "lel": -2.0, "rel": -2.0}), (0.65, {"lsh": 0.7, "rsh": 0.7, "lel": -2.0, "rel": -2.0})),
)}  # fmt: skip
CATEGORIES = tuple(sorted({a.category for a in ACTIONS.values()}))


@dataclass
class Person:
    """Identity (colour, limb thickness, proportions) and a timeline of ``(action, start, frames)``."""

    height: float  # body height in pixels, head top to ankles (about 0.95 of this)
    thickness: float = 2.0  # limb thickness in pixels
    arm: float = 1.0  # limb-length scales: the proportions that make an identity
    leg: float = 1.0
    torso: float = 1.0
    actions: list = field(default_factory=list)  # [(name, start_frame, num_frames)], non-overlapping


def _ease(x: float) -> float:
    return 0.5 - 0.5 * np.cos(np.pi * x)


def action_pose(action: Action, phase: float) -> dict:
    """The pose at ``phase`` in [0, 1] of ``action``: cosine-eased keyframe interpolation."""
    keys = [(0.0, {})] + list(action.keys) + [(1.0, {})]
    phase = min(max(phase, 0.0), 1.0)
    for (p0, k0), (p1, k1) in zip(keys, keys[1:]):
        if p0 <= phase <= p1:
            w = _ease((phase - p0) / (p1 - p0)) if p1 > p0 else 1.0
            return {n: (1 - w) * k0.get(n, NEUTRAL[n]) + w * k1.get(n, NEUTRAL[n]) for n in PARAMS}
    return dict(NEUTRAL)


def pose_at(person: Person, t: float) -> tuple[dict, float]:
    """The pose and the accumulated horizontal shift (body heights) at frame ``t``."""
    pose, shift = dict(NEUTRAL), 0.0
    for name, start, n in person.actions:
        act = ACTIONS[name]
        phase = (t - start) / max(n, 1)
        shift += act.shift * min(max(phase, 0.0), 1.0)
        if 0.0 <= phase <= 1.0:
            pose = action_pose(act, phase)
    return pose, shift


def root_shift(person: Person, t: np.ndarray) -> np.ndarray:
    """Horizontal root displacement in pixels for an array of frames (walks, hops, side steps)."""
    out = np.zeros(np.shape(t), np.float64)
    for name, start, n in person.actions:
        out += ACTIONS[name].shift * person.height * np.clip((np.asarray(t) - start) / max(n, 1), 0.0, 1.0)
    return out


def _dir(side: float, angle: float) -> np.ndarray:
    return np.array([side * np.sin(angle), np.cos(angle)])


def forward_kinematics(person: Person, pose: dict) -> np.ndarray:
    """17 COCO ``(x, y)`` points in pixels, relative to the root (hip centre) at rest height."""
    h, w = person.height, np.cos(pose["yaw"])
    kp = np.zeros((17, 2))
    root = np.array([0.0, pose["dy"] * h])
    neck = root + 0.30 * person.torso * h * np.array([np.sin(pose["lean"]), -np.cos(pose["lean"])])
    head_a = pose["lean"] + pose["head"]
    head = neck + 0.11 * h * np.array([np.sin(head_a), -np.cos(head_a)])
    face = [(0.0, 0.015), (0.028, -0.012), (-0.028, -0.012), (0.05, 0.0), (-0.05, 0.0)]  # nose, eyes, ears
    for i, (fx, fy) in enumerate(face):
        kp[i] = head + h * np.array([fx * w, fy])
    for side, (sh, el, wr, hip, kn, an) in ((1.0, (5, 7, 9, 11, 13, 15)), (-1.0, (6, 8, 10, 12, 14, 16))):
        p = "l" if side > 0 else "r"
        kp[sh] = neck + h * np.array([side * 0.11 * w, 0.02])
        kp[el] = kp[sh] + 0.15 * person.arm * h * _dir(side, pose[p + "sh"])
        kp[wr] = kp[el] + 0.14 * person.arm * h * _dir(side, pose[p + "sh"] + pose[p + "el"])
        kp[hip] = root + h * np.array([side * 0.07 * w, 0.0])
        kp[kn] = kp[hip] + 0.24 * person.leg * h * _dir(side, pose[p + "hip"])
        kp[an] = kp[kn] + 0.24 * person.leg * h * _dir(side, pose[p + "hip"] - pose[p + "knee"])
    return kp


def head_radius(person: Person) -> float:
    return 0.075 * person.height


# limbs drawn as thick lines (indices into the 17 points); the head is a disk around the face points
LIMBS = ((5, 6), (5, 7), (7, 9), (6, 8), (8, 10), (11, 12), (11, 13), (13, 15), (12, 14), (14, 16))
