"""Benchmark GridProbe against its baselines on held-out synthetic long-video questions.

    python -m benchmarks.gridprobe [--vlm builtin|PATH] [--answerer PATH] [--n 60] [--start 0] [--grids 6,8,12,16]
                                   [--probe-scales 1,0.5,0.25] [--levels 1,2,3] [--out outputs/bench/gridprobe]
    python -m benchmarks.gridprobe --merge DIR [DIR ...] [--items 0:200] [--probe-scales 0.5] --out DIR   # summarise shards

Questions: worldgen ``longqa`` items of the **test** split (seeds ``split_seed("test", seed, i)``,
never seen in training), levels cycled (1: 1,000 frames / 4 options, 2: 2,000 / 6, 3: 4,000 / 8),
kinds as drawn by the generator (needle, counting, order, negation, holistic). Frames are rendered
lazily: only the K² pool frames of each clip are ever drawn.

Methods (``pipelines.gridprobe.baselines``): GridProbe and the probe ensemble per probe scale,
full-frame, uniform-M (fixed budget), and uniform / random / encoder-similarity at GridProbe's
M_eff. One pool fetch and one probe run per (question, K, probe scale) feed every method.

Per-question rows are appended to ``rows.jsonl`` as they finish (``benchmarks.common.RowLog``), so
an interrupted run resumes where it stopped (with other arguments it is refused), and ``--start``
shards split one benchmark over processes.
Writes ``results.json`` (every per-question row and the summary), ``results.md`` (accuracy with
Wilson 95% intervals, mean TFLOPs, ratio to full-frame, per-kind and per-level accuracy, the
Spearman correlation between M_eff and difficulty level) and ``pareto.png`` (accuracy vs TFLOPs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import platform
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (ArgumentsDiffer, RowLog, accuracy_cell, add_shard_arguments, comma_ints,
                               command_line, group_rows, in_range, markdown_table, merge_header, merge_rows,
                               paired_bootstrap, paired_cell, pareto_plot, spearman, write_results)
from core.arguments import StrictParser
from pipelines.gridprobe.frames import scale_text  # torch-free (numpy, OpenCV)

logger = logging.getLogger("benchmarks.gridprobe")


class WorldFrames:
    """A ``worldgen`` world as a GridProbe frame source: frames are rendered on request, one by one."""

    def __init__(self, world):
        self.world = world

    def __len__(self) -> int:
        return self.world.num_frames

    def get_frames(self, indices) -> np.ndarray:
        return np.stack([self.world.render(int(t), annotations=False).rgb for t in indices])


# ---------------------------------------------------------------------------------- running


def load_pipeline(args):
    from pipelines.gridprobe import GridProbePipeline

    pipe = GridProbePipeline.build(device=args.device, dtype=args.dtype, components={"selector": args.vlm or "builtin", "answerer": args.answerer})
    pipe.set_progress_bar_config(disable=True)
    return pipe


# the arguments that decide a row: a folder never mixes two settings (resume checks them)
HEADER_KEYS = ("vlm", "answerer", "grids", "probe_scales", "levels", "max_options", "fixed_budget", "seed", "device", "dtype",
               "methods", "budgets", "probe_batch", "files")
FILE_LABEL = "gridprobe@file"  # the headline: GridProbe at the pipeline's defaults, on the clip as an H.264 file, run as `atelier ask`
# those merged shards must share (K and the probe scale are in every row, so shards may split them)
MERGE_KEYS = ("vlm", "answerer", "levels", "max_options", "fixed_budget", "seed")


def run(args) -> list[dict]:
    from pipelines.gridprobe import compare_methods
    from worldgen.tasks import longqa
    from worldgen.tasks.base import split_seed

    log = RowLog(args.out, {"benchmark": "gridprobe", **{k: getattr(args, k) for k in HEADER_KEYS}})
    items = range(args.start, args.start + args.n)
    pipe = load_pipeline(args)
    base = pipe.config
    for i in log.todo(items):
        item_rows = []
        level = args.levels[i % len(args.levels)]
        seed = split_seed("test", args.seed, i)
        sample = longqa.generate(seed, longqa.Config(level=level))
        rec = sample.record
        if args.max_options and len(rec["options"]) > args.max_options:
            rec = _fewer_options(rec, args.max_options)
        evidence = {f for a, b in rec["evidence_ranges"] for f in range(a, b)}
        source = WorldFrames(sample.worlds["video"])
        for K in args.grids:
            pipe.config = dataclasses.replace(base, grid=K, probe_batch=args.probe_batch)
            t0 = time.perf_counter()
            cmp = compare_methods(pipe, source, rec["question"], rec["options"], probe_scales=args.probe_scales, methods=args.methods,
                                  fixed_budget=args.fixed_budget, generator=seed, budgets=args.budgets or ())
            for r in cmp.results:
                item_rows.append({
                    "item": i, "seed": seed, "level": level, "kind": rec["kind"], "K": K, "method": r.method,
                    "probe_scale": r.probe_scale, "budget": r.budget, "label": r.label, "correct": r.answer_index == rec["answer_index"],
                    "answer_index": r.answer_index, "gold_index": rec["answer_index"], "tflops": r.tflops,
                    "seconds": r.seconds, "n_frames": len(r.frames), "m_eff": r.m_eff,
                    "evidence_hit": any(f in evidence for f in r.frames), "shape": r.extra.get("shape"),
                })  # fmt: skip
            if args.files:
                item_rows.append(through_file(args, pipe, sample.worlds["video"], rec, i, seed, level, K, evidence))
            logger.info("item %d (%d of %d) level %d %-9s K=%-2d %.1f s  gridprobe: %s", i, i - args.start + 1, args.n, level, rec["kind"], K,
                        time.perf_counter() - t0,
                        " ".join(f"{'ok' if r.answer_index == rec['answer_index'] else 'xx'}(M={r.m_eff})"
                                 for r in cmp.results if r.method == "gridprobe" and not r.budget))
        log.append(item_rows)  # a whole item at a time: a resumed run redoes at most one item
    return log.select(items)


def through_file(args, pipe, world, rec: dict, i: int, seed: int, level: int, K: int, evidence: set) -> dict:
    """GridProbe at its defaults on the clip written as the H.264 file a user has, run as `atelier ask` runs it
    (``benchmarks.user_path``); the row's answer and compute are read back from the result.json it wrote."""
    from benchmarks.user_path import UserPath

    with UserPath(seed=seed) as user:
        video = user.clip((world.render(t, annotations=False).rgb for t in range(world.num_frames)), fps=world.fps, name=f"q{i:05d}")
        t0 = time.perf_counter()
        run = user.run("ask", {"video": video, "question": rec["question"], "options": rec["options"]}, grid=K,
                       probe_batch=args.probe_batch, vlm=pipe.selector, answerer=pipe.answerer)
        seconds = time.perf_counter() - t0
        result = run.result()
    answer = int(result["answer_index"])
    frames = result["frames"]
    return {"item": i, "seed": seed, "level": level, "kind": rec["kind"], "K": K, "method": "gridprobe", "input": "file",
            "probe_scale": scale_key(pipe.config.probe_scale if pipe.config.probe_height_scale is None
                                     else (pipe.config.probe_height_scale, pipe.config.probe_scale)),
            "budget": "", "label": FILE_LABEL, "correct": answer == rec["answer_index"], "answer_index": answer,
            "gold_index": rec["answer_index"], "tflops": result["tflops"]["total"], "seconds": seconds, "n_frames": len(frames),
            "m_eff": result["m_eff"], "evidence_hit": any(f in evidence for f in frames), "shape": None}


