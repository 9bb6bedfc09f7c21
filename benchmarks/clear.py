"""Benchmark CLEAR against its ablations on held-out synthetic video reasoning segmentation clips.

    python -m benchmarks.clear [--planner builtin|PATH] [--tracker classic|DIR] [--n 200] [--start 0] [--out outputs/bench/clear]
    python -m benchmarks.clear --merge DIR [DIR ...] --out DIR

Clips: worldgen ``vrs`` items of the **test** split (seeds ``split_seed("test", 500, i)``), levels
cycled 1, 2, 3, every query kind as drawn. Each clip is run twice per method: **through the file** a user
would have (H.264 at CRF 18, run as ``atelier segment`` runs it and scored from the masks it writes:
``benchmarks.user_path``), the headline; and on the raw rendered frames in memory, the reference. Methods,
all on the same clips with the same tracker and proposer:

- ``clear``: the pipeline as shipped (candidate tracks, selection with counterfactual checks, the
  event monitor with slow re-anchoring);
- ``prompt_then_track``: the choice made from one frame (``selection_frames=1``), then the tracker
  alone (no monitor): the usual ground-once-then-propagate recipe;
- ``no_checks``: the planner's forward choice without its counterfactual checks;
- ``no_monitor``: CLEAR without the monitor;
- ``oracle``: the candidate that overlaps the true target most, with the monitor: the ceiling of
  the tracker and proposer.

Per clip: J&F of the target (DAVIS definitions, ``scorers.vos``, every frame; empty-vs-empty scores
1), identity switches (runs of frames where the prediction overlaps another object more than the
target; and, by the CLEAR-MOT rule, where it matches another object at IoU > 0.5 after matching the
target), the share of them the monitor flags, beside the share flags at random frames at the same
alarm rate would catch, recovery (the share of switch runs after which the prediction returns to the target),
planner calls, slow frames and frames per second. Rows are appended to ``rows.jsonl`` as clips
finish (``benchmarks.common``), so a run resumes and shards merge.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RowLog, add_shard_arguments, command_line, group_rows, markdown_table, merge_rows, paired_bootstrap, write_results
from core.arguments import StrictParser

logger = logging.getLogger("benchmarks.clear")
METHODS = ("clear", "prompt_then_track", "no_checks", "no_monitor", "oracle", "oracle_watch")
SEED_BASE = 500
# how a frame's prediction is assigned an object, for identity switches: the object it covers most,
# or (CLEAR-MOT) the one it matches at IoU > 0.5; the row fields' suffix
SWITCH_RULES = {"majority": "", "IoU > 0.5": "_matched"}


def clip(i: int, split: str = "test"):
    from worldgen.tasks import vrs
    from worldgen.tasks.base import split_seed

    s = vrs.generate(split_seed(split, SEED_BASE, i), vrs.Config(level=1 + i % 3))
    world = s.worlds["video"]
    renders = [world.render(t) for t in range(world.num_frames)]
    return s.record, np.stack([r.rgb for r in renders]), np.stack([r.ids for r in renders])


class OracleSelector:
    """Chooses the candidate whose track overlaps the true target most over the selection frames."""

    calls = 0

    def __init__(self, truth: np.ndarray):
        self.truth = truth

    def select(self, frames, marks, query):
        from planners.counterfactual import CandidateScore, Selection

        k = len(frames)
        sub = [int(i) for i in ((np.arange(k) + 0.5) * len(self.truth) / k).astype(int)]
        truth = self.truth[sub]
        iou = [np.logical_and(m.masks, truth).sum() / max(1, np.logical_or(m.masks, truth).sum()) for m in marks]
        best = int(np.argmax(iou))
        return Selection(marks[best].number, False, 0.0, [CandidateScore(m.number, float(i == best)) for i, m in enumerate(marks)],
                         [f"oracle: #{marks[best].number}"])


class WithoutChecks:
    """A planner's forward choice alone."""

    def __init__(self, planner):
        self.planner, self.selections = planner, 0

    @property
    def calls(self) -> int:
        return getattr(self.planner, "calls", self.selections)

    def select(self, frames, marks, query):
        self.selections += 1
        return self.planner.select(frames, marks, query, checks=False)


