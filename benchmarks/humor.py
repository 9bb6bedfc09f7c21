"""HUMOR on held-out worldgen meme scenes, judged by the hidden preference (``scorers.preference``).

For each TEST scene (``--split val`` for choosing between runs; the "held-out" columns are the study's templates
``training.humor_data.HELD_OUT_TEMPLATES``, crowd and hide, kept out of the shipped models' training) every method samples
``--samples`` memes with the same seed, and each sample is graded: format validity, win rate against the scene's own
human memes (the reference set) and mean preference of the readable ones, the win rate of the one the reward model
ranks first (what a user sees as #1), diversity (distinct captions, distinct-1 / -2, ideas explored by the reasoning
paths). And, per readable sample: ``topic``, whether its boxes contain the scene's topic word (the first
``training.humor_data.scene_topics`` word: a word of its human memes; asked with it by the ``*_topic`` methods, without
by the others); ``anchored``, whether its boxes equal the anchored path's quoted caption; ``consistent``, whether the
template its description names has the intent its usage-scenarios section names (a CoT that splices two templates'
notes does not); ``described``, whether that template is the scene's. Methods:

- ``pipeline@file`` (the user's path, ``benchmarks.user_path``): the scene's picture written as the PNG `atelier worldgen
  meme` writes, ``atelier meme`` run on it as the CLI runs it (the shipped RL writer and reward model, the pipeline's
  defaults: re-draws of unreadable samples, repeats dropped), graded from the ``result.json`` it writes: ``win`` is
  the mean win rate of the memes it keeps, ``top1_win`` its first's, ``valid`` the share of drawn samples kept;
- ``pipeline@jpeg``: the same through a JPEG at quality 90 (4:2:0), how most memes reach a user;
- ``pipeline``: the same pipeline on the picture in memory (the reference row for ``pipeline@file``);
- ``direct``: the SFT writer asked for the caption only (no CoT);
- ``single``: the SFT writer, one reasoning path;
- ``multi``: the SFT writer, K = 3 paths then anchoring (HUMOR's SFT stage);
- ``rl``: the writer after group RL with the pairwise reward (``--rl``);
- ``rl_pointwise``: the writer after RL with a pointwise reward instead (``--rl-pointwise``);
- ``multi_topic`` / ``rl_topic``: ``multi`` / ``rl`` asked with the scene's topic word;
- ``multi_anchored`` / ``rl_anchored``: ``multi`` / ``rl``'s very samples with anchored boxes
  (``planners.meme_cot.anchor_boxes``, the pipeline's ``anchored_boxes`` setting [PROPOSED]).

``--versus DIR``: another run's rows on the same scenes (e.g. the writers shipped before): each method present in
both is compared, paired by scene.

Row ``rm`` per scene: the reward model's pairwise accuracy against the noise-free preference over the scene's
human memes. ``--curve RUN`` instead grades the SFT writer and each checkpoint of an RL run (K = 3) for the
plot of preference against RL steps. Resumable (``rows.jsonl``), shardable (``--start``/``--n``, ``--merge``).

    python -m benchmarks.humor --n 120 --out outputs/bench/humor
    python -m benchmarks.humor --curve outputs/train/humor_rl --n 40 --out outputs/bench/humor_curve
    python -m benchmarks.humor --n 90 --methods multi,rl --sft NEW_SFT --rl NEW_RL --versus outputs/bench/humor_old --out outputs/bench/humor_new
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

logger = logging.getLogger("benchmarks.humor")
# method: (writer, K, asked with the scene's topic, anchored boxes)
METHODS = {"direct": ("sft", 0, False, False), "single": ("sft", 1, False, False), "multi": ("sft", 3, False, False),
           "rl": ("rl", 3, False, False), "rl_pointwise": ("rl_pointwise", 3, False, False),
           "multi_topic": ("sft", 3, True, False), "rl_topic": ("rl", 3, True, False),
           "multi_anchored": ("sft", 3, False, True), "rl_anchored": ("rl", 3, False, True)}
PIPELINE_METHODS = ("pipeline@file", "pipeline@jpeg", "pipeline")  # the whole `atelier meme` pipeline, graded on what it shows a user
FIELDS = ("valid", "win", "preference", "top1_win", "distinct_captions", "distinct_1", "distinct_2", "ideas")
# shares of readable samples (NaN where a row has none, e.g. the CoT fields of caption-only samples)
SHARES = ("topic", "anchored", "consistent", "described")


def _writers(args, names):
    from planners.meme_lm import load_meme_writer

    folders = {"sft": args.sft, "rl": args.rl, "rl_pointwise": args.rl_pointwise}
    return {n: load_meme_writer(folders[n]) for n in names}


def cot_checks(texts: list[str], num_paths: int, scene, topic: str | None) -> dict:
    """The shares ``SHARES`` over the readable samples of ``texts`` (module docstring)."""
    import re

    from planners.meme_cot import MemeFormatError, anchored_caption, parse_meme_cot, read_boxes
    from planners.meme_lm import mentions_topic
    from worldgen.tasks.meme import TEMPLATES

    hits = {k: [] for k in SHARES}
    for t in texts:
        try:
            if num_paths == 0:
                hits["topic"].append(mentions_topic(topic, read_boxes(t, 2)))
                continue
            cot = parse_meme_cot(t, 2, num_paths)
        except MemeFormatError:
            continue
        hits["topic"].append(mentions_topic(topic, cot.text_on_meme))
        hits["anchored"].append([b.lower() for b in cot.text_on_meme] == [b.lower() for b in anchored_caption(cot) or []])
        named = re.search(r"\b(\w+) scene\b", cot.description)
        template = named.group(1).lower() if named else None
        intent = cot.usage_scenarios.split(":")[0].strip().lower()
        hits["consistent"].append(template in TEMPLATES and TEMPLATES[template][0] == intent)
        hits["described"].append(template == scene.template)
    return {k: float(np.mean(v)) if v else float("nan") for k, v in hits.items()}


def grade(writer, rm, scene, num_paths: int, samples: int, seed: int, temperature: float = 1.0, top_p: float = 1.0,
          topic: bool = False, anchored: bool = False, texts: list[str] | None = None) -> dict:
    """One scene's grades for one method; ``texts``: the samples already drawn (the anchored methods reuse their
    base method's)."""
    import torch

    from planners.meme_cot import anchor_boxes
    from scorers.preference import grade_samples, pairwise_accuracy, preference, win_rate
    from training.humor_data import scene_topics

    word = (scene_topics(scene) or [None])[0]
    if texts is None:
        texts = writer.write(scene.still, word if topic else None, num_paths, samples, temperature=temperature, top_p=top_p,
                             generator=torch.Generator().manual_seed(seed))
    raw = list(texts)
    if anchored:
        texts = [anchor_boxes(t, 2) for t in texts]
    g = grade_samples(texts, num_paths, scene.candidates, scene.scene_words)
    g.update(cot_checks(texts, num_paths, scene, word), topic_word=word, texts=None if anchored else raw)
    readable = [b for b in g.pop("boxes") if b is not None]
    if readable:
        r = rm.score(scene.still, readable)
        best = readable[int(np.argmax(r))]
        # how well the reward model orders this writer's own samples (what RL optimises against)
        hits, pairs = pairwise_accuracy(r, [preference(b, scene.scene_words) for b in readable])
        g.update(top1_win=win_rate(best, scene.candidates, scene.scene_words), top1=best, rm_hits=hits, rm_pairs=pairs)
    else:
        g.update(top1_win=0.0, top1=None, rm_hits=0, rm_pairs=0)
    return g


