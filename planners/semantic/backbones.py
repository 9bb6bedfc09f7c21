"""Backbones of the semantic planner: the small protocol, a transformers adapter and the builtin transformer.

The planner only ever calls a backbone this way (spec c, ``planner.py``)::

    ids    = backbone.encode_text("a red square moves left")     # no special tokens added
    rows   = backbone.embed_tokens(torch.tensor(ids))            # (n, hidden_size) input embeddings
    states = backbone(inputs_embeds, attention_mask, position_ids)   # all hidden states, input first
    h      = states[-2]                                          # penultimate layer, pre-final-norm (b.1)
    logits = backbone.lm_logits(states[-1])                      # next-token logits (chain-of-thought)

``attention_mask`` is the 4-D additive mask ``(B, 1, L, L)`` of ``layout.block_attention_mask``;
``position_ids`` are M-RoPE's ``(3, B, L)``. ``states`` follows transformers' ``output_hidden_states``:
``num_layers + 1`` tensors, the last one after the final norm.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.device import select_device, select_dtype
from core.errors import InputError
from core.weights_io import load_state_dict, save_state_dict
from planners.semantic.layout import VisualTokens

SPECIAL_NAMES = ("eos", "im_start", "vision_start", "vision_end")


@runtime_checkable
class PlannerBackbone(Protocol):
    """What the semantic planner needs from a language model (an ``nn.Module``)."""

    kind: str
    hidden_size: int
    special_ids: dict[str, int]

    def encode_text(self, text: str) -> list[int]: ...

    def decode_text(self, ids: list[int]) -> str: ...

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor: ...

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor) -> tuple[torch.Tensor, ...]: ...

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...

    def save_pretrained(self, directory: str | Path) -> Path: ...


# ---- the builtin backbone ------------------------------------------------------------------------------


class ByteTokenizer:
    """UTF-8 bytes (ids 0-255) plus four specials; nothing to download or train [PROPOSED builtin vocabulary]."""

    SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|vision_start|>", "<|vision_end|>")

    def __init__(self):
        self.special_ids = dict(zip(SPECIAL_NAMES, range(256, 256 + len(self.SPECIALS))))
        self.vocab_size = 256 + len(self.SPECIALS)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise InputError("text", text, "pass a string")
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


@dataclass
class TinyBackboneConfig:
    """The builtin planner backbone: a pre-norm decoder (RMSNorm, SDPA attention, SiLU MLP, 3-axis M-RoPE).

    [PROPOSED] sizes for a CPU-trainable model on worldgen plans; ``mrope_section`` counts the head's
    ``head_dim / 2`` rotary frequencies given to (time, height, width).

    ``mrope_layout`` says which frequencies each axis gets:

    - ``"sections"``: contiguous runs of one ladder, as Qwen2.5-VL (time the fastest, width the slowest; None
      gives the 1:1.5:1.5 split of its 16/24/24 of 64). At this head size width's fastest frequency turns
      0.003 rad per grid step and height's 0.1, so neighbouring tokens look alike to attention: measured, the
      planner trained so could not tell where an object is from the tokens around it (docs/BENCHMARKS.md);
    - ``"interleaved"``: Qwen3-VL's layout, frequencies dealt out t, h, w, t, h, w, ... so every axis gets fast
      and slow ones (None gives its 24/20/20-of-64 proportions: the last ``half - 3 * hw`` go to time).

    Text tokens carry one position on all three axes, so the layout changes only the vision tokens' encoding.
    """

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    mlp_ratio: int = 4
    rope_theta: float = 10000.0
    mrope_section: tuple[int, int, int] | None = None
    mrope_layout: str = "sections"  # "sections" (Qwen2.5-VL, the weights shipped until 2026-12-05) or "interleaved"
    vocab_size: int = 260

    def __post_init__(self):
        for name in ("hidden_size", "num_layers", "num_heads", "mlp_ratio", "vocab_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(name, v, "use a positive integer")
        if self.num_layers < 2:
            raise InputError("num_layers", self.num_layers, "use at least 2 layers (the planner reads hidden_states[-2])")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise InputError("num_heads", self.num_heads, f"must divide hidden_size {self.hidden_size} into even head sizes")
        if self.mrope_layout not in ("sections", "interleaved"):
            raise InputError("mrope_layout", self.mrope_layout, "use 'sections' (Qwen2.5-VL) or 'interleaved' (Qwen3-VL)")
        half = self.hidden_size // self.num_heads // 2
        if self.mrope_section is None:
            hw = (3 * half) // 8 if self.mrope_layout == "sections" else (5 * half) // 16
            self.mrope_section = (half - 2 * hw, hw, hw)
        self.mrope_section = tuple(int(s) for s in self.mrope_section)
        if len(self.mrope_section) != 3 or sum(self.mrope_section) != half or min(self.mrope_section) < 0:
            raise InputError("mrope_section", self.mrope_section, f"use three sizes summing to head_dim / 2 = {half}")
        if self.mrope_layout == "interleaved" and 3 * max(self.mrope_section[1:]) > half:
            raise InputError("mrope_section", self.mrope_section, f"interleaved: height and width take every third of "
                                                                  f"the {half} frequencies, so at most {half // 3} each")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def mrope_axes(section: tuple[int, int, int], layout: str = "sections") -> torch.Tensor:
    """The axis (0 time, 1 height, 2 width) of each rotary frequency, fastest first (``TinyBackboneConfig``):
    contiguous ``section`` runs, or interleaved as Qwen3-VL (height at 1, 4, 7, ..., width at 2, 5, 8, ..., for
    ``section[1]`` and ``section[2]`` frequencies; time everywhere else)."""
    if layout == "sections":
        return torch.repeat_interleave(torch.arange(3), torch.tensor(section))
    axis = torch.zeros(sum(section), dtype=torch.long)
    for a in (1, 2):
        axis[a : 3 * section[a] : 3] = a
    return axis


def mrope_tables(position_ids: torch.Tensor, head_dim: int, theta: float,
                 section: tuple[int, int, int], layout: str = "sections") -> tuple[torch.Tensor, torch.Tensor]:
    """cos / sin ``(B, 1, L, head_dim)`` of multimodal RoPE: frequency ``j`` rotates by the position on the
    axis ``mrope_axes`` gives it (time, height, width), the halves convention of Qwen's ``rotate_half``."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=position_ids.device) / head_dim)
    freqs = position_ids.float()[..., None] * inv  # (3, B, L, c)
    axis = mrope_axes(section, layout).to(position_ids.device)
    sel = freqs.permute(1, 2, 3, 0).gather(-1, axis.view(1, 1, -1, 1).expand(*freqs.shape[1:], 1))[..., 0]
    emb = torch.cat([sel, sel], dim=-1)[:, None]
    return emb.cos(), emb.sin()


