"""Bernini on held-out worldgen prompts: the pipeline and its ablations, graded by the classic judge.

    python -m benchmarks.bernini [--n 200] [--start 0] [--tasks t2v,v2v,r2v] [--methods bernini,no_plan,oracle_plan]
                                 [--planner builtin] [--renderer builtin] [--out outputs/bench/bernini]
    python -m benchmarks.bernini --merge DIR [DIR ...] [--versus DIR] --out DIR   # --versus: paired by clip against another run
    python -m benchmarks.bernini --direction-ceiling [--n 200]     # what the t2v captions let any generator get right

Items: the TEST split of ``training.bernini_data`` (worldgen t2v, edit as v2v, ref2v as r2v; levels 1-3 in
turn; 16 frames at 64x64), never seen in training. Methods, each run on the same items with the item's
index as the seed:

- ``bernini@file`` (the headline): the user's path (``benchmarks.user_path``): a v2v source written as the H.264 file a
  user has, r2v references as PNG files, ``atelier generate`` / ``atelier edit`` run on them as the CLI runs them, and
  the ``video.mp4`` they write decoded and graded;
- ``bernini``: ``BerniniPipeline`` on the raw frames in memory (the reference row; planner -> renderer, the default settings);
- ``no_plan``: the same pipeline with ``plan=False`` (the renderer from the text alone: Bernini-R);
- ``oracle_plan``: the renderer decoding the ground-truth plan (the target's own ViT tokens): the
  ceiling a perfect planner would reach with this renderer;
- ``layout_oracle`` (a layout planner only, ``planners.semantic.layout_planner``): the renderer decoding the plan
  the planner's painter paints from the true layout (worldgen's record): the pipeline with a perfect layout writer;
- ``no_guidance``: the pipeline with the renderer's guidance scale 1 (the conditional prediction alone);
- ``plan_rerank``: the pipeline keeping the best of ``--plan-candidates`` sampled plans by their match to the prompt
  (``BerniniConfig.plan_candidates`` [PROPOSED]);
- ``plain_rope``: the pipeline with the renderer's segment phases off at inference (every source on
  segment id 0: plain 3D RoPE), on r2v, compared on the items with 2+ references [an inference-time
  ablation: the renderer was trained with SA-3D];
- ``copy_source`` (v2v only): the source clip returned unchanged: what "change nothing" scores.

Beside the per-object reading, v2v rows carry ``asked``: whether the attribute the edit asks for reads
as the target's (recolour / reshape / resize / motion change; an added object found with its colour and
shape; a removed one gone, nothing extra detected; None for a background change, which the judge does
not read); r2v rows carry ``subject``: whether every referenced object reads with its reference's
colour and shape.

Every clip is graded with ``scorers.generation.judge_against`` against the target's caption record:
per object, whether the judge reads the colour, shape, size and direction the prompt asks for (an
object not found is wrong on all). Rows also carry the clip's PSNR against the ground-truth target,
v2v's PSNR outside the edited object against the source (``edit_preservation``), and seconds. One row
per (item, task, method) is appended to ``rows.jsonl`` as it finishes (``benchmarks.common``), so a run
resumes and shards merge.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (ArgumentsDiffer, RowLog, accuracy_cell, add_shard_arguments, command_line, group_rows, in_range, markdown_table,
                               merge_rows, paired_bootstrap, paired_cell, write_results)
from core.arguments import StrictParser

logger = logging.getLogger("benchmarks.bernini")
FILE_METHOD = "bernini@file"  # the headline: the pipeline through the user's path (benchmarks.user_path)
METHODS = (FILE_METHOD, "bernini", "no_plan", "oracle_plan", "layout_oracle", "no_guidance", "plan_rerank", "plain_rope", "copy_source")
# the attribute an edit kind asks to change, as the judge reads it (change_background: none it reads)
ASKED = {"recolor": "color", "reshape": "shape", "resize": "size", "change_motion": "direction"}
ATTRIBUTES = ("color", "shape", "direction", "size")
PSNR_CAP = 60.0
FPS = 12.0  # worldgen's clips' rate
# per-attribute paired comparisons: the planner's effect, the renderer's plan conditioning (a perfect plan against
# none), guidance, and SA-3D
ATTRIBUTE_PAIRS = ((FILE_METHOD, "bernini"), ("bernini", "no_plan"), ("oracle_plan", "no_plan"), ("layout_oracle", "bernini"), ("bernini", "no_guidance"), ("plan_rerank", "bernini"),
                   ("bernini", "plain_rope"))


def build_pipelines(args) -> dict:
    from pipelines.bernini import BerniniConfig, BerniniPipeline

    comps = {"planner": args.planner, "renderer": args.renderer, "encoder": "builtin"}
    full = BerniniPipeline.build(components=comps)
    pipes = {"bernini": full, "no_plan": BerniniPipeline(BerniniConfig(plan=False), **full.components),
             "no_guidance": BerniniPipeline(BerniniConfig(guidance_scale=1.0), **full.components),
             "plan_rerank": BerniniPipeline(BerniniConfig(plan_candidates=args.plan_candidates), **full.components)}
    for p in pipes.values():
        p.set_progress_bar_config(disable=True)
    return pipes


def painted_true_layout(planner, pool, i: int, split: str, split_seed: int) -> np.ndarray:
    """The plan a layout planner's painter paints from item ``i``'s true layout."""
    import torch

    from training.bernini_layout import item_layout

    if hasattr(planner, "for_task"):  # the builtin's one planner per task
        planner = planner.for_task(pool.task)
    if not hasattr(planner, "painter"):
        raise SystemExit(f"error: --methods layout_oracle needs a layout planner for {pool.task} (a layout-planner folder; "
                         "the builtin plans only t2v and r2v with one)")
    layout = item_layout(pool.task, split, split_seed, int(pool.index[i]), pool.cfg, planner.vocab.cells)
    src = torch.from_numpy(pool.source_tokens[i : i + 1].astype(np.float32)) if pool.task == "v2v" else None
    with torch.no_grad():
        return planner.painter([layout], *pool.plan.shape[1:4], src)[0].numpy()


def through_files(pool, i: int, pipe, seed: int) -> np.ndarray:
    """Item ``i`` as a user runs it: its inputs written as files, the verb run on them with ``pipe``'s models, and the
    frames of the video.mp4 it wrote."""
    from benchmarks.user_path import UserPath
    from core.video import Video

    comps = {k: pipe.components[k] for k in ("planner", "renderer", "encoder") if k in pipe.components}
    with UserPath() as user:
        refs = [user.still(r, name=f"ref_{j + 1}") for j, r in enumerate(pool.references(i))]
        if pool.task == "v2v":
            source = user.clip(pool.source[i], fps=FPS, name="source")
            run = user.run("edit", {"video": source, "instruction": pool.text[i], "references": refs}, seed=seed, **comps)
        else:
            run = user.run("generate", {"prompt": pool.text[i], "references": refs}, seed=seed, **comps)
        h, w = pool.frames[i].shape[1:3]
        with Video(run.folder / "video.mp4", height=h, width=w) as v:  # written enlarged (core.video.viewable)
            return v.get_frames(range(len(v)))


def render(method: str, pool, i: int, pipes: dict, split: str = "test", split_seed: int = 0) -> np.ndarray:
    task, seed = pool.task, int(pool.index[i])
    if method == FILE_METHOD:
        return through_files(pool, i, pipes["bernini"], seed)
    renderer = pipes["bernini"].renderer
    if method == "copy_source":
        return pool.source[i]
    if method == "oracle_plan":
        return renderer.generate(pool.plan[i].astype(np.float32), pool.text[i], sources=pool.sources(i), generator=seed)
    if method == "layout_oracle":
        plan = painted_true_layout(pipes["bernini"].planner, pool, i, split, split_seed)
        return renderer.generate(plan, pool.text[i], sources=pool.sources(i), generator=seed)
    kw = {"video": pool.source[i]} if task == "v2v" else {"references": pool.references(i)} if task == "r2v" else {}
    if method == "plain_rope":
        renderer.config.segment_rope = False
        try:
            return pipes["bernini"](pool.text[i], generator=seed, **kw).video
        finally:
            renderer.config.segment_rope = True
    return pipes[method](pool.text[i], generator=seed, **kw).video


def asked_change(res: dict, record: dict) -> bool | None:
    """Whether the output shows the change a v2v edit asked for (see the module docstring)."""
    edit = record.get("edit") or {}
    kind, oid = edit.get("kind"), edit.get("object_id")
    objects = {o["id"]: o for o in res["objects"]}
    if kind in ASKED:
        o = objects.get(oid)
        return None if o is None or o[ASKED[kind]] is None else bool(o[ASKED[kind]])
    if kind == "add_object":
        o = objects.get(oid)
        return bool(o and o["color"] and o["shape"])
    if kind == "remove_object":
        return bool(all(o["matched"] for o in res["objects"]) and res["extra_detections"] == 0)
    return None


def subject_match(res: dict, record: dict) -> bool:
    """Whether every referenced object of an r2v prompt reads with its reference's colour and shape."""
    objects = {o["id"]: o for o in res["objects"]}
    refs = record.get("references") or []
    return bool(refs) and all(bool(objects.get(r["object_id"], {}).get("color")) and bool(objects.get(r["object_id"], {}).get("shape"))
                              for r in refs)