def grade_shown(boxes: list, rejected: int, scene) -> dict:
    """One scene's grades of what ``atelier meme`` shows: the kept memes' boxes, best first, and how many samples it
    rejected."""
    from scorers.preference import distinct_n, preference, win_rate

    wins = [win_rate(b, scene.candidates, scene.scene_words) for b in boxes]
    captions = [" / ".join(b) for b in boxes]
    return {"samples": len(boxes) + rejected, "valid": len(boxes) / max(1, len(boxes) + rejected),
            "win": float(np.mean(wins)) if wins else 0.0, "top1_win": wins[0] if wins else 0.0, "top1": boxes[0] if boxes else None,
            "preference": float(np.mean([preference(b, scene.scene_words) for b in boxes])) if boxes else float("nan"),
            "distinct_captions": len(set(captions)), "distinct_1": distinct_n(captions, 1), "distinct_2": distinct_n(captions, 2),
            "ideas": float("nan"), **{k: float("nan") for k in SHARES}}


def run_pipeline(method: str, pipe, scene, seed: int) -> dict:
    """``atelier meme`` on the scene's picture, as a PNG file (``pipeline@file``), a JPEG (``pipeline@jpeg``) or in memory
    (``pipeline``)."""
    if method == "pipeline":
        out = pipe(scene.still, generator=seed)
        return grade_shown(out.captions, len(out.rejected), scene)
    from benchmarks.user_path import UserPath

    with UserPath() as user:
        image = user.still(scene.still, name="template", suffix=".jpg" if method == "pipeline@jpeg" else ".png")
        run = user.run("meme", {"image": image}, seed=seed, writer=pipe.writer, reward_model=pipe.reward_model)
        shown = run.result()  # the result.json `atelier meme` wrote
        return grade_shown(shown["captions"], len(shown["rejected"]), scene)


