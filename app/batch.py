"""The batch runner: one verb per manifest line, atomic per-item results, resumable.

Manifest: JSON Lines, one item per line::

    {"id": "clip-001", "verb": "video.sample", "args": {"video": "a.mp4", "n": 8}}

``id`` is optional (default: the line number). For each item the runner works in
``out/.partial-<id>/`` and renames it to ``out/<id>/`` only when the verb succeeds, then appends
one line to ``out/status.jsonl``. A re-run skips every id already recorded as ``ok`` (and whose
folder exists), retries failed ones, and cleans up half-done folders left by a crash.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import AtelierError, InputError, MediaError

logger = logging.getLogger(__name__)

STATUS_FILE = "status.jsonl"
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class BatchVerb:
    """A verb the batch runner can call: ``run(args, out_dir) -> JSON-safe dict``."""

    name: str
    run: Callable[[dict[str, Any], Path], dict]
    help: str


def _video_probe(args: dict, out: Path) -> dict:
    from app import video_tools

    return video_tools.probe(**args)


def _video_sample(args: dict, out: Path) -> dict:
    from app import video_tools

    return video_tools.sample(out_dir=out, **args)


def _video_overlay(args: dict, out: Path) -> dict:
    from app import video_tools

    return video_tools.overlay(out=out / "overlay.mp4", **args)


def _ask(args: dict, out: Path) -> dict:
    from app.ask import ask

    # the runner writes its own result.json into ``out``: the full GridProbe output goes one level down
    args.setdefault("progress", False)
    return ask(out_dir=out / "gridprobe", **args)


VERBS: dict[str, BatchVerb] = {
    v.name: v
    for v in (
        BatchVerb("video.probe", _video_probe, "metadata of a video: args {video}"),
        BatchVerb("video.sample", _video_sample, "uniform frames + contact sheet: args {video, n, height}"),
        BatchVerb("video.overlay", _video_overlay, "overlay video: args {video, masks|motion, caption}"),
        BatchVerb("ask", _ask, "GridProbe video QA: args {video, question, options, grid, probe_scale, vlm, answerer, ...}"),
    )
}


def register_verb(verb: BatchVerb) -> None:
    """Pipelines add their verbs here (e.g. ``ask``), so batch manifests can call them."""
    VERBS[verb.name] = verb


@dataclass
class BatchSummary:
    total: int
    ok: int
    failed: int
    skipped: int
    out_dir: str

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def read_manifest(path: str | Path) -> list[dict]:
    """Parse and validate the whole manifest before any work starts, naming the bad line."""
    path = Path(path)
    if not path.is_file():
        raise MediaError(path, "no such manifest file")
    items, seen = [], set()
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"manifest line {lineno}", line[:80], f"not valid JSON ({e.msg})") from None
        if not isinstance(item, dict) or "verb" not in item:
            raise InputError(f"manifest line {lineno}", line[:80], 'each line is an object like {"verb": "video.probe", "args": {...}}')
        verb = item["verb"].replace(" ", ".")
        if verb not in VERBS:
            raise InputError(f"manifest line {lineno} verb", item["verb"], f"known verbs: {sorted(VERBS)}")
        item_id = str(item.get("id", f"item-{lineno:06d}"))
        if not _SAFE_ID.match(item_id):
            raise InputError(f"manifest line {lineno} id", item_id, "ids are 1-128 letters, digits, '.', '_' or '-'")
        if item_id in seen:
            raise InputError(f"manifest line {lineno} id", item_id, "ids must be unique")
        seen.add(item_id)
        args = item.get("args", {})
        if not isinstance(args, dict):
            raise InputError(f"manifest line {lineno} args", args, "args is an object of keyword arguments")
        items.append({"id": item_id, "verb": verb, "args": args})
    return items


def finished_ids(out_dir: Path) -> set[str]:
    """Ids recorded ``ok`` in ``status.jsonl`` whose result folder exists. Tolerates a torn last line."""
    done: set[str] = set()
    status = out_dir / STATUS_FILE
    if status.is_file():
        for line in status.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            if rec.get("status") == "ok" and (out_dir / rec["id"]).is_dir():
                done.add(rec["id"])
            elif rec.get("status") == "failed":
                done.discard(rec["id"])
    return done


def _drop_torn_tail(status: Path) -> None:
    """Cut a last line left unfinished by a crash, so the next record starts on a line of its own
    (appended to the torn one, it would be unreadable and its item redone on every later run)."""
    if not status.is_file():
        return
    with open(status, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return  # the usual case: whole lines only, one byte read
        f.seek(0)
        f.truncate(f.read().rfind(b"\n") + 1)


def run_batch(manifest: str | Path, out_dir: str | Path, progress: bool = True) -> BatchSummary:
    """Run every unfinished item of ``manifest``; failures are recorded and do not stop the rest."""
    from tqdm.auto import tqdm

    items = read_manifest(manifest)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(".partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    _drop_torn_tail(out_dir / STATUS_FILE)
    done = finished_ids(out_dir)
    todo = [it for it in items if it["id"] not in done]
    ok = failed = 0
    with open(out_dir / STATUS_FILE, "a") as status:
        for item in tqdm(todo, desc="batch", disable=not progress, unit="item"):
            rec = _run_item(item, out_dir)
            ok += rec["status"] == "ok"
            failed += rec["status"] == "failed"
            status.write(json.dumps(rec, default=str) + "\n")
            status.flush()
            os.fsync(status.fileno())
    return BatchSummary(total=len(items), ok=ok, failed=failed, skipped=len(items) - len(todo), out_dir=str(out_dir))


def _run_item(item: dict, out_dir: Path) -> dict:
    final = out_dir / item["id"]
    work = out_dir / f".partial-{item['id']}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    t0 = time.perf_counter()
    rec: dict[str, Any] = {"id": item["id"], "verb": item["verb"]}
    try:
        result = VERBS[item["verb"]].run(dict(item["args"]), work)
        (work / "result.json").write_text(json.dumps(result, indent=2, default=str).replace(str(work), str(final)))
        if final.exists():
            shutil.rmtree(final)
        os.replace(work, final)
        rec.update(status="ok", result_dir=str(final))
    except (AtelierError, TypeError, ValueError, OSError) as e:
        shutil.rmtree(work, ignore_errors=True)
        rec.update(status="failed", error=f"{type(e).__name__}: {e}")
        logger.error("item %s failed: %s", item["id"], e)
    except Exception as e:  # an unexpected bug: keep the traceback in the record, go on
        shutil.rmtree(work, ignore_errors=True)
        rec.update(status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=5))
        logger.exception("item %s crashed", item["id"])
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec
