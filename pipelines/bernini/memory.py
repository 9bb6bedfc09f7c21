"""The memory plan of an official Bernini release, from its configs alone (meta tensors: no weight is read).

    plan = plan_release("/models/Bernini-Diffusers-v2", budget=parse_memory("24GB"))
    print(plan)                          # atelier info --plan /models/Bernini-Diffusers-v2 --max-memory 24GB

Each model is built on the meta device from the config the release ships (``mllm/config.json``,
``transformer_config.json`` / ``transformer_2_config.json``, ``t5_text_encoder/config.json``, ``vae/config.json``;
Bernini-R: the diffusers folders), its parameters counted (tied weights once) at the dtype it runs in: the DiT experts,
UMT5 and the planner in bfloat16 (the dtype on CUDA), the VAE in float32 as the renderer keeps it. The planner's
own heads (``connector.``, ``vit_decoder.``, ``mask_tokens``) are read from the shard headers. ``core.memory_plan``
places them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from core.errors import InputError
from core.memory_plan import Part, Plan, plan_dit
from core.shards import empty_module, module_part

RUN_DTYPE = torch.bfloat16
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I8": 1, "U8": 1, "BOOL": 1}


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError("plan", str(path), f"cannot read it ({type(e).__name__}); restore the release's config files") from None


def _wan(cfg: dict) -> torch.nn.Module:
    from diffusers import WanTransformer3DModel

    with empty_module():
        return WanTransformer3DModel.from_config(cfg)


def _umt5(folder: Path) -> torch.nn.Module:
    from transformers import UMT5Config, UMT5EncoderModel

    with empty_module():
        return UMT5EncoderModel(UMT5Config.from_pretrained(str(folder)))


def _vae(folder: Path) -> torch.nn.Module:
    from diffusers import AutoencoderKLWan

    with empty_module():
        return AutoencoderKLWan.from_config(_json(folder / "config.json"))


def _header_part(name: str, role: str, ckpt: Any, prefixes: tuple[str, ...]) -> Part:
    """The tensors under ``prefixes`` from the shard headers (their stored dtype; nothing read but the headers)."""
    count = nbytes = 0
    for key in ckpt.keys():
        if key.startswith(prefixes):
            n = 1
            for s in ckpt.shape(key):
                n *= int(s)
            count += n
            nbytes += n * torch.empty((), dtype=RUN_DTYPE).element_size()
    return Part(name, role, count, nbytes, str(RUN_DTYPE).removeprefix("torch."))


def release_parts(path: str | Path) -> list[Part]:
    """The models of an official release folder (full or Bernini-R), sized from their configs."""
    from pipelines.bernini.official import layout_of

    root = Path(path)
    layout = layout_of(root)
    if layout is None:
        raise InputError("plan", str(root), "not an official Bernini folder (Bernini-Diffusers, -v2 or Bernini-R-Diffusers)")
    parts = []
    if layout == "full":
        from transformers import AutoConfig, AutoModelForImageTextToText

        from core.shards import ShardedCheckpoint
        from planners.semantic.official import MLLM_DIR, PLANNER_PREFIXES
        from renderers.bernini_official import EXPERT_CONFIGS

        with empty_module():
            qwen = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(str(root / MLLM_DIR), trust_remote_code=False))
        parts.append(module_part("planner (Qwen2.5-VL)", "planner", qwen, RUN_DTYPE))
        ckpt = ShardedCheckpoint.open(root / "bernini")
        try:
            parts.append(_header_part("planner heads", "heads", ckpt, PLANNER_PREFIXES))
        finally:
            ckpt.close()
        parts.append(module_part("text encoder (UMT5)", "text_encoder", _umt5(root / "t5_text_encoder"), RUN_DTYPE))
        for name, cfg in EXPERT_CONFIGS.items():
            if (root / cfg).is_file():
                parts.append(module_part(f"{name} (Wan DiT)", "dit", _wan(_json(root / cfg)), RUN_DTYPE))
    else:
        if (root / "text_encoder" / "config.json").is_file():
            parts.append(module_part("text encoder (UMT5)", "text_encoder", _umt5(root / "text_encoder"), RUN_DTYPE))
        for name in ("transformer", "transformer_2"):
            if (root / name / "config.json").is_file():
                parts.append(module_part(f"{name} (Wan DiT)", "dit", _wan(_json(root / name / "config.json")), RUN_DTYPE))
    parts.append(module_part("vae", "vae", _vae(root / "vae"), torch.float32))
    return parts


def plan_release(path: str | Path, budget: int, *, num_frames: int = 81, height: int = 480, width: int = 832,
                 segments: int = 2, strategy: str | None = None) -> Plan:
    """The placement of a release for ``budget`` bytes of device memory at the given clip size."""
    from pipelines.bernini.official import layout_of

    root = Path(path)
    cfg_path = root / "transformer_config.json" if layout_of(root) == "full" else root / "transformer" / "config.json"
    return plan_dit(release_parts(root), budget, _json(cfg_path), num_frames=num_frames, height=height, width=width,
                    segments=segments, strategy=strategy)


__all__ = ["plan_release", "release_parts"]
