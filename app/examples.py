"""Example inputs for the web tabs: synthetic items the built-in models know, made on first use.

Every row is chosen by the rule in ``app.showcase`` (item ``i`` of the held-out TEST split, ``i = 0, 1, 2``;
row 0 is the item ``atelier demo``'s gallery shows) and ends with its ground truth, which the tab shows in an
extra "truth" column; row 0 also says whether the builtin models get it right (the verdict
``python -m app.showcase`` computed), in words. The app (not the pipelines) owns these because they come from
``worldgen``, which pipelines never see. Media are written once per process into a temporary folder, removed
when the process exits.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="atelier-examples-"))
    atexit.register(shutil.rmtree, folder, True)  # the server's examples go with its process, not later
    return folder


def _row(verb: str, it) -> list:
    """One example row in the order of the tab's inputs, then the truth cell."""
    from app.showcase import example_truth
    from pipelines.registry import get_app

    values = []
    for inp in get_app(verb).inputs:
        v = it.inputs.get(inp.name)
        values.append("\n".join(v) if inp.kind == "texts" and v is not None else v if v is not None else ("" if inp.kind == "text" else None))
    return values + [example_truth(verb, it)]


def _rows(verb: str) -> list[list]:
    from app.showcase import WEB_ROWS, item

    return [_row(verb, item(verb, i, _folder() / verb)) for i in range(WEB_ROWS)]


@functools.lru_cache(maxsize=1)
def gridprobe_examples() -> list[list]:
    """Held-out long-video questions (needle, counting, order), each with its 1,000-frame clip."""
    return _rows("ask")


@functools.lru_cache(maxsize=1)
def clear_examples() -> list[list]:
    """Held-out video reasoning segmentation clips (levels 1-3) with their queries."""
    return _rows("segment")


@functools.lru_cache(maxsize=1)
def generate_examples() -> list[list]:
    """Held-out t2v prompts (levels 1-3), then one held-out r2v prompt with its reference images; rows are
    (prompt, first-frame image, reference images, truth)."""
    from app.showcase import r2v_item

    return _rows("generate") + [_row("generate", r2v_item(0, _folder() / "r2v"))]


@functools.lru_cache(maxsize=1)
def edit_examples() -> list[list]:
    """Held-out worldgen edits (levels 1-3) at the built-in size."""
    return _rows("edit")


@functools.lru_cache(maxsize=1)
def motion_examples() -> list[list]:
    """Held-out worldgen motion edits: a stick figure doing one action, an instruction for another."""
    return _rows("motion")


@functools.lru_cache(maxsize=1)
def meme_examples() -> list[list]:
    """Held-out worldgen meme scenes as template images (64x64 stills)."""
    return _rows("meme")


@functools.lru_cache(maxsize=1)
def latent_reasoning_examples() -> list[list]:
    """Held-out worldgen ``spatial`` scenes (levels 1-3: 12-48 small shapes at 512x512) with their questions."""
    return _rows("reason")


EXAMPLES: dict[str, Callable[[], list[list]]] = {"ask": gridprobe_examples, "segment": clear_examples,
                                                 "generate": generate_examples, "edit": edit_examples, "motion": motion_examples,
                                                 "meme": meme_examples, "reason": latent_reasoning_examples}
