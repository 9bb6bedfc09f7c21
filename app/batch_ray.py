"""The Ray engine of ``atelier batch --engine ray``: the same items, result folders and status records
as the local engine, run by a pool of Ray actors through Ray Data.

The driver (this process) reads the manifest, prepares OUT, and appends one status line per record
as the records stream back, so a killed batch resumes exactly as with the local engine. Each actor
runs the local engine's per-item runner (``app.batch._run_item``): it writes ``OUT/.partial-<id>``
and renames it to ``OUT/<id>``, so OUT must be on a filesystem that every node sees (any folder on a
one-machine cluster; NFS or alike across machines, where every node also has atelier installed).
Actors live for the whole batch, so what a verb caches per process (a loaded pipeline) is loaded
once per actor. Each actor takes one GPU when the cluster has GPUs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

from app.batch import PARTIAL, VERBS, BatchVerb, _remove_owned, _run_item, failed_record
from core.errors import InputError, MissingDependencyError

logger = logging.getLogger(__name__)


def require_ray():
    """The ``ray`` module, or a MissingDependencyError naming the pip extra."""
    try:
        import ray
        import ray.data  # noqa: F401  (Ray Data is the ray[data] part)
    except ImportError:
        raise MissingDependencyError("ray", "distributed", "run batches on Ray") from None
    return ray


class ItemRunner:
    """Ray Data callable class: one instance per actor, one manifest item (JSON) per call."""

    def __init__(self, out_dir: str, verbs: dict[str, BatchVerb]):
        self.out_dir, self.verbs = Path(out_dir), verbs

    def __call__(self, batch: dict) -> dict:
        records = [_run_item(json.loads(item), self.out_dir, self.verbs) for item in batch["item"]]
        return {"record": [json.dumps(rec, default=str) for rec in records]}


def _connect(ray, address: str | None) -> None:
    try:
        if address:
            ray.init(address=address, logging_level=logging.WARNING)
        else:
            ray.init(include_dashboard=False, logging_level=logging.WARNING)  # a local cluster, for this batch only
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise InputError("--ray-address", address, f"cannot connect to Ray ({e}); start a cluster with `ray start --head`, or leave --ray-address out to run a local one") from None


def _pool_size(ray, n_items: int, workers: int | None) -> tuple[int, int]:
    """(actors, GPUs per actor): one actor per GPU if the cluster has GPUs, else one per CPU."""
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), max(1, int(resources.get("CPU", 1)))
    limit = gpus or cpus
    if workers and workers > limit:
        logger.warning("--workers %d is more than the cluster's %d %s; using %d", workers, limit, "GPUs" if gpus else "CPUs", limit)
    return max(1, min(n_items, workers or limit, limit)), 1 if gpus else 0


def _no_task_retries() -> dict:
    """Actor options: an item that kills its actor is recorded failed (a re-run retries it) and a new
    actor takes over; Ray Data's default would retry it forever."""
    return {"max_task_retries": 0}


def run_items(items: list[dict], out_dir: Path, address: str | None = None, workers: int | None = None) -> Iterator[dict]:
    """Status records of ``items``, in the order they finish. Starts (or joins) Ray now, before the
    caller installs its SIGTERM handler (``ray.init`` sets its own); the records' generator leaves no
    ``.partial`` folder behind when closed early (Ctrl-C, SIGTERM)."""
    if not items:
        return iter(())
    ray = require_ray()
    started = not ray.is_initialized()
    if started:
        _connect(ray, address)
    elif address:
        logger.warning("Ray is already initialised in this process; --ray-address %s is not used", address)
    return _stream(ray, items, out_dir, workers, started)


def _stream(ray, items: list[dict], out_dir: Path, workers: int | None, started: bool) -> Iterator[dict]:
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False  # the driver shows one bar over the items
        ctx.max_errored_blocks = len(items)  # an item whose actor died is recorded failed below; the rest go on
        size, gpus = _pool_size(ray, len(items), workers)
        # items travel as JSON strings: Arrow would merge the args of different items into one schema
        ds = ray.data.from_items([{"item": json.dumps(item)} for item in items], override_num_blocks=len(items))
        ds = ds.map_batches(
            ItemRunner,
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=size, max_tasks_in_flight_per_actor=1),
            fn_constructor_kwargs={"out_dir": str(out_dir), "verbs": {item["verb"]: VERBS[item["verb"]] for item in items}},
            num_cpus=1,
            num_gpus=gpus,
            ray_remote_args_fn=_no_task_retries,
        )
        seen = set()
        # no prefetch: each record is written the moment it arrives (iter_rows holds one back)
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=0):
            for line in batch["record"]:
                rec = json.loads(line)
                seen.add(rec["id"])
                yield rec
        for item in items:
            if item["id"] not in seen:
                yield failed_record(item, "WorkerDied: the Ray actor running this item died (see the Ray logs); re-run to retry")
    finally:
        if started:
            ray.shutdown()  # stops the actors (a local cluster stops whole)
        for item in items:
            partial = out_dir / f"{PARTIAL}{item['id']}"
            if partial.exists():
                _remove_owned(partial)