def probe_scales(text: str) -> list[float | tuple[float, float]]:
    """``"0.5,0.25x0.5"`` -> ``[0.5, (0.25, 0.5)]``: one fraction of the source side, or height x width fractions."""
    try:
        scales = [[float(v) for v in part.split("x")] for part in text.split(",") if part.strip()]
    except ValueError:
        scales = []
    if not scales or any(len(s) > 2 for s in scales):
        raise argparse.ArgumentTypeError(f"{text!r}: write fractions such as 0.5 or HEIGHTxWIDTH such as 0.25x0.5, comma-separated")
    return [scale_key(s) for s in scales]


def scale_key(scale) -> float | tuple[float, float]:
    """A row's probe scale as compared and grouped: JSON holds a (height, width) pair as a list."""
    if isinstance(scale, (list, tuple)):
        return scale[0] if len(scale) == 1 or scale[0] == scale[1] else (scale[0], scale[1])
    return scale


def scale_area(scale) -> float:
    """The share of the source's pixels a probe keeps (orders probe scales from full size down)."""
    if scale is None:
        return 0.0
    return scale[0] * scale[1] if isinstance(scale, (list, tuple)) else scale * scale


def comma_words(text: str) -> list[str]:
    from pipelines.gridprobe import METHODS

    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in METHODS]
    if not words or bad:
        raise argparse.ArgumentTypeError(f"{text!r}: choose among {', '.join(METHODS)}")
    return words