def run(args) -> list[dict]:
    from planners.meme_reward import load_reward_model
    from scorers.preference import pairwise_accuracy
    from training.humor_data import load_scenes

    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS and m not in PIPELINE_METHODS:
            raise SystemExit(f"invalid --methods entry {m!r}: choose from {sorted(METHODS) + list(PIPELINE_METHODS)}")
    header = {"benchmark": "humor", "split": args.split, "methods": methods, "samples": args.samples, "sft": args.sft, "rl": args.rl,
              "rl_pointwise": args.rl_pointwise, "reward_model": args.reward_model, "curve": args.curve,
              "temperature": args.temperature, "top_p": args.top_p}
    log = RowLog(args.out, header)
    todo = log.todo(range(args.start, args.start + args.n))
    if not todo:
        return log.select(range(args.start, args.start + args.n))
    scenes = load_scenes(args.split, args.start + args.n)
    rm = load_reward_model(args.reward_model)
    if args.curve:
        writers = _curve_writers(args)
    else:
        loaded = _writers(args, sorted({METHODS[m][0] for m in methods if m in METHODS}))
        writers = {m: loaded[METHODS[m][0]] for m in methods if m in METHODS}
    pipe = None
    if any(m in PIPELINE_METHODS for m in methods):
        from pipelines.humor import HumorPipeline

        pipe = HumorPipeline.build(components={"writer": args.rl, "reward_model": args.reward_model})
        pipe.set_progress_bar_config(disable=True)
    for i in todo:
        s = scenes[i]
        t0 = time.perf_counter()
        base = {"item": i, "template": s.template, "held_out": s.held_out}
        rows, drawn = [], {}
        for name, w in writers.items():
            _, k, topic, anchored = (None, 3, False, False) if args.curve else METHODS[name]
            key = (id(w), k, topic)  # an anchored method grades its base method's very samples
            g = grade(w, rm, s, k, args.samples, seed=i, temperature=args.temperature, top_p=args.top_p, topic=topic,
                      anchored=anchored, texts=drawn.get(key))
            drawn.setdefault(key, g["texts"])
            rows.append({**base, "method": name, **g})
        for name in (m for m in methods if m in PIPELINE_METHODS):
            rows.append({**base, "method": name, **run_pipeline(name, pipe, s, seed=i)})
        hits, pairs = pairwise_accuracy(rm.score(s.still, s.candidates), s.scores)
        rows.append({**base, "method": "rm", "hits": hits, "pairs": pairs})
        log.append(rows)
        logger.info("scene %d (%s) in %.1f s: %s", i, s.template, time.perf_counter() - t0,
                    {r["method"]: round(r.get("win", r.get("hits", 0)), 3) for r in rows})
    return log.select(range(args.start, args.start + args.n))


