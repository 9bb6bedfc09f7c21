"""The app registry: each pipeline package exposes one ``PipelineApp``; ``atelier``'s verbs, the batch
verb table and the web tabs are all built from ``apps()``.

A ``PipelineApp`` says what a user gives (``inputs``), which pipeline runs (its config dataclass's
fields, declared with ``pipelines.config.setting``, become the settings of every interface), how to
call it and how to summarise its output. Adding a pipeline is one package plus one line in
``PIPELINE_APPS``; adding a setting is one config field.

Nothing here, in an app module or in a pipeline's ``config.py`` imports torch: the CLI builds a verb's parser
and checks its arguments (``PipelineApp.check_settings``) from the config class and the component slots, which
an app names as ``"module:attribute"`` strings like its pipeline; only building the pipeline imports it.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import InputError
from core.values import check_finite, check_text, parse_bool

if TYPE_CHECKING:
    import numpy as np

# verb -> "module:attribute" of its PipelineApp; imported on first use so `atelier --help` stays fast
PIPELINE_APPS: dict[str, str] = {
    "ask": "pipelines.gridprobe.app:APP",
    "segment": "pipelines.clear.app:APP",
    "generate": "pipelines.bernini.app:GENERATE",
    "edit": "pipelines.bernini.app:EDIT",
    "motion": "pipelines.anymotion.app:APP",
    "meme": "pipelines.humor.app:APP",
    "reason": "pipelines.latent_reasoning.app:APP",
}

# verb -> its one-line help, as the app says it (a test keeps them equal): `atelier --help` lists the verbs
# without importing a pipeline (and torch)
PIPELINE_HELP: dict[str, str] = {
    "ask": "answer a multiple-choice question about a video (GridProbe)",
    "segment": "segment the object a query describes, through the whole video (CLEAR)",
    "generate": "generate a video (or an image) from a prompt, optionally from a first frame or reference images (Bernini)",
    "edit": "edit a video by instruction, optionally guided by reference images (Bernini v2v / rv2v)",
    "motion": "edit a person's motion in a clip by instruction: reason, plan the target skeleton, render it (AnyMotion)",
    "meme": "write memes for a template image by multi-path reasoning, ranked by a pairwise reward model (HUMOR)",
    "reason": "answer a multiple-choice question about a large image after K latent reasoning slots (GeLVR)",
}

INPUT_KINDS = ("video", "image", "images", "text", "texts")


@dataclass(frozen=True)
class Input:
    """One thing the user gives a pipeline call (not a setting): a video, an image, a list of images, a text or a list of texts.

    ``flag``: the CLI option (e.g. ``-q``) besides ``--<name>``; None makes it a positional argument.
    """

    name: str
    help: str
    kind: str = "text"
    flag: str | None = None
    required: bool = True

    def __post_init__(self):
        if self.kind not in INPUT_KINDS:
            raise InputError("kind", self.kind, f"choose one of {INPUT_KINDS}")


@dataclass(frozen=True)
class Setting:
    """A config field as the interfaces see it: its Python type, default, help, choices and range."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple | None = None
    range: tuple | None = None
    flag: str | None = None
    optional: bool = False  # None is a valid value ("use the pipeline's rule")
    pair: bool = False  # a (H, W) pair of ints

    def parse(self, value: Any) -> Any:
        """A value from a manifest or a web form, checked and converted (the config validates further)."""
        if value is None or (isinstance(value, str) and not value.strip() and self.optional):
            return None
        if self.pair:
            parts = value.replace(",", " ").split() if isinstance(value, str) else value
            try:
                if isinstance(parts, (str, bytes, dict)) or any(isinstance(v, bool) for v in parts):
                    raise TypeError(value)
                h, w = (_as_int(v) for v in parts)
            except (TypeError, ValueError):
                raise InputError(self.name, value, "pass two integers: height width") from None
            return (h, w)
        if self.type is bool:
            return parse_bool(self.name, value)
        if self.type in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise InputError(self.name, value, f"pass a number ({self.type.__name__})")
            try:
                number = float(value) if self.type is float else _as_int(value)
            except (ValueError, OverflowError):
                raise InputError(self.name, value, f"pass a number ({self.type.__name__})") from None
            check_finite(self.name, number, self._span())
            return number
        if not isinstance(value, str):
            raise InputError(self.name, value, "pass a string")
        return value

    def _span(self) -> str:
        if self.range is None:
            return ""
        low, high = self.range
        return f"{low if low is not None else '-inf'}..{high if high is not None else 'inf'}"


def _absent(value: Any) -> bool:
    """None, an empty string or an empty list (an array input is never absent: ``in`` would compare it)."""
    return value is None or (isinstance(value, (str, list, tuple)) and len(value) == 0)


