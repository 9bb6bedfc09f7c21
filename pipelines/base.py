"""The Pipeline base, in the diffusers mould.

A pipeline owns named, typed components (planners, renderers, trackers): ``component_specs`` maps each
name to a ``ComponentSpec`` stating the protocol the component must implement and how a checkpoint
directory for it is loaded. ``save_pretrained(dir)`` writes each component into ``dir/<name>/`` and
an index, ``pipeline.json`` (format version, the pipeline class, its config, each component's class
and backend); ``from_pretrained(dir)`` reads it back. Any component can be overridden at load time
with an instance or a directory, which is how a pipeline switches from the builtin backend to a
real checkpoint by configuration alone.

Every ``__call__`` follows one contract: ``generator=`` (a ``torch.Generator`` or an int seed) is
the only source of randomness; pipelines that loop call ``callback_on_step_end(pipe, step, info)``
after each step and stop at the next step once ``interrupt()`` was called; outputs are dataclasses
whose fields declare how they are saved (``output_field(save=...)``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import logging
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tqdm.auto import tqdm

from core import jsontext
from core.atomic import atomic_path, json_safe, write_json_atomic
from core.device import select_device, select_dtype
from core.errors import AtelierError, InputError
# the config side lives in a torch-free module (the CLI's parsers and argument checks); re-exported here
from pipelines.config import LOAD_ERRORS, ComponentSpec, PipelineConfig, check_range, check_seed, loading_errors, setting  # noqa: F401

logger = logging.getLogger(__name__)

INDEX_FILE = "pipeline.json"
FORMAT_VERSION = 1
INDEX_KEYS = ("format_version", "_class_name", "_module", "config", "components")
# Component classes are imported from these packages only: an index file cannot make us import
# arbitrary code.
TRUSTED_COMPONENT_PACKAGES = ("planners", "renderers", "trackers", "scorers", "transformers", "diffusers")
HF_PACKAGES = ("transformers", "diffusers")


class PipelineInterrupted(AtelierError):
    """``Pipeline.interrupt()`` stopped a call before it finished."""


def protocol_methods(protocol: type) -> list[str]:
    """The public callables a Protocol (or class) declares, own and inherited."""
    names: list[str] = []
    for klass in protocol.__mro__:
        if klass in (object, typing.Protocol, typing.Generic):
            continue
        names += [n for n, v in vars(klass).items() if not n.startswith("_") and callable(v) and n not in names]
    return names


def check_component(name: str, comp: Any, spec: ComponentSpec) -> None:
    """Raise ``InputError`` when ``comp`` does not implement ``spec.protocol``, naming what it lacks."""
    if spec.protocol is None:
        return
    missing = [m for m in protocol_methods(spec.protocol) if not callable(getattr(comp, m, None))]
    if missing:
        raise InputError(name, type(comp).__name__,
                         f"a {spec.protocol.__name__} is needed; {type(comp).__name__} lacks {missing}")


def component_backend(comp: Any) -> str:
    """``hf`` for transformers / diffusers classes and wrappers that say so, ``builtin`` for the
    shipped models, else the component's own ``backend`` attribute or ``custom``."""
    root = type(comp).__module__.split(".")[0]
    if root in HF_PACKAGES:
        return "hf"
    declared = getattr(comp, "backend", None)
    if isinstance(declared, str) and declared:
        return declared
    return "builtin" if type(comp).__module__.startswith("planners.builtin") else "custom"


def make_generator(generator: torch.Generator | int | None, device: torch.device | str = "cpu") -> torch.Generator | None:
    """The caller's randomness as a ``torch.Generator``: pass one through, seed a new one from an int."""
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    check_seed(generator)
    return torch.Generator(device=device).manual_seed(int(generator))


def generator_and_seed(generator: torch.Generator | int | None) -> tuple[torch.Generator, int]:
    """The generator a call draws from and the seed it reports: the caller's (a seed or a ``torch.Generator``), or
    a fresh one from a random seed short enough to read back and to survive JSON in a browser."""
    gen = make_generator(generator)
    if gen is None:
        seed = int(torch.randint(0, 2**31, (1,)).item())
        return torch.Generator().manual_seed(seed), seed
    return gen, int(generator) if isinstance(generator, (int, np.integer)) else int(gen.initial_seed())


