"""AnyMotion's Skeleton Chain-of-Thought planner on a transformers Qwen2.5-VL (spec b.4), the ``hf`` backend.

    planner = HFSkeletonPlanner.from_pretrained("path/to/Qwen2.5-VL-3B-Instruct", query_dim=4096)
    plan = planner.plan(frames, source_keypoints, "make the person raise the left arm")
    plan.reasoning          # the answer's <think> text
    plan.target_keypoints   # (T, 17, 3) COCO-17 pixels
    plan.queries            # (num_queries, query_dim) MetaQuery states, float32 on the CPU

**The sequence** (spec b.4)::

    system:    You are a human-motion editing planner.
    user:      <image f0> <image f_mid> <image f_last>        (num_images source frames, default 3)
               Source skeleton ... <skeleton> f0: [[x,y,v],...17] ... </skeleton>   (num_keyframes keyframes)
               Instruction: {instruction}  + what to answer
    assistant: <think> (1) who (2) which parts (3) how (4) what stays fixed </think>
               <skeleton> the target on the same keyframes </skeleton>
               [begin] q_0 ... q_{N-1} [end]                   (MetaQueries: learned embeddings, not tokens)

Skeletons are written with ``core.keypoints.keypoints_to_text`` (spec b.3: integers in ``[0, 1000)`` relative to
the image, ``[-1,-1,0]`` for a joint not seen). [PROPOSED] The prompt carries ``num_keyframes`` (default 4)
evenly spaced keyframes, not all T frames (T x 17 joints would be thousands of tokens); the answer's
keyframes are linearly interpolated to every frame (``interpolate_keyframes``). The answer comes from the
wrapper's ``generate``: greedy without a generator, sampled from it otherwise. An answer without a readable
skeleton (what an untrained or tiny random model writes) is no error: the plan keeps the source skeleton,
``changes=False``, and its reasoning says so and quotes the answer.

**MetaQueries** (spec b.1 / b.4): ``num_queries`` (default 16 [PROPOSED]; MetaQuery's code uses 64) learned
vectors of the backbone's hidden size, framed by two learned begin / end vectors, are placed after the prompt
and the generated answer, so under causal attention they read the frames, the source skeleton, the
instruction, the reasoning and the target skeleton. One forward with ``inputs_embeds`` (the model's own input
embeddings, its vision tower's features scattered onto the image placeholders exactly as its multimodal
forward does, M-RoPE positions from its ``get_rope_index``) gives the last layer's states at the query
positions; a connector (Linear, GELU(tanh), Linear, RMSNorm with weight 1.0) maps them to ``query_dim``
(default: the backbone's hidden size; the pipeline sets the renderer's text width).

**Weights**: ``save_pretrained`` writes the VLM folder plus ``skeleton_planner.json`` and
``skeleton_planner.safetensors`` (queries, markers, connector). ``from_pretrained`` on a bare Qwen2.5-VL
checkpoint works too: the queries and connector are then initialised from a fixed seed (deterministic, but
untrained: the queries carry no meaning until a training run fits them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core.errors import InputError, MediaError
from core.keypoints import COCO17_NAMES, keypoints_to_text, parse_skeleton_text
from core.weights_io import load_state_dict, save_state_dict
from planners.hf import HFVisionLanguageModel, _append_tokens
from planners.protocol import ImagePart, Message, TextPart
from planners.skeleton_cot import (
    SkeletonPlan,
    check_keypoints,
    motion_summary,
    person_frame,
)

KIND = "hf-skeleton-cot-planner"
CONFIG_NAME, WEIGHTS_NAME = "skeleton_planner.json", "skeleton_planner.safetensors"
SYSTEM_PROMPT = "You are a human-motion editing planner."
BINS = 1000  # spec b.3: coordinates as integers in [0, 1000) relative to the image
SEED = 0  # the queries' and connector's initialisation when a folder has no planner weights
DEFAULTS = {"num_queries": 16, "query_dim": None, "num_keyframes": 4, "num_images": 3,
            # [PROPOSED] 4 keyframes x 17 joints cost ~770 tokens with Qwen's one-token-per-digit tokenizer,
            # which leaves ~500 for the reasoning
            "max_new_tokens": 1280}
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


# ---------------------------------------------------------------------------- keyframes and the answer


def keyframe_indices(num_frames: int, count: int) -> np.ndarray:
    """``count`` evenly spaced frame indices of a ``num_frames`` clip, first and last included (fewer when the
    clip is shorter)."""
    return np.unique(np.rint(np.linspace(0, num_frames - 1, max(1, min(count, num_frames)))).astype(np.int64))


def interpolate_keyframes(frames: Sequence[int], keyframes: np.ndarray, num_frames: int) -> np.ndarray:
    """Keyframes ``(K, 17, 3)`` at sorted frame indices ``frames`` -> ``(num_frames, 17, 3)``.

    [PROPOSED] Between two keyframes a joint labelled in both moves linearly and takes the nearer keyframe's
    ``v``; a joint labelled in only one takes the nearer keyframe's value (so it is unlabelled where that one
    is). Before the first / after the last keyframe the skeleton is held."""
    idx = np.asarray(frames, np.int64)
    kf = np.asarray(keyframes, np.float32)
    t = np.arange(num_frames)
    a = np.clip(np.searchsorted(idx, t, side="right") - 1, 0, len(idx) - 1)
    b = np.clip(a + 1, 0, len(idx) - 1)
    span = (idx[b] - idx[a]).astype(np.float32)
    w = np.clip(np.where(span > 0, (t - idx[a]) / np.maximum(span, 1), 0.0), 0.0, 1.0).astype(np.float32)
    ka, kb = kf[a], kf[b]
    out = np.where((w < 0.5)[:, None, None], ka, kb).copy()
    both = (ka[..., 2] > 0) & (kb[..., 2] > 0)
    lerp = ka[..., :2] + (kb[..., :2] - ka[..., :2]) * w[:, None, None]
    out[..., :2] = np.where(both[..., None], lerp, out[..., :2])
    return out.astype(np.float32)


def parse_answer(answer: str, width: int, height: int, num_frames: int, bins: int = BINS) -> tuple[str, np.ndarray]:
    """A planner answer -> ``(reasoning, target keypoints (num_frames, 17, 3) pixels)``.

    The reasoning is the ``<think>`` text (without one: the text before ``<skeleton>``); the target is the
    first ``<skeleton>`` block (``core.keypoints.parse_skeleton_text``) interpolated to every frame. Raises
    ``InputError("skeleton", ...)`` when the answer holds no readable skeleton or names a frame outside the clip."""
    if not isinstance(answer, str):
        raise InputError("answer", type(answer).__name__, "pass the planner's answer text")
    frames, keyframes = parse_skeleton_text(answer, width, height, bins)
    if frames.max() >= num_frames:
        raise InputError("skeleton", f"frame f{int(frames.max())}", f"the clip has {num_frames} frames: use f0..f{num_frames - 1}")
    think = _THINK.search(answer)
    reasoning = think.group(1).strip() if think else answer.split("<skeleton>", 1)[0].strip()
    return reasoning, interpolate_keyframes(frames, keyframes, num_frames)


def source_prompt(source_keypoints: np.ndarray, keyframes: Sequence[int], width: int, height: int, instruction: str) -> str:
    """The user turn's text: the source skeleton on ``keyframes``, the instruction and what to answer."""
    kf = [int(k) for k in keyframes]
    skeleton = keypoints_to_text(np.asarray(source_keypoints)[kf], width, height, BINS, frames=kf)
    joints = ", ".join(n.replace("_", " ") for n in COCO17_NAMES)
    return (f"Source skeleton of the person, on frames {', '.join(f'f{k}' for k in kf)} of a {len(source_keypoints)}-frame "
            f"clip: COCO-17 joints in the order {joints}; each joint [x,y,v] with x, y integers in [0, {BINS}) "
            f"relative to the image's width and height, v = 2 visible, 1 occluded, [-1,-1,0] not seen.\n"
            f"{skeleton}\nInstruction: {instruction}\n"
            "First reason inside <think>...</think>: (1) who is edited, (2) which body parts move, (3) how "
            "(directions, angles, contacts), (4) what must stay fixed. Then write the target skeleton on the same "
            "frames, in the same format, inside <skeleton>...</skeleton>.")