def parse_budgets(text: str) -> list[dict]:
    """``'gamma=6;max_frames=64,gamma=4.5'`` -> ``[{"gamma": 6.0}, {"max_frames": 64, "gamma": 4.5}]``."""
    from pipelines.gridprobe.baselines import BUDGET_SETTINGS

    kinds = {"budget_rule": str, "gamma": float, "min_frames": int, "max_frames": int, "tie_break": str}
    budgets = []
    for spec in (s.strip() for s in text.split(";") if s.strip()):
        budget = {}
        for pair in spec.split(","):
            key, _, value = pair.partition("=")
            key = key.strip()
            if key not in BUDGET_SETTINGS or not value.strip():
                raise argparse.ArgumentTypeError(f"{pair!r}: write key=value with a key among {', '.join(BUDGET_SETTINGS)}")
            try:
                budget[key] = kinds[key](value.strip())
            except ValueError:
                raise argparse.ArgumentTypeError(f"{pair!r}: {key} takes a {kinds[key].__name__}") from None
        budgets.append(budget)
    if not budgets:
        raise argparse.ArgumentTypeError(f"{text!r}: give at least one budget setting")
    return budgets


def _fewer_options(rec: dict, n: int) -> dict:
    """The question with only its first ``n`` options, the answer kept (it replaces the last one kept
    when it falls outside them): the same clip and evidence with fewer choices."""
    keep = rec["options"][:n]
    if rec["answer"] not in keep:
        keep = keep[: n - 1] + [rec["answer"]]
    return {**rec, "options": keep, "answer_index": keep.index(rec["answer"])}


def read_rows(dirs: list[Path]) -> list[dict]:
    """Rows from the ``rows.jsonl`` of each directory (later duplicates of an (item, K, label) are dropped:
    shards may run other K values or probe scales on the same questions); ``ArgumentsDiffer`` when their
    headers disagree on ``MERGE_KEYS``."""
    return merge_rows(dirs, agree=MERGE_KEYS, row_key=lambda r: (r["item"], r["K"], r["label"]))


# ---------------------------------------------------------------------------------- summarising


