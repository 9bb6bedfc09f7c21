"""The built-in multi-frame VLM: ViT tokens of up to 256 frames + a question + options -> option
scores, and a small caption decoder.

Layout of the encoder input (one sequence, bidirectional attention):

    [question tokens (MiniLM states)] [option tokens (MiniLM sentence embeddings + slot)] [frame tokens]

Visual tokens follow Qwen-VL's recipe: the ViT's 8x8-pixel patch tokens are merged 2x2 (concatenated,
then projected), so a 64x64 frame gives 16 tokens and a 32x32 frame 4; compute therefore scales with
resolution as in real VLMs, which is what makes GridProbe's compute accounting meaningful. Each frame
token gets a spatial position (merged grid, interpolated) and a temporal one (the frame's rank in the
input, so order questions are answerable). An option's score is a linear read-out of its token.
The ViT is frozen inside the VLM (it is trained separately, CLIP-style).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.weights_io import load_state_dict
from planners.builtin.vit import Block, BuiltinViT, ViTConfig, save_builtin

TEXT_DIM = 384  # MiniLM


@dataclass
class VLMConfig:
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    mlp_ratio: int = 4
    max_frames: int = 256
    max_options: int = 10
    dec_layers: int = 1
    max_caption: int = 16
    aux_classes: int = 98  # per-frame presence of 10 colours, 8 shapes, 80 colour-shape pairs (training signal only)
    vit: ViTConfig = field(default_factory=ViTConfig)
    vocab: list[str] = field(default_factory=list)  # caption words; 0 = <pad>, 1 = <bos>, 2 = <eos>


class CaptionDecoder(nn.Module):
    """A 2-layer causal transformer over caption words, cross-attending to the encoder output."""

    def __init__(self, vocab_size: int, d: int, heads: int, layers: int, max_len: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d)
        self.pos = nn.Parameter(torch.randn(1, max_len + 1, d) * 0.02)
        layer = nn.TransformerDecoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True, activation="gelu")
        self.layers = nn.TransformerDecoder(layer, layers)
        self.out = nn.Linear(d, vocab_size)

    def forward(self, words: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor | None) -> torch.Tensor:
        n = words.shape[1]
        causal = torch.triu(torch.full((n, n), float("-inf"), device=words.device), 1)
        h = self.embed(words) + self.pos[:, :n]
        return self.out(self.layers(h, memory, tgt_mask=causal, memory_key_padding_mask=memory_pad))


class BuiltinVLMModel(nn.Module):
    def __init__(self, config: VLMConfig):
        super().__init__()
        self.config = c = config
        d = c.d_model
        self.vit = BuiltinViT(c.vit).requires_grad_(False)
        self.merge = nn.Sequential(nn.LayerNorm(4 * c.vit.width), nn.Linear(4 * c.vit.width, d))
        grid = c.vit.image_size // c.vit.patch // 2
        self.spatial = nn.Parameter(torch.randn(1, grid * grid, d) * 0.02)
        self.temporal = nn.Embedding(c.max_frames, d)
        self.text_in = nn.Linear(TEXT_DIM, d)
        self.option_in = nn.Linear(TEXT_DIM, d)
        self.option_slot = nn.Embedding(c.max_options, d)
        self.kind = nn.Embedding(3, d)  # 0 question, 1 option, 2 frame
        self.blocks = nn.ModuleList(Block(d, c.heads, c.mlp_ratio) for _ in range(c.layers))
        self.ln = nn.LayerNorm(d)
        self.score = nn.Linear(d, 1)
        self.aux = nn.Linear(d, c.aux_classes)
        self.decoder = CaptionDecoder(max(3, len(c.vocab)), d, c.heads, c.dec_layers, c.max_caption)

    @property
    def device(self) -> torch.device:
        return self.score.weight.device

    # ---- vision
    @torch.no_grad()
    def patch_tokens(self, frames: torch.Tensor) -> torch.Tensor:
        """``(N, 3, H, W)`` in [-1, 1] -> ViT patch tokens ``(N, gh, gw, width)`` (frozen ViT)."""
        self.vit.eval()
        _, tok = self.vit(frames)
        g = frames.shape[-1] // self.config.vit.patch
        return tok.reshape(len(frames), frames.shape[-2] // self.config.vit.patch, g, -1)

    def visual_tokens(self, patches: torch.Tensor) -> torch.Tensor:
        """2x2 merge + spatial position: ``(N, gh, gw, w)`` -> ``(N, gh*gw/4, d)``."""
        n, gh, gw, w = patches.shape
        x = patches.reshape(n, gh // 2, 2, gw // 2, 2, w).permute(0, 1, 3, 2, 4, 5).reshape(n, (gh // 2) * (gw // 2), 4 * w)
        x = self.merge(x)
        g = int(round(self.spatial.shape[1] ** 0.5))
        sp = self.spatial
        if (gh // 2, gw // 2) != (g, g):
            sp = F.interpolate(sp.reshape(1, g, g, -1).permute(0, 3, 1, 2), size=(gh // 2, gw // 2), mode="bilinear", align_corners=False)
            sp = sp.permute(0, 2, 3, 1).reshape(1, -1, sp.shape[1])
        return x + sp

    # ---- the encoder
    def encode(self, batch: dict) -> dict:
        """Run the encoder on a collated batch (see ``collate``); returns hidden states and masks."""
        d = self.config.d_model
        vis = self.visual_tokens(batch["patches"])  # (sumT, P, d)
        P = vis.shape[1]
        B, Tm = batch["frame_mask"].shape
        frames = vis.new_zeros(B, Tm, P, d)
        frames[batch["frame_mask"]] = vis
        frames = frames + self.temporal(torch.arange(Tm, device=vis.device))[None, :, None] + self.kind.weight[2]
        q = self.text_in(batch["question"]) + self.kind.weight[0]
        o = self.option_in(batch["options"]) + self.option_slot.weight[: batch["options"].shape[1]] + self.kind.weight[1]
        x = torch.cat([q, o, frames.reshape(B, Tm * P, d)], 1)
        valid = torch.cat([batch["question_mask"], batch["option_mask"], batch["frame_mask"].repeat_interleave(P, 1)], 1)
        attn = valid[:, None, None, :]  # key mask, broadcast over heads and queries
        for blk in self.blocks:
            x = blk(x, attn)
        x = self.ln(x)
        nq, no = q.shape[1], o.shape[1]
        return {"hidden": x, "valid": valid, "option_states": x[:, nq : nq + no], "frame_states": x[:, nq + no :].reshape(B, Tm, P, d)}

    def option_logits(self, enc: dict, option_mask: torch.Tensor) -> torch.Tensor:
        return self.score(enc["option_states"]).squeeze(-1).masked_fill(~option_mask, float("-inf"))

    def aux_logits(self, enc: dict) -> torch.Tensor:
        return self.aux(enc["frame_states"].mean(2))  # (B, Tm, aux_classes)

    def caption_logits(self, enc: dict, words: torch.Tensor) -> torch.Tensor:
        return self.decoder(words, enc["hidden"], ~enc["valid"])

    # ---- persistence
    def save_pretrained(self, directory: str | Path, metadata: dict | None = None) -> Path:
        return save_builtin(self, directory, "builtin-vlm", metadata)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device | None = None) -> BuiltinVLMModel:
        directory = Path(directory)
        cfg = json.loads((directory / "config.json").read_text())
        cfg.pop("model", None)
        cfg["vit"] = ViTConfig(**cfg["vit"])
        model = cls(VLMConfig(**cfg))
        model.load_state_dict(load_state_dict(directory / "model.safetensors"))
        return model.eval().to(device or "cpu")


def collate(items: list[dict], device: torch.device | str = "cpu") -> dict:
    """Pad a list of examples into one batch.

    Each item: ``patches`` ``(T, gh, gw, w)`` (all items in a batch share one resolution),
    ``question`` ``(Lq, 384)``, ``options`` ``(O, 384)``.
    """
    B = len(items)
    Tm = max(len(it["patches"]) for it in items)
    Lq = max(len(it["question"]) for it in items)
    No = max(len(it["options"]) for it in items)
    q = torch.zeros(B, Lq, TEXT_DIM)
    o = torch.zeros(B, No, TEXT_DIM)
    qm = torch.zeros(B, Lq, dtype=torch.bool)
    om = torch.zeros(B, No, dtype=torch.bool)
    fm = torch.zeros(B, Tm, dtype=torch.bool)
    for i, it in enumerate(items):
        q[i, : len(it["question"])], qm[i, : len(it["question"])] = it["question"], True
        o[i, : len(it["options"])], om[i, : len(it["options"])] = it["options"], True
        fm[i, : len(it["patches"])] = True
    patches = torch.cat([it["patches"] for it in items]).to(device)
    return {"patches": patches, "question": q.to(device), "options": o.to(device), "question_mask": qm.to(device),
            "option_mask": om.to(device), "frame_mask": fm.to(device)}


def frames_to_tensor(frames: np.ndarray, device) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(frames), device=device).permute(0, 3, 1, 2).float().div(127.5).sub(1)
