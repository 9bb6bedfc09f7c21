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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.atomic import atomic_path, write_json_atomic
from core.errors import InputError
from pipelines.base import Pipeline, PipelineConfig, PipelineOutput
from pipelines.gridprobe.frames import (VideoInput, check_scale, check_size, fetch_frames, open_frame_source,
                                        resize_frames, scaled_size, thumbnails)
from pipelines.gridprobe.grid import GridLayout
from pipelines.gridprobe.selection import (SELECTORS, TIE_BREAKS, importance_map, select_budget, select_positions,
                                           shape_stats)
from pipelines.gridprobe.viz import frame_strip, heatmap_image
from planners.protocol import OPTION_LETTERS, check_options, format_mcq_prompt, peak_posterior

PROMPT_STYLES = ("default", "videomme_v2", "longvideobench")


@dataclass
class GridProbeConfig(PipelineConfig):
    """Settings of a GridProbe run; saved in ``pipeline.json`` and beside every output.

    Args:
        grid: K, the grid side; the pool holds K² frames and the probes cost 2K passes of K frames.
            Default 12 (the README commands). [PROPOSED] prefer even K: Qwen-VL merges video frames
            in temporal pairs, so an odd K pads every probe with a duplicated last frame (the
            authors only used even K).
        budget_rule: budget rule: ``skew`` (the paper's shape-adaptive rule) or the reference's
            ablations ``pr``, ``mean``, ``otsu``.
        gamma: γ of the ``skew`` rule (scale of S) and the sharpening exponent of ``pr``. Default
            3.0: the value behind the paper's worked examples (the README's 0.25 is never used by
            the released code; see ``pipelines.gridprobe.selection``).
        min_frames, max_frames: clip range of the budget (reference defaults 2 and None = K²).
        tie_break: ``stable`` (the reference ranking) or ``spread`` (tied cells evenly over time;
            our extension).
        probe_scale / probe_size: probe resolution, a fraction of the source side or an explicit
            ``(H, W)``. [DEFAULT 1.0] as in the README runs; the cross-model script probes at 224².
        focus_scale / focus_size: the focused pass's resolution (default: full size).
        prompt_style: ``default`` (lmms-eval wording), ``videomme_v2`` or ``longvideobench`` (spec B.7).
        thumbnail_side: long side of the chosen frames kept in the output for inspection. [DEFAULT 256]
    """

    grid: int = 12
    budget_rule: str = "skew"
    gamma: float = 3.0
    min_frames: int = 2
    max_frames: int | None = None
    tie_break: str = "stable"
    probe_scale: float = 1.0
    probe_size: tuple[int, int] | None = None
    focus_scale: float = 1.0
    focus_size: tuple[int, int] | None = None
    prompt_style: str = "default"
    thumbnail_side: int = 256

    def __post_init__(self):
        # pipeline.json stores tuples as lists
        self.probe_size = tuple(self.probe_size) if self.probe_size is not None else None
        self.focus_size = tuple(self.focus_size) if self.focus_size is not None else None
        self.validate()

    def validate(self) -> None:
        """Raise ``InputError`` naming the first bad field."""
        layout = GridLayout(self.grid)
        if self.budget_rule not in SELECTORS:
            raise InputError("budget_rule", self.budget_rule, f"choose one of {sorted(SELECTORS)} ('skew' is the paper's rule)")
        if self.tie_break not in TIE_BREAKS:
            raise InputError("tie_break", self.tie_break, f"choose one of {TIE_BREAKS}")
        if self.prompt_style not in PROMPT_STYLES:
            raise InputError("prompt_style", self.prompt_style, f"choose one of {PROMPT_STYLES}")
        # the budget helpers own the gamma / min_frames / max_frames rules: ask them on a flat map
        select_budget(self.budget_rule, np.ones(layout.size), self.gamma, self.min_frames, self.max_frames)
        check_scale("probe_scale", self.probe_scale)
        check_scale("focus_scale", self.focus_scale)
        check_size("probe_size", self.probe_size)
        check_size("focus_size", self.focus_size)
        if not isinstance(self.thumbnail_side, int) or self.thumbnail_side < 8:
            raise InputError("thumbnail_side", self.thumbnail_side, "use an integer >= 8 pixels")


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
    passes: dict = field(default_factory=dict, repr=False)

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


