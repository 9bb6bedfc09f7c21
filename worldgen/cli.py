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

from core.atomic import atomic_path, write_json_atomic
from worldgen import tasks
from worldgen.export import export_sample, jsonl_line, write_davis
from worldgen.tasks.base import SPLIT_OFFSETS, split_seed

logger = logging.getLogger("worldgen")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", choices=tasks.NAMES, help="which task generator to run")
    parser.add_argument("--n", type=int, default=8, help="number of items (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="base seed, 0 <= seed < 10**9 (default 0)")
    parser.add_argument("-o", "--out", required=True, help="output directory")
    parser.add_argument("--size", type=int, default=None, help="canvas side in pixels (default: the task's, 64 for most)")
    parser.add_argument("--level", type=int, default=None, help="difficulty level 1-3 (default: the task's)")
    parser.add_argument("--split", choices=sorted(SPLIT_OFFSETS), default="train", help="seed range to draw from")
    parser.add_argument("--masks", action="store_true", help="also write every clip's id maps as DAVIS palette PNGs")
    parser.add_argument("--davis", action="store_true", help="also write a DAVIS-style tree: DIR/<split>/davis/{JPEGImages,Annotations}/480p/<clip>/")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--preview", action="store_true", help="write DIR/preview/index.html with annotated samples")


def make_config(task: str, size: int | None = None, level: int | None = None):
    mod = tasks.get(task)
    fields = {f.name for f in dataclasses.fields(mod.Config)}
    kw = {k: v for k, v in (("size", size), ("level", level)) if v is not None and k in fields}
    return mod.Config(**kw)


def run(args) -> int:
    if args.n <= 0:
        logger.error("invalid --n=%r: ask for at least one item", args.n)
        return 2
    if not 0 <= args.seed < 10**9:
        logger.error("invalid --seed=%r: use 0 <= seed < 10**9 (larger ranges belong to other splits)", args.seed)
        return 2
    if args.size is not None and not 16 <= args.size <= 1024:
        logger.error("invalid --size=%r: use 16..1024 pixels", args.size)
        return 2
    try:
        cfg = make_config(args.task, args.size, args.level)
    except (ValueError, TypeError) as e:
        logger.error("%s", e)
        return 2
    mod, out = tasks.get(args.task), Path(args.out)
    media = out / args.split
    media.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / f"{args.split}.config.json", {"task": args.task, "split": args.split, "seed": args.seed, "n": args.n, "config": dataclasses.asdict(cfg)})
    t0, lines, samples = time.perf_counter(), [], []
    for i in _progress(range(args.n), args.task):
        sample = mod.generate(split_seed(args.split, args.seed, i), cfg)
        rec = export_sample(sample, media, f"{i:06d}", masks=args.masks)
        if getattr(args, "davis", False):
            for name, world in sample.worlds.items():
                write_davis(world, media / "davis", f"{i:06d}_{name}")
        rec["files"] = {k: f"{args.split}/{v}" for k, v in rec["files"].items()}
        lines.append(jsonl_line(rec))
        if args.preview and len(samples) < 4:
            samples.append(sample)
    jsonl = out / f"{args.split}.jsonl"
    with atomic_path(jsonl) as tmp:
        tmp.write_text("".join(lines))
    summary = {"task": args.task, "split": args.split, "n": args.n, "seed": args.seed, "jsonl": str(jsonl), "media": str(media), "seconds": round(time.perf_counter() - t0, 2)}
    if args.preview:
        from worldgen.preview import write_preview

        summary["preview"] = str(write_preview(out / "preview", args.task, samples))
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"worldgen {args.task}: {args.n} {args.split} items -> {jsonl} ({summary['seconds']} s)")
        if args.preview:
            print(f"preview: {summary['preview']}")
    return 0


def _progress(it, task: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return it
    return tqdm(it, desc=f"worldgen {task}", file=sys.stderr, disable=len(it) < 4 or not sys.stderr.isatty())


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    parser = argparse.ArgumentParser(prog="python -m worldgen.cli", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