class Pipeline:
    """Base class: typed components by name, save/load, device placement, progress, the call contract.

    Subclasses set ``component_specs`` (name -> ``ComponentSpec``, in order) and ``config_class``, and
    implement ``__call__`` as ``check_inputs -> encode -> prepare -> loop -> decode``.
    """

    component_specs: ClassVar[dict[str, ComponentSpec]] = {}
    config_class: ClassVar[type] = PipelineConfig
    # diffusers' per-call names -> this pipeline's config fields (``num_inference_steps`` -> ``steps``)
    call_aliases: ClassVar[dict[str, str]] = {"num_inference_steps": "steps"}
    # diffusers' name: the tensors a step callback may read and hand back (``callback_on_step_end_tensor_inputs``)
    _callback_tensor_inputs: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "__call__" in cls.__dict__:
            cls.__call__ = _with_call_settings(cls.__dict__["__call__"])

    def __init__(self, config: Any | None = None, **components: Any):
        if config is None:
            config = self.config_class()
        if not isinstance(config, self.config_class):
            raise InputError("config", type(config).__name__, f"pass a {self.config_class.__name__}")
        self.config = config
        specs = type(self).component_specs
        unknown = [n for n in components if n not in specs]
        if unknown:
            raise InputError("components", unknown, f"{type(self).__name__} takes only {list(specs)}")
        missing = [n for n, s in specs.items() if components.get(n) is None and not s.optional]
        if missing:
            raise InputError("components", sorted(n for n, c in components.items() if c is not None),
                             f"{type(self).__name__} needs {missing}")
        for name, comp in components.items():
            if comp is not None:
                check_component(name, comp, specs[name])
        self.components: dict[str, Any] = {n: components.get(n) for n in specs}
        for name, comp in self.components.items():
            setattr(self, name, comp)
        self._progress_config: dict[str, Any] = {}
        self._interrupted = False
        self._tensor_inputs: tuple[str, ...] = ()

    @classmethod
    def output_class(cls) -> type:
        """The output dataclass ``__call__`` returns, read from its annotation (its ``claims()`` say which
        files a save will write, checked before the run)."""
        import sys

        hint = inspect.signature(cls.__call__).return_annotation
        return getattr(sys.modules[cls.__module__], hint) if isinstance(hint, str) else hint

    @classmethod
    def component_names(cls) -> tuple[str, ...]:
        return tuple(cls.component_specs)

    # ---- persistence
    def save_pretrained(self, directory: str | Path) -> Path:
        """Write every component to ``directory/<name>/`` and the ``pipeline.json`` index."""
        directory = Path(directory)
        index: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
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
            index["components"][name] = {"class": f"{cls.__module__}.{cls.__qualname__}", "backend": component_backend(comp)}
        write_json_atomic(directory / INDEX_FILE, index)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, *, device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, trust_remote_code: bool = False,
                        config: Any | None = None, revision: str | None = None, **overrides: Any):
        """Load a pipeline saved with ``save_pretrained`` (its folder, or a hub id: the snapshot folder at ``revision``).

        ``overrides`` replace components by name: pass an instance, or a directory / cache id that
        the slot's loader understands (e.g. ``selector="/models/Qwen2.5-VL-7B-Instruct"`` on a saved
        builtin pipeline); an override for an optional component the index leaves empty loads it.
        ``trust_remote_code`` is handed to the loaders and stays off unless you pass it.
        """
        from core.hub import resolve_model

        index, index_path = read_index(resolve_model("pipeline", directory, revision))
        pipe_cls = cls if cls is not Pipeline else _import_pipeline_class(index, index_path)
        if index["_class_name"] != pipe_cls.__name__:
            raise InputError(f"{index_path} _class_name", index["_class_name"],
                             f"this directory holds a {index['_class_name']}; load it with that class, not {pipe_cls.__name__}")
        specs = pipe_cls.component_specs
        unknown = [n for n in overrides if n not in specs]
        if unknown:
            raise InputError("overrides", unknown, f"{pipe_cls.__name__} has components {list(specs)}")
        saved = index["components"]
        if not isinstance(saved, dict):
            raise InputError(f"{index_path} components", saved, "expected an object naming each component; re-save the pipeline")
        strange = [n for n in saved if n not in specs]
        if strange:
            raise InputError(f"{index_path} components", strange, f"{pipe_cls.__name__} has components {list(specs)}; remove or rename these keys")
        components = {}
        for name, spec in specs.items():
            override = overrides.get(name)
            if override is not None and not isinstance(override, (str, Path)):
                components[name] = override
            elif override is not None:
                components[name] = _load_override(name, spec, override, saved.get(name), index_path, device, dtype, trust_remote_code,
                                                  revision)
            elif name not in saved:
                raise InputError(f"{index_path} components.{name}", None, f"the index does not list {name!r}; re-save the pipeline or pass {name}=...")
            elif saved[name] is None:
                components[name] = None
            else:
                comp_cls = _component_class(saved[name], f"{index_path} components.{name}", spec)
                components[name] = _load_with(comp_cls, index_path.parent / name, trust_remote_code, name)
        if config is None:
            config = config_from_dict(pipe_cls.config_class, index["config"], f"{index_path} config")
        pipe = pipe_cls(config=config, **components)
        if device is not None or dtype is not None:
            pipe.to(device, dtype)
        return pipe

    @classmethod
    def build(cls, pipeline: str | Path | None = None, *, device: str | None = None, dtype: str | None = None,
              trust_remote_code: bool = False, components: dict[str, Any] | None = None,
              config: dict[str, Any] | None = None, defaults: dict[str, Any] | None = None, revision: str | None = None):
        """A pipeline from an optional saved directory, component overrides and config changes.

        ``revision``: the hub revision of every hub id given without its own ``@revision``.
        ``components``: name -> instance, directory or cache id (None keeps the saved one or, without
        ``pipeline``, ``defaults``). ``config``: field -> value (None keeps). Used by the CLI, the
        batch runner, the web app and the benchmarks, so all four load models the same way.
        """
        if device is not None:
            select_device(device)  # bad names and missing CUDA fail before anything loads
        if dtype is not None:
            select_dtype(dtype)
        if defaults is None and pipeline is None and not components:  # XPipeline.build(): the CLI's default models
            defaults = _registered_defaults(cls)
        components = {k: v for k, v in (components or {}).items() if v is not None}
        unknown = [n for n in components if n not in cls.component_specs]
        if unknown:
            raise InputError("components", unknown, f"{cls.__name__} has components {list(cls.component_specs)}")
        if pipeline is not None:
            pipe = _cached_pipeline(cls, str(pipeline), device, dtype, trust_remote_code, revision)
            chosen = {n: components.get(n, pipe.components[n]) for n in cls.component_specs}
            base = pipe.config
        else:
            chosen = {n: components.get(n, (defaults or {}).get(n)) for n in cls.component_specs}
            base = cls.config_class()
        for name, value in chosen.items():
            if isinstance(value, (str, Path)):
                chosen[name] = _cached_component(cls, name, str(value), device, dtype, trust_remote_code, revision)
        changes = {k: v for k, v in (config or {}).items() if v is not None}
        known = {f.name for f in dataclasses.fields(cls.config_class)}
        bad = sorted(set(changes) - known)
        if bad:
            raise InputError("settings", bad, f"{cls.__name__} settings are {sorted(known)}")
        return cls(dataclasses.replace(base, **changes), **chosen)

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

    # ---- progress, steps, interruption
    def set_progress_bar_config(self, **kwargs: Any) -> None:
        """Options for tqdm, e.g. ``disable=True``; applied to every bar this pipeline shows."""
        self._progress_config = dict(kwargs)

    def progress_bar(self, iterable=None, total: int | None = None, desc: str | None = None):
        opts = {"desc": desc or type(self).__name__, "leave": False, **self._progress_config}
        return tqdm(iterable, total=total, **opts)

    def interrupt(self) -> None:
        """Stop the running call at its next step (from a callback or another thread); it raises
        ``PipelineInterrupted``. The next call starts afresh."""
        self._interrupted = True

    def _begin_call(self) -> None:
        self._interrupted = False

    def step_end(self, callback: Callable | None, step: int, info: dict[str, Any]) -> dict[str, Any]:
        """End of loop step ``step``: call ``callback(pipe, step, info)``, or diffusers' four-argument form
        ``callback(pipe, step, timestep, callback_kwargs)`` (``timestep`` from ``info``, None where a loop has
        none; ``callback_kwargs`` is ``info``), then honour ``interrupt()``.

        Returns what the loop takes back: as in diffusers, the entries of the dict the callback returns that
        the call named in ``callback_on_step_end_tensor_inputs`` (e.g. ``{"latents": x}``); else ``{}``."""
        back: dict[str, Any] = {}
        if callback is not None:
            if _positional_arity(callback) >= 4:
                result = callback(self, step, info.get("timestep"), info)
            else:
                result = callback(self, step, info)
            if isinstance(result, dict):
                back = {k: result[k] for k in self._tensor_inputs if k in result and k in info}
        if self._interrupted:
            self._interrupted = False
            raise PipelineInterrupted(f"{type(self).__name__} interrupted after step {step}")
        return back

    def __repr__(self) -> str:
        comps = ", ".join(f"{n}={type(c).__name__ if c is not None else None}" for n, c in self.components.items())
        return f"{type(self).__name__}({comps}, config={self.config})"


