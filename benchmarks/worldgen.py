"""Benchmark worldgen: 64x64 rendering speed with masks on one core, and memory while streaming a
4,000-frame long clip.

    python -m benchmarks.worldgen [--out outputs/bench/worldgen.json] [--frames 2000]

Targets: >= 200 frames/s; RSS growth < 200 MB for the 4,000-frame stream.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import psutil
import torch

from core.arguments import StrictParser


def render_speed(num_frames: int) -> dict:
    from worldgen.scene import SceneConfig, sample_world

    w = sample_world(0, SceneConfig(num_frames=num_frames, num_shapes=(5, 5), num_people=(1, 1)))
    w.render(0)  # warm caches (background, track)
    t0 = time.perf_counter()
    for f in w.frames():
        assert f.ids.shape == (64, 64)
    dt = time.perf_counter() - t0
    return {"frames": num_frames, "objects": len(w.objects), "seconds": round(dt, 3), "fps": round(num_frames / dt, 1)}


def stream_memory() -> dict:
    from worldgen.tasks import longqa

    proc = psutil.Process()
    rec = longqa.generate(0, longqa.Config(level=3, kind="counting")).record
    world = longqa.world_for(rec)
    rss0 = proc.memory_info().rss
    peak, checksum = rss0, 0
    t0 = time.perf_counter()
    for f in world.frames():
        checksum += int(f.ids[0, 0])
        if f.index % 100 == 0:
            peak = max(peak, proc.memory_info().rss)
    peak = max(peak, proc.memory_info().rss)
    return {"frames": world.num_frames, "objects": len(world.objects), "seconds": round(time.perf_counter() - t0, 2),
            "rss_start_mb": round(rss0 / 2**20, 1), "rss_growth_mb": round((peak - rss0) / 2**20, 1)}


def main(argv=None) -> int:
    ap = StrictParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="outputs/bench/worldgen.json")
    ap.add_argument("--frames", type=int, default=2000, help="frames for the speed test")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    speed, mem = render_speed(args.frames), stream_memory()
    result = {"render_64x64_with_masks": {**speed, "target_fps": 200}, "stream_4000_frames": {**mem, "target_mb": 200},
              "command": "python -m benchmarks.worldgen " + " ".join(argv if argv is not None else sys.argv[1:]),
              "numpy": np.__version__, "cv2": cv2.__version__}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("| measure | value | target |\n|---|---|---|")
    print(f"| 64x64 render + masks, 1 core ({speed['objects']} objects) | {speed['fps']} frames/s | >= 200 |")
    print(f"| RSS growth streaming {mem['frames']} frames | {mem['rss_growth_mb']} MB | < 200 MB |")
    print(f"\ncommand: `{result['command'].strip()}`  -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
