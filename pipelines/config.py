"""The config side of a pipeline, without torch: ``setting`` fields, ``PipelineConfig`` and its checks,
``ComponentSpec`` (a slot's protocol, loader and help) and the seed check.

``pipelines.base`` re-exports every name here, so ``from pipelines.base import setting`` keeps working. Each
pipeline's config dataclass and component slots live in a torch-free ``pipelines/<method>/config.py`` built on
this module: the CLI builds a verb's parser and checks its settings (``PipelineApp.check_settings``) from them,
so ``atelier VERB --help`` and an argument error never import torch (tests/test_cold_start.py). Keep it so:
no torch, transformers or diffusers here, nor in those config modules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import pickle
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from core.errors import REMOTE_CODE_HINT, AtelierError, InputError, MediaError, refused_remote_code


@dataclass(frozen=True)
class ComponentSpec:
    """What a pipeline needs in one component slot.

    ``protocol``: a ``runtime_checkable`` Protocol (or a class) the component must satisfy; every
    registered pipeline's slots name one (without it any loadable class fits the slot, tested in
    tests/test_safety_foreign_code.py).
    ``loader``: ``"module:function"`` that turns a directory / cache id into a component (e.g.
    ``planners.loading:load_vlm`` tells a builtin VLM folder from a transformers checkpoint); used
    for overrides by path and for optional components absent from a saved index. Without one, an
    override directory is loaded with the class recorded in the index.
    ``optional``: the slot may hold None. ``help``: shown by the CLI and the web app.
    """

    protocol: type | None = None
    loader: str | None = None
    optional: bool = False
    help: str = ""

    def load(self, name: str, source: str | Path, revision: str | None = None, **kwargs: Any) -> Any:
        """The component in ``source`` (a folder, a keyword such as ``builtin``, or a hub id: its snapshot folder,
        at ``revision`` unless the id pins one with ``@``; ``core.hub``)."""
        if self.loader is None:
            raise InputError(name, str(source), "this component has no loader for paths; pass an instance")
        from core.hub import resolve_model

        source = resolve_model(name, source, revision)
        module, _, func = self.loader.partition(":")
        loader = getattr(importlib.import_module(module), func)
        with loading_errors(name, source, self.help):  # every slot's loader: one mapping of what a folder can raise
            return loader(str(source), **kwargs)


# What loading a foreign or damaged folder raises (transformers / diffusers / torch / safetensors /
# json): a bad input, never a traceback. MemoryError and KeyboardInterrupt pass.
LOAD_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError,
                                                RuntimeError, EOFError, ImportError, pickle.UnpicklingError)
try:  # a damaged .safetensors file: its error derives from Exception only
    from safetensors import SafetensorError

    LOAD_ERRORS += (SafetensorError,)
except ImportError:
    pass


@contextlib.contextmanager
def loading_errors(name: str, source: str | Path, what: str = ""):
    """Turn a loader's failure on ``source`` into an ``InputError`` naming the slot and the folder;
    a checkpoint that ships code it was not allowed to run says how to allow it."""
    try:
        yield
    except InputError as e:
        if e.name != name and str(e.value) == str(source):  # a shared loader names what it read it as ("vlm"): add the slot
            raise InputError(f"{name} ({e.name})", e.value, e.hint) from None
        raise
    except MediaError as e:  # a file inside the folder: the user passed the folder, so name the slot
        raise InputError(name, str(source), f"{e}; pass a folder this slot reads" + (f" ({what})" if what else "")) from None
    except AtelierError:
        raise  # already names its input
    except LOAD_ERRORS as e:
        first = (str(e).strip().splitlines() or [""])[0][:300]
        if refused_remote_code(e):
            hint = REMOTE_CODE_HINT
        else:
            hint = (f"cannot load it ({type(e).__name__}: {first}); pass a folder this slot reads"
                    + (f" ({what})" if what else ""))
        raise InputError(name, str(source), hint) from None


def setting(default: Any = dataclasses.MISSING, *, help: str, choices: tuple | None = None,
            range: tuple[float | None, float | None] | None = None, flag: str | None = None, **kwargs: Any):
    """A config field with the metadata the CLI, batch manifests and the web tab are built from:
    ``help`` (one line), ``choices``, an inclusive ``range`` ``(low, high)`` (None: open), an extra
    short CLI ``flag`` (e.g. ``-K``). One declaration, three interfaces."""
    metadata = {"help": help, "choices": tuple(choices) if choices else None, "range": range, "flag": flag}
    return field(default=default, metadata=metadata, **kwargs)


def check_range(name: str, value: Any, bounds: tuple | None) -> None:
    """``InputError`` when ``value`` lies outside the field's declared ``range`` or is NaN / infinite (NaN
    passes every ``<`` / ``>`` comparison, so it is refused first)."""
    import numbers

    from core.values import check_finite, is_bool

    if is_bool(value) or not isinstance(value, numbers.Real):
        return
    low, high = bounds if bounds is not None else (None, None)
    span = f"{low if low is not None else '-inf'}..{high if high is not None else 'inf'}"
    check_finite(name, value, span if bounds is not None else "")
    if (low is not None and value < low) or (high is not None and value > high):
        raise InputError(name, value, f"use a value in {span}")


@dataclass
class PipelineConfig:
    """Scalar settings of a pipeline; subclasses add fields. Saved in ``pipeline.json``.

    Field metadata drive the CLI, batch manifests and the web tab (``pipelines.registry``):
    ``help`` (one line), ``choices``, ``range`` ``(low, high)`` inclusive, ``flag`` (an extra
    short CLI flag such as ``-K``). ``renamed`` maps old key -> new key for saved indexes.
    """

    renamed: ClassVar[dict[str, str]] = {}

    def check_fields(self) -> None:
        """Every field's type (its annotation: a hand-edited ``pipeline.json`` may hold ``"lots"`` where an int
        belongs), then its declared ``choices`` and ``range``; subclasses call it from ``__post_init__`` /
        ``validate``, so a config built from a file, ``build`` or ``dataclasses.replace`` is checked alike."""
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            _check_value(f, getattr(self, f.name), hints[f.name])

    @classmethod
    def check_values(cls, values: dict[str, Any]) -> None:
        """The checks ``check_fields`` runs, on the given ``{field: value}`` alone (unknown names are left to the
        caller): what can be said of settings that will change a config not at hand yet (a saved pipeline's)."""
        hints = _hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name, value in values.items():
            if name in fields:
                _check_value(fields[name], value, hints[name])


def _hints(cls: type) -> dict[str, Any]:
    """A config class's field annotations, resolved once per class (they are strings here)."""
    if "_hints" not in cls.__dict__:
        cls._hints = typing.get_type_hints(cls)
    return cls._hints


def _check_value(f: dataclasses.Field, value: Any, hint: Any) -> None:
    """One field's value against its annotation, then its declared ``choices`` and ``range``."""
    from core.values import check_type

    check_type(f.name, value, hint, None if f.default is dataclasses.MISSING else f.default)
    if f.metadata.get("choices") and value not in f.metadata["choices"]:
        raise InputError(f.name, value, f"choose one of {list(f.metadata['choices'])}")
    check_range(f.name, value, f.metadata.get("range"))


def check_seed(seed: Any) -> None:
    """``InputError`` unless ``seed`` is an integer in [0, 2**63) (a ``torch.Generator`` is ``make_generator``'s to
    take): checked before anything loads, without torch."""
    import numpy as np

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**63:
        raise InputError("generator", seed, "pass a torch.Generator or an integer seed in [0, 2**63)")


__all__ = ["ComponentSpec", "LOAD_ERRORS", "PipelineConfig", "check_range", "check_seed", "loading_errors", "setting"]