def owners(pred: np.ndarray, ids: np.ndarray) -> list[int | None]:
    """Per frame, the object the prediction covers most (None: empty, or only background)."""
    out = []
    for p, gt in zip(pred, ids):
        labels, counts = np.unique(gt[p], return_counts=True) if p.any() else (np.zeros(0), np.zeros(0))
        keep = labels != 0
        out.append(int(labels[keep][np.argmax(counts[keep])]) if keep.any() else None)
    return out


def matched(pred: np.ndarray, ids: np.ndarray, min_iou: float = 0.5) -> list[int | None]:
    """Per frame, the object the prediction matches at IoU > ``min_iou`` (at most one can), else None:
    the CLEAR-MOT correspondence rule, under which a mask spread over several objects is none of them
    (so a flip of the majority inside such a mask is no switch; the later match to another object is)."""
    out = []
    for p, gt in zip(pred, ids):
        best, area = None, int(p.sum())
        if area:
            labels, inter = np.unique(gt[p], return_counts=True)
            for label, n in zip(labels, inter):
                if label != 0 and n / (area + (gt == label).sum() - n) > min_iou:
                    best = int(label)
        out.append(best)
    return out


def switches(owner: list[int | None], target: int, anchor: int) -> tuple[list[int], float]:
    """Identity switches: frames where the prediction, having followed the target, first covers
    another object, read in tracking order (forward from the anchor, and backward from it: the
    tracker runs both ways); and the share of them after which it comes back to the target."""
    frames, recovered = [], 0
    for order in (range(anchor, len(owner)), range(anchor, -1, -1)):
        last, switched = None, False
        for t in order:
            o = owner[t]
            if o is None:
                continue
            if last == target and o != target:
                frames.append(t)
                switched = True
            elif o == target and switched:
                recovered, switched = recovered + 1, False
            last = o
    return sorted(frames), (recovered / len(frames) if frames else 1.0)


def caught(switch_frames: list[int], events: list[dict], anchor: int, before: int = 3, after: int = 5) -> int:
    """Switches with an escalated event (re-anchor, or flag when the monitor only watches) from
    ``before`` frames before to ``after`` frames after the switch in tracking order (frames before
    the anchor are tracked backward, so there "after" means earlier frames)."""
    escalated = [e["frame"] for e in events if e["action"] in ("re-anchor", "flag")]

    def near(f: int, s: int) -> bool:
        lag = f - s if s >= anchor else s - f
        return -before <= lag <= after

    return sum(any(near(f, s) for f in escalated) for s in switch_frames)


def chance_caught(switch_frames: list[int], flag_frames: int, frames: int, anchor: int, before: int = 3, after: int = 5) -> float:
    """Expected switches ``caught`` would count if the same number of escalated frames fell on
    frames drawn at random: the rate a monitor with no signal would score at that alarm rate."""
    total = 0.0
    for s in switch_frames:
        lo, hi = (s - before, s + after) if s >= anchor else (s - after, s + before)
        window = min(hi, frames - 1) - max(lo, 0) + 1
        miss = 1.0
        for i in range(flag_frames):
            miss *= max(0.0, (frames - window - i) / (frames - i))
        total += 1.0 - miss
    return total


