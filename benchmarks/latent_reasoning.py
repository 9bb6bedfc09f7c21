"""Latent visual reasoning on held-out worldgen ``spatial`` questions: direct answering vs latent slots trained with
the pointwise loss only (LVR-style), + Gram, + the slot-to-image cross term (full GeLVR SFT), and the RL stages
on top of full GeLVR: GePO (vMF latent policy), a Gaussian latent policy, and text-only RL with replayed latents
(LVR's RL).

Per method: accuracy with a 95% Wilson interval, by level and by the asked object's size, and the pointing rate
(the peak of the slots' mean map over the image in a cell overlapping the evidence box). Paired differences on
the same questions get a paired bootstrap interval. RL methods add their run's R_geo and clip fractions, and
``curve.png`` draws validation accuracy and R_geo over RL steps.

    python -m benchmarks.latent_reasoning --n 1200 --out outputs/bench/latent_reasoning

The headline is ``gepo@file``: the shipped reasoner through the user's path (each image written as the PNG
``atelier worldgen`` writes, asked as ``atelier reason`` asks, scored from its result.json; ``benchmarks.user_path``);
the other rows read the cached TEST features directly, the reference. Each method is a model folder (``--models name=PATH,...`` overrides the defaults below); a missing folder is
skipped with a warning. Test items come from ``outputs/gelvr/test`` (the cache the trainers share; generated on
first use).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import _save_png, accuracy_cell, command_line, markdown_table, paired_bootstrap, paired_cell, write_results
from core.arguments import StrictParser

logger = logging.getLogger(__name__)

METHODS = {  # name -> (model folder, slots used: None = the folder's own K)
    "direct": ("outputs/train/gelvr_direct", 0),
    "pointwise": ("outputs/train/gelvr_pointwise", None),
    "gram": ("outputs/train/gelvr_gram", None),
    "full": ("weights/builtin/latent_reasoner_sft", None),
    "gepo": ("weights/builtin/latent_reasoner", None),
    "gaussian": ("outputs/train/gelvr_rl_gaussian", None),
    "replay": ("outputs/train/gelvr_rl_replay", None),
}
PAIRS = (("gepo@file", "gepo"), ("full", "pointwise"), ("full", "direct"), ("gram", "pointwise"), ("gepo", "full"), ("gepo", "gaussian"),
         ("gepo", "replay"), ("gaussian", "full"), ("replay", "full"))
RL = ("gepo", "gaussian", "replay")


def run(args) -> tuple[list[dict], dict]:
    from planners.builtin.text import MiniLM
    from planners.latent_builtin import BuiltinLatentReasoner
    from training.gelvr_data import SpatialSet
    from training.gelvr_sft import item_rows, slot_diagnostics

    paths = dict((k, v[0]) for k, v in METHODS.items())
    for part in filter(None, (args.models or "").split(",")):
        name, _, path = part.partition("=")
        paths[name.strip()] = path.strip()
    wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
    text, sets, rows, runs, symbolic = MiniLM(), {}, [], {}, None
    for name in wanted:
        folder = Path(paths[name])
        if not BuiltinLatentReasoner.is_saved_in(folder):
            logger.warning("%s: no latent reasoner in %s, skipped", name, folder)
            continue
        model = BuiltinLatentReasoner.from_pretrained(folder)
        if model.config.object_reads != "descriptor" and symbolic is None:
            symbolic = model  # its attribute head, for the symbolic solver's reference accuracy
        kind = model.config.image_tokens  # the same TEST items, read as this model's kind of image token
        if kind not in sets:
            sets[kind] = SpatialSet("test", args.n, model, text, cache=Path(args.cache) / "test")
        data = sets[kind]
        k = METHODS.get(name, (None, None))[1]
        k = model.config.num_slots if k is None else k
        logger.info("%s: %s, K = %d", name, folder, k)
        rows += [{"method": name, **r} for r in item_rows(model, data, k)]
        facts = folder / "eval.json"
        runs[name] = json.loads(facts.read_text()) if facts.is_file() else {}
        if k and args.diagnose:
            runs[name]["slot_diagnostics"] = slot_diagnostics(model, data, k, n=args.diagnose)
    if args.files in wanted and BuiltinLatentReasoner.is_saved_in(Path(paths[args.files])):
        rows += through_files(args.files, paths[args.files], next(iter(sets.values())).records)
    if sets:
        runs["_reference"] = {"present_colours": present_colour_chance(next(iter(sets.values())).records)}
        if symbolic is not None:
            runs["_reference"]["symbolic_solver"] = symbolic_solver(symbolic, sets["objects"])
    return rows, runs


def through_files(name: str, folder: str, records: list[dict]) -> list[dict]:
    """The user's path for method ``name``: each TEST image as the PNG `atelier worldgen spatial` writes, asked
    through `atelier reason` with the model in ``folder`` (``benchmarks.user_path``), scored from its result.json;
    the rows' method is ``<name>@file``."""
    from benchmarks.user_path import UserPath
    from training.gelvr_data import record_item
    from worldgen.tasks import spatial

    rows = []
    with UserPath() as user:
        for i, rec in enumerate(records):
            sample = spatial.generate(rec["seed"], spatial.Config(level=rec["level"]))
            assert sample.record["question"] == rec["question"], "the TEST cache and worldgen disagree"
            image = user.still(sample.images["image"], name=f"q{i:05d}")
            run = user.run("reason", {"image": image, "question": rec["question"], "options": rec["options"]}, reasoner=folder)
            item = record_item(rec)
            rows.append({"method": f"{name}@file", "item": i, "correct": run.result()["answer_index"] == rec["answer_index"],
                         "level": item.level, "size": item.target_size, "pointing": None})
            if (i + 1) % 100 == 0:
                logger.info("%s through files: %d of %d, accuracy %.3f", name, i + 1, len(records), np.mean([r["correct"] for r in rows]))
    return rows