def _as_int(value: Any) -> int:
    if isinstance(value, int):
        return value  # exact: a large int must not round through float
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)


@dataclass(frozen=True)
class PipelineApp:
    """One pipeline as the CLI, the batch runner and the web app reach it.

    ``run(pipe, inputs, generator, callback)`` calls the pipeline; ``summarize(output)`` gives the
    JSON-safe dict printed with ``--json``, ``format(summary)`` the human text. ``components`` maps a
    component slot to its CLI option name (``selector`` -> ``vlm`` gives ``--vlm``); ``defaults``
    names what each slot loads when no saved pipeline is given. The ``web_*`` fields shape the tab:
    ``web_present(output, summary)`` returns the values of ``web_outputs`` (``(kind, label)`` pairs,
    kinds ``markdown``, ``image``, ``label``, ``json``, ``video``, ``frames``, ``gallery``), ``web_examples()`` example input
    rows (created on first use), ``web_check(inputs, settings)`` warnings shown before the run,
    ``web_preview(info)`` an RGB uint8 image shown while the pipeline runs, from a loop step's
    ``callback_on_step_end`` info (None: no new image). It runs inside the loop, so keep it cheap.
    A ``frames`` output takes a list of images and shows one at a time under a slider; a ``gallery`` output a list
    of ``(image, caption)`` pairs shown side by side.

    ``config`` and ``specs`` name the pipeline's config class and its component slots (``"module:attribute"``,
    imported lazily from a torch-free module, ``pipelines/<method>/config.py``; empty: read from the pipeline
    class, which imports torch): the CLI builds its parser and checks the settings from them alone. ``run``,
    ``summarize``, ``web_present`` ... take the pipeline's output; an app module imports its output class inside
    them (or under ``TYPE_CHECKING``), never at its top.
    """

    verb: str
    name: str
    pipeline: str  # "module:Class", imported lazily
    help: str
    description: str
    inputs: tuple[Input, ...]
    run: Callable[..., Any]
    summarize: Callable[[Any], dict]
    format: Callable[[dict], str]
    components: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=dict)
    examples: str = ""
    saved_files: str = ""
    web_title: str = ""
    web_note: str = ""
    web_outputs: tuple[tuple[str, str], ...] = ()
    web_present: Callable[[Any, dict], tuple] | None = None
    web_examples: Callable[[], list[list]] | None = None
    web_check: Callable[[dict, dict], list[str]] | None = None
    web_preview: Callable[[dict], np.ndarray | None] | None = None
    # the output field ``-o NAME.mp4`` writes (the other outputs go to the folder NAME/ beside it); None:
    # -o is always a folder
    video_output: str | None = None
    # extra files a user can ask for on the CLI: ``(flag, file the run saves in its folder, help)``; the run's
    # file is copied to the path given (checked before any compute)
    file_outputs: tuple[tuple[str, str, str], ...] = ()
    # ``nothing(output)``: why a finished run produced nothing a user asked for (e.g. no meme at all), else None; the
    # CLI, the batch runner and the web then report a failure with that message instead of an empty success
    nothing: Callable[[Any], str | None] | None = None
    config: str = ""  # "module:Class" of the pipeline's config dataclass, imported lazily (no torch)
    specs: str = ""  # "module:attribute" of its component slots (the pipeline's ``component_specs``), likewise

    @property
    def pipeline_class(self) -> type:
        return _import(self.pipeline)

    @property
    def config_class(self) -> type:
        """The pipeline's config dataclass (``pipeline_class.config_class``), without importing the pipeline."""
        return _import(self.config) if self.config else self.pipeline_class.config_class

    @property
    def component_specs(self) -> dict:
        """The pipeline's component slots (``pipeline_class.component_specs``), without importing the pipeline."""
        return _import(self.specs) if self.specs else self.pipeline_class.component_specs

    def settings(self) -> list[Setting]:
        """The pipeline config's fields that carry a ``help`` (every field declared with ``setting``)."""
        config_class = self.config_class
        hints = typing.get_type_hints(config_class)
        out = []
        for f in dataclasses.fields(config_class):
            if "help" not in f.metadata:
                continue
            kind, optional, pair = _field_type(hints[f.name])
            default = f.default if f.default is not dataclasses.MISSING else None
            out.append(Setting(f.name, kind, default, f.metadata["help"], f.metadata.get("choices"), f.metadata.get("range"),
                               f.metadata.get("flag"), optional, pair))
        return out

    def split_args(self, args: dict[str, Any]) -> tuple[dict, dict, dict, dict]:
        """A manifest's / form's flat ``args`` -> (inputs, settings, components, run options), with
        unknown names refused and values parsed."""
        names_in = {i.name for i in self.inputs}
        settings = {s.name: s for s in self.settings()}
        comp = {flag: slot for slot, flag in self.components.items()}
        inputs, config, components, options = {}, {}, {}, {}
        for key, value in args.items():
            check_text(key, value)  # before anything reads it: a prompt of non-UTF-8 bytes is the user's to fix
            if key in names_in:
                inputs[key] = value
            elif key in settings:
                config[key] = settings[key].parse(value)
            elif key in comp or key in self.components:
                components[comp.get(key, key)] = value
            elif key in RUN_OPTIONS:
                options[key] = parse_run_option(key, value)
            else:
                known = sorted([*names_in, *settings, *comp, *RUN_OPTIONS])
                raise InputError(f"{self.verb} argument {key!r}", value, f"known arguments: {known}")
        missing = [i for i in self.inputs if i.required and _absent(inputs.get(i.name))]
        if missing:
            more = f"; also give {[i.name for i in missing[1:]]}" if missing[1:] else ""
            raise InputError(missing[0].name, inputs.get(missing[0].name), f"required: {missing[0].help}{more}")
        return inputs, config, components, options

    def check_settings(self, config: dict[str, Any], options: dict[str, Any] | None = None) -> None:
        """The settings (and the seed) of a call, as ``split_args`` returns them, checked the way the run would check
        them, before any model loads and without importing torch: the config built from them (its ``__post_init__``:
        types, choices, ranges and its own rules); with a saved pipeline (``options["pipeline"]``), whose config they
        change and which is read later, each value alone (type, choices, range)."""
        options = options or {}
        changes = {k: v for k, v in config.items() if v is not None}  # None keeps the saved / default value, as in build
        if options.get("pipeline") is not None:
            self.config_class.check_values(changes)
        else:
            self.config_class(**changes)
        seed = options.get("seed")
        if seed is not None and type(seed).__module__.split(".")[0] != "torch":  # a torch.Generator is make_generator's
            from pipelines.config import check_seed

            check_seed(seed)