def grade(frames: np.ndarray, pool, i: int, split: str, split_seed: int) -> dict:
    """The judge's reading of ``frames`` against item ``i`` of ``pool`` (drawn from ``split``), PSNR against the target
    and, for an edit, outside the region of that same item's edited object."""
    from scorers.generation import edit_preservation, judge_against, psnr
    from training.bernini_data import edit_region

    res = judge_against(frames, pool.attributes[i])
    objects = [{a: o[a] for a in ATTRIBUTES} for o in res["objects"]]
    row = {"objects": objects, "all_correct": bool(res["all_correct"]), "extra": res["extra_detections"],
           "psnr_target": min(psnr(pool.frames[i], frames), PSNR_CAP)}
    if pool.task == "r2v":
        row["subject"] = subject_match(res, pool.records[i])
    if pool.task == "v2v":
        row["edit_kind"] = (pool.records[i].get("edit") or {}).get("kind")
        row["asked"] = asked_change(res, pool.records[i])
        region = edit_region(split, split_seed, int(pool.index[i]), pool.cfg)
        row["psnr_outside_edit"] = None if region is None else min(edit_preservation(pool.source[i], frames, region)["psnr"], PSNR_CAP)
    return row


def run(args) -> list[dict]:
    import torch

    from training.bernini_data import load_pools

    torch.set_num_threads(args.threads)
    header = {"benchmark": "bernini", "tasks": args.tasks, "methods": args.methods, "planner": args.planner, "renderer": args.renderer,
              "seed": args.seed, **({"split": args.split} if args.split != "test" else {}),
              **({"plan_candidates": args.plan_candidates} if "plan_rerank" in args.methods else {})}
    log = RowLog(args.out, header, item_key="key")
    pools = load_pools(args.split, args.seed, args.start + args.n, tasks=tuple(args.tasks), workers=1)
    pipes = build_pipelines(args)
    keys = [f"{t}:{i}:{m}" for i in range(args.start, args.start + args.n) for t in args.tasks for m in args.methods
            if (m != "copy_source" or t == "v2v") and (m != "plain_rope" or t == "r2v")]
    for key in log.todo(keys):
        task, i, method = key.split(":")
        i, pool = int(i), pools[task]
        t0 = time.perf_counter()
        frames = render(method, pool, i, pipes, args.split, args.seed)
        seconds = time.perf_counter() - t0
        row = {"key": key, "item": i, "task": task, "method": method, "level": int(pool.level[i]), "text": pool.text[i],
               "n_refs": int(pool.n_refs[i]) if pool.n_refs is not None else 0,
               "seconds": round(seconds, 3), **grade(frames, pool, i, args.split, args.seed)}
        log.append([row])
        logger.info("%s: all right %s, %.1f s", key, row["all_correct"], seconds)
    return log.select(keys)


