"""GridProbe and its baselines on one question, in one harness, sharing every pass they can.

Methods (spec B.9; each returns answer, posterior, frames, TFLOPs, seconds):

- ``gridprobe``: probes + shape-adaptive budget + focused pass (one result per probe scale);
- ``probe_ensemble``: argmax of the mean of the 2K probe log-probs (free with the probes);
- ``full_frame``: one answerer pass on all K² pool frames (the monolithic baseline);
- ``uniform_m``: a fixed budget of ``fixed_budget`` frames spaced uniformly over the pool
  (``round(linspace(0, K²-1, M))``, as the reference);
- ``uniform_meff`` / ``random_meff`` / ``encoder_meff``: GridProbe's per-question budget M_eff,
  but frames chosen uniformly, at random (seeded), or by encoder similarity between each pool
  frame and the question text alone [DEFAULT] (``encode_images`` vs ``encode_text``, cosine,
  BOLT/AKS-style, frames encoded at focus resolution). They isolate *which* frames GridProbe
  picks from *how many*; their TFLOPs count only their own pass (the budget is borrowed from
  GridProbe's probes, whose cost is not charged to them), and the encoder's own cost is not
  counted, as spec B.8 leaves the vision side out everywhere.

Sharing: the pool is fetched once; probes run once per probe scale; baselines that do not
depend on the probes run once; identical frame sets share one forward (``Pool.passes``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from core.errors import InputError
from pipelines.gridprobe.frames import VideoInput, check_scale, resize_frames, scale_text
from pipelines.gridprobe.pipeline import GridProbeOutput, GridProbePipeline, Pool
from planners.protocol import check_options

logger = logging.getLogger(__name__)

_WARNED: set[str] = set()  # selector classes already reported as lacking encode_text
METHODS = ("gridprobe", "probe_ensemble", "full_frame", "uniform_m", "uniform_meff", "random_meff", "encoder_meff")
PROBE_METHODS = ("gridprobe", "probe_ensemble", "uniform_meff", "random_meff", "encoder_meff")  # depend on probe scale


@dataclass
class MethodResult:
    """One method's answer to one question. ``posterior`` holds probabilities over the options."""

    method: str
    answer_index: int
    answer: str
    posterior: np.ndarray
    frames: list[int]
    tflops: float
    seconds: float
    probe_scale: float | tuple[float, float] | None = None  # one fraction, or (height, width) fractions
    m_eff: int | None = None
    extra: dict = field(default_factory=dict)
    budget: str = ""  # GridProbe under other budget settings than the pipeline's (``budget_label``); "" for the pipeline's

    @property
    def label(self) -> str:
        """``method`` plus the probe scale for probe-dependent methods and any other budget, e.g. ``gridprobe@0.5``,
        ``gridprobe@0.25/gamma=6``, ``gridprobe@0.25x0.5`` (height x width)."""
        label = self.method if self.probe_scale is None else f"{self.method}@{scale_text(self.probe_scale)}"
        return f"{label}/{self.budget}" if self.budget else label


BUDGET_SETTINGS = ("budget_rule", "gamma", "min_frames", "max_frames", "tie_break")


def budget_label(budget: dict) -> str:
    """``gamma=6,max_frames=48``: a budget variant's settings in a fixed order."""
    return ",".join(f"{k}={budget[k]:g}" if isinstance(budget[k], float) else f"{k}={budget[k]}" for k in BUDGET_SETTINGS if k in budget)


@dataclass
class Comparison:
    """Every method's result on one question, plus GridProbe's full outputs per probe scale."""

    question: str
    options: list[str]
    pool: list[int]
    results: list[MethodResult]
    outputs: dict[float, GridProbeOutput]

    def get(self, method: str, probe_scale: float | None = None) -> MethodResult:
        for r in self.results:
            if r.method == method and (probe_scale is None or r.probe_scale == probe_scale):
                return r
        raise KeyError(f"no result for method={method!r} probe_scale={probe_scale!r}")


# ---------------------------------------------------------------------------------- frame choices


