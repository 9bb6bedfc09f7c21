"""The batch runner: one verb per manifest line, atomic per-item results, resumable.

Manifest: JSON Lines (UTF-8; a UTF-8 or UTF-16 byte-order mark is understood), one item per line::

    {"id": "clip-001", "verb": "video.sample", "args": {"video": "a.mp4", "n": 8}}

``id`` is optional (default: the line number). A top-level string arg that is a relative path
existing beside the manifest (``"a.mp4"`` above) is resolved against the manifest's folder, so a
manifest runs the same from any directory and on any engine; other strings pass unchanged.

For each item the runner works in ``out/.partial-<id>/`` and renames it to ``out/<id>/`` only when the
verb succeeds, then appends one line to ``out/status.jsonl``. A re-run skips every id already
recorded as ``ok`` (and whose folder exists), retries failed ones, and cleans up half-done folders
left by a crash.

The runner never deletes or overwrites what it did not write: each folder it creates carries a
marker file (``ITEM_MARKER``) and ``out/.atelier-batch`` says the status file is its own. An item
whose ``out/<id>`` (or ``out/.partial-<id>``) belongs to someone else fails and leaves it alone.

Engines: ``local`` runs the items one after another in this process; ``ray`` (app/batch_ray.py)
runs them on a pool of Ray actors. Both use ``_run_item`` for each item and the same status loop,
so result folders, status records and resume rules are the same.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import re
import shutil
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import jsontext
from core.errors import AtelierError, InputError, MediaError
from pipelines.registry import apps

logger = logging.getLogger(__name__)

STATUS_FILE = "status.jsonl"
OUT_MARKER = ".atelier-batch"  # in OUT: the status file here is the runner's own
ITEM_MARKER = ".atelier-batch-item"  # in every item folder the runner creates: safe for it to replace
PARTIAL = ".partial-"
ENGINES = ("local", "ray")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_ROOM_IN_ITEM = 128  # bytes of path kept free below an item folder for the files a verb writes


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


def _score_vos(args: dict, out: Path) -> dict:
    from app import score

    return score.vos(**args).to_dict()


def _score_pose(args: dict, out: Path) -> dict:
    from app import score

    return score.pose(**args).to_dict()


def pipeline_verb(app) -> BatchVerb:
    """A registered pipeline as a batch verb: manifest ``args`` are its inputs, settings, component
    overrides and run options, by the same names as its CLI options (underscores for dashes)."""

    def run(args: dict, out: Path) -> dict:
        from app.runner import run_app

        args.setdefault("progress", False)
        # the runner writes its own result.json into ``out``: the pipeline's output goes one level down
        _, summary = run_app(app, args, out_dir=out / app.name)
        return summary

    names = [i.name for i in app.inputs] + [s.name for s in app.settings()] + list(app.components.values())
    return BatchVerb(app.verb, run, f"{app.help}: args {{{', '.join(names)}, ...}}")


VERBS: dict[str, BatchVerb] = {
    v.name: v
    for v in (
        BatchVerb("video.probe", _video_probe, "metadata of a video: args {video}"),
        BatchVerb("video.sample", _video_sample, "uniform frames + contact sheet: args {video, n, height}"),
        BatchVerb("video.overlay", _video_overlay, "overlay video: args {video, masks|motion, caption}"),
        BatchVerb("score.vos", _score_vos, "DAVIS-2017 J/F/J&F of saved masks: args {pred, gt, unsupervised, bound_th}"),
        BatchVerb("score.pose", _score_pose, "COCO keypoint AP/AR, OKS, PCK, MPJPE of saved keypoints: args {pred, gt, thresholds, normalise}"),
    )
}
VERBS.update({app.verb: pipeline_verb(app) for app in apps().values()})


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


# --- the manifest -------------------------------------------------------------------------------

# UTF-32 before UTF-16: the UTF-32-LE mark starts with the UTF-16-LE one
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _manifest_text(path: Path) -> str:
    """The manifest's text: UTF-8, or whatever its byte-order mark says; binary files are refused."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MediaError(path, "no such manifest file") from None
    except IsADirectoryError:
        raise MediaError(path, "is a folder, not a manifest", "pass the .jsonl file") from None
    except OSError as e:
        raise MediaError(path, f"cannot read the manifest ({e.strerror})") from None
    encoding = next((enc for bom, enc in _BOMS if data.startswith(bom)), "utf-8")
    if encoding == "utf-8" and b"\0" in data:
        line = data[: data.index(b"\0")].count(b"\n") + 1
        raise InputError(f"manifest line {line}", str(path), "the file is binary (or UTF-16 without a byte-order mark); a manifest is UTF-8 text, one JSON object per line")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"manifest line {line}", str(path), f"not valid {encoding} text (byte {e.start}); save the manifest as UTF-8") from None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long, or with a NUL byte, is no path
        return False


