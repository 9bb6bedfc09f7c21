"""The planner's token sequence: roles, segment ids, the block attention mask and M-RoPE positions (spec b.2).

A planner sequence is laid out in Qwen's chat format (no ``<|im_end|>`` separators, the port's reading)::

    <|im_start|>system\\n{task system prompt}
    <|im_start|>user\\n{instruction}  <|vision_start|>{source tokens}<|vision_end|> ...
    <|im_start|>assistant\\n[chain-of-thought text]<|vision_start|>{target placeholders x N}<|vision_end|>

Every token has a role (``TokenType``): text ``t``, planning ``p``, image/video input ``i`` and target
output ``o``; padding (``PAD``, for batching sequences of different lengths) is ours. ``segment_ids`` are
``arange(L)`` except that every target run (and every planning run) shares one id, so the mask can tell
"the same block" from "another block of the same role".

The mask (``block_attention_mask``), exactly the rule of spec b.2:

* every query sees text and image-input keys causally (``k <= q``);
* a ``p`` query also sees the ``p`` keys of its own segment, in both directions;
* an ``o`` query also sees the ``o`` keys of its own segment, in both directions.

So a target block is bidirectional inside, sees all context before it, and nothing sees a target
block from outside (neither later text nor another block); planning tokens do not see targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from numbers import Integral

import torch

from core.errors import InputError


class TokenType(IntEnum):
    """Token roles of spec b.2 (``token_type``); ``PAD`` marks batch padding (never attended to)."""

    PAD = -1
    TEXT = 0
    PLANNING = 1
    INPUT = 2
    TARGET = 3


# The builtin planner's task system prompts (spec b.2, ``bernini/training/data.py``). t2v, v2v, vi2v and ads2v
# are the spec's wording; the others were [PROPOSED] in the same pattern; the release's r2v / rv2v wording is
# OFFICIAL_SYSTEM_PROMPTS below (the builtin keeps its own: it was trained on these).
SYSTEM_PROMPTS: dict[str, str] = {
    "t2v": "You are a helpful assistant specialized in text-to-video generation.",
    "v2v": "You are a helpful assistant specialized in video editing.",
    "vi2v": "You are a helpful assistant specialized in video editing on content propagation.",
    "ads2v": "You are a helpful assistant specialized in ads insertion.",
    "t2i": "You are a helpful assistant specialized in text-to-image generation.",
    "i2i": "You are a helpful assistant specialized in image editing.",
    "i2v": "You are a helpful assistant specialized in image-to-video generation.",
    "r2v": "You are a helpful assistant specialized in reference-to-video generation.",
    "rv2v": "You are a helpful assistant specialized in reference-guided video editing.",
}


# The released planner's system prompts (T8mars bernini_v2/template.py SYSTEM_PROMPTS, the official inference
# template; xocialize's bernini_template agrees); any other task gets "default". SYSTEM_PROMPTS above stays
# the builtin planner's (its r2v / rv2v wording is what it was trained on).
OFFICIAL_SYSTEM_PROMPTS: dict[str, str] = {
    "default": "You are a helpful assistant.",
    "t2i": "You are a helpful assistant specialized in text-to-image generation.",
    "t2v": "You are a helpful assistant specialized in text-to-video generation.",
    "i2i": "You are a helpful assistant specialized in image editing.",
    "v2v": "You are a helpful assistant specialized in video editing.",
    "r2v": "You are a helpful assistant specialized in subject-to-video generation.",
    "rv2v": "You are a helpful assistant specialized in video editing with reference.",
}


def official_system_prompt(task: str) -> str:
    return OFFICIAL_SYSTEM_PROMPTS.get(task, OFFICIAL_SYSTEM_PROMPTS["default"])


def _check_roles(token_type: torch.Tensor, segment_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(token_type, torch.Tensor) or token_type.ndim not in (1, 2) or token_type.dtype.is_floating_point:
        raise InputError("token_type", getattr(token_type, "shape", token_type),
                         "pass an integer tensor (L,) or (B, L) of TokenType values")
    if not isinstance(segment_ids, torch.Tensor) or segment_ids.shape != token_type.shape:
        raise InputError("segment_ids", getattr(segment_ids, "shape", segment_ids),
                         f"pass an integer tensor of token_type's shape {tuple(token_type.shape)}")
    valid = {int(t) for t in TokenType}
    bad = sorted({int(v) for v in token_type.unique().tolist()} - valid)
    if bad:
        raise InputError("token_type", bad, f"use TokenType values {sorted(valid)}")
    if token_type.ndim == 1:
        token_type, segment_ids = token_type[None], segment_ids[None]
    return token_type, segment_ids


def block_attention_mask(token_type: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """Boolean ``(B, L, L)``: ``[b, q, k]`` is True where query ``q`` may attend to key ``k`` (spec b.2).

    ``token_type`` / ``segment_ids``: ``(L,)`` or ``(B, L)``. Padding keys are never seen; a padding query
    sees itself only, so no row is empty (an all-masked row would give NaNs in softmax).
    """
    tt, seg = _check_roles(token_type, segment_ids)
    length = tt.shape[-1]
    q_idx = torch.arange(length, device=tt.device)[:, None]
    k_idx = torch.arange(length, device=tt.device)[None, :]
    causal = (k_idx <= q_idx)[None]
    tq, tk = tt[:, :, None], tt[:, None, :]
    same_segment = seg[:, :, None] == seg[:, None, :]
    context_key = (tk == TokenType.TEXT) | (tk == TokenType.INPUT)
    allowed = context_key & causal
    allowed |= (tq == TokenType.PLANNING) & (tk == TokenType.PLANNING) & same_segment
    allowed |= (tq == TokenType.TARGET) & (tk == TokenType.TARGET) & same_segment
    allowed &= tq != TokenType.PAD
    eye = torch.eye(length, dtype=torch.bool, device=tt.device)[None]
    return allowed | (eye & (tq == TokenType.PAD))


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The 4-D additive form ``(B, 1, L, L)`` transformers takes as ``attention_mask``: 0 where allowed, the
    dtype's most negative finite value elsewhere (finite, so eager attention cannot produce NaNs)."""
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool or allowed.ndim != 3:
        raise InputError("allowed", getattr(allowed, "shape", allowed), "pass the (B, L, L) bool mask")
    if not dtype.is_floating_point:
        raise InputError("dtype", dtype, "use a floating dtype (the model's)")
    out = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return out.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def grid_positions(base: int, grid: tuple[int, int, int], t_step: int) -> torch.Tensor:
    """M-RoPE positions ``(3, t*h*w)`` of a vision block at ``base`` (spec b.2): ``t = base + k * t_step``,
    ``h = base + row``, ``w = base + col`` on the merged grid, raster order (t, then h, then w)."""
    t, h, w = grid
    tt = base + torch.arange(t) * t_step
    hh = base + torch.arange(h)
    ww = base + torch.arange(w)
    g = torch.meshgrid(tt, hh, ww, indexing="ij")
    return torch.stack([a.reshape(-1) for a in g])


