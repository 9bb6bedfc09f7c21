"""The builtin world's autoencoder: the latent space the builtin Bernini renderer can denoise in [PROPOSED].

Wan, whose shape Bernini's renderer copies, does not denoise pixels: it denoises the latents of a VAE whose
convolutional decoder draws the detail. The builtin world gets the same split at its own scale: diffusers'
``AutoencoderKL`` (the field's class, saved and loaded as diffusers saves it), per frame, 4x spatial
compression (64x64x3 -> 16x16x8), no attention, so that a DiT with 2x2 patches reads it on the 8x8 grid of
the plan tokens. ``scaling_factor`` / ``shift_factor`` in its config make the latents unit-variance, zero-mean
(set from TRAIN latents after training), as Stable Diffusion's and Flux's VAEs do.

    vae = load_autoencoder()                 # weights/builtin/autoencoder
    z = encode_frames(vae, frames)           # uint8 (N, 64, 64, 3) -> float (N, 8, 16, 16), normalised
    frames_again = decode_latents(vae, z)    # -> uint8 (N, 64, 64, 3)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from core.errors import InputError

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights" / "builtin" / "autoencoder"


def world_autoencoder(channels: tuple[int, ...] = (32, 64, 64), latent_channels: int = 8, layers_per_block: int = 1):
    """A fresh autoencoder: ``len(channels) - 1`` halvings of each side (three widths: 4x)."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * len(channels),
                         up_block_types=("UpDecoderBlock2D",) * len(channels), block_out_channels=tuple(channels),
                         layers_per_block=layers_per_block, latent_channels=latent_channels, norm_num_groups=16, sample_size=64,
                         mid_block_add_attention=False, scaling_factor=1.0, shift_factor=0.0)


def load_autoencoder(directory: str | Path | None = None, device: str | torch.device = "cpu"):
    """The autoencoder saved in ``directory`` (the shipped one by default), in eval mode, frozen."""
    from diffusers import AutoencoderKL

    directory = Path(directory) if directory is not None else WEIGHTS_DIR
    if not (directory / "config.json").is_file():
        raise InputError("autoencoder", str(directory), "pass a folder saved by AutoencoderKL.save_pretrained "
                                                        "(train one: python -m training.autoencoder)")
    vae = AutoencoderKL.from_pretrained(directory, use_safetensors=True)  # safetensors only: a folder is data
    return vae.eval().requires_grad_(False).to(device)


def to_unit(frames: np.ndarray, device: str | torch.device = "cpu") -> torch.Tensor:
    """uint8 ``(N, H, W, 3)`` -> float ``(N, 3, H, W)`` in [-1, 1]."""
    return torch.from_numpy(np.ascontiguousarray(frames)).to(device).permute(0, 3, 1, 2).float().div(127.5).sub(1)


def from_unit(x: torch.Tensor) -> np.ndarray:
    """float ``(N, 3, H, W)`` in [-1, 1] -> uint8 ``(N, H, W, 3)``."""
    return x.clamp(-1, 1).add(1).mul(127.5).round().byte().permute(0, 2, 3, 1).cpu().numpy()


@torch.no_grad()
def encode_frames(vae, frames: np.ndarray, batch_size: int = 64) -> torch.Tensor:
    """Normalised latents (the posterior's mean) of uint8 frames ``(N, H, W, 3)``."""
    device = next(vae.parameters()).device
    cfg = vae.config
    out = [vae.encode(to_unit(frames[i : i + batch_size], device)).latent_dist.mean for i in range(0, len(frames), batch_size)]
    return (torch.cat(out) - cfg.shift_factor) * cfg.scaling_factor


@torch.no_grad()
def decode_latents(vae, latents: torch.Tensor, batch_size: int = 64) -> np.ndarray:
    """uint8 frames of normalised latents ``(N, C, h, w)``."""
    cfg = vae.config
    z = latents / cfg.scaling_factor + cfg.shift_factor
    return np.concatenate([from_unit(vae.decode(z[i : i + batch_size]).sample) for i in range(0, len(z), batch_size)])
