"""Candidate proposers on real SAM checkpoints (CLEAR B.2): SAM 2 automatic masks and SAM 3 concepts.

    auto = Sam2AutoMaskProposer.from_pretrained("facebook/sam2.1-hiera-tiny")
    cands = auto.propose(frame)                     # every object-like region, no phrase needed
    concept = Sam3ConceptProposer.from_pretrained("facebook/sam3")
    cands = concept.propose(frame, "dog")           # every instance of the phrase

Both meet ``trackers.proposals.Proposer`` and return ``Candidate`` lists cleaned up by that module's
``select`` (size filter, mask NMS, the best ``max_candidates``, ids 1..N by score), with spec B.2's
defaults as ``ColourProposer`` has them.

SAM 2 automatic masks follow SAM 2's ``SAM2AutomaticMaskGenerator`` on a single crop: a
``points_per_side`` x ``points_per_side`` grid of single positive points over the frame, three
masks per point (``multimask_output``), kept when the predicted IoU exceeds ``pred_iou_thresh``
and the stability score (IoU of the mask thresholded at ``mask_threshold`` +- ``stability_offset``)
exceeds ``stability_thresh``; defaults are SAM 2's (32, 0.8, 0.95, 1.0, 0.0, NMS 0.7), except that
the NMS is on masks rather than boxes and comes with B.2's size filter [PROPOSED: masks of thin or
nested objects overlap less than their boxes]. The image model is transformers ``Sam2Model``,
which loads from the same ``sam2_video`` checkpoints as the tracker. The frame is encoded once;
points go through the prompt encoder and mask decoder ``points_per_batch`` at a time; masks are
upsampled to the frame only after the IoU filter, a few at a time, and ``select`` runs after every
batch over the kept candidates plus the new ones [PROPOSED], so memory holds a batch and the best
``max_candidates``, never every mask of the grid (greedy NMS done batch by batch can differ from one
global pass only where a suppression chain crosses batches).

SAM 3 concepts run ``Sam3Tracker.detect`` (the detector of a ``sam3_video`` checkpoint: threshold
and NMS are the checkpoint's ``score_threshold_detection`` / ``det_nms_thresh``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers import Sam2Model, Sam2VideoProcessor

from core.atomic import write_json_atomic
from core.device import select_device, select_dtype
from core.errors import InputError
from trackers.hf_sam2 import Sam2Tracker
from trackers.hf_sam3 import Sam3Tracker, check_text
from trackers.proposals import Candidate, candidate, select


def check_frame(frame: Any) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8 or 0 in frame.shape:
        raise InputError("frame", f"array {frame.shape} {frame.dtype}", "pass one RGB uint8 (H, W, 3) frame")
    return frame


def stability_scores(logits: torch.Tensor, threshold: float, offset: float) -> torch.Tensor:
    """SAM's stability score per mask: area above ``threshold + offset`` over area above ``threshold - offset``."""
    inner = (logits > threshold + offset).flatten(1).sum(1)
    outer = (logits > threshold - offset).flatten(1).sum(1)
    return inner.float() / outer.clamp(min=1).float()


SETTINGS_FILE = "proposer.json"


