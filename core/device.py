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


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a CPU ``torch.Generator`` seeded the same way."""
    if not isinstance(seed, int) or seed < 0:
        raise InputError("seed", seed, "use a non-negative integer")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    return torch.Generator().manual_seed(seed)
