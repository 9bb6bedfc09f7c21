"""Task generators, one module each. ``get(name)`` returns the module (``Config``, ``generate``)."""

from __future__ import annotations

import importlib

NAMES = ("t2v", "edit", "ref2v", "motion_edit", "vrs", "longqa", "meme", "spatial")


def get(name: str):
    if name not in NAMES:
        raise ValueError(f"invalid task={name!r}: choose one of {NAMES}")
    return importlib.import_module(f"worldgen.tasks.{name}")
