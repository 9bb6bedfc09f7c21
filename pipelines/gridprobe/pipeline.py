"""GridProbePipeline: long-video multiple-choice QA that picks its own frames (specs/gridprobe.md).

check_inputs -> load the pool -> 2K probes -> importance map -> budget -> focused pass:

1. fetch K² uniformly spaced frames (one ``get_frames`` call) and lay them out row-major on a K×K grid;
2. run K row probes and K column probes (K frames each, at ``probe_scale``) through the
   *selector* VLM and read each pass's peak posterior over the answer letters;
3. ``M = R Cᵀ`` scores every frame; a closed-form rule on the shape of M sets the budget M_eff;
4. the top-M_eff frames, back in chronological order, go through the *answerer* VLM once (at
   ``focus_scale``); its option posterior is the answer.

Compute is reported the way the paper does (LM FLOPs only, spec B.8) next to the full-frame
baseline (one answerer pass on all K² frames at focus resolution), plus measured wall time.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.errors import InputError
from core.memory import check_allocation
from pipelines.base import Pipeline, PipelineOutput, json_safe, make_generator, output_field
from pipelines.gridprobe.config import (  # noqa: F401  (the config and slots live torch-free in config.py; importable here too)
    COMPONENT_SPECS,
    PROBE_RESOLUTIONS,
    VLM_LOADER,
    GridProbeConfig,
    ProbeModel,
)
from pipelines.gridprobe.frames import (VideoInput, check_scale, fetch_frames, official_probe_sizes, official_resize,
                                        open_frame_source, resize_frames, scaled_size, thumbnails)
from pipelines.gridprobe.grid import GridLayout
from pipelines.gridprobe.selection import importance_map, select_budget, select_positions, shape_stats
from pipelines.gridprobe.viz import frame_labels, frame_strip, heatmap_image, posterior_chart
from planners.protocol import OPTION_LETTERS, PROMPT_STYLES, check_options, format_mcq_prompt, peak_posterior  # noqa: F401  (PROMPT_STYLES: importable here as before)

MAX_TEXT_CHARS = 2000  # a question or option longer than this is a mistake (a pasted file), not a question


@dataclass
class Pool:
    """The K² frames GridProbe works on: source frame indices and the frames at source resolution.

    ``passes`` memoises answerer passes on this pool, so methods that pick the same frames (say
    GridProbe with M_eff = K² and the full-frame baseline) share one forward; each still reports
    the FLOPs and seconds of running it alone.
    """

    indices: list[int]
    frames: np.ndarray
    seconds: float = 0.0
    fps: float | None = None
    passes: dict = field(default_factory=dict, repr=False)
    grid: int | None = None  # the grid side K this pool was laid out for (smaller than the config's for a short clip)

    @property
    def layout(self) -> GridLayout:
        return GridLayout(self.grid if self.grid is not None else int(round(len(self.indices) ** 0.5)))

    def relative_times(self, positions: Sequence[int]) -> np.ndarray:
        """When the pool frames at ``positions`` were taken, as fractions of the video (the pool spans it
        from its first to its last frame)."""
        idx = np.asarray(self.indices, np.float64)
        return idx[list(positions)] / max(1.0, idx[-1])


@dataclass
class ProbeResult:
    """Stage 1: the option log-posteriors of the K row and K column probes (spec B.6)."""

    row_logp: np.ndarray  # (K, |O|)
    col_logp: np.ndarray  # (K, |O|)
    frame_size: tuple[int, int]
    flops: float
    seconds: float

    @property
    def row_conf(self) -> np.ndarray:
        return np.array([peak_posterior(lp) for lp in self.row_logp])

    @property
    def col_conf(self) -> np.ndarray:
        return np.array([peak_posterior(lp) for lp in self.col_logp])

    @property
    def importance_map(self) -> np.ndarray:
        return importance_map(self.row_conf, self.col_conf)

    @property
    def ensemble_logp(self) -> np.ndarray:
        """The free probe-ensemble baseline: the mean of the 2K log-prob vectors (its argmax is the
        reference's ``ensemble_pred``), renormalised over the options so ``exp`` sums to 1."""
        mean = np.concatenate([self.row_logp, self.col_logp]).mean(axis=0)
        return mean - np.logaddexp.reduce(mean)


@dataclass(repr=False)
class GridProbeOutput(PipelineOutput):
    """One answered question.

    ``frames`` are source-video indices (chronological); ``positions`` the same frames as pool
    positions (row-major cells); ``frame_times`` their times in seconds when the source has a frame
    rate. ``posterior`` holds the focused pass's option probabilities. ``tflops`` has ``probe``,
    ``focus``, ``total``, ``full_frame`` (one pass on all K² frames at focus resolution) and
    ``reduction`` (= full_frame / total: above 1 saves compute, below 1 costs more); ``seconds`` has
    ``load`` (frame fetch), ``probe``, ``focus`` and ``total`` wall time. ``print(output)`` reads
    like ``atelier ask``; ``save(dir)`` writes result.json, config.json, importance_map.png,
    selected_frames.png and posterior.png.
    """

    question: str
    options: list[str]
    answer: str
    answer_index: int
    answer_text: str
    posterior: np.ndarray
    importance_map: np.ndarray
    row_conf: np.ndarray
    col_conf: np.ndarray
    row_pred: list[str]
    col_pred: list[str]
    m_eff: int
    frames: list[int]
    positions: list[int]
    pool: list[int]
    shape: dict
    ensemble_answer: str
    ensemble_posterior: np.ndarray
    tflops: dict
    seconds: dict
    frame_times: list[float] | None = None
    note: str | None = None  # how this run departed from the method, when it did (a short clip answered full-frame)
    frame_images: np.ndarray | None = output_field("none", default=None)

    def heatmap(self) -> np.ndarray:
        """The importance map with the chosen cells outlined, as an RGB image."""
        K = len(self.row_conf)
        return heatmap_image(self.importance_map, self.positions, caption=f"{K}x{K} map, M_eff={self.m_eff}")

    def strip(self) -> np.ndarray | None:
        """The chosen frames as one image, each labelled with its index and, when known, its time
        (``#412  13.7 s``); None when the output kept no pixels."""
        if self.frame_images is None or len(self.frame_images) == 0:
            return None
        return frame_strip(self.frame_images, frame_labels(self.frames, getattr(self, "frame_times", None)))

    def posterior_image(self) -> np.ndarray:
        """The focused pass's option probabilities as a bar chart, the answer's bar highlighted."""
        return posterior_chart(self.options, self.posterior, self.answer_index)

    PICTURES = ('importance_map', 'selected_frames', 'posterior')

    def pictures(self) -> dict[str, np.ndarray | None]:
        return {"importance_map": self.heatmap(), "selected_frames": self.strip(), "posterior": self.posterior_image()}

    def summary(self) -> dict[str, Any]:
        """What a user reads: the answer, its posterior, the chosen frames and the compute against full-frame."""
        letters = OPTION_LETTERS[: len(self.options)]
        return {
            "question": self.question, "answer": self.answer, "answer_text": self.answer_text,
            "posterior": {L: round(float(p), 6) for L, p in zip(letters, self.posterior)},
            "m_eff": int(self.m_eff), "pool_size": len(self.pool), "frames": [int(i) for i in self.frames],
            "frame_times": None if self.frame_times is None else [round(float(t), 3) for t in self.frame_times],
            "ensemble_answer": self.ensemble_answer,
            "tflops": {k: float(v) for k, v in self.tflops.items()},
            "seconds": {k: round(float(v), 4) for k, v in self.seconds.items()},
            **({"note": self.note} if self.note else {}),
        }  # fmt: skip

    def __str__(self) -> str:
        return format_summary(self.summary())


def compute_phrase(reduction: float) -> str:
    """``1.89x less`` / ``1.25x more`` / ``the same``: a ratio read the way it is meant."""
    if not np.isfinite(reduction):
        return "ratio unknown"
    if abs(reduction - 1) < 0.005:
        return "about the same"
    return f"{reduction:.2f}x less" if reduction > 1 else f"{1 / reduction:.2f}x more"


def format_summary(s: dict) -> str:
    """The human-readable form of ``GridProbeOutput.summary()``."""
    t = s["tflops"]
    post = " | ".join(f"{L} {p:.3f}" for L, p in s["posterior"].items())
    times = f" at {', '.join(f'{x:.1f}' for x in s['frame_times'])} s" if s.get("frame_times") else ""
    lines = [
        f"answer: {s['answer']}. {s['answer_text']}  (p = {s['posterior'][s['answer']]:.3f})",
        f"posterior: {post}",
        f"frames: {s['m_eff']} of {s['pool_size']} (M_eff) -> {s['frames']}{times}",
        f"compute: {t['total']:.4g} TFLOPs (probes {t['probe']:.4g} + focus {t['focus']:.4g}) vs full-frame "
        f"{t['full_frame']:.4g} TFLOPs: {compute_phrase(t['reduction'])}",
        f"probe ensemble answer: {s['ensemble_answer']}",
        f"time: {s['seconds']['total']:.2f} s (probes {s['seconds']['probe']:.2f} s, focus {s['seconds']['focus']:.2f} s)",
    ]
    if s.get("note"):
        lines.append(f"note: {s['note']}")
    if s.get("files"):
        lines.append("saved: " + ", ".join(s["files"].values()))
    return "\n".join(lines)


class GridProbePipeline(Pipeline):
    """GridProbe with a *selector* VLM for the probes and an optional *answerer* for the focused pass.

    Components: ``selector`` (any ``planners.protocol.VisionLanguageModel``) and ``answerer``
    (another VLM, or None to answer with the selector). The paper's cross-model setting is a small
    selector and a larger answerer.

    Example:
        >>> vlm = HFVisionLanguageModel.from_pretrained("Qwen/Qwen3-VL-2B-Instruct")
        >>> pipe = GridProbePipeline(GridProbeConfig(grid=12), selector=vlm)
        >>> out = pipe("talk.mp4", "What does the speaker hold?", ["a pen", "a cup", "a phone", "nothing"])
        >>> out.answer, out.m_eff, out.tflops["reduction"]
    """

    component_specs = COMPONENT_SPECS
    config_class = GridProbeConfig

    def __init__(self, config: GridProbeConfig | None = None, *, selector: Any, answerer: Any | None = None):
        if answerer is selector:
            answerer = None  # one model: save it once
        super().__init__(config, selector=selector, answerer=answerer)

    @property
    def qa(self) -> Any:
        """The model that answers: the answerer when there is one, else the selector."""
        return self.answerer if self.answerer is not None else self.selector

    @property
    def layout(self) -> GridLayout:
        return GridLayout(self.config.grid)

    # ---- check_inputs ---------------------------------------------------------------------------

    def check_inputs(self, question: str, options: Sequence[str]) -> None:
        """Validate the question, the options and the config before any frame is read."""
        if not isinstance(question, str) or not question.strip():
            raise InputError("question", question, "pass the question as a non-empty string")
        if len(question) > MAX_TEXT_CHARS:
            raise InputError("question", f"{len(question)} characters", f"keep it under {MAX_TEXT_CHARS} characters (it would not fit a model's prompt)")
        if isinstance(options, str) or not hasattr(options, "__len__") or not 2 <= len(options) <= len(OPTION_LETTERS):
            raise InputError("options", options, f"pass a list of 2 to {len(OPTION_LETTERS)} option texts")
        for i, opt in enumerate(options):
            if not isinstance(opt, str) or not opt.strip():
                raise InputError(f"options[{i}]", opt, "every option is a non-empty string")
            if len(opt) > MAX_TEXT_CHARS:
                raise InputError(f"options[{i}]", f"{len(opt)} characters", f"keep each option under {MAX_TEXT_CHARS} characters")
        seen = [o.strip().casefold() for o in options]
        dupes = sorted({o for o in options if seen.count(o.strip().casefold()) > 1})
        if dupes:
            raise InputError("options", dupes, "each option must differ from the others; remove the duplicates")
        self.config.validate()
        if self.selector is None:
            raise InputError("selector", None, "GridProbe needs a selector VLM")

    def prompt(self, question: str, options: Sequence[str], subtitles: str | None = None) -> str:
        """The MCQ prompt every pass sees (``config.prompt_style``)."""
        return format_mcq_prompt(question, options, style=self.config.prompt_style, subtitles=subtitles)

    # ---- stage 0: the pool ---------------------------------------------------------------------

    def load_pool(self, video: VideoInput) -> Pool:
        """The K² pool frames, fetched with one ``get_frames`` call (no other frame is decoded)."""
        t0 = time.perf_counter()
        source, owned = open_frame_source(video)
        try:
            total = len(source)
            if total < 1:
                raise InputError("video", f"{total} frames", "the video has no frames")
            grid = self.grid_for(total)
            indices = GridLayout(grid).pool_indices(total)
            self.check_pool_memory(source, len(indices))
            frames = fetch_frames(source, indices)
            fps = getattr(source, "fps", None)
        finally:
            if owned:
                source.close()
        fps = float(fps) if isinstance(fps, (int, float)) and fps > 0 else None
        return Pool(indices, frames, time.perf_counter() - t0, fps=fps, grid=grid)

    def grid_for(self, total: int) -> int:
        """The grid side for a clip of ``total`` frames: the config's K, or for a clip shorter than its K² pool the
        largest K whose pool holds no frame twice (``short_clips="shrink"`` [PROPOSED]; the reference repeats
        frames, ``"repeat"``), at least 2."""
        K = self.config.grid
        if self.config.short_clips == "repeat" or total >= K * K:
            return K
        return max(2, math.isqrt(total))

    def check_pool_memory(self, source: Any, n: int) -> None:
        """Refuse a pool whose frames would not fit in memory, before decoding any (K² frames at
        source size; a 4K video at K = 32 needs ~25 GB). Sources without a known ``size`` pass."""
        size = getattr(source, "size", None)
        if not (isinstance(size, tuple) and len(size) == 2):
            return
        check_allocation("grid", self.config.grid, n * int(size[0]) * int(size[1]) * 3,
                         f"the pool holds {n} frames of {size[1]}x{size[0]}: use a smaller grid")

    def probe_size(self, pool: Pool, scale: float | tuple[float, float] | None = None) -> tuple[int, int]:
        """The probes' ``(H, W)``: with ``scale`` (one fraction, or a (height, width) pair) the source size times it;
        else, per ``probe_resolution``, ``probe_size`` if set or the source size times ``probe_height_scale`` /
        ``probe_scale`` (``scale``), or the official size."""
        h, w = pool.frames.shape[1:3]
        if scale is not None:
            return scaled_size(h, w, check_scale("probe_scale", scale))
        if self.config.probe_resolution != "scale":
            return self.official_probe_steps(pool)[-1]
        c = self.config
        return scaled_size(h, w, (c.probe_height_scale or c.probe_scale, c.probe_scale), c.probe_size)

    def official_probe_steps(self, pool: Pool) -> list[tuple[int, int]]:
        """qwen-vl-utils' resize steps for a K-frame probe at ``probe_resolution``, for the selector's patch
        size (the official passes the processor's; a selector without one gets qwen-vl-utils' default 14)."""
        h, w = pool.frames.shape[1:3]
        patch = getattr(self.selector, "vision_patch_size", None)
        return official_probe_sizes(h, w, pool.layout.K, self.config.probe_resolution, patch)

    def probe_frames(self, pool: Pool, scale: float | tuple[float, float] | None = None) -> np.ndarray:
        """All pool frames at probe resolution (``official_resize`` for the official resolutions)."""
        if scale is None and self.config.probe_resolution != "scale":
            return official_resize(pool.frames, self.official_probe_steps(pool))
        return resize_frames(pool.frames, self.probe_size(pool, scale))

    def focus_size(self, pool: Pool) -> tuple[int, int]:
        h, w = pool.frames.shape[1:3]
        return scaled_size(h, w, self.config.focus_scale, self.config.focus_size)

    # ---- stage 1: probes -----------------------------------------------------------------------

    def run_probes(self, pool: Pool, prompt: str, options: Sequence[str], scale: float | tuple[float, float] | None = None,
                   callback: Callable | None = None) -> ProbeResult:
        """The 2K posterior probes through the selector (rows first, then columns, as the reference);
        ``callback(pipe, step, info)`` after each."""
        t0 = time.perf_counter()
        size = self.probe_size(pool, scale)
        frames = self.probe_frames(pool, scale)
        logps, flops = [], 0.0
        probes = pool.layout.probes()
        K = pool.layout.K
        per_forward = self.config.probe_batch or K
        batched = getattr(self.selector, "option_posteriors", None) if per_forward > 1 else None
        bar = self.progress_bar(total=len(probes), desc="GridProbe probes")
        try:
            step = per_forward if batched else 1
            # rows, then columns: a batch never mixes the two
            for chunk in (axis[i:i + step] for axis in (probes[:K], probes[K:]) for i in range(0, K, step)):
                clips = [frames[list(p.positions)] for p in chunk]
                times = [pool.relative_times(p.positions) for p in chunk]
                if batched:
                    out = np.asarray(batched(clips, prompt, options, relative_times=times))
                else:
                    out = np.asarray(self.selector.option_posterior(clips[0], prompt, options, relative_times=times[0]))[None]
                for probe, logp in zip(chunk, out):
                    logps.append(logp)
                    flops += float(self.selector.flops(len(probe.positions), prompt, size))
                    self.step_end(callback, len(logps) - 1, {"stage": "probe", "axis": probe.axis, "index": probe.index,
                                                             "total_steps": len(probes), "peak_posterior": peak_posterior(logp)})
                    bar.update(1)
        finally:
            bar.close()
        return ProbeResult(np.stack(logps[:K]), np.stack(logps[K:]), size, flops, time.perf_counter() - t0)

    # ---- stage 2: budget and frames --------------------------------------------------------------

    def choose(self, importance: np.ndarray) -> tuple[int, list[int]]:
        """``(M_eff, chronological pool positions)`` for an importance map."""
        c = self.config
        m_eff = select_budget(c.budget_rule, importance, c.gamma, c.min_frames, c.max_frames)
        return m_eff, select_positions(importance, m_eff, c.tie_break)

    # ---- stage 3: the focused pass ---------------------------------------------------------------

    def answer_positions(self, pool: Pool, positions: Sequence[int], prompt: str, options: Sequence[str],
                         model: Any | None = None) -> tuple[np.ndarray, float, float]:
        """One pass of ``model`` (default: the answerer) on the pool frames at ``positions``, at focus size.

        Returns ``(log-posterior, FLOPs, seconds)``.
        """
        model = model if model is not None else self.qa
        size = self.focus_size(pool)
        key = (id(model), tuple(int(p) for p in positions), size, prompt, tuple(options))
        if key not in pool.passes:
            t0 = time.perf_counter()
            frames = resize_frames(pool.frames[list(positions)], size)
            logp = np.asarray(model.option_posterior(frames, prompt, options, relative_times=pool.relative_times(positions)))
            pool.passes[key] = (logp, float(model.flops(len(positions), prompt, size)), time.perf_counter() - t0)
        return pool.passes[key]

    def full_frame_flops(self, pool: Pool, prompt: str) -> float:
        """LM FLOPs of the monolithic baseline: one answerer pass on all K² frames at focus size."""
        return float(self.qa.flops(len(pool.indices), prompt, self.focus_size(pool)))

    # ---- the whole run ---------------------------------------------------------------------------

    @torch.no_grad()
    def __call__(self, video: VideoInput, question: str, options: Sequence[str], *, subtitles: str | None = None,
                 output_frames: bool = True, generator: torch.Generator | int | None = None,
                 callback_on_step_end: Callable | None = None, output_type: str = "np") -> GridProbeOutput:
        """Answer ``question`` about ``video`` (a path, ``Video``, uint8 array or frame source).

        ``subtitles`` go into the prompt for the benchmark prompt styles. ``output_frames=False``
        leaves ``frame_images`` empty (batch runs that only need the answer). GridProbe draws no
        random numbers: ``generator`` is accepted for the shared call contract and checked, and the
        answer is the same for any. ``callback_on_step_end(pipe, step, info)`` runs after each of
        the 2K probes; ``pipe.interrupt()`` stops at the next one. ``output_type``: ``np``, ``pil``
        or ``pt`` for the kept frames.
        """
        self._begin_call()
        make_generator(generator)
        self.check_inputs(question, options)
        t0 = time.perf_counter()
        prompt = self.prompt(question, options, subtitles)
        pool = self.load_pool(video)
        if self.probing_costs_more(pool, prompt):
            probe = self.no_probes(pool, options)
            out = self.finish(pool, probe, question, options, prompt, output_frames=output_frames, started=t0, positions=range(len(pool.indices)))
            out.note = (f"the clip's {len(pool.indices)} frames cost less in one full-frame pass than probed (short_clips='shrink'): "
                        "answered from all of them")
            return out.convert(output_type)
        probe = self.run_probes(pool, prompt, options, callback=callback_on_step_end)
        out = self.finish(pool, probe, question, options, prompt, output_frames=output_frames, started=t0)
        return out.convert(output_type)

    def probing_costs_more(self, pool: Pool, prompt: str) -> bool:
        """For a short clip's shrunk grid (``short_clips="shrink"``), whether the 2K probes plus the largest focused pass
        the budget allows would cost more LM FLOPs than one pass on the whole pool. A full pool is the method's own
        trade, left to its settings."""
        if self.config.short_clips != "shrink" or pool.layout.K >= self.config.grid:
            return False
        K, n = pool.layout.K, len(pool.indices)
        probes = 2 * K * float(self.selector.flops(K, prompt, self.probe_size(pool)))
        most = min(n, self.config.max_frames or n)
        focus = float(self.qa.flops(most, prompt, self.focus_size(pool)))
        return probes + focus > self.full_frame_flops(pool, prompt)

    @staticmethod
    def no_probes(pool: Pool, options: Sequence[str]) -> ProbeResult:
        """The probe stage of a run that skipped it: uniform posteriors, no FLOPs, so every frame is equally important."""
        K = pool.layout.K
        flat = np.full((K, len(options)), -math.log(len(options)))
        return ProbeResult(flat, flat.copy(), pool.frames.shape[1:3], 0.0, 0.0)

    def finish(self, pool: Pool, probe: ProbeResult, question: str, options: Sequence[str], prompt: str, *,
               output_frames: bool = True, started: float | None = None, positions: Sequence[int] | None = None) -> GridProbeOutput:
        """Budget, frame choice and focused pass on top of finished probes (shared with the baselines); ``positions``
        given: those frames, without the budget rule."""
        importance = probe.importance_map
        if positions is None:
            m_eff, positions = self.choose(importance)
        else:
            positions = [int(p) for p in positions]
            m_eff = len(positions)
        logp, focus_flops, focus_s = self.answer_positions(pool, positions, prompt, options)
        letters = check_options(options)
        k = int(np.argmax(logp))
        full = self.full_frame_flops(pool, prompt)
        total = probe.flops + focus_flops
        ensemble = probe.ensemble_logp
        images = None
        if output_frames:
            size = self.focus_size(pool)
            images = thumbnails(resize_frames(pool.frames[positions], size), self.config.thumbnail_side)
        total_s = (time.perf_counter() - started) if started is not None else pool.seconds + probe.seconds + focus_s
        return GridProbeOutput(
            question=question, options=list(options), answer=letters[k], answer_index=k, answer_text=options[k],
            posterior=np.exp(logp), importance_map=importance, row_conf=probe.row_conf, col_conf=probe.col_conf,
            row_pred=[letters[int(i)] for i in probe.row_logp.argmax(axis=1)],
            col_pred=[letters[int(i)] for i in probe.col_logp.argmax(axis=1)],
            m_eff=m_eff, frames=[pool.indices[p] for p in positions], positions=positions, pool=list(pool.indices),
            frame_times=None if pool.fps is None else [pool.indices[p] / pool.fps for p in positions],
            shape=dataclasses.asdict(shape_stats(importance)),
            ensemble_answer=letters[int(np.argmax(ensemble))], ensemble_posterior=np.exp(ensemble),
            tflops={"probe": probe.flops / 1e12, "focus": focus_flops / 1e12, "total": total / 1e12,
                    "full_frame": full / 1e12, "reduction": full / total if total > 0 else float("nan")},
            seconds={"load": pool.seconds, "probe": probe.seconds, "focus": focus_s, "total": total_s},
            frame_images=images, config={**dataclasses.asdict(self.config), "vlm_inputs": self.vlm_inputs(pool, probe, len(positions))},
        )  # fmt: skip

    def vlm_inputs(self, pool: Pool, probe: ProbeResult, focus_frames: int) -> dict:
        """What reached the VLMs, as Atelier decided it (recorded in the output's config): the probes' count, frames and
        size (``probe.size``), the focused pass's frames and size, and the frame rate each video was declared at
        (None: undeclared, as the official code leaves it)."""
        def fps(model: Any) -> float | None:
            return getattr(model, "video_fps", None)

        return {"probes": 0 if probe.flops == 0 else 2 * pool.layout.K, "frames_per_probe": pool.layout.K,
                "probe_size": [int(v) for v in probe.frame_size], "focus_frames": int(focus_frames),
                "focus_size": [int(v) for v in self.focus_size(pool)], "selector_video_fps": fps(self.selector),
                "answerer_video_fps": fps(self.qa)}


__all__ = ["GridProbeConfig", "GridProbeOutput", "GridProbePipeline", "Pool", "ProbeResult", "json_safe", "format_summary", "compute_phrase"]
