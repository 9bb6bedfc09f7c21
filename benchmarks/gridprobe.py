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

Per-question rows are appended to ``rows.jsonl`` as they finish, so an interrupted run resumes
where it stopped (same arguments), and ``--start`` shards split one benchmark over processes.
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
from collections import defaultdict
from pathlib import Path

import numpy as np

from core.atomic import atomic_path, write_text_atomic

logger = logging.getLogger("benchmarks.gridprobe")


class WorldFrames:
    """A ``worldgen`` world as a GridProbe frame source: frames are rendered on request, one by one."""

    def __init__(self, world):
        self.world = world

    def __len__(self) -> int:
        return self.world.num_frames

    def get_frames(self, indices) -> np.ndarray:
        return np.stack([self.world.render(int(t), annotations=False).rgb for t in indices])


def spearman(x, y) -> float:
    """Spearman rank correlation with average ranks for ties; NaN when either side is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(np.corrcoef(_ranks(x), _ranks(y))[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=np.float64)
    for value in np.unique(v):  # ties share their mean rank
        tied = v == value
        ranks[tied] = ranks[tied].mean()
    return ranks


# ---------------------------------------------------------------------------------- running


def load_pipeline(args):
    from app.ask import build_pipeline

    pipe = build_pipeline(vlm=args.vlm, answerer=args.answerer, device=args.device, dtype=args.dtype)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def run(args) -> list[dict]:
    from pipelines.gridprobe import compare_methods
    from worldgen.tasks import longqa
    from worldgen.tasks.base import split_seed

    pipe = load_pipeline(args)
    base = pipe.config
    log = Path(args.out) / "rows.jsonl"
    rows = read_rows([Path(args.out)])
    done = {r["item"] for r in rows}
    for i in range(args.start, args.start + args.n):
        if i in done:
            continue
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
            pipe.config = dataclasses.replace(base, grid=K)
            t0 = time.perf_counter()
            cmp = compare_methods(pipe, source, rec["question"], rec["options"], probe_scales=args.probe_scales,
                                  fixed_budget=args.fixed_budget, generator=seed)
            for r in cmp.results:
                item_rows.append({
                    "item": i, "seed": seed, "level": level, "kind": rec["kind"], "K": K, "method": r.method,
                    "probe_scale": r.probe_scale, "label": r.label, "correct": r.answer_index == rec["answer_index"],
                    "answer_index": r.answer_index, "gold_index": rec["answer_index"], "tflops": r.tflops,
                    "seconds": r.seconds, "n_frames": len(r.frames), "m_eff": r.m_eff,
                    "evidence_hit": any(f in evidence for f in r.frames), "shape": r.extra.get("shape"),
                })  # fmt: skip
            logger.info("item %d (%d of %d) level %d %-9s K=%-2d %.1f s  gridprobe: %s", i, i - args.start + 1, args.n, level, rec["kind"], K,
                        time.perf_counter() - t0,
                        " ".join(f"{'ok' if r.answer_index == rec['answer_index'] else 'xx'}(M={r.m_eff})"
                                 for r in cmp.results if r.method == "gridprobe"))
        with log.open("a") as f:  # one line per row, a whole item at a time: a resumed run redoes at most one item
            f.write("".join(json.dumps(r, default=_plain) + "\n" for r in item_rows))
        rows += item_rows
    return [r for r in rows if args.start <= r["item"] < args.start + args.n]


def _fewer_options(rec: dict, n: int) -> dict:
    """The question with only its first ``n`` options, the answer kept (it replaces the last one kept
    when it falls outside them): the same clip and evidence with fewer choices."""
    keep = rec["options"][:n]
    if rec["answer"] not in keep:
        keep = keep[: n - 1] + [rec["answer"]]
    return {**rec, "options": keep, "answer_index": keep.index(rec["answer"])}


def _plain(o):
    return o.item() if hasattr(o, "item") else str(o)  # numpy scalars -> Python


def read_rows(dirs: list[Path]) -> list[dict]:
    """Rows from the ``rows.jsonl`` of each directory (later duplicates of an (item, K, label) are dropped)."""
    rows, seen = [], set()
    for d in dirs:
        path = d / "rows.jsonl"
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill
                continue
            key = (r["item"], r["K"], r["label"])
            if key not in seen:
                seen.add(key)
                rows.append(r)
    return rows


# ---------------------------------------------------------------------------------- summarising


def summarise(rows: list[dict]) -> dict:
    from scorers.videoqa import accuracy_report

    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["K"], r["label"])].append(r)
    full = {K: np.mean([r["tflops"] for r in g]) for (K, label), g in groups.items() if label == "full_frame"}
    methods = []
    def order(item):  # by K, then method, then probe scale from full resolution down
        (K, _), g = item
        return K, _method_order(g[0]), -(g[0]["probe_scale"] or 0.0)

    for (K, label), g in sorted(groups.items(), key=order):
        rep = accuracy_report(g, by=("kind", "level"))
        tf = rep["compute"]["mean"]
        entry = {
            "K": K, "label": label, "method": g[0]["method"], "probe_scale": g[0]["probe_scale"], "n": len(g),
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
    return {"methods": methods, "paired": paired_differences(rows)}


def paired_differences(rows: list[dict], n_boot: int = 2000) -> list[dict]:
    """GridProbe minus each comparison on the same questions (percentage points), with a paired
    bootstrap 95% interval: against full-frame, uniform-M_eff and encoder top-M_eff overall, and
    against encoder top-M_eff on negation and counting questions (the issue's acceptance checks)."""
    by = {(r["K"], r["label"], r["item"]): r for r in rows}
    out = []
    for K, label in sorted({(r["K"], r["label"]) for r in rows if r["method"] == "gridprobe"}):
        scale = label.split("@")[1]
        for other, kind in (("full_frame", None), (f"uniform_meff@{scale}", None), (f"encoder_meff@{scale}", None),
                            (f"encoder_meff@{scale}", "negation"), (f"encoder_meff@{scale}", "counting")):
            pairs = [(r, by[(K, other, r["item"])]) for (k, lab, _), r in by.items()
                     if k == K and lab == label and (K, other, r["item"]) in by and kind in (None, r["kind"])]
            if not pairs:
                continue
            d = np.array([float(a["correct"]) - float(b["correct"]) for a, b in pairs])
            boot = np.random.default_rng(0).choice(d, (n_boot, len(d))).mean(1)
            ratio = sum(b["tflops"] for _, b in pairs) / sum(a["tflops"] for a, _ in pairs)  # on the same questions
            out.append({"K": K, "gridprobe": label, "vs": other, "kind": kind or "all", "n": len(d),
                        "diff_pp": 100 * float(d.mean()), "ci_pp": [100 * float(np.quantile(boot, 0.025)), 100 * float(np.quantile(boot, 0.975))],
                        "tflops_ratio": float(ratio) if other == "full_frame" else None})
    return out


def _method_order(row: dict) -> int:
    from pipelines.gridprobe import METHODS

    return METHODS.index(row["method"])


def _pct(a: dict) -> str:
    return f"{100 * a['value']:.1f} [{100 * a['low']:.0f}, {100 * a['high']:.0f}]"


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
        "| K | method | probe scale | accuracy % [95% CI] | mean TFLOPs | x full-frame | mean frames | evidence hit % | s / question |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for m in ms:
        ratio = f"{m['vs_full_frame']:.3f}" if m["vs_full_frame"] is not None else "-"
        scale = f"{m['probe_scale']:g}" if m["probe_scale"] is not None else "-"
        lines.append(f"| {m['K']} | {m['method']} | {scale} | {_pct(m['accuracy'])} | {m['mean_tflops']:.4g} | {ratio} | "
                     f"{m['mean_frames']:.1f} | {100 * m['evidence_hit']:.0f} | {m['mean_seconds']:.3f} |")
    kinds = sorted({k for m in ms for k in m["by_kind"]})
    lines += ["", "## Accuracy by question kind (%, n in brackets)", "",
              "| K | method | probe scale | " + " | ".join(kinds) + " |", "|---|---|---|" + "---|" * len(kinds)]
    for m in ms:
        cells = [f"{100 * m['by_kind'][k]['value']:.0f} ({m['by_kind'][k]['n']})" if k in m["by_kind"] else "-" for k in kinds]
        scale = f"{m['probe_scale']:g}" if m["probe_scale"] is not None else "-"
        lines.append(f"| {m['K']} | {m['method']} | {scale} | " + " | ".join(cells) + " |")
    levels = sorted({lv for m in ms for lv in m["by_level"]})
    lines += ["", "## Accuracy by difficulty level, and GridProbe's budget", "",
              "| K | method | probe scale | " + " | ".join(f"level {lv}" for lv in levels)
              + " | mean M_eff by level | Spearman(M_eff, level) |", "|---|---|---|" + "---|" * (len(levels) + 2)]
    for m in ms:
        cells = [f"{100 * m['by_level'][lv]['value']:.0f}" if lv in m["by_level"] else "-" for lv in levels]
        scale = f"{m['probe_scale']:g}" if m["probe_scale"] is not None else "-"
        budget = ", ".join(f"{v:.1f}" for v in m.get("mean_m_eff_by_level", {}).values()) or "-"
        rho = f"{m['spearman_meff_level']:.3f}" if "spearman_meff_level" in m else "-"
        lines.append(f"| {m['K']} | {m['method']} | {scale} | " + " | ".join(cells) + f" | {budget} | {rho} |")
    by_kind = [m for m in ms if "spearman_meff_level_by_kind" in m]
    if by_kind:
        kk = sorted({k for m in by_kind for k in m["spearman_meff_level_by_kind"]})
        lines += ["", "## Spearman(M_eff, level) within each question kind", "",
                  "| K | method | probe scale | " + " | ".join(kk) + " |", "|---|---|---|" + "---|" * len(kk)]
        for m in by_kind:
            rho = m["spearman_meff_level_by_kind"]
            lines.append(f"| {m['K']} | {m['method']} | {m['probe_scale']:g} | " + " | ".join(f"{rho[k]:.3f}" if k in rho else "-" for k in kk) + " |")
    lines += ["", "## GridProbe against the baselines on the same questions (paired)", "",
              "Difference in accuracy, percentage points, with a paired bootstrap 95% interval; for full-frame also "
              "how many times fewer TFLOPs GridProbe spends.", "",
              "| K | GridProbe | vs | questions | n | difference (pp) [95% CI] | TFLOPs saving |", "|---|---|---|---|---|---|---|"]
    for d in summary.get("paired", []):
        saving = f"{d['tflops_ratio']:.2f}x" if d["tflops_ratio"] else "-"
        lines.append(f"| {d['K']} | {d['gridprobe']} | {d['vs']} | {d['kind']} | {d['n']} | {d['diff_pp']:+.1f} "
                     f"[{d['ci_pp'][0]:+.1f}, {d['ci_pp'][1]:+.1f}] | {saving} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- the Pareto plot

COLOURS = {"gridprobe": (214, 39, 40), "probe_ensemble": (255, 127, 14), "full_frame": (31, 119, 180),
           "uniform_m": (44, 160, 44), "uniform_meff": (148, 103, 189), "random_meff": (140, 86, 75),
           "encoder_meff": (227, 119, 194)}


def pareto_plot(summary: dict, path: Path, size: tuple[int, int] = (1000, 640)) -> Path:
    """Accuracy vs mean TFLOPs (log x) for every (K, method, probe scale), the Pareto front drawn as a line.

    Drawn with PIL: matplotlib is not a dependency of Atelier.
    """
    from PIL import Image, ImageDraw

    ms = [m for m in summary["methods"] if m["mean_tflops"] > 0]
    W, H = size
    left, right, top, bottom = 80, 220, 40, 60
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    if not ms:
        d.text((W // 2 - 60, H // 2), "no data", fill="black")
        _save_atomic(img, path)
        return path
    xs = np.log10([m["mean_tflops"] for m in ms])
    ys = np.array([100 * m["accuracy"]["value"] for m in ms])
    x0 = float(np.floor(xs.min()))
    x1 = max(float(np.ceil(xs.max())), x0 + 1)
    y0, y1 = 0.0, 100.0

    def px(x, y):
        return (left + (x - x0) / (x1 - x0) * (W - left - right), top + (y1 - y) / (y1 - y0) * (H - top - bottom))

    d.rectangle([left, top, W - right, H - bottom], outline="black")
    for e in range(int(x0), int(x1) + 1):
        x, _ = px(e, y0)
        d.line([x, H - bottom, x, H - bottom + 5], fill="black")
        d.text((x - 14, H - bottom + 8), f"1e{e}", fill="black")
    for y in range(0, 101, 20):
        _, yy = px(x0, y)
        d.line([left - 5, yy, left, yy], fill="black")
        d.line([left, yy, W - right, yy], fill=(230, 230, 230))
        d.text((left - 32, yy - 6), f"{y}%", fill="black")
    d.text(((W - right + left) // 2 - 90, H - 25), "mean TFLOPs per question (log)", fill="black")
    d.text((8, top - 28), "accuracy vs compute (Pareto front in grey)", fill="black")
    front = _pareto_front(list(zip(xs, ys)))
    if len(front) > 1:
        d.line([px(x, y) for x, y in front], fill=(150, 150, 150), width=2)
    for m, x, y in zip(ms, xs, ys):
        cx, cy = px(x, y)
        colour = COLOURS.get(m["method"], (0, 0, 0))
        d.ellipse([cx - 5, cy - 5, cx + 5, cy + 5], fill=colour, outline="black")
        tag = f"K{m['K']}" + (f"@{m['probe_scale']:g}" if m["probe_scale"] is not None else "")
        d.text((cx + 7, cy - 6), tag, fill=colour)
    for i, (name, colour) in enumerate(COLOURS.items()):
        y = top + 10 + 20 * i
        d.ellipse([W - right + 15, y, W - right + 25, y + 10], fill=colour, outline="black")
        d.text((W - right + 32, y - 1), name, fill="black")
    _save_atomic(img, path)
    return path


def _save_atomic(img, path: Path) -> None:
    with atomic_path(path) as tmp:
        img.save(tmp)


def _pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both cost (lower) and accuracy (higher), by increasing cost."""
    front, best = [], -np.inf
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if y > best:
            front.append((x, y))
            best = y
    return front


# ---------------------------------------------------------------------------------- CLI


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _item_range(text: str) -> tuple[int, int]:
    try:
        start, stop = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid --items {text!r}: write START:STOP, e.g. 0:200") from None
    if not 0 <= start < stop:
        raise argparse.ArgumentTypeError(f"invalid --items {text!r}: need 0 <= START < STOP, e.g. 0:200")
    return start, stop


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vlm", default="builtin", help="selector VLM: 'builtin', a builtin VLM directory or a transformers checkpoint directory")
    ap.add_argument("--answerer", help="VLM for every answering pass (default: the selector)")
    ap.add_argument("--n", type=int, default=60, help="number of test questions (default 60)")
    ap.add_argument("--start", type=int, default=0, help="index of the first question (to shard a run over processes)")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="DIR", help="summarise the rows of these finished runs into --out")
    ap.add_argument("--items", type=_item_range, metavar="START:STOP",
                    help="with --merge: keep only questions START <= i < STOP (e.g. 0:200 to compare K values on the same questions)")
    ap.add_argument("--grids", type=_ints, default=[6, 8, 12, 16], help="comma-separated K values (default 6,8,12,16)")
    ap.add_argument("--probe-scales", type=_floats, help="probe resolutions (default 1,0.5,0.25); with --merge: keep only "
                    "these scales' rows (e.g. 0.5 to compare K values at one resolution)")
    ap.add_argument("--levels", type=_ints, default=[1, 2, 3], help="longqa levels, cycled over items (default 1,2,3)")
    ap.add_argument("--max-options", type=int, help="ask with at most this many options (the answer kept): isolates the number of "
                    "choices from the rest of a level's difficulty (default: the level's 4 / 6 / 8)")
    ap.add_argument("--fixed-budget", type=int, default=8, help="M of the uniform-M baseline (default 8)")
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
        rows = read_rows(args.merge)
        if args.items:
            rows = [r for r in rows if args.items[0] <= r["item"] < args.items[1]]
        if args.probe_scales:
            rows = [r for r in rows if r["probe_scale"] is None or r["probe_scale"] in args.probe_scales]
        if not rows:
            filters = (f" with --items {args.items[0]}:{args.items[1]}" if args.items else "") + (f" at --probe-scales {','.join(f'{p:g}' for p in args.probe_scales)}" if args.probe_scales else "")
            ap.error(f"--merge {' '.join(map(str, args.merge))}: no finished questions (rows.jsonl) there{filters}")
        metas = [json.loads((d / "results.json").read_text())["meta"] for d in args.merge if (d / "results.json").is_file()]
        args.n = len({r["item"] for r in rows})
        args.grids = sorted({r["K"] for r in rows})
        elapsed = sum(m["seconds"] for m in metas)
        for key in ("levels", "vlm", "answerer", "fixed_budget", "seed", "max_options"):
            if metas and key in metas[0]:
                setattr(args, key, metas[0][key])
        # shards may run different probe scales (e.g. 1/2 and 1/4 on all questions, 1 on a few): list them all
        args.probe_scales = sorted({r["probe_scale"] for r in rows if r["probe_scale"] is not None}, reverse=True)
    else:
        if args.items:
            ap.error("--items only filters a --merge; to run a range of questions use --start and --n")
        args.probe_scales = args.probe_scales or [1.0, 0.5, 0.25]
        if args.max_options is not None and args.max_options < 2:
            ap.error(f"invalid --max-options {args.max_options}: a question needs at least 2 options")
        rows = run(args)
        elapsed = time.perf_counter() - t0
    summary = summarise(rows)
    meta = {"command": "python -m benchmarks.gridprobe " + " ".join(argv if argv is not None else sys.argv[1:]),
            "n": args.n, "grids": args.grids, "probe_scales": args.probe_scales, "levels": args.levels, "vlm": args.vlm,
            "answerer": args.answerer, "fixed_budget": args.fixed_budget, "seed": args.seed, "max_options": args.max_options,
            "seconds": elapsed, "python": platform.python_version(), "machine": platform.machine()}
    write_text_atomic(out / "results.json", json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1, default=str))
    write_text_atomic(out / "results.md", markdown(summary, meta))
    pareto_plot(summary, out / "pareto.png")
    print(f"wrote {out / 'results.json'}, {out / 'results.md'} and {out / 'pareto.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