def uniform_positions(pool_size: int, m: int) -> list[int]:
    """``round(linspace(0, K²-1, m))``: the reference's uniform-M choice over the pool."""
    _check_budget(m, pool_size)
    return sorted({int(p) for p in np.linspace(0, pool_size - 1, m).round().astype(np.int64)})


def random_positions(pool_size: int, m: int, generator: np.random.Generator) -> list[int]:
    """``m`` distinct pool positions drawn with ``generator``, chronological."""
    _check_budget(m, pool_size)
    return sorted(int(p) for p in generator.choice(pool_size, size=m, replace=False))


def encoder_scores(model, frames: np.ndarray, query: str) -> np.ndarray:
    """Cosine similarity of each frame's ``model.encode_images`` embedding to ``model.encode_text([query])``."""
    if not callable(getattr(model, "encode_text", None)):
        raise InputError("selector", type(model).__name__,
                         "encoder-similarity selection needs a VLM with encode_text(texts) -> (N, D) in the space of "
                         "encode_images (the builtin VLM has it; transformers chat VLMs do not)")
    img = np.asarray(model.encode_images(frames), dtype=np.float64)
    txt = np.asarray(model.encode_text([query]), dtype=np.float64).reshape(1, -1)
    if img.ndim != 2 or len(img) != len(frames) or img.shape[1] != txt.shape[1]:
        raise InputError("selector", type(model).__name__,
                         f"encode_images gave {img.shape} and encode_text gave {txt.shape}: they must share one space")
    img /= np.linalg.norm(img, axis=1, keepdims=True) + 1e-12
    txt /= np.linalg.norm(txt, axis=1, keepdims=True) + 1e-12
    return img @ txt[0]


def top_positions(scores: np.ndarray, m: int) -> list[int]:
    """The ``m`` highest-scoring positions (ties keep the earlier frame), chronological."""
    _check_budget(m, len(scores))
    return sorted(int(p) for p in np.argsort(-np.asarray(scores), kind="stable")[:m])


def _check_budget(m: int, pool_size: int) -> None:
    if not isinstance(m, (int, np.integer)) or not 1 <= m <= pool_size:
        raise InputError("budget", m, f"choose between 1 and {pool_size} frames (the pool size)")


# ---------------------------------------------------------------------------------- the harness