def _accuracy(flags):
    from scorers.videoqa import accuracy

    return accuracy(flags).to_dict()


def _paired_items(rows: list[dict], comparisons):
    """For each ``(a, b)`` of ``comparisons`` with shared items in one task's ``rows``: ``(a, b, items, rows by method and
    item)``; ``plain_rope`` is compared on the items with 2+ references only (where SA-3D's segment phases matter)."""
    by = {m: {r["item"]: r for r in rows if r["method"] == m} for m in METHODS}
    multi = {r["item"] for r in rows if r["n_refs"] >= 2}
    for a, b in comparisons:
        common = sorted(set(by[a]) & set(by[b]) & (multi if b == "plain_rope" else set(by[a])))
        if common:
            yield a, b, common, by


def _share_right(row: dict, attr: str) -> float:
    """The share of a clip's caption objects whose ``attr`` reads right (0 when none has it)."""
    return float(np.mean([bool(o[attr]) for o in row["objects"] if o[attr] is not None] or [0]))


def summarise(rows: list[dict]) -> tuple[dict, str]:
    summary: dict = {}
    lines = ["# Bernini on held-out worldgen prompts (test split, 16 frames at 64x64)", "",
             "The classic judge's reading of each caption object (colour, shape, direction, size: share right, %, Wilson 95%),",
             "clips with every attribute of every object right, PSNR (dB) against the ground-truth target and, for v2v, outside",
             "the edited object against the source; seconds per clip on one CPU thread.", ""]
    table = []
    for (task, method), rs in sorted(group_rows(rows, lambda r: (r["task"], r["method"])).items(), key=lambda kv: (kv[0][0], METHODS.index(kv[0][1]))):
        cell = {a: _accuracy([o[a] for r in rs for o in r["objects"] if o[a] is not None]) for a in ATTRIBUTES}
        clips = _accuracy([r["all_correct"] for r in rs])
        psnr_t = float(np.mean([r["psnr_target"] for r in rs]))
        outside = [r["psnr_outside_edit"] for r in rs if r.get("psnr_outside_edit") is not None]
        asked = [r["asked"] for r in rs if r.get("asked") is not None]
        subject = [r["subject"] for r in rs if "subject" in r]
        goal = _accuracy(asked) if asked else _accuracy(subject) if subject else None
        summary[f"{task}/{method}"] = {"clips": len(rs), **cell, "clips_all_right": clips, "psnr_target": psnr_t,
                                       "psnr_outside_edit": float(np.mean(outside)) if outside else None,
                                       "asked_change" if asked else "subject_match": goal,
                                       "seconds": float(np.mean([r["seconds"] for r in rs]))}
        table.append([task, method, len(rs), *[accuracy_cell(cell[a]) if cell[a]["n"] else "-" for a in ATTRIBUTES], accuracy_cell(clips),
                      accuracy_cell(goal) if goal else "-", f"{psnr_t:.1f}", f"{np.mean(outside):.1f}" if outside else "-",
                      f"{summary[f'{task}/{method}']['seconds']:.1f}"])
    lines += markdown_table(["task", "method", "clips", "colour", "shape", "direction", "size", "clips all right",
                             "asked change (v2v) / subject (r2v)", "PSNR target", "PSNR outside edit", "s / clip"], table)
    lines += ["", "## The plan's effect, paired on the same items (clips all right, percentage points, bootstrap 95%)", ""]
    pairs, by_task = [], group_rows(rows, lambda r: r["task"])
    for task, rs in by_task.items():
        for a, b, common, by in _paired_items(rs, ((FILE_METHOD, "bernini"), ("bernini", "no_plan"), ("oracle_plan", "bernini"), ("bernini", "no_guidance"),
                                                   ("plan_rerank", "bernini"), ("bernini", "plain_rope"))):
            d = paired_bootstrap([float(by[a][i]["all_correct"]) for i in common], [float(by[b][i]["all_correct"]) for i in common])
            summary[f"{task}/{a}-{b}"] = d
            pairs.append([task, f"{a} - {b}", len(common), paired_cell(d)])
    lines += markdown_table(["task", "comparison", "items", "difference"], pairs)
    lines += ["", "## Paired on the same items: each caption object's colour, shape and direction (percentage points)", ""]
    lines += ["(`plain_rope` on the r2v items with 2+ references, where SA-3D's segment phases matter.)", ""]
    attr_pairs = []
    for task, rs in by_task.items():
        for a, b, common, by in _paired_items(rs, ATTRIBUTE_PAIRS):
            for attr in ("color", "shape", "direction"):
                d = paired_bootstrap([_share_right(by[a][i], attr) for i in common], [_share_right(by[b][i], attr) for i in common])
                summary[f"{task}/{a}-{b}/{attr}"] = d
                attr_pairs.append([task, f"{a} - {b}", attr, len(common), paired_cell(d)])
    lines += markdown_table(["task", "comparison", "attribute", "items", "difference"], attr_pairs)
    lines += ["", "## v2v: the asked change by edit kind", ""]
    kinds = [[method, kind, len(rs), accuracy_cell(_accuracy([r["asked"] for r in rs if r["asked"] is not None]))
              if any(r["asked"] is not None for r in rs) else "-"]
             for (method, kind), rs in sorted(group_rows([r for r in rows if r["task"] == "v2v"], lambda r: (r["method"], r["edit_kind"])).items())]
    lines += markdown_table(["method", "edit kind", "clips", "asked change"], kinds)
    lines += ["", "## Clips all right by level", ""]
    levels = [[task, method, level, len(rs), accuracy_cell(_accuracy([r["all_correct"] for r in rs]))]
              for (task, method, level), rs in sorted(group_rows(rows, lambda r: (r["task"], r["method"], r["level"])).items())]
    lines += markdown_table(["task", "method", "level", "clips", "clips all right"], levels)
    return summary, "\n".join(lines) + "\n"


