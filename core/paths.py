"""Output paths checked before any compute: a run that would fail to write its result fails first.

A folder made here for an output is recorded (``made_folders``): a run that then fails or is interrupted
removes each one still empty (``remove_made_folders``), so it leaves nothing behind that it created.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from core.errors import InputError

_MADE: list[Path] = []  # output folders this process made and has not yet written into for good


def made_folders() -> list[Path]:
    """The output folders made by ``check_output_dir`` since the last ``remove_made_folders`` / ``keep_made_folders``."""
    return list(_MADE)


def keep_made_folders() -> None:
    """The run finished: the folders it made are the user's now."""
    _MADE.clear()


def remove_made_folders() -> None:
    """The run failed or was stopped: remove each folder it made that is still empty, deepest first."""
    for folder in sorted(_MADE, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty: anything written there stays
    _MADE.clear()


def _too_long(path: Path) -> str | None:
    try:
        name_max = os.pathconf(_existing_ancestor(path), "PC_NAME_MAX")
        path_max = os.pathconf(_existing_ancestor(path), "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):
        name_max, path_max = 255, 4096
    if len(os.fsencode(str(path.absolute()))) >= path_max:
        return f"the path is longer than this system's limit of {path_max} bytes"
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            return f"a folder or file name is longer than this system's limit of {name_max} bytes"
    return None


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_output_dir(path: str | os.PathLike, name: str = "--out") -> Path:
    """Make sure ``path`` is (or can become) a writable folder; create it and return it.

    A file in the way, a read-only or unwritable place, or an over-long name is an ``InputError``
    naming ``name`` and the fix, raised before the caller starts its work.
    """
    if path is None or not str(path).strip():
        raise InputError(name, path, "pass an output folder")
    path = Path(path).expanduser()
    problem = _too_long(path)
    if problem:
        raise InputError(name, str(path), f"{problem}; choose a shorter path")
    if path.exists() and not path.is_dir():
        raise InputError(name, str(path), "is a file, not a folder; choose a folder name")
    blocker = next((p for p in path.absolute().parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise InputError(name, str(path), f"{blocker} is a file, so no folder can be made below it")
    missing = [p for p in (path.absolute(), *path.absolute().parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        _MADE.extend(p for p in missing if p not in _MADE)
        # an unnamed file (O_TMPFILE on Linux): no name appears in the user's folder, so a signal cannot leave one behind
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise InputError(name, str(path), f"cannot write there ({e.strerror or e}); choose a folder you can write to") from None
    return path


def check_output_file(path: str | os.PathLike, name: str = "--out", suffixes: tuple[str, ...] = ()) -> Path:
    """Make sure a file can be written at ``path`` (its folder exists or can be made, it is not a
    folder); ``suffixes`` lists accepted extensions. Returns the path."""
    if path is None or not str(path).strip():
        raise InputError(name, path, "pass an output file name")
    path = Path(path).expanduser()
    if suffixes and path.suffix.lower() not in suffixes:
        raise InputError(name, str(path), f"use a file name ending in {' or '.join(suffixes)}")
    if path.is_dir():
        raise InputError(name, str(path), "is a folder; pass a file name inside it")
    check_output_dir(path.parent if str(path.parent) else ".", name)
    problem = _too_long(path)
    if problem:
        raise InputError(name, str(path), f"{problem}; choose a shorter name")
    return path
