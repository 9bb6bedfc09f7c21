"""The Bernini planner's inference settings against its plan quality, on held-out items, no training.

    python -m benchmarks.planner_settings [--split val] [--n 20] [--planner weights/builtin/planner]
        [--settings "planning_steps=4;planning_steps=64;txt_cfg=2.5,img_cfg=2"] [--draft DIR] [--out outputs/bench/planner_settings]

Each setting (``;`` between settings, ``,`` between the fields of one) overrides the saved
``SemanticPlannerConfig`` for a whole pass over the first ``--n`` items per task of ``training.bernini_data``
(t2v, v2v, r2v), each planned with its index as the seed; the saved config itself always runs first. A plan
is scored as the planner's trainer scores it (``training.planner.plan_agreement``: mean cosine of each plan
token to the ground-truth token at its place), and each setting is paired against the saved config on the
same items (bootstrap 95%). What a setting does to rendered clips is ``benchmarks.bernini``'s to measure.

``--draft DIR`` (a builtin renderer trained with a plan draft, e.g. ``--draft-only``) also shows each plan to the classic
judge without a DiT: each plan frame decoded to pixels by the draft, every clip frame its nearest plan frame, judged
against the caption (share of objects right per attribute, %). A ``truth`` row decodes the ground-truth plan the same
way: what the draft can show at best. This reads what a planner *intends* (docs/BENCHMARKS.md, "The planners' plans,
looked at through the draft").
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import command_line, group_rows, markdown_table, paired_bootstrap, paired_cell, write_results
from core.arguments import StrictParser

logger = logging.getLogger("benchmarks.planner_settings")
FIELDS = {"planning_steps", "denoising_steps", "temperature", "txt_cfg", "img_cfg"}
ATTRIBUTES = ("color", "shape", "direction", "size")
INTEGERS = {"planning_steps", "denoising_steps"}


def parse_settings(text: str, fields: set[str]) -> list[dict[str, float]]:
    """``"a=1,b=2;c=3"`` -> ``[{"a": 1.0, "b": 2.0}, {"c": 3}]``, each field one of ``fields`` (``INTEGERS`` as int)."""
    settings = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        setting = {}
        for pair in part.split(","):
            name, eq, value = pair.partition("=")
            name = name.strip()
            if not eq or name not in fields:
                raise SystemExit(f"error: invalid --settings entry {pair!r}: write field=value with a field of {sorted(fields)}")
            try:
                number = float(value)
            except ValueError:
                raise SystemExit(f"error: invalid --settings value {value!r} for {name}: give a number") from None
            if name in INTEGERS and not number.is_integer():
                raise SystemExit(f"error: invalid --settings value {value!r} for {name}: give a whole number")
            setting[name] = int(number) if name in INTEGERS else number
        settings.append(setting)
    return settings


def run(args) -> list[dict]:
    import torch

    from planners.semantic.planner import SemanticPlanner
    from training.bernini_data import load_pools
    from training.planner import plan_agreement, request_of
    from training.renderer import TextStates

    from tqdm.auto import tqdm

    from core.errors import InputError

    torch.set_num_threads(args.threads)
    planner = SemanticPlanner.from_pretrained(args.planner).eval()
    saved = dataclasses.replace(planner.config)
    try:  # every setting checked by the config's own validation before any planning
        configs = [dataclasses.replace(saved, **setting) for setting in [{}] + args.settings]
    except InputError as e:
        raise SystemExit(f"error: --settings: {e}") from None
    drafted = draft_judge(args.draft) if args.draft else None  # a folder without a draft is refused before the pools
    pools, texts, rows = load_pools(args.split, args.seed, args.n, workers=1, tasks=args.tasks), TextStates(), []
    if drafted is not None:
        for task, pool in pools.items():
            for i in tqdm(range(min(args.n, len(pool))), desc=f"truth {task}", unit="plan", leave=False):
                rows.append({"setting": "truth", "task": task, "item": i, "cosine": 1.0,
                             **drafted(torch.from_numpy(pool.plan[i].astype(np.float32)), pool, i)})
    for setting, config in zip([{}] + args.settings, configs):
        for k in FIELDS:  # in place: the planner's parts read its config object
            setattr(planner.config, k, getattr(config, k))
        name = ",".join(f"{k}={v:g}" for k, v in setting.items()) or "saved"
        for task, pool in pools.items():
            for i in tqdm(range(min(args.n, len(pool))), desc=f"{name} {task}", unit="plan", leave=False):
                with torch.no_grad():
                    plan = planner.plan(request_of(pool, i, texts), grid=tuple(pool.plan.shape[1:4]), generator=int(pool.index[i])).tokens
                cosine = plan_agreement(plan, torch.from_numpy(pool.plan[i].astype(np.float32)))["cosine"]
                rows.append({"setting": name, "task": task, "item": i, "cosine": round(cosine, 5),
                             **(drafted(plan, pool, i) if drafted is not None else {})})
        logger.info("%s: %s", name, {t: round(float(np.mean([r["cosine"] for r in rs])), 4)
                                     for t, rs in group_rows([r for r in rows if r["setting"] == name], lambda r: r["task"]).items()})
    return rows


def draft_judge(folder: str | Path):
    """``judge(plan, pool, i) -> {attribute: share right}``: the plan's frames decoded by the plan draft of the renderer
    saved in ``folder``, each clip frame its nearest plan frame, read by the classic judge against item ``i``'s caption."""
    import torch

    from benchmarks.bernini import _share_right
    from core.errors import InputError
    from renderers.builtin import BuiltinRenderer, tensor_to_frames, unpatchify
    from scorers.generation import judge_against

    try:
        renderer = BuiltinRenderer.from_pretrained(folder).eval()
    except InputError as e:
        raise SystemExit(f"error: --draft: {e}") from None
    if not renderer.config.plan_draft:
        raise SystemExit(f"error: invalid --draft {str(folder)!r}: that renderer has no plan draft; give one trained with "
                         "--plan-draft (python -m training.renderer --draft-only ...)")
    patch = renderer.config.plan_patch

    def judge(plan: torch.Tensor, pool, i: int) -> dict[str, float]:
        with torch.no_grad():
            pixels = renderer.plan_draft(plan[None].float())[0]
        frames = tensor_to_frames(unpatchify(pixels, patch, plan.shape[1] * patch, plan.shape[2] * patch))
        marks = np.asarray(pool.plan_indices)
        nearest = [int(np.abs(marks - t).argmin()) for t in range(pool.frames.shape[1])]
        row = {"objects": judge_against(frames[nearest], pool.attributes[i])["objects"]}
        return {a: round(_share_right(row, a), 4) for a in ATTRIBUTES}

    return judge


