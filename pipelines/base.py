"""The Pipeline base, in the diffusers mould.

A pipeline owns named components (planners, renderers, trackers). ``save_pretrained(dir)`` writes
each component into ``dir/<name>/`` and an index, ``pipeline.json``, naming every component's class
and backend together with the pipeline's config; ``from_pretrained(dir)`` reads it back. Any
component can be overridden at load time with an instance or a directory, which is how a pipeline
switches from the builtin backend to a real checkpoint by configuration alone.

A component is any object with ``save_pretrained(dir)``, a classmethod ``from_pretrained(dir, **kw)``
and, optionally, ``to(device, dtype)`` and a ``backend`` attribute.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tqdm.auto import tqdm

from core.atomic import write_json_atomic
from core.device import select_device, select_dtype
from core.errors import AtelierError, InputError, MediaError

logger = logging.getLogger(__name__)

INDEX_FILE = "pipeline.json"
# Component classes are imported from these packages only: an index file cannot make us import
# arbitrary code.
TRUSTED_COMPONENT_PACKAGES = ("planners", "renderers", "trackers", "scorers", "transformers", "diffusers")


@dataclass
class PipelineConfig:
    """Scalar settings of a pipeline; subclasses add fields. Saved in ``pipeline.json``."""


class Pipeline:
    """Base class: components by name, save/load, device placement, progress bars, seeding.

    Subclasses set ``component_names`` (the components they need, in order) and ``config_class``,
    and implement ``__call__`` as ``check_inputs -> encode -> prepare -> loop -> decode``.
    """

    component_names: ClassVar[tuple[str, ...]] = ()
    optional_components: ClassVar[tuple[str, ...]] = ()
    config_class: ClassVar[type] = PipelineConfig

    def __init__(self, config: Any | None = None, **components: Any):
        if config is None:
            config = self.config_class()
        if not isinstance(config, self.config_class):
            raise InputError("config", type(config).__name__, f"pass a {self.config_class.__name__}")
        self.config = config
        self.components: dict[str, Any] = {}
        missing = [n for n in self.component_names if n not in components and n not in self.optional_components]
        if missing:
            raise InputError("components", sorted(components), f"{type(self).__name__} needs {missing}")
        unknown = [n for n in components if n not in self.component_names]
        if unknown:
            raise InputError("components", unknown, f"{type(self).__name__} takes only {list(self.component_names)}")
        self.register_components(**components)
        self._progress_config: dict[str, Any] = {}

    def register_components(self, **components: Any) -> None:
        for name, comp in components.items():
            self.components[name] = comp
            setattr(self, name, comp)

    # ---- persistence
    def save_pretrained(self, directory: str | Path) -> Path:
        """Write every component to ``directory/<name>/`` and the ``pipeline.json`` index."""
        directory = Path(directory)
        index: dict[str, Any] = {
            "_class_name": type(self).__name__,
            "_module": type(self).__module__,
            "config": dataclasses.asdict(self.config),
            "components": {},
        }
        for name, comp in self.components.items():
            if comp is None:
                index["components"][name] = None
                continue
            comp.save_pretrained(directory / name)
            cls = type(comp)
            index["components"][name] = {
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "backend": getattr(comp, "backend", "builtin"),
            }
        write_json_atomic(directory / INDEX_FILE, index)
        return directory

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        *,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        trust_remote_code: bool = False,
        config: Any | None = None,
        **overrides: Any,
    ):
        """Load a pipeline saved with ``save_pretrained``.

        ``overrides`` replace components by name: pass an instance, or a directory holding a
        checkpoint of the same component class (e.g. ``vlm="/models/Qwen2.5-VL-7B-Instruct"``).
        ``trust_remote_code`` is handed to transformers loaders and stays off unless you pass it.
        """
        directory = Path(directory)
        index_path = directory / INDEX_FILE
        if not index_path.is_file():
            raise MediaError(directory, f"no {INDEX_FILE} here", "pass a directory written by save_pretrained")
        index = json.loads(index_path.read_text())
        if index.get("_class_name") != cls.__name__ and cls is not Pipeline:
            raise MediaError(index_path, f"holds a {index.get('_class_name')}, not a {cls.__name__}")
        pipe_cls = cls if cls is not Pipeline else _import_pipeline_class(index)
        unknown = [n for n in overrides if n not in pipe_cls.component_names]
        if unknown:
            raise InputError("overrides", unknown, f"{pipe_cls.__name__} has components {list(pipe_cls.component_names)}")
        components = {}
        for name, spec in index["components"].items():
            override = overrides.get(name)
            if override is not None and not isinstance(override, (str, Path)):
                components[name] = override
                continue
            if spec is None:
                components[name] = None
                continue
            comp_cls = _import_component_class(spec["class"], index_path)
            source = Path(override) if override is not None else directory / name
            components[name] = _load_component(comp_cls, source, trust_remote_code)
        if config is None:
            config = pipe_cls.config_class(**index.get("config", {}))
        pipe = pipe_cls(config=config, **components)
        if device is not None or dtype is not None:
            pipe.to(device, dtype)
        return pipe

    # ---- placement
    def to(self, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None):
        """Move every component that supports it; ``None`` leaves that setting alone."""
        kw = {}
        if device is not None:
            kw["device"] = select_device(device)
        if dtype is not None:
            kw["dtype"] = select_dtype(dtype, kw.get("device"))
        for comp in self.components.values():
            if comp is not None and hasattr(comp, "to") and kw:
                comp.to(**kw)  # keyword form works for nn.Module and for our components alike
        return self

    @property
    def device(self) -> torch.device:
        for comp in self.components.values():
            dev = getattr(comp, "device", None)
            if isinstance(dev, torch.device):
                return dev
        return torch.device("cpu")

    # ---- progress
    def set_progress_bar_config(self, **kwargs: Any) -> None:
        """Options for tqdm, e.g. ``disable=True``; applied to every bar this pipeline shows."""
        self._progress_config = dict(kwargs)

    def progress_bar(self, iterable=None, total: int | None = None, desc: str | None = None):
        opts = {"desc": desc or type(self).__name__, "leave": False, **self._progress_config}
        return tqdm(iterable, total=total, **opts)

    def __repr__(self) -> str:
        comps = ", ".join(f"{n}={type(c).__name__}" for n, c in self.components.items())
        return f"{type(self).__name__}({comps}, config={self.config})"


def _import_component_class(path: str, index_path: Path) -> type:
    module_name, _, qualname = path.rpartition(".")
    if module_name.split(".")[0] not in TRUSTED_COMPONENT_PACKAGES:
        raise MediaError(index_path, f"component class {path!r} is outside the trusted packages {TRUSTED_COMPONENT_PACKAGES}")
    try:
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise MediaError(index_path, f"cannot import component class {path!r} ({e})") from None
    return obj


def _import_pipeline_class(index: dict) -> type:
    module = index.get("_module", "")
    if not module.startswith("pipelines."):
        raise AtelierError(f"pipeline module {module!r} is not an Atelier pipeline")
    return getattr(importlib.import_module(module), index["_class_name"])


def _load_component(comp_cls: type, source: Path, trust_remote_code: bool):
    kwargs = {}
    params = inspect.signature(comp_cls.from_pretrained).parameters
    if "trust_remote_code" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs["trust_remote_code"] = trust_remote_code
    return comp_cls.from_pretrained(source, **kwargs)


# --------------------------------------------------------------------------- outputs


@dataclass
class PipelineOutput:
    """Base of typed pipeline outputs. ``save(dir)`` writes each field in its natural format:

    - ``(T, H, W, 3)`` uint8 arrays -> ``<name>.mp4`` (H.264), ``(H, W, 3)`` -> ``<name>.png``;
    - ``(T, H, W)`` uint8 fields whose name contains "mask" -> ``<name>/00000.png ...`` (DAVIS palette);
    - other arrays -> ``<name>.npy``; everything else -> ``result.json``;
    - the config used -> ``config.json``.
    """

    config: dict | None = field(default=None, repr=False, kw_only=True)

    def save(self, directory: str | Path, fps: float | None = None) -> Path:
        from core.masks import write_mask_folder
        from core.video import write_video

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        scalars: dict[str, Any] = {}
        fps = fps or getattr(self, "fps", None) or 8.0
        for f in dataclasses.fields(self):
            if f.name == "config":
                continue
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 4 and value.shape[-1] == 3:
                write_video(directory / f"{f.name}.mp4", value, fps=fps)
            elif isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 3 and value.shape[-1] == 3:
                from PIL import Image

                from core.atomic import atomic_path

                with atomic_path(directory / f"{f.name}.png") as tmp:
                    Image.fromarray(value).save(tmp, format="PNG")
            elif isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 3 and "mask" in f.name:
                write_mask_folder(directory / f.name, value)
            elif isinstance(value, np.ndarray) and value.size > 4096:
                from core.atomic import atomic_path

                with atomic_path(directory / f"{f.name}.npy") as tmp:
                    np.save(tmp, value)
            else:
                scalars[f.name] = value
        write_json_atomic(directory / "result.json", scalars)
        if self.config is not None:
            write_json_atomic(directory / "config.json", self.config)
        return directory
