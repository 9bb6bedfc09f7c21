"""Atomic file output: write to a temporary sibling, rename on success, delete on failure."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; it replaces ``dest`` only if the block succeeds.

    The temporary name keeps the suffix so format sniffing by extension still works, and it
    starts with a dot so half-written files never look like results.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.stem}.tmp-{os.getpid()}{dest.suffix}")
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(dest: str | os.PathLike, text: str) -> Path:
    with atomic_path(dest) as tmp:
        tmp.write_text(text)
    return Path(dest)


def write_json_atomic(dest: str | os.PathLike, obj: Any) -> Path:
    return write_text_atomic(dest, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays, Paths and dataclasses show up in configs and outputs
    import dataclasses

    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


def json_safe(value: Any) -> Any:
    """Arrays to lists, numpy scalars to numbers, Paths to strings, recursively (for JSON and the web)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    try:
        return _json_default(value)
    except TypeError:
        return value