class _Block(nn.Module):
    def __init__(self, c: TinyBackboneConfig):
        super().__init__()
        self.heads = c.num_heads
        self.norm1 = nn.RMSNorm(c.hidden_size, eps=1e-6)
        self.norm2 = nn.RMSNorm(c.hidden_size, eps=1e-6)
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size)
        self.proj = nn.Linear(c.hidden_size, c.hidden_size, bias=False)
        self.mlp = nn.Sequential(nn.Linear(c.hidden_size, c.mlp_ratio * c.hidden_size), nn.SiLU(),
                                 nn.Linear(c.mlp_ratio * c.hidden_size, c.hidden_size, bias=False))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class TinyPlannerBackbone(nn.Module):
    """The builtin planner LM: byte tokens in, ``num_layers + 1`` hidden states out, a tied LM head."""

    kind = "builtin"

    def __init__(self, config: TinyBackboneConfig | None = None):
        super().__init__()
        self.config = c = config or TinyBackboneConfig()
        self.tokenizer = ByteTokenizer()
        if c.vocab_size < self.tokenizer.vocab_size:
            raise InputError("vocab_size", c.vocab_size, f"use at least {self.tokenizer.vocab_size} (bytes + specials)")
        self.hidden_size = c.hidden_size
        self.special_ids = dict(self.tokenizer.special_ids)
        self.embed = nn.Embedding(c.vocab_size, c.hidden_size)
        self.blocks = nn.ModuleList(_Block(c) for _ in range(c.num_layers))
        self.norm = nn.RMSNorm(c.hidden_size, eps=1e-6)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode_text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids)

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c = self.config
        cos, sin = mrope_tables(position_ids, c.hidden_size // c.num_heads, c.rope_theta, c.mrope_section, c.mrope_layout)
        x = inputs_embeds.to(self.embed.weight.dtype)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        mask = attention_mask.to(x.dtype)
        states = [x]
        for block in self.blocks:
            x = block(x, mask, cos, sin)
            states.append(x)
        states[-1] = self.norm(x)
        return tuple(states)

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.embed.weight.T

    def save_pretrained(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps({"model": "semantic-planner-backbone", **asdict(self.config)}, indent=1))
        save_state_dict(self.state_dict(), directory / "model.safetensors")
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None) -> TinyPlannerBackbone:
        directory = Path(directory)
        try:
            cfg = json.loads((directory / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise InputError("directory", str(directory), f"no readable backbone config.json ({e})") from None
        if cfg.pop("model", None) != "semantic-planner-backbone":
            raise InputError("directory", str(directory), "is not a saved builtin planner backbone")
        model = cls(TinyBackboneConfig(**cfg))
        model.load_state_dict(load_state_dict(directory / "model.safetensors"))
        device = select_device(device) if device is not None else torch.device("cpu")
        return model.to(device=device, dtype=select_dtype(dtype, device) if dtype is not None else None)


# ---- transformers (Qwen2.5-VL) ---------------------------------------------------------------------------


class HFPlannerBackbone(nn.Module):
    """A transformers Qwen-VL model (``Qwen2_5_VLForConditionalGeneration``) as the planner backbone.

    Runs the language model on ``inputs_embeds`` with the planner's 4-D additive mask (transformers uses a
    4-D mask as given) and explicit M-RoPE ``position_ids``, so none of the model's own mask or
    ``get_rope_index`` logic is involved. ``encode_visual`` turns frames into the merged vision tokens the
    LM reads, which are also the targets the planner predicts (spec b.1).
    """

    kind = "hf"

    def __init__(self, model: Any, processor: Any):
        super().__init__()
        self.model, self.processor = model, processor
        tok = processor.tokenizer
        text_config = model.config.get_text_config()
        self.hidden_size = int(text_config.hidden_size)
        names = {"im_start": "<|im_start|>", "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>"}
        ids = {k: tok.convert_tokens_to_ids(v) for k, v in names.items()}
        ids["eos"] = tok.eos_token_id
        missing = [k for k, v in ids.items() if v is None or v == tok.unk_token_id]
        if missing:
            raise InputError("model", type(model).__name__, f"its tokenizer lacks the Qwen chat specials {missing}")
        self.special_ids = {k: int(v) for k, v in ids.items()}

    @classmethod
    def from_pretrained(cls, path: str | Path, device: Any = None, dtype: Any = None) -> HFPlannerBackbone:
        from planners.hf import HFVisionLanguageModel

        vlm = HFVisionLanguageModel.from_pretrained(path, device=device, dtype=dtype)
        return cls(vlm.model, vlm.processor)

    def save_pretrained(self, directory: str | Path) -> Path:
        from planners.hf import HFVisionLanguageModel

        return HFVisionLanguageModel(self.model, self.processor).save_pretrained(directory)

    def encode_text(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise InputError("text", text, "pass a string")
        return [int(i) for i in self.processor.tokenizer.encode(text, add_special_tokens=False)]

    def decode_text(self, ids: list[int]) -> str:
        return self.processor.tokenizer.decode(list(ids), skip_special_tokens=True)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.get_input_embeddings()(ids)

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        dtype = self.model.get_input_embeddings().weight.dtype
        out = self.model.model(inputs_embeds=inputs_embeds.to(dtype), attention_mask=attention_mask.to(dtype),
                               position_ids=position_ids, use_cache=False, output_hidden_states=True)
        return tuple(out.hidden_states)

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(hidden)

    @torch.no_grad()
    def encode_visual(self, frames: np.ndarray, kind: str | None = None, *, source_fps: float = 16.0,
                      planner_fps: float | None = None, max_pixels: int | None = None) -> VisualTokens:
        """Frames ``(T, H, W, 3)`` (or one image ``(H, W, 3)``) as merged vision tokens ``(t, h, w, hidden)``.

        A single frame goes in as an image; more frames as a video (the processor pairs frames in time).
        Defaults (None) are the processor's own: every frame, its own pixel budget and resampling. The
        release reads sources at ``planner_fps`` 2 (``layout.planner_frame_indices`` of a clip at
        ``source_fps``) and ``max_pixels`` 50176 with an antialiased bicubic ``smart_resize`` (T8mars
        qwen.py ``process_qwen2vl_video``); the pipeline passes those for official checkpoints.
        """
        from planners.protocol import check_frames

        frames = check_frames(frames)
        kind = kind or ("image" if len(frames) == 1 else "video")
        if planner_fps is not None and kind == "video":
            from planners.semantic.layout import planner_frame_indices

            frames = frames[planner_frame_indices(len(frames), source_fps, planner_fps, max_frames=len(frames))]
        if max_pixels is not None:
            return self._encode_resized(frames, kind, max_pixels)
        merge = int(self.model.config.vision_config.spatial_merge_size)
        device = next(self.model.parameters()).device
        dtype = next(self.model.model.visual.parameters()).dtype
        if kind == "image":
            from PIL import Image

            inputs = self.processor.image_processor(images=[Image.fromarray(frames[0])], return_tensors="pt")
            grid = inputs["image_grid_thw"][0]
            out = self.model.get_image_features(inputs["pixel_values"].to(device, dtype), inputs["image_grid_thw"].to(device))
        elif kind == "video":
            video_processor = self.processor.video_processor
            extra = {"cap_pixels_per_frame": True} if hasattr(video_processor, "cap_pixels_per_frame") else {}
            inputs = video_processor(videos=[frames], return_tensors="pt", do_sample_frames=False, **extra)
            grid = inputs["video_grid_thw"][0]
            out = self.model.get_video_features(inputs["pixel_values_videos"].to(device, dtype),
                                                inputs["video_grid_thw"].to(device))
        else:
            raise InputError("kind", kind, "use 'image' or 'video'")
        tokens = out.pooler_output[0]
        t, h, w = int(grid[0]), int(grid[1]) // merge, int(grid[2]) // merge
        return VisualTokens(tokens.float().reshape(t, h, w, -1), kind)


    def _encode_resized(self, frames: np.ndarray, kind: str, max_pixels: int) -> VisualTokens:
        # Resize ourselves (bicubic, antialiased, smart_resize within max_pixels) and hand the processor
        # [0, 1] floats to normalise and patchify only, as the release preprocesses planner sources.
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        from planners.semantic.layout import VIT_FACTOR, VIT_MIN_PIXELS

        h, w = smart_resize(frames.shape[1], frames.shape[2], VIT_FACTOR, VIT_MIN_PIXELS, int(max_pixels))
        x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255.0
        x = F.interpolate(x, size=(h, w), mode="bicubic", align_corners=False, antialias=True)
        merge = int(self.model.config.vision_config.spatial_merge_size)
        device = next(self.model.parameters()).device
        dtype = next(self.model.model.visual.parameters()).dtype
        common = {"do_resize": False, "do_rescale": False, "return_tensors": "pt"}
        if kind == "image":
            inputs = self.processor.image_processor(images=[x[0]], **common)
            grid = inputs["image_grid_thw"][0]
            out = self.model.get_image_features(inputs["pixel_values"].to(device, dtype), inputs["image_grid_thw"].to(device))
        else:
            vp = self.processor.video_processor
            extra = {"cap_pixels_per_frame": True} if hasattr(vp, "cap_pixels_per_frame") else {}
            inputs = vp(videos=[x], do_sample_frames=False, **common, **extra)
            grid = inputs["video_grid_thw"][0]
            out = self.model.get_video_features(inputs["pixel_values_videos"].to(device, dtype),
                                                inputs["video_grid_thw"].to(device))
        tokens = out.pooler_output[0]
        t, gh, gw = int(grid[0]), int(grid[1]) // merge, int(grid[2]) // merge
        return VisualTokens(tokens.float().reshape(t, gh, gw, -1), kind)


BACKBONES: dict[str, type[nn.Module]] = {"builtin": TinyPlannerBackbone, "hf": HFPlannerBackbone}
