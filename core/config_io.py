"""Components that are nothing but their settings: a dataclass saved as ``config.json``.

``ConfigComponent`` gives such a dataclass ``save_pretrained`` / ``from_pretrained`` (the pipeline
component contract) with ``{"model": <MODEL_NAME>, <fields>}`` on disk, so the classic tracker, the
colour proposer and the like load by directory and refuse a folder of another kind.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any, ClassVar

from core import jsontext
from core.atomic import write_json_atomic
from core.errors import InputError


class ConfigComponent:
    """Mixin for a ``@dataclass`` whose init fields are its whole state; set ``MODEL_NAME``."""

    MODEL_NAME: ClassVar[str] = ""
    backend: ClassVar[str] = "builtin"  # settings only, no downloaded weights

    def config(self) -> dict:
        """The settings as a JSON-safe dict (what ``save_pretrained`` writes)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    def save_pretrained(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(directory / "config.json", {"model": self.MODEL_NAME, **self.config()})
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None, **overrides: Any):
        """Read a folder written by ``save_pretrained``; ``overrides`` replace saved settings.
        ``device`` and ``dtype`` are accepted (pipelines pass them) and ignored: these run on the CPU."""
        try:
            cfg = jsontext.loads((Path(directory) / "config.json").read_text())
        except (OSError, ValueError):
            raise InputError("directory", str(directory), f"no readable config.json; pass a folder written by {cls.__name__}.save_pretrained") from None
        if not isinstance(cfg, dict) or cfg.get("model") != cls.MODEL_NAME:
            raise InputError("directory", str(directory), f"its config.json is not a {cls.MODEL_NAME} config")
        known = {f.name for f in fields(cls) if f.init}
        unknown = sorted(set(cfg) - known - {"model"} | set(overrides) - known)
        if unknown:
            raise InputError("config", unknown, f"unknown settings; known ones are {sorted(known)}")
        return cls(**{**{k: v for k, v in cfg.items() if k != "model"}, **overrides})
