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
- ``VLMJudgeRM``: the published judge protocol on any VLM (both rendered memes, a scored reply), the default
  for a transformers checkpoint without a trained head;
- ``HFPairwiseRM``: the published trained variant [RL-CODE]: both rendered memes in one context of a transformers VLM,
  attention pooling over its last hidden states (4 heads, a learned query, a position bias ``3.0 * i / S``
  favouring later tokens), then ``Linear(hidden, 2)``; "first better" when p1 > p0; trained with cross-entropy
  on randomly ordered pairs.

Each gives ``prefer(image, caption_a, caption_b) -> p(a better)`` symmetrised over both orders (b.3), and
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


class AttentionPooling(nn.Module):
    """[RL-CODE] a learned query attends over the hidden states (``heads`` heads, no qkv bias) with an additive
    position bias ``scale * i / S`` favouring later tokens: (B, S, H) -> (B, H)."""

    def __init__(self, hidden: int, heads: int = 4, position_bias_scale: float = 3.0):
        super().__init__()
        if hidden % heads:
            raise InputError("heads", heads, f"the hidden size {hidden} must divide by the number of heads")
        self.heads, self.scale = heads, position_bias_scale
        self.query = nn.Parameter(torch.randn(hidden) * hidden ** -0.5)
        self.k, self.v = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)

    def position_bias(self, S: int, device: torch.device | None = None) -> torch.Tensor:
        return self.scale * torch.arange(S, device=device, dtype=torch.float32) / S

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, S, H = hidden.shape
        d = H // self.heads
        k = self.k(hidden).view(B, S, self.heads, d)
        v = self.v(hidden).view(B, S, self.heads, d)
        q = self.query.to(hidden.dtype).view(self.heads, d)
        logits = torch.einsum("hd,bshd->bhs", q, k) / d ** 0.5 + self.position_bias(S, hidden.device).to(hidden.dtype)
        if mask is not None:
            logits = logits.masked_fill(~mask.bool()[:, None, :], torch.finfo(logits.dtype).min)
        w = logits.softmax(-1)
        return self.o(torch.einsum("bhs,bshd->bhd", w, v).reshape(B, H))


PAIR_PROMPT = ("You are a Meme Critic. Compare the two memes on their visual and text elements, how the text connects to "
               "the picture, their overall meaning, emotional tone, creativity, humor and relevance, and decide which is better.")


class HFPairwiseRM(nn.Module):
    """[RL-CODE] a transformers VLM reading ``First image: <meme a> Second image: <meme b>`` after the critic
    prompt, attention pooling over its last hidden states, ``Linear(hidden, 2)``; logits (B, 2), class 0 =
    first better. ``vlm``: a ``planners.hf.HFVisionLanguageModel`` (its ``_chat_inputs`` build the context)."""

    def __init__(self, vlm, heads: int = 4, position_bias_scale: float = 3.0):
        super().__init__()
        self.vlm = vlm
        hidden = _hidden_size(vlm.model.config)
        self.pool = AttentionPooling(hidden, heads, position_bias_scale)
        self.head = nn.Linear(hidden, 2)
        nn.init.zeros_(self.head.weight)  # an untrained head says "equal" (uniform logits), spec (d).4
        nn.init.zeros_(self.head.bias)

    def messages(self, meme_a: np.ndarray, meme_b: np.ndarray):
        from planners.protocol import ImagePart, Message, TextPart

        return [Message("user", [TextPart(PAIR_PROMPT + "\nFirst image:"), ImagePart(meme_a), TextPart("Second image:"), ImagePart(meme_b)])]

    def forward(self, meme_a: np.ndarray, meme_b: np.ndarray) -> torch.Tensor:
        inputs = self.vlm._chat_inputs(self.messages(meme_a, meme_b))
        out = self.vlm.model(**inputs, output_hidden_states=True, use_cache=False)
        h = out.hidden_states[-1].float()
        mask = inputs.get("attention_mask")
        return self.head(self.pool(h, mask))

    def prefer_rendered(self, meme_a: np.ndarray, meme_b: np.ndarray) -> float:
        """p(a better), symmetrised over both orders (b.3): (p(a, b)_0 + p(b, a)_1) / 2."""
        with torch.no_grad():
            ab = self(meme_a, meme_b).softmax(-1)[0]
            ba = self(meme_b, meme_a).softmax(-1)[0]
        return float((ab[0] + ba[1]) / 2)

    def prefer(self, image: np.ndarray, a: Caption, b: Caption) -> float:
        from renderers.meme import render_meme

        return self.prefer_rendered(render_meme(image, _boxes(a)), render_meme(image, _boxes(b)))

    def judge(self, image: np.ndarray, a: Caption, b: Caption) -> str:
        return judge_reply(self.prefer(image, a, b))

    @property
    def device(self) -> torch.device:
        return self.vlm.device

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, trust_remote_code: bool = False) -> HFPairwiseRM:
        return load_reward_model(str(directory), device=device, trust_remote_code=trust_remote_code)

    def save_pretrained(self, directory: str | Path) -> Path:
        """The VLM's checkpoint plus ``reward_head.safetensors`` (reloaded by ``load_reward_model(directory)``)."""
        self.vlm.save_pretrained(directory)
        return self.save_head(directory)

    def save_head(self, directory: str | Path) -> Path:
        from core.weights_io import save_state_dict

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {f"pool.{k}": v for k, v in self.pool.state_dict().items()} | {f"head.{k}": v for k, v in self.head.state_dict().items()}
        save_state_dict(state, directory / "reward_head.safetensors")
        (directory / "reward_head.json").write_text(json.dumps({"heads": self.pool.heads, "position_bias_scale": self.pool.scale}))
        return directory