# options every pipeline verb takes besides its inputs, settings and components
RUN_OPTIONS = ("pipeline", "device", "dtype", "seed", "threads", "progress", "trust_remote_code", "revision")
BOOL_RUN_OPTIONS = ("progress", "trust_remote_code")
TEXT_RUN_OPTIONS = ("pipeline", "device", "dtype", "revision")


def parse_run_option(key: str, value: Any) -> Any:
    """A run option from a manifest or a form, checked: booleans strictly (``"false"`` is no way to say
    false: ``bool("false")`` would turn remote code on), names as strings; ``seed`` is checked where the
    generator is made. None keeps the default."""
    if value is None:
        return None
    if key == "threads":
        from core.threads import check_threads

        return check_threads(value)
    if key in BOOL_RUN_OPTIONS:
        return parse_bool(key, value)
    if key in TEXT_RUN_OPTIONS and not isinstance(value, (str, os.PathLike) if key == "pipeline" else str):
        raise InputError(key, value, "pass a string (a folder, or a name such as 'cpu' / 'float32')")
    return value


def _field_type(hint: Any) -> tuple[type, bool, bool]:
    """``(base type, None allowed, is an (H, W) pair)`` of a config field's annotation."""
    args = typing.get_args(hint)
    optional = type(None) in args
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in args if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return int, optional, True
    if hint not in (int, float, str, bool):
        raise InputError("setting type", hint, "settings are int, float, str, bool, an (int, int) pair, or Optional of these")
    return hint, optional, False


def saved_line(summary: dict) -> str:
    """``saved: a, b, ...``: every file and folder a run wrote (its summary's ``files``), for the human output."""
    return "saved: " + ", ".join(str(v) for v in summary["files"].values())


def output_summary(output: Any) -> dict:
    """``output.summary()``: an app's ``summarize`` that needs no import of the output class."""
    return output.summary()


def _import(target: str) -> Any:
    """The attribute a ``"module:attribute"`` string names."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def apps() -> dict[str, PipelineApp]:
    """Every registered ``PipelineApp`` by verb (imports each pipeline's app module; none imports torch)."""
    return {verb: _import(target) for verb, target in PIPELINE_APPS.items()}


def get_app(verb: str) -> PipelineApp:
    if verb not in PIPELINE_APPS:
        raise InputError("verb", verb, f"pipeline verbs are {sorted(PIPELINE_APPS)}")
    return apps()[verb]


__all__ = ["PipelineApp", "Input", "Setting", "PIPELINE_APPS", "RUN_OPTIONS", "apps", "get_app", "output_summary", "parse_run_option"]