def summarise(rows: list[dict], split: str) -> tuple[dict, str]:
    groups = group_rows(rows, lambda r: (r["setting"], r["task"]))
    by = {k: {r["item"]: r["cosine"] for r in rs} for k, rs in groups.items()}
    drafted = "color" in rows[0] if rows else False
    summary, table = {}, []
    for (name, task), cos in by.items():
        base = by[("saved", task)]
        common = sorted(set(cos) & set(base))
        d = paired_bootstrap([cos[i] for i in common], [base[i] for i in common]) if name not in ("saved", "truth") else None
        summary[f"{name}/{task}"] = {"cosine": float(np.mean(list(cos.values()))), "items": len(cos), "minus_saved": d}
        line = [name, task, len(cos), f"{np.mean(list(cos.values())):.3f}", paired_cell(d) if d else "-"]
        if drafted:
            shares = {a: float(np.mean([r[a] for r in groups[(name, task)]])) for a in ATTRIBUTES}
            summary[f"{name}/{task}"]["drafted"] = shares
            line += [f"{100 * shares[a]:.1f}" for a in ATTRIBUTES]
        table.append(line)
    lines = [f"# The Bernini planner's inference settings ({split} split)", "",
             "Mean plan-token cosine to the ground truth; each setting minus the saved config on the same items (x100, bootstrap 95%)."]
    if drafted:
        lines.append("Colour to size: the judge's reading of the plan decoded by the draft (share of caption objects right, %); "
                     "`truth` decodes the ground-truth plan.")
    lines.append("")
    header = ["setting", "task", "items", "cosine", "minus saved (x100)"] + (["colour", "shape", "direction", "size"] if drafted else [])
    lines += markdown_table(header, table)
    return summary, "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m benchmarks.planner_settings", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=("val", "test"), default="val", help="choose settings on val (default)")
    ap.add_argument("--n", type=int, default=20, help="items per task (default 20)")
    ap.add_argument("--planner", default="weights/builtin/planner", help="a saved planner folder")
    ap.add_argument("--settings", default="planning_steps=4;planning_steps=64;denoising_steps=10;txt_cfg=1,img_cfg=1;txt_cfg=2.5;img_cfg=2",
                    help="';'-separated settings, each ','-separated field=value (fields: %s)" % ", ".join(sorted(FIELDS)))
    ap.add_argument("--draft", type=Path, metavar="DIR",
                    help="also judge each plan decoded by the plan draft of the renderer saved in DIR (see above)")
    ap.add_argument("--tasks", default="t2v,v2v,r2v", help="comma-separated tasks (default all three)")
    ap.add_argument("--seed", type=int, default=0, help="the pools' seed (training.bernini_data)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/planner_settings"))
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"invalid --n {args.n}: give at least 1 item per task")
    if not Path(args.planner).is_dir():
        ap.error(f"invalid --planner {args.planner!r}: not a folder; give a saved planner (weights/builtin/planner)")
    if args.draft is not None and not args.draft.is_dir():
        ap.error(f"invalid --draft {str(args.draft)!r}: not a folder; give a saved builtin renderer with a plan draft")
    args.settings = parse_settings(args.settings, FIELDS)
    from training.bernini_data import TASKS

    args.tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    bad = sorted(set(args.tasks) - set(TASKS))
    if bad or not args.tasks:
        ap.error(f"invalid --tasks {','.join(bad) or repr('')}: choose among {','.join(TASKS)}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    rows = run(args)
    summary, markdown = summarise(rows, args.split)
    write_results(args.out, {"command": command_line("benchmarks.planner_settings", argv)}, summary, rows, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
