"""Device and dtype selection, and seeding."""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import torch

from core.errors import InputError

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
           "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}  # fmt: skip


def select_device(device: str | torch.device | None = None) -> torch.device:
    """The device to run on: the one asked for, else cuda, then mps, then cpu."""
    if device is None or str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise InputError("device", device, "use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError("device", device, "CUDA is not available here; use 'cpu' or 'auto'")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError("device", device, "MPS is not available here; use 'cpu' or 'auto'")
    return dev


def select_dtype(dtype: str | torch.dtype | None = None, device: torch.device | None = None) -> torch.dtype:
    """The dtype asked for; ``None``/``"auto"`` gives bfloat16 on CUDA that supports it, else float32."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        if device is not None and device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if dtype not in _DTYPES:
        raise InputError("dtype", dtype, f"choose one of {sorted(set(_DTYPES))} or 'auto'")
    if device is not None and device.type == "cpu" and _DTYPES[dtype] == torch.float16:
        logger.warning("float16 on the CPU is slow and imprecise; bfloat16 or float32 is usually better")
    return _DTYPES[dtype]


def stored_dtype(folder: str | os.PathLike) -> torch.dtype | None:
    """The floating dtype most of a folder's ``*.safetensors`` tensors are stored in (headers only), or None."""
    from collections import Counter
    from pathlib import Path

    from safetensors import safe_open

    counts: Counter = Counter()
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for key in f.keys():
                dtype = f.get_slice(key).get_dtype()
                counts[dtype] += 1
    names = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    floating = [(n, c) for n, c in counts.most_common() if n in names]
    return names[floating[0][0]] if floating else None


def load_dtype(dtype: str | torch.dtype | None, device: torch.device, folder: str | os.PathLike | None = None) -> torch.dtype | None:
    """The dtype to load a checkpoint in: ``"stored"`` keeps what the files hold; ``None`` / ``"auto"`` is bfloat16 on CUDA
    and, on the CPU, a bfloat16 checkpoint stays bfloat16 (float32 would double its memory) while others load in float32.
    Returns None for "keep each tensor as stored" when ``folder`` is not given."""
    if dtype == "stored" or (dtype in (None, "auto") and device.type == "cpu"):
        stored = stored_dtype(folder) if folder is not None else None
        if dtype == "stored":
            return stored
        if folder is None:
            return None  # per tensor, as stored (the caller reads each one)
        return torch.bfloat16 if stored == torch.bfloat16 else torch.float32
    return select_dtype(dtype, device)


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a CPU ``torch.Generator`` seeded the same way."""
    if not isinstance(seed, int) or seed < 0:
        raise InputError("seed", seed, "use a non-negative integer")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    return torch.Generator().manual_seed(seed)