def _curve_writers(args) -> dict:
    from planners.meme_lm import BuiltinMemeWriter, load_meme_writer

    run_dir = Path(args.curve) / "run"
    ckpts = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    out = {"step 0": load_meme_writer(args.sft)}
    tok = out["step 0"].tokenizer
    from transformers import LlamaForCausalLM

    for c in ckpts:
        out[f"step {c.name.split('-')[-1]}"] = BuiltinMemeWriter(LlamaForCausalLM.from_pretrained(c, use_safetensors=True), tok,
                                                                 vlm=out["step 0"].vlm, name_slots=out["step 0"].name_slots,
                                                                 topic_slot=out["step 0"].topic_slot)
    return out


def summarise(rows: list[dict]) -> dict:
    by = group_rows([r for r in rows if r["method"] != "rm"], lambda r: r["method"])
    out = {}
    for m, rs in by.items():
        d = {f: float(np.nanmean([r[f] for r in rs])) for f in FIELDS}
        for f in SHARES:  # rows from before these fields: NaN
            d[f] = _nanmean([r.get(f, np.nan) for r in rs])
        for part, keep in (("seen", False), ("held_out", True)):
            sub = [r for r in rs if r["held_out"] == keep]
            d[f"win_{part}"] = float(np.mean([r["win"] for r in sub])) if sub else float("nan")
            d[f"top1_win_{part}"] = float(np.mean([r["top1_win"] for r in sub])) if sub else float("nan")
            for f in ("consistent", "described"):
                d[f"{f}_{part}"] = _nanmean([r.get(f, np.nan) for r in sub])
        d["scenes"] = len(rs)
        d["rm_pairs_on_samples"] = sum(r.get("rm_pairs", 0) for r in rs)  # rows from before the field: 0 pairs
        d["rm_accuracy_on_samples"] = (sum(r.get("rm_hits", 0) for r in rs) / d["rm_pairs_on_samples"]
                                       if d["rm_pairs_on_samples"] else float("nan"))
        out[m] = d
    rm = [r for r in rows if r["method"] == "rm"]
    for part, keep in (("seen", False), ("held_out", True)):
        sub = [r for r in rm if r["held_out"] == keep]
        out.setdefault("rm", {})[f"accuracy_{part}"] = sum(r["hits"] for r in sub) / max(1, sum(r["pairs"] for r in sub))
        out["rm"][f"pairs_{part}"] = sum(r["pairs"] for r in sub)
    paired = {}
    for a, b, f in (("pipeline@file", "pipeline", "win"), ("pipeline@file", "pipeline", "top1_win"), ("pipeline@jpeg", "pipeline", "win"), ("rl", "multi", "win"), ("rl", "multi", "top1_win"), ("rl", "rl_pointwise", "win"), ("multi", "single", "win"),
                    ("multi", "single", "ideas"), ("multi", "single", "distinct_captions"), ("multi", "direct", "win"),
                    ("rl_topic", "rl", "topic"), ("multi_topic", "multi", "topic"), ("rl_topic", "rl", "win"),
                    ("rl_anchored", "rl", "win"), ("multi_anchored", "multi", "win"), ("rl_anchored", "rl", "top1_win")):
        if a in by and b in by:
            xa = {r["item"]: r[f] for r in by[a]}
            xb = {r["item"]: r[f] for r in by[b]}
            common = sorted(i for i in set(xa) & set(xb) if np.isfinite(xa[i]) and np.isfinite(xb[i]))
            paired[f"{a}-{b}:{f}"] = paired_bootstrap([xa[i] for i in common], [xb[i] for i in common])
    out["paired"] = paired
    return out


def _nanmean(values) -> float:
    v = np.asarray(values, dtype=np.float64)
    return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")


def _rows_of(folder: Path) -> list[dict]:
    """A run's rows: its ``rows.jsonl``, or the ``results.json`` of a ``--merge``d folder."""
    import json

    from benchmarks.common import read_rows

    rows = read_rows(folder)
    if not rows and (Path(folder) / "results.json").is_file():
        rows = json.loads((Path(folder) / "results.json").read_text())["rows"]
    if not rows:
        raise SystemExit(f"invalid --versus {folder}: no rows there (rows.jsonl or results.json of a benchmarks.humor run)")
    return rows


VERSUS_FIELDS = ("win", "top1_win", "distinct_captions", "topic", "anchored", "consistent", "described")


