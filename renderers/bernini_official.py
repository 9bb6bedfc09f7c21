"""The renderer half of the official Bernini releases, read strictly.

Full Bernini (``ByteDance/Bernini-Diffusers``, ``-v2``; docs/bernini.md of bytedance/Bernini): no Wan
transformer folders; the two experts live in ``bernini/model-*.safetensors`` under ``diff_dec.transformer.``
(high noise) and ``diff_dec_low.transformer_2.`` (low noise) with diffusers Wan names, built from
``transformer_config.json`` / ``transformer_2_config.json``; the UMT5 encoder under ``t5_text_encoder.``
(transformers names) with its config in ``t5_text_encoder/`` and tokenizer in ``t5_tokenizer/``; ``vae/`` and
``scheduler/`` are ordinary diffusers folders [PORT T8mars ``bernini_v2/state_dict.py`` for the prefixes].

Bernini-R (``ByteDance/Bernini-R-Diffusers``): a diffusers Wan folder that ``WanRenderer.from_pretrained``
reads; ``check_diffusers_layout`` is its strict key check (diffusers / transformers would otherwise warn and
initialise a missing tensor at random).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from core.errors import InputError
from core.shards import ShardedCheckpoint, empty_module, expected_tensors, load_strict

EXPERT_PREFIXES = {"transformer": "diff_dec.transformer.", "transformer_2": "diff_dec_low.transformer_2."}
T5_PREFIX = "t5_text_encoder."
RENDERER_PREFIXES = (*EXPERT_PREFIXES.values(), T5_PREFIX)
EXPERT_CONFIGS = {"transformer": "transformer_config.json", "transformer_2": "transformer_2_config.json"}


_V2 = re.compile(r"bernini-diffusers-v2", re.IGNORECASE)


def full_release(root: str | Path) -> str:
    """"v2" or "v1" for a full-release folder. The two share one layout and configs; the official demo
    (``gradio_demo.py`` ``_is_bernini_v2_config``) takes v2 when the path ends with ``Bernini-Diffusers-v2``.
    We read the same evidence in any part of the path (also the Hugging Face cache's
    ``models--ByteDance--Bernini-Diffusers-v2``); anything else is v1, the demo's other branch."""
    path = Path(os.path.abspath(Path(root).expanduser()))  # the name as given, links not followed (as the demo reads it)
    return "v2" if any(_V2.search(part) for part in path.parts) else "v1"


def is_full_layout(root: str | Path) -> bool:
    """A full-Bernini release folder: ``bernini/`` (the combined checkpoint) beside ``transformer_config.json``."""
    root = Path(root)
    return (root / "bernini").is_dir() and (root / EXPERT_CONFIGS["transformer"]).is_file()


def _check_files(root: Path) -> None:
    for rel in (EXPERT_CONFIGS["transformer"], "vae/config.json", "t5_text_encoder/config.json"):
        if not (root / rel).is_file():
            raise InputError(str(root), f"no {rel}", "a Bernini-Diffusers folder holds bernini/, mllm/, t5_text_encoder/, "
                                                    "t5_tokenizer/, vae/, scheduler/ and transformer_config.json; restore it")
    if not (root / "t5_tokenizer").is_dir():
        raise InputError(str(root), "no t5_tokenizer/", "restore the UMT5 tokenizer folder from the release")


def _prefixed(module: torch.nn.Module, ckpt: ShardedCheckpoint, prefix: str, where: str, dtype: Any, device: Any) -> torch.nn.Module:
    names = {k[len(prefix):]: k for k in ckpt.keys() if k.startswith(prefix)}
    return load_strict(module, ckpt, names, f"{where} ({prefix})", dtype=dtype, device=device, official_name=lambda n: prefix + n)


def load_official_renderer(root: str | Path, ckpt: ShardedCheckpoint | None = None, device: Any = None,
                           dtype: Any = None) -> Any:
    """A ``WanRenderer`` from a full-Bernini release folder, experts and UMT5 streamed from ``bernini/``.

    The release has no root renderer config: a root ``config.json`` of ``model_type: bernini_renderer``
    is read when present, else the Wan2.2 A14B values (switch at 0.875 with two experts) [DEFAULT].
    ``dtype`` "stored" keeps each tensor's stored dtype; the VAE stays float32.
    """
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import AutoTokenizer, UMT5Config, UMT5EncoderModel

    from core.device import load_dtype, select_device
    from renderers.hf_wan import MODEL_TYPE, RendererConfig, WanRenderer, _load_scheduler, _read_json

    root = Path(root)
    _check_files(root)
    ckpt = ckpt or ShardedCheckpoint.open(root / "bernini")
    dev = select_device(device)
    dt = load_dtype(dtype, dev)  # None on the CPU: each tensor as stored (bf16 stays bf16)
    where = str(root / "bernini")
    experts: dict[str, Any] = {}
    for name, cfg_name in EXPERT_CONFIGS.items():
        if not (root / cfg_name).is_file():
            if any(k.startswith(EXPERT_PREFIXES[name]) for k in ckpt.keys()):  # never drop an expert whose weights are here
                raise InputError(str(root), f"no {cfg_name}", f"the shards hold {EXPERT_PREFIXES[name]}* but its config is "
                                                               "missing; restore it from the release")
            continue
        with empty_module():
            model = WanTransformer3DModel.from_config(_read_json(root / cfg_name))
        experts[name] = _prefixed(model, ckpt, EXPERT_PREFIXES[name], where, dt, dev).eval()
    with empty_module():
        t5 = UMT5EncoderModel(UMT5Config.from_pretrained(str(root / "t5_text_encoder")))
    t5 = _prefixed(t5, ckpt, T5_PREFIX, where, dt, dev).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(root / "t5_tokenizer"), trust_remote_code=False)  # UMT5: no code
    check_library_folder(root / "vae", AutoencoderKLWan)
    vae = AutoencoderKLWan.from_pretrained(root / "vae", torch_dtype=torch.float32).eval()
    scheduler = _load_scheduler(root / "scheduler")
    raw = _read_json(root / "config.json") if (root / "config.json").is_file() else {}
    two = "transformer_2" in experts
    if raw.get("model_type") == MODEL_TYPE:
        config = RendererConfig.from_dict(raw)
    else:
        config = RendererConfig(switch_dit_boundary=0.875 if two else 0.0, skip_transformer_2=not two)
    renderer = WanRenderer(experts["transformer"], vae, scheduler, t5, tokenizer, experts.get("transformer_2"), config)
    renderer.release = full_release(root)  # read by BerniniPipeline.release when its setting is auto
    return renderer.to(device=dev)


