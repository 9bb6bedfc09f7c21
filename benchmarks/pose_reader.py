"""The classic stick-figure pose reader (``trackers.pose``) against worldgen's own keypoints.

    python -m benchmarks.pose_reader [--measure 20] [--start 0] [--level 2] [--frames N]

Each motion_edit sample gives two clips (its source and target worlds); PCK (``scorers.pose.pck``, box
diagonal) of the reader's keypoints against the worlds' annotations, overall and on visible joints only.
"""

from __future__ import annotations

import cv2
import numpy as np

from core.arguments import StrictParser
from trackers.pose import ClassicPoseReader


def measure(samples: int = 20, start: int = 0, level: int = 2, frames: int | None = None) -> dict:
    """PCK of the classic reader on worldgen motion_edit clips (source and target worlds of each
    sample), against the worlds' own keypoint annotations. Single-threaded OpenCV."""
    import time

    from scorers.pose import pck
    from worldgen.tasks import motion_edit

    cv2.setNumThreads(1)
    reader = ClassicPoseReader()
    preds, gts, clips, t0 = [], [], [], time.perf_counter()
    for seed in range(start, start + samples):
        sample = motion_edit.generate(seed, motion_edit.Config(level=level))
        for name in ("source", "target"):
            world = sample.worlds[name]
            rendered = [world.render(t) for t in range(world.num_frames if frames is None else min(frames, world.num_frames))]
            preds.append(reader.read(np.stack([f.rgb for f in rendered])))
            gts.append(np.stack([f.keypoints[1] for f in rendered]))
            clips.append({"seed": seed, "world": name, "action": sample.record[f"{name}_action"], "PCK@0.1": round(pck(preds[-1], gts[-1], (0.1,))[0.1], 4)})
    pred, gt = np.concatenate(preds), np.concatenate(gts)
    visible = gt.copy()
    visible[visible[..., 2] < 2, 2] = 0  # GT occluded joints (v = 1) left out
    return {"clips": len(preds), "frames": len(pred), "pck": pck(pred, gt, (0.05, 0.1, 0.2)).to_dict(),
            "pck_visible_only": pck(pred, visible, (0.05, 0.1, 0.2)).to_dict(), "seconds": round(time.perf_counter() - t0, 1),
            "below_0.95": [c for c in clips if c["PCK@0.1"] < 0.95]}


if __name__ == "__main__":
    import argparse
    import json

    ap = StrictParser(description="Measure the classic stick-figure pose reader on worldgen motion_edit clips.")
    ap.add_argument("--measure", type=int, default=20, metavar="N", help="motion_edit samples (each gives a source and a target clip)")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--level", type=int, default=2, choices=(1, 2, 3))
    ap.add_argument("--frames", type=int, default=None, help="frames per clip (default: all 36)")
    args = ap.parse_args()
    print(json.dumps(measure(args.measure, args.start, args.level, args.frames), indent=1))