def symbolic_solver(model, data) -> float:
    """The accuracy of a hand-written search over what ``model``'s object attribute head reads (an upper bound on
    what its object tokens allow, no learning): the token most likely the anchor's size and shape, then, among
    tokens in the relation's region of it (worldgen's own rule, on the token's centre and box), the one most likely
    the target's; the option whose colour that token most likely has. The two objects' words come from the record
    (a reasoner reads them from the question)."""
    import torch

    from planners.latent_builtin import GEOMETRY
    from planners.object_attributes import GROUPS, attribute_probabilities
    from training.gelvr_data import SIZE
    from worldgen.tasks.spatial import in_region
    from worldgen.vocab import COLOR_NAMES, SHAPES, SIZE_NAMES

    shape, size, (c0, c1) = GROUPS["shape"][0], GROUPS["size"][0], GROUPS["color"]

    def like(p: torch.Tensor, valid: torch.Tensor, o: dict) -> torch.Tensor:
        return p[:, shape + SHAPES.index(o["shape"])] * p[:, size + SIZE_NAMES.index(o["size"])] * valid

    right = 0
    for i, r in enumerate(data.records):
        feats = data.features[i : i + 1].float()
        with torch.no_grad():
            p = attribute_probabilities(model.object_attributes(feats))[0]
        geo = feats[0, :, -GEOMETRY:]
        valid = geo[:, 0] > 0.5
        objs = {o["id"]: o for o in r["objects"]}
        a = int(like(p, valid, objs[r["anchor_id"]]).argmax())
        anchor = {"x": float(geo[a, 1]) * SIZE, "y": float(geo[a, 2]) * SIZE, "r": float(geo[a, 5] - geo[a, 3]) * SIZE / 2}
        inside = torch.tensor([in_region(anchor, {"x": float(g[1]) * SIZE, "y": float(g[2]) * SIZE}, r["relation"], SIZE) for g in geo])
        t = int((like(p, valid, objs[r["target_id"]]) * inside).argmax())
        colours = p[t, c0:c1]
        right += max(r["options"], key=lambda c: float(colours[COLOR_NAMES.index(c)])) == r["answer"]
    return right / max(1, len(data.records))


def present_colour_chance(records: list[dict]) -> float:
    """The accuracy of guessing uniformly among the options whose colour some object in the image has: what a model
    that sees which colours are present, but not where the asked object is, scores."""
    scores = []
    for r in records:
        present = {o["color"] for o in r["objects"]}
        cand = [o for o in r["options"] if o in present]
        scores.append(1 / len(cand) if r["answer"] in cand else 0.0)
    return float(np.mean(scores)) if scores else float("nan")