def _resolve_path_arg(value: Any, base: Path) -> Any:
    """A top-level string arg that is a relative path existing in ``base`` becomes that absolute path."""
    if not isinstance(value, str) or not value or os.path.isabs(value) or not _exists(base / value):
        return value
    return str(base / value)


def read_manifest(path: str | Path) -> list[dict]:
    """Parse and validate the whole manifest before any work starts, naming the bad line."""
    path = Path(path)
    base = path.absolute().parent
    items, seen = [], set()
    # lines end at "\n" alone: str.splitlines() also splits at U+2028 or U+0085, which a JSON string may hold as is
    for lineno, line in enumerate(_manifest_text(path).removesuffix("\n").split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"manifest line {lineno}"
        try:
            item = jsontext.loads(line, finite=False)  # a NaN setting fails its item alone, by name (core.values)
        except json.JSONDecodeError as e:
            raise InputError(where, line[:80], f"not valid JSON ({e.msg})") from None
        except RecursionError:  # json nests by recursion: thousands of "[" exhaust the stack
            raise InputError(where, line[:80], "nested too deeply to read; an item is one flat object of args") from None
        if not isinstance(item, dict) or "verb" not in item:
            raise InputError(where, line[:80], 'each line is an object like {"verb": "video.probe", "args": {...}}')
        if not isinstance(item["verb"], str):
            raise InputError(f"{where} verb", item["verb"], f"a verb is a string, one of {sorted(VERBS)}")
        verb = item["verb"].replace(" ", ".")
        if verb not in VERBS:
            raise InputError(f"{where} verb", item["verb"], f"known verbs: {sorted(VERBS)}")
        raw_id = item.get("id", f"item-{lineno:06d}")
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
            raise InputError(f"{where} id", raw_id, 'an id is a string or an integer, e.g. "clip-001"')
        item_id = str(raw_id)
        if not _SAFE_ID.match(item_id):
            raise InputError(f"{where} id", item_id, "ids are 1-128 letters, digits, '.', '_' or '-'")
        if item_id in seen:
            raise InputError(f"{where} id", item_id, "ids must be unique")
        seen.add(item_id)
        args = item.get("args", {})
        if not isinstance(args, dict):
            raise InputError(f"{where} args", args, 'args is an object of keyword arguments, e.g. {"video": "a.mp4"}')
        items.append({"id": item_id, "verb": verb, "args": {k: _resolve_path_arg(v, base) for k, v in args.items()}})
    return items


# --- the output folder --------------------------------------------------------------------------


def finished_ids(out_dir: Path) -> set[str]:
    """Ids recorded ``ok`` in ``status.jsonl`` whose result folder exists. Tolerates a torn last line."""
    done: set[str] = set()
    status = Path(out_dir) / STATUS_FILE
    if status.is_file():
        for line in status.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            if rec.get("status") == "ok" and _safe_name(rec.get("id")) and _owned(Path(out_dir) / rec["id"]):
                done.add(rec["id"])
            elif rec.get("status") == "failed":
                done.discard(rec["id"])
    return done


def _safe_name(item_id: object) -> bool:
    return isinstance(item_id, str) and bool(_SAFE_ID.match(item_id))


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


def _is_status_file(status: Path) -> bool:
    """Whether every whole line of ``status`` is a batch record (a status file of an older runner)."""
    lines = status.read_bytes().split(b"\n")[:-1]  # the part after the last newline may be torn
    try:
        return all(isinstance(rec := json.loads(line), dict) and {"id", "status"} <= rec.keys() for line in lines)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def _owned(folder: Path) -> bool:
    """The runner wrote ``folder`` (its marker is there) and nothing else was put in it since: a
    finished item's marker lists every file the run wrote, so a file someone added keeps the folder."""
    marker = folder / ITEM_MARKER
    if folder.is_symlink() or not marker.is_file():
        return False
    try:
        written = json.loads(marker.read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return False
    if written is None:  # only a .partial folder of an unfinished run is wholly the runner's scratch
        return folder.name.startswith(PARTIAL)
    return set(_relative_files(folder)) <= set(written) | {ITEM_MARKER}


def _relative_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def _remove_owned(folder: Path) -> bool:
    """Remove ``folder`` if the runner wrote it (it carries the marker); else keep it, even empty."""
    if _owned(folder):
        shutil.rmtree(folder)
        return True
    return False


def _make_work_folder(work: Path, item: dict) -> None:
    """Create ``work`` with its marker already inside (made under a temporary name, then renamed), so a
    crash never leaves a folder of ours without the marker that says so."""
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=".atelier-new-", dir=work.parent))
    (tmp / ITEM_MARKER).write_text(json.dumps({"id": item["id"], "verb": item["verb"]}) + "\n")
    os.rename(tmp, work)