def versus(rows: list[dict], other: list[dict]) -> dict:
    """Each method present in both row sets: this run minus the other, paired by scene, per field of
    ``VERSUS_FIELDS`` (scenes where either is NaN left out), and the win on the study's templates alone."""
    mine = group_rows([r for r in rows if r["method"] != "rm"], lambda r: r["method"])
    theirs = group_rows([r for r in other if r["method"] != "rm"], lambda r: r["method"])
    out = {}
    for m in sorted(set(mine) & set(theirs)):
        a, b = {r["item"]: r for r in mine[m]}, {r["item"]: r for r in theirs[m]}
        common = sorted(set(a) & set(b))
        for f, sub in [(f, common) for f in VERSUS_FIELDS] + [("win_held_out", [i for i in common if a[i]["held_out"]])]:
            key = "win" if f == "win_held_out" else f
            ok = [i for i in sub if np.isfinite(a[i].get(key, np.nan)) and np.isfinite(b[i].get(key, np.nan))]
            out[f"{m}:{f}"] = paired_bootstrap([a[i][key] for i in ok], [b[i][key] for i in ok])
    return out


def _on_samples(summary: dict, methods: list[str]) -> str:
    """The reward model's accuracy on each writer's own readable samples (pairs of one scene whose hidden scores
    differ), for the methods whose rows carry it."""
    parts = [f"{m} {100 * summary[m]['rm_accuracy_on_samples']:.1f}% ({summary[m]['rm_pairs_on_samples']} pairs)"
             for m in methods if summary[m].get("rm_pairs_on_samples")]
    return f" On each writer's own readable samples: {'; '.join(parts)}." if parts else ""


def markdown(summary: dict, meta: dict) -> str:
    methods = [m for m in summary if m not in ("rm", "paired", "versus")]
    lines = [f"# HUMOR benchmark ({meta['scenes']} {meta.get('split', 'test').upper()} scenes, {meta['samples']} samples each)", "",
             f"`{meta['command']}`", ""]
    lines += markdown_table(["method", "valid", "win", "win seen", "win crowd+hide", "#1 win", "preference", "distinct captions",
                             "distinct-2", "ideas"],
                            [[m, f"{100 * s['valid']:.1f}%", f"{100 * s['win']:.1f}%", f"{100 * s['win_seen']:.1f}%",
                              f"{100 * s['win_held_out']:.1f}%", f"{100 * s['top1_win']:.1f}%", f"{s['preference']:.3f}",
                              f"{s['distinct_captions']:.2f}", f"{s['distinct_2']:.3f}", f"{s['ideas']:.2f}"]
                             for m, s in ((m, summary[m]) for m in methods)])

    def pct(x):
        return "-" if not np.isfinite(x) else f"{100 * x:.1f}%"

    lines += ["", "Per readable sample (module docstring): boxes with the scene's topic word; boxes = the anchored path's "
                  "caption; description and intent of one template (all scenes, crowd+hide); the scene's template described.", ""]
    lines += markdown_table(["method", "topic", "anchored", "consistent", "consistent crowd+hide", "described", "described crowd+hide"],
                            [[m, pct(s.get("topic", np.nan)), pct(s.get("anchored", np.nan)), pct(s.get("consistent", np.nan)),
                              pct(s.get("consistent_held_out", np.nan)), pct(s.get("described", np.nan)),
                              pct(s.get("described_held_out", np.nan))] for m, s in ((m, summary[m]) for m in methods)])
    rm = summary.get("rm", {})
    lines += ["", f"Reward model pairwise accuracy vs the noise-free preference: seen templates {100 * rm.get('accuracy_seen', 0):.1f}% "
                  f"({rm.get('pairs_seen', 0)} pairs), held-out templates {100 * rm.get('accuracy_held_out', 0):.1f}% "
                  f"({rm.get('pairs_held_out', 0)} pairs).{_on_samples(summary, methods)}", ""]
    for k, d in summary.get("paired", {}).items():
        scale = 1.0 if k.endswith(("ideas", "distinct_captions")) else 100.0
        lines.append(f"- {k}: {paired_cell(d, scale)} ({d['n']} scenes)")
    if summary.get("versus"):
        lines += ["", f"Against `{meta.get('versus')}` (this run minus that one, paired by scene):"]
        for k, d in summary["versus"].items():
            lines.append(f"- {k}: {paired_cell(d, 1.0 if k.endswith('distinct_captions') else 100.0)} ({d['n']} scenes)")
    return "\n".join(lines) + "\n"


