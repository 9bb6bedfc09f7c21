"""`atelier ask`: GridProbe answers a multiple-choice question about a video.

The CLI verb, the batch verb ``ask`` and the web tab all call ``run_ask`` / ``ask`` here, so the
three share one loading rule: ``vlm="builtin"`` (the default) is the shipped builtin VLM
(``planners.builtin.load_builtin_vlm``); a directory saved by the builtin VLM (its config.json
says ``"model": "builtin-vlm"``) loads as one; anything else is a transformers checkpoint directory
or HF cache id loaded with ``HFVisionLanguageModel.from_pretrained``. Loaded models are cached per
(spec, device, dtype), so a batch or a web session loads each model once.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.errors import AtelierError, InputError

logger = logging.getLogger(__name__)

BUILTIN = "builtin"
# ask() keyword -> GridProbeConfig field; None values leave the pipeline's config alone
CONFIG_ARGS = {"grid": "grid", "probe_scale": "probe_scale", "focus_scale": "focus_scale", "budget_rule": "budget_rule",
               "gamma": "gamma", "min_frames": "min_frames", "max_frames": "max_frames", "tie_break": "tie_break",
               "prompt_style": "prompt_style"}


class BuiltinUnavailableError(AtelierError):
    """The builtin VLM (code or weights) is not installed."""


@functools.lru_cache(maxsize=4)
def load_vlm(spec: str = BUILTIN, device: str | None = None, dtype: str | None = None) -> Any:
    """A ``VisionLanguageModel``: ``"builtin"`` or a transformers checkpoint (directory or HF cache id)."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError("vlm", spec, "pass 'builtin' or a checkpoint directory / HF cache id")
    if spec == BUILTIN:
        return _load_builtin(device, dtype)
    from planners.builtin.vlm import BuiltinVLMModel

    if BuiltinVLMModel.is_saved_in(spec):  # e.g. a VLM retrained with `atelier train vlm --out DIR`
        from planners.builtin import BuiltinVisionLanguageModel

        return BuiltinVisionLanguageModel.from_pretrained(spec, device=device)
    from planners.hf import HFVisionLanguageModel

    return HFVisionLanguageModel.from_pretrained(spec, device=device, dtype=dtype)


def _load_builtin(device: str | None, dtype: str | None) -> Any:
    try:
        from planners.builtin import load_builtin_vlm

        vlm = load_builtin_vlm(device=device)
    except (ImportError, FileNotFoundError, OSError, AtelierError) as e:
        raise BuiltinUnavailableError(
            f"the builtin VLM is not available ({type(e).__name__}: {e}); pass --vlm PATH (a transformers VLM "
            "checkpoint directory or HF cache id, e.g. Qwen/Qwen3-VL-2B-Instruct) or run `make weights`") from None
    if dtype is not None and hasattr(vlm, "to"):
        vlm.to(dtype=dtype)
    return vlm


@functools.lru_cache(maxsize=2)
def _saved_pipeline(directory: str, device: str | None, dtype: str | None):
    from pipelines.gridprobe import GridProbePipeline

    return GridProbePipeline.from_pretrained(directory, device=device, dtype=dtype)


