"""GridProbe's settings and component slots, without torch (``pipelines.config``): what ``atelier ask`` builds its
options from and checks its arguments against before a model loads. ``pipelines.gridprobe.pipeline`` re-exports
every name here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from core.errors import InputError
from pipelines.config import ComponentSpec, PipelineConfig, setting
from pipelines.gridprobe.frames import OFFICIAL_PROBE_PIXELS, check_scale, check_size
from pipelines.gridprobe.grid import GridLayout
from pipelines.gridprobe.selection import SELECTORS, TIE_BREAKS, select_budget

PROBE_RESOLUTIONS = ("scale",) + tuple(OFFICIAL_PROBE_PIXELS)
VLM_LOADER = "planners.loading:load_vlm"
# = planners.protocol.PROMPT_STYLES (that module imports torch; tests/test_cold_start.py keeps the two equal)
PROMPT_STYLES = ("default", "videomme", "videomme_v2", "longvideobench")


@runtime_checkable
class ProbeModel(Protocol):
    """What GridProbe needs of a VLM (a slice of ``planners.protocol.VisionLanguageModel``): option
    posteriors of a pass, and its analytic FLOPs for the compute accounting."""

    def option_posterior(self, frames: np.ndarray, prompt: str, options: Sequence[str], relative_times: Sequence[float] | None = None) -> np.ndarray: ...

    def flops(self, n_frames: int, prompt: str, frame_size: tuple[int, int] | None = None) -> float: ...


@dataclass
class GridProbeConfig(PipelineConfig):
    """Settings of a GridProbe run; saved in ``pipeline.json`` and beside every output.

    Each field's metadata (help, choices, range) is what ``atelier ask --help``, batch manifests and
    the web tab show, so a new setting is declared once, here.

    Args:
        grid: K, the grid side; the pool holds K² frames and the probes cost 2K passes of K frames.
            Default 12 (the README commands). [PROPOSED] prefer even K: Qwen-VL merges video frames
            in temporal pairs, so an odd K pads every probe with a duplicated last frame (the
            authors only used even K).
        budget_rule: ``skew`` (the paper's shape-adaptive rule) or the reference's ablations
            ``pr``, ``mean``, ``otsu``.
        gamma: γ of the ``skew`` rule (scale of S) and the sharpening exponent of ``pr``. Default
            3.0: the value behind the paper's worked examples (the README's 0.25 is never used by
            the released code; see ``pipelines.gridprobe.selection``).
        min_frames, max_frames: clip range of the budget. ``min_frames`` 2 as the reference; ``max_frames`` 32
            where the reference leaves it at K² (None): the measured Pareto pick (``benchmarks.gridprobe.default_rule``:
            of the settings within 1 pp of full-frame on questions 0-499, the one saving the most TFLOPs; at K = 12 and
            1/2-scale probes it keeps full-frame accuracy at 2.46x fewer TFLOPs where K² gives 1.90x).
        tie_break: ``stable`` (the reference ranking) or ``spread`` (tied cells evenly over time;
            our extension).
        probe_scale / probe_size: probe resolution, a fraction of the source side or an explicit
            ``(H, W)``. Default 0.5: the measured Pareto point (docs/BENCHMARKS.md: at 1/2 the
            builtin model gains accuracy at 1.89x less compute than full-frame, while full-size
            probes cost more than the full-frame pass itself); the paper's README runs use 1.0.
        probe_height_scale: the probes' height as a fraction of the source height, when it differs from
            ``probe_scale`` (which then scales the width) [PROPOSED; the reference's probes keep the aspect]: a
            squashed probe frame costs fewer tokens (the builtin VLM reads 16 px cells, so at 64 px its frames cost
            16, 4 or 1 tokens square, and 2 at 1/4 x 1/2). Default 0.25: the measured Pareto pick (1/4 x 1/2 probes
            keep full-frame accuracy at 3.46x fewer TFLOPs on 1,000 questions, square 1/2 probes 2.45x); None gives
            square probes.
        probe_resolution: ``scale`` (ours: ``probe_scale`` / ``probe_size`` with INTER_AREA), or the
            official scripts' probe resolution, computed and resized the way qwen-vl-utils does
            (``pipelines.gridprobe.frames.official_probe_sizes``) for the selector's patch size:
            ``official`` = eval/two_stage_eval.py (``--max_video_pixels_probe 0``: qwen-vl-utils'
            default video budget, aspect kept) and ``official_crossmodel`` =
            eval/two_stage_eval_crossmodel.py (50176 px: a 224x224 square, aspect not kept);
            ``probe_scale`` / ``probe_size`` are then unused.
        probe_batch: probes per forward for a selector with ``option_posteriors`` (the builtin and hf VLMs): the
            default None batches a whole row, then a whole column (K probes of K frames: the pool's size again);
            1 runs them one at a time, as the reference. The posteriors are the same up to float rounding
            (each probe's prompt and frame count are equal, so no padding), only the wall time changes.
        focus_scale / focus_size: the focused pass's resolution (default: full size).
        prompt_style: ``default`` (ours, lmms-eval wording), or the official code's ``videomme``
            (Video-MME v1), ``videomme_v2`` or ``longvideobench`` prompt, character for character
            (``planners.protocol.format_mcq_prompt``).
        thumbnail_side: long side of the chosen frames kept in the output for inspection. [DEFAULT 256]
    """

    grid: int = setting(12, help="grid side K: K² frames in the pool, 2K probes", range=(2, 32), flag="-K")
    # [PROPOSED] shrink: a clip shorter than K² frames gets the largest grid without repeated frames, and where probing
    # would cost more than one pass on every frame, that one pass (said in the output); the reference repeats frames
    short_clips: str = setting("shrink", help="a clip with fewer than K² frames: 'shrink' the grid so no frame repeats (and answer from "
                                              "one full-frame pass where probing would cost more), or 'repeat' frames as the reference does",
                               choices=("shrink", "repeat"))
    budget_rule: str = setting("skew", help="how many frames the focused pass gets ('skew' is the paper's rule)", choices=tuple(SELECTORS))
    gamma: float = setting(3.0, help="gamma of the budget rule", range=(1e-6, 100.0))
    min_frames: int = setting(2, help="fewest frames for the focused pass", range=(1, None))
    # 32: benchmarks.gridprobe's default_rule on questions 0-499 (docs/BENCHMARKS.md, "GridProbe"); the reference's is K²
    max_frames: int | None = setting(32, help="most frames for the focused pass (None: K², the reference's)", range=(1, None))
    tie_break: str = setting("stable", help="order of equally important frames ('stable' is the reference's)", choices=TIE_BREAKS)
    probe_scale: float = setting(0.5, help="probe resolution as a fraction of the source side, in (0, 1]", range=(1e-3, 1.0))
    # [PROPOSED] 0.25: benchmarks.gridprobe's default_rule on questions 0-499 (docs/BENCHMARKS.md, "GridProbe"); None: square
    # probes, as the reference's
    probe_height_scale: float | None = setting(0.25, help="probes' height as a fraction of the source height (equal to probe_scale or "
                                                          "None: square probes, the reference's); below probe_scale a probe frame is "
                                                          "squashed: fewer tokens per probe",
                                               range=(1e-3, 1.0))
    probe_size: tuple[int, int] | None = setting(None, help="probe size (H, W) in pixels; overrides probe_scale")
    probe_resolution: str = setting("scale", help="'scale' (probe_scale / probe_size) or the official scripts' probe resolution",
                                    choices=PROBE_RESOLUTIONS)
    probe_batch: int | None = setting(None, help="probes per forward where the selector batches them (default K: a whole row, then a whole column; "
                                                  "1: one at a time, as the reference)", range=(1, None))
    focus_scale: float = setting(1.0, help="focused-pass resolution as a fraction of the source side", range=(1e-3, 1.0))
    focus_size: tuple[int, int] | None = setting(None, help="focused-pass size (H, W) in pixels; overrides focus_scale")
    prompt_style: str = setting("default", help="MCQ prompt wording (default: lmms-eval's; others: the official benchmark prompts)", choices=PROMPT_STYLES)
    thumbnail_side: int = setting(256, help="long side in pixels of the chosen frames kept in the output", range=(8, 4096))

    def __post_init__(self):
        # pipeline.json stores tuples as lists
        self.probe_size = tuple(self.probe_size) if isinstance(self.probe_size, list) else self.probe_size
        self.focus_size = tuple(self.focus_size) if isinstance(self.focus_size, list) else self.focus_size
        self.validate()

    def validate(self) -> None:
        """Raise ``InputError`` naming the first bad field."""
        self.check_fields()  # types first: the rules below compare and compute with the values
        layout = GridLayout(self.grid)
        # the budget helpers own the gamma / min_frames / max_frames rules: ask them on a flat map
        select_budget(self.budget_rule, np.ones(layout.size), self.gamma, self.min_frames, self.max_frames)
        check_scale("probe_scale", self.probe_scale)
        if self.probe_height_scale is not None:
            check_scale("probe_height_scale", self.probe_height_scale)
        check_scale("focus_scale", self.focus_scale)
        check_size("probe_size", self.probe_size)
        check_size("focus_size", self.focus_size)
        if not isinstance(self.thumbnail_side, int) or self.thumbnail_side < 8:
            raise InputError("thumbnail_side", self.thumbnail_side, "use an integer >= 8 pixels")


# GridProbePipeline.component_specs: each slot's protocol, loader and help, in order
COMPONENT_SPECS = {
    "selector": ComponentSpec(ProbeModel, VLM_LOADER, help="VLM for the 2K probes"),
    "answerer": ComponentSpec(ProbeModel, VLM_LOADER, optional=True, help="VLM for the focused pass (default: the selector)"),
}