def summarise(rows: list[dict], runs: dict, extra_pairs: tuple[tuple[str, str], ...] = ()) -> dict:
    from scorers.videoqa import accuracy

    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["method"], []).append(r)
    out = {}
    for m, rs in by.items():
        d = {"accuracy": accuracy([r["correct"] for r in rs]).to_dict()}
        for key in ("level", "size"):
            for v in sorted({r[key] for r in rs}, key=str):
                d[f"{key}_{v}"] = accuracy([r["correct"] for r in rs if r[key] == v]).to_dict()
        pts = [r["pointing"] for r in rs if r["pointing"] is not None]
        d["pointing"] = float(np.mean(pts)) if pts else None
        if runs.get(m, {}).get("slot_diagnostics"):
            d["slot_diagnostics"] = runs[m]["slot_diagnostics"]
        hist = runs.get(m, {}).get("val_history", [])
        if m in RL and hist:
            last = [h for h in hist if "val_r_geo" in h]
            d["rl"] = {"steps": runs[m].get("steps"), "val_r_geo_last": last[-1]["val_r_geo"] if last else None,
                       "val_r_geo_max": max((h["val_r_geo"] for h in last), default=None),
                       # over every step where the run logged them (step_log); older runs only at their evaluations
                       "clipfrac_text_mean": _mean(h.get("clipfrac_text") for h in runs[m].get("step_log") or hist),
                       "clipfrac_latent_mean": _mean(h.get("clipfrac_latent") for h in runs[m].get("step_log") or hist),
                       "train_minutes": runs[m].get("train_minutes")}
        out[m] = d
    paired = {}
    for a, b in extra_pairs:
        if a not in by or b not in by:
            logger.warning("--pairs %s-%s: no rows for %s, skipped", a, b, a if a not in by else b)
    for a, b in (*PAIRS, *extra_pairs):
        if a in by and b in by:
            xa = {r["item"]: float(r["correct"]) for r in by[a]}
            xb = {r["item"]: float(r["correct"]) for r in by[b]}
            common = sorted(set(xa) & set(xb))
            paired[f"{a}-{b}"] = paired_bootstrap([xa[i] for i in common], [xb[i] for i in common])
    out["paired"] = paired
    out["reference"] = runs.get("_reference", {})
    # step 0 is the SFT model's own evaluation (its R_geo against itself is 0); later entries carry val_ fields
    out["curves"] = {m: [{"step": h["step"], "val_accuracy": h.get("val_accuracy", h.get("accuracy") if h["step"] == 0 else None),
                          "val_r_geo": h.get("val_r_geo", 0.0 if h["step"] == 0 else None)} for h in runs[m].get("val_history", [])]
                     for m in RL if m in runs}
    return out


def _mean(values) -> float | None:
    v = [x for x in values if x is not None]
    return round(float(np.mean(v)), 4) if v else None


def markdown(summary: dict, meta: dict) -> str:
    methods = [m for m in summary if m not in ("paired", "curves", "reference")]
    lines = [f"# Latent reasoning benchmark ({meta['n']} TEST `spatial` questions)", "", f"`{meta['command']}`", ""]
    cols = ["level_1", "level_2", "level_3", "size_small", "size_medium", "size_large"]
    lines += markdown_table(["method", "accuracy [95% CI]", "level 1", "level 2", "level 3", "small", "medium", "large", "pointing"],
                            [[m, accuracy_cell(s["accuracy"]), *[f"{100 * s[c]['value']:.1f}" if c in s else "-" for c in cols],
                              f"{100 * s['pointing']:.1f}%" if s.get("pointing") is not None else "-"]
                             for m, s in ((m, summary[m]) for m in methods)])
    rl = [(m, summary[m]["rl"]) for m in methods if "rl" in summary[m]]
    if rl:
        lines += ["", *markdown_table(["RL run", "steps", "R_geo (val, last)", "R_geo (val, max)", "clip frac text", "clip frac latent", "minutes"],
                                      [[m, r["steps"], r["val_r_geo_last"], r["val_r_geo_max"], r["clipfrac_text_mean"],
                                        r["clipfrac_latent_mean"], r["train_minutes"]] for m, r in rl])]
    diag = [(m, summary[m]["slot_diagnostics"]) for m in methods if "slot_diagnostics" in summary[m]]
    if diag:
        lines += ["", "Per slot (chain targets: anchor, region, target, its centre), on the first "
                      f"{diag[0][1]['n']} questions: cosine of the greedy state before the slot with its target, the same "
                      "with the targets fed (teacher-forced), the image's mean token's, and how often the slot's map peaks on "
                      "a target cell.", "",
                  *markdown_table(["method", "cos greedy", "cos teacher-forced", "cos mean token", "peak on target"],
                                  [[m, *(" / ".join(f"{x:.2f}" for x in d[k]) for k in ("cos_free", "cos_teacher", "cos_mean_token",
                                                                                       "peak_on_target"))] for m, d in diag])]
    if "present_colours" in summary.get("reference", {}):
        lines += ["", f"Chance: 25.0% (four options); guessing among the options whose colour is in the image: "
                      f"{100 * summary['reference']['present_colours']:.1f}%."]
    if "symbolic_solver" in summary.get("reference", {}):
        lines += [f"A hand-written search over the object attribute head's reads (no learning; `symbolic_solver`): "
                  f"{100 * summary['reference']['symbolic_solver']:.1f}%."]
    lines.append("")
    for k, d in summary["paired"].items():
        lines.append(f"- {k}: {paired_cell(d)} points ({d['n']} questions)")
    return "\n".join(lines) + "\n"


