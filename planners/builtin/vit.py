"""The built-in ViT: a small vision transformer whose pooled output lives in MiniLM's sentence space.

It is trained CLIP-style against frozen all-MiniLM-L6-v2 sentence embeddings of worldgen captions
(``training/vit.py``), so ``embed(frames)`` can be compared with ``MiniLM.encode(texts)`` directly:
that shared space is "the ViT embedding space" the Bernini planner predicts into and CLEAR matches
appearance in. Patch tokens feed the built-in VLM. Any input side that is a multiple of the patch
size works (positional embeddings are interpolated), so 32x32 probes cost a quarter of 64x64 frames.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.errors import InputError
from core.weights_io import load_state_dict, save_state_dict


@dataclass
class ViTConfig:
    image_size: int = 64  # the training resolution; positional embeddings are defined on its grid
    patch: int = 8
    width: int = 192
    depth: int = 5
    heads: int = 3
    mlp_ratio: int = 4
    embed_dim: int = 384  # MiniLM's sentence-embedding size
    stem: str = "conv"  # "conv": three stride-2 3x3 convolutions (Xiao et al. 2021); "patch": one 8x8 linear patchify


class Block(nn.Module):
    """Pre-norm transformer block (SDPA attention, GELU MLP) with LayerScale.

    LayerScale (Touvron et al. 2021) starts each residual branch near zero, so a fresh stack is
    close to the identity and the stem's features reach the output intact instead of drowning in
    randomly initialised blocks (what that cost: the card's "Design notes and measurements")."""

    def __init__(self, width: int, heads: int, mlp_ratio: int, layer_scale: float = 1e-2):
        super().__init__()
        self.heads = heads
        self.gamma1 = nn.Parameter(torch.full((width,), layer_scale))
        self.gamma2 = nn.Parameter(torch.full((width,), layer_scale))
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.gamma1 * self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.gamma2 * self.mlp(self.ln2(x))


def _init_weights(m: nn.Module) -> None:
    """The usual ViT init: small normal linear weights, zero biases. PyTorch's default (Kaiming-uniform)
    makes the residual stream of a few random blocks swamp the stem's signal."""
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)


def save_builtin(model: nn.Module, directory: str | Path, kind: str, metadata: dict | None = None) -> Path:
    """``directory/config.json`` (the dataclass config, tagged with ``kind``) + ``model.safetensors``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"model": kind, **asdict(model.config)}, indent=1))
    save_state_dict(model.state_dict(), directory / "model.safetensors", metadata={k: str(v) for k, v in (metadata or {}).items()})
    return directory


class BuiltinViT(nn.Module):
    backend = "builtin"

    def __init__(self, config: ViTConfig | None = None):
        super().__init__()
        self.config = c = config or ViTConfig()
        grid = c.image_size // c.patch
        if c.stem == "conv":
            # A convolutional stem with max-pooling (a hybrid ViT): shapes straddle patch borders, and
            # a ViT lacks the translation invariance to pick them up from this much data; conv + pool
            # layers have it (the card's "Design notes and measurements": what the other stems did).
            assert c.patch == 8, "the conv stem has stride 8"
            self.patch_embed = nn.Sequential(
                nn.Conv2d(3, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(64, 128, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(128, c.width, 1))
        else:
            self.patch_embed = nn.Conv2d(3, c.width, c.patch, c.patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, c.width))
        self.pos = nn.Parameter(torch.randn(1, grid * grid, c.width) * 0.02)
        self.blocks = nn.ModuleList(Block(c.width, c.heads, c.mlp_ratio) for _ in range(c.depth))
        self.ln = nn.LayerNorm(c.width)
        self.head = nn.Linear(c.width, c.embed_dim)
        self.last_cls: torch.Tensor | None = None  # the pre-projection [CLS] state of the last forward
        self.apply(_init_weights)

    @property
    def device(self) -> torch.device:
        return self.cls.device

    def preprocess(self, frames: np.ndarray | torch.Tensor) -> torch.Tensor:
        """uint8 ``(N, H, W, 3)`` (or one frame) to float ``(N, 3, H, W)`` in [-1, 1] on the model's device."""
        x = torch.as_tensor(np.asarray(frames) if not isinstance(frames, torch.Tensor) else frames)
        if x.ndim == 3:
            x = x[None]
        if x.ndim != 4 or x.shape[-1] != 3:
            raise InputError("frames", f"shape {tuple(x.shape)}", "pass uint8 (N, H, W, 3) RGB frames")
        h, w = x.shape[1:3]
        if h % self.config.patch or w % self.config.patch:
            raise InputError("frames", f"size {h}x{w}", f"sides must be multiples of the patch size {self.config.patch}")
        return x.to(self.device).permute(0, 3, 1, 2).float().div(127.5).sub(1)

    def _pos(self, gh: int, gw: int) -> torch.Tensor:
        g = self.config.image_size // self.config.patch
        if (gh, gw) == (g, g):
            return self.pos
        p = self.pos.reshape(1, g, g, -1).permute(0, 3, 1, 2)
        return F.interpolate(p, size=(gh, gw), mode="bilinear", align_corners=False).permute(0, 2, 3, 1).reshape(1, gh * gw, -1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x``: ``(N, 3, H, W)`` in [-1, 1]. Returns (unit embeddings ``(N, 384)``, patch tokens ``(N, P, width)``)."""
        p = self.patch_embed(x)
        gh, gw = p.shape[-2:]
        tokens = p.flatten(2).transpose(1, 2) + self._pos(gh, gw)
        h = torch.cat([self.cls.expand(len(x), -1, -1), tokens], 1)
        for blk in self.blocks:
            h = blk(h)
        h = self.ln(h)
        # pooled = [CLS] + max over patch tokens: the max carries what the stem detects anywhere
        # in the frame from the first step on; [CLS] learns to add context
        pooled = h[:, 0] + h[:, 1:].max(1).values
        self.last_cls = pooled
        return F.normalize(self.head(pooled), dim=-1), h[:, 1:]

    @torch.no_grad()
    def embed(self, frames: np.ndarray, batch_size: int = 256) -> np.ndarray:
        """Unit embeddings ``(N, 384)`` of uint8 frames, comparable with ``MiniLM.encode``."""
        x = self.preprocess(frames)
        return torch.cat([self(x[i : i + batch_size])[0] for i in range(0, len(x), batch_size)]).cpu().numpy()

    # ---- persistence (a component: save_pretrained / from_pretrained)
    def save_pretrained(self, directory: str | Path, metadata: dict | None = None) -> Path:
        return save_builtin(self, directory, "builtin-vit", metadata)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device | None = None) -> BuiltinViT:
        directory = Path(directory)
        cfg = json.loads((directory / "config.json").read_text())
        cfg.pop("model", None)
        model = cls(ViTConfig(**cfg))
        model.load_state_dict(load_state_dict(directory / "model.safetensors"))
        return model.eval().to(device or "cpu")