def official_renderer_tensors(renderer: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The renderer's tensors under the full release's keys (experts, then UMT5; one copy of a tied tensor)."""
    if renderer.text_encoder is None:
        raise InputError("renderer", "no text_encoder", "the release carries the UMT5 encoder; load a renderer that has one")
    parts = [(EXPERT_PREFIXES["transformer"], renderer.transformer), (T5_PREFIX, renderer.text_encoder)]
    if renderer.transformer_2 is not None:
        parts.insert(1, (EXPERT_PREFIXES["transformer_2"], renderer.transformer_2))
    for prefix, module in parts:
        _, tied = expected_tensors(module)
        skip = {n for g in tied for n in g[1:]}
        for name, t in module.state_dict().items():
            if name not in skip:
                yield prefix + name, t


def write_renderer_assets(renderer: Any, folder: str | Path) -> None:
    """Everything of the full layout's renderer half outside ``bernini/``: the expert configs, UMT5 config and
    tokenizer, ``vae/``, ``scheduler/``."""
    folder = Path(folder)
    for name, module in (("transformer", renderer.transformer), ("transformer_2", renderer.transformer_2)):
        if module is not None:
            cfg = {"_class_name": type(module).__name__, **{k: v for k, v in dict(module.config).items() if not k.startswith("_")}}
            (folder / EXPERT_CONFIGS[name]).write_text(json.dumps(cfg, indent=2, default=list))
    renderer.text_encoder.config.save_pretrained(folder / "t5_text_encoder")
    renderer.tokenizer.save_pretrained(folder / "t5_tokenizer")
    renderer.vae.save_pretrained(folder / "vae")
    renderer.scheduler.save_pretrained(folder / "scheduler")


def check_library_folder(folder: Path, cls: type, stem: str | None = None) -> None:
    """Strict key check of a diffusers / transformers model folder before the library loads it: build the model
    from its config on the meta device and compare names with the stored tensors (an ``InputError`` naming each
    missing or unexpected key). Tied tensors count once."""
    if hasattr(cls, "load_config"):  # diffusers
        with empty_module():
            model = cls.from_config(cls.load_config(folder))
        stem = stem or "diffusion_pytorch_model"
    else:  # transformers
        with empty_module():
            model = cls(cls.config_class.from_pretrained(str(folder)))
        stem = stem or "model"
    ckpt = ShardedCheckpoint.open(folder, stem)
    shapes, tied = expected_tensors(model)
    alias = {n: g for g in tied for n in g}
    have = set(ckpt.keys())
    missing = sorted(n for n in shapes if n not in have and not any(a in have for a in alias.get(n, ())))
    unexpected = sorted(have - set(shapes))
    bad = [f"{k} {list(ckpt.shape(k))} (config: {list(shapes[k])})" for k in sorted(have & set(shapes)) if ckpt.shape(k) != shapes[k]]
    ckpt.close()
    if missing or unexpected or bad:
        parts = ([f"missing {', '.join(missing[:6])}"] if missing else []) + \
                ([f"unexpected {', '.join(unexpected[:6])}"] if unexpected else []) + ([f"shape {bad[0]}"] if bad else [])
        raise InputError(str(folder), "; ".join(parts), "the weights do not match config.json: restore the release's files "
                                                        "(a missing tensor is never filled with random values)")


def check_diffusers_layout(root: str | Path, *, transformer_2: bool = True, text_encoder: bool = True) -> None:
    """``check_library_folder`` on each model folder of a Bernini-R / Wan diffusers layout that will be loaded."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5EncoderModel

    root = Path(root)
    check_library_folder(root / "transformer", WanTransformer3DModel)
    if transformer_2 and (root / "transformer_2" / "config.json").is_file():
        check_library_folder(root / "transformer_2", WanTransformer3DModel)
    check_library_folder(root / "vae", AutoencoderKLWan)
    if text_encoder and (root / "text_encoder" / "config.json").is_file() and (root / "tokenizer").is_dir():
        check_library_folder(root / "text_encoder", UMT5EncoderModel)