def check_grid(name: str, grid: object) -> tuple[int, int, int]:
    """``(T', h, w)`` as three positive ints, else ``InputError`` naming ``name``."""
    ok = (isinstance(grid, (tuple, list, torch.Size)) and len(grid) == 3
          and all(isinstance(n, Integral) and not isinstance(n, bool) and n > 0 for n in grid))
    if not ok:
        raise InputError(name, grid, "use (frames, height, width) in tokens: three positive integers, e.g. (2, 4, 4)")
    return int(grid[0]), int(grid[1]), int(grid[2])


@dataclass(eq=False)
class VisualTokens:
    """A source or target in ViT token space: ``tokens`` ``(t, h, w, D)`` on the merged grid, and its kind.

    Qwen2.5-VL: the vision tower's 2x2-merged output (D = the LM width); builtin: ViT patch tokens (D = the
    ViT width). ``kind`` "video" spaces M-RoPE time by the planner's ``video_t_step``; "image" by 0.
    """

    tokens: torch.Tensor
    kind: str = "video"

    def __post_init__(self):
        if not isinstance(self.tokens, torch.Tensor) or self.tokens.ndim != 4 or not self.tokens.is_floating_point():
            raise InputError("tokens", getattr(self.tokens, "shape", self.tokens),
                             "pass a float tensor (t, h, w, D) of ViT tokens on the merged grid")
        if min(self.tokens.shape[:3]) < 1:
            raise InputError("tokens", tuple(self.tokens.shape), "the grid needs at least one token")
        if self.kind not in ("image", "video"):
            raise InputError("kind", self.kind, "use 'image' or 'video'")

    @property
    def grid(self) -> tuple[int, int, int]:
        return tuple(int(n) for n in self.tokens.shape[:3])

    def __repr__(self) -> str:
        return f"VisualTokens(grid={self.grid}, dim={self.tokens.shape[-1]}, kind={self.kind!r})"


