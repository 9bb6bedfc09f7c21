"""Safe weight loading: safetensors first, ``torch.load(weights_only=True)`` otherwise."""

from __future__ import annotations

from pathlib import Path

import torch

from core.atomic import atomic_path
from core.errors import MediaError


def load_state_dict(path: str | Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Load weights without executing code: ``.safetensors`` directly; pickles only as plain tensors."""
    path = Path(path)
    if not path.is_file():
        raise MediaError(path, "no such weights file")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device=str(device))
        except Exception as e:  # safetensors raises its own SafetensorError
            raise MediaError(path, f"not a valid safetensors file ({e})") from None
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:
        raise MediaError(path, f"cannot load weights safely ({e})", "convert the checkpoint to safetensors") from None
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    return state


def save_state_dict(state: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """Save as safetensors, atomically; tensors are made contiguous (safetensors requires it)."""
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp), metadata=metadata)
    return Path(path)
