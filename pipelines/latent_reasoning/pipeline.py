"""LatentReasoningPipeline: a multiple-choice question about a large image, answered after K latent slots
(specs/gelvr.md B.1, B.5).

image + question + options -> the reasoner emits ``<start>``, K slots are forced (each slot's input is the
previous position's last hidden state, its mean direction at inference), ``<end>`` is forced -> the answer
posterior over the options. For each slot, where it looks: the slot-to-image map over the image's token grid
(a reasoner over object tokens paints each object's weight over the cells of its box); the region the slots
found is the box around the cells holding most of their mean map, shown enlarged:

    pipe = LatentReasoningPipeline.build(components={"reasoner": "builtin"})
    out = pipe("scene.png", "What colour is the small star right of the large triangle?", ["red", "blue", "green", "white"])
    out.answer, out.posterior, out.slots, out.attention, out.region, out.picture()

Slot: ``reasoner`` (``planners.latent``: the builtin reasoner trained on worldgen ``spatial``, or a transformers
VLM such as Qwen2.5-VL with the latent-slot tokens added). Deterministic: no randomness is drawn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pipelines.base import Pipeline, PipelineOutput, output_field
from pipelines.latent_reasoning.config import (  # noqa: F401  (the config and slot live torch-free in config.py; importable here too)
    COMPONENT_SPECS,
    LatentReasoningConfig,
    ReasonerSlot,
)
from planners.latent import MAX_SLOTS  # noqa: F401  (importable here as before; config.py repeats it without torch)

MAX_PIXELS = 4096 * 4096


@dataclass(repr=False)
class LatentReasoningOutput(PipelineOutput):
    """``answer`` (an option) with its ``posterior`` over the options; ``slots`` ``(K, d)`` the fed-back slot vectors;
    ``attention`` ``(K, gh, gw)`` each slot's map over the image's token grid; ``peaks`` per slot the cell it looks at
    most (its box in image pixels and its weight); ``region`` the box the slots found (xyxy pixels); ``started``
    whether the reasoner emitted ``<start>`` itself."""

    question: str
    options: list
    answer: str
    answer_index: int
    posterior: dict
    num_slots: int
    started: bool
    peaks: list
    region: list
    seconds: dict
    image: np.ndarray = output_field("none")
    slots: np.ndarray = output_field("npy")
    attention: np.ndarray = output_field("npy")

    def picture(self) -> np.ndarray:
        """The image with each slot's map, side by side, and the zoomed region (one RGB picture)."""
        from pipelines.latent_reasoning.viz import slots_picture

        return slots_picture(self)

    def zoom(self) -> np.ndarray:
        from pipelines.latent_reasoning.viz import zoom

        return zoom(self.image, self.region)

    def overlays(self) -> list[np.ndarray]:
        from pipelines.latent_reasoning.viz import overlay

        return [overlay(self.image, a) for a in self.attention]

    PICTURES = ('slots', 'zoom')

    def pictures(self) -> dict[str, np.ndarray | None]:
        return {"slots": self.picture(), "zoom": self.zoom()}

    def summary(self) -> dict[str, Any]:
        return {"question": self.question, "options": self.options, "answer": self.answer, "answer_index": self.answer_index,
                "posterior": {k: round(float(v), 4) for k, v in self.posterior.items()}, "num_slots": self.num_slots,
                "started": self.started, "peaks": self.peaks, "region": self.region,
                "seconds": {k: round(float(v), 3) for k, v in self.seconds.items()}, "config": self.config}

    def __str__(self) -> str:
        return f"{self.answer} (p = {self.posterior[self.answer]:.2f}) after {self.num_slots} latent slots"


def cell_box(row: int, col: int, grid: tuple[int, int], shape: tuple[int, ...]) -> list[float]:
    gh, gw = grid
    h, w = shape[:2]
    return [round(col * w / gw, 1), round(row * h / gh, 1), round((col + 1) * w / gw, 1), round((row + 1) * h / gh, 1)]


def found_region(attention: np.ndarray, shape: tuple[int, ...], mass: float) -> list[float]:
    """The box (xyxy pixels) around the fewest cells holding ``mass`` of the slots' mean map, one cell of margin."""
    if not len(attention):
        return [0.0, 0.0, float(shape[1]), float(shape[0])]
    m = attention.mean(0)
    gh, gw = m.shape
    order = np.argsort(-m, axis=None)
    k = int(np.searchsorted(np.cumsum(m.ravel()[order]) / m.sum(), mass) + 1)
    rows, cols = np.unravel_index(order[:k], m.shape)
    r0, r1 = max(0, rows.min() - 1), min(gh - 1, rows.max() + 1)
    c0, c1 = max(0, cols.min() - 1), min(gw - 1, cols.max() + 1)
    a, b = cell_box(r0, c0, (gh, gw), shape), cell_box(r1, c1, (gh, gw), shape)
    return [float(a[0]), float(a[1]), float(b[2]), float(b[3])]


class LatentReasoningPipeline(Pipeline):
    component_specs = COMPONENT_SPECS
    config_class = LatentReasoningConfig

    def __call__(self, image: Any, question: str, options: list[str], *, generator: Any = None,
                 callback_on_step_end: Callable | None = None, output_type: str = "np") -> LatentReasoningOutput:
        """Answer ``question`` about ``image`` (a path or RGB uint8 ``(H, W, 3)``) by choosing one of ``options``.
        ``generator`` is accepted for the shared signature; the call draws no randomness."""
        from core.video import read_still
        from planners.latent import check_question

        self._begin_call()
        t0 = time.perf_counter()
        question, options = check_question(question, options)
        image = read_still(image, MAX_PIXELS)
        c = self.config
        t1 = time.perf_counter()
        ans = self.reasoner.answer(image, question, options, num_slots=c.num_slots, tau=c.tau)
        t2 = time.perf_counter()
        self.step_end(callback_on_step_end, 0, {"stage": "answer", "answer": ans.answer})
        peaks = []
        for k, a in enumerate(ans.attention):
            r, col = np.unravel_index(int(a.argmax()), a.shape)
            peaks.append({"slot": k + 1, "cell": [int(r), int(col)], "box": cell_box(int(r), int(col), ans.grid, image.shape),
                          "weight": round(float(a.max()), 4)})
        out = LatentReasoningOutput(
            question=question, options=options, answer=ans.answer, answer_index=ans.index,
            posterior={o: float(p) for o, p in zip(options, ans.posterior)}, num_slots=len(ans.slots), started=ans.started,
            peaks=peaks, region=found_region(ans.attention, image.shape, c.region_mass),
            seconds={"inputs": t1 - t0, "reason": t2 - t1, "total": time.perf_counter() - t0},
            image=image, slots=ans.slots, attention=ans.attention, config=asdict(c))
        return out.convert(output_type)