def curve_plot(summary: dict, path: Path) -> Path:
    """Validation accuracy (left axis) and R_geo (right axis) against RL steps, one colour per RL run, drawn with PIL."""
    from PIL import Image, ImageDraw

    W, H, left, right, top, bottom = 960, 540, 70, 230, 40, 60
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    curves = {m: [h for h in c if h.get("val_accuracy") is not None] for m, c in summary.get("curves", {}).items()}
    steps = [h["step"] for c in curves.values() for h in c]
    if not steps:
        return _save_png(img, path)
    x1 = max(steps) or 1
    geo_max = max([h["val_r_geo"] or 0 for c in curves.values() for h in c] + [1e-6])
    colours = {"gepo": (40, 80, 220), "gaussian": (230, 120, 20), "replay": (30, 150, 70)}

    def px(x, y):
        return left + x / x1 * (W - left - right), top + (1 - y) * (H - top - bottom)

    d.rectangle([left, top, W - right, H - bottom], outline="black")
    accs = [h["val_accuracy"] for c in curves.values() for h in c]
    lo = max(0.0, min(a for a in accs if a is not None) - 0.05)
    hi = min(1.0, max(a for a in accs if a is not None) + 0.05)
    for i in range(6):
        y = i / 5
        _, yy = px(0, y)
        d.line([left, yy, W - right, yy], fill=(232, 232, 232))
        d.text((left - 44, yy - 6), f"{100 * (lo + y * (hi - lo)):.0f}%", fill="black")
        d.text((W - right + 6, yy - 6), f"{y * geo_max:.3g}", fill=(120, 120, 120))
    for k, (m, c) in enumerate(curves.items()):
        col = colours.get(m, (120, 120, 120))
        acc = [(h["step"], h["val_accuracy"]) for h in c]
        pts = [px(s, (a - lo) / (hi - lo)) for s, a in acc]
        if len(pts) > 1:
            d.line(pts, fill=col, width=3)
        geo = [px(h["step"], (h["val_r_geo"] or 0) / geo_max) for h in c if h.get("val_r_geo") is not None]
        for a, b in zip(geo, geo[1:]):  # dashed: R_geo on the right axis
            d.line([a, ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)], fill=col, width=2)
        d.text((W - right + 60, top + 20 + 36 * k), f"{m}: accuracy (solid)", fill=col)
        d.text((W - right + 60, top + 36 + 36 * k), f"{m}: R_geo (dashed)", fill=col)
    for x in sorted(set(steps)):
        xx, _ = px(x, 0)
        d.text((xx - 6, H - bottom + 8), str(x), fill="black")
    d.text(((W - right + left) // 2 - 40, H - 25), "RL steps", fill="black")
    d.text((8, top - 28), f"validation accuracy (left) and R_geo (right axis, 0 - {geo_max:.3g}) over RL steps", fill="black")
    return _save_png(img, path)


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m benchmarks.latent_reasoning", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1200, help="held-out TEST questions (levels 1-3 in turn)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--models", help="overrides, e.g. full=outputs/train/gelvr_sft,gepo=outputs/train/gelvr_rl")
    ap.add_argument("--cache", default="outputs/gelvr")
    ap.add_argument("--files", default="gepo", help="the method also run through files, as `atelier reason` runs it: the user's "
                                                    "path, the headline (default gepo, the shipped reasoner; '' for none)")
    ap.add_argument("--diagnose", type=int, default=200, help="questions for the per-slot diagnostics (0: none)")
    ap.add_argument("--pairs", default="", help="more paired differences, e.g. full-full_shipped,direct-direct_shipped")
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/latent_reasoning"))
    args = ap.parse_args(argv)
    extra = tuple(tuple(p.strip().split("-", 1)) for p in args.pairs.split(",") if p.strip())
    if any(len(p) != 2 or not all(p) for p in extra):
        ap.error(f"--pairs {args.pairs!r}: write a-b pairs of method names separated by commas, e.g. full-full_shipped")
    if args.n < 1 or args.diagnose < 0:
        ap.error(f"--n {args.n} / --diagnose {args.diagnose}: pass at least one question and 0 or more to diagnose")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    rows, runs = run(args)
    summary = summarise(rows, runs, extra)
    meta = {"n": len({r["item"] for r in rows}), "command": command_line("benchmarks.latent_reasoning", argv)}
    write_results(args.out, meta, summary, rows, markdown(summary, meta))
    curve_plot(summary, args.out / "curve.png")
    print(markdown(summary, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