def _input_paths(items: list[dict]) -> Iterator[tuple[Path, str, dict]]:
    """``(resolved path, key, item)`` for every top-level string arg that names an existing path."""
    for item in items:
        for key, value in item["args"].items():
            if isinstance(value, str) and value and _exists(Path(value)):
                yield Path(value).resolve(), key, item


def _path_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 4096


def prepare_out_dir(out_dir: str | Path, manifest: str | Path, items: list[dict]) -> Path:
    """Check and create ``out_dir`` before any compute; every problem is one InputError naming -o/--out.
    Returns it absolute, so records name the same folders whichever engine (and node) wrote them."""
    if out_dir is None or not str(out_dir).strip():  # Path("") is the current folder: never write there unasked
        raise InputError("-o/--out", out_dir, "pass an output folder, e.g. -o results/")
    out = Path(out_dir).absolute()
    target = out.resolve()
    if target == Path(manifest).resolve():
        raise InputError("-o/--out", str(out), "it is the manifest itself; name a new folder for the results")
    for path, key, item in _input_paths(items):
        if target == path or (path.is_dir() and path in target.parents):
            where = "" if target == path else "inside "
            raise InputError("-o/--out", str(out), f"it is {where}the input {key}={item['args'][key]!r} of item {item['id']!r}; name a folder of its own")
    try:
        if out.exists() and not out.is_dir():
            raise InputError("-o/--out", str(out), "it is a file; name a folder (created if missing)")
        out.mkdir(parents=True, exist_ok=True)
        status, marker = out / STATUS_FILE, out / OUT_MARKER
        for path in (status, marker):
            if path.is_symlink() or (path.exists() and not path.is_file()):  # appending would write into someone else's file
                raise InputError("-o/--out", str(out), f"its {path.name} is a link or a folder, not written by atelier batch; name another folder")
        if not marker.is_file():
            if status.exists() and not _is_status_file(status):
                raise InputError("-o/--out", str(out), f"it holds a {STATUS_FILE} not written by atelier batch; name another folder")
            marker.write_text(json.dumps({"written_by": "atelier batch", "manifest": str(Path(manifest).absolute())}) + "\n")
        with open(status, "a"):
            pass  # writable: checked now, not after the first item's compute
    except OSError as e:
        raise InputError("-o/--out", str(out), f"cannot write there ({e.strerror or e}); name a folder you can write to") from None
    longest = max((len(item["id"]) for item in items), default=0)
    used = len(os.fsencode(out.absolute())) + 1 + len(PARTIAL) + longest + _ROOM_IN_ITEM
    if used > _path_max(out):
        raise InputError("-o/--out", str(out), f"the path is too long for the item folders inside it (limit {_path_max(out)} bytes); name a shorter one")
    return out


# --- running ------------------------------------------------------------------------------------