@dataclass
class PlannerSequence:
    """One planner input, built piece by piece; ``embeds`` rows are in the backbone's input space.

    ``labels`` (``-100`` = no loss) holds, at position ``i``, the token id that the logits of position
    ``i - 1`` must predict (the chain-of-thought tokens and the token that closes them).
    """

    embeds: list[torch.Tensor] = field(default_factory=list)
    token_type: list[int] = field(default_factory=list)
    segment_ids: list[int] = field(default_factory=list)
    positions: list[torch.Tensor] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    target_index: list[torch.Tensor] = field(default_factory=list)
    next_position: int = 0
    visual_count: int = 0

    def __len__(self) -> int:
        return len(self.token_type)

    def add_text(self, embeds: torch.Tensor, ids: list[int] | None = None, loss: bool = False) -> None:
        """Text rows ``(n, H)``: positions ``t = h = w`` count up by one each. ``loss``: CE on ``ids`` here."""
        n = embeds.shape[0]
        if n == 0:
            return
        start = len(self)
        self.embeds.append(embeds)
        self.token_type += [int(TokenType.TEXT)] * n
        self.segment_ids += list(range(start, start + n))
        p = self.next_position + torch.arange(n)
        self.positions.append(p.expand(3, n))
        self.labels += list(ids) if loss and ids is not None else [-100] * n
        self.next_position += n

    def add_planning(self, embeds: torch.Tensor) -> None:
        """A run of planning tokens (``p``): one shared segment id (its first row's index), text positions.
        Their role is undocumented in the spec (b.9); the mask treats them as b.2 says."""
        n = embeds.shape[0]
        start = len(self)
        self.add_text(embeds)
        self.token_type[start:] = [int(TokenType.PLANNING)] * n
        self.segment_ids[start:] = [start] * n

    def add_visual(self, embeds: torch.Tensor, grid: tuple[int, int, int], role: TokenType, t_step: int) -> torch.Tensor:
        """A vision block (``INPUT`` or ``TARGET``) of ``t*h*w`` rows at the next position; text after it resumes
        at the block's largest position + 1. A target run shares the segment id ``visual_id + 1`` (spec b.2,
        visual_id = the index of this visual item in the sequence [PROPOSED]). Returns the rows' indices."""
        n = embeds.shape[0]
        if n != grid[0] * grid[1] * grid[2]:
            raise InputError("grid", grid, f"has {grid[0] * grid[1] * grid[2]} tokens but {n} rows were given")
        start = len(self)
        pos = grid_positions(self.next_position, grid, t_step if grid[0] > 1 else 0)
        self.embeds.append(embeds)
        self.token_type += [int(role)] * n
        if role == TokenType.TARGET:
            self.segment_ids += [self.visual_count + 1] * n
        else:
            self.segment_ids += list(range(start, start + n))
        self.positions.append(pos)
        self.labels += [-100] * n
        self.next_position = int(pos.max()) + 1
        self.visual_count += 1
        index = torch.arange(start, start + n)
        if role == TokenType.TARGET:
            self.target_index.append(index)
        return index

    def tensors(self) -> dict[str, torch.Tensor]:
        """``embeds (L, H)``, ``token_type (L,)``, ``segment_ids (L,)``, ``position_ids (3, L)``, ``labels (L,)``,
        ``target_index (N,)``: the target rows, grid raster order."""
        device = self.embeds[0].device
        return {
            "embeds": torch.cat(self.embeds),
            "token_type": torch.tensor(self.token_type, dtype=torch.long, device=device),
            "segment_ids": torch.tensor(self.segment_ids, dtype=torch.long, device=device),
            "position_ids": torch.cat(self.positions, 1).to(device),
            "labels": torch.tensor(self.labels, dtype=torch.long, device=device),
            "target_index": (torch.cat(self.target_index) if self.target_index
                             else torch.zeros(0, dtype=torch.long)).to(device),
        }


def pad_batch(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Right-pad sequences from ``PlannerSequence.tensors`` to one batch; pads are ``TokenType.PAD``."""
    length = max(it["embeds"].shape[0] for it in items)
    h = items[0]["embeds"].shape[1]
    ref = items[0]["embeds"]
    b = len(items)
    embeds = ref.new_zeros(b, length, h)
    token_type = torch.full((b, length), int(TokenType.PAD), dtype=torch.long, device=ref.device)
    segment_ids = torch.arange(length, device=ref.device).repeat(b, 1)
    position_ids = torch.zeros(3, b, length, dtype=torch.long, device=ref.device)
    labels = torch.full((b, length), -100, dtype=torch.long, device=ref.device)
    for i, it in enumerate(items):
        n = it["embeds"].shape[0]
        embeds[i, :n] = it["embeds"]
        token_type[i, :n] = it["token_type"]
        segment_ids[i, :n] = it["segment_ids"]
        position_ids[:, i, :n] = it["position_ids"]
        labels[i, :n] = it["labels"]
    return {"embeds": embeds, "token_type": token_type, "segment_ids": segment_ids,
            "position_ids": position_ids, "labels": labels}


# Qwen2.5-VL's ViT sampling of a target (spec b.2, [PORT]): patch 14, temporal patch 2, 2x2 merge,
# pixels by ``smart_resize`` (factor 28, 3136..50176 pixels); ViT at 2 fps against the VAE's 16.
VIT_FACTOR, VIT_MIN_PIXELS, VIT_MAX_PIXELS, VIT_PATCH, VIT_MERGE = 28, 3136, 50176, 14, 2


def target_grid(num_frames: int, height: int, width: int, *, min_pixels: int = VIT_MIN_PIXELS,
                max_pixels: int = VIT_MAX_PIXELS) -> tuple[int, int, int]:
    """The merged target grid (T', h, w) of a t2v target of ``num_frames`` frames at ``height`` x ``width``.

    ``F = min(max(2, 2 floor(frames / 16)), 2 floor(frames / 2))`` ViT frames, ``T' = F / 2``; the frame is
    resized by transformers' Qwen ``smart_resize``; patches of 14 merged 2x2. 81 frames at 480x832 give the
    patch grid (5, 12, 20), i.e. (5, 6, 10) merged: N = 300 tokens (spec b.2).
    """
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    for name, v in (("num_frames", num_frames), ("height", height), ("width", width)):
        if not isinstance(v, Integral) or isinstance(v, bool) or v < 1:
            raise InputError(name, v, "use a positive integer")
    if num_frames < 2:
        raise InputError("num_frames", num_frames, "a video target needs at least 2 frames")
    frames = min(max(2, 2 * (num_frames // 16)), 2 * (num_frames // 2))
    try:
        h, w = smart_resize(int(height), int(width), VIT_FACTOR, min_pixels, max_pixels)
    except ValueError as e:
        raise InputError("height", (height, width), f"{e}; use a less extreme aspect ratio") from None
    cell = VIT_PATCH * VIT_MERGE
    return frames // 2, h // cell, w // cell


def target_token_count(num_frames: int, height: int, width: int, **kwargs) -> int:
    """``N = grid_t * grid_h * grid_w / 4`` target tokens (spec b.2); bounded by ``num_mask_token = 4096``."""
    t, h, w = target_grid(num_frames, height, width, **kwargs)
    return t * h * w


def planner_frame_indices(total: int, source_fps: float = 16.0, planner_fps: float = 2.0, frame_factor: int = 2,
                          max_frames: int | None = None) -> list[int]:
    """The source frames the released planner's ViT reads (T8mars qwen.py ``planner_video_frame_indices``, the
    official 2-fps even-count policy): ``floor(total / source_fps * planner_fps / 2) * 2`` frames (at least 2,
    at most ``max_frames`` rounded down to even), spread evenly over the clip, rounded."""
    import math

    if not isinstance(total, Integral) or total < 1 or not source_fps > 0 or not planner_fps > 0:
        raise InputError("frames", (total, source_fps, planner_fps), "use a clip with frames and positive frame rates")
    count = max(math.floor(total / source_fps * planner_fps / frame_factor) * frame_factor, frame_factor)
    if max_frames is not None:
        count = min(count, math.floor(max_frames / frame_factor) * frame_factor)
    count = max(count, frame_factor)
    return torch.linspace(0, total - 1, count).round().long().tolist()