def summarise(rows: list[dict]) -> dict:
    from scorers.videoqa import accuracy_report

    groups = group_rows(rows, lambda r: (r["K"], r["label"]))
    full = {K: np.mean([r["tflops"] for r in g]) for (K, label), g in groups.items() if label == "full_frame"}
    methods = []
    def order(item):  # by K, then method, then probe scale from full resolution down
        (K, _), g = item
        return K, _method_order(g[0]), -scale_area(g[0]["probe_scale"])

    for (K, label), g in sorted(groups.items(), key=order):
        rep = accuracy_report(g, by=("kind", "level"))
        tf = rep["compute"]["mean"]
        entry = {
            "K": K, "label": label, "method": g[0]["method"], "probe_scale": g[0]["probe_scale"], "budget": g[0].get("budget", ""), "n": len(g),
            "accuracy": rep["overall"].to_dict(), "mean_tflops": tf, "tflops_ci": [rep["compute"]["low"], rep["compute"]["high"]],
            "vs_full_frame": tf / full[K] if full.get(K) else None,
            "mean_frames": float(np.mean([r["n_frames"] for r in g])),
            "evidence_hit": float(np.mean([r["evidence_hit"] for r in g])),
            "mean_seconds": float(np.mean([r["seconds"] for r in g])),
            "by_kind": {k: a.to_dict() for k, a in rep["by"]["kind"].items()},
            "by_level": {str(k): a.to_dict() for k, a in rep["by"]["level"].items()},
        }  # fmt: skip
        if g[0]["method"] == "gridprobe":
            entry["spearman_meff_level"] = spearman([r["m_eff"] for r in g], [r["level"] for r in g])
            entry["mean_m_eff_by_level"] = {str(lv): float(np.mean([r["m_eff"] for r in g if r["level"] == lv]))
                                            for lv in sorted({r["level"] for r in g})}
            # within each kind too: a falling budget then is not an artefact of how kinds mix across levels
            entry["spearman_meff_level_by_kind"] = {k: spearman([r["m_eff"] for r in g if r["kind"] == k], [r["level"] for r in g if r["kind"] == k])
                                                    for k in sorted({r["kind"] for r in g})}
        methods.append(entry)
    paired = paired_differences(rows)
    return {"methods": methods, "paired": paired, "default_rule": default_rule(paired)}


MAX_LOSS_PP = 1.0  # issue 50: the default run loses at most 1 pp against the full-frame pass ...
MIN_SAVING = 3.0  # ... and spends >= 3x less compute (the target the rule's pick is checked against)


def default_rule(paired: list[dict], max_loss_pp: float = MAX_LOSS_PP) -> dict | None:
    """The rule the pipeline's GridProbe defaults are chosen by: of the GridProbe settings (probe scale x budget)
    at most ``max_loss_pp`` below full-frame on the same questions (point estimate), the one that saves the most
    TFLOPs (ties: the more accurate). Applied to one half of the questions and checked on the other, so the pick is
    not graded on the questions that chose it; ``meets_saving`` says whether it also reaches ``MIN_SAVING``. None
    when no setting is within the loss."""
    ok = [d for d in paired if d["vs"] == "full_frame" and d["kind"] == "all" and d["diff_pp"] >= -max_loss_pp and d["gridprobe"] != FILE_LABEL]
    if not ok:
        return None
    best = max(ok, key=lambda d: (round(d["tflops_ratio"], 6), d["diff_pp"]))
    return {"max_loss_pp": max_loss_pp, "label": best["gridprobe"], "K": best["K"], "diff_pp": best["diff_pp"], "ci_pp": best["ci_pp"],
            "tflops_ratio": best["tflops_ratio"], "meets_saving": best["tflops_ratio"] >= MIN_SAVING, "n": best["n"]}


def paired_differences(rows: list[dict], n_boot: int = 2000) -> list[dict]:
    """GridProbe minus each comparison on the same questions (percentage points), with a paired
    bootstrap 95% interval: against full-frame, uniform-M_eff and encoder top-M_eff overall, and
    against encoder top-M_eff on negation and counting questions (the issue's acceptance checks)."""
    by = {(r["K"], r["label"], r["item"]): r for r in rows}
    out = []
    for K, label in sorted({(r["K"], r["label"]) for r in rows if r["method"] == "gridprobe"}):
        scale = label.split("@")[1].split("/")[0]
        for other, kind in (("full_frame", None), (f"uniform_meff@{scale}", None), (f"encoder_meff@{scale}", None),
                            (f"encoder_meff@{scale}", "negation"), (f"encoder_meff@{scale}", "counting")):
            pairs = [(r, by[(K, other, r["item"])]) for (k, lab, _), r in by.items()
                     if k == K and lab == label and (K, other, r["item"]) in by and kind in (None, r["kind"])]
            if not pairs:
                continue
            d = paired_bootstrap([float(a["correct"]) for a, _ in pairs], [float(b["correct"]) for _, b in pairs], n_boot)
            ratio = sum(b["tflops"] for _, b in pairs) / sum(a["tflops"] for a, _ in pairs)  # on the same questions
            out.append({"K": K, "gridprobe": label, "vs": other, "kind": kind or "all", "n": d["n"],
                        "diff_pp": 100 * d["diff"], "ci_pp": [100 * d["low"], 100 * d["high"]],
                        "tflops_ratio": float(ratio) if other == "full_frame" else None})
    return out