def j_and_f(pred: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    from scorers.vos import db_eval_iou, f_measure

    j = float(np.mean([db_eval_iou(t, p) for p, t in zip(pred, truth)]))
    f = float(np.mean([f_measure(p, t) for p, t in zip(pred, truth)]))
    return j, f


SETTINGS = {  # each method's settings, as `atelier segment` takes them (overlay off: it does not change the masks)
    "clear": {"overlay": False},
    "prompt_then_track": {"monitor": True, "repair": False, "overlay": False, "selection_frames": 1},
    "no_checks": {"overlay": False},
    "no_monitor": {"monitor": False, "overlay": False},
    "oracle": {"overlay": False},
    "oracle_watch": {"monitor": True, "repair": False, "overlay": False},  # the tracker's own masks, with the monitor's flags
}
INPUTS = ("file", "frames")  # the headline (the user's path, benchmarks.user_path) and the reference (raw frames in memory)


def chosen_planner(method: str, truth: np.ndarray, planner):
    return {"oracle": OracleSelector(truth), "oracle_watch": OracleSelector(truth), "no_checks": WithoutChecks(planner)}.get(method, planner)


def segment(method: str, where: str, truth: np.ndarray, frames: np.ndarray, video: str, query: str, planner, tracker, proposer, user):
    """``(output, predicted masks (T, H, W) bool, seconds)`` of one method on one input: through the file as
    `atelier segment` runs it, scored from the masks it wrote, or on the raw frames in memory."""
    from pipelines.clear import ClearConfig, ClearPipeline

    chosen = chosen_planner(method, truth, planner)
    t0 = time.perf_counter()
    if where == "file":
        run = user.run("segment", {"video": video, "query": query}, planner=chosen, tracker=tracker, proposer=proposer, **SETTINGS[method])
        return run.output, run.masks() > 0, time.perf_counter() - t0
    pipe = ClearPipeline(ClearConfig(**SETTINGS[method]), planner=chosen, tracker=tracker, proposer=proposer)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(frames, query)
    return out, out.masks > 0, time.perf_counter() - t0


def run(args) -> list[dict]:
    from benchmarks.user_path import UserPath
    from planners.loading import load_selector
    from trackers import load_tracker
    from trackers.proposals import load_proposer

    planner, tracker, proposer = load_selector(args.planner), load_tracker(args.tracker), load_proposer(args.proposer)
    header = {"planner": args.planner, "tracker": args.tracker, "proposer": args.proposer, "methods": list(METHODS), "seed": SEED_BASE,
              "split": args.split, "inputs": list(INPUTS)}
    log = RowLog(args.out, header)
    items = list(range(args.start, args.start + args.n))
    for i in log.todo(items):
        rec, frames, ids = clip(i, args.split)
        truth = ids == rec["target_id"]
        rows = []
        with UserPath() as user:
            video = user.clip(frames, fps=rec["world"]["fps"], name=f"clip_{i:05d}")
            for method, where in ((m, w) for m in METHODS for w in INPUTS):
                out, pred, dt = segment(method, where, truth, frames, video, rec["query"], planner, tracker, proposer, user)
                j, f = j_and_f(pred, truth)
                owner = owners(pred, ids)
                found, recovery = switches(owner, rec["target_id"], out.track_frame)
                found_matched, _ = switches(matched(pred, ids), rec["target_id"], out.track_frame)
                wrong = next((o for o in owner if o is not None), rec["target_id"]) != rec["target_id"] if not out.no_match else False
                rows.append({"item": i, "seed": rec["seed"], "level": rec["level"], "kind": rec["query_struct"]["kind"], "input": where,
                             "hard": rec["hard"], "method": method, "J": j, "F": f, "JF": (j + f) / 2, "switches": len(found),
                             "switch_frames": found, "track_frame": out.track_frame, "caught": caught(found, out.events, out.track_frame),
                             "switch_frames_matched": found_matched, "caught_matched": caught(found_matched, out.events, out.track_frame),
                             "flag_frames": len({e["frame"] for e in out.events if e["action"] in ("re-anchor", "flag")}), "wrong_start": bool(wrong),
                             "recovery": recovery, "planner_calls": out.planner_calls, "slow_frames": sum(m == "slow" for m in out.modes),
                             "frames": len(frames), "fps": len(frames) / dt, "no_match": out.no_match, "ambiguous": out.ambiguous})
        log.append(rows)
        by = {(r["method"], r["input"]): r["JF"] for r in rows}
        logger.info("clip %d (%s, level %d) J&F file/frames %s", i, rec["query_struct"]["kind"], rec["level"],
                    " ".join(f"{m}={by[m, 'file']:.2f}/{by[m, 'frames']:.2f}" for m in METHODS))
    return log.select(items)


def _proportion(k: int, n: int) -> dict:
    from scorers.videoqa import wilson_interval

    low, high = wilson_interval(k, n)
    return {"p": k / n, "low": low, "high": high}


def _rate(w: dict | None) -> str:
    return f"{w['p']:.2f} [{w['low']:.2f}, {w['high']:.2f}]" if w else "-"


def summarise(rows: list[dict]) -> tuple[dict, str]:
    """The headline through files, the raw frames as the reference, and each method's paired difference between them."""
    summary, md = {}, []
    for where, title in (("file", "Through files, as `atelier segment` runs them (the headline)"),
                         ("frames", "On the raw rendered frames (reference)")):
        part = [r for r in rows if r.get("input", "frames") == where]
        if part:
            summary[where], text = summarise_input(part)
            md.append(f"## {title}\n\n{text}")
    by = group_rows(rows, lambda r: (r["method"], r.get("input", "frames")))
    pairs = {}
    for method in METHODS:
        frames = {r["item"]: r["JF"] for r in by.get((method, "frames"), [])}
        files = [(r["JF"], frames[r["item"]]) for r in by.get((method, "file"), []) if r["item"] in frames]
        if files:
            pairs[method] = paired_bootstrap([a for a, _ in files], [b for _, b in files])
    if pairs:
        summary["file_vs_frames"] = pairs
        md.append("## Files against raw frames (pp J&F, paired bootstrap 95%)\n\n" + "\n".join(markdown_table(
            ["method", "files - frames"], [[m, f"{100 * p['diff']:+.1f} [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}]"] for m, p in pairs.items()])))
    return summary, f"# CLEAR on worldgen vrs\n\nClips: {len({r['item'] for r in rows})}.\n\n" + "\n".join(md)


def summarise_input(rows: list[dict]) -> tuple[dict, str]:
    by = group_rows(rows, lambda r: r["method"])

    summary = {}
    for method, rs in by.items():
        summary[method] = {"n": len(rs), "JF": float(np.mean([r["JF"] for r in rs])), "J": float(np.mean([r["J"] for r in rs])),
                           "F": float(np.mean([r["F"] for r in rs])), "switches_per_clip": float(np.mean([r["switches"] for r in rs])),
                           "wrong_start": float(np.mean([r["wrong_start"] for r in rs])),
                           "recovery": float(np.mean([r["recovery"] for r in rs if r["switches"]] or [1.0])),
                           "planner_calls": float(np.mean([r["planner_calls"] for r in rs])),
                           "slow_per_50_frames": 50 * sum(r["slow_frames"] for r in rs) / max(1, sum(r["frames"] for r in rs)),
                           "fps": float(np.mean([r["fps"] for r in rs]))}
    base = {r["item"]: r["JF"] for r in by.get("prompt_then_track", [])}
    for method, rs in by.items():
        pairs = [(r["JF"], base[r["item"]]) for r in rs if r["item"] in base]
        if pairs and method != "prompt_then_track":
            summary[method]["vs_prompt_then_track"] = paired_bootstrap([a for a, _ in pairs], [b for _, b in pairs])
    for method in ("prompt_then_track", "oracle_watch"):
        rs = by.get(method, [])
        for rule, suffix in SWITCH_RULES.items():
            if any(f"switch_frames{suffix}" not in r for r in rs):
                continue
            total = sum(len(r[f"switch_frames{suffix}"]) for r in rs)
            hits = sum(r[f"caught{suffix}"] for r in rs)
            summary[f"caught_{method}{suffix}"] = {
                "rule": rule, "switches": total, "caught": hits, "rate": _proportion(hits, total) if total else None,
                "flags_per_50_frames": 50 * sum(r.get("flag_frames", 0) for r in rs) / max(1, sum(r["frames"] for r in rs)),
                "chance": (sum(chance_caught(r[f"switch_frames{suffix}"], r["flag_frames"], r["frames"], r["track_frame"]) for r in rs) / total
                           if total and all("flag_frames" in r for r in rs) else None)}
    lines = markdown_table(["method", "J&F", "J", "F", "vs prompt-then-track (pp J&F)", "switches / clip", "recovery", "wrong start", "planner calls", "slow / 50 frames", "frames/s"],
                            [[m, f"{s['JF']:.3f}", f"{s['J']:.3f}", f"{s['F']:.3f}",
                              (f"{100 * s['vs_prompt_then_track']['diff']:+.1f} [{100 * s['vs_prompt_then_track']['low']:+.1f}, {100 * s['vs_prompt_then_track']['high']:+.1f}]"
                               if "vs_prompt_then_track" in s else "-"),
                              f"{s['switches_per_clip']:.2f}", f"{s['recovery']:.2f}", f"{s['wrong_start']:.2f}", f"{s['planner_calls']:.1f}", f"{s['slow_per_50_frames']:.2f}", f"{s['fps']:.0f}"]
                             for m, s in summary.items() if isinstance(s, dict) and "JF" in s])
    lines += ["", "Identity switches the monitor flags (an escalation from 3 frames before to 5 after the switch, in tracking order), on the "
              "tracker's own masks with the monitor only watching (prompt-then-track's anchor; the oracle's):", ""]
    lines += markdown_table(["trajectory", "switch rule", "switches", "caught", "rate [95% CI]", "flagged frames / 50", "chance rate at that alarm rate"],
                            [[m, c["rule"], str(c["switches"]), str(c["caught"]), _rate(c["rate"]), f"{c['flags_per_50_frames']:.2f}",
                              "-" if c["chance"] is None else f"{c['chance']:.2f}"]
                             for m in ("prompt_then_track", "oracle_watch") for suffix in SWITCH_RULES.values()
                             if (c := summary.get(f"caught_{m}{suffix}"))])
    lines += [""]
    kinds = sorted({r["kind"] for r in rows})
    lines += ["### J&F by query kind", ""] + markdown_table(["method", *kinds], [[m, *[f"{np.mean([r['JF'] for r in rs if r['kind'] == k]):.2f}" for k in kinds]] for m, rs in by.items()])
    tags = sorted({t for r in rows for t in r["hard"]})
    count = {t: len({r["item"] for r in rows if t in r["hard"]}) for t in tags}
    lines += ["", "### J&F by hard-distractor kind (a clip counts under every kind it has; clips in brackets)", ""]
    lines += markdown_table(["method", *[f"{t} ({count[t]})" for t in tags]],
                            [[m, *[f"{np.mean([r['JF'] for r in rs if t in r['hard']]):.2f}" for t in tags]] for m, rs in by.items()])
    return summary, "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m benchmarks.clear", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--planner", default="builtin", help="'builtin' or a VLM checkpoint directory (under the counterfactual selector)")
    ap.add_argument("--tracker", default="classic", help="'classic' or a SAM 2 / SAM 3 checkpoint directory")
    ap.add_argument("--proposer", default="classic", help="'classic' or a SAM 2 / SAM 3 checkpoint directory")
    ap.add_argument("--split", default="test", choices=("test", "val"), help="clips of the test split (reported) or val (for tuning thresholds)")
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/clear"))
    add_shard_arguments(ap, 200, noun="clips", compare="methods")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    rows = (merge_rows(args.merge, agree=("planner", "tracker", "proposer", "inputs"), row_key=lambda r: (r["item"], r["method"], r.get("input")))
            if args.merge else run(args))
    summary, md = summarise(rows)
    write_results(args.out, {"command": command_line("benchmarks.clear", argv)}, summary, rows, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