def build_pipeline(*, vlm: str | None = None, answerer: str | None = None, pipeline: str | Path | None = None,
                   device: str | None = None, dtype: str | None = None, **config_args: Any):
    """A GridProbe pipeline from a saved directory and/or model specs, with config overrides.

    ``pipeline`` (a ``save_pretrained`` directory) supplies components and config; ``vlm`` /
    ``answerer`` replace its components; without ``pipeline`` the selector defaults to the
    builtin VLM. ``config_args`` use the names of ``CONFIG_ARGS`` (``budget_rule`` is the
    config's ``selector`` rule); None means "keep".
    """
    from pipelines.gridprobe import GridProbeConfig, GridProbePipeline

    unknown = [k for k in config_args if k not in CONFIG_ARGS]
    if unknown:
        raise InputError("arguments", unknown, f"ask takes {sorted(CONFIG_ARGS)} besides the model options")
    if pipeline is not None:
        saved = _saved_pipeline(str(pipeline), device, dtype)
        selector = load_vlm(vlm, device, dtype) if vlm else saved.selector
        qa = load_vlm(answerer, device, dtype) if answerer else saved.answerer
        base = saved.config
    else:
        selector = load_vlm(vlm or BUILTIN, device, dtype)
        qa = load_vlm(answerer, device, dtype) if answerer else None
        base = GridProbeConfig()
    changes = {CONFIG_ARGS[k]: v for k, v in config_args.items() if v is not None}
    config = dataclasses.replace(base, **changes)  # validates in __post_init__
    return GridProbePipeline(config, selector=selector, answerer=qa)


def run_ask(video: Any, question: str, options: Sequence[str], *, vlm: str | None = None, answerer: str | None = None,
            pipeline: str | Path | None = None, device: str | None = None, dtype: str | None = None,
            seed: int | None = None, progress: bool = True, **config_args: Any):
    """Answer one question; returns the ``GridProbeOutput``."""
    if isinstance(options, str):
        raise InputError("options", options, "pass a list of option texts, not one string")
    pipe = build_pipeline(vlm=vlm, answerer=answerer, pipeline=pipeline, device=device, dtype=dtype, **config_args)
    pipe.set_progress_bar_config(disable=not progress)
    if seed is not None:
        from core.device import seed_everything

        seed_everything(seed)
    return pipe(video, question, list(options))


def ask(video: Any, question: str, options: Sequence[str], *, out_dir: str | Path | None = None, **kwargs: Any) -> dict:
    """``run_ask`` plus ``output.save(out_dir)`` when given; returns the JSON-safe summary."""
    out = run_ask(video, question, options, **kwargs)
    summary = summarize(out)
    if out_dir is not None:
        directory = out.save(out_dir)
        summary["files"] = {name: str(directory / name) for name in
                            ("result.json", "config.json", "importance_map.png", "selected_frames.png")
                            if (directory / name).is_file()}
    return summary


def summarize(out) -> dict:
    """What a user reads: the answer, its posterior, the chosen frames and the compute against full-frame."""
    letters = [chr(ord("A") + i) for i in range(len(out.options))]
    return {
        "question": out.question,
        "answer": out.answer,
        "answer_text": out.answer_text,
        "posterior": {L: round(float(p), 6) for L, p in zip(letters, out.posterior)},
        "m_eff": int(out.m_eff),
        "pool_size": len(out.pool),
        "frames": [int(i) for i in out.frames],
        "ensemble_answer": out.ensemble_answer,
        "tflops": {k: float(v) for k, v in out.tflops.items()},
        "seconds": {k: round(float(v), 4) for k, v in out.seconds.items()},
    }


def format_summary(s: dict) -> str:
    """The human-readable form of ``summarize``'s dict."""
    t = s["tflops"]
    post = " | ".join(f"{L} {p:.3f}" for L, p in s["posterior"].items())
    lines = [
        f"answer: {s['answer']}. {s['answer_text']}  (p = {s['posterior'][s['answer']]:.3f})",
        f"posterior: {post}",
        f"frames: {s['m_eff']} of {s['pool_size']} (M_eff) -> {s['frames']}",
        f"compute: {t['total']:.4g} TFLOPs (probes {t['probe']:.4g} + focus {t['focus']:.4g}) vs full-frame "
        f"{t['full_frame']:.4g} TFLOPs: {t['reduction']:.2f}x less",
        f"probe ensemble answer: {s['ensemble_answer']}",
        f"time: {s['seconds']['total']:.2f} s (probes {s['seconds']['probe']:.2f} s, focus {s['seconds']['focus']:.2f} s)",
    ]
    if s.get("files"):
        lines.append("saved: " + ", ".join(s["files"].values()))
    return "\n".join(lines)
