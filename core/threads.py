"""How many CPU threads torch's kernels use for a run (issue 50).

torch starts with one intra-op thread per core. For the small builtin models (2-10 M parameters, tensors of a few
hundred kilobytes) that is slower, not faster: `atelier ask` on a 1,000-frame clip ran 1.33x slower on two threads
than on one on a lightly loaded 2-core machine, and 10-15x slower while another process held the cores (the
threads wait on each other) [measured, docs/BENCHMARKS.md]. So a run whose models are small (all the builtin ones:
under ``SMALL_MODEL`` parameters together) takes one thread, and any other keeps torch's default; ``--threads N`` (or ``threads`` in a manifest, or the
``ATELIER_THREADS`` environment variable) overrides both. The number a run used is recorded in its config.
"""

from __future__ import annotations

import os
from typing import Any

from core.errors import InputError

ENV = "ATELIER_THREADS"
SMALL_MODEL = 100_000_000  # parameters of a run's models together; the builtin pipelines hold 2-30 M
SMALL_THREADS = 1


def check_threads(value: Any, name: str = "threads") -> int | None:
    """A thread count from a flag, a manifest or the environment: a whole number >= 1, or None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        n = int(value) if not isinstance(value, (bool, float)) else None
    except (TypeError, ValueError):
        n = None
    if n is None or n < 1 or n > 1024:
        raise InputError(name, value, "use a whole number of CPU threads, 1 or more (e.g. 1 for the builtin models)")
    return n


def parameters(components: dict[str, Any]) -> int:
    """Parameters of the modules a pipeline's components are or hold (one attribute deep), each counted once."""
    from torch import nn

    seen: dict[int, nn.Module] = {}
    for comp in components.values():
        for m in [comp, *vars(comp).values()] if comp is not None and hasattr(comp, "__dict__") else [comp]:
            if isinstance(m, nn.Module):
                seen.setdefault(id(m), m)
    tensors = {id(p): p for m in seen.values() for p in m.parameters()}
    return sum(p.numel() for p in tensors.values())


def choose_threads(requested: Any, components: dict[str, Any]) -> int:
    """The run's thread count: ``requested``, else ``$ATELIER_THREADS``, else 1 for small models, else torch's own
    default (one per core)."""
    import torch

    n = check_threads(requested)
    if n is None:
        n = check_threads(os.environ.get(ENV), ENV)
    if n is None:
        n = SMALL_THREADS if parameters(components) < SMALL_MODEL else torch.get_num_threads()
    return n


def use_threads(n: int) -> int:
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