def _method_order(row: dict) -> int:
    from pipelines.gridprobe import METHODS

    return METHODS.index(row["method"])


def _name(m: dict) -> str:
    if m.get("label") == FILE_LABEL:
        return "**gridprobe through the file** (the user's path)"
    return m["method"] + (f" ({m['budget']})" if m.get("budget") else "")


def _scale(m: dict) -> str:
    return scale_text(m["probe_scale"])


def _cells(values: dict, keys, fmt) -> list[str]:
    return [fmt(values[k]) if k in values else "-" for k in keys]


def markdown(summary: dict, meta: dict) -> str:
    ms = summary["methods"]
    lines = [
        "# GridProbe on worldgen longqa (test split)", "",
        f"Command: `{meta['command']}`  ",
        f"Questions: {meta['n']}; grids {meta['grids']}; probe scales {meta['probe_scales']}; levels {meta['levels']}; "
        f"selector VLM `{meta['vlm']}`, answerer `{meta['answerer'] or meta['vlm']}`"
        + (f"; at most {meta['max_options']} options per question" if meta.get("max_options") else "") + f"; {meta['seconds']:.0f} s total.", "",
        "TFLOPs: language-model FLOPs per question (vision tower excluded, spec B.8). *_meff baselines use GridProbe's "
        "per-question budget and are charged only their own pass. Accuracy: % with Wilson 95% interval.", "",
    ]  # fmt: skip
    lines += markdown_table(
        ["K", "method", "probe scale", "accuracy % [95% CI]", "mean TFLOPs", "x full-frame", "mean frames", "evidence hit %", "s / question"],
        [[m["K"], _name(m), _scale(m), accuracy_cell(m["accuracy"]), f"{m['mean_tflops']:.4g}",
          f"{m['vs_full_frame']:.3f}" if m["vs_full_frame"] is not None else "-", f"{m['mean_frames']:.1f}",
          f"{100 * m['evidence_hit']:.0f}", f"{m['mean_seconds']:.3f}"] for m in ms])  # fmt: skip
    kinds = sorted({k for m in ms for k in m["by_kind"]})
    lines += ["", "## Accuracy by question kind (%, n in brackets)", ""]
    lines += markdown_table(["K", "method", "probe scale", *kinds],
                            [[m["K"], _name(m), _scale(m), *_cells(m["by_kind"], kinds, lambda a: f"{100 * a['value']:.0f} ({a['n']})")]
                             for m in ms])
    levels = sorted({lv for m in ms for lv in m["by_level"]})
    lines += ["", "## Accuracy by difficulty level, and GridProbe's budget", ""]
    lines += markdown_table(
        ["K", "method", "probe scale", *(f"level {lv}" for lv in levels), "mean M_eff by level", "Spearman(M_eff, level)"],
        [[m["K"], _name(m), _scale(m), *_cells(m["by_level"], levels, lambda a: f"{100 * a['value']:.0f}"),
          ", ".join(f"{v:.1f}" for v in m.get("mean_m_eff_by_level", {}).values()) or "-",
          f"{m['spearman_meff_level']:.3f}" if "spearman_meff_level" in m else "-"] for m in ms])  # fmt: skip
    by_kind = [m for m in ms if "spearman_meff_level_by_kind" in m]
    if by_kind:
        kk = sorted({k for m in by_kind for k in m["spearman_meff_level_by_kind"]})
        lines += ["", "## Spearman(M_eff, level) within each question kind", ""]
        lines += markdown_table(["K", "method", "probe scale", *kk],
                                [[m["K"], _name(m), scale_text(m["probe_scale"]), *_cells(m["spearman_meff_level_by_kind"], kk, "{:.3f}".format)]
                                 for m in by_kind])
    lines += ["", "## GridProbe against the baselines on the same questions (paired)", "",
              "Difference in accuracy, percentage points, with a paired bootstrap 95% interval; for full-frame also "
              "how many times fewer TFLOPs GridProbe spends.", ""]
    lines += markdown_table(["K", "GridProbe", "vs", "questions", "n", "difference (pp) [95% CI]", "TFLOPs saving"],
                            [[d["K"], d["gridprobe"], d["vs"], d["kind"], d["n"],
                              paired_cell({"diff": d["diff_pp"], "low": d["ci_pp"][0], "high": d["ci_pp"][1]}, scale=1),
                              f"{d['tflops_ratio']:.2f}x" if d["tflops_ratio"] else "-"] for d in summary.get("paired", [])])
    rule = summary.get("default_rule")
    lines += ["", f"Default rule (`default_rule`: of the settings within {MAX_LOSS_PP:g} pp of full-frame, the one saving most TFLOPs): "
              + (f"**{rule['label']}** (K = {rule['K']}), {rule['diff_pp']:+.1f} [{rule['ci_pp'][0]:+.1f}, {rule['ci_pp'][1]:+.1f}] pp "
                 f"at {rule['tflops_ratio']:.2f}x on {rule['n']} questions ({'meets' if rule['meets_saving'] else 'below'} the "
                 f"{MIN_SAVING:g}x target)." if rule else "no setting is within that loss.")]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- the Pareto plot

