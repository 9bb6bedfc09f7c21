"""Safe weight loading: safetensors first, ``torch.load(weights_only=True)`` otherwise."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import torch

from core.atomic import atomic_path, write_json_atomic
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


def save_model_folder(directory: str | Path, kind: str, config: Any, state: dict[str, torch.Tensor],
                      metadata: dict[str, Any] | None = None) -> Path:
    """A builtin model's folder: ``config.json`` (``{"model": kind, <config fields>}``) and ``model.safetensors``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_json_atomic(directory / "config.json", {"model": kind, **asdict(config)})
    save_state_dict(state, directory / "model.safetensors", metadata={k: str(v) for k, v in (metadata or {}).items()})
    return directory


def read_model_config(directory: str | Path, kind: str, config_class: type, writer: str) -> Any:
    """The config of a folder written by ``save_model_folder`` for ``kind``; ``MediaError`` naming the defect
    (unreadable, another kind, keys this version does not know). ``writer`` names the saving method in the fix."""
    path = Path(directory) / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MediaError(path, f"no readable config ({type(e).__name__})", f"pass a folder written by {writer}") from None
    if not isinstance(raw, dict) or raw.pop("model", None) != kind:
        raise MediaError(path, f"not a {kind} folder", f"pass a folder written by {writer}")
    known = {f.name for f in fields(config_class)}
    if unknown := sorted(set(raw) - known):
        raise MediaError(path, f"unknown config keys {unknown}", "the folder was written by a different version")
    return config_class(**raw)