# ---------------------------------------------------------------------------- the planner


def _positive(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise InputError(name, value, f"pass an integer >= {minimum}")
    return int(value)


class HFSkeletonPlanner(nn.Module):
    """The SCoT planner on a transformers Qwen2.5-VL (see the module docstring).

    The module's own parameters are the MetaQueries, their begin / end markers and the connector (float32
    always, whatever the VLM's dtype); the VLM is ``self.vlm`` (an ``HFVisionLanguageModel``, its
    ``nn.Module`` is ``self.vlm.module``), kept out of this module's ``state_dict``.
    """

    backend = "hf"

    def __init__(self, vlm: HFVisionLanguageModel, num_queries: int = DEFAULTS["num_queries"], query_dim: int | None = None,
                 num_keyframes: int = DEFAULTS["num_keyframes"], num_images: int = DEFAULTS["num_images"],
                 max_new_tokens: int = DEFAULTS["max_new_tokens"]):
        super().__init__()
        if not isinstance(vlm, HFVisionLanguageModel):
            raise InputError("vlm", type(vlm).__name__, "pass an HFVisionLanguageModel (HFVisionLanguageModel.from_pretrained)")
        model = vlm.module
        for needed in ("get_rope_index", "get_image_features"):
            if not hasattr(getattr(model, "model", None), needed):
                raise InputError("vlm", type(model).__name__, "the hf skeleton planner drives a Qwen2.5-VL-style model")
        self.vlm = vlm
        self.hidden_size = int(model.config.get_text_config().hidden_size)
        self.num_queries = _positive("num_queries", num_queries)
        self.query_dim = self.hidden_size if query_dim is None else _positive("query_dim", query_dim)
        self.num_keyframes = _positive("num_keyframes", num_keyframes)
        self.num_images = _positive("num_images", num_images, 0)
        self.max_new_tokens = _positive("max_new_tokens", max_new_tokens)
        # The queries are free vectors fed as inputs_embeds, not new vocabulary rows (MetaQuery's code resizes the
        # embedding table and zeroes the gradient of the original rows with a hook): the backbone's embedding
        # table stays untouched, so nothing needs a gradient hook and a frozen backbone is simply not optimised.
        std = float(model.get_input_embeddings().weight.detach().float().std())
        g = torch.Generator().manual_seed(SEED)
        self.queries = nn.Parameter(torch.randn(self.num_queries, self.hidden_size, generator=g) * std)
        self.markers = nn.Parameter(torch.randn(2, self.hidden_size, generator=g) * std)  # begin, end
        with torch.random.fork_rng(devices=[]):  # a fixed initialisation that leaves the caller's RNG alone
            torch.manual_seed(SEED)
            self.connector = nn.Sequential(nn.Linear(self.hidden_size, self.query_dim), nn.GELU(approximate="tanh"),
                                           nn.Linear(self.query_dim, self.query_dim), nn.RMSNorm(self.query_dim))
        nn.init.ones_(self.connector[3].weight)  # MetaQuery: 1.0 for SD1.5-like decoders (sqrt(5.5) for Sana)
        super().to(self.vlm.device)

    @property
    def config(self) -> dict[str, Any]:
        return {"num_queries": self.num_queries, "query_dim": self.query_dim, "num_keyframes": self.num_keyframes,
                "num_images": self.num_images, "max_new_tokens": self.max_new_tokens}

    @property
    def device(self) -> torch.device:
        return self.vlm.device

    # ---- the prompt

    def messages(self, frames: np.ndarray | None, source_keypoints: np.ndarray, instruction: str,
                 height: int | None = None, width: int | None = None) -> list[Message]:
        """The system and user turns (spec b.4) for one clip; checks every argument (``InputError``)."""
        kp = check_keypoints(source_keypoints)
        if not isinstance(instruction, str) or not instruction.strip():
            raise InputError("instruction", instruction, "describe the motion, e.g. 'make the person raise the left arm'")
        if frames is not None:
            if not isinstance(frames, np.ndarray) or frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or 0 in frames.shape:
                raise InputError("frames", f"{type(frames).__name__} {getattr(frames, 'shape', '')} {getattr(frames, 'dtype', '')}".strip(),
                                 "pass the source clip as RGB uint8 frames shaped (T, H, W, 3)")
            if len(frames) != len(kp):
                raise InputError("frames", f"{len(frames)} frames for {len(kp)} skeleton frames", "pass one skeleton per frame")
            height, width = int(frames.shape[1]), int(frames.shape[2])
        if height is None or width is None:
            raise InputError("frames", None, "pass the source frames, or height= and width=")
        height, width = _positive("height", height), _positive("width", width)
        content: list[Any] = []
        if frames is not None and self.num_images:
            shown = keyframe_indices(len(frames), self.num_images)
            content.append(TextPart(f"Source frames {', '.join(f'f{i}' for i in shown)}:"))
            content += [ImagePart(frames[i]) for i in shown]
        content.append(TextPart(source_prompt(kp, keyframe_indices(len(kp), self.num_keyframes), width, height, instruction)))
        return [Message("system", SYSTEM_PROMPT), Message("user", content)]

    # ---- the MetaQueries

    def query_states(self, messages: Sequence[Message], answer: str) -> torch.Tensor:
        """MetaQuery states ``(num_queries, query_dim)`` (float32, on the model's device) after ``messages``
        (their chat template with the generation prompt) and the assistant's ``answer`` text.

        One forward of the language model on ``inputs_embeds``: the prompt's and answer's token embeddings
        (image placeholders replaced by the vision tower's features, as the model's own forward does), then
        ``[begin] queries [end]``; M-RoPE positions from the model's ``get_rope_index`` (the queries and markers
        count as text). Reads the last layer (after the final norm) at the query positions. Runs under the
        caller's grad mode, so a training loop can backpropagate into the queries and connector (and the VLM)."""
        if not isinstance(answer, str):
            raise InputError("answer", type(answer).__name__, "pass the assistant's answer text")
        model = self.vlm.module
        tok = self.vlm.processor.tokenizer
        inputs = self.vlm._chat_inputs(messages)
        if "pixel_values_videos" in inputs:
            raise InputError("messages", "a video part", "the skeleton planner sends source frames as images")
        n = self.num_queries + 2
        filler = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id  # overwritten below
        inputs = _append_tokens(inputs, [int(i) for i in tok.encode(answer, add_special_tokens=False)] + [int(filler)] * n)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        x = model.get_input_embeddings()(ids)
        if "pixel_values" in inputs:
            feats = model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"]).pooler_output
            feats = torch.cat(list(feats), 0).to(x.device, x.dtype)
            slots = (ids == model.config.image_token_id)[..., None].expand_as(x)
            if int(slots[..., 0].sum()) != len(feats):
                raise RuntimeError(f"{len(feats)} image features for {int(slots[..., 0].sum())} image tokens")
            x = x.masked_scatter(slots, feats)
            positions, _ = model.model.get_rope_index(ids, inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"],
                                                      attention_mask=mask)
        else:  # text only: M-RoPE's three axes are the plain positions
            positions = torch.arange(ids.shape[1], device=ids.device).view(1, 1, -1).expand(3, 1, -1)
        tail = torch.cat([self.markers[:1], self.queries, self.markers[1:]]).to(x.device, x.dtype)
        x = torch.cat([x[:, :-n], tail[None]], 1)
        out = model.model(inputs_embeds=x, attention_mask=mask, position_ids=positions, use_cache=False)
        h = out.last_hidden_state[0, -n + 1:-1]
        return self.connector(h.to(self.connector[0].weight.device, torch.float32))

    # ---- planning

    @torch.no_grad()
    def plan(self, frames: np.ndarray | None, source_keypoints: np.ndarray, instruction: str, generator: Any = None,
             height: int | None = None, width: int | None = None) -> SkeletonPlan:
        """Plan the target skeleton of one clip (``frames`` ``(T, H, W, 3)`` uint8, ``source_keypoints``
        ``(T, 17, 3)`` pixels). ``generator`` (a ``torch.Generator`` or int seed): sample the answer from it;
        None: greedy. Without frames pass ``height`` / ``width`` (the prompt then has no images)."""
        kp = check_keypoints(source_keypoints)
        messages = self.messages(frames, kp, instruction, height, width)
        if frames is not None:
            height, width = int(frames.shape[1]), int(frames.shape[2])
        self.eval()
        answer = self.vlm.generate(messages, max_new_tokens=self.max_new_tokens, do_sample=generator is not None,
                                   generator=generator)[0]
        try:
            scale = person_frame(kp)[1]
        except InputError:  # no frame with shoulders and hips: measure motion in quarters of the image height
            scale = height / 4
        try:
            reasoning, target = parse_answer(answer, width, height, len(kp))
            parsed = True
        except InputError as e:
            quote = answer[:200] + ("..." if len(answer) > 200 else "")
            reasoning = (f"The planner's answer held no readable skeleton ({e.hint}), so the source skeleton is kept. "
                         f"It wrote: {quote!r}")
            target, parsed = kp.copy(), False
        moved = motion_summary(kp, target, scale) if parsed else []
        queries = self.query_states(messages, answer).float().cpu()
        return SkeletonPlan(reasoning, target, queries, parts=tuple(m["part"] for m in moved), changes=bool(moved),
                            extras={"answer": answer, "parsed": parsed, "scale": float(scale),
                                    "keyframes": keyframe_indices(len(kp), self.num_keyframes).tolist()})

    # ---- persistence

    def save_pretrained(self, directory: str | Path) -> Path:
        """The VLM folder (model + processor) plus ``skeleton_planner.json`` / ``.safetensors``."""
        directory = self.vlm.save_pretrained(directory)
        (directory / CONFIG_NAME).write_text(json.dumps({"kind": KIND, **self.config}, indent=1))
        save_state_dict(self.state_dict(), directory / WEIGHTS_NAME)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None,
                        trust_remote_code: bool = False, video_fps: float = 1.0, **kw: Any) -> HFSkeletonPlanner:
        """A folder written by ``save_pretrained``, or a bare Qwen2.5-VL checkpoint (a local folder or an HF cache
        id): then the queries and connector are initialised from a fixed seed, untrained. ``kw``: ``num_queries``,
        ``query_dim``, ``num_keyframes``, ``num_images``, ``max_new_tokens`` (the first two must match a saved
        planner's weights)."""
        if unknown := sorted(set(kw) - set(DEFAULTS)):
            raise InputError(unknown[0], kw[unknown[0]], f"known planner settings: {', '.join(DEFAULTS)}")
        vlm = HFVisionLanguageModel.from_pretrained(directory, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                                                    video_fps=video_fps)
        path = Path(directory) / CONFIG_NAME
        config: dict[str, Any] = {}
        if path.is_file():
            try:
                config = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise MediaError(path, f"no readable planner config ({type(e).__name__})", "pass a folder written by save_pretrained") from None
            if not isinstance(config, dict) or config.pop("kind", None) != KIND:
                raise MediaError(path, f"not a {KIND} config", "pass a folder written by HFSkeletonPlanner.save_pretrained")
            if unknown := sorted(set(config) - set(DEFAULTS)):
                raise MediaError(path, f"unknown config keys {unknown}", "the folder was written by a different version")
            for key in ("num_queries", "query_dim"):
                if key in kw and kw[key] != config.get(key):
                    raise InputError(key, kw[key], f"the saved planner has {key}={config.get(key)}: its weights fix it")
        planner = cls(vlm, **{**config, **kw})
        weights = Path(directory) / WEIGHTS_NAME
        if config and weights.is_file():
            try:
                planner.load_state_dict(load_state_dict(weights, device=planner.device))
            except RuntimeError as e:
                raise MediaError(weights, f"weights do not fit the config ({str(e).splitlines()[0]})", "re-save the planner") from None
        elif config:
            raise MediaError(weights, "the planner config has no weights beside it", "pass a folder written by save_pretrained")
        return planner.eval()

    def to(self, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> HFSkeletonPlanner:
        """Move / cast the VLM (``None`` leaves that setting alone); the queries and connector follow its device
        and stay float32."""
        self.vlm.to(device=device, dtype=dtype)
        return super().to(self.vlm.device)