def model_type(directory: str | Path) -> str | None:
    try:
        return json.loads((Path(directory) / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def saved_settings(cls: type, directory: str | Path) -> dict:
    """The settings a proposer saved beside its model (none for a plain checkpoint)."""
    path = Path(directory) / SETTINGS_FILE
    if not path.is_file():
        return {}
    try:
        saved = json.loads(path.read_text())
    except ValueError:
        raise InputError(str(path), "not JSON", "re-save the proposer, or delete the file to use the defaults") from None
    saved.pop("proposer", None)
    known = {f.name for f in fields(cls) if f.init}
    if not isinstance(saved, dict) or set(saved) - known:
        raise InputError(str(path), sorted(set(saved) - known) if isinstance(saved, dict) else saved, f"known settings are {sorted(known)}")
    return saved


def save_settings(proposer: Any, path: Path, skip: tuple[str, ...]) -> Path:
    settings = {f.name: getattr(proposer, f.name) for f in fields(proposer) if f.init and f.name not in skip}
    write_json_atomic(path / SETTINGS_FILE, {"proposer": type(proposer).__name__, **settings})
    return path


@dataclass
class Sam2AutoMaskProposer:
    """SAM 2 automatic masks on one frame (module docstring); every threshold is a parameter."""

    model: Any = field(repr=False)
    processor: Any = field(repr=False)
    points_per_side: int = 32
    points_per_batch: int = 64
    pred_iou_thresh: float = 0.8
    stability_thresh: float = 0.95
    stability_offset: float = 1.0
    mask_threshold: float = 0.0
    iou: float = 0.7
    min_area: float = 0.003
    max_area: float = 0.6
    max_candidates: int = 12
    upsample_batch: int = 8  # masks upsampled to the frame at once (memory: upsample_batch x H x W floats)

    def __post_init__(self):
        for name in ("points_per_side", "points_per_batch", "upsample_batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(name, v, "pass a positive integer")
        self.model.eval()

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None, **params: Any) -> Sam2AutoMaskProposer:
        """Load ``Sam2Model`` + the processor from a SAM 2 video checkpoint directory (the tracker's),
        or from a folder this class saved (its settings too; ``params`` override them)."""
        if model_type(directory) != "sam2":
            Sam2Tracker.check_checkpoint(directory)
        dev = select_device(device)
        model = Sam2Model.from_pretrained(str(directory), dtype=select_dtype(dtype, dev)).to(dev)
        return cls(model, Sam2VideoProcessor.from_pretrained(str(directory)), **{**saved_settings(cls, directory), **params})

    def save_pretrained(self, directory: str | Path) -> Path:
        """The image model, the processor and these settings (``proposer.json``)."""
        path = Path(directory)
        self.model.save_pretrained(str(path))
        self.processor.save_pretrained(str(path))
        return save_settings(self, path, skip=("model", "processor"))

    def grid(self, height: int, width: int) -> np.ndarray:
        """The point grid in pixels ``(n*n, 2)`` as (x, y): cell centres of an n x n split of the frame."""
        n = self.points_per_side
        ticks = (np.arange(n) + 0.5) / n
        gx, gy = np.meshgrid(ticks * width, ticks * height)
        return np.stack([gx.ravel(), gy.ravel()], 1).astype(np.float32)

    def propose(self, frame: Any, phrase: str | None = None) -> list[Candidate]:
        """Every object-like region of ``frame`` (``phrase`` is accepted and ignored: SAM 2 has no text)."""
        frame = check_frame(frame)
        h, w = frame.shape[:2]
        dev, dtype = self.model.device, self.model.dtype
        kept: list[Candidate] = []
        with torch.inference_mode():
            pixels = self.processor.image_processor(images=frame, return_tensors="pt").pixel_values.to(dev, dtype)
            embeddings = self.model.get_image_embeddings(pixels)
            points = self.grid(h, w)
            for start in range(0, len(points), self.points_per_batch):
                chunk = points[start:start + self.points_per_batch]
                enc = self.processor(input_points=[[[p] for p in chunk.tolist()]], input_labels=[[[1]] * len(chunk)],
                                     original_sizes=[[h, w]], return_tensors="pt")
                out = self.model(image_embeddings=embeddings, input_points=enc["input_points"].to(dev, dtype),
                                 input_labels=enc["input_labels"].to(dev), multimask_output=True)
                iou = out.iou_scores[0].flatten().float()
                low = out.pred_masks[0].flatten(0, 1)[iou > self.pred_iou_thresh]
                iou = iou[iou > self.pred_iou_thresh]
                raw = []
                for s in range(0, len(low), self.upsample_batch):
                    logits = F.interpolate(low[s:s + self.upsample_batch, None].float(), size=(h, w), mode="bilinear",
                                           align_corners=False)[:, 0]
                    ok = stability_scores(logits, self.mask_threshold, self.stability_offset) > self.stability_thresh
                    binary = logits[ok] > self.mask_threshold
                    found = binary.flatten(1).any(1)
                    raw += [candidate(m, score) for m, score in zip(binary[found].cpu().numpy(),
                                                                    iou[s:s + self.upsample_batch][ok][found].tolist())]
                kept = select(kept + raw, self.iou, self.min_area, self.max_area, self.max_candidates)
        return kept


@dataclass
class Sam3ConceptProposer:
    """SAM 3 concept prompts: ``propose(frame, phrase)`` returns every instance of ``phrase``."""

    tracker: Sam3Tracker = field(repr=False)
    iou: float = 0.7
    min_area: float = 0.003
    max_area: float = 0.6
    max_candidates: int = 12

    def __post_init__(self):
        self.tracker.require_detector()

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None, **params: Any) -> Sam3ConceptProposer:
        """Load a ``sam3_video`` checkpoint directory (e.g. facebook/sam3), or one this class saved."""
        return cls(Sam3Tracker.from_pretrained(directory, device=device, dtype=dtype), **{**saved_settings(cls, directory), **params})

    def save_pretrained(self, directory: str | Path) -> Path:
        self.tracker.save_pretrained(directory)
        return save_settings(self, Path(directory), skip=("tracker",))

    def propose(self, frame: Any, phrase: str | None = None) -> list[Candidate]:
        if phrase is None:
            raise InputError("phrase", None, "SAM 3 proposes instances of a concept: pass a noun phrase, e.g. 'dog'")
        found = self.tracker.detect(check_frame(frame), check_text(phrase))
        raw = [candidate(m, score) for m, score in zip(found.masks, found.scores)]
        return select(raw, self.iou, self.min_area, self.max_area, self.max_candidates)


__all__ = ["Sam2AutoMaskProposer", "Sam3ConceptProposer", "stability_scores"]
