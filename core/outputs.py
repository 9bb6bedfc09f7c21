"""Outputs we own: a file atelier did not write is never replaced.

Every folder atelier writes results into carries ``MARKER`` (``.atelier-output.json``), which lists
the files it wrote there with their SHA-256. A file is *ours* when the marker beside it lists its
name with its current hash; a user's file of the same name, or one of ours the user has edited
since, is not, and nothing replaces it unless the caller passes ``overwrite=True`` (``--overwrite``).

Two checks, so nothing is lost and no compute is wasted:

- before the work, ``check_folder(folder, claims)`` refuses a folder holding someone else's file
  under a name the run will write (``claims`` are glob patterns such as ``"meme_*.png"``), and
  ``check_file(path)`` a single output file that is not ours;
- after the work, ``publish_folder`` / ``publish_file`` write into a staging place first and move
  the results in only when no destination belongs to someone else, so a name the claims missed
  still cannot replace a user's file.

A run replaces our own, unchanged files under the names it claims, even those it does not write
again: a re-run with fewer frames leaves no stale masks behind, while the other files of the folder
(a user's notes, another split of a dataset, a ``-o clip.mp4`` beside it) stay.

Claims are glob patterns relative to the folder: ``*`` within a name, ``NAME/**`` for everything
below a folder.

**A run never writes over its own inputs**, whatever the flags: inside ``protecting(paths)`` (``app.runner`` wraps
every verb's run in it) a destination that is one of those files (the same inode, by any name or link) or lies
inside an input folder is refused, ``--overwrite`` or not.

A staging folder's marker lists the files the run finished there with their hashes; a later run removes a dead
run's staging folder only by those files, and the folder only once it is empty, so a user's file that found its
way into one is never deleted.
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from core.errors import InputError, MediaError

MARKER = ".atelier-output.json"
STAGING = ".atelier-staging-"
_FIX = "pick another folder or pass --overwrite"
# the input files (device, inode) and folders (resolved) of the run in progress: never a destination
_INPUTS: contextvars.ContextVar[tuple[frozenset, tuple[Path, ...]]] = contextvars.ContextVar("atelier_inputs", default=(frozenset(), ()))


@contextlib.contextmanager
def protecting(paths: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Within the block, no output may replace or be written inside any of ``paths`` (a run's inputs)."""
    ids, folders = _INPUTS.get()
    ids, folders = set(ids), list(folders)
    for p in paths:
        with contextlib.suppress(OSError, ValueError):
            st = os.stat(p)
            ids.add((st.st_dev, st.st_ino))
            if Path(p).is_dir():
                folders.append(Path(p).resolve())
    token = _INPUTS.set((frozenset(ids), tuple(folders)))
    try:
        yield
    finally:
        _INPUTS.reset(token)


def input_at(path: str | os.PathLike) -> bool:
    """Whether writing ``path`` would replace a protected input or write inside an input folder."""
    ids, folders = _INPUTS.get()
    if not ids and not folders:
        return False
    path = Path(path)
    with contextlib.suppress(OSError, ValueError):
        st = os.stat(path)
        if (st.st_dev, st.st_ino) in ids:
            return True
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        where = path.resolve()
        return any(where == f or f in where.parents for f in folders)
    return False


def _input_refusal(name: str, where: Path, rel: str | None = None) -> InputError:
    shown = f"{rel} there" if rel else "it"
    return InputError(name, str(where), f"{shown} is an input of this run, which the result would replace; write the result "
                                        "elsewhere (a run never overwrites its own input, even with --overwrite)")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_marker(folder: Path) -> dict:
    """The files atelier wrote in ``folder`` as ``{relpath: sha256}``, from its marker; an absent or
    unreadable marker (a user's file of that name) counts as empty."""
    path = Path(folder) / MARKER
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() and not path.is_symlink() else {}
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("written_by") == "atelier" else None
    if not isinstance(files, dict):
        return {}
    # a name that climbs out of the folder is nobody's record of ours (a hand-written marker): never acted on
    return {str(k): v for k, v in files.items() if isinstance(v, str) and not Path(str(k)).is_absolute() and ".." not in Path(str(k)).parts}


def _owned(folder: Path, rel: str, marker: dict) -> bool:
    path = folder / rel
    if path.is_symlink() or not path.is_file():
        return False
    recorded = marker.get(rel)
    return recorded is not None and recorded == sha256(path)


