"""Trackers behind one session API (``trackers.protocol``), and the rule that loads one by name.

Backends: ``classic`` (OpenCV, no weights), ``sam2`` (transformers ``Sam2VideoModel``), ``sam3``
(transformers SAM 3 video classes: a text prompt proposes every instance of a concept), ``sam2-package``
(Meta's ``sam2`` package, the optional ``sam2`` extra). A spec is a backend name or a checkpoint
directory (its config.json says which; a ``sam2_package.json`` makes it a sam2 package checkpoint).

Modules (moved from the table of docs/ARCHITECTURE.md):

- `protocol.py`: the session API in SAM 2's shape: prompts (points / box / mask) on any frame and object,
  `propagate` forward / reverse yielding `TrackedFrame(frame_idx, obj_ids, masks, scores)`, a bounded window
  of outputs; `SessionBase`
- `__init__.py`: `load_tracker`: a backend name or a checkpoint / saved-classic folder
- `classic.py`: `ClassicTracker`, builtin, no weights: DIS optical-flow warp of the last mask, shift-aligned
  and snapped to a Lab colour model, presence = colour match, global colour re-detection when lost; grabCut
  boxes, flood-filled points; `config.json` save/load
- `proposals.py`: `Candidate`, the `Proposer` protocol, mask NMS / size filter / cap `select` of spec B.2, the
  classic `ColourProposer`
- `hf_sam2.py` / `hf_sam3.py` / `hf_proposals.py`: SAM 2 / SAM 3 through transformers, and SAM proposers that
  save their settings
- `sam2_package.py`: Meta's `sam2` package, the optional extra `atelier[sam2]`: frames read lazily, outputs
  pruned to the window
- `monitor.py`: CLEAR's event monitor: presence, area, drift, motion breaks against a constant-velocity
  prediction, size drift, merges with other candidates' tracks, appearance, cuts; and the weighted fast/slow
  controller with its cool-down
- `pose.py`: COCO-17 pose readers: the `PoseReader` protocol `read(frames) -> (T, 17, 3)` and
  `load_pose_reader`; `ClassicPoseReader`, builtin, no weights: reads worldgen's stick figures by analysis by
  synthesis (figure colour by thinness, coverage and don't-care maps, a parametric figure drawn by worldgen's
  rule and fitted by pattern search plus per-limb angle grids, tracked frame to frame with fresh restarts),
  measured PCK@0.1 0.995 on 40 motion_edit clips (`python -m benchmarks.pose_reader --measure 20`);
  `MediaPipePoseReader`, the optional `pose` extra, via `core.keypoints.from_mediapipe33`
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from core.errors import InputError
from trackers.protocol import Prompt, SessionBase, TrackedFrame, Tracker, TrackingSession

# name -> "module:Class"; the hf classes also load checkpoint directories (from_pretrained)
BACKENDS = {
    "classic": "trackers.classic:ClassicTracker",
    "sam2": "trackers.hf_sam2:Sam2Tracker",
    "sam3": "trackers.hf_sam3:Sam3Tracker",
    "sam2-package": "trackers.sam2_package:Sam2PackageTracker",
}
# a checkpoint's config.json "model_type" -> backend (video models only: "sam2" / "sam3" are the image
# models, which cannot track; facebook/sam2.1-* are sam2_video, facebook/sam3 is sam3_video)
MODEL_TYPES = {"sam2_video": "sam2", "sam3_video": "sam3", "sam3_tracker_video": "sam3"}


def backend_class(name: str) -> type:
    if name not in BACKENDS:
        raise InputError("tracker", name, f"choose one of {sorted(BACKENDS)} or a SAM 2 / SAM 3 checkpoint directory")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def load_tracker(spec: str = "classic", device: str | None = None, dtype: str | None = None, trust_remote_code: bool = False,
                 **kwargs: Any) -> Tracker:
    """A tracker for ``spec``: a backend name (``classic``; ``sam2`` / ``sam3`` need a checkpoint), a
    SAM 2 / SAM 3 checkpoint directory, or a folder written by ``ClassicTracker.save_pretrained``."""
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise InputError("tracker", spec, f"pass one of {sorted(BACKENDS)} or a checkpoint directory")
    spec = str(spec)
    if spec == "classic":
        return backend_class("classic")(**kwargs)
    path = Path(spec).expanduser()
    if not path.is_dir():
        if spec in BACKENDS:
            raise InputError("tracker", spec, f"{spec} needs a checkpoint: pass its directory (e.g. a downloaded facebook/sam2.1-hiera-tiny)")
        raise InputError("tracker", spec, f"no such directory; pass one of {sorted(BACKENDS)} or a checkpoint directory")
    # imports sam2 only when it loads
    from trackers.sam2_package import is_package_checkpoint

    if is_package_checkpoint(path):
        return backend_class("sam2-package").from_pretrained(path, device=device, dtype=dtype, **kwargs)
    try:
        config = json.loads((path / "config.json").read_text())
        model_type = config.get("model_type")
    except (OSError, ValueError, AttributeError):
        raise InputError("tracker", spec, "this folder has no readable config.json; pass a SAM 2 / SAM 3 checkpoint directory") from None
    if config.get("model") == "classic-tracker":  # a ClassicTracker.save_pretrained folder
        return backend_class("classic").from_pretrained(path, **kwargs)
    if model_type not in MODEL_TYPES:
        raise InputError("tracker", spec, f"its config.json says model_type={model_type!r}, not a SAM 2 / SAM 3 video model")
    return backend_class(MODEL_TYPES[model_type]).from_pretrained(path, device=device, dtype=dtype, **kwargs)


__all__ = ["BACKENDS", "load_tracker", "backend_class", "Tracker", "TrackingSession", "TrackedFrame", "Prompt", "SessionBase"]
