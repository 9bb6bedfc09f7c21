"""How well ``app.world_check`` tells the builtin models' synthetic world from real inputs.

For every worldgen task, ``--seeds`` held-out TEST items: each clip written as H.264 and read back (as a
user's file would be) and sampled the way the check samples it, each still image as it is; for the
real side, every 10th frame of the shared DAVIS sequences and of the Big Buck Bunny clip. Prints the
colour coverage per source (min / 10th percentile / median, or max for real) and how many of each
side the threshold gets right.

    python -m benchmarks.out_of_world --seeds 8 --out outputs/bench/out_of_world
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from app.world_check import THRESHOLD, colour_coverage, sample_frames
from core.arguments import StrictParser
from core.atomic import write_json_atomic
from core.video import Video, write_video
from worldgen import tasks
from worldgen.tasks.base import split_seed

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def synthetic(seeds: int, work: Path) -> dict[str, list[float]]:
    out = {}
    for name in tasks.NAMES:
        mod, values = tasks.get(name), []
        for i in range(seeds):
            sample = mod.generate(split_seed("test", 0, i), mod.Config())
            for key, world in sample.worlds.items():
                frames = np.stack([world.render(t, annotations=False).rgb for t in range(world.num_frames)])
                clip = write_video(work / f"{name}_{i}_{key}.mp4", frames, fps=world.fps)
                values.append(float(np.mean([colour_coverage(f) for f in sample_frames(clip)])))
            values += [colour_coverage(image) for image in sample.images.values()]
        out[name] = values
    return out


def real() -> dict[str, list[float]]:
    from PIL import Image

    davis = [colour_coverage(np.asarray(Image.open(f).convert("RGB")))
             for seq in sorted((SHARED / "davis16_val_mini" / "JPEGImages" / "480p").iterdir())
             for f in sorted(seq.glob("*.jpg"))[::10]]
    with Video(SHARED / "bigbuckbunny_clip" / "bigbuckbunny.mp4", height=128) as v:
        bbb = [colour_coverage(v[i]) for i in range(0, len(v), 10)]
    return {"DAVIS 2016 val (5 sequences)": davis, "Big Buck Bunny (720p clip)": bbb}


def main(argv: list[str] | None = None) -> int:
    parser = StrictParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=8, help="held-out items per worldgen task (default 8)")
    parser.add_argument("--out", default="outputs/bench/out_of_world", help="folder for results.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        syn = synthetic(args.seeds, Path(work))
    rea = real()
    print(f"| source | inputs | min | p10 | median | max | flagged (threshold {THRESHOLD}) |\n|---|---|---|---|---|---|---|")
    for name, values in {**syn, **rea}.items():
        v = np.asarray(values)
        print(f"| {name} | {len(v)} | {v.min():.3f} | {np.percentile(v, 10):.3f} | {np.median(v):.3f} | {v.max():.3f} | "
              f"{int((v < THRESHOLD).sum())} |")
    all_syn, all_real = np.concatenate(list(syn.values())), np.concatenate(list(rea.values()))
    summary = {"threshold": THRESHOLD, "synthetic_min": float(all_syn.min()), "real_max": float(all_real.max()),
               "synthetic_flagged": int((all_syn < THRESHOLD).sum()), "synthetic_n": int(all_syn.size),
               "real_flagged": int((all_real < THRESHOLD).sum()), "real_n": int(all_real.size)}
    print(json.dumps(summary))
    write_json_atomic(Path(args.out) / "results.json", {"summary": summary, "synthetic": syn, "real": rea})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
