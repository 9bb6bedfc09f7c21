"""How many CPU threads torch's kernels use for a run (issue 50).

torch starts with one intra-op thread per core. For the small builtin models (2-10 M parameters, tensors of a few
hundred kilobytes) that is slower, not faster: `atelier ask` on a 1,000-frame clip ran 1.33x slower on two threads
than on one on a lightly loaded 2-core machine, and 10-15x slower while another process held the cores (the
threads wait on each other) [measured, docs/BENCHMARKS.md]. So a run whose models are small (all the builtin ones:
under ``SMALL_MODEL`` parameters together) takes one thread, and any other keeps torch's default; ``--threads N`` (or ``threads`` in a manifest, or the
``ATELIER_THREADS`` environment variable) overrides both. The number a run used is recorded in its config.

Setting torch's intra-op threads after the models load is not enough: OpenMP, the BLAS under numpy and OpenCV start
their own pools at import, one thread per core. With another process holding both cores, a builtin verb at its
default then ran up to 1.24x slower than the same verb under ``OMP_NUM_THREADS=1`` (benchmarks/latency.py
--threads-check, 2026-12-06). So a run whose thread count is known before anything numeric loads (asked for, or every
model builtin) sets it for all of them first (``preset_threads``), and ``use_threads`` sets torch's and OpenCV's.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from core.errors import InputError

ENV = "ATELIER_THREADS"
SMALL_MODEL = 100_000_000  # parameters of a run's models together; the builtin pipelines hold 2-30 M
SMALL_THREADS = 1
# what OpenMP, MKL and OpenBLAS read once, when they load
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


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


def preset_threads(requested: Any, only_builtin: bool) -> int | None:
    """Before torch and the numeric libraries load, the thread count the run will use where it is known already:
    ``requested``, else ``$ATELIER_THREADS`` (both set for every library), else one for a run of builtin models only
    (set where the user's environment names none). Returns it, or None (decided after loading, by the models' size).
    Once torch is loaded (a second call in one process) the environment no longer matters: ``use_threads`` sets it."""
    n = check_threads(requested)
    if n is None:
        n = check_threads(os.environ.get(ENV), ENV)
    explicit = n is not None
    if n is None and only_builtin:
        n = SMALL_THREADS
    if n is not None and "torch" not in sys.modules:
        for var in THREAD_VARS:
            if explicit:
                os.environ[var] = str(n)
            else:
                os.environ.setdefault(var, str(n))
        if all(os.environ[v] == str(n) for v in THREAD_VARS):  # not where the user's environment names another count
            limit_loaded(n)  # numpy's BLAS and OpenCV loaded already (the CLI's parser imports them)
    return n


def limit_loaded(n: int) -> None:
    """``n`` threads for the pools of what is loaded now: OpenMP / BLAS libraries (threadpoolctl, which finds them in
    the process) and OpenCV."""
    import cv2
    from threadpoolctl import threadpool_limits

    threadpool_limits(n)  # called, not entered: the limits hold for the rest of the process
    cv2.setNumThreads(n)


def use_threads(n: int) -> int:
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    limit_loaded(n)
    return n