def curve_plot(summary: dict, path: Path) -> Path:
    """Win rate (and its #1) against RL steps, drawn with PIL."""
    from PIL import Image, ImageDraw

    from benchmarks.common import _save_png

    pts = sorted((int(m.split()[-1]), s["win"], s["top1_win"]) for m, s in summary.items() if m.startswith("step "))
    W, H, left, right, top, bottom = 900, 520, 70, 170, 40, 60
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    if not pts:
        return _save_png(img, path)
    x1 = max(p[0] for p in pts) or 1

    def px(x, y):
        return left + x / x1 * (W - left - right), top + (1 - y) * (H - top - bottom)

    d.rectangle([left, top, W - right, H - bottom], outline="black")
    for y in range(0, 101, 20):
        _, yy = px(0, y / 100)
        d.line([left, yy, W - right, yy], fill=(230, 230, 230))
        d.text((left - 34, yy - 6), f"{y}%", fill="black")
    for x, _, _ in pts:
        xx, _ = px(x, 0)
        d.text((xx - 8, H - bottom + 8), str(x), fill="black")
    for k, colour, name in ((1, (40, 80, 220), "mean win rate"), (2, (220, 40, 40), "#1 (reward model's pick)")):
        d.line([px(p[0], p[k]) for p in pts], fill=colour, width=3)
        for p in pts:
            cx, cy = px(p[0], p[k])
            d.ellipse([cx - 4, cy - 4, cx + 4, cy + 4], fill=colour)
        d.text((W - right + 12, top + 20 * k), name, fill=colour)
    d.text(((W - right + left) // 2 - 60, H - 25), "RL steps", fill="black")
    d.text((8, top - 28), "win rate against the scene's human memes (hidden preference), K = 3 paths", fill="black")
    return _save_png(img, path)


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m benchmarks.humor", description=__doc__.splitlines()[0])
    add_shard_arguments(ap, 120, "scenes", "methods")
    ap.add_argument("--methods", default="direct,single,multi,rl,rl_pointwise")
    ap.add_argument("--samples", type=int, default=8, help="memes sampled per scene and method (G)")
    ap.add_argument("--temperature", type=float, default=1.0, help="the writers' sampling temperature")
    ap.add_argument("--top-p", type=float, default=0.95, help="the writers' nucleus mass (0.95: the pipeline's default, chosen here on VAL)")
    ap.add_argument("--sft", default="weights/builtin/meme_writer_sft")
    ap.add_argument("--rl", default="weights/builtin/meme_writer")
    ap.add_argument("--rl-pointwise", default="outputs/train/humor_rl_pointwise")
    ap.add_argument("--reward-model", default="builtin")
    ap.add_argument("--curve", help="an RL run folder: grade the SFT writer and each of its checkpoints instead")
    ap.add_argument("--split", choices=("test", "val"), default="test", help="scenes to grade (val: for choosing between runs)")
    ap.add_argument("--versus", type=Path, help="another run's folder on the same scenes: compare each method in both, paired")
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/humor"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    # one row per (scene, method): runs of different methods on the same scenes merge too
    rows = (in_range(merge_rows(args.merge, row_key=lambda r: (r["item"], r["method"])), args.items)
            if args.merge else run(args))
    summary = summarise(rows)
    if args.versus:
        summary["versus"] = versus(rows, _rows_of(args.versus))
    meta = {"scenes": len({r["item"] for r in rows}), "samples": args.samples, "split": args.split,
            "command": command_line("benchmarks.humor", argv), "versus": str(args.versus) if args.versus else None}
    write_results(args.out, meta, summary, rows, markdown(summary, meta))
    if args.curve:
        curve_plot(summary, args.out / "curve.png")
    print(markdown(summary, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
