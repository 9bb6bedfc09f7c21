"""The hf backend of the Bernini renderer: diffusers' Wan DiT as an in-context multi-segment renderer.

    renderer = WanRenderer.from_pretrained("Bernini-R-Diffusers")          # a local folder
    frames = renderer.generate("a red fox in the snow", sources=[source_clip], height=480, width=832,
                               num_frames=81, generator=torch.Generator().manual_seed(42))   # (T, H, W, 3) uint8

A folder is laid out like the public ``ByteDance/Bernini-R-Diffusers`` release: ``transformer/`` (the
high-noise expert of Wan2.2 A14B, or the only expert), optional ``transformer_2/`` (the low-noise
expert), ``vae/`` (``AutoencoderKLWan``), optional ``scheduler/``, optional ``text_encoder/`` +
``tokenizer/`` (UMT5) and the root ``config.json`` (``model_type: bernini_renderer``:
``switch_dit_boundary``, ``max_sequence_length``, ``shift``, ``use_unipc``, ``use_src_id_rotary_emb``,
``skip_transformer_2``). A stock Wan diffusers folder (``model_index.json``) loads too. Without a
text encoder, callers pass precomputed UMT5 embeddings (``text_embeds``).

In-context conditioning (spec bernini.md b.5): every source (a video, or a reference image as one
latent frame) is VAE-encoded clean and patch-embedded by the DiT's own patch embedding, then packed
before the noisy target, ``[source 1 | ... | source K | target]``, into one token sequence with full
self-attention. diffusers' ``WanTransformer3DModel.forward`` embeds one 5-D latent and computes its own
RoPE, so ``packed_forward`` runs the model's modules itself (patch embedding, condition embedder,
blocks with ``rotary_emb`` = the SA-3D tables of ``renderers.rope``, output head) exactly as that
forward does; with no sources it is the same computation, bit for bit. Only the target tokens go
through the output head: the flow-matching velocity is read from the target positions only.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from diffusers import (
    AutoencoderKLWan,
    FlowMatchEulerDiscreteScheduler,
    UniPCMultistepScheduler,
    WanTransformer3DModel,
)

from core.device import load_dtype, select_device, select_dtype
from core.errors import InputError
from renderers import caching, flow, rope
from renderers.guidance import APG, Branch, CascadeGuidance, GuidanceScales, ModeGuidance

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
MODEL_TYPE = "bernini_renderer"
SourceKind = Literal["video", "image"]
StepInfoCallback = Callable[[int, dict[str, Any]], None]
_SCHEDULERS = {"UniPCMultistepScheduler": UniPCMultistepScheduler,
               "FlowMatchEulerDiscreteScheduler": FlowMatchEulerDiscreteScheduler}
DEFAULT_GUIDANCE = GuidanceScales()


# ---------------------------------------------------------------- configuration

@dataclass(frozen=True)
class RendererConfig:
    """The release's root ``config.json`` (spec b.5, b.8); unknown keys are kept in ``extra`` and saved back.

    ``switch_dit_boundary``: the high-noise expert serves ``t >= 1000 * boundary`` (0.875 for Wan2.2 A14B;
    0 = one expert). ``shift``: the release's schedule shift, recorded as it is; sampling uses
    ``generate(flow_shift=5.0)``, the official demo's call-time value (spec b.8). ``use_src_id_rotary_emb``:
    SA-3D segment phases on (off = every segment at id 0, plain 3D RoPE per segment).
    ``max_trained_src_id``: [PORT] v2's ``interpolate_src_id`` range (spec b.5).
    """

    switch_dit_boundary: float = 0.875
    max_sequence_length: int = 512
    shift: float = 3.0
    use_unipc: bool = True
    use_src_id_rotary_emb: bool = True
    skip_transformer_2: bool = False
    max_trained_src_id: int = 5
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b = self.switch_dit_boundary
        if not isinstance(b, numbers.Real) or isinstance(b, bool) or not 0 <= b < 1:
            raise InputError("switch_dit_boundary", b, "use a number in [0, 1): 0.875 for Wan2.2 A14B, 0 for one expert")
        if not _is_int(self.max_sequence_length) or self.max_sequence_length < 1:
            raise InputError("max_sequence_length", self.max_sequence_length, "use a positive integer (512)")
        if not _is_int(self.max_trained_src_id) or self.max_trained_src_id < 1:
            raise InputError("max_trained_src_id", self.max_trained_src_id, "use a positive integer (5)")
        for name in ("use_unipc", "use_src_id_rotary_emb", "skip_transformer_2"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(name, getattr(self, name), "use true or false")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RendererConfig:
        known = {f.name for f in fields(cls)} - {"extra"}
        extra = {k: v for k, v in raw.items() if k not in known and k != "model_type"}
        return cls(**{k: raw[k] for k in known if k in raw}, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out = {"model_type": MODEL_TYPE, **self.extra}
        out.update({k: v for k, v in asdict(self).items() if k != "extra"})
        return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InputError(str(path), f"not JSON ({e.msg} at line {e.lineno})", "restore the file from the release") from None
    if not isinstance(raw, dict):
        raise InputError(str(path), type(raw).__name__, "the file must hold a JSON object")
    return raw


def _read_config(directory: Path) -> RendererConfig:
    """The root config of a Bernini folder, else what a stock Wan ``model_index.json`` says."""
    path = directory / CONFIG_NAME
    if path.is_file():
        return RendererConfig.from_dict(_read_json(path))
    index = directory / "model_index.json"
    if index.is_file():
        raw = _read_json(index)
        # WanPipeline: transformer serves t >= boundary_ratio * 1000; no ratio means Wan2.1, one expert.
        ratio = raw.get("boundary_ratio")
        if ratio is not None and (not isinstance(ratio, numbers.Real) or isinstance(ratio, bool)):
            raise InputError(f"{index}: boundary_ratio", ratio, "use a number in [0, 1) or null")
        return RendererConfig(switch_dit_boundary=float(ratio or 0.0), skip_transformer_2=ratio is None)
    return RendererConfig()


# ---------------------------------------------------------------- inputs

@dataclass(frozen=True)
class Segment:
    """A clean source in the packed sequence: normalised VAE latents ``(B, C, T, h, w)`` and its segment id.

    ``kind`` decides which guidance rungs see it (spec b.8: ``wvidvae`` holds only source videos).
    """

    latents: torch.Tensor
    segment_id: float
    kind: SourceKind = "video"


@dataclass(frozen=True)
class PlanContexts:
    """The planner's renderer contexts (spec b.4), each ``(B, N, text_dim)``, already through ``for_gen``.

    Each is appended after the UMT5 features along the sequence axis: ``with_target`` (ctx_c at all
    positions) for ``wtxt_wvit``, ``without_target`` (ctx_c at non-target positions) for ``wtxt_wovit``
    and ``uncond`` (ctx_u at non-target positions) for ``wotxt_wovit``. [PROPOSED] this split of the
    port's four variants is the interface; Bernini-R has no planner and runs with ``plan=None``.
    """

    with_target: torch.Tensor
    without_target: torch.Tensor
    uncond: torch.Tensor


def _is_int(x: object) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_size(height: int, width: int, num_frames: int, *, spatial: int = 8, temporal: int = 4,
               patch: Sequence[int] = (1, 2, 2)) -> None:
    """Raise ``InputError`` naming the argument unless Wan can take this size.

    Height / width must be multiples of the VAE's spatial factor times the DiT's patch (8 x 2 = 16), and
    ``num_frames`` of the form ``temporal * k + 1``: Wan's causal VAE keeps the first frame alone and
    compresses the rest in groups of 4.
    """
    for name, value, p in (("height", height, patch[1]), ("width", width, patch[2])):
        m = spatial * p
        if not _is_int(value) or value <= 0 or value % m:
            near = max(m, round(value / m) * m) if isinstance(value, numbers.Real) and math.isfinite(value) else m
            raise InputError(name, value, f"use a positive multiple of {m} (VAE x{spatial} times patch {p}), "
                                          f"e.g. {near}")
    if not _is_int(num_frames) or num_frames < 1 or (num_frames - 1) % temporal:
        ok = isinstance(num_frames, numbers.Real) and math.isfinite(num_frames) and num_frames >= 1
        near = int(num_frames - 1) // temporal * temporal + 1 if ok else 1
        raise InputError("num_frames", num_frames, f"use {temporal}k+1 frames (1, {temporal + 1}, "
                                                   f"{2 * temporal + 1}, ..., 81), e.g. {near}")


def _as_frames(name: str, frames: Any) -> np.ndarray:
    """A source as ``(T, H, W, 3)`` uint8; an image ``(H, W, 3)`` becomes one frame."""
    if not isinstance(frames, np.ndarray) or frames.dtype != np.uint8 or frames.ndim not in (3, 4) \
            or frames.shape[-1] != 3:
        shape = getattr(frames, "shape", None)
        raise InputError(name, shape if shape is not None else type(frames).__name__,
                         "pass RGB uint8 frames (T, H, W, 3) for a video or (H, W, 3) for an image")
    return frames[None] if frames.ndim == 3 else frames


def _seed_generator(generator: torch.Generator | int | None) -> torch.Generator | None:
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if _is_int(generator) and generator >= 0:
        return torch.Generator().manual_seed(int(generator))
    raise InputError("generator", generator, "pass a torch.Generator or a non-negative integer seed")


def crop_text_features(features: torch.Tensor) -> torch.Tensor:
    """UMT5 features ``(B, L, D)`` cut after the last row that is not all zero (the prompt's attention length:
    ``encode_prompt`` zeroes every padded row), the longest over the batch; at least one row."""
    nonzero = features.abs().sum(dim=-1).ne(0).any(dim=0)
    rows = nonzero.nonzero()
    length = int(rows[-1]) + 1 if rows.numel() else 1
    return features[:, :length]


def pad_context(context: torch.Tensor, min_length: int = 512) -> torch.Tensor:
    """``context`` ``(B, L, D)`` zero-padded at the end to ``min_length`` rows (unchanged when longer)."""
    if context.shape[1] >= min_length:
        return context
    return torch.cat([context, context.new_zeros(context.shape[0], min_length - context.shape[1], context.shape[2])], 1)


# ---------------------------------------------------------------- the packed forward

@lru_cache(maxsize=8)
def _rotary_tables(layout: tuple[tuple[tuple[int, int, int], float], ...], head_dim: int,
                   device: str) -> rope.RotaryTables:
    # The same layout recurs every step (and in every batched branch): build its tables once.
    return rope.multi_segment_freqs(list(layout), head_dim, device=device)


def packed_forward(transformer: WanTransformer3DModel, target: torch.Tensor, timestep: torch.Tensor,
                   context: torch.Tensor, sources: Sequence[tuple[torch.Tensor, float]] = ()) -> torch.Tensor:
    """One DiT forward over ``[sources | target]``; returns the prediction at the target, ``target``'s shape.

    ``target`` and each source latent are ``(B, C, T, h, w)`` with the same B; ``timestep`` is ``(B,)``
    or a scalar, shared by every token (spec b.5: one timestep embedding for all); ``context`` the text
    (+ plan) features ``(B, L, text_dim)``. Each segment keeps its own local grid from (0, 0, 0) and
    gets the SA-3D phase of its id; the target is id 0 (spec b.6). This mirrors
    ``WanTransformer3DModel.forward`` of diffusers 0.42.1 line by line, with the rotary tables and
    the token packing replaced; what it leaves out is that forward's ``attention_kwargs`` LoRA scale
    and cache contexts (PEFT layers inside the blocks still apply) and Wan2.2 TI2V per-token timesteps.
    """
    cfg = transformer.config
    if cfg.image_dim is not None or cfg.added_kv_proj_dim is not None:
        raise InputError("transformer", "an image-conditioned (I2V) Wan", "Bernini renders with a T2V Wan DiT")
    dtype = transformer.patch_embedding.weight.dtype
    batch = target.shape[0]
    tokens, layout = [], []
    for x, segment_id in [*sources, (target, 0.0)]:
        h = transformer.patch_embedding(x.to(dtype))
        layout.append((tuple(int(n) for n in h.shape[2:]), float(segment_id)))
        tokens.append(h.flatten(2).transpose(1, 2))
    hidden = torch.cat(tokens, dim=1).contiguous()
    rotary = _rotary_tables(tuple(layout), int(cfg.attention_head_dim), str(hidden.device))

    timestep = torch.as_tensor(timestep, device=hidden.device)
    if timestep.numel() == 1:
        timestep = timestep.reshape(()).expand(batch)
    temb, timestep_proj, context, _ = transformer.condition_embedder(timestep, context.to(dtype), None,
                                                                     timestep_seq_len=None)
    timestep_proj = timestep_proj.unflatten(1, (6, -1))

    if torch.is_grad_enabled() and transformer.gradient_checkpointing:
        for block in transformer.blocks:
            hidden = transformer._gradient_checkpointing_func(block, hidden, context, timestep_proj, rotary)
    else:
        for block in transformer.blocks:
            hidden = block(hidden, context, timestep_proj, rotary)

    # Output norm and projection act per token: run them on the target tokens alone.
    (f, hh, ww), _ = layout[-1]
    hidden = hidden[:, -f * hh * ww:]
    shift, scale = (transformer.scale_shift_table.to(temb.device) + temb.unsqueeze(1)).chunk(2, dim=1)
    shift, scale = shift.to(hidden.device), scale.to(hidden.device)
    hidden = (transformer.norm_out(hidden.float()) * (1 + scale) + shift).type_as(hidden)
    hidden = transformer.proj_out(hidden)
    p_t, p_h, p_w = cfg.patch_size
    hidden = hidden.reshape(batch, f, hh, ww, p_t, p_h, p_w, -1).permute(0, 7, 1, 4, 2, 5, 3, 6)
    return hidden.flatten(6, 7).flatten(4, 5).flatten(2, 3)


# ---------------------------------------------------------------- the renderer

class WanRenderer:
    """Bernini's renderer on diffusers' Wan: multi-segment velocity, guided sampling, VAE in and out.

    Components: ``transformer`` (high-noise or only expert), ``transformer_2`` (low-noise expert or
    None), ``vae``, ``scheduler`` (a flow-prediction UniPC or FlowMatchEuler), ``text_encoder`` +
    ``tokenizer`` (UMT5, optional). The VAE stays in float32 whatever ``dtype`` the DiT runs in, as
    diffusers' Wan pipelines keep it.
    """

    backend = "hf"
    plan_input = "contexts"  # it reads the planner's for_gen contexts (PlanContexts), not tokens

    def __init__(self, transformer: WanTransformer3DModel, vae: AutoencoderKLWan, scheduler: Any = None,
                 text_encoder: Any = None, tokenizer: Any = None, transformer_2: WanTransformer3DModel | None = None,
                 config: RendererConfig | None = None) -> None:
        if not isinstance(transformer, WanTransformer3DModel):
            raise InputError("transformer", type(transformer).__name__, "pass a diffusers WanTransformer3DModel")
        if transformer_2 is not None and not isinstance(transformer_2, WanTransformer3DModel):
            raise InputError("transformer_2", type(transformer_2).__name__, "pass a WanTransformer3DModel or None")
        if not isinstance(vae, AutoencoderKLWan):
            raise InputError("vae", type(vae).__name__, "pass a diffusers AutoencoderKLWan")
        if (text_encoder is None) != (tokenizer is None):
            raise InputError("text_encoder" if text_encoder is None else "tokenizer", None,
                             "pass both the UMT5 text encoder and its tokenizer, or neither")
        for name, t in (("transformer", transformer), ("transformer_2", transformer_2)):
            if t is not None and (t.config.image_dim is not None or t.config.added_kv_proj_dim is not None):
                raise InputError(name, "an image-conditioned (I2V) Wan", "Bernini renders with a T2V Wan DiT")
        if transformer.config.in_channels != vae.config.z_dim:
            raise InputError("vae", f"z_dim={vae.config.z_dim}",
                             f"the transformer takes {transformer.config.in_channels} latent channels")
        self.transformer, self.transformer_2, self.vae = transformer, transformer_2, vae
        self.text_encoder, self.tokenizer = text_encoder, tokenizer
        self.config = config or RendererConfig(switch_dit_boundary=0.875 if transformer_2 is not None else 0.0)
        self.scheduler = scheduler if scheduler is not None else flow.make_scheduler(
            "unipc" if self.config.use_unipc else "euler", shift=5.0)
        self._offload: dict[str, Any] = {}
        self._offload_device: torch.device | None = None

    # ---- loading and saving

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None) -> WanRenderer:
        """Load a Bernini-R / Wan diffusers folder (see the module docstring); ``dtype`` "auto" is bf16 on CUDA."""
        root = Path(directory)
        if not root.is_dir():
            raise InputError("directory", str(directory), "pass a local folder laid out like Bernini-R-Diffusers")
        for part in ("transformer", "vae"):
            if not (root / part / "config.json").is_file():
                raise InputError("directory", str(root), f"it has no {part}/config.json; is it a Wan diffusers folder?")
        cfg = _read_config(root)
        dev = select_device(device)
        dt = load_dtype(dtype, dev, root / "transformer")  # a bf16 release stays bf16 on the CPU
        from renderers.bernini_official import check_diffusers_layout

        # the libraries warn and init a missing tensor at random; a release folder must match exactly
        check_diffusers_layout(root, transformer_2=not cfg.skip_transformer_2)
        transformer = WanTransformer3DModel.from_pretrained(root / "transformer", torch_dtype=dt).eval()
        transformer_2 = None
        if (root / "transformer_2" / "config.json").is_file() and not cfg.skip_transformer_2:
            transformer_2 = WanTransformer3DModel.from_pretrained(root / "transformer_2", torch_dtype=dt).eval()
        vae = AutoencoderKLWan.from_pretrained(root / "vae", torch_dtype=torch.float32).eval()
        scheduler = _load_scheduler(root / "scheduler")
        text_encoder = tokenizer = None
        if (root / "text_encoder").is_dir() and (root / "tokenizer").is_dir():
            from transformers import AutoTokenizer, UMT5EncoderModel

            tokenizer = AutoTokenizer.from_pretrained(root / "tokenizer", trust_remote_code=False)  # Wan's UMT5: no code
            text_encoder = UMT5EncoderModel.from_pretrained(root / "text_encoder", dtype=dt).eval()
        renderer = cls(transformer, vae, scheduler, text_encoder, tokenizer, transformer_2, cfg)
        return renderer.to(device=dev)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write the same layout ``from_pretrained`` reads, root ``config.json`` included."""
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        self.transformer.save_pretrained(root / "transformer")
        if self.transformer_2 is not None:
            self.transformer_2.save_pretrained(root / "transformer_2")
        self.vae.save_pretrained(root / "vae")
        self.scheduler.save_pretrained(root / "scheduler")
        if self.text_encoder is not None:
            self.text_encoder.save_pretrained(root / "text_encoder")
            self.tokenizer.save_pretrained(root / "tokenizer")
        cfg = replace(self.config, skip_transformer_2=self.transformer_2 is None)
        (root / CONFIG_NAME).write_text(json.dumps(cfg.to_dict(), indent=2))
        return root

    # ---- devices and memory

    def _modules(self) -> dict[str, torch.nn.Module]:
        mods = {"transformer": self.transformer, "transformer_2": self.transformer_2, "vae": self.vae,
                "text_encoder": self.text_encoder}
        return {k: m for k, m in mods.items() if m is not None}

    @property
    def device(self) -> torch.device:
        """Where inputs go: the offload device when offloading, else the DiT's device."""
        return self._offload_device or self.transformer.patch_embedding.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.transformer.patch_embedding.weight.dtype

    @property
    def has_text_encoder(self) -> bool:
        return self.text_encoder is not None

    def to(self, device: Any = None, dtype: Any = None) -> WanRenderer:
        """Move every component (ends model offload); ``dtype`` applies to the DiT(s) and text encoder only."""
        self.disable_model_cpu_offload()
        dev = None if device is None else select_device(device)
        dt = None if dtype is None else select_dtype(dtype, dev or self.device)
        for name, module in self._modules().items():
            kwargs = {"device": dev} if dev is not None else {}
            if dt is not None and name != "vae":
                kwargs["dtype"] = dt
            if kwargs:
                module.to(**kwargs)
        return self

    def enable_tiling(self, **kwargs: Any) -> WanRenderer:
        """Tiled VAE encode / decode (``AutoencoderKLWan.enable_tiling`` arguments): less memory at large sizes."""
        self.vae.enable_tiling(**kwargs)
        return self

    def disable_tiling(self) -> WanRenderer:
        self.vae.disable_tiling()
        return self

    def enable_model_cpu_offload(self, device: Any = None) -> WanRenderer:
        """Keep every component on the CPU and move each to ``device`` only while it runs (accelerate hooks).

        One component sits on the accelerator at a time: using one offloads the others. Without an
        accelerator (or with ``device="cpu"``) there is nothing to offload: a warning, and nothing changes.
        """
        dev = select_device(device)
        if dev.type == "cpu":
            logger.warning("enable_model_cpu_offload: no accelerator to offload to (running on the CPU); ignored")
            return self
        self._install_offload(dev)
        return self

    def _install_offload(self, device: torch.device) -> None:
        from accelerate import cpu_offload_with_hook

        self.disable_model_cpu_offload()
        for name, module in self._modules().items():
            module.to("cpu")
            self._offload[name] = cpu_offload_with_hook(module, device)[1]
        self._offload_device = device

    def disable_model_cpu_offload(self) -> None:
        """Remove the offload hooks; components stay where they are (the CPU, usually)."""
        for hook in self._offload.values():
            hook.remove()
        self._offload, self._offload_device = {}, None

    def _onload(self, name: str) -> None:
        # accelerate's hook fires on forward(), and the VAE's encode / decode carry diffusers'
        # apply_forward_hook; packed_forward bypasses the DiT's forward, so onload it by hand.
        if not self._offload:
            return
        for other, hook in self._offload.items():
            if other != name:
                hook.offload()
        if name not in self._offload:  # resident, or streamed by its own group-offload hooks (pipelines.bernini.placement)
            return
        hook = self._offload[name]
        hook.hook.pre_forward(hook.model)

    # ---- checks

    @property
    def vae_scale_spatial(self) -> int:
        return int(self.vae.config.scale_factor_spatial)

    @property
    def vae_scale_temporal(self) -> int:
        return int(self.vae.config.scale_factor_temporal)

    def check_inputs(self, height: int, width: int, num_frames: int) -> None:
        """``check_size`` with this model's VAE factors and patch size."""
        check_size(height, width, num_frames, spatial=self.vae_scale_spatial, temporal=self.vae_scale_temporal,
                   patch=tuple(self.transformer.config.patch_size))

    def _check_context(self, name: str, x: Any) -> torch.Tensor:
        d = int(self.transformer.config.text_dim)
        if not isinstance(x, torch.Tensor) or x.ndim != 3 or x.shape[-1] != d or x.shape[1] < 1:
            raise InputError(name, tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__,
                             f"pass a (B, L, {d}) tensor of UMT5 features (text_dim of the transformer)")
        return x

    # ---- text, VAE

    def encode_prompt(self, prompt: str | Sequence[str], max_sequence_length: int | None = None) -> torch.Tensor:
        """UMT5 features ``(B, max_sequence_length, text_dim)``, zero past each prompt's tokens (as WanPipeline)."""
        if self.text_encoder is None:
            raise InputError("prompt", prompt, "this renderer has no text_encoder/ and tokenizer/; "
                                               "pass text_embeds (B, L, text_dim) instead")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        if not prompts or not all(isinstance(p, str) for p in prompts):
            raise InputError("prompt", prompt, "pass a string or a list of strings")
        n = max_sequence_length or int(self.config.max_sequence_length)
        tok = self.tokenizer(prompts, padding="max_length", max_length=n, truncation=True, add_special_tokens=True,
                             return_attention_mask=True, return_tensors="pt")
        self._onload("text_encoder")
        dev = next(self.text_encoder.parameters()).device
        mask = tok.attention_mask.to(dev)
        hidden = self.text_encoder(tok.input_ids.to(dev), mask).last_hidden_state
        # The DiT was trained on exact zeros past the prompt, not on UMT5's outputs at padding.
        return (hidden * mask[..., None].to(hidden.dtype)).to(self.device, self.dtype)

    def _latent_stats(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (1, int(self.vae.config.z_dim), 1, 1, 1)
        mean = torch.tensor(self.vae.config.latents_mean).view(shape).to(like.device, like.dtype)
        std = torch.tensor(self.vae.config.latents_std).view(shape).to(like.device, like.dtype)
        return mean, std

    def encode_video(self, frames: np.ndarray, name: str = "frames") -> torch.Tensor:
        """RGB uint8 ``(T, H, W, 3)`` (or an image ``(H, W, 3)``) -> normalised latents ``(1, C, t, h, w)`` (b.1).

        The posterior's mode, not a sample: a clean condition should not depend on the seed.
        """
        return self._encode_clip(self._check_source(name, frames))

    def _check_source(self, name: str, frames: Any) -> np.ndarray:
        clip = _as_frames(name, frames)
        try:
            self.check_inputs(clip.shape[1], clip.shape[2], clip.shape[0])
        except InputError as e:
            raise InputError(name, frames.shape, f"its {e.name} {e.value}: {e.hint}") from None
        return clip

    def _encode_clip(self, clip: np.ndarray) -> torch.Tensor:
        self._onload("vae")
        dev = next(self.vae.parameters()).device
        x = torch.from_numpy(np.ascontiguousarray(clip)).to(dev).permute(3, 0, 1, 2)[None]
        x = x.to(self.vae.dtype) / 127.5 - 1.0
        z = self.vae.encode(x).latent_dist.mode()
        mean, std = self._latent_stats(z)
        return ((z - mean) / std).float()

    def decode_latents(self, latents: torch.Tensor) -> np.ndarray:
        """Normalised latents ``(B, C, t, h, w)`` -> uint8 frames ``(T, H, W, 3)`` (``(B, T, H, W, 3)`` if B > 1)."""
        if not isinstance(latents, torch.Tensor) or latents.ndim != 5 or latents.shape[1] != self.vae.config.z_dim:
            raise InputError("latents", getattr(latents, "shape", type(latents).__name__),
                             f"pass (B, {self.vae.config.z_dim}, t, h, w) normalised latents")
        self._onload("vae")
        dev = next(self.vae.parameters()).device
        z = latents.to(dev, self.vae.dtype)
        mean, std = self._latent_stats(z)
        video = self.vae.decode(z * std + mean, return_dict=False)[0]
        frames = ((video.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        out = frames.permute(0, 2, 3, 4, 1).cpu().numpy()
        return out[0] if out.shape[0] == 1 else out

    def encode_sources(self, sources: Sequence[np.ndarray]) -> list[Segment]:
        """VAE-encode sources in conversation order; ids 1..K (or linspace past ``max_trained_src_id``)."""
        if isinstance(sources, np.ndarray) or not isinstance(sources, Sequence):
            raise InputError("sources", type(sources).__name__, "pass a list of videos (T, H, W, 3) / images (H, W, 3)")
        # Check every source before encoding any: a bad last source should not cost the VAE passes.
        clips = [self._check_source(f"sources[{i}]", src) for i, src in enumerate(sources)]
        ids = self._segment_ids(len(sources))
        return [Segment(self._encode_clip(clip), sid, "image" if src.ndim == 3 else "video")
                for clip, src, sid in zip(clips, sources, ids)]

    def _segment_ids(self, n: int) -> list[float]:
        if not self.config.use_src_id_rotary_emb:
            return [0.0] * n
        return rope.source_segment_ids(n, int(self.config.max_trained_src_id))

    # ---- the velocity

    def expert(self, timestep: torch.Tensor | float) -> Literal["high", "low"]:
        """Which expert serves ``timestep``: "high" (``transformer``) for ``t >= 1000 * boundary``, else "low"."""
        if self.transformer_2 is None or self.config.switch_dit_boundary <= 0:
            return "high"
        boundary = self.config.switch_dit_boundary * flow.NUM_TRAIN_TIMESTEPS
        return "high" if float(torch.as_tensor(timestep).flatten()[0]) >= boundary else "low"

    def _as_segments(self, sources: Sequence[Segment | torch.Tensor]) -> list[Segment]:
        ids = self._segment_ids(len(sources))
        out = []
        for i, (s, sid) in enumerate(zip(sources, ids)):
            if isinstance(s, torch.Tensor):
                s = Segment(s, sid, "image" if s.ndim == 5 and s.shape[2] == 1 else "video")
            if not isinstance(s, Segment) or s.latents.ndim != 5 or s.latents.shape[1] != self.transformer.config.in_channels:
                raise InputError(f"sources[{i}]", getattr(getattr(s, "latents", s), "shape", type(s).__name__),
                                 f"pass Segment / latents (B, {self.transformer.config.in_channels}, t, h, w)")
            out.append(s)
        return out

    def velocity(self, latents: torch.Tensor, timestep: torch.Tensor | float,
                 sources: Sequence[Segment | torch.Tensor], text_embeds: torch.Tensor,
                 plan: torch.Tensor | None = None, *, expert: Literal["high", "low"] | None = None) -> torch.Tensor:
        """The flow velocity at the noisy target ``latents`` ``(B, C, t, h, w)``, in float32 (spec b.5-b.7).

        ``sources``: clean segments packed before the target (``Segment`` or plain latents, whose ids are
        then 1..K in order); ``text_embeds`` ``(B or 1, L, text_dim)``; ``plan`` ``(B or 1, N, text_dim)``
        appended after the text (spec b.4); ``expert`` defaults to the one ``timestep`` falls in.
        """
        if not isinstance(latents, torch.Tensor) or latents.ndim != 5:
            raise InputError("latents", getattr(latents, "shape", type(latents).__name__), "pass (B, C, t, h, w)")
        context = self._check_context("text_embeds", text_embeds)
        if plan is not None:
            context = torch.cat([context, self._check_context("plan", plan).to(context)], dim=1)
        segments = self._as_segments(sources)
        return self._forward(expert or self.expert(timestep), latents, timestep, context, segments)

    def _forward(self, expert: str, latents: torch.Tensor, timestep: torch.Tensor | float, context: torch.Tensor,
                 segments: Sequence[Segment], branch: str = "cond") -> torch.Tensor:
        name = "transformer_2" if expert == "low" and self.transformer_2 is not None else "transformer"
        self._onload(name)
        module = getattr(self, name)
        dev = module.patch_embedding.weight.device
        b = latents.shape[0]
        srcs = [(s.latents.to(dev).expand(b, -1, -1, -1, -1), s.segment_id) for s in segments]
        ctx = context.to(dev).expand(b, -1, -1)
        t = torch.as_tensor(timestep, device=dev)
        with caching.branch_context(module, branch):  # a step cache keys its state by the branch (renderers.caching)
            return packed_forward(module, latents.to(dev), t, ctx, srcs).float()

    # ---- guided sampling

    def _contexts(self, text: torch.Tensor, negative: torch.Tensor | None,
                  plan: PlanContexts | None, min_length: int = 512) -> dict[str, torch.Tensor]:
        """The cascade's three contexts (spec b.4, b.8): text (+ a plan variant) after UMT5 features.

        With a plan, each UMT5 feature is first cropped to its prompt's length and the concatenation is
        zero-padded to at least ``min_length`` rows, as the released planner does (T8mars planner.py
        ``_conditioning_tensor`` / ``_pad_renderer_context``, BF16 parity claim); ``min_length`` 0 keeps
        the exact length (xocialize's reading). Without a plan the 512-row UMT5 features go in as they are.
        """
        if plan is None:
            out = {"wtxt_wovit": text, "wtxt_wvit": text}
            if negative is not None:
                out["wotxt_wovit"] = negative
            return out
        for f in fields(plan):
            self._check_context(f"plan.{f.name}", getattr(plan, f.name))
        text = crop_text_features(text)
        out = {"wtxt_wovit": pad_context(torch.cat([text, plan.without_target.to(text)], 1), min_length),
               "wtxt_wvit": pad_context(torch.cat([text, plan.with_target.to(text)], 1), min_length)}
        if negative is not None:
            negative = crop_text_features(negative)
            out["wotxt_wovit"] = pad_context(torch.cat([negative, plan.uncond.to(negative)], 1), min_length)
        return out

    @staticmethod
    def _branch_sources(latents: str, segments: Sequence[Segment]) -> list[Segment]:
        if latents == "wovae":
            return []
        if latents == "wvidvae":
            # the released samplers' V stream holds the first source video only (neuregex sampler.py v_cond)
            return [s for s in segments if s.kind == "video"][:1]
        if latents == "wimgvae":  # r2v_apg's I stream: the reference images alone
            return [s for s in segments if s.kind == "image"]
        return list(segments)

    def _guided(self, guide: CascadeGuidance | ModeGuidance, expert: str, x: torch.Tensor, t: torch.Tensor,
                segments: Sequence[Segment], contexts: Mapping[str, torch.Tensor], batch: bool,
                sigma: torch.Tensor | None = None) -> torch.Tensor:
        """One step of the cascade; branches with the same sources and context length share one forward."""
        groups: dict[tuple[Any, ...], list[Branch]] = {}
        for i, br in enumerate(guide.branches):
            # Same packed sources (not just the same rung name: with no sources wvae is wovae) and
            # same context length; zero-padding contexts to batch more would change the result.
            segs = tuple(id(s) for s in self._branch_sources(br.latents, segments))
            key = (segs, contexts[br.context].shape[1]) if batch else (i,)
            groups.setdefault(key, []).append(br)
        preds: dict[str, torch.Tensor] = {}
        for branches in groups.values():
            n = len(branches)
            ctx = torch.cat([contexts[br.context].expand(x.shape[0], -1, -1) for br in branches])
            segs = self._branch_sources(branches[0].latents, segments)
            out = self._forward(expert, x.repeat(n, 1, 1, 1, 1), t, ctx, segs, "+".join(br.name for br in branches))
            preds.update({br.name: o for br, o in zip(branches, out.chunk(n))})
        if isinstance(guide, ModeGuidance) and guide.needs_sample:
            return guide.combine(preds, sample=x, sigma=sigma)
        return guide.combine(preds)

    def _sampling_scheduler(self, flow_shift: float | None) -> Any:
        # A fresh scheduler per call: sampling mutates its state, and the shift is a call-time choice.
        cfg = self.scheduler.config
        if flow_shift is None:
            return type(self.scheduler).from_config(cfg)
        if not isinstance(flow_shift, numbers.Real) or isinstance(flow_shift, bool) or not math.isfinite(flow_shift) \
                or flow_shift <= 0:
            raise InputError("flow_shift", flow_shift, "use a positive number (the official demo uses 5.0)")
        key = "flow_shift" if isinstance(self.scheduler, UniPCMultistepScheduler) else "shift"
        return type(self.scheduler).from_config(cfg, **{key: float(flow_shift)})

    # ---- step caching (renderers.caching)

    @property
    def mag_ratios(self) -> dict[str, list[float]] | None:
        """MagCache's calibrated ratios per expert (``config.json``'s ``mag_ratios``), None before calibration."""
        return self.config.extra.get("mag_ratios")

    def _set_mag_ratios(self, ratios: dict[str, list[float]], steps: int) -> None:
        extra = {**self.config.extra, "mag_ratios": ratios, "mag_calibration_steps": int(steps)}
        self.config = replace(self.config, extra=extra)

    def calibrate_mag_cache(self, *args: Any, **kwargs: Any) -> dict[str, list[float]]:
        """Measure MagCache's ratios with diffusers' calibration mode: one uncached ``generate(*args, **kwargs)``
        (use the step count and shift you will sample with); kept in ``config`` (``save_pretrained`` writes them)
        and returned, ``{expert: [ratio per step of that expert]}``."""
        if "cache" in kwargs:
            raise InputError("cache", kwargs["cache"], "calibrate_mag_cache chooses the cache itself; leave it out")
        self.generate(*args, **kwargs, cache=caching.CacheSettings("mag", calibrate=True))
        return self.mag_ratios

    @torch.no_grad()
    def generate(self, prompt: str | None = None, *, negative_prompt: str = "",
                 text_embeds: torch.Tensor | None = None, negative_text_embeds: torch.Tensor | None = None,
                 sources: Sequence[np.ndarray] = (), plan: PlanContexts | None = None,
                 height: int = 480, width: int = 832, num_frames: int = 81, num_inference_steps: int = 40,
                 guidance: GuidanceScales | None = DEFAULT_GUIDANCE, apg: APG | None = None,
                 flow_shift: float | None = 5.0, batch_branches: bool | None = None, guidance_mode: str = "cascade",
                 system_prompt: str | None = None, context_min_length: int = 512,
                 generator: torch.Generator | int | None = None, callback: StepInfoCallback | None = None,
                 output_type: Literal["np", "latent"] = "np",
                 cache: caching.CacheSettings | str | None = None) -> np.ndarray | torch.Tensor:
        """Render one clip: check -> encode -> noise -> guided flow sampling -> decode (spec b.5, b.8).

        ``sources``: videos ``(T, H, W, 3)`` / images ``(H, W, 3)`` uint8 in conversation order (v2v: one
        video; r2v: reference images; rv2v: both). ``guidance``: the cascade's scales (default the
        official base table); rungs that cannot matter (no source video, no sources, no plan) are
        skipped; ``None`` runs one conditional forward per step (no guidance). ``guidance_mode``: "cascade"
        (our ladder; ``apg`` turns on its APG) or an official mode of ``renderers.guidance.ModeGuidance``
        (``apg`` then holds Bernini-R's eta / norm cap / momentum, None = the official 0.5 / 50 / 0).
        ``system_prompt``: prefixed to the prompt (not the negative) before UMT5, as the release does.
        ``context_min_length``: see ``_contexts`` (with a plan only).
        With two experts the scales are multiplied by ``omega_scale`` once at the switch.
        ``callback(step, info)`` gets ``timestep``, ``expert`` and ``latents`` after each step.
        ``cache``: step caching through diffusers' hooks (``renderers.caching``: "none", "first_block", "mag",
        "taylorseer" or a ``CacheSettings``); each guidance branch then runs alone in its own cache context,
        so ``batch_branches`` (None: batch when not caching) cannot be on with a cache (a warning, then off).
        Returns uint8 frames ``(num_frames, height, width, 3)``, or the latents for ``output_type="latent"``.
        """
        self.check_inputs(height, width, num_frames)
        cache_settings = caching.as_settings(cache)
        if cache_settings is not None and batch_branches:
            logger.warning("batch_branches=True with cache=%r: each guidance branch runs alone in its own cache "
                           "context, so the branches are not batched", cache_settings.mode)
        batch_branches = cache_settings is None and batch_branches is not False
        if guidance is not None and not isinstance(guidance, GuidanceScales):
            raise InputError("guidance", guidance, "pass a renderers.guidance.GuidanceScales or None")
        if output_type not in ("np", "latent"):
            raise InputError("output_type", output_type, "use 'np' (uint8 frames) or 'latent'")
        if plan is not None and not isinstance(plan, PlanContexts):
            raise InputError("plan", type(plan).__name__, "pass a PlanContexts or None")
        generator = _seed_generator(generator)

        if system_prompt is not None and not isinstance(system_prompt, str):
            raise InputError("system_prompt", system_prompt, "pass a string or None")
        if not _is_int(context_min_length) or context_min_length < 0:
            raise InputError("context_min_length", context_min_length, "use a non-negative integer (512; 0 = exact length)")
        if guidance_mode != "cascade":
            ModeGuidance(guidance_mode)  # checks the name before any model runs
        if system_prompt and prompt:
            prompt = system_prompt + prompt  # literal prefix, no separator (neuregex loader.py TextEncoder.encode)
        text = self._text(prompt, text_embeds, "prompt", "text_embeds")
        negative = None if guidance is None else self._text(negative_prompt, negative_text_embeds,
                                                           "negative_prompt", "negative_text_embeds")
        contexts = self._contexts(text, negative, plan, context_min_length)
        segments = self.encode_sources(sources)

        guide = None
        if guidance is not None:
            has_video = any(s.kind == "video" for s in segments)
            has_images = any(s.kind == "image" for s in segments)
            if guidance_mode == "cascade":
                scales = guidance.for_sources(has_video, bool(segments))
                guide = CascadeGuidance(scales if plan is not None else replace(scales, plan=0.0), apg)
            else:
                guide = ModeGuidance(guidance_mode, guidance, apg=apg, has_video=has_video, has_images=has_images,
                                     has_plan=plan is not None)
        cond = contexts["wtxt_wvit"] if plan is not None else contexts["wtxt_wovit"]

        shape = (1, int(self.transformer.config.in_channels), (num_frames - 1) // self.vae_scale_temporal + 1,
                 height // self.vae_scale_spatial, width // self.vae_scale_spatial)
        noise = flow.initial_noise(shape, generator, device=self.device)
        scheduler = self._sampling_scheduler(flow_shift)
        state = {"expert": "high"}

        def velocity_fn(x: torch.Tensor, t: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
            state["expert"] = expert = self.expert(t)
            if guide is None:
                return self._forward(expert, x, t, cond, segments)
            if expert == "low":
                guide.switch_expert()  # once, at the first low-noise step (spec b.8)
            return self._guided(guide, expert, x, t, segments, contexts, batch_branches, sigma)

        def on_step(i: int, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
            if callback is not None:  # latents it returns replace the loop's (diffusers' tensor inputs)
                return callback(i, {"timestep": float(t), "expert": state["expert"], "latents": x})
            return None

        experts = {"high": (self.transformer, 0), "low": (self.transformer_2, 0)}
        if cache_settings is not None and _is_int(num_inference_steps) and num_inference_steps >= 1:
            scheduler.set_timesteps(num_inference_steps, device=self.device)  # each expert's share of the steps
            for t in scheduler.timesteps:
                module, n = experts[self.expert(t)]
                experts[self.expert(t)] = (module, n + 1)
        with caching.enabled({k: v for k, v in experts.items() if v[0] is not None}, cache_settings,
                             mag_ratios=self.mag_ratios) as run:
            latents = flow.sample_flow(velocity_fn, noise, scheduler, num_inference_steps, generator=generator,
                                       callback=on_step)
            if cache_settings is not None and cache_settings.calibrate:
                self._set_mag_ratios(run.calibration(), num_inference_steps)
        if output_type == "latent":
            return latents
        return self.decode_latents(latents)

    def _text(self, prompt: str | None, embeds: torch.Tensor | None, prompt_name: str,
              embeds_name: str) -> torch.Tensor:
        if embeds is not None:
            if prompt:
                raise InputError(prompt_name, prompt, f"pass either {prompt_name} or {embeds_name}, not both")
            return self._check_context(embeds_name, embeds).to(self.device, self.dtype)
        if self.text_encoder is None:
            fix = f"this renderer has no text_encoder/ + tokenizer/: pass {embeds_name} (1, L, text_dim)"
            raise InputError(prompt_name if prompt else embeds_name, prompt or None, fix)
        if prompt is None:
            raise InputError(prompt_name, None, f"pass {prompt_name} or {embeds_name}")
        return self.encode_prompt(prompt)


def _load_scheduler(path: Path) -> Any:
    """The saved flow scheduler, or None (the renderer then builds the official UniPC)."""
    cfg_path = path / "scheduler_config.json"
    if not cfg_path.is_file():
        return None
    name = _read_json(cfg_path).get("_class_name")
    if name not in _SCHEDULERS:
        raise InputError(str(cfg_path), name, f"use one of {sorted(_SCHEDULERS)} (flow prediction)")
    return _SCHEDULERS[name].from_pretrained(path)
