"""HUMOR's template-grouped reward models: which of two memes of the same template is funnier (spec b.3).

- ``BuiltinMemeRM``: a pointwise Bradley-Terry scorer r(template image, caption), p(a > b) = sigmoid(r_a - r_b),
  trained with the reward-model loss (BT + reward centring, ``training.group_rl.reward_model_loss``, TRL's) on
  worldgen's noisy pairs within templates (``training/humor_rm.py``). It reads the picture through the frozen
  builtin ViT (patch tokens, plus the builtin VLM's per-patch object / colour / shape read-out) and the caption
  through MiniLM token states (top and bottom box as two segments), one small transformer over both, a learned
  [CLS] read out to a scalar.
  **Deviation, stated:** the published reward model sees the two *rendered* memes; at the builtin's 64x64 the
  ViT cannot read rendered text, so the builtin scores the template image and the caption text that the
  rendering draws on it (the same information, minus typography) [PROPOSED].
- ``VLMJudgeRM``: the LightRFT pairwise judge as published (its prompt with the user request and both texts,
  "Candidate 1 / 2 image:", each pair judged once, its parser) on any VLM; the default for a transformers
  checkpoint without a trained head;
- ``HFPairwiseRM``: the author's trained head [RM-CODE], loaded from ``classification_head.pt`` beside the base VLM
  and an optional LoRA adapter (``load_pairwise_rm``): the critic prompt with both rendered memes, attention pooling
  over the last hidden states (4 heads, a learned query, position bias ``3.0 * i / S``, no output projection),
  ``Linear(hidden, 2)``; the published decision is the argmax per ordered pair, ours (softmax, symmetrised over both
  orders) a named option.

Each gives ``prefer(image, caption_a, caption_b) -> p(a better)``, and
``judge(...)`` the published judge's reply text (``Image 1 score`` / ``Image 2 score`` / ``Winner``), so either
drops into ``training.group_rl.make_group_pairwise_reward`` as the judge.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from core.errors import InputError, MediaError

WEIGHTS = Path(__file__).resolve().parents[1] / "weights" / "builtin" / "meme_rm"
KIND = "builtin-meme-rm"
Caption = Sequence[str]


def _boxes(caption: Any) -> list[str]:
    from planners.meme_cot import boxes_from_caption

    return boxes_from_caption(caption)


def judge_reply(p_first: float) -> str:
    """A preference ``p(first better)`` as the published judge's reply: scores 10p and 10(1 - p), which the
    published normalisation s_a / (s_a + s_b) turns back into p."""
    p = float(np.clip(p_first, 0.0, 1.0))
    winner = "1" if p > 0.5 else "2" if p < 0.5 else "tie"
    return f"Image 1 score: {10 * p:.3f}\nImage 2 score: {10 * (1 - p):.3f}\nWinner: {winner}\nReason: reward model preference {p:.3f}"


# ---- the builtin pointwise scorer --------------------------------------------------------------------


@dataclass(frozen=True)
class MemeRMConfig:
    """[PROPOSED] sizes: small enough to train in minutes on one CPU core."""

    image_dim: int = 192 + 19  # builtin ViT width + P(object), 10 colours, 8 shapes
    text_dim: int = 384  # MiniLM
    width: int = 128
    heads: int = 4
    layers: int = 2
    max_text: int = 24  # MiniLM tokens per box


class BuiltinMemeRM(nn.Module):
    """r(image, caption): see the module docstring. ``forward(image_tokens, text, text_mask) -> (B,)``."""

    def __init__(self, config: MemeRMConfig = MemeRMConfig()):
        super().__init__()
        self.config = c = config
        self.image_in = nn.Sequential(nn.LayerNorm(c.image_dim), nn.Linear(c.image_dim, c.width))
        self.text_in = nn.Sequential(nn.LayerNorm(c.text_dim), nn.Linear(c.text_dim, c.width))
        self.segment = nn.Embedding(3, c.width)  # image, box 1, box 2
        self.image_pos = nn.Parameter(torch.zeros(64, c.width))
        self.text_pos = nn.Parameter(torch.zeros(c.max_text, c.width))
        self.cls = nn.Parameter(torch.zeros(1, 1, c.width))
        layer = nn.TransformerEncoderLayer(c.width, c.heads, 4 * c.width, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, c.layers, enable_nested_tensor=False)
        self.out = nn.Sequential(nn.LayerNorm(c.width), nn.Linear(c.width, 1))
        nn.init.normal_(self.image_pos, std=0.02)
        nn.init.normal_(self.text_pos, std=0.02)
        self._features: dict = {}

    def forward(self, image_tokens: torch.Tensor, text: torch.Tensor, text_mask: torch.Tensor) -> torch.Tensor:
        """``image_tokens`` (B, P, image_dim), ``text`` (B, 2, L, 384), ``text_mask`` (B, 2, L) bool -> (B,)."""
        b, p = image_tokens.shape[:2]
        dev = image_tokens.device
        img = self.image_in(image_tokens) + self.image_pos[:p] + self.segment(torch.zeros(1, dtype=torch.long, device=dev))
        L = text.shape[2]
        seg = self.segment(torch.tensor([1, 2], device=dev))[None, :, None]
        txt = (self.text_in(text) + self.text_pos[:L] + seg).flatten(1, 2)
        x = torch.cat([self.cls.expand(b, -1, -1), img, txt], 1)
        pad = torch.cat([torch.zeros(b, 1 + p, dtype=torch.bool, device=dev), ~text_mask.flatten(1)], 1)
        return self.out(self.encoder(x, src_key_padding_mask=pad)[:, 0])[:, 0]

    @property
    def device(self) -> torch.device:
        return self.cls.device

    # ---- features (frozen encoders; cached per image / text)

    @staticmethod
    def image_features(vlm, images: np.ndarray) -> torch.Tensor:
        """(N, H, W, 3) uint8 -> (N, 64, image_dim): the builtin ViT's patch tokens at 64x64 and the VLM's
        per-patch attribute read-out."""
        from core.frames import resize_frames
        from planners.builtin.vlm import frames_to_tensor

        small = resize_frames(np.asarray(images), (64, 64))
        with torch.no_grad():
            patches, _ = vlm.model.vision(frames_to_tensor(small, vlm.device))
            attr = vlm.model.patch_attributes(patches)
        return torch.cat([patches.flatten(1, 2), attr], -1).float().cpu()

    def text_features(self, text_encoder, captions: Sequence[Caption]) -> tuple[torch.Tensor, torch.Tensor]:
        """Captions -> MiniLM token states (N, 2, L, 384) and mask (N, 2, L)."""
        L = self.config.max_text
        boxes = [_boxes(c) for c in captions]
        for i, b in enumerate(boxes):
            if len(b) != 2:
                raise InputError(f"captions[{i}]", b, "the builtin reward model scores two-box (top, bottom) memes")
        flat = [t for b in boxes for t in b]
        states = text_encoder.tokens(flat)
        out, mask = torch.zeros(len(flat), L, self.config.text_dim), torch.zeros(len(flat), L, dtype=torch.bool)
        for i, s in enumerate(states):
            n = min(L, len(s))
            out[i, :n], mask[i, :n] = s[:n], True
        return out.view(len(boxes), 2, L, -1), mask.view(len(boxes), 2, L)

    # ---- inference

    def _encoders(self):
        if "vlm" not in self._features:
            from planners.builtin import load_builtin_vlm
            from planners.builtin.text import MiniLM

            self._features["vlm"], self._features["text"] = load_builtin_vlm(), MiniLM()
        return self._features["vlm"], self._features["text"]

    @torch.no_grad()
    def score(self, image: np.ndarray, captions: Sequence[Caption]) -> np.ndarray:
        """r of each caption on ``image`` (one template image), shape (N,)."""
        if not captions:
            return np.zeros(0)
        vlm, text = self._encoders()
        img = self._image_cached(vlm, np.ascontiguousarray(image)).to(self.device)
        t, m = self.text_features(text, captions)
        self.eval()
        return self(img.expand(len(captions), -1, -1), t.to(self.device), m.to(self.device)).double().cpu().numpy()

    def _image_cached(self, vlm, image: np.ndarray) -> torch.Tensor:
        """Image features, kept for the last 4,096 distinct images (an RL run scores each scene's picture often)."""
        import hashlib

        cache = self._features.setdefault("images", {})
        key = hashlib.blake2b(image.tobytes(), digest_size=16, person=str(image.shape).encode()[:16]).digest()
        if key not in cache:
            if len(cache) >= 4096:
                cache.pop(next(iter(cache)))
            cache[key] = self.image_features(vlm, image[None])
        return cache[key]

    def prefer(self, image: np.ndarray, a: Caption, b: Caption) -> float:
        """p(a funnier than b) = sigmoid(r_a - r_b) (antisymmetric by construction)."""
        r = self.score(image, [a, b])
        return float(1 / (1 + np.exp(-(r[0] - r[1]))))

    def judge(self, image: np.ndarray, a: Caption, b: Caption) -> str:
        return judge_reply(self.prefer(image, a, b))

    def save_pretrained(self, directory: str | Path, metadata: dict | None = None) -> Path:
        from core.weights_io import save_model_folder

        return save_model_folder(directory, KIND, self.config, self.state_dict(), metadata)

    @classmethod
    def from_pretrained(cls, directory: str | Path | None = None, device: str | torch.device | None = None) -> BuiltinMemeRM:
        from core.device import select_device
        from core.weights_io import load_state_dict, read_model_config

        directory = Path(directory or WEIGHTS)
        config = read_model_config(directory, KIND, MemeRMConfig, "BuiltinMemeRM.save_pretrained (atelier train humor-rm)")
        model = cls(config)
        model.load_state_dict(load_state_dict(directory / "model.safetensors"))
        return model.to(select_device(device)).eval()


# ---- the published pairwise head on a transformers VLM -----------------------------------------------

HEAD_FILE = "classification_head.pt"  # the author's file name (torch.save of two state dicts)
HEAD_SETTINGS = "reward_head.json"  # ours, beside a head we saved: the decision and rendering it was used with
LEGACY_HEAD = "reward_head.safetensors"  # written by earlier versions of this module (with an output projection)
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
DECISIONS = ("argmax", "softmax_symmetrised")


class AttentionPooling(nn.Module):
    """The author's attention pooling (MemeRewardModel-Qwen ``classification_head.py``): a learned query (split
    into ``heads`` heads) attends over the hidden states through bias-free ``k`` / ``v`` projections, logits scaled
    by ``d ** -0.5`` (d the head width) plus the position bias ``arange(S) / S * scale`` favouring later tokens; the
    heads' outputs concatenated, no output projection: (B, S, H) -> (B, H). The published code has no padding mask;
    ``mask`` (ours, for batches we pad) is off unless given."""

    def __init__(self, hidden: int, heads: int = 4, position_bias_scale: float = 3.0):
        super().__init__()
        if hidden % heads:
            raise InputError("heads", heads, f"the hidden size {hidden} must divide by the number of heads")
        self.heads, self.scale = heads, position_bias_scale
        self.k, self.v = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)
        self.query = nn.Parameter(torch.randn(hidden) * 0.02)  # the published initialisation

    def position_bias(self, S: int, device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.arange(S, device=device, dtype=dtype) / S * self.scale

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, S, H = hidden.shape
        d = H // self.heads
        k = self.k(hidden).view(B, S, self.heads, d).transpose(1, 2)  # (B, heads, S, d)
        v = self.v(hidden).view(B, S, self.heads, d).transpose(1, 2)
        q = self.query.to(k.dtype).view(1, self.heads, 1, d)
        logits = (q @ k.transpose(-2, -1)) * torch.tensor(d ** -0.5, dtype=k.dtype, device=k.device)
        logits = logits + self.position_bias(S, k.device, k.dtype)  # (B, heads, 1, S)
        if mask is not None:
            logits = logits.masked_fill(~mask.bool()[:, None, None, :], torch.finfo(logits.dtype).min)
        return (logits.softmax(-1) @ v).squeeze(2).reshape(B, H)


class HFPairwiseRM(nn.Module):
    """[RM-CODE] the author's trained reward model: a transformers VLM reads the critic prompt with both rendered
    memes (``planners.meme_prompts``: the default system turn, ``CRITIC_PROMPT`` then ``First image: <a>`` /
    ``Second image:<b>``, then the generation prompt, as LLaMA-Factory's qwen2_vl template encodes the row with its
    empty assistant turn); ``AttentionPooling`` over its last hidden states (no mask), ``Linear(hidden, 2)``;
    logits (B, 2), class 0 = first better. Pooling and head run in float32 (the published code runs them in the
    checkpoint's dtype: a rounding difference only).

    ``decision``: ``"argmax"`` (published, ``group_rank_eval.py``): p(a better) is 1 when argmax of the logits of
    the order (a, b) is class 0, else 0; each pair is judged once, in the order given. ``"softmax_symmetrised"``
    (ours, b.3): (softmax(a, b)_0 + softmax(b, a)_1) / 2, two forwards, antisymmetric. A fresh head uses ours (and
    starts at zero, "no opinion"); a loaded ``classification_head.pt`` uses the published one unless told.
    ``render_style``: how ``prefer`` draws a caption (``renderers.meme.MEME_STYLES``; the published LightRFT
    style by default)."""

    def __init__(self, vlm, heads: int = 4, position_bias_scale: float = 3.0, decision: str = "softmax_symmetrised",
                 render_style: str = "official"):
        super().__init__()
        from renderers.meme import MEME_STYLES

        if decision not in DECISIONS:
            raise InputError("decision", decision, f"choose one of {DECISIONS}")
        if render_style not in MEME_STYLES:
            raise InputError("render_style", render_style, f"choose one of {MEME_STYLES}")
        self.vlm, self.decision, self.render_style = vlm, decision, render_style
        hidden = _hidden_size(vlm.model.config)
        self.pool = AttentionPooling(hidden, heads, position_bias_scale)
        self.head = nn.Linear(hidden, 2)
        nn.init.zeros_(self.head.weight)  # an untrained head says "equal" (uniform logits), spec (d).4
        nn.init.zeros_(self.head.bias)

    def messages(self, meme_a: np.ndarray, meme_b: np.ndarray):
        from planners.meme_prompts import CRITIC_PAIR_SUFFIX, CRITIC_PROMPT, CRITIC_SYSTEM
        from planners.protocol import ImagePart, Message, TextPart

        first, second, tail = CRITIC_PAIR_SUFFIX.split("<image>")  # "\n\n\n\nFirst image: ", "\nSecond image:", ""
        parts = [TextPart(CRITIC_PROMPT + first), ImagePart(meme_a), TextPart(second), ImagePart(meme_b)]
        return [Message("system", CRITIC_SYSTEM), Message("user", parts + ([TextPart(tail)] if tail else []))]

    def hidden_states(self, meme_a: np.ndarray, meme_b: np.ndarray) -> torch.Tensor:
        """The VLM's last hidden states over the pair's context, (1, S, H) float32."""
        inputs = self.vlm._chat_inputs(self.messages(meme_a, meme_b))
        out = self.vlm.model(**inputs, output_hidden_states=True, use_cache=False)
        return out.hidden_states[-1].float()

    def forward(self, meme_a: np.ndarray, meme_b: np.ndarray) -> torch.Tensor:
        return self.head(self.pool(self.hidden_states(meme_a, meme_b)))

    def prefer_rendered(self, meme_a: np.ndarray, meme_b: np.ndarray) -> float:
        """p(a better) under ``decision`` (see the class docstring)."""
        with torch.no_grad():
            ab = self(meme_a, meme_b)[0]
            if self.decision == "argmax":
                return float(int(torch.argmax(ab)) == 0)
            ba = self(meme_b, meme_a)[0]
        return float((ab.softmax(-1)[0] + ba.softmax(-1)[1]) / 2)

    def render(self, image: np.ndarray, caption: Caption) -> np.ndarray:
        from renderers.meme import render_meme_styled

        return render_meme_styled(image, _boxes(caption), self.render_style)

    def prefer(self, image: np.ndarray, a: Caption, b: Caption) -> float:
        return self.prefer_rendered(self.render(image, a), self.render(image, b))

    def judge(self, image: np.ndarray, a: Caption, b: Caption) -> str:
        return judge_reply(self.prefer(image, a, b))

    @property
    def device(self) -> torch.device:
        return self.vlm.device

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, trust_remote_code: bool = False) -> HFPairwiseRM:
        return load_pairwise_rm(directory, device=device, trust_remote_code=trust_remote_code)

    def save_pretrained(self, directory: str | Path) -> Path:
        """The VLM's checkpoint plus the head in the author's layout (reloaded by ``load_reward_model(directory)``)."""
        self.vlm.save_pretrained(directory)
        return self.save_head(directory)

    def save_head(self, directory: str | Path) -> Path:
        """``classification_head.pt`` as the author's ``save_pretrained`` writes it, plus our settings file."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {"classification_head": {k: v.detach().cpu().clone() for k, v in self.head.state_dict().items()},
                 "attention_pooling": {k: v.detach().cpu().clone() for k, v in self.pool.state_dict().items()}}
        torch.save(state, directory / HEAD_FILE)
        settings = {"heads": self.pool.heads, "position_bias_scale": self.pool.scale, "decision": self.decision,
                    "render_style": self.render_style}
        (directory / HEAD_SETTINGS).write_text(json.dumps(settings))
        return directory


def read_head_file(path: str | Path, hidden: int) -> dict[str, dict[str, torch.Tensor]]:
    """The author's ``classification_head.pt``, checked key by key: ``{'classification_head': {weight (2, H),
    bias (2,)}, 'attention_pooling': {k.weight (H, H), v.weight (H, H), query (H,)}}``. Read with
    ``torch.load(weights_only=True)`` (no pickled code runs). A missing, unexpected or misshapen tensor is an
    ``InputError`` naming it; so is the author's old format (the head alone), which the published loader completes
    with a randomly initialised pooling."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - unpickling refuses in many types; each is this one error
        raise InputError(str(path), type(e).__name__, f"not a tensor file torch.load(weights_only=True) reads ({str(e)[:160]})") from None
    want = {"classification_head": {"weight": (2, hidden), "bias": (2,)},
            "attention_pooling": {"k.weight": (hidden, hidden), "v.weight": (hidden, hidden), "query": (hidden,)}}
    if not isinstance(state, dict):
        raise InputError(str(path), type(state).__name__, "expected a dict {'classification_head': ..., 'attention_pooling': ...}")
    if "classification_head" not in state and {"weight", "bias"} <= set(state):
        raise InputError(f"{HEAD_FILE}: attention_pooling", "missing", "this is the old format (the head alone); the "
                         "published loader would leave the pooling random: pass a head saved with its attention pooling")
    for group, keys in want.items():
        if not isinstance(state.get(group), dict):
            raise InputError(f"{HEAD_FILE}: {group}", "missing" if group not in state else type(state[group]).__name__,
                             f"the file must hold '{group}' (a state dict)")
        for key, shape in keys.items():
            t = state[group].get(key)
            if not isinstance(t, torch.Tensor):
                raise InputError(f"{HEAD_FILE}: {group}.{key}", "missing", f"the published head has {group}.{key} {shape}")
            if tuple(t.shape) != shape:
                raise InputError(f"{HEAD_FILE}: {group}.{key}", tuple(t.shape), f"expected {shape} for hidden size {hidden}")
        extra = sorted(set(state[group]) - set(keys))
        if extra:
            raise InputError(f"{HEAD_FILE}: {group}.{extra[0]}", "unexpected", f"the published {group} holds only {sorted(keys)}")
    extra = sorted(set(state) - set(want))
    if extra:
        raise InputError(f"{HEAD_FILE}: {extra[0]}", "unexpected", "the file holds only classification_head and attention_pooling")
    return {g: {k: state[g][k].float() for k in want[g]} for g in want}


