"""Hub ids in model slots: ``owner/name`` (or ``owner/name@revision``) becomes the snapshot folder it names.

    folder = resolve_model("tracker", "facebook/sam2.1-hiera-tiny")          # the cache's snapshot folder
    folder = resolve_model("pipeline", "ByteDance/Bernini-R-Diffusers", revision="main")

Every slot of every verb goes through this (``ComponentSpec.load`` and ``Pipeline.from_pretrained``), so a hub id is
identical to passing its snapshot folder: the same loader reads the same files. ``huggingface_hub`` finds it: its
cache first; a download only when the hub is online here (``HF_HUB_OFFLINE`` unset). Offline and absent, one error
names the id, its size when ``weights/catalog.json`` knows it, and the command that downloads it.

What is *not* a hub id: an existing path, a keyword (``builtin``, ``classic``), text with a leading ``.``, ``/``
or ``~``, or anything but exactly one ``/`` between two names of the hub's characters.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from core.errors import InputError

# the hub's repo-name rule: letters, digits, '-', '_', '.', at most 96 characters per part
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
HUB_ID = re.compile(rf"^(?P<repo>{_PART}/{_PART})(?:@(?P<revision>[A-Za-z0-9._/-]{{1,128}}))?$")
CATALOG = Path(__file__).resolve().parents[1] / "weights" / "catalog.json"


def parse_hub_id(text: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision or None)`` when ``text`` reads as a hub id, else None."""
    match = HUB_ID.match(text.strip()) if isinstance(text, str) else None
    return (match["repo"], match["revision"]) if match else None


def hub_cache() -> str:
    """The Hugging Face cache folder, read when called (so a changed ``HF_HUB_CACHE`` / ``HF_HOME`` counts)."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return constants.HF_HUB_CACHE


def hub_offline() -> bool:
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE")
    return constants.HF_HUB_OFFLINE if value is None else value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def catalog_size(repo_id: str) -> str | None:
    """The download size ``weights/catalog.json`` states for ``repo_id`` (e.g. "about 17 GB"), or None."""
    try:
        catalog = json.loads(CATALOG.read_text())
    except (OSError, ValueError):
        return None
    for entries in catalog.get("pipelines", {}).values():
        for entry in entries:
            if isinstance(entry, dict) and entry.get("id") == repo_id and entry.get("size"):
                return str(entry["size"])
    return None


def resolve_model(name: str, source: str | Path, revision: str | None = None) -> str:
    """``source`` unchanged unless it is a hub id that is not a local path; then its snapshot folder (a ``@revision``
    in the id wins over ``revision``). ``name`` is the slot, for the error."""
    text = str(source)
    if isinstance(source, Path) or Path(text).expanduser().exists():
        return text
    parsed = parse_hub_id(text)
    if parsed is None:
        return text  # a keyword or a missing path: the slot's loader says what it takes
    repo_id, pinned = parsed
    revision = pinned or revision
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    offline = hub_offline()
    try:
        return snapshot_download(repo_id, revision=revision, cache_dir=hub_cache(), local_files_only=offline)
    except (RepositoryNotFoundError, RevisionNotFoundError) as e:
        raise InputError(name, text, f"the hub has no such {'revision' if isinstance(e, RevisionNotFoundError) else 'repository'} "
                                     "(check the spelling, or log in with `hf auth login` for a gated one)") from None
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        size = catalog_size(repo_id)
        command = f"hf download {repo_id}" + (f" --revision {revision}" if revision else "")
        where = "the hub is offline here (HF_HUB_OFFLINE)" if offline else f"it could not be downloaded ({type(e).__name__})"
        raise InputError(name, text, f"no folder of that name here, not in the Hugging Face cache ({hub_cache()}), and {where}; "
                                     "download it first"
                                     + (f" ({size})" if size else "") + f": `{command}`, then pass the id again "
                                     "(or the folder it prints)") from None


__all__ = ["HUB_ID", "catalog_size", "hub_cache", "hub_offline", "parse_hub_id", "resolve_model"]
