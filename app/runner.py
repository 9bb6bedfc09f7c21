"""Running a registered pipeline: the one code path behind its CLI verb, its batch verb and its web tab.

``run_app(app, args)`` takes the flat arguments a manifest line or a form holds (inputs, settings,
component overrides, run options), checks the output folder before any compute, builds the
pipeline (``Pipeline.build``: a saved directory and/or model specs, loaded once per process), runs
it with a generator seeded from ``seed`` and returns the output and its JSON-safe summary.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.world_check import THRESHOLD, check_inputs, only_builtin, uses_builtin
from core.errors import AtelierError
from core.paths import check_output_dir
from pipelines.registry import PipelineApp


class EmptyResultError(AtelierError):
    """A run that finished without producing what was asked for (exit 1, a failed batch item)."""


def check_media(app: PipelineApp, inputs: dict) -> None:
    """Open every video input given as a path once, so a bad file fails before a model loads."""
    from core.errors import InputError
    from core.video import Video

    for i in app.inputs:
        value = inputs.get(i.name)
        if i.kind == "images" and value is not None and not isinstance(value, (str, Path, list, tuple)):
            raise InputError(i.name, type(value).__name__, "pass a list of image paths")
        listed = i.kind == "images" and isinstance(value, (list, tuple))
        paths = list(value) if listed else [value] if i.kind in ("video", "image", "images") else []
        for path in paths:
            if isinstance(path, (str, Path)):
                with Video(path):
                    pass


def input_paths(app: PipelineApp, inputs: dict) -> list[str]:
    """The files and folders a run reads (its media inputs given as paths): never a destination of its outputs."""
    out = []
    for i in app.inputs:
        value = inputs.get(i.name)
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        out += [str(v) for v in values if i.kind in ("video", "image", "images") and isinstance(v, (str, Path))]
    return out


def build(app: PipelineApp, components: dict, options: dict, config: dict):
    """The pipeline an app call runs (components by name: an instance, a folder, a cache id or None)."""
    from pipelines.registry import parse_run_option

    # strictly: bool("false") is True, and a manifest's "false" must never turn remote code on
    trust = parse_run_option("trust_remote_code", options.get("trust_remote_code")) or False
    return app.pipeline_class.build(options.get("pipeline"), device=options.get("device"), dtype=options.get("dtype"),
                                    trust_remote_code=trust, revision=options.get("revision"),
                                    components=components, config=config, defaults=app.defaults)


def run_app(app: PipelineApp, args: dict[str, Any], *, out_dir: str | Path | None = None, callback: Any = None,
            overwrite: bool = False, on_start: Callable[[dict, dict], None] | None = None):
    """Run ``app`` on ``args``; with ``out_dir``, save the output there (a file atelier did not write is
    replaced only with ``overwrite``). ``on_start(components, options)`` is called once every check has passed,
    just before the pipeline is built (the CLI's builtin-model notice). Returns ``(output, summary)``."""
    from core.outputs import protecting

    with protecting(input_paths(app, app.split_args(args)[0])):  # no output may replace an input, whatever the flags
        return _run_app(app, args, out_dir, callback, overwrite, on_start)


def _run_app(app: PipelineApp, args: dict[str, Any], out_dir, callback, overwrite: bool, on_start):
    from core.outputs import check_folder
    from core.threads import choose_threads, preset_threads, use_threads

    inputs, config, components, options = app.split_args(args)
    preset_threads(options.get("threads"), only_builtin(app, components, options))  # before torch loads (core.threads)
    app.check_settings(config, options)  # bad settings and a bad seed fail before anything loads (torch included)
    check_media(app, inputs)
    from pipelines.base import make_generator

    generator = make_generator(options.get("seed"))
    if options.get("device") is not None or options.get("dtype") is not None:  # as build checks them: before the notice
        from core.device import select_device, select_dtype

        if options.get("device") is not None:
            select_device(options["device"])
        if options.get("dtype") is not None:
            select_dtype(options["dtype"])
    if out_dir is not None:
        out_dir = check_output_dir(out_dir, "--out")
        check_folder(out_dir, app.pipeline_class.output_class().claims(), "--out", overwrite)
    world = None
    if uses_builtin(app, components, options):
        world = check_inputs(app, inputs) or {}
    if on_start is not None:
        on_start(components, options)
    pipe = build(app, components, options, config)
    pipe.set_progress_bar_config(disable=not options.get("progress", True))
    threads = use_threads(choose_threads(options.get("threads"), pipe.components))
    out = app.run(pipe, inputs, generator=generator, callback=callback)
    if isinstance(getattr(out, "config", None), dict):
        out.config["threads"] = threads  # recorded with the settings (config.json): speed depends on it
    empty = app.nothing(out) if app.nothing else None
    if empty:
        if world and world.get("unlike_builtin_world"):  # advice for the builtin world (another seed, ...) would mislead here
            empty = (f"{empty.split('; try')[0]}. The input does not look like the builtin models' synthetic world (colour coverage "
                     f"{world['colour_coverage']}, below {THRESHOLD}): they know only flat coloured shapes and stick figures, so "
                     "another seed will not help; load a real checkpoint for real inputs (`atelier info` lists them)")
        raise EmptyResultError(f"{app.verb} produced nothing: {empty}")
    summary = app.summarize(out)
    summary["threads"] = threads
    if world is not None:  # the builtin models ran: say whether the input looks like their world
        summary.update(builtin_models=True, **world)
    if out_dir is not None:
        out.save(out_dir, overwrite=overwrite)
        summary["files"] = out.files(out_dir)
    return out, summary
