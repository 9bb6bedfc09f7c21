"""Typed errors. Every message names the offending argument or file, shows the bad value and says how to fix it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class AtelierError(Exception):
    """Base class of every error Atelier raises on purpose."""


class InputError(AtelierError, ValueError):
    """A bad argument. ``InputError("size", (0, 5), "use positive integers")``."""

    def __init__(self, name: str, value: Any, hint: str = ""):
        self.name, self.value, self.hint = name, value, hint
        msg = f"invalid {name}={shown(value)}"
        super().__init__(f"{msg}: {hint}" if hint else msg)


MAX_SHOWN = 200  # characters of a rejected value an error repeats: a million-item list is not echoed (5 MB in a log)


def shown(value: Any) -> str:
    """``repr(value)``, cut to ``MAX_SHOWN`` characters with the length said."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}... ({len(text):,} characters)"


class MediaError(AtelierError):
    """A media file that cannot be used. Carries the path so batch logs point at the culprit."""

    def __init__(self, path: Any, problem: str, hint: str = ""):
        self.path, self.problem, self.hint = str(path), problem, hint
        super().__init__(f"{self.path}: {problem}" + (f" ({hint})" if hint else ""))


class VideoOpenError(MediaError):
    """The file is missing, not a video, or its container is unreadable (e.g. truncated)."""


class EmptyVideoError(VideoOpenError):
    """The file or folder holds no frames (a zero-frame export, or a file cut before its first frame)."""


class VideoDecodeError(MediaError):
    """A frame could not be decoded (corrupt or truncated stream)."""


class FrameIndexError(AtelierError, IndexError):
    """A frame index outside ``[0, len(video))``."""

    def __init__(self, source: Any, index: int, length: int):
        self.source, self.index, self.length = str(source), index, length
        super().__init__(
            f"{self.source}: frame index {index} is out of range; the video has {length} frames, "
            f"valid indices are 0..{length - 1} (negative indices count from the end)"
        )


class MissingDependencyError(AtelierError, ImportError):
    """An optional dependency is not installed; the message names the pip extra."""

    def __init__(self, package: str, extra: str, purpose: str = ""):
        self.package, self.extra = package, extra
        why = f" to {purpose}" if purpose else ""
        super().__init__(f"{package} is needed{why}: pip install 'atelier[{extra}]'")


# The one message for a checkpoint refused because it ships code: the user's flag is the only way to allow it.
REMOTE_CODE_HINT = ("this checkpoint ships its own Python code, which is not run: pass --trust-remote-code (in Python, the "
                    "trust_remote_code argument) only if you trust that code, or pass another checkpoint")


def refused_remote_code(error: BaseException) -> bool:
    """Whether a transformers / diffusers loading error is its refusal to run a checkpoint's own code."""
    text = str(error)
    return "trust_remote_code" in text or "custom code" in text


@contextlib.contextmanager
def loading_checkpoint(name: str, path: Any) -> Iterator[None]:
    """Loading the checkpoint ``path`` (given as ``name``) with a library: its refusal to run the folder's own code
    becomes the one ``InputError`` that says how to allow it, and any other failure to read the folder an
    ``InputError`` naming it, never an internal error."""
    try:
        yield
    except (ValueError, OSError, KeyError) as e:
        if refused_remote_code(e):
            raise InputError(name, str(path), REMOTE_CODE_HINT) from None
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise InputError(name, str(path), f"it cannot be loaded as a checkpoint ({first}); pass a Hugging Face checkpoint folder") from None