def load_lora_adapter(vlm, adapter_dir: str | Path) -> Any:
    """Merge the LoRA adapter in ``adapter_dir`` (peft's ``adapter_config.json`` + ``adapter_model.safetensors``)
    into ``vlm.model``. Every tensor of the file must land in the model and every adapter tensor of the model
    must come from the file; otherwise an ``InputError`` names the first key that does not."""
    adapter_dir = Path(adapter_dir)
    try:
        from peft import PeftModel, get_peft_model_state_dict
    except ImportError:
        raise InputError(str(adapter_dir), ADAPTER_CONFIG, "this folder holds a LoRA adapter and peft is not installed: "
                                                           "pip install 'atelier[lora]'") from None
    from safetensors import safe_open

    weights = adapter_dir / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise InputError(str(adapter_dir), ADAPTER_WEIGHTS, f"{ADAPTER_CONFIG} names a LoRA adapter but {ADAPTER_WEIGHTS} is missing")
    with safe_open(str(weights), "pt") as f:
        in_file = set(f.keys())
    peft_model = PeftModel.from_pretrained(vlm.model, str(adapter_dir), is_trainable=False)
    in_model = set(get_peft_model_state_dict(peft_model).keys())
    for missing in sorted(in_model - in_file):
        raise InputError(f"{ADAPTER_WEIGHTS}: {missing}", "missing", "the adapter config targets this module but the file has no weights for it")
    for unexpected in sorted(in_file - in_model):
        raise InputError(f"{ADAPTER_WEIGHTS}: {unexpected}", "unexpected", "this tensor matches no module of the base model "
                                                                            "(another base, or another transformers layout)")
    vlm.model = peft_model.merge_and_unload().eval()
    return vlm


