"""``atelier worldgen TASK --n N --seed S -o DIR [--size 64] [--split train|val|test] [--json] [--preview]``.

Writes ``DIR/<split>.jsonl`` (one record per item, sorted keys), the media under
``DIR/<split>/`` and ``DIR/<split>.config.json``. Item i uses world seed
``SPLIT_OFFSETS[split] + seed + i`` (train 0, val 10**9, test 2*10**9), so splits never share a seed.
Same arguments -> byte-identical files. Summary on stdout (JSON with --json), logs on stderr.
Also runnable as ``python -m worldgen.cli``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from core.arguments import StrictParser
from core.atomic import write_json_atomic
from core.errors import AtelierError, InputError
from core.outputs import check_folder, publish_folder
from core.paths import check_output_dir
from worldgen import tasks
from worldgen.export import export_sample, jsonl_line, write_davis
from worldgen.tasks.base import SPLIT_OFFSETS, SPLIT_STRIDE, split_seed

logger = logging.getLogger("worldgen")


LEVELS = (1, 2, 3)  # every task generator's difficulty levels (each maps a level to its scene sizes)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", choices=tasks.NAMES, help="which task generator to run")
    parser.add_argument("--n", type=int, default=8, help="number of items (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="base seed, 0 <= seed < 10**9 (default 0)")
    parser.add_argument("-o", "--out", required=True, help="output directory")
    parser.add_argument("--size", type=int, default=None, help="canvas side in pixels (default: the task's, 64 for most)")
    parser.add_argument("--level", type=int, default=None, choices=LEVELS, help="difficulty level 1-3 (default: the task's)")
    parser.add_argument("--split", choices=sorted(SPLIT_OFFSETS), default="train", help="seed range to draw from")
    parser.add_argument("--masks", action="store_true", help="also write every clip's id maps as DAVIS palette PNGs")
    parser.add_argument("--davis", action="store_true", help="also write a DAVIS-style tree: DIR/<split>/davis/{JPEGImages,Annotations}/480p/<clip>/")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--preview", action="store_true", help="write DIR/preview/index.html with annotated samples")
    parser.add_argument("--overwrite", action="store_true", help="replace files of the same names that atelier did not write "
                                                                  "(by default the run refuses before it starts)")


def make_config(task: str, size: int | None = None, level: int | None = None):
    mod = tasks.get(task)
    fields = {f.name for f in dataclasses.fields(mod.Config)}
    if level is not None and (isinstance(level, bool) or level not in LEVELS):
        raise ValueError(f"invalid --level={level!r}: choose one of {list(LEVELS)}")
    kw = {k: v for k, v in (("size", size), ("level", level)) if v is not None and k in fields}
    return mod.Config(**kw)


def run(args) -> int:
    if args.n <= 0:
        logger.error("invalid --n=%r: ask for at least one item", args.n)
        return 2
    if not 0 <= args.seed < 10**9:
        logger.error("invalid --seed=%r: use 0 <= seed < 10**9 (larger ranges belong to other splits)", args.seed)
        return 2
    if args.seed + args.n > SPLIT_STRIDE:  # item i's world is seed + i of the split's range: past it lies another split
        logger.error("invalid --n=%r: --seed %d + --n must stay within the split's %s worlds; ask for fewer items", args.n, args.seed,
                     f"{SPLIT_STRIDE:,}")
        return 2
    if args.size is not None and not 16 <= args.size <= 1024:
        logger.error("invalid --size=%r: use 16..1024 pixels", args.size)
        return 2
    try:
        cfg = make_config(args.task, args.size, args.level)
    except (ValueError, TypeError) as e:
        logger.error("%s", e)
        return 2
    mod = tasks.get(args.task)
    # a run claims its split's files (and the preview): other splits and a user's files beside them stay
    claims = [f"{args.split}.jsonl", f"{args.split}.config.json", f"{args.split}/**"] + (["preview/**"] if args.preview else [])
    overwrite = getattr(args, "overwrite", False)
    out = check_output_dir(args.out, "--out")
    check_folder(out, claims, "--out", overwrite)
    t0, lines, samples = time.perf_counter(), [], []
    with publish_folder(out, claims, "--out", overwrite) as stage:
        media = stage / args.split
        media.mkdir()
        write_json_atomic(stage / f"{args.split}.config.json", {"task": args.task, "split": args.split, "seed": args.seed, "n": args.n, "config": dataclasses.asdict(cfg)})
        for i in _progress(range(args.n), args.task):
            sample = mod.generate(split_seed(args.split, args.seed, i), cfg)
            rec = export_sample(sample, media, f"{i:06d}", masks=args.masks)
            if i == 0:
                check_disk_room(out, stage, args.n)
            if getattr(args, "davis", False):
                for name, world in sample.worlds.items():
                    write_davis(world, media / "davis", f"{i:06d}_{name}")
            rec["files"] = {k: f"{args.split}/{v}" for k, v in rec["files"].items()}
            lines.append(jsonl_line(rec))
            if args.preview and len(samples) < 4:
                samples.append(sample)
        (stage / f"{args.split}.jsonl").write_text("".join(lines))
        if args.preview:
            from worldgen.preview import write_preview

            write_preview(stage / "preview", args.task, samples)
    jsonl, media = out / f"{args.split}.jsonl", out / args.split
    summary = {"task": args.task, "split": args.split, "n": args.n, "seed": args.seed, "jsonl": str(jsonl), "media": str(media), "seconds": round(time.perf_counter() - t0, 2)}
    if args.preview:
        summary["preview"] = str(out / "preview" / "index.html")
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"worldgen {args.task}: {args.n} {args.split} items -> {jsonl} ({summary['seconds']} s)")
        if args.preview:
            print(f"preview: {summary['preview']}")
    return 0


def check_disk_room(out: Path, stage: Path, n: int) -> None:
    """After the first item: the run's whole size, estimated from that item's files, must fit the free disk with a
    margin; else it stops now (the staging folder goes) rather than filling the disk."""
    import shutil

    first = sum(p.stat().st_size for p in stage.rglob("*") if p.is_file())
    need, free = int(first * n * 1.1), shutil.disk_usage(out).free
    if need > free:
        raise InputError("--n", n, f"{n:,} items need about {need / 1e9:,.1f} GB ({first / 1e3:,.0f} KB each) and the disk at {out} "
                                   f"has {free / 1e9:,.1f} GB free; ask for fewer items or write elsewhere")


def _progress(it, task: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return it
    return tqdm(it, desc=f"worldgen {task}", file=sys.stderr, disable=len(it) < 4 or not sys.stderr.isatty())


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    parser = StrictParser(prog="python -m worldgen.cli", description=__doc__.split("\n")[0])
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except AtelierError as e:  # `atelier worldgen` maps these in app.cli; this entry point does the same
        logger.error("%s", e)
        return 2 if isinstance(e, ValueError) else 1


if __name__ == "__main__":
    sys.exit(main())