def _positional_arity(fn: Callable) -> int:
    """How many positional arguments ``fn`` takes (a ``*args`` counts as many)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 3
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 99
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def _with_call_settings(call: Callable) -> Callable:
    """``pipe(..., steps=4, num_inference_steps=4, height=64)``: keyword arguments naming config fields (or
    diffusers' aliases) override the config for this call only, checked like the config; the call's own
    parameters keep their meaning."""
    import functools

    own = set(inspect.signature(call).parameters)

    @functools.wraps(call)
    def wrapped(self, *args: Any, **kwargs: Any):
        if "callback_on_step_end_tensor_inputs" in kwargs and "callback_on_step_end_tensor_inputs" not in own:
            names = _check_tensor_inputs(type(self), kwargs.pop("callback_on_step_end_tensor_inputs"))
            saved_inputs, self._tensor_inputs = self._tensor_inputs, names
            try:
                return wrapped(self, *args, **kwargs)
            finally:
                self._tensor_inputs = saved_inputs
        fields = {f.name for f in dataclasses.fields(self.config)}
        settings = {}
        for key in [k for k in kwargs if k not in own]:
            name = self.call_aliases.get(key, key)
            if name not in fields:
                continue  # left for the call to refuse as it always has
            if name in settings:
                raise InputError(key, kwargs[key], f"{name!r} was given twice (it is also called {key!r})")
            settings[name] = kwargs.pop(key)
        if not settings:
            return call(self, *args, **kwargs)
        saved = self.config
        self.config = dataclasses.replace(saved, **settings)  # the config's own checks run here
        try:
            return call(self, *args, **kwargs)
        finally:
            self.config = saved

    return wrapped


def _check_tensor_inputs(cls: type, names: Any) -> tuple[str, ...]:
    """diffusers' ``callback_on_step_end_tensor_inputs``: a list of names this pipeline's loop can hand over."""
    allowed = cls._callback_tensor_inputs
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise InputError("callback_on_step_end_tensor_inputs", names, f"pass a list of names, e.g. {list(allowed) or []}")
    bad = [n for n in names if n not in allowed]
    if bad:
        has = f"it hands over {list(allowed)}" if allowed else "its loop has no tensors to hand over; pass []"
        raise InputError("callback_on_step_end_tensor_inputs", bad, f"{cls.__name__} cannot hand a callback {bad}: {has}")
    return tuple(names)


def _registered_defaults(cls: type) -> dict[str, Any] | None:
    """The component defaults of the registered app that runs ``cls`` (what its CLI verb loads)."""
    from pipelines.registry import apps

    name = f"{cls.__module__}:{cls.__name__}"
    return next((dict(app.defaults) for app in apps().values() if app.pipeline == name), None)


# --------------------------------------------------------------------------- index reading


def read_index(directory: str | Path) -> tuple[dict, Path]:
    """``pipeline.json`` as a dict, every problem an ``InputError`` naming the key and the fix."""
    directory = Path(directory)
    index_path = directory / INDEX_FILE
    if not index_path.is_file():
        what = f"no {INDEX_FILE} here" if directory.expanduser().is_dir() else "no such folder"
        raise InputError("pipeline", str(directory), f"{what}; pass a directory written by save_pretrained or a hub id "
                                                     "(owner/name; the releases each verb loads: `atelier info`)")
    try:
        index = jsontext.loads(index_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(str(index_path), "unreadable JSON", f"the file is damaged or truncated ({e}); re-save the pipeline") from None
    except OSError as e:
        raise InputError(str(index_path), "unreadable", f"{e.strerror or e}; check its permissions") from None
    if not isinstance(index, dict):
        raise InputError(str(index_path), type(index).__name__, "expected a JSON object; re-save the pipeline")
    version = index.get("format_version")
    if version is None:
        raise InputError(f"{index_path} format_version", None, f"missing; an index written by this version has format_version {FORMAT_VERSION}: re-save the pipeline")
    if version != FORMAT_VERSION:
        raise InputError(f"{index_path} format_version", version, f"this Atelier reads format {FORMAT_VERSION}; re-save the pipeline with it")
    for key in INDEX_KEYS:
        if key not in index:
            raise InputError(f"{index_path} {key}", None, f"missing key; an index has {list(INDEX_KEYS)}")
    unknown = sorted(set(index) - set(INDEX_KEYS))
    if unknown:
        raise InputError(f"{index_path}", unknown, f"unknown keys; an index has only {list(INDEX_KEYS)}")
    if not isinstance(index["config"], dict):
        raise InputError(f"{index_path} config", index["config"], "expected an object of settings")
    return index, index_path


def config_from_dict(config_class: type, values: dict, where: str):
    """Build ``config_class`` from saved settings: renamed keys name their new name, unknown keys and
    missing required ones are ``InputError``s; a bad value is the config's own ``InputError``."""
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    renamed = getattr(config_class, "renamed", {})
    for key in values:
        if key in renamed:
            raise InputError(f"{where}.{key}", values[key], f"this setting is now called {renamed[key]!r}; rename the key")
        if key not in fields:
            raise InputError(f"{where}.{key}", values[key], f"unknown setting; {config_class.__name__} has {sorted(fields)}")
    required = [n for n, f in fields.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    absent = [n for n in required if n not in values]
    if absent:
        raise InputError(f"{where}", absent, "required settings are missing; add them to the index")
    try:
        return config_class(**values)
    except TypeError as e:
        raise InputError(where, values, f"settings do not fit {config_class.__name__} ({e})") from None
    except InputError as e:
        if e.name not in fields:
            raise
        # name the file and the key, so the user knows which entry of the index to fix
        raise InputError(f"{where}.{e.name}", e.value, e.hint) from None


def _import_object(path: str, where: str) -> Any:
    if not isinstance(path, str) or "." not in path:
        raise InputError(where, path, "expected a dotted class path such as 'planners.hf.HFVisionLanguageModel'")
    if path.split(".")[0] not in TRUSTED_COMPONENT_PACKAGES:
        raise InputError(where, path, f"class paths must lie in the trusted packages {TRUSTED_COMPONENT_PACKAGES}")
    module_name, _, qualname = path.rpartition(".")
    try:
        obj = importlib.import_module(module_name)
    except ImportError:
        try:  # the path may name a module itself
            return importlib.import_module(path)
        except ImportError as e:
            raise InputError(where, path, f"cannot import it ({e}); is the package installed?") from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise InputError(where, path, f"{module_name} has no {part!r}; the class may have been renamed: re-save the pipeline")
        obj = getattr(obj, part)
    return obj


def _component_class(entry: Any, where: str, spec: ComponentSpec) -> type:
    """The component class an index entry names, checked: a trusted, concrete class that can load
    itself and implements the slot's protocol (never a module or a generic Auto* factory)."""
    if not isinstance(entry, dict) or "class" not in entry:
        raise InputError(where, entry, "expected {\"class\": ..., \"backend\": ...}; re-save the pipeline")
    unknown = sorted(set(entry) - {"class", "backend"})
    if unknown:
        raise InputError(where, unknown, "unknown keys; a component entry has 'class' and 'backend'")
    obj = _import_object(entry["class"], f"{where}.class")
    if not inspect.isclass(obj):
        raise InputError(f"{where}.class", entry["class"], "names a module or function, not a component class")
    if obj.__module__.split(".")[0] in HF_PACKAGES and obj.__name__.startswith("Auto"):
        raise InputError(f"{where}.class", entry["class"], "a generic Auto* factory is not a component; name the concrete class")
    lacking = [m for m in ("from_pretrained", "save_pretrained") if not callable(getattr(obj, m, None))]
    if spec.protocol is not None:
        lacking += [m for m in protocol_methods(spec.protocol) if not callable(getattr(obj, m, None))]
    if lacking:
        raise InputError(f"{where}.class", entry["class"], f"not a component for this slot: it lacks {lacking}")
    return obj


def _import_pipeline_class(index: dict, index_path: Path) -> type:
    module = index.get("_module", "")
    if not isinstance(module, str) or not module.startswith("pipelines."):
        raise InputError(f"{index_path} _module", module, "not an Atelier pipeline module (pipelines.*)")
    try:
        cls = getattr(importlib.import_module(module), index["_class_name"])
    except (ImportError, AttributeError, TypeError):
        raise InputError(f"{index_path} _class_name", index.get("_class_name"), f"no such pipeline in {module}") from None
    if not (inspect.isclass(cls) and issubclass(cls, Pipeline)):
        raise InputError(f"{index_path} _class_name", index.get("_class_name"), "not a Pipeline class")
    return cls


def _load_with(comp_cls: type, source: Path, trust_remote_code: bool, name: str = "component", **kwargs: Any):
    params = inspect.signature(comp_cls.from_pretrained).parameters
    # transformers / diffusers take it through **kwargs; our components' **kwargs are their settings
    hf_kwargs = comp_cls.__module__.split(".")[0] in ("transformers", "diffusers") and any(p.kind is p.VAR_KEYWORD for p in params.values())
    if "trust_remote_code" in params or hf_kwargs:
        kwargs["trust_remote_code"] = trust_remote_code
    with loading_errors(name, source, f"{comp_cls.__module__}.{comp_cls.__qualname__}"):
        return comp_cls.from_pretrained(source, **kwargs)


def _load_override(name: str, spec: ComponentSpec, source: str | Path, entry: Any, index_path: Path,
                   device, dtype, trust_remote_code: bool, revision: str | None = None):
    """An override given as a path or hub id: the slot's loader decides what the directory holds; without a
    loader, the class the index recorded loads it."""
    if spec.loader is not None:
        return spec.load(name, source, revision, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
    if entry is None:
        raise InputError(name, str(source), "this slot has no loader and the index names no class for it; pass an instance")
    from core.hub import resolve_model

    comp_cls = _component_class(entry, f"{index_path} components.{name}", spec)
    return _load_with(comp_cls, Path(resolve_model(name, source, revision)), trust_remote_code, name)


_PIPELINE_CACHE: dict[tuple, Pipeline] = {}
_COMPONENT_CACHE: dict[tuple, Any] = {}
_CACHE_SIZE = 4


def _remember(cache: dict, key: tuple, make: Callable[[], Any]) -> Any:
    """Keep the last few loaded pipelines / components: a batch or a web session loads each once."""
    if key not in cache:
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = make()
    return cache[key]


def clear_caches() -> None:
    """Forget the pipelines and components ``Pipeline.build`` loaded (tests; freeing memory)."""
    _PIPELINE_CACHE.clear()
    _COMPONENT_CACHE.clear()


def _cached_pipeline(cls: type, directory: str, device, dtype, trust_remote_code: bool, revision: str | None = None):
    return _remember(_PIPELINE_CACHE, (cls, directory, device, dtype, trust_remote_code, revision),
                     lambda: cls.from_pretrained(directory, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                                                 revision=revision))


def _cached_component(cls: type, name: str, source: str, device, dtype, trust_remote_code: bool, revision: str | None = None):
    spec = cls.component_specs[name]
    return _remember(_COMPONENT_CACHE, (spec.loader, source, device, dtype, trust_remote_code, revision),
                     lambda: spec.load(name, source, revision, device=device, dtype=dtype, trust_remote_code=trust_remote_code))


# --------------------------------------------------------------------------- outputs

SAVE_KINDS = ("video", "masks", "keypoints", "image", "json", "npy", "none")
OUTPUT_TYPES = ("np", "pil", "pt")


def output_field(save: str = "json", **kwargs: Any):
    """A dataclass field of a pipeline output that says how ``save()`` writes it: ``video`` (H.264
    mp4), ``masks`` (DAVIS palette PNGs + COCO RLE JSON), ``keypoints`` (COCO keypoint JSON),
    ``image`` (PNG), ``json`` (into result.json), ``npy``, or ``none`` (kept in memory only)."""
    if save not in SAVE_KINDS:
        raise InputError("save", save, f"choose one of {SAVE_KINDS}")
    metadata = dict(kwargs.pop("metadata", {}) or {}, save=save)
    return field(metadata=metadata, **kwargs)


@dataclass(repr=False)
class PipelineOutput:
    """Base of typed pipeline outputs.

    Subclasses are ``@dataclass(repr=False)`` (this class's ``repr`` shows shapes, not arrays) and
    declare each field's file with ``output_field(save=...)``; undeclared fields go into
    ``result.json``. ``save(dir)`` also writes ``config.json`` (the settings used) and whatever
    ``pictures()`` returns (derived images such as a heatmap).
    """

    config: dict | None = output_field("none", default=None, kw_only=True)
    # glob stems of the images ``pictures()`` returns (``"meme_*"`` for meme_1 .. meme_N): the names a
    # save claims before the run, so a user's file of such a name stops the run before its compute
    PICTURES: ClassVar[tuple[str, ...]] = ()

    def save(self, directory: str | Path, fps: float | None = None, overwrite: bool = False) -> Path:
        """Write every field as declared into ``directory`` (created; files written atomically). A file
        there that atelier did not write is never replaced (``InputError``/``MediaError``) unless ``overwrite``."""
        from core.outputs import publish_folder

        directory = Path(directory)
        fps = fps or getattr(self, "fps", None) or 8.0
        with publish_folder(directory, self.claims(), overwrite=overwrite) as stage:
            scalars: dict[str, Any] = {}
            for f in dataclasses.fields(self):
                kind, value = f.metadata.get("save", "json"), getattr(self, f.name)
                if kind == "none" or (value is None and kind != "json"):
                    continue
                if kind == "json":
                    scalars[f.name] = value
                else:
                    _SAVERS[kind](stage, f.name, value, fps)
            write_json_atomic(stage / "result.json", json_safe(scalars))
            if self.config is not None:
                write_json_atomic(stage / "config.json", json_safe(self.config))
            for name, image in self.pictures().items():
                if image is not None:
                    _save_image(stage, name, image, fps)
        return directory

    @classmethod
    def claims(cls) -> list[str]:
        """Glob patterns (relative to the output folder) of every file ``save`` may write."""
        names = ["result.json", "config.json", *(f"{stem}.png" for stem in cls.PICTURES)]
        for f in dataclasses.fields(cls):
            kind = f.metadata.get("save", "json")
            names += {"video": [f"{f.name}.mp4"], "image": [f"{f.name}.png"], "npy": [f"{f.name}.npy"],
                      "keypoints": [f"{f.name}.coco.json"], "masks": [f"{f.name}/**", f"{f.name}.rle.json"]}.get(kind, [])
        return names

    def pictures(self) -> dict[str, np.ndarray | None]:
        """Derived RGB images written by ``save`` as ``<name>.png`` (none by default; declare their
        names in ``PICTURES``)."""
        return {}

    def files(self, directory: str | Path) -> dict[str, str]:
        """The files and folders ``save(directory)`` wrote at its top level, by name."""
        from core.outputs import owned_files

        directory = Path(directory)
        tops = sorted({Path(rel).parts[0] for rel in owned_files(directory, self.claims())})
        return {name: str(directory / name) for name in tops}

    def to_dict(self) -> dict[str, Any]:
        """Every JSON-saved field, JSON-safe (what ``result.json`` holds)."""
        return json_safe({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("save", "json") == "json"})

    def convert(self, output_type: str = "np") -> PipelineOutput:
        """Image and video fields as numpy arrays (``np``, the default), PIL images (``pil``) or
        torch tensors ``(T, 3, H, W)`` float in [0, 1] (``pt``); returns a new output."""
        if output_type not in OUTPUT_TYPES:
            raise InputError("output_type", output_type, f"choose one of {OUTPUT_TYPES}")
        if output_type == "np":
            return self
        changes = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("save") in ("image", "video") and isinstance(value, np.ndarray):
                changes[f.name] = _to_pil(value) if output_type == "pil" else _to_pt(value)
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            if f.name == "config":
                continue
            parts.append(f"{f.name}={_short(getattr(self, f.name))}")
        return f"{type(self).__name__}({', '.join(parts)})"


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array{tuple(value.shape)} {value.dtype}" if value.size > 8 else np.array2string(value, precision=3, separator=", ")
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)} {value.dtype}"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, np.ndarray) for v in value):
        return f"[{len(value)} arrays {tuple(value[0].shape)} {value[0].dtype}]"
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"[{len(value)} items]"
    if isinstance(value, dict) and len(repr(value)) > 120:
        return "{" + ", ".join(map(str, value)) + "}"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _to_pil(value: np.ndarray):
    from PIL import Image

    return Image.fromarray(value) if value.ndim == 3 else [Image.fromarray(v) for v in value]


def _to_pt(value: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(value)).float().div(255)
    return t.permute(2, 0, 1) if t.ndim == 3 else t.permute(0, 3, 1, 2)


def _check_array(name: str, value: Any, ndim: int, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != ndim:
        raise InputError(name, f"array {arr.shape}", f"a field saved as {what} must have {ndim} dimensions")
    return arr


def _save_video(directory: Path, name: str, value: Any, fps: float) -> None:
    from core.video import viewable, write_video

    # a small clip is written enlarged by a whole factor (core.video.viewable): viewable, and its colours kept by yuv420p
    write_video(directory / f"{name}.mp4", viewable(_check_array(name, value, 4, "video (T, H, W, 3)")), fps=fps)


def _save_image(directory: Path, name: str, value: Any, fps: float) -> None:
    from PIL import Image

    with atomic_path(directory / f"{name}.png") as tmp:
        Image.fromarray(_check_array(name, value, 3, "image (H, W, 3)")).save(tmp, format="PNG")


def _save_masks(directory: Path, name: str, value: Any, fps: float) -> None:
    """DAVIS palette PNGs (one per frame) and COCO RLE per (frame, object id) in ``<name>.rle.json``."""
    from core.masks import rle_encode, write_mask_folder

    maps = _check_array(name, value, 3, "masks (T, H, W) id maps").astype(np.uint8)
    write_mask_folder(directory / name, maps)
    rles = [{"frame": t, "id": int(i), "rle": rle_encode(m == i)} for t, m in enumerate(maps) for i in np.unique(m) if i]
    write_json_atomic(directory / f"{name}.rle.json", {"height": maps.shape[1], "width": maps.shape[2], "annotations": rles})


def _save_keypoints(directory: Path, name: str, value: Any, fps: float) -> None:
    """COCO keypoint JSON: one image per frame (id t + 1, file ``{t:05d}.jpg``: the ids worldgen's and DAVIS-style
    exports use, so ``atelier score pose`` pairs them) and one annotation per frame, ``keypoints`` flattened
    (x, y, v) in pixels."""
    from core.keypoints import keypoints_box, to_coco_json

    kps = _check_array(name, value, 3, "keypoints (T, 17, 3)")
    images, anns = [], []
    for t, kp in enumerate(kps):
        box = keypoints_box(kp)
        bbox = [box[0], box[1], box[2] - box[0], box[3] - box[1]] if box else [0, 0, 0, 0]
        images.append({"id": t + 1, "file_name": f"{t:05d}.jpg"})
        anns.append({"id": t + 1, "image_id": t + 1, "category_id": 1, "keypoints": to_coco_json(kp),
                     "num_keypoints": int((kp[:, 2] > 0).sum()), "bbox": [float(v) for v in bbox]})
    write_json_atomic(directory / f"{name}.coco.json",
                      {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "person"}]})


def _save_npy(directory: Path, name: str, value: Any, fps: float) -> None:
    import io

    buffer = io.BytesIO()  # np.save straight to a file reports a full disk as "N requested and M written", no errno
    np.save(buffer, np.asarray(value))
    with atomic_path(directory / f"{name}.npy") as tmp:
        with open(tmp, "wb") as fh:
            fh.write(buffer.getbuffer())  # a full disk: OSError "No space left on device" with the path


_SAVERS: dict[str, Callable[[Path, str, Any, float], None]] = {
    "video": _save_video, "image": _save_image, "masks": _save_masks, "keypoints": _save_keypoints, "npy": _save_npy,
}
