"""The official Bernini release folders as a ``BerniniPipeline``, which release a folder is, and conversion.

    pipe = BerniniPipeline.from_pretrained("/models/Bernini-Diffusers-v2")   # planner + renderer, release "v2"
    pipe = BerniniPipeline.from_pretrained("/models/Bernini-R-Diffusers")    # renderer only, release "r"
    convert("/models/Bernini-Diffusers", "/runs/bernini")                    # -> our pipeline.json layout
    convert("/runs/bernini", "/models/Bernini-Diffusers-mine")               # -> the official layout

Layouts: the full release (``bernini/`` shards + index, ``mllm/``, ``t5_text_encoder/``, ``t5_tokenizer/``,
``vae/``, ``scheduler/``, ``transformer_config.json``, ``transformer_2_config.json``; read by
``planners.semantic.official`` and ``renderers.bernini_official``) and Bernini-R's diffusers Wan folder
(``transformer/``, ``transformer_2/``, ``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``, root
``config.json``; read by ``renderers.hf_wan``).

Release (``detect_release``): Bernini-R is the diffusers layout. v1 and v2 share one layout, file names and
configs; nothing on disk tells them apart. The official demo (bytedance/Bernini ``gradio_demo.py``,
``_is_bernini_v2_config``) picks the v2 task table when the folder path ends with ``Bernini-Diffusers-v2``;
we read the same evidence (any part of the path naming ``Bernini-Diffusers-v2``, which also covers the Hugging
Face cache's ``models--ByteDance--Bernini-Diffusers-v2``), else v1. Pass ``release=`` when the name does not say.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from core.errors import InputError
from pipelines.base import INDEX_FILE

RELEASES = ("r", "v1", "v2")
FULL_CLAIMS = ("bernini/**", "mllm/**", "t5_text_encoder/**", "t5_tokenizer/**", "vae/**", "scheduler/**",
               "transformer_config.json", "transformer_2_config.json")
R_CLAIMS = ("transformer/**", "transformer_2/**", "vae/**", "scheduler/**", "text_encoder/**", "tokenizer/**", "config.json")
OURS_CLAIMS = (INDEX_FILE, "planner/**", "renderer/**", "encoder/**")


def layout_of(path: str | Path) -> str | None:
    """"full" (Bernini-Diffusers / -v2), "r" (a Bernini-R / Wan diffusers folder), or None (ours, or neither)."""
    from renderers.bernini_official import is_full_layout

    path = Path(path)
    if not path.is_dir() or (path / INDEX_FILE).is_file():
        return None
    if is_full_layout(path):
        return "full"
    if (path / "transformer" / "config.json").is_file() and (path / "vae" / "config.json").is_file():
        return "r"
    return None


def detect_release(path: str | Path) -> str:
    """"r", "v1" or "v2" for an official folder (see the module docstring for the evidence)."""
    from renderers.bernini_official import full_release

    layout = layout_of(path)
    if layout is None:
        raise InputError("pipeline", str(path), "not an official Bernini folder (Bernini-Diffusers[-v2] or Bernini-R-Diffusers)")
    return "r" if layout == "r" else full_release(path)


def _check_release(release: str | None, layout: str, path: Path) -> str:
    detected = detect_release(path)
    if release is None or release == "auto":
        return detected
    if release not in RELEASES:
        raise InputError("release", release, f"use one of {RELEASES} or 'auto'")
    if (release == "r") != (layout == "r"):
        what = "a Bernini-R (renderer-only) folder" if layout == "r" else "a full Bernini folder (planner + renderer)"
        raise InputError("release", release, f"{path} is {what}; use {'r' if layout == 'r' else 'v1 or v2'}")
    return release


def unclaimed_keys(keys: list[str]) -> list[str]:
    """Keys of the full checkpoint that belong to no part we load (each would be silently ignored)."""
    from planners.semantic.official import MLLM_PREFIX, PLANNER_PREFIXES
    from renderers.bernini_official import RENDERER_PREFIXES

    known = (MLLM_PREFIX, *PLANNER_PREFIXES, *RENDERER_PREFIXES)
    return sorted(k for k in keys if not k.startswith(known))


def load_official(cls: type, path: str | Path, *, device: Any = None, dtype: Any = None, release: str | None = None,
                  config: Any = None, trust_remote_code: bool = False, revision: str | None = None, **overrides: Any) -> Any:
    """``cls`` (``BerniniPipeline``) from an official folder; ``config.release`` records the release."""
    from core.shards import ShardedCheckpoint

    path = Path(path).expanduser()
    layout = layout_of(path)
    if layout is None:
        raise InputError("pipeline", str(path), "not an official Bernini folder")
    rel = _check_release(release, layout, path)
    unknown = [n for n in overrides if n not in cls.component_specs]
    if unknown:
        raise InputError("overrides", unknown, f"{cls.__name__} has components {list(cls.component_specs)}")
    comps: dict[str, Any] = {"planner": None, "renderer": None, "encoder": None}
    if layout == "full":
        from planners.semantic.official import load_official_planner
        from renderers.bernini_official import load_official_renderer

        ckpt = ShardedCheckpoint.open(path / "bernini")
        extra = unclaimed_keys(ckpt.keys())
        if extra:
            raise InputError(str(path / "bernini"), f"unexpected {', '.join(extra[:6])}",
                             "no part of Bernini has these tensors: restore the release's files")
        if overrides.get("planner") is None:
            comps["planner"] = load_official_planner(path, ckpt, device=device, dtype=dtype)
        if overrides.get("renderer") is None:
            comps["renderer"] = load_official_renderer(path, ckpt, device=device, dtype=dtype)
        ckpt.close()
    elif overrides.get("renderer") is None:
        from renderers.hf_wan import WanRenderer

        comps["renderer"] = WanRenderer.from_pretrained(path, device=device, dtype=dtype)
    for name, value in overrides.items():
        if isinstance(value, (str, Path)):
            value = cls.component_specs[name].load(name, value, revision, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
        if value is not None:
            comps[name] = value
    for comp in (comps["planner"], comps["renderer"]):
        if comp is not None:
            comp.release = rel
    base = config if config is not None else cls.config_class()
    return cls(dataclasses.replace(base, release=rel), **comps)


def export_official(pipe: Any, folder: str | Path, max_shard_bytes: int = 5 << 30) -> str:
    """Write ``pipe``'s models into ``folder`` in the official layout; returns the layout written ("full" with a
    Qwen planner, "r" for the renderer alone). Names as the release has them (module docstrings)."""
    from core.shards import write_shards
    from planners.semantic.official import official_planner_tensors, write_mllm_assets
    from renderers.bernini_official import official_renderer_tensors, write_renderer_assets
    from renderers.hf_wan import WanRenderer

    folder = Path(folder)
    if not isinstance(pipe.renderer, WanRenderer):
        raise InputError("renderer", type(pipe.renderer).__name__, "only the hf (Wan) renderer has an official layout")
    if pipe.planner is None:
        pipe.renderer.save_pretrained(folder)  # Bernini-R's own layout: what WanRenderer writes
        return "r"
    tensors = [*official_renderer_tensors(pipe.renderer), *official_planner_tensors(pipe.planner)]
    write_shards(folder / "bernini", "model", tensors, max_shard_bytes)
    write_mllm_assets(pipe.planner, folder / "mllm")
    write_renderer_assets(pipe.renderer, folder)
    return "full"


def _stored_dtype(path: Path) -> torch.dtype:
    """The dtype the folder's main weights are stored in: a conversion keeps it (no float32 doubling)."""
    from core.shards import ShardedCheckpoint

    for sub in ("bernini", "transformer", "renderer/transformer"):
        if (path / sub).is_dir():
            stem = "model" if sub == "bernini" else "diffusion_pytorch_model"
            ckpt = ShardedCheckpoint.open(path / sub, stem)
            for k in ckpt.keys():
                dt = ckpt.dtype(k)
                if dt.is_floating_point:
                    return dt
    return torch.float32


