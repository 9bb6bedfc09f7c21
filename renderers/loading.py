"""``load_renderer``: the one rule from a user's spec to a renderer (the pipelines' ``renderer`` slot loader).

    load_renderer("builtin")                      # the shipped builtin renderer (weights/builtin/renderer)
    load_renderer("/models/Bernini-R-Diffusers")  # a diffusers Wan folder (transformer/, vae/, ...)
    load_renderer("/models/Bernini-Diffusers")    # the full release's renderer half (bernini/ shards, t5_*, vae/)
    load_renderer("/runs/renderer")               # a folder written by BuiltinRenderer.save_pretrained
    load_motion_renderer("builtin")               # AnyMotion's pose-guided builtin renderer (weights/builtin/motion_renderer)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import InputError


def load_renderer(spec: str | Path = "builtin", device: Any = None, dtype: Any = None, trust_remote_code: bool = False,
                  **_: Any) -> Any:
    """A renderer for ``spec``: ``builtin`` or a folder (builtin renderer, or a Bernini-R / Wan diffusers layout)."""
    from renderers.builtin import KIND, WEIGHTS_DIR, BuiltinRenderer

    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise InputError("renderer", spec, "pass 'builtin' or a renderer folder")
    if str(spec) == "builtin":
        if not (WEIGHTS_DIR / "model.safetensors").is_file():
            raise InputError("renderer", "builtin", "the builtin renderer's weights are missing from weights/builtin/renderer; "
                                                    "restore them from git or train them with `make weights`")
        return BuiltinRenderer.from_pretrained(WEIGHTS_DIR, device=device)
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise InputError("renderer", str(spec), "no such folder; pass 'builtin' or a renderer folder (e.g. Bernini-R-Diffusers)")
    from renderers.bernini_official import is_full_layout

    if is_full_layout(path):  # Bernini-Diffusers / -v2: the experts live in bernini/ shards
        from renderers.bernini_official import load_official_renderer

        return load_official_renderer(path, device=device, dtype=dtype)
    if (path / "transformer").is_dir() or (path / "model_index.json").is_file():
        from renderers.hf_wan import WanRenderer

        return WanRenderer.from_pretrained(path, device=device, dtype=dtype)
    try:
        kind = json.loads((path / "config.json").read_text()).get("model")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind == KIND:
        return BuiltinRenderer.from_pretrained(path, device=device)
    raise InputError("renderer", str(spec), "this folder is neither a builtin renderer (config.json 'model': "
                                            f"'{KIND}') nor a diffusers Wan layout (transformer/, vae/)")


MOTION_WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights" / "builtin" / "motion_renderer"


def load_motion_renderer(spec: str | Path = "builtin", device: Any = None, dtype: Any = None, trust_remote_code: bool = False,
                         **_: Any) -> Any:
    """AnyMotion's renderer slot: ``builtin`` is the pose-guided builtin renderer; a folder loads as ``load_renderer``."""
    from renderers.builtin import BuiltinRenderer

    if str(spec) == "builtin":
        if not (MOTION_WEIGHTS_DIR / "model.safetensors").is_file():
            raise InputError("renderer", "builtin", "the builtin pose-guided renderer's weights are missing from "
                                                    "weights/builtin/motion_renderer; restore them from git or train them with `make weights`")
        return BuiltinRenderer.from_pretrained(MOTION_WEIGHTS_DIR, device=device)
    return load_renderer(spec, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
