"""AnyMotion on held-out worldgen motion edits (a Human Motion-Bench style report, spec b.7).

    python -m benchmarks.anymotion [--n 200] [--start 0] [--methods scot,direct,oracle,copy_source]
                                   [--planner builtin] [--renderer builtin] [--frame-stride 2] [--out outputs/bench/anymotion]
    python -m benchmarks.anymotion --merge DIR [DIR ...] --out DIR

Items: the TEST split of ``training.motion_data`` (worldgen ``motion_edit``: 36 frames at 64x64, levels 1-3
in turn, all 6 categories; about one in six has a held-out fine class as its target, a class no training
item had). Methods, on the same items with the item's index as the seed:

- ``scot@file`` (the headline): the user's path (``benchmarks.user_path``): the source written as the H.264 file a
  user has, run as ``atelier motion`` runs it (the classic reader on the decoded file, the planner, the renderer),
  graded on the ``video.mp4`` it writes, read back;
- ``scot``: ``AnyMotionPipeline`` on the raw frames in memory, the reference: the source skeleton read by the classic stick-figure
  reader (``--source-keypoints gt``: the world's ground truth, which skips ~3 s of reading a clip), the SCoT
  planner's skeleton, the pose-guided renderer. Its rows also carry the **planner-only**
  accuracy: the planned skeleton against the target's, before any rendering;
- ``direct``: the same pipeline with ``skeleton=False``: the renderer edits from the instruction alone
  (the ablation the paper argues against);
- ``oracle``: the renderer given the ground-truth target skeleton: its ceiling;
- ``copy_source``: the source clip returned unchanged: what "change nothing" scores (PCK of joints that do
  not move is free, which is why the tables also give PCK on the joints the edit moves).

Every output is graded by ``scorers.motion.grade_motion_edit`` against the ground-truth target: PCK@0.05 /
0.1 / 0.2 of the pose re-detected by the classic reader (all labelled joints; and the joints the edit
moves by more than a quarter torso length), identity kept (colour, and proportions against the reader's reading
of the true target), background PSNR / SSIM
outside the union of the source and target person masks. ``--frame-stride`` grades every k-th frame
(the reader costs ~0.1 s a frame). One row per (item, method) is appended to ``rows.jsonl`` as it
finishes (``benchmarks.common``), so a run resumes and shards merge.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (RowLog, add_shard_arguments, command_line, group_rows, in_range, markdown_table, merge_rows,
                               paired_bootstrap, paired_cell, write_results)
from core.arguments import StrictParser

logger = logging.getLogger("benchmarks.anymotion")
METHODS = ("scot@file", "scot", "direct", "oracle", "copy_source")
METRICS = ("pck@0.05", "pck@0.1", "pck@0.2", "moving_pck@0.1", "identity_kept", "background_psnr", "background_ssim")


def build_pipeline(args):
    from pipelines.anymotion import AnyMotionPipeline

    pipe = AnyMotionPipeline.build(components={"planner": args.planner, "renderer": args.renderer})
    pipe.set_progress_bar_config(disable=True)
    return pipe


def through_file(pipe, src: np.ndarray, instruction: str, seed: int) -> tuple[np.ndarray, dict]:
    """The source as an H.264 file, `atelier motion` on it with the pipeline's models, and the frames of the video.mp4
    it wrote (a clip left unchanged is returned as it was read)."""
    from app.runner import EmptyResultError
    from benchmarks.user_path import UserPath
    from core.video import Video

    with UserPath() as user:
        video = user.clip(src, fps=12.0, name=f"source_{seed:05d}")
        try:
            run = user.run("motion", {"video": video, "instruction": instruction}, seed=seed, planner=pipe.planner, renderer=pipe.renderer)
        except EmptyResultError:  # `atelier motion` exits 1 (no person found): graded as the source unchanged
            with Video(video) as v:
                return v.get_frames(range(len(v))), {"person_found": False, "changed": False}
        with Video(run.folder / "video.mp4", height=src.shape[1], width=src.shape[2]) as v:  # written enlarged (viewable)
            frames = v.get_frames(range(len(v)))
        out = run.output
        return frames, {"fine_pred": out.fine_class, "changed": out.changed, "person_found": out.person_found}


def run(args) -> list[dict]:
    import dataclasses

    import torch

    from renderers.pose_guided import render_motion
    from scorers.motion import grade_motion_edit, pose_accuracy
    from trackers.pose import ClassicPoseReader
    from training.motion_data import HELD_OUT, load_motion_pool

    torch.set_num_threads(args.threads)
    header = {"benchmark": "anymotion", "methods": args.methods, "planner": args.planner, "renderer": args.renderer, "seed": args.seed,
              "frame_stride": args.frame_stride, "source_keypoints": args.source_keypoints, **({"split": "val"} if args.split == "val" else {})}
    log = RowLog(args.out, header, item_key="key")
    pool = load_motion_pool(args.split, args.seed, args.start + args.n, workers=1)
    pipe = build_pipeline(args)
    reader = ClassicPoseReader()
    k = args.frame_stride
    keys = [f"{i}:{m}" for i in range(args.start, args.start + args.n) for m in args.methods]
    truth_read: dict[int, np.ndarray] = {}
    for key in log.todo(keys):
        i, method = int(key.split(":")[0]), key.split(":")[1]
        src, tgt = pool.source[i], pool.target[i]
        t0 = time.perf_counter()
        extra: dict = {}
        if method == "scot@file":
            frames, extra = through_file(pipe, src, pool.text[i], i)
        elif method == "scot":
            given = pool.source_kp[i] if args.source_keypoints == "gt" else None  # None: the pipeline reads them
            out = pipe(src, pool.text[i], source_keypoints=given, generator=i)
            frames = out.video
            if out.target_keypoints is not None:
                extra = {f"planner_{m}": v for m, v in pose_accuracy(out.target_keypoints, pool.target_kp[i], pool.source_kp[i]).items()}
            extra.update(fine_pred=out.fine_class, changed=out.changed, person_found=out.person_found)
        elif method == "direct":
            pipe.config = dataclasses.replace(pipe.config, skeleton=False)
            try:
                frames = pipe(src, pool.text[i], source_keypoints=pool.source_kp[i], generator=i).video
            finally:
                pipe.config = dataclasses.replace(pipe.config, skeleton=True)
        elif method == "oracle":
            frames = render_motion(pipe.renderer, src, pool.target_kp[i], pool.text[i], generator=i)
        else:
            frames = src
        seconds = time.perf_counter() - t0
        if i not in truth_read:  # the reader on the true target: identity's reference (its error cancels), once per item
            truth_read.clear()
            truth_read[i] = reader.read(tgt[::k])
        g = grade_motion_edit(frames[::k], src[::k], tgt[::k], pool.target_kp[i][::k], pool.source_kp[i][::k], pool.edit_region(i)[::k], reader,
                              reference_kp=truth_read[i])
        g.pop("proportion_ratios", None)
        row = {"key": key, "item": i, "method": method, "level": int(pool.level[i]), "category": pool.category[i], "fine": pool.fine[i],
               "source_action": pool.source_action[i], "held_out": pool.fine[i] in HELD_OUT, "seconds": round(seconds, 3), **g, **extra}
        log.append([row])
        logger.info("%s (%s): PCK@0.1 %s, moving %s, identity %s, bg %.1f dB, %.1f s", key, pool.fine[i], g["pck@0.1"], g["moving_pck@0.1"],
                    g.get("identity_kept"), g["background_psnr"], seconds)
    return log.select(keys)


def complete_items(rows: list[dict]) -> list[dict]:
    """The rows of items every method of the run finished (a stopped shard leaves its last item part-done):
    every table compares the methods on the same items."""
    methods = {r["method"] for r in rows}
    done = {i for i, rs in group_rows(rows, lambda r: r["item"]).items() if {r["method"] for r in rs} == methods}
    return [r for r in rows if r["item"] in done]


def _mean(values) -> float | None:
    v = [float(x) for x in values if x is not None and np.isfinite(float(x))]
    return float(np.mean(v)) if v else None


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _row_metrics(rs: list[dict], prefix: str = "") -> dict:
    return {m: _mean(r.get(prefix + m) for r in rs) for m in METRICS if not prefix or m.startswith(("pck", "moving"))}


def summarise(rows: list[dict]) -> tuple[dict, str]:
    summary: dict = {}
    items = len({r["item"] for r in rows})
    lines = [f"# AnyMotion on held-out worldgen motion edits ({items} test items, 36 frames at 64x64)", "",
             "PCK (%) of the output's pose re-detected by the classic stick-figure reader against the target skeleton (box",
             "diagonal), on every labelled joint and on the joints the edit moves; identity kept (%: the figure's colour, and",
             "its limb proportions within 20% of what the same reader reads on the true target, on the items where that",
             "reading is itself within 20% of the world's skeleton); background PSNR (dB, capped at 60) / SSIM outside the",
             "source and target person masks; seconds per clip on one CPU thread. `planner only` is the SCoT planner's",
             "skeleton itself, before rendering.", ""]
    table = []
    by_method = group_rows(rows, lambda r: r["method"])
    for method in METHODS:
        rs = by_method.get(method)
        if not rs:
            continue
        m = _row_metrics(rs)
        summary[method] = {**m, "items": len(rs), "seconds": _mean(r["seconds"] for r in rs)}
        table.append([method, len(rs), *[_pct(m[x]) for x in METRICS[:5]], f"{m['background_psnr']:.1f}", f"{m['background_ssim']:.3f}",
                      f"{summary[method]['seconds']:.1f}"])
        if method == "scot":
            p = _row_metrics(rs, "planner_")
            summary["planner_only"] = {**p, "items": len(rs)}
            table.append(["planner only", len(rs), *[_pct(p[x]) for x in METRICS[:4]], "-", "-", "-", "-"])
    lines += markdown_table(["method", "items", "PCK@0.05", "PCK@0.1", "PCK@0.2", "PCK@0.1 moving joints", "identity kept",
                             "background PSNR", "background SSIM", "s / clip"], table)
    measurable = {r["item"] for r in rows if r.get("identity_measurable")}
    summary["identity_measurable_items"] = len(measurable)
    lines += ["", f"Identity is measurable on {len(measurable)} of {items} items (the same items for every method); on the rest the",
              "reader misreads the true target's proportions (or loses the figure), so no output's can be judged.", ""]
    lines += ["", "## Seen and held-out fine classes (PCK@0.1, %; moving joints in brackets)", ""]
    held = []
    for (method, ho), rs in sorted(group_rows(rows, lambda r: (r["method"], r["held_out"])).items(), key=lambda kv: (METHODS.index(kv[0][0]), kv[0][1])):
        m = _row_metrics(rs)
        name = "held-out" if ho else "seen"
        summary[f"{method}/{name}"] = {**m, "items": len(rs)}
        cells = [method, name, len(rs), f"{_pct(m['pck@0.1'])} ({_pct(m['moving_pck@0.1'])})", _pct(m["identity_kept"]), f"{m['background_psnr']:.1f}"]
        if method == "scot":
            p = _row_metrics(rs, "planner_")
            summary[f"planner_only/{name}"] = p
            cells.append(f"{_pct(p['pck@0.1'])} ({_pct(p['moving_pck@0.1'])})")
        else:
            cells.append("-")
        held.append(cells)
    lines += markdown_table(["method", "classes", "items", "output PCK@0.1", "identity kept", "background PSNR", "planner only PCK@0.1"], held)
    lines += ["", "## By category (output PCK@0.1 on the joints the edit moves, %; planner only for SCoT)", ""]
    cats = sorted({r["category"] for r in rows})
    cat_rows = []
    for method in METHODS:
        if method not in by_method:
            continue
        g = group_rows(by_method[method], lambda r: r["category"])
        cat_rows.append([method, *[_pct(_mean(r["moving_pck@0.1"] for r in g.get(c, []))) for c in cats]])
        if method == "scot":
            cat_rows.append(["planner only", *[_pct(_mean(r.get("planner_moving_pck@0.1") for r in g.get(c, []))) for c in cats]])
    lines += markdown_table(["method", *cats], cat_rows)
    lines += ["", "## By level (output PCK@0.1, %)", ""]
    lv_rows = [[method, level, len(rs), _pct(_mean(r["pck@0.1"] for r in rs)), _pct(_mean(r["moving_pck@0.1"] for r in rs))]
               for (method, level), rs in sorted(group_rows(rows, lambda r: (r["method"], r["level"])).items(), key=lambda kv: (METHODS.index(kv[0][0]), kv[0][1]))]
    lines += markdown_table(["method", "level", "items", "PCK@0.1", "PCK@0.1 moving joints"], lv_rows)
    lines += ["", "## Paired on the same items (PCK@0.1 points, bootstrap 95%)", ""]
    pairs = []
    for a, b in (("scot@file", "scot"), ("scot", "direct"), ("oracle", "scot"), ("scot", "copy_source")):
        for metric in ("pck@0.1", "moving_pck@0.1"):
            da = {r["item"]: r[metric] for r in by_method.get(a, []) if r.get(metric) is not None}
            db = {r["item"]: r[metric] for r in by_method.get(b, []) if r.get(metric) is not None}
            common = sorted(set(da) & set(db))
            if common:
                d = paired_bootstrap([da[i] for i in common], [db[i] for i in common])
                summary[f"{a}-{b}/{metric}"] = d
                pairs.append([f"{a} - {b}", metric, len(common), paired_cell(d)])
    lines += markdown_table(["comparison", "metric", "items", "difference"], pairs)
    return summary, "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m benchmarks.anymotion", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shard_arguments(ap, 200, noun="edits", compare="methods")
    ap.add_argument("--methods", type=lambda s: [m for m in s.split(",") if m], default=list(METHODS))
    ap.add_argument("--planner", default="builtin", help="planner: 'builtin' or a folder (default builtin)")
    ap.add_argument("--renderer", default="builtin", help="renderer: 'builtin' or a folder (default builtin)")
    ap.add_argument("--frame-stride", type=int, default=2, help="grade every k-th frame (default 2)")
    ap.add_argument("--source-keypoints", choices=("reader", "gt"), default="reader",
                    help="scot's source skeleton: read by the classic reader as a user's run does (default), or the world's ground truth")
    ap.add_argument("--split", choices=("test", "val"), default="test", help="items to grade (val: for choosing between runs)")
    ap.add_argument("--seed", type=int, default=0, help="the pool's seed (training.motion_data)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/anymotion"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if bad := [m for m in args.methods if m not in METHODS]:
        ap.error(f"unknown methods {bad}: choose from {list(METHODS)}")
    if args.frame_stride < 1:
        ap.error("--frame-stride must be >= 1")
    if args.merge:
        rows = in_range(merge_rows(args.merge, agree=("planner", "renderer", "seed", "frame_stride", "source_keypoints"), item_key="key",
                                   row_key=lambda r: r["key"]), args.items)
    else:
        rows = run(args)
    rows = complete_items(rows)
    summary, md = summarise(rows)
    write_results(args.out, {"command": command_line("benchmarks.anymotion", argv)}, summary, rows, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