def convert(src: str | Path, dst: str | Path, *, release: str | None = None, overwrite: bool = False,
            max_shard_bytes: int = 5 << 30) -> dict[str, Any]:
    """An official folder -> our ``pipeline.json`` layout, or ours -> the official layout (the direction follows
    ``src``). Writes through ``core.outputs.publish_folder``: a file atelier did not write is never replaced
    unless ``overwrite``. Tensors keep their stored dtype. Returns what was written."""
    from core.outputs import check_folder, publish_folder
    from pipelines.bernini.pipeline import BerniniPipeline

    src, dst = Path(src).expanduser(), Path(dst).expanduser()
    if not src.is_dir():
        raise InputError("src", str(src), "no such folder")
    if dst.resolve() == src.resolve():
        raise InputError("--out", str(dst), "write the conversion to another folder")
    to_ours = layout_of(src) is not None
    if not to_ours and not (src / INDEX_FILE).is_file():
        raise InputError("src", str(src), f"neither an official Bernini folder nor a saved pipeline ({INDEX_FILE})")
    dtype = _stored_dtype(src)
    if to_ours:
        check_folder(dst, OURS_CLAIMS, "--out", overwrite)
        pipe = load_official(BerniniPipeline, src, device="cpu", dtype=dtype, release=release)
        with publish_folder(dst, OURS_CLAIMS, "--out", overwrite) as stage:
            pipe.save_pretrained(stage)
        return {"from": "official", "to": "pipeline.json", "release": pipe.config.release, "out": str(dst)}
    pipe = BerniniPipeline.from_pretrained(src, device="cpu", dtype=dtype)
    claims = FULL_CLAIMS if pipe.planner is not None else R_CLAIMS
    check_folder(dst, claims, "--out", overwrite)
    with publish_folder(dst, claims, "--out", overwrite) as stage:
        layout = export_official(pipe, stage, max_shard_bytes)
    rel = "r" if layout == "r" else (release or (pipe.config.release if pipe.config.release in ("v1", "v2") else "v1"))
    out = {"from": "pipeline.json", "to": "Bernini-R-Diffusers" if layout == "r" else "Bernini-Diffusers", "release": rel,
           "out": str(dst)}
    from renderers.bernini_official import full_release

    if layout == "full" and rel != full_release(dst):
        # the folder name is the only v1/v2 marker the official code reads
        out["note"] = (f"release {rel} but the folder name {'lacks' if rel == 'v2' else 'has'} 'Bernini-Diffusers-v2': "
                       "the official demo and our loader would read it as " + ("v1" if rel == "v2" else "v2"))
    return out
