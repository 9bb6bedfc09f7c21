"""Bounding a request by the memory it needs, before anything is allocated."""

from __future__ import annotations

from typing import Any

from core.errors import InputError


def memory_budget(fraction: float = 0.5) -> int:
    """Bytes one request may take: ``fraction`` of the memory available now (models and their
    activations need the rest)."""
    import psutil

    return int(psutil.virtual_memory().available * fraction)


def check_allocation(name: str, value: Any, nbytes: int, fix: str) -> None:
    """``InputError`` naming ``name=value`` when ``nbytes`` exceeds the budget, saying how much it
    would take and how to ask for less."""
    budget = memory_budget()
    if nbytes > budget:
        raise InputError(name, value, f"that needs {nbytes / 2**30:.1f} GiB of memory, more than the "
                                      f"{budget / 2**30:.1f} GiB available to one request; {fix}")