def versus(rows: list[dict], other: list[dict]) -> tuple[dict, list[str]]:
    """Each (task, method) of a run against the same in ``other`` (another planner or renderer on the same items and
    seeds), paired by clip: the share of caption objects right per attribute, and v2v's asked change / r2v's subject."""
    theirs = {r["key"]: r for r in other}
    summary, table = {}, []
    for (task, method), rs in sorted(group_rows(rows, lambda r: (r["task"], r["method"])).items()):
        pairs = [(r, theirs[r["key"]]) for r in rs if r["key"] in theirs]
        goal = "asked" if task == "v2v" else "subject" if task == "r2v" else None
        for attr in (*ATTRIBUTES, goal):
            if attr is None:
                continue
            if attr in ATTRIBUTES:
                mine, base = [_share_right(a, attr) for a, _ in pairs], [_share_right(b, attr) for _, b in pairs]
            else:
                kept = [(a, b) for a, b in pairs if a.get(attr) is not None and b.get(attr) is not None]
                mine, base = [float(a[attr]) for a, _ in kept], [float(b[attr]) for _, b in kept]
            if mine:
                d = paired_bootstrap(mine, base)
                summary[f"{task}/{method}/{attr}"] = d
                table.append([task, method, attr, len(mine), paired_cell(d)])
    lines = ["", "## Against the run given by --versus, paired by clip (share of caption objects right, percentage points)", ""]
    return summary, lines + markdown_table(["task", "method", "attribute", "clips", "this run - that run"], table)