def _adapter_base(directory: Path) -> str:
    try:
        base = json.loads((directory / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError):
        raise InputError(str(directory / ADAPTER_CONFIG), "unreadable", "pass a peft adapter_config.json") from None
    if not isinstance(base, str) or not base.strip():
        raise InputError(str(directory / ADAPTER_CONFIG), "base_model_name_or_path", "names no base model: pass base_model=")
    return base


def load_pairwise_rm(directory: str | Path, device: Any = None, dtype: Any = None, trust_remote_code: bool = False,
                     base_model: str | None = None, use_adapter: bool = True, decision: str | None = None,
                     render_style: str | None = None) -> HFPairwiseRM:
    """The author's reward model from a folder holding ``classification_head.pt`` beside either the base VLM
    (its config.json and weights) or a peft LoRA adapter whose ``base_model_name_or_path`` (or ``base_model``)
    names the base; a folder with both uses its own base and merges the adapter. ``use_adapter=False`` leaves the
    adapter out: the author's ``group_rank_eval.py`` as read loads the base with ``AutoModel`` and the head from
    the adapter folder, and applies no LoRA weights that we could find. ``decision`` / ``render_style``: the
    settings saved beside a head of ours, else the published ``"argmax"`` / ``"official"``. Nothing falls back:
    a head, adapter or base that does not load is an error naming the file and key."""
    from planners.loading import load_vlm

    directory = Path(directory)
    head = directory / HEAD_FILE
    if not head.is_file():
        if (directory / LEGACY_HEAD).is_file():
            raise InputError(str(directory / LEGACY_HEAD), "pool.o.weight", "written by an earlier Atelier whose pooling had an "
                             "output projection the published head does not have; retrain and save it again (classification_head.pt)")
        raise InputError(str(directory), HEAD_FILE, "no trained head in this folder")
    try:
        settings = json.loads((directory / HEAD_SETTINGS).read_text()) if (directory / HEAD_SETTINGS).is_file() else {}
    except (OSError, ValueError):
        raise InputError(str(directory / HEAD_SETTINGS), "unreadable", "remove it or write valid JSON") from None
    has_adapter = (directory / ADAPTER_CONFIG).is_file()
    if base_model is None:
        base_model = str(directory) if (directory / "config.json").is_file() else _adapter_base(directory) if has_adapter else None
    if base_model is None:
        raise InputError(str(directory), "no base model", f"{HEAD_FILE} needs the VLM it was trained on: its config.json "
                                                          f"and weights here, or a LoRA adapter ({ADAPTER_CONFIG}) naming the base")
    vlm = load_vlm(base_model, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
    if has_adapter and use_adapter:
        load_lora_adapter(vlm, directory)
    rm = HFPairwiseRM(vlm, settings.get("heads", 4), settings.get("position_bias_scale", 3.0),
                      decision or settings.get("decision", "argmax"), render_style or settings.get("render_style", "official"))
    state = read_head_file(head, rm.head.in_features)
    rm.head.load_state_dict(state["classification_head"])
    rm.pool.load_state_dict(state["attention_pooling"])
    return rm.to(vlm.device).eval()


class VLMJudgeRM:
    """The LightRFT pairwise judge as published (``examples/godsmeme/reward_model.py`` ``MemePairwiseJudge``) on any
    ``VisionLanguageModel``: one user turn, ``prompts/reward_compare.txt`` formatted with the user request ("N/A"
    when none) and both memes' extracted texts (box texts joined by the two characters backslash-n, as published;
    "(empty)" when none), then ``\n\nCandidate 1 image:`` <meme a> ``Candidate 2 image:`` <meme b>; a greedy reply
    of at most 96 new tokens.

    ``parser``: ``"official"`` (``planners.meme_ranking.official_pair_rewards``: scores -> Winner -> the first two
    numbers anywhere -> 0.5 / 0.5, then s_a / (s_a + s_b)) or ``"tolerant"`` (ours, ``pair_rewards``). ``order``:
    ``"once"`` (published: each pair judged once in the order given, a before b) or ``"both"`` (ours: both orders
    averaged, b.3). ``render_style``: ``"official"`` (the published renderer) or ``"atelier"``. Not applied: the
    published processor's pixel bounds (256 to 1280 x 28 x 28); the checkpoint's own processor settings are used."""

    backend = "hf"

    def __init__(self, vlm, max_new_tokens: int = 96, parser: str = "official", order: str = "once",
                 render_style: str = "official"):
        from renderers.meme import MEME_STYLES

        for name, value, allowed in (("parser", parser, ("official", "tolerant")), ("order", order, ("once", "both")),
                                     ("render_style", render_style, MEME_STYLES)):
            if value not in allowed:
                raise InputError(name, value, f"choose one of {allowed}")
        self.vlm, self.max_new_tokens = vlm, max_new_tokens
        self.parser, self.order, self.render_style = parser, order, render_style

    @property
    def device(self) -> torch.device:
        return self.vlm.device

    @staticmethod
    def extracted_text(boxes: Sequence[str]) -> str:
        """A meme's text as the published judge quotes it: the box texts joined by a literal backslash-n."""
        return "\\n".join(boxes)

    def messages(self, meme_a: np.ndarray, meme_b: np.ndarray, text_a: str = "", text_b: str = "",
                 user_request: str | None = None):
        from planners.meme_prompts import REWARD_COMPARE_PROMPT
        from planners.protocol import ImagePart, Message, TextPart

        prompt = REWARD_COMPARE_PROMPT.format(user_request=user_request or "N/A", text_a=text_a or "(empty)", text_b=text_b or "(empty)")
        return [Message("user", [TextPart(f"{prompt}\n\nCandidate 1 image:"), ImagePart(meme_a), TextPart("Candidate 2 image:"),
                                 ImagePart(meme_b)])]

    def reply(self, meme_a: np.ndarray, meme_b: np.ndarray, text_a: str = "", text_b: str = "", user_request: str | None = None) -> str:
        return self.vlm.generate(self.messages(meme_a, meme_b, text_a, text_b, user_request), max_new_tokens=self.max_new_tokens)[0]

    def pair_rewards(self, reply: str) -> tuple[float, float]:
        from planners.meme_ranking import official_pair_rewards, pair_rewards

        return official_pair_rewards(reply) if self.parser == "official" else pair_rewards(reply)

    def prefer(self, image: np.ndarray, a: Caption, b: Caption, user_request: str | None = None) -> float:
        from renderers.meme import render_meme_styled

        ba_, bb_ = _boxes(a), _boxes(b)
        ma, mb = render_meme_styled(image, ba_, self.render_style), render_meme_styled(image, bb_, self.render_style)
        ta, tb = self.extracted_text(ba_), self.extracted_text(bb_)
        p = self.pair_rewards(self.reply(ma, mb, ta, tb, user_request))[0]
        if self.order == "both":
            p = (p + self.pair_rewards(self.reply(mb, ma, tb, ta, user_request))[1]) / 2
        return float(p)

    def judge(self, image: np.ndarray, a: Caption, b: Caption) -> str:
        return judge_reply(self.prefer(image, a, b))

    def save_pretrained(self, directory: str | Path) -> Path:
        return self.vlm.save_pretrained(directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, trust_remote_code: bool = False) -> VLMJudgeRM:
        from planners.loading import load_vlm

        return cls(load_vlm(str(directory), device=device, trust_remote_code=trust_remote_code))


def _hidden_size(config: Any) -> int:
    for c in (config, getattr(config, "text_config", None)):
        if c is not None and getattr(c, "hidden_size", None):
            return int(c.hidden_size)
    raise InputError("reward model backbone", type(config).__name__, "the VLM's config has no hidden_size")


def load_reward_model(source: Any = "builtin", device: str | torch.device | None = None, dtype: Any = None,
                      trust_remote_code: bool = False):
    """'builtin' (weights/builtin/meme_rm), a folder saved by ``BuiltinMemeRM``, a folder with the author's trained
    ``classification_head.pt`` beside its base VLM or LoRA adapter (``load_pairwise_rm``: a head that does not load
    is an error, never a fallback), a transformers VLM folder without a head (the LightRFT judge, ``VLMJudgeRM``),
    or an object with ``prefer``."""
    if not isinstance(source, (str, Path)):
        if hasattr(source, "prefer"):
            return source
        raise InputError("reward_model", type(source).__name__, "pass 'builtin', a folder, or an object with prefer()")
    if str(source) == "builtin":
        return BuiltinMemeRM.from_pretrained(WEIGHTS, device)
    path = Path(source)
    cfg = path / "config.json"
    try:
        kind = json.loads(cfg.read_text()).get("model") if cfg.is_file() else None
    except (OSError, ValueError):
        raise MediaError(cfg, "unreadable config.json", "pass 'builtin' or a model folder") from None
    if kind == KIND:
        return BuiltinMemeRM.from_pretrained(path, device)
    if (path / HEAD_FILE).is_file() or (path / LEGACY_HEAD).is_file():
        return load_pairwise_rm(path, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
    if (path / ADAPTER_CONFIG).is_file():
        raise InputError(str(path), ADAPTER_CONFIG, f"a LoRA adapter without {HEAD_FILE}: pass the folder that holds the "
                                                    "trained head, or a full VLM checkpoint for the prompt judge")
    from planners.loading import load_vlm

    return VLMJudgeRM(load_vlm(str(path), device=device, dtype=dtype, trust_remote_code=trust_remote_code))