def run_batch(
    manifest: str | Path,
    out_dir: str | Path,
    progress: bool = True,
    engine: str = "local",
    ray_address: str | None = None,
    workers: int | None = None,
) -> BatchSummary:
    """Run every unfinished item of ``manifest``; failures are recorded and do not stop the rest.

    ``engine="ray"`` runs the items on Ray actors (``ray_address``: an existing cluster, e.g.
    ``"auto"`` or ``"ray://host:10001"``; default a local one; ``workers`` actors).
    """
    from tqdm.auto import tqdm

    if engine not in ENGINES:
        raise InputError("engine", engine, f"use one of {list(ENGINES)}")
    if engine == "ray":
        from app import batch_ray

        batch_ray.require_ray()
    items = read_manifest(manifest)
    out_dir = prepare_out_dir(out_dir, manifest, items)
    for stale in out_dir.glob(f"{PARTIAL}*"):
        _remove_owned(stale)
    _drop_torn_tail(out_dir / STATUS_FILE)
    done = finished_ids(out_dir)
    todo = [it for it in items if it["id"] not in done]
    if engine == "ray":
        records = batch_ray.run_items(todo, out_dir, address=ray_address, workers=workers)
    else:
        records = (_run_item(item, out_dir) for item in todo)
    ok = failed = 0
    with _sigterm_as_interrupt(), open(out_dir / STATUS_FILE, "a") as status:
        try:
            for rec in tqdm(records, total=len(todo), desc="batch", disable=not progress, unit="item"):
                ok += rec["status"] == "ok"
                failed += rec["status"] == "failed"
                status.write(json.dumps(rec, default=str) + "\n")
                status.flush()
                os.fsync(status.fileno())
        finally:
            getattr(records, "close", lambda: None)()  # an engine's clean-up runs now, even on SIGTERM
    return BatchSummary(total=len(items), ok=ok, failed=failed, skipped=len(items) - len(todo), out_dir=str(out_dir))


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while a batch runs, so the item in flight removes its
    ``.partial`` folder on the way out; the previous handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread (e.g. a web app's worker)
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def failed_record(item: dict, error: str, seconds: float = 0.0, **extra: Any) -> dict:
    """A status line for an item that failed (the same fields whichever engine ran it)."""
    return {"id": item["id"], "verb": item["verb"], "status": "failed", "error": error, **extra, "seconds": round(seconds, 3)}


def _check_replaceable(final: Path) -> None:
    if (final.exists() or final.is_symlink()) and not _owned(final):
        raise MediaError(final, "exists and was not written by atelier batch", "move it or choose another -o")


def _run_item(item: dict, out_dir: Path, verbs: dict[str, BatchVerb] = VERBS) -> dict:
    """Run one item in ``out_dir/.partial-<id>`` and rename it to ``out_dir/<id>``: its status record.

    Nothing the runner did not write is touched; the ``.partial`` folder never outlives the call.
    """
    final = out_dir / item["id"]
    work = out_dir / f"{PARTIAL}{item['id']}"
    t0 = time.perf_counter()
    try:
        _check_replaceable(final)  # before any compute
        if work.exists() and not _remove_owned(work):
            raise MediaError(work, "exists and was not written by atelier batch", "move it or choose another -o")
        _make_work_folder(work, item)
        result = verbs[item["verb"]].run(dict(item["args"]), work)
        (work / "result.json").write_text(json.dumps(result, indent=2, default=str).replace(str(work), str(final)))
        (work / ITEM_MARKER).write_text(json.dumps({"id": item["id"], "verb": item["verb"], "files": _relative_files(work)}) + "\n")
        _check_replaceable(final)
        if final.exists():
            shutil.rmtree(final)  # an older result of ours (every file in it listed by its marker)
        os.replace(work, final)
        rec = {"id": item["id"], "verb": item["verb"], "status": "ok", "result_dir": str(final), "seconds": round(time.perf_counter() - t0, 3)}
    except (AtelierError, TypeError, ValueError, OSError) as e:
        logger.error("item %s failed: %s", item["id"], e)
        rec = failed_record(item, f"{type(e).__name__}: {e}", time.perf_counter() - t0)
    except Exception as e:  # an unexpected bug: keep the traceback in the record, go on
        logger.exception("item %s crashed", item["id"])
        rec = failed_record(item, f"{type(e).__name__}: {e}", time.perf_counter() - t0, traceback=traceback.format_exc(limit=5))
    finally:
        if work.exists():
            _remove_owned(work)  # a failure, or an interrupt (Ctrl-C, SIGTERM) on its way out
    return rec