JUDGE_PROMPT = ("You are judging two memes made on the same template. Compare how funny, fitting and creative they are. "
                "Answer in exactly this format:\nImage 1 score: <0-10>\nImage 2 score: <0-10>\nWinner: <1 or 2 or tie>\n"
                "Reason: <one sentence>")


class VLMJudgeRM:
    """The published judge protocol [RL-CODE] on any ``VisionLanguageModel``: both rendered memes in one turn, a
    greedy reply of at most 96 new tokens in the ``Image 1 score`` / ``Image 2 score`` / ``Winner`` format, read by
    ``planners.meme_ranking.pair_rewards`` (s_a / (s_a + s_b); unreadable -> the Winner line -> 0.5). The prompt's
    wording is ours [PROPOSED]; the reply format and decoding are published. Symmetrised over both orders (b.3)."""

    backend = "hf"

    def __init__(self, vlm, max_new_tokens: int = 96):
        self.vlm, self.max_new_tokens = vlm, max_new_tokens

    @property
    def device(self) -> torch.device:
        return self.vlm.device

    def reply(self, meme_a: np.ndarray, meme_b: np.ndarray) -> str:
        from planners.protocol import ImagePart, Message, TextPart

        turn = Message("user", [TextPart("Image 1:"), ImagePart(meme_a), TextPart("Image 2:"), ImagePart(meme_b), TextPart(JUDGE_PROMPT)])
        return self.vlm.generate([turn], max_new_tokens=self.max_new_tokens)[0]

    def prefer(self, image: np.ndarray, a: Caption, b: Caption) -> float:
        from planners.meme_ranking import pair_rewards
        from renderers.meme import render_meme

        ma, mb = render_meme(image, _boxes(a)), render_meme(image, _boxes(b))
        return float((pair_rewards(self.reply(ma, mb))[0] + pair_rewards(self.reply(mb, ma))[1]) / 2)

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
    """'builtin' (weights/builtin/meme_rm), a folder saved by ``BuiltinMemeRM``, a transformers VLM folder with a
    trained ``reward_head.safetensors`` (the published pairwise head, ``HFPairwiseRM``), a transformers VLM folder
    without one (the published judge prompt, ``VLMJudgeRM``), or an object with ``prefer``."""
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
    from core.weights_io import load_state_dict
    from planners.loading import load_vlm

    vlm = load_vlm(str(path), device=device, dtype=dtype, trust_remote_code=trust_remote_code)
    head = path / "reward_head.safetensors"
    if not head.is_file():
        return VLMJudgeRM(vlm)
    meta = json.loads((path / "reward_head.json").read_text()) if (path / "reward_head.json").is_file() else {}
    rm = HFPairwiseRM(vlm, meta.get("heads", 4), meta.get("position_bias_scale", 3.0))
    state = load_state_dict(head)
    rm.pool.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("pool.")})
    rm.head.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("head.")})
    return rm

