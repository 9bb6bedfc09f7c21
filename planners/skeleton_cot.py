"""AnyMotion's Skeleton Chain-of-Thought planner (spec b.4): instruction + source skeleton -> reasoning ->
target skeleton -> MetaQuery states for the renderer.

    planner = BuiltinSkeletonPlanner.from_pretrained()          # weights/builtin/skeleton_planner
    plan = planner.plan(frames, source_keypoints, "make the person raise the left arm")
    plan.reasoning          # who moves, which body parts, how, what stays fixed
    plan.target_keypoints   # (T, 17, 3) COCO-17 pixels
    plan.queries            # (N, query_dim) MetaQuery states, read by the pose-guided renderer

Every planner offers ``plan(frames, source_keypoints, instruction, generator=None) -> SkeletonPlan``
(the ``SkeletonPlanner`` protocol), ``save_pretrained`` / ``from_pretrained``.

**The builtin planner** is a small transformer over one sequence:
``[CLS] [instruction: MiniLM token states] [skeleton: one token per frame]`` (bidirectional; a frame's token
reads its source pose and predicts its target pose). The CLS token predicts the reasoning: the motion
category and fine class of worldgen's
``motion_edit`` taxonomy (6 categories, 33 classes: the label space, plus ``no_change`` for an instruction that
asks for nothing) and which body parts move (``PARTS``);
the frame tokens predict the target skeleton frame by frame. The reasoning text is written from those
predictions and from the planned skeleton itself (how far and where each moving part goes), so it
describes the plan the renderer receives, not a guess beside it. Then the **MetaQueries** (spec b.4:
queries after the skeleton, so they read both): ``num_queries`` learned tokens attend, in
``query_depth`` further layers, to the instruction, the source skeleton and the *planned* target
skeleton (the ground truth under teacher forcing in training); their states pass an Enc-Proj style
connector (Linear, GELU, Linear, RMSNorm; spec b.1) to ``query_dim``. [PROPOSED] Since the builtin
renderer is trained apart from the planner (frozen queries, spec b.5 S2), the queries are trained here
by an auxiliary objective: from them alone, predict the fine class, the moving parts and the target
skeleton at four phases of the clip, so they carry a skeleton-grounded summary of the edit.

**Coordinates** [PROPOSED]: keypoints are expressed in a person frame, origin at the source's hip centre
on its first frame with both hips labelled, unit the source's median torso length (hip centre to the
shoulders' midpoint: constant under leaning, squatting and turning), plus the origin and scale relative
to the image, so the planner sees identity (proportions) and placement and copies them into the target.
Joints with ``v == 0`` are masked. Predicted joints inside the image get ``v = 2``, outside ``v = 0``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.errors import InputError
from core.keypoints import COCO17_NAMES
from core.weights_io import load_state_dict, read_model_config, save_model_folder

KIND = "skeleton-cot-planner"
WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights" / "builtin" / "skeleton_planner"

# the label space: worldgen motion_edit's taxonomy (worldgen.figures.ACTIONS), stored here as data so the
# planner needs no import of the synthetic world
NO_CHANGE = "no_change"  # an instruction that asks for no motion change: the target is the source
CATEGORIES = ("gesture", "locomotion", "lower_body", "posture", "upper_body", "whole_body", NO_CHANGE)
FINE_CLASSES = (
    "arms_out", "clap", "crouch", "hands_on_head", "hands_on_hips", "hop_left", "hop_right", "jump", "jumping_jack",
    "kick_left", "kick_right", "lean_left", "lean_right", "leg_out_left", "leg_out_right", "lift_left_knee",
    "lift_right_knee", "point_left", "point_right", "raise_both_arms", "raise_left_arm", "raise_right_arm",
    "salute", "side_step_left", "side_step_right", "squat", "tilt_head_left", "tilt_head_right", "turn",
    "walk_left", "walk_right", "wave_left_arm", "wave_right_arm", NO_CHANGE,
)  # fmt: skip
PARTS = ("head", "torso", "left arm", "right arm", "left leg", "right leg", "whole body position")
PART_JOINTS = {"head": (0, 1, 2, 3, 4), "torso": (5, 6, 11, 12), "left arm": (5, 7, 9), "right arm": (6, 8, 10),
               "left leg": (11, 13, 15), "right leg": (12, 14, 16), "whole body position": (11, 12)}
FEATURES = 17 * 3 + 3  # per frame: normalised (x, y, labelled) per joint, then origin x/W, y/H and scale/H


@dataclass
class SkeletonPlan:
    """What a skeleton planner returns for one clip."""

    reasoning: str
    target_keypoints: np.ndarray  # (T, 17, 3) float32 pixels
    queries: torch.Tensor | None  # (N, query_dim) MetaQuery states, or None (a planner without them)
    category: str = ""
    fine_class: str = ""
    confidence: float = 0.0  # the fine class's probability
    parts: tuple[str, ...] = ()
    changes: bool = True  # False: the instruction asks for nothing the planner can do (target = source)
    extras: dict = field(default_factory=dict)


@runtime_checkable
class SkeletonPlanner(Protocol):
    def plan(self, frames: np.ndarray | None, source_keypoints: np.ndarray, instruction: str, generator: Any = None) -> SkeletonPlan: ...

    def save_pretrained(self, directory: str | Path) -> Path: ...


# ---------------------------------------------------------------------------- the person frame


def person_frame(kp: np.ndarray) -> tuple[np.ndarray, float]:
    """``(origin (2,), scale)`` of a ``(T, 17, 3)`` skeleton: the hip centre on the first frame with both hips
    labelled, and the median torso length. Raises ``InputError`` when no frame has hips and shoulders."""
    kp = np.asarray(kp, np.float32)
    ok = (kp[:, [5, 6, 11, 12], 2] > 0).all(1)
    if not ok.any():
        raise InputError("source_keypoints", "no frame with both shoulders and hips", "no person found in the clip")
    hips = kp[:, [11, 12], :2].mean(1)
    necks = kp[:, [5, 6], :2].mean(1)
    torso = np.linalg.norm(necks - hips, axis=1)[ok]
    return hips[int(np.argmax(ok))], float(max(np.median(torso), 1e-3))


def skeleton_features(kp: np.ndarray, origin: np.ndarray, scale: float, width: int, height: int) -> np.ndarray:
    """``(T, 17, 3)`` pixels -> ``(T, FEATURES)`` in the person frame (see the module docstring)."""
    kp = np.asarray(kp, np.float32)
    lab = (kp[..., 2] > 0).astype(np.float32)
    xy = (kp[..., :2] - origin) / scale * lab[..., None]
    glob = np.broadcast_to(np.array([origin[0] / width, origin[1] / height, scale / height], np.float32), (len(kp), 3))
    return np.concatenate([xy.reshape(len(kp), -1), lab, glob], 1).astype(np.float32)


def to_pixels(xy: np.ndarray, origin: np.ndarray, scale: float, width: int, height: int) -> np.ndarray:
    """Normalised ``(T, 17, 2)`` -> ``(T, 17, 3)`` pixels with ``v = 2`` inside the image, 0 outside."""
    px = xy * scale + origin
    inside = (px[..., 0] >= 0) & (px[..., 1] >= 0) & (px[..., 0] < width) & (px[..., 1] < height)
    return np.concatenate([px, np.where(inside, 2.0, 0.0)[..., None]], -1).astype(np.float32)


def check_keypoints(kp: Any, name: str = "source_keypoints") -> np.ndarray:
    a = np.asarray(kp, dtype=np.float32) if isinstance(kp, (np.ndarray, list, tuple, torch.Tensor)) else None
    if a is None or a.ndim != 3 or a.shape[1:] != (17, 3) or len(a) < 1:
        raise InputError(name, getattr(kp, "shape", type(kp).__name__), "pass COCO-17 keypoints (T, 17, 3): x, y in pixels, v")
    if not np.isfinite(a).all():
        raise InputError(name, "non-finite values", "keypoints must be finite")
    return a


# ---------------------------------------------------------------------------- the model


@dataclass
class SkeletonPlannerConfig:
    width: int = 128
    depth: int = 4
    heads: int = 4
    text_dim: int = 384  # MiniLM token states
    num_queries: int = 8  # [PROPOSED] MetaQuery's code uses 64 for a 7B MLLM; 8 suffice for a 64 px stick world
    query_depth: int = 2
    query_dim: int = 128
    query_stride: int = 3  # the queries read every this many planned frames
    image_size: int = 64  # the training geometry (what the card's numbers hold for)
    num_frames: int = 36

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f.name, v, "use a positive integer")
        if self.width % self.heads:
            raise InputError("heads", self.heads, f"must divide width {self.width}")


def _time_embedding(t: int, dim: int, device: torch.device) -> torch.Tensor:
    pos = torch.arange(t, dtype=torch.float32, device=device)[:, None]
    freqs = torch.exp(-math.log(1000.0) * torch.arange(dim // 2, dtype=torch.float32, device=device) / (dim // 2))
    phase = (pos / max(t - 1, 1)) * math.pi  # where in the clip: actions span a fixed share of it
    return torch.cat([torch.sin(pos * freqs), torch.cos(phase * torch.arange(1, dim // 2 + 1, device=device))], 1)


def _encoder(cfg: SkeletonPlannerConfig, depth: int) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(cfg.width, cfg.heads, 4 * cfg.width, dropout=0.0, batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)


class BuiltinSkeletonPlanner(nn.Module):
    """The builtin SCoT planner (see the module docstring)."""

    backend = "builtin"

    def __init__(self, config: SkeletonPlannerConfig | None = None):
        super().__init__()
        self.config = c = config or SkeletonPlannerConfig()
        d = c.width
        self.text_in = nn.Sequential(nn.LayerNorm(c.text_dim), nn.Linear(c.text_dim, d))
        self.skel_in = nn.Sequential(nn.Linear(FEATURES, d), nn.GELU(), nn.Linear(d, d))
        self.time_in = nn.Linear(d, d)
        self.kind = nn.Parameter(torch.randn(4, d) * 0.02)  # cls, text, source frame, planned frame
        self.encoder = _encoder(c, c.depth)
        self.norm = nn.LayerNorm(d)
        self.category_head, self.fine_head, self.parts_head = nn.Linear(d, len(CATEGORIES)), nn.Linear(d, len(FINE_CLASSES)), nn.Linear(d, len(PARTS))
        self.keypoint_head = nn.Linear(d, 34)
        # MetaQueries: they read the instruction, the source and the planned skeleton (spec b.4)
        self.plan_in = nn.Sequential(nn.Linear(FEATURES, d), nn.GELU(), nn.Linear(d, d))
        self.queries = nn.Parameter(torch.randn(c.num_queries, d) * 0.02)
        self.query_encoder = _encoder(c, c.query_depth)
        self.connector = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, c.query_dim), nn.GELU(approximate="tanh"),
                                       nn.Linear(c.query_dim, c.query_dim), nn.RMSNorm(c.query_dim))
        self.aux_fine, self.aux_parts = nn.Linear(c.query_dim, len(FINE_CLASSES)), nn.Linear(c.query_dim, len(PARTS))
        self.aux_skeleton = nn.Linear(c.num_queries * c.query_dim, 4 * 34)
        self._text_encoder = None

    @property
    def device(self) -> torch.device:
        return self.keypoint_head.weight.device

    # ---- the forward

    def _sequence(self, text: torch.Tensor, text_mask: torch.Tensor, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, _ = source.shape
        d = self.config.width
        temb = self.time_in(_time_embedding(t, d, source.device))[None]
        # one token per frame: it reads that frame's source pose and predicts its target pose
        parts = [self.kind[0].expand(b, 1, d), self.text_in(text) + self.kind[1], self.skel_in(source) + temb + self.kind[2]]
        valid = torch.cat([torch.ones(b, 1, dtype=torch.bool, device=source.device), text_mask,
                           torch.ones(b, t, dtype=torch.bool, device=source.device)], 1)
        return torch.cat(parts, 1), valid

    def forward(self, text: torch.Tensor, text_mask: torch.Tensor, source: torch.Tensor) -> dict[str, torch.Tensor]:
        """``text`` ``(B, L, 384)`` + mask, ``source`` ``(B, T, FEATURES)`` -> logits and ``keypoints`` ``(B, T, 17, 2)``."""
        x, valid = self._sequence(text, text_mask, source)
        h = self.norm(self.encoder(x, src_key_padding_mask=~valid))
        t = source.shape[1]
        cls = h[:, 0]
        return {"category": self.category_head(cls), "fine": self.fine_head(cls), "parts": self.parts_head(cls),
                "keypoints": self.keypoint_head(h[:, -t:]).unflatten(-1, (17, 2)), "memory": h, "valid": valid}

    def query_states(self, memory: torch.Tensor, memory_valid: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """MetaQuery states ``(B, N, query_dim)`` from the encoder memory and a target skeleton ``(B, T, FEATURES)``."""
        b, t, _ = target.shape
        d, n = self.config.width, self.config.num_queries
        temb = self.time_in(_time_embedding(t, d, target.device))[None]
        # every third planned frame: the queries summarise the motion, and this keeps them cheap
        planned = (self.plan_in(target) + temb + self.kind[3])[:, :: self.config.query_stride]
        t = planned.shape[1]
        x = torch.cat([memory, planned, self.queries.expand(b, n, d)], 1)
        total = x.shape[1]
        # queries come last: they attend to everything, nothing attends to them
        mask = torch.zeros(total, total, dtype=torch.bool, device=x.device)
        mask[: total - n, total - n :] = True
        pad = torch.cat([~memory_valid, torch.zeros(b, t + n, dtype=torch.bool, device=x.device)], 1)
        h = self.query_encoder(x, mask=mask, src_key_padding_mask=pad)
        return self.connector(h[:, -n:])

    def loss(self, batch: dict[str, torch.Tensor], weights: dict[str, float] | None = None) -> tuple[torch.Tensor, dict]:
        """Cross-entropy on the reasoning labels, smooth-L1 on the target skeleton (labelled joints), the queries' aux losses.

        ``batch``: ``text``, ``text_mask``, ``source`` (features), ``target`` (normalised ``(B, T, 17, 2)``),
        ``target_valid`` ``(B, T, 17)``, ``target_features`` (teacher forcing), ``category``, ``fine``, ``parts``.
        """
        w = {"keypoints": 1.0, "labels": 0.2, "queries": 0.2, **(weights or {})}
        out = self(batch["text"], batch["text_mask"], batch["source"])
        valid = batch["target_valid"].float()
        kp = (F.smooth_l1_loss(out["keypoints"], batch["target"], reduction="none", beta=0.05).sum(-1) * valid).sum() / valid.sum().clamp(min=1)
        labels = (F.cross_entropy(out["category"], batch["category"]) + F.cross_entropy(out["fine"], batch["fine"])
                  + F.binary_cross_entropy_with_logits(out["parts"], batch["parts"].float()))
        q = self.query_states(out["memory"], out["valid"], batch["target_features"])
        pooled = q.mean(1)
        t = batch["target"].shape[1]
        phases = torch.tensor([0, t // 3, 2 * t // 3, t - 1], device=q.device)
        aux_kp = self.aux_skeleton(q.flatten(1)).unflatten(-1, (4, 17, 2))
        v4 = valid[:, phases]
        aux = (F.cross_entropy(self.aux_fine(pooled), batch["fine"]) + F.binary_cross_entropy_with_logits(self.aux_parts(pooled), batch["parts"].float())
               + (F.smooth_l1_loss(aux_kp, batch["target"][:, phases], reduction="none", beta=0.05).sum(-1) * v4).sum() / v4.sum().clamp(min=1))
        total = w["keypoints"] * kp + w["labels"] * labels + w["queries"] * aux
        with torch.no_grad():
            acc = (out["fine"].argmax(-1) == batch["fine"]).float().mean()
        return total, {"kp": kp.detach(), "labels": labels.detach(), "aux": aux.detach(), "fine_acc": acc}

    # ---- text

    def encode_text(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        if self._text_encoder is None:
            from planners.builtin.text import MiniLM

            self._text_encoder = MiniLM()
        states = self._text_encoder.tokens(list(texts))
        length = max(1, max(len(s) for s in states))
        out = torch.zeros(len(states), length, self.config.text_dim)
        mask = torch.zeros(len(states), length, dtype=torch.bool)
        for i, s in enumerate(states):
            out[i, : len(s)], mask[i, : len(s)] = s.float(), True
        return out, mask

    # ---- planning

    @torch.no_grad()
    def plan(self, frames: np.ndarray | None, source_keypoints: np.ndarray, instruction: str, generator: Any = None,
             height: int | None = None, width: int | None = None) -> SkeletonPlan:
        """Plan the target skeleton of one clip. ``frames`` ``(T, H, W, 3)`` give the image size (the builtin
        planner reads the skeleton, not the pixels); without frames pass ``height`` / ``width``. Deterministic:
        ``generator`` is accepted for the protocol and unused."""
        kp = check_keypoints(source_keypoints)
        if not isinstance(instruction, str) or not instruction.strip():
            raise InputError("instruction", instruction, "describe the motion, e.g. 'make the person raise the left arm'")
        if frames is not None:
            height, width = int(frames.shape[1]), int(frames.shape[2])
        if height is None or width is None:
            raise InputError("frames", None, "pass the source frames, or height= and width=")
        origin, scale = person_frame(kp)
        feats = torch.from_numpy(skeleton_features(kp, origin, scale, width, height))[None].to(self.device)
        text, mask = self.encode_text([instruction])
        self.eval()
        out = self(text.to(self.device), mask.to(self.device), feats)
        xy = out["keypoints"][0].float().cpu().numpy()
        target = to_pixels(xy, origin, scale, width, height)
        q = self.query_states(out["memory"], out["valid"], torch.from_numpy(skeleton_features(target, origin, scale, width, height))[None].to(self.device))
        fine_p = out["fine"][0].softmax(-1)
        cat = CATEGORIES[int(out["category"][0].argmax())]
        fine = FINE_CLASSES[int(fine_p.argmax())]
        parts = tuple(p for p, on in zip(PARTS, (out["parts"][0] > 0).tolist()) if on)
        if fine == NO_CHANGE:  # the planner says the instruction asks for nothing: keep the source skeleton
            target = kp.copy()
        moved = motion_summary(kp, target, scale)
        changes = bool(moved)
        return SkeletonPlan(reasoning_text(cat, fine, float(fine_p.max()), parts, moved), target, q[0].cpu(), cat, fine,
                            round(float(fine_p.max()), 4), parts, changes, {"origin": origin.tolist(), "scale": scale})

    # ---- persistence

    def save_pretrained(self, directory: str | Path, metadata: dict | None = None) -> Path:
        return save_model_folder(directory, KIND, self.config, self.state_dict(), metadata)

    @classmethod
    def from_pretrained(cls, directory: str | Path | None = None, device: str | torch.device | None = None, **_: Any) -> BuiltinSkeletonPlanner:
        directory = Path(directory) if directory is not None else WEIGHTS_DIR
        model = cls(read_model_config(directory, KIND, SkeletonPlannerConfig, "BuiltinSkeletonPlanner.save_pretrained"))
        model.load_state_dict(load_state_dict(directory / "model.safetensors"))
        return model.eval().to(device or "cpu")

    def to(self, *args: Any, **kwargs: Any) -> BuiltinSkeletonPlanner:  # keep the dtype: the planner is tiny, float32 throughout
        kwargs.pop("dtype", None)
        args = tuple(a for a in args if not isinstance(a, torch.dtype))
        return super().to(*args, **kwargs)


# ---------------------------------------------------------------------------- the reasoning text


def motion_summary(source: np.ndarray, target: np.ndarray, scale: float, threshold: float = 0.25) -> list[dict]:
    """Per body part that moves in ``target`` against ``source`` by more than ``threshold`` torso lengths: the
    joint that moves most, its largest displacement, the frame and the direction (image terms)."""
    out = []
    both = (source[..., 2] > 0) & (target[..., 2] > 0)
    d = (target[..., :2] - source[..., :2]) * both[..., None]
    dist = np.linalg.norm(d, axis=-1) / scale
    for part in PARTS:
        joints = list(PART_JOINTS[part])
        if part == "whole body position":
            hips_s, hips_t = source[:, [11, 12], :2].mean(1), target[:, [11, 12], :2].mean(1)
            shift = (hips_t - hips_s) / scale
            m = np.linalg.norm(shift, axis=1)
            f = int(np.argmax(m))
            if m[f] > threshold:
                out.append({"part": part, "joint": "hip centre", "frame": f, "amount": round(float(m[f]), 2), "direction": _direction(shift[f])})
            continue
        sub = dist[:, joints]
        f, j = np.unravel_index(int(np.argmax(sub)), sub.shape)
        if sub[f, j] > threshold:
            out.append({"part": part, "joint": COCO17_NAMES[joints[j]].replace("_", " "), "frame": int(f),
                        "amount": round(float(sub[f, j]), 2), "direction": _direction(d[f, joints[j]])})
    return out


def _direction(v: np.ndarray) -> str:
    x, y = float(v[0]), float(v[1])
    words = []
    if abs(y) > 0.4 * abs(x):
        words.append("up" if y < 0 else "down")
    if abs(x) > 0.4 * abs(y):
        words.append("towards the image's left" if x < 0 else "towards the image's right")
    return " and ".join(words)


def reasoning_text(category: str, fine: str, confidence: float, parts: Sequence[str], moved: list[dict]) -> str:
    """The chain of thought (spec b.4's four questions), written from the planner's own predictions."""
    if not moved:
        return ("(1) Who: the person in the clip. (2) Which parts: none — the planned skeleton stays within a quarter "
                "torso length of the source, so the instruction asks for no change the planner can make. "
                "(3) How: the source motion is kept. (4) Fixed: everything.")
    how = "; ".join(f"the {m['joint']} moves {m['direction']} by {m['amount']} torso lengths (most at frame {m['frame']})" for m in moved)
    fixed = [p for p in PARTS if p not in {m["part"] for m in moved}]
    return (f"(1) Who: the person in the clip. (2) Which parts: {', '.join(m['part'] for m in moved)} "
            f"(the motion reads as {category.replace('_', ' ')}: {fine.replace('_', ' ')}, p={confidence:.2f}; "
            f"parts predicted to move: {', '.join(parts) or 'none'}). (3) How: {how}. "
            f"(4) Fixed: {', '.join(fixed) or 'nothing else'}, the person's identity, the background and the other objects.")


# ---------------------------------------------------------------------------- loading


def load_skeleton_planner(spec: str | Path = "builtin", device: Any = None, dtype: Any = None, trust_remote_code: bool = False,
                          **_: Any) -> Any:
    """A SCoT planner for ``spec``: ``builtin`` (weights/builtin/skeleton_planner), a folder written by
    ``BuiltinSkeletonPlanner.save_pretrained``, or a Qwen2.5-VL checkpoint / saved hf planner folder."""
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise InputError("planner", spec, "pass 'builtin' or a planner folder")
    if str(spec) == "builtin":
        if not (WEIGHTS_DIR / "model.safetensors").is_file():
            raise InputError("planner", "builtin", "the builtin SCoT planner's weights are missing from weights/builtin/skeleton_planner; "
                                                   "restore them from git or train them with `make weights`")
        return BuiltinSkeletonPlanner.from_pretrained(WEIGHTS_DIR, device=device)
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise InputError("planner", str(spec), "no such folder; pass 'builtin', a saved planner or a Qwen2.5-VL checkpoint folder")
    try:
        kind = json.loads((path / "config.json").read_text()).get("model")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind == KIND:
        return BuiltinSkeletonPlanner.from_pretrained(path, device=device)
    from planners.skeleton_cot_hf import HFSkeletonPlanner

    return HFSkeletonPlanner.from_pretrained(path, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