@dataclass
class GridProbeOutput(PipelineOutput):
    """One answered question.

    ``frames`` are source-video indices (chronological); ``positions`` the same frames as pool
    positions (row-major cells). ``posterior`` holds the focused pass's option probabilities.
    ``tflops`` has ``probe``, ``focus``, ``total``, ``full_frame`` (one pass on all K² frames at
    focus resolution) and ``reduction`` (= full_frame / total); ``seconds`` has ``load`` (frame
    fetch), ``probe``, ``focus`` and ``total`` wall time.
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
    frame_images: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Every field but the pixels, JSON-safe."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("frame_images", "config")}
        return json_safe(out)

    def heatmap(self) -> np.ndarray:
        """The importance map with the chosen cells outlined, as an RGB image."""
        K = len(self.row_conf)
        return heatmap_image(self.importance_map, self.positions, caption=f"{K}x{K} map, M_eff={self.m_eff}")

    def strip(self) -> np.ndarray | None:
        """The chosen frames as one labelled image (None when the output kept no pixels)."""
        if self.frame_images is None or len(self.frame_images) == 0:
            return None
        return frame_strip(self.frame_images, [f"#{i}" for i in self.frames])

    def save(self, directory: str | Path, fps: float | None = None) -> Path:
        """Write ``result.json``, ``config.json``, ``importance_map.png`` and ``selected_frames.png``."""
        from PIL import Image

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(directory / "result.json", self.to_dict())
        if self.config is not None:
            write_json_atomic(directory / "config.json", self.config)
        images = {"importance_map.png": self.heatmap(), "selected_frames.png": self.strip()}
        for name, image in images.items():
            if image is not None:
                with atomic_path(directory / name) as tmp:
                    Image.fromarray(image).save(tmp, format="PNG")
        return directory


def json_safe(value: Any) -> Any:
    """Arrays to lists, numpy scalars to Python numbers, recursively (for JSON and the web)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


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

    component_names = ("selector", "answerer")
    optional_components = ("answerer",)
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
        if isinstance(options, str) or not 2 <= len(options) <= len(OPTION_LETTERS):
            raise InputError("options", options, f"pass a list of 2 to {len(OPTION_LETTERS)} option texts")
        for i, opt in enumerate(options):
            if not isinstance(opt, str) or not opt.strip():
                raise InputError(f"options[{i}]", opt, "every option is a non-empty string")
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
            indices = self.layout.pool_indices(total)
            frames = fetch_frames(source, indices)
        finally:
            if owned:
                source.close()
        return Pool(indices, frames, time.perf_counter() - t0)

    def probe_size(self, pool: Pool, scale: float | None = None) -> tuple[int, int]:
        """The probes' ``(H, W)``: ``probe_size`` if set, else the source size times ``scale`` (default ``probe_scale``)."""
        h, w = pool.frames.shape[1:3]
        if scale is not None:
            return scaled_size(h, w, check_scale("probe_scale", scale))
        return scaled_size(h, w, self.config.probe_scale, self.config.probe_size)

    def focus_size(self, pool: Pool) -> tuple[int, int]:
        h, w = pool.frames.shape[1:3]
        return scaled_size(h, w, self.config.focus_scale, self.config.focus_size)

    # ---- stage 1: probes -----------------------------------------------------------------------

    def run_probes(self, pool: Pool, prompt: str, options: Sequence[str], scale: float | None = None) -> ProbeResult:
        """The 2K posterior probes through the selector (rows first, then columns, as the reference)."""
        t0 = time.perf_counter()
        size = self.probe_size(pool, scale)
        frames = resize_frames(pool.frames, size)
        logps, flops = [], 0.0
        probes = self.layout.probes()
        for probe in self.progress_bar(probes, total=len(probes), desc="GridProbe probes"):
            logps.append(np.asarray(self.selector.option_posterior(frames[list(probe.positions)], prompt, options, relative_times=pool.relative_times(probe.positions))))
            flops += float(self.selector.flops(len(probe.positions), prompt, size))
        K = self.config.grid
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
                 output_frames: bool = True) -> GridProbeOutput:
        """Answer ``question`` about ``video`` (a path, ``Video``, uint8 array or frame source).

        ``subtitles`` go into the prompt for the benchmark prompt styles. ``output_frames=False``
        leaves ``frame_images`` empty (batch runs that only need the answer).
        """
        self.check_inputs(question, options)
        t0 = time.perf_counter()
        prompt = self.prompt(question, options, subtitles)
        pool = self.load_pool(video)
        probe = self.run_probes(pool, prompt, options)
        return self.finish(pool, probe, question, options, prompt, output_frames=output_frames, started=t0)

    def finish(self, pool: Pool, probe: ProbeResult, question: str, options: Sequence[str], prompt: str, *,
               output_frames: bool = True, started: float | None = None) -> GridProbeOutput:
        """Budget, frame choice and focused pass on top of finished probes (shared with the baselines)."""
        importance = probe.importance_map
        m_eff, positions = self.choose(importance)
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
            shape=dataclasses.asdict(shape_stats(importance)),
            ensemble_answer=letters[int(np.argmax(ensemble))], ensemble_posterior=np.exp(ensemble),
            tflops={"probe": probe.flops / 1e12, "focus": focus_flops / 1e12, "total": total / 1e12,
                    "full_frame": full / 1e12, "reduction": full / total if total > 0 else float("nan")},
            seconds={"load": pool.seconds, "probe": probe.seconds, "focus": focus_s, "total": total_s},
            frame_images=images, config=dataclasses.asdict(self.config),
        )  # fmt: skip


__all__ = ["GridProbeConfig", "GridProbeOutput", "GridProbePipeline", "Pool", "ProbeResult", "json_safe"]