def is_ours(path: str | os.PathLike) -> bool:
    """Whether atelier wrote ``path`` and it is unchanged since (its folder's marker says so)."""
    path = Path(path)
    return _owned(path.parent, path.name, read_marker(path.parent))


def _foreign(folder: Path, rels: Iterable[str], marker: dict, overwrite: bool = False) -> list[str]:
    """The names among ``rels`` that exist in ``folder`` and are not ours: a user's file (kept unless
    ``overwrite``), or a folder, link or file standing where the name or one of its folders must go."""
    out = []
    for rel in rels:
        ancestors = [folder / p for p in reversed(Path(rel).parents[:-1])]
        blocker = next((a for a in ancestors if a.is_symlink() or (a.exists() and not a.is_dir())), None)
        path = folder / rel
        if blocker is not None:
            out.append(str(blocker.relative_to(folder)))
        elif path.is_symlink() or path.is_dir():
            out.append(rel)
        elif path.exists() and not overwrite and not _owned(folder, rel, marker):
            out.append(rel)
    return sorted(set(out))


def _refusal(name: str, folder: Path, foreign: list[str]) -> InputError:
    shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    return InputError(name, str(folder), f"it holds {shown}, not written by atelier, which this run would replace; {_FIX}")


def check_folder(folder: str | os.PathLike, claims: Iterable[str], name: str = "--out", overwrite: bool = False) -> None:
    """Before the work: refuse ``folder`` if it holds a file of someone else's under a name matching
    one of ``claims``."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    record = folder / MARKER
    if (record.exists() or record.is_symlink()) and not (record.is_file() and not record.is_symlink() and _is_marker(record)):
        raise _refusal(name, folder, [MARKER])
    marker = read_marker(folder)
    taken = sorted({str(p.relative_to(folder)) for pattern in claims for p in _glob(folder, pattern)})
    if hit := next((rel for rel in taken if input_at(folder / rel)), None):
        raise _input_refusal(name, folder, hit)
    foreign = _foreign(folder, taken, marker, overwrite)
    if foreign:
        raise _refusal(name, folder, foreign)


def _glob(folder: Path, pattern: str) -> Iterator[Path]:
    if pattern.endswith("/**"):
        yield from (p for p in folder.glob(pattern[:-3] + "/**/*") if p.is_symlink() or not p.is_dir())
        return
    if not any(c in pattern for c in "*?["):
        path = folder / pattern
        if path.exists() or path.is_symlink():
            yield path
        return
    # a folder that a wildcard meets (masks/ for masks/*.png) is a place to write into, not a name taken
    yield from (p for p in folder.glob(pattern) if p.is_symlink() or not p.is_dir())


def check_file(path: str | os.PathLike, name: str = "--out", overwrite: bool = False) -> None:
    """Before the work: refuse an existing ``path`` that atelier did not write (unless ``overwrite``)."""
    path = Path(path)
    if input_at(path):
        raise _input_refusal(name, path)
    if path.is_dir() and not path.is_symlink():
        raise InputError(name, str(path), "is a folder; pass a file name")
    if (path.exists() or path.is_symlink()) and not is_ours(path) and not (overwrite and not path.is_symlink()):
        raise InputError(name, str(path), f"exists and was not written by atelier; pass a new file name or --overwrite")


@contextlib.contextmanager
def publish_folder(folder: str | os.PathLike, claims: Iterable[str] = (), name: str = "--out",
                   overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty staging folder inside ``folder``; when the block succeeds, move everything written
    there into ``folder`` (checked first: nothing moves if any destination is someone else's), remove
    our own earlier files under ``claims`` that this run did not write again, and record it all in the
    marker. The staging folder never outlives the block."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(folder)
    stage = folder / f"{STAGING}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    stage.mkdir()  # a fresh, unique name: from here on the block below removes it whatever stops the run
    try:
        _write_staging_marker(stage, {})  # says it is ours; lists nothing yet
        yield stage
        written = sorted(rel for p in stage.rglob("*") if p.is_file() and (rel := str(p.relative_to(stage))) != MARKER)
        _write_staging_marker(stage, {rel: sha256(stage / rel) for rel in written})  # what a later run may remove
        if hit := next((rel for rel in written if input_at(folder / rel)), None):
            raise _input_refusal(name, folder, hit)
        marker = read_marker(folder)
        foreign = _foreign(folder, written, marker, overwrite)
        if foreign:
            raise MediaError(folder, f"the run finished but {', '.join(foreign[:3])} there {'was' if len(foreign) == 1 else 'were'} not written by atelier, so nothing was saved",
                             _FIX)
        claims = list(claims)
        stale = [rel for rel in marker if rel not in written and matches(rel, claims) and _owned(folder, rel, marker)]
        hashes = read_marker(stage)
        # recorded before the move: a run stopped halfway leaves only files the marker calls ours, never strays
        files = {**marker, **{rel: hashes[rel] for rel in written}}
        _write_marker(folder, files)
        for rel in written:
            dest = folder / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / rel, dest)  # a link at dest is replaced itself, never written through
        for rel in stale:
            (folder / rel).unlink()
            _remove_empty_parents(folder, rel)
        if stale:
            _write_marker(folder, {rel: h for rel, h in files.items() if rel not in stale})
    finally:
        shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def publish_file(path: str | os.PathLike, name: str = "--out", overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block succeeds, it replaces ``path`` (only
    ours, or anything with ``overwrite``) and is recorded in the folder's marker."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}{path.suffix}")
    try:
        yield tmp
        check_file(path, name, overwrite)  # again: it may have appeared during the work
        os.replace(tmp, path)
        _write_marker(path.parent, {**read_marker(path.parent), path.name: sha256(path)})
    finally:
        if tmp.exists():
            tmp.unlink()


def move_file(src: str | os.PathLike, dest: str | os.PathLike, name: str = "--out", overwrite: bool = False) -> Path:
    """Move an output of ours, ``src``, to ``dest`` (a file there must be ours, or ``overwrite``): recorded in
    ``dest``'s folder marker and dropped from ``src``'s, so the result is written once, not copied."""
    src, dest = Path(src), Path(dest)
    check_file(dest, name, overwrite)  # before the move: a refusal leaves src where it was
    with publish_file(dest, name, overwrite) as tmp:
        os.replace(src, tmp)
    rest = read_marker(src.parent)
    if rest.pop(src.name, None) is not None:
        _write_marker(src.parent, rest)
    return dest


def _write_marker(folder: Path, files: dict[str, str]) -> None:
    marker = folder / MARKER
    if (marker.exists() or marker.is_symlink()) and not (marker.is_file() and not marker.is_symlink() and _is_marker(marker)):
        raise MediaError(marker, "exists and is not atelier's output record", _FIX)
    tmp = folder / f".{MARKER}.tmp-{os.getpid()}"
    try:
        tmp.write_text(json.dumps({"written_by": "atelier", "files": dict(sorted(files.items()))}, indent=1) + "\n")
        os.replace(tmp, marker)
    finally:
        if tmp.exists():
            tmp.unlink()


def _is_marker(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("written_by") == "atelier"


def _remove_empty_parents(folder: Path, rel: str) -> None:
    for parent in Path(rel).parents[:-1]:
        with contextlib.suppress(OSError):
            (folder / parent).rmdir()  # only if empty


def _write_staging_marker(stage: Path, files: dict[str, str]) -> None:
    tmp = stage / f".{MARKER}.tmp"
    tmp.write_text(json.dumps({"written_by": "atelier", "staging": True, "files": files}) + "\n")
    os.replace(tmp, stage / MARKER)


def _remove_stale_staging(folder: Path) -> None:
    """Staging folders of runs that died (their process is gone, ours by name and pid): only the files their marker
    lists, unchanged since (their hashes), then the marker and the folder once nothing else is left in it."""
    for stage in folder.glob(f"{STAGING}*"):
        pid = stage.name[len(STAGING):].split("-")[0]
        if not (stage.is_dir() and not stage.is_symlink() and _is_marker(stage / MARKER) and pid.isdigit() and not _alive(int(pid))):
            continue
        listed = read_marker(stage)
        for rel in listed:
            if _owned(stage, rel, listed):
                (stage / rel).unlink()
                _remove_empty_parents(stage, rel)
        if [p.name for p in stage.iterdir()] == [MARKER]:
            (stage / MARKER).unlink()
            with contextlib.suppress(OSError):
                stage.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def owned_files(folder: str | os.PathLike, claims: Iterable[str]) -> list[str]:
    """Our files in ``folder`` under ``claims`` (relative paths): what the last run there wrote."""
    claims = list(claims)
    return sorted(rel for rel in read_marker(Path(folder)) if matches(rel, claims))


def matches(rel: str, claims: Iterable[str]) -> bool:
    """Whether ``rel`` falls under one of the glob ``claims``."""
    return any(rel.startswith(c[:-2]) if c.endswith("/**") else fnmatch.fnmatchcase(rel, c) for c in claims)
