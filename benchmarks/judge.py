"""Validate the classic generation judge (``scorers.generation``) on held-out worldgen t2v clips.

    python -m benchmarks.judge [--n 300] [--levels 1,2] [--frames 16,32] [--size 64] [--noise 0] [--blur 0]
                               [--start 0] [--out outputs/bench/judge]
    python -m benchmarks.judge --merge DIR [DIR ...] --out DIR

Clips: worldgen ``t2v`` items of the **test** split (seeds ``split_seed("test", 700, i)``), each item
generated at every level and clip length asked for (16 frames at 64x64 is what Bernini generates;
32 is t2v's default). Every clip is rendered exactly, then optionally degraded the way a generator's
output might be (Gaussian blur of ``--blur`` px, Gaussian noise of ``--noise`` grey levels,
seeded), judged with ``judge_against`` and scored against the caption's attribute record.

One row per (clip, record object): colour, shape, size and direction right or wrong (a record
object the judge misses is wrong on all four). The summary gives, per level and clip length, the
accuracy of each attribute with a Wilson 95% interval, the share of clips with every attribute of
every object right, and the clips whose record holds two objects of one colour (the judge's known
weak spot) apart. Rows are appended to ``rows.jsonl`` as items finish (``benchmarks.common``), so
a run resumes and shards merge.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (RowLog, add_shard_arguments, comma_ints, command_line, group_rows, in_range, markdown_table, merge_rows,
                               write_results)
from core.arguments import StrictParser

logger = logging.getLogger("benchmarks.judge")
SEED_BASE = 700
ATTRIBUTES = ("color", "shape", "direction", "size")
TARGET = 0.98


def clip(i: int, level: int, num_frames: int, size: int, noise: float, blur: float) -> tuple[dict, np.ndarray]:
    """The caption record and frames of item ``i`` at one level and length, degraded as asked."""
    import cv2

    from worldgen.tasks import t2v
    from worldgen.tasks.base import split_seed

    seed = split_seed("test", SEED_BASE, i)
    sample = t2v.generate(seed, t2v.Config(size=size, num_frames=num_frames, level=level))
    world = sample.worlds["video"]
    frames = np.stack([world.render(t, annotations=False).rgb for t in range(world.num_frames)])
    if blur > 0 or noise > 0:
        x = frames.astype(np.float32)
        if blur > 0:
            x = np.stack([cv2.GaussianBlur(f, (0, 0), blur) for f in x])
        if noise > 0:
            x += np.random.default_rng([seed, level, num_frames]).normal(0.0, noise, x.shape).astype(np.float32)
        frames = np.clip(np.rint(x), 0, 255).astype(np.uint8)
    return sample.record, frames


def judge_rows(i: int, level: int, num_frames: int, args) -> list[dict]:
    from scorers.generation import judge_against

    record, frames = clip(i, level, num_frames, args.size, args.noise, args.blur)
    t0 = time.perf_counter()
    result = judge_against(frames, record["attributes"])
    seconds = time.perf_counter() - t0
    objs = record["attributes"]["objects"]
    colours = [o["color"] for o in objs]
    same_colour = len(set(colours)) < len(colours)
    seen = result["judgement"]["objects"]
    rows = []
    for k, (want, got) in enumerate(zip(objs, result["objects"])):
        det = seen[got["detected"]] if got["matched"] else None
        rows.append({"item": i, "seed": record["seed"], "level": level, "frames": num_frames, "object": k,
                     "want": {a: want.get(a) for a in ("color", "shape", "size", "direction", "motion")},
                     "got": {a: det[a] for a in ("color", "shape", "size", "direction", "shape_score")} if det else None,
                     **{a: got[a] for a in ATTRIBUTES}, "same_colour_clip": same_colour,
                     "clip_correct": result["all_correct"], "extra": result["extra_detections"], "seconds": seconds})
    return rows


def run(args) -> list[dict]:
    header = {"benchmark": "judge", "levels": args.levels, "frames": args.frames, "size": args.size,
              "noise": args.noise, "blur": args.blur, "seed": SEED_BASE}
    log = RowLog(args.out, header)
    items = list(range(args.start, args.start + args.n))
    for i in log.todo(items):
        rows = [r for level in args.levels for num_frames in args.frames for r in judge_rows(i, level, num_frames, args)]
        log.append(rows)
        for r in rows:
            if any(r[a] is False for a in ATTRIBUTES):
                logger.info("item %d level %d %d frames: want %s, got %s", i, r["level"], r["frames"], r["want"], r["got"])
    return log.select(items)


def _acc(rows: list[dict], attribute: str):
    """Accuracy of one attribute over the rows whose record gives it (a person's record has no direction)."""
    from scorers.videoqa import accuracy

    return accuracy([r[attribute] for r in rows if r[attribute] is not None])


def _cell(acc) -> str:
    return f"{100 * acc.value:.1f} [{100 * acc.low:.1f}, {100 * acc.high:.1f}]" if acc.n else "-"


def summarise(rows: list[dict]) -> tuple[dict, str]:
    from scorers.videoqa import accuracy

    summary: dict = {}
    lines = ["# The classic generation judge on worldgen t2v clips (test split)", "",
             "Accuracy (%) with Wilson 95% intervals, per record object; 'clips all right' counts a clip when every attribute",
             "of every object is right.", ""]
    table = []
    for (level, frames), rs in sorted(group_rows(rows, lambda r: (r["level"], r["frames"])).items()):
        clips = {r["item"]: r["clip_correct"] for r in rs}
        key = f"level{level}_frames{frames}"
        summary[key] = {"objects": len(rs), "clips": len(clips), **{a: _acc(rs, a).to_dict() for a in ATTRIBUTES},
                        "clips_all_right": accuracy(list(clips.values())).to_dict(),
                        "seconds_per_clip": float(np.mean([r["seconds"] for r in rs])),
                        "meets_target": all(_acc(rs, a).value >= TARGET for a in ("color", "shape", "direction"))}
        table.append([level, frames, len(clips), len(rs), *[_cell(_acc(rs, a)) for a in ATTRIBUTES],
                      _cell(accuracy(list(clips.values()))), f"{summary[key]['seconds_per_clip']:.2f}"])
    lines += markdown_table(["level", "frames", "clips", "objects", "colour", "shape", "direction", "size", "clips all right", "s / clip"], table)
    split = [[level, frames, "two of one colour" if same else "colours distinct", len(rs), *[_cell(_acc(rs, a)) for a in ATTRIBUTES]]
             for (level, frames, same), rs in sorted(group_rows(rows, lambda r: (r["level"], r["frames"], r["same_colour_clip"])).items())]
    lines += ["", "## By whether the record has two objects of one colour", ""]
    lines += markdown_table(["level", "frames", "record", "objects", "colour", "shape", "direction", "size"], split)
    lines += ["", "## Direction accuracy by motion kind (all levels and lengths)", ""]
    by_motion = group_rows([r for r in rows if r["want"].get("motion")], lambda r: r["want"]["motion"])
    lines += markdown_table(["motion", "objects", "direction"], [[m, len(rs), _cell(_acc(rs, "direction"))] for m, rs in sorted(by_motion.items())])
    return summary, "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m benchmarks.judge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shard_arguments(ap, 300, noun="clips", compare="settings")
    ap.add_argument("--levels", type=comma_ints, default=[1, 2], help="t2v levels (default 1,2; 3 adds people)")
    ap.add_argument("--frames", type=comma_ints, default=[16, 32], help="clip lengths (default 16,32)")
    ap.add_argument("--size", type=int, default=64, help="frame side in pixels (default 64)")
    ap.add_argument("--noise", type=float, default=0.0, help="Gaussian noise sigma in grey levels added to every frame (default 0)")
    ap.add_argument("--blur", type=float, default=0.0, help="Gaussian blur sigma in pixels (default 0)")
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/judge"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    import cv2

    cv2.setNumThreads(1)
    if args.merge:
        rows = in_range(merge_rows(args.merge, agree=("levels", "frames", "size", "noise", "blur"),
                                   row_key=lambda r: (r["item"], r["level"], r["frames"], r["object"])), args.items)
    else:
        rows = run(args)
    summary, md = summarise(rows)
    write_results(args.out, {"command": command_line("benchmarks.judge", argv)}, summary, rows, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
