"""The builtin planner's input encoder: the builtin ViT for sources, MiniLM for the prompt.

    encoder = BuiltinPlanEncoder.from_pretrained()           # the shipped builtin ViT
    src = encoder.encode_visual(clip)                        # VisualTokens (4, 8, 8, 192): plan frames 0, 5, 10, 15
    ref = encoder.encode_visual(image, "image")              # VisualTokens (1, 8, 8, 192)
    states = encoder.encode_prompt("make the blue square green")   # (L, 384) MiniLM token states

A Qwen2.5-VL planner encodes its own inputs (``HFPlannerBackbone.encode_visual``, text through its
tokenizer); the builtin one reads sources in the space it plans in (the builtin ViT's patch tokens,
``training.bernini_data``) and prompts as MiniLM token states (``text_embed_dim`` 384), so this is the
pipeline's ``encoder`` slot for it. The ViT is saved beside the pipeline (a folder is self-contained).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core.errors import InputError
from planners.semantic.layout import VisualTokens

VIT_DIR = Path(__file__).resolve().parents[2] / "weights" / "builtin" / "vit"
KIND = "builtin-plan-encoder"


class BuiltinPlanEncoder(nn.Module):
    """Sources -> builtin-ViT patch tokens on the plan frames; prompts -> MiniLM token states."""

    backend = "builtin"

    def __init__(self, vit: Any, plan_frames: int = 4):
        super().__init__()
        if not isinstance(plan_frames, int) or isinstance(plan_frames, bool) or plan_frames < 1:
            raise InputError("plan_frames", plan_frames, "use a positive integer")
        self.vit, self.plan_frames = vit.eval(), plan_frames
        self._text = None

    @property
    def device(self) -> torch.device:
        return self.vit.device

    @property
    def text(self):
        if self._text is None:
            from planners.builtin.text import MiniLM

            self._text = MiniLM()
        return self._text

    @torch.no_grad()
    def encode_visual(self, frames: np.ndarray, kind: str | None = None) -> VisualTokens:
        """A clip ``(T, H, W, 3)`` (its plan frames, ``plan_frame_indices(T, plan_frames)``) or one image."""
        from renderers.builtin import plan_frame_indices

        frames = np.asarray(frames)
        if frames.ndim == 3:
            frames = frames[None]
        if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) < 1:
            raise InputError("frames", getattr(frames, "shape", frames), "pass uint8 RGB frames (T, H, W, 3) or an image (H, W, 3)")
        kind = kind or ("image" if len(frames) == 1 else "video")
        if kind not in ("image", "video"):
            raise InputError("kind", kind, "use 'image' or 'video'")
        if kind == "video":
            frames = frames[plan_frame_indices(len(frames), min(self.plan_frames, len(frames)))]
        else:
            frames = frames[:1]
        tokens = self.vit(self.vit.preprocess(frames))[1]
        p = self.vit.config.patch
        grid = (len(frames), frames.shape[1] // p, frames.shape[2] // p)
        return VisualTokens(tokens.float().reshape(*grid, -1).cpu(), kind)

    @torch.no_grad()
    def encode_prompt(self, text: str) -> torch.Tensor:
        """MiniLM token states ``(L, 384)`` float32 of ``text``."""
        if not isinstance(text, str) or not text.strip():
            raise InputError("prompt", text, "pass a non-empty instruction")
        return self.text.tokens([text])[0].float()

    @torch.no_grad()
    def plan_text_score(self, tokens: torch.Tensor, text: str) -> float:
        """How well a plan ``(T', h, w, D)`` of builtin-ViT patch tokens matches ``text`` [PROPOSED]: per plan frame,
        the ViT's embedding head on the max over the frame's tokens (its pooled image embedding without the [CLS]
        part, which a plan does not carry), cosine with the MiniLM sentence embedding, averaged over frames. Used to
        pick the best of several sampled plans (``BerniniConfig.plan_candidates``)."""
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 4 or tokens.shape[-1] != self.vit.config.width:
            raise InputError("tokens", getattr(tokens, "shape", tokens), f"pass plan tokens (T', h, w, {self.vit.config.width})")
        if not isinstance(text, str) or not text.strip():
            raise InputError("text", text, "pass a non-empty text")
        pooled = tokens.reshape(tokens.shape[0], -1, tokens.shape[-1]).to(self.device, torch.float32).max(1).values
        frames = torch.nn.functional.normalize(self.vit.head(pooled), dim=-1)
        sentence = self.text.encode([text])[0].to(self.device, torch.float32)
        return float((frames @ sentence).mean())

    def save_pretrained(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.vit.save_pretrained(directory / "vit")
        (directory / "config.json").write_text(json.dumps({"model": KIND, "plan_frames": self.plan_frames}, indent=1))
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path | None = None, device: Any = None, dtype: Any = None, **_: Any) -> BuiltinPlanEncoder:
        """A saved encoder folder, or None for the shipped builtin ViT (plan frames 4)."""
        from planners.builtin.vit import BuiltinViT

        if directory is None:
            return cls(BuiltinViT.from_pretrained(VIT_DIR, device=device))
        directory = Path(directory)
        try:
            cfg = json.loads((directory / "config.json").read_text())
        except (OSError, ValueError) as e:
            raise InputError("encoder", str(directory), f"not a saved builtin plan encoder ({e})") from None
        if not isinstance(cfg, dict) or cfg.get("model") != KIND:
            raise InputError("encoder", str(directory), f"config.json does not describe a {KIND}")
        return cls(BuiltinViT.from_pretrained(directory / "vit", device=device), int(cfg.get("plan_frames", 4)))

    def to(self, device: Any = None, dtype: Any = None, **_: Any) -> BuiltinPlanEncoder:
        if device is not None:
            self.vit.to(device)
        return self