@torch.no_grad()
def compare_methods(pipe: GridProbePipeline, video: VideoInput | Pool, question: str, options: Sequence[str], *,
                    probe_scales: Sequence[float | tuple[float, float]] | None = None, methods: Sequence[str] | None = None,
                    fixed_budget: int = 8, generator: np.random.Generator | int | None = 0,
                    subtitles: str | None = None, budgets: Sequence[dict] = ()) -> Comparison:
    """Run GridProbe and the baselines on one question.

    Args:
        pipe: the GridProbe pipeline (its selector probes; its answerer answers every method).
        video: anything ``pipe`` accepts, or a ``Pool`` already fetched with ``pipe.load_pool``
            (reuse it across questions on the same video and grid).
        probe_scales: probe resolutions to run (fractions of the source side, or (height, width) pairs of
            them); default the pipeline's ``probe_scale``. Probe-dependent methods give one result per scale.
        methods: a subset of ``METHODS``; default all, leaving out ``encoder_meff`` (with a
            warning) when the selector has no ``encode_text``.
        fixed_budget: M of ``uniform_m`` (clipped to K²). [DEFAULT 8, MDP3's budget in the paper]
        generator: numpy generator or seed for ``random_meff``.
        budgets: further budget settings for GridProbe (dicts of ``BUDGET_SETTINGS``, e.g. ``{"gamma": 6}``), each
            run on the same probes and given its own result (``MethodResult.budget``): a Pareto sweep over the
            budget costs one focused pass per setting, not new probes.
    """
    pipe.check_inputs(question, options)
    for b in budgets:
        if not b or set(b) - set(BUDGET_SETTINGS):
            raise InputError("budgets", b, f"pass dicts of {', '.join(BUDGET_SETTINGS)}")
        dataclasses.replace(pipe.config, **b)  # checks the values
    letters = check_options(options)
    methods = _resolve_methods(pipe, methods)
    c = pipe.config
    own = c.probe_scale if c.probe_height_scale is None else (c.probe_height_scale, c.probe_scale)
    scales = [check_scale("probe_scales", s) for s in (probe_scales or [own])]
    rng = generator if isinstance(generator, np.random.Generator) else np.random.default_rng(generator)
    prompt = pipe.prompt(question, options, subtitles)
    pool = video if isinstance(video, Pool) else pipe.load_pool(video)
    n = len(pool.indices)
    K = pool.layout.K  # the config's grid, or a smaller one for a short clip (short_clips="shrink")
    if n != pool.layout.size or K > c.grid or (K < c.grid and c.short_clips != "shrink"):
        raise InputError("video", f"a pool of {n} frames", f"a K={c.grid} grid needs a pool of {c.grid ** 2}: "
                         "fetch it with pipe.load_pool under the same grid")

    def result(method: str, positions: Sequence[int], logp, flops: float, seconds: float, **kw) -> MethodResult:
        k = int(np.argmax(logp))
        return MethodResult(method, k, letters[k], np.exp(logp), [pool.indices[p] for p in positions], flops / 1e12, seconds, **kw)

    def focused(method: str, positions: Sequence[int], extra_seconds: float = 0.0, **kw) -> MethodResult:
        logp, flops, seconds = pipe.answer_positions(pool, positions, prompt, options)
        return result(method, positions, logp, flops, seconds + extra_seconds, **kw)

    results: list[MethodResult] = []
    if "full_frame" in methods:
        results.append(focused("full_frame", range(n), m_eff=n))
    if "uniform_m" in methods:
        m = min(int(fixed_budget), n)
        results.append(focused("uniform_m", uniform_positions(n, m), m_eff=m))
    sims, encode_s = None, 0.0
    outputs: dict[float, GridProbeOutput] = {}
    for scale in scales if any(m in PROBE_METHODS for m in methods) else []:
        probe = pipe.run_probes(pool, prompt, options, scale=scale)
        out = pipe.finish(pool, probe, question, options, prompt, output_frames=False)
        outputs[scale] = out
        m_eff = out.m_eff
        if "gridprobe" in methods:
            base = pipe.config
            for b in [{}, *budgets]:
                pipe.config = dataclasses.replace(base, **b)
                try:
                    o = out if not b else pipe.finish(pool, probe, question, options, prompt, output_frames=False)
                finally:
                    pipe.config = base
                results.append(MethodResult("gridprobe", o.answer_index, o.answer, o.posterior, o.frames,
                                            o.tflops["total"], o.seconds["probe"] + o.seconds["focus"], scale, o.m_eff,
                                            {"shape": o.shape, "probe_tflops": o.tflops["probe"]}, budget_label(b)))
        if "probe_ensemble" in methods:
            results.append(result("probe_ensemble", range(n), np.log(out.ensemble_posterior), probe.flops, probe.seconds,
                                  probe_scale=scale))
        if "uniform_meff" in methods:
            results.append(focused("uniform_meff", uniform_positions(n, m_eff), probe_scale=scale, m_eff=m_eff))
        if "random_meff" in methods:
            results.append(focused("random_meff", random_positions(n, m_eff, rng), probe_scale=scale, m_eff=m_eff))
        if "encoder_meff" in methods:
            if sims is None:  # frames are encoded once per question, at focus size
                t0 = time.perf_counter()
                sims = encoder_scores(pipe.selector, resize_frames(pool.frames, pipe.focus_size(pool)), question)
                encode_s = time.perf_counter() - t0
            results.append(focused("encoder_meff", top_positions(sims, m_eff), encode_s, probe_scale=scale, m_eff=m_eff))
    return Comparison(question, list(options), list(pool.indices), results, outputs)


def _resolve_methods(pipe: GridProbePipeline, methods: Sequence[str] | None) -> list[str]:
    if methods is None:
        methods = list(METHODS)
        if not callable(getattr(pipe.selector, "encode_text", None)):
            name = type(pipe.selector).__name__
            if name not in _WARNED:
                _WARNED.add(name)
                logger.warning("the selector %s has no encode_text: skipping the encoder_meff baseline", name)
            methods.remove("encoder_meff")
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise InputError("methods", list(methods), f"choose from {list(METHODS)}")
    return list(methods)