def direction_ceiling(split: str, seed: int, items: range) -> dict:
    """The t2v direction share a generator that reads only the caption can expect, on ``items``.

    The judge grades every caption object's net direction (``worldgen.captions.direction``), but a caption gives
    it only for a ``linear`` or ``accelerate`` mover ("slides to the left"; "speeds up" only when it ends where it
    began) and a ``static`` one ("stays still"); a bounce, a circle or a stop-and-go ("bounces around") ends
    wherever its world took it, in words that do not depend on where.
    The best a generator can do on those is to guess, for each such motion (the caption names it), its most common
    direction on these very items, so the ceiling is (stated + those guesses' hits) / graded: a generator that reads
    every caption perfectly and knows the items' statistics. (Relations and events in a caption, "hits the wall",
    hint at a few more; the bound leaves them out.)"""
    from collections import Counter

    from training.bernini_data import world_sample

    stated, unstated = 0, {}
    for i in items:
        for o in world_sample("t2v", split, seed, i).record["attributes"]["objects"]:
            if "direction" not in o:  # a person: no direction graded
                continue
            if o["motion"] in ("static", "linear", "accelerate"):
                stated += 1
            else:
                unstated.setdefault(o["motion"], Counter())[o["direction"] or "none"] += 1
    graded = stated + sum(sum(c.values()) for c in unstated.values())
    guesses = {kind: c.most_common(1)[0] for kind, c in unstated.items()}
    hits = sum(n for _, n in guesses.values())
    return {"items": len(items), "graded_objects": graded, "stated": stated,
            "unstated": {kind: dict(c) for kind, c in unstated.items()}, "best_guesses": {k: g for k, (g, _) in guesses.items()},
            "stated_share": round(stated / graded, 4), "ceiling": round((stated + hits) / graded, 4)}


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m benchmarks.bernini", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shard_arguments(ap, 200, noun="prompts", compare="methods")
    ap.add_argument("--tasks", type=lambda s: [t for t in s.split(",") if t], default=["t2v", "v2v", "r2v"])
    ap.add_argument("--methods", type=lambda s: [m for m in s.split(",") if m], default=[FILE_METHOD, "bernini", "no_plan", "oracle_plan"])
    ap.add_argument("--planner", default="builtin", help="planner: 'builtin' or a folder (default builtin)")
    ap.add_argument("--renderer", default="builtin", help="renderer: 'builtin' or a folder (default builtin)")
    ap.add_argument("--seed", type=int, default=0, help="the test pools' seed (training.bernini_data)")
    ap.add_argument("--split", choices=("val", "test"), default="test",
                    help="held-out items to run on: val for choosing models and settings, test for the reported numbers")
    ap.add_argument("--plan-candidates", type=int, default=4, help="plans sampled per clip by the plan_rerank method (default 4)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/bernini"))
    ap.add_argument("--versus", type=Path, help="another run's folder on the same items and seeds (e.g. another planner): "
                    "every attribute paired by clip against it")
    ap.add_argument("--direction-ceiling", action="store_true",
                    help="print the t2v direction share the items' captions allow a caption-only generator (no clips drawn), then stop")
    args = ap.parse_args(argv)
    if args.direction_ceiling:
        import json

        print(json.dumps(direction_ceiling(args.split, args.seed, range(args.start, args.start + args.n))))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    bad = [m for m in args.methods if m not in METHODS] + [t for t in args.tasks if t not in ("t2v", "v2v", "r2v")]
    if bad:
        ap.error(f"unknown methods / tasks {bad}: methods are {list(METHODS)}, tasks t2v, v2v, r2v")
    if not 1 <= args.plan_candidates <= 16:
        ap.error(f"--plan-candidates {args.plan_candidates}: use 1 to 16 plans per clip")
    try:  # rows are keyed by task, item and method, so shards of different tasks merge; other settings must agree
        if args.merge:
            rows = in_range(merge_rows(args.merge, agree=("planner", "renderer", "seed", "split"), item_key="key",
                                       row_key=lambda r: r["key"]), args.items)
        else:
            rows = run(args)
    except ArgumentsDiffer as e:  # a resumed --out or merged folders made with other settings
        ap.error(str(e))
    summary, md = summarise(rows)
    if args.versus:
        from benchmarks.common import read_rows

        other = read_rows(args.versus, item_key="key")
        if not other:
            ap.error(f"--versus {args.versus}: no rows.jsonl there; give a finished run's folder")
        paired, extra = versus(rows, other)
        summary["versus"] = {"folder": str(args.versus), **paired}
        md += "\n".join(extra) + "\n"
    write_results(args.out, {"command": command_line("benchmarks.bernini", argv)}, summary, rows, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