COLOURS = {"gridprobe": (214, 39, 40), "probe_ensemble": (255, 127, 14), "full_frame": (31, 119, 180),
           "uniform_m": (44, 160, 44), "uniform_meff": (148, 103, 189), "random_meff": (140, 86, 75),
           "encoder_meff": (227, 119, 194)}


def pareto_points(summary: dict, x: str = "mean_tflops") -> list[dict]:
    """Every (K, method, probe scale, budget) of a summary as a point of ``benchmarks.common.pareto_plot``, at
    ``x`` = ``mean_tflops`` or ``mean_seconds`` (wall time)."""
    return [{"x": m[x], "y": m["accuracy"]["value"], "group": m["method"],
             "tag": f"K{m['K']}" + (f"@{scale_text(m['probe_scale'])}" if m["probe_scale"] is not None else "") + (f" {m['budget']}" if m.get("budget") else "")}
            for m in summary["methods"]]


# ---------------------------------------------------------------------------------- CLI


def main(argv=None) -> int:
    ap = StrictParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vlm", default="builtin", help="selector VLM: 'builtin', a builtin VLM directory or a transformers checkpoint directory")
    ap.add_argument("--answerer", help="VLM for every answering pass (default: the selector)")
    add_shard_arguments(ap, n=60, noun="questions", compare="K values")
    ap.add_argument("--grids", type=comma_ints, default=[6, 8, 12, 16], help="comma-separated K values (default 6,8,12,16)")
    ap.add_argument("--probe-scales", type=probe_scales, help="probe resolutions, each a fraction or HEIGHTxWIDTH fractions such as 0.25x0.5 "
                    "(default 1,0.5,0.25); with --merge: keep only "
                    "these scales' rows (e.g. 0.5 to compare K values at one resolution)")
    ap.add_argument("--levels", type=comma_ints, default=[1, 2, 3], help="longqa levels, cycled over items (default 1,2,3)")
    ap.add_argument("--max-options", type=int, help="ask with at most this many options (the answer kept): isolates the number of "
                    "choices from the rest of a level's difficulty (default: the level's 4 / 6 / 8)")
    ap.add_argument("--fixed-budget", type=int, default=8, help="M of the uniform-M baseline (default 8)")
    ap.add_argument("--methods", type=comma_words, help="run only these methods, comma-separated (default: all of "
                    "gridprobe, probe_ensemble, full_frame, uniform_m, uniform_meff, random_meff, encoder_meff)")
    ap.add_argument("--budgets", type=parse_budgets, help="further GridProbe budget settings on the same probes, ';'-separated, "
                    "each 'key=value,...' of budget_rule, gamma, min_frames, max_frames, tie_break (e.g. 'gamma=6;max_frames=64'): "
                    "one focused pass each, so a Pareto sweep over the budget costs no new probes")
    ap.add_argument("--probe-batch", type=int, help="probes per forward (default K: a row or a column at once; 1: one at a time)")
    ap.add_argument("--files", action=argparse.BooleanOptionalAction, default=True,
                    help="also run GridProbe at its defaults on each clip written as an H.264 file, as `atelier ask` runs it (the "
                         "user's path, the headline row gridprobe@file; default on); --no-files for sweeps of settings on raw frames")
    ap.add_argument("--seed", type=int, default=0, help="base seed inside the test split (default 0)")
    ap.add_argument("--device")
    ap.add_argument("--dtype")
    ap.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest for small models on a busy machine)")
    ap.add_argument("--out", default="outputs/bench/gridprobe", help="output folder")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.merge:
        try:
            rows = in_range(read_rows(args.merge), args.items)
        except ArgumentsDiffer as e:
            ap.error(str(e))
        if args.probe_scales:
            rows = [r for r in rows if r["probe_scale"] is None or r["label"] == FILE_LABEL or scale_key(r["probe_scale"]) in args.probe_scales]
        if not rows:
            filters = (f" with --items {args.items[0]}:{args.items[1]}" if args.items else "") + (f" at --probe-scales {','.join(map(scale_text, args.probe_scales))}" if args.probe_scales else "")
            ap.error(f"--merge {' '.join(map(str, args.merge))}: no finished questions (rows.jsonl) there{filters}")
        metas = [json.loads((d / "results.json").read_text())["meta"] for d in args.merge if (d / "results.json").is_file()]
        args.n = len({r["item"] for r in rows})
        args.grids = sorted({r["K"] for r in rows})
        elapsed = sum(m["seconds"] for m in metas)
        header = {**(metas[0] if metas else {}), **merge_header(args.merge)}  # shards killed before results.json have only run.json
        for key in MERGE_KEYS:
            if key in header:
                setattr(args, key, header[key])
        # shards may run different probe scales (e.g. 1/2 and 1/4 on all questions, 1 on a few): list them all
        args.probe_scales = sorted({scale_key(r["probe_scale"]) for r in rows if r["probe_scale"] is not None and r["label"] != FILE_LABEL},
                                   key=scale_area, reverse=True)
    else:
        if args.items:
            ap.error("--items only filters a --merge; to run a range of questions use --start and --n")
        args.probe_scales = args.probe_scales or [1.0, 0.5, 0.25]
        if args.max_options is not None and args.max_options < 2:
            ap.error(f"invalid --max-options {args.max_options}: a question needs at least 2 options")
        try:
            rows = run(args)
        except ArgumentsDiffer as e:
            ap.error(str(e))
        elapsed = time.perf_counter() - t0
    summary = summarise(rows)
    meta = {"command": command_line("benchmarks.gridprobe", argv),
            "n": args.n, "grids": args.grids, "probe_scales": args.probe_scales, "levels": args.levels, "vlm": args.vlm,
            "answerer": args.answerer, "fixed_budget": args.fixed_budget, "seed": args.seed, "max_options": args.max_options,
            "seconds": elapsed, "python": platform.python_version(), "machine": platform.machine()}
    write_results(out, meta, summary, rows, markdown(summary, meta))
    pareto_plot(pareto_points(summary), out / "pareto.png", COLOURS,
                more_panels=[(pareto_points(summary, "mean_seconds"), "mean seconds per question, one thread (log)")])
    print(f"wrote {out / 'results.json'}, {out / 'results.md'} and {out / 'pareto.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
