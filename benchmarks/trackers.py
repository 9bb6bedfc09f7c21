"""Benchmark a tracker: speed and memory of a session, and semi-supervised accuracy on real DAVIS.

    python -m benchmarks.trackers [--tracker classic|DIR] [--frames 500] [--long-frames 5000] [--window 16]
                                  [--clips 10] [--device cpu] [--dtype float32] [--skip-davis] [--out outputs/bench/trackers]

1. frames/s of ``propagate`` on a 256x256 worldgen ``vrs`` clip (test split, ``--frames`` frames,
   the target prompted with its exact mask on its first visible frame), torch and OpenCV on one
   thread; the mean J over the frames where the target is visible comes with it;
2. RSS growth (psutil: peak during propagation minus before the session) over a ``--long-frames``
   256x256 world rendered frame by frame on demand (never held), with the session's ``--window``;
3. on ``--clips`` test-split 64x64 vrs clips (the target prompted as in 1): mean J over visible
   frames, presence on visible vs absent frames (means, AUC); for ``classic`` also the colour
   proposals' recall (IoU >= 0.8) of the objects of frames 0 and T/2;
4. J, F and J&F (``scorers.vos``, the official DAVIS-2017 semi-supervised protocol) on the 5 real
   sequences of ``../shared/data/davis16_val_mini`` from the first frame's ground-truth mask, beside
   the stored OSVOS predictions scored by the same code (README: J&F 0.789640).

``--tracker`` is ``classic`` or a checkpoint directory (SAM 2 / SAM 3, or a ClassicTracker
``save_pretrained`` folder), loaded with ``trackers.load_tracker``. Targets (classic): >= 100
frames/s, RSS growth < 100 MB. Writes ``results.json`` and ``results.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import psutil
import torch

from benchmarks.common import command_line, markdown_table, write_results
from benchmarks.gridprobe import WorldFrames
from core.arguments import StrictParser

DAVIS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "davis16_val_mini"
SIZE = 256


def load(args):
    from trackers import load_tracker

    return load_tracker(args.tracker, device=args.device, dtype=args.dtype) if args.tracker != "classic" else load_tracker("classic")


def speed(tracker, num_frames: int, window: int, seed: int) -> dict:
    """Frames/s of one object's propagation over a pre-rendered 256x256 vrs clip (rendering not timed)."""
    from worldgen.tasks import vrs
    from worldgen.tasks.base import split_seed

    sample = vrs.generate(split_seed("test", seed, 0), vrs.Config(size=SIZE, num_frames=num_frames))
    world, target = sample.worlds["video"], sample.record["target_id"]
    rendered = [world.render(t) for t in range(num_frames)]
    frames = np.stack([r.rgb for r in rendered])
    gt = np.stack([r.ids == target for r in rendered])
    del rendered
    first = int(np.argmax(gt.reshape(num_frames, -1).any(1)))
    session = tracker.init_session(frames, window=window)
    session.add_prompt(first, 1, mask=gt[first])
    t0 = time.perf_counter()
    outs = [(o.frame_idx, o.masks[0]) for o in session.propagate()]
    seconds = time.perf_counter() - t0
    j = [_iou(m, gt[t]) for t, m in outs if t != first and gt[t].any()]
    return {"frames": len(outs), "size": SIZE, "seconds": round(seconds, 3), "fps": round(len(outs) / seconds, 1),
            "mean_j_visible": round(float(np.mean(j)), 4), "query": sample.record["query"], "target": sample.record["objects"][target - 1]}


def memory(tracker, num_frames: int, window: int, seed: int) -> dict:
    """RSS growth while a session streams a long clip rendered on demand."""
    from worldgen.scene import SceneConfig, sample_world

    world = sample_world(seed, SceneConfig(SIZE, SIZE, num_frames, num_shapes=(4, 4), p_transient=0.0))
    first = world.render(0)
    obj = max(first.boxes, key=lambda i: int((first.ids == i).sum()))  # the largest object
    proc = psutil.Process()
    gc.collect()
    rss0 = proc.memory_info().rss
    session = tracker.init_session(WorldFrames(world), window=window)
    session.add_prompt(0, 1, mask=first.ids == obj)
    peak, present, held = rss0, 0, 0
    t0 = time.perf_counter()
    for out in session.propagate():
        present += bool(out.masks[0].any())
        held = max(held, session.memory_frames())
        if out.frame_idx % 100 == 0:
            peak = max(peak, proc.memory_info().rss)
    peak = max(peak, proc.memory_info().rss)
    return {"frames": num_frames, "size": SIZE, "window": window, "seconds": round(time.perf_counter() - t0, 1),
            "rss_start_mb": round(rss0 / 2**20, 1), "rss_growth_mb": round((peak - rss0) / 2**20, 1),
            "max_frames_held": held, "frames_with_a_mask": present}


def davis(tracker, window: int) -> dict:
    """Semi-supervised J/F/J&F on davis16_val_mini, and the stored OSVOS predictions scored the same way."""
    from core.masks import read_mask_folder
    from core.video import Video
    from scorers import vos

    names = (DAVIS / "sequences.txt").read_text().split()
    scores, fps = [], {}
    for name in names:
        gt = (read_mask_folder(DAVIS / "Annotations" / "480p" / name) > 0).astype(np.uint8)
        session = tracker.init_session(Video(DAVIS / "JPEGImages" / "480p" / name), window=window)
        session.add_prompt(0, 1, mask=gt[0] > 0)
        t0 = time.perf_counter()
        pred = np.stack([o.id_map() for o in session.propagate()])
        fps[name] = round(len(pred) / (time.perf_counter() - t0), 1)
        scores.append(vos.score_sequence(pred, gt, name=name))
    ours = vos.VOSResult("semi-supervised", vos.BOUND_TH, tuple(scores))
    osvos = vos.evaluate(DAVIS / "predictions" / "osvos_davis2017", DAVIS / "Annotations" / "480p")

    def row(r) -> dict:
        return {"J": round(r.j.mean, 4), "F": round(r.f.mean, 4), "JF": round(r.jf_mean, 4)}

    return {"tracker": {**row(ours), "per_sequence": {s.name: {**row(s), "fps": fps[s.name]} for s in ours.sequences}},
            "osvos": {**row(osvos), "per_sequence": {s.name: row(s) for s in osvos.sequences}}}


def vrs_runs(tracker, num_clips: int, seed: int = 0, window: int = 4) -> list[list[tuple[bool, float, float]]]:
    """Each held-out (test-split, 64x64) vrs clip tracked from its target's first visible frame, its
    exact mask as the prompt: per later frame ``(target visible?, J, presence score)``."""
    from worldgen.tasks import vrs
    from worldgen.tasks.base import split_seed

    runs = []
    for i in range(num_clips):
        sample = vrs.generate(split_seed("test", seed, i))
        world, target = sample.worlds["video"], sample.record["target_id"]
        rendered = [world.render(t) for t in range(world.num_frames)]
        frames = np.stack([r.rgb for r in rendered])
        gt = np.stack([r.ids == target for r in rendered])
        first = int(np.argmax(gt.reshape(len(gt), -1).any(1)))
        session = tracker.init_session(frames, window=window)
        session.add_prompt(first, 1, mask=gt[first])
        runs.append([(bool(gt[o.frame_idx].any()), _iou(o.masks[0], gt[o.frame_idx]), float(o.scores[0]))
                     for o in session.propagate() if o.frame_idx != first])
    return runs


def vrs_summary(runs) -> dict:
    """Mean J over visible frames; presence on visible vs absent frames and its AUC (absent vs visible)."""
    frames = [f for run in runs for f in run]
    j = [jv for visible, jv, _ in frames if visible]
    visible = [p for v, _, p in frames if v]
    absent = [p for v, _, p in frames if not v]
    return {"clips": len(runs), "visible_frames": len(visible), "absent_frames": len(absent),
            "mean_j_visible": float(np.mean(j)), "presence_visible": float(np.mean(visible)),
            "presence_absent": float(np.mean(absent)) if absent else None, "presence_auc": auc(visible, absent) if absent else None}


def auc(positive, negative) -> float:
    """Probability that a positive outscores a negative (ties count half)."""
    pos, neg = np.asarray(positive, float)[:, None], np.asarray(negative, float)[None]
    return float(((pos > neg) + 0.5 * (pos == neg)).mean())


def proposal_recall(proposer, num_clips: int, seed: int = 0, iou: float = 0.8, min_area: float = 0.003) -> dict:
    """Share of the objects (covering >= ``min_area`` of the frame) of frames 0 and T/2 of the test-split
    vrs clips that some candidate matches with IoU >= ``iou``; apart for objects touching another
    object of their colour (a colour proposer merges those) and the rest."""
    from worldgen.tasks import vrs
    from worldgen.tasks.base import split_seed

    hits: dict[bool, list[bool]] = {True: [], False: []}
    counts = []
    for i in range(num_clips):
        world = vrs.generate(split_seed("test", seed, i)).worlds["video"]
        for t in (0, world.num_frames // 2):
            frame = world.render(t)
            cands = proposer.propose(frame.rgb)
            counts.append(len(cands))
            for o in world.objects:
                gt = frame.ids == o.id
                if gt.sum() < min_area * gt.size:
                    continue
                near = cv2.dilate(gt.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
                touching = any(p.color == o.color and (near & (frame.ids == p.id)).any() for p in world.objects if p.id != o.id)
                hits[touching].append(max((_iou(c.mask, gt) for c in cands), default=0.0) >= iou)
    both = hits[False] + hits[True]
    return {"frames": len(counts), "candidates_per_frame": float(np.mean(counts)), "objects": len(both),
            "recall": float(np.mean(both)), "isolated_objects": len(hits[False]), "recall_isolated": float(np.mean(hits[False])),
            "touching_objects": len(hits[True]), "recall_touching": float(np.mean(hits[True])) if hits[True] else None}


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else 1.0


def markdown(args, result: dict) -> str:
    s, m = result["speed"], result["memory"]
    lines = markdown_table(["measure", "value", "target"], [
        (f"frames/s, {SIZE}x{SIZE}, one object, one thread ({s['frames']} frames)", s["fps"], ">= 100 (classic)"),
        (f"mean J on that clip (visible frames; {s['query']})", s["mean_j_visible"], ""),
        (f"RSS growth over {m['frames']:,} frames rendered on demand (window {m['window']})", f"{m['rss_growth_mb']} MB", "< 100 MB"),
        ("frame outputs held at most", m["max_frames_held"], f"<= window + prompted = {m['window'] + 1}"),
    ])
    v = result["vrs"]
    lines += ["", *markdown_table(["vrs, 64x64, test split", "value"], [
        ("clips / visible frames / absent frames", f"{v['clips']} / {v['visible_frames']} / {v['absent_frames']}"),
        ("mean J over visible frames", f"{v['mean_j_visible']:.3f}"),
        ("presence: mean on visible / absent frames", f"{v['presence_visible']:.3f} / {_num(v['presence_absent'])}"),
        ("presence AUC (visible vs absent)", _num(v["presence_auc"])),
    ])]
    if "proposals" in result:
        p = result["proposals"]
        lines += ["", *markdown_table(["colour proposals (frames 0 and T/2 of the same clips)", "value"], [
            ("candidates per frame", f"{p['candidates_per_frame']:.1f}"),
            ("objects matched at IoU >= 0.8, all", f"{p['recall']:.3f} ({p['objects']})"),
            ("... touching no object of their colour", f"{p['recall_isolated']:.3f} ({p['isolated_objects']})"),
            ("... touching one of their colour", f"{_num(p['recall_touching'])} ({p['touching_objects']})"),
        ])]
    if "davis" in result:
        d = result["davis"]
        lines += ["", *markdown_table(["sequence", f"{args.tracker} J", "F", "J&F", "frames/s", "OSVOS J", "F", "J&F"], [
            (name, v["J"], v["F"], v["JF"], v["fps"], *d["osvos"]["per_sequence"][name].values())
            for name, v in d["tracker"]["per_sequence"].items()
        ] + [("**all 5**", d["tracker"]["J"], d["tracker"]["F"], d["tracker"]["JF"], "", d["osvos"]["J"], d["osvos"]["F"], d["osvos"]["JF"])])]
    return "\n".join(lines) + "\n"


def _num(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def main(argv=None) -> int:
    ap = StrictParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tracker", default="classic", help="classic, or a checkpoint directory (SAM 2 / SAM 3 / a saved classic tracker)")
    ap.add_argument("--frames", type=int, default=500, help="frames of the speed clip")
    ap.add_argument("--long-frames", type=int, default=5000, help="frames of the memory clip")
    ap.add_argument("--window", type=int, default=16, help="the session's window of past outputs")
    ap.add_argument("--clips", type=int, default=10, help="test-split 64x64 vrs clips for J and presence (and the proposals)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--skip-davis", action="store_true", help="skip the DAVIS accuracy part")
    ap.add_argument("--out", default="outputs/bench/trackers")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    tracker = load(args)
    result = {"speed": speed(tracker, args.frames, args.window, args.seed), "memory": memory(tracker, args.long_frames, args.window, args.seed),
              "vrs": vrs_summary(vrs_runs(tracker, args.clips, args.seed))}
    if args.tracker == "classic":
        from trackers.proposals import ColourProposer

        result["proposals"] = proposal_recall(ColourProposer(), args.clips, args.seed)
    if not args.skip_davis:
        if not DAVIS.exists():
            print(f"skipping DAVIS: {DAVIS} is missing", file=sys.stderr)
        else:
            result["davis"] = davis(tracker, args.window)
    meta = {"command": command_line("benchmarks.trackers", argv), "tracker": args.tracker, "python": platform.python_version(),
            "cv2": cv2.__version__, "torch": torch.__version__, "numpy": np.__version__}
    md = markdown(args, result)
    js, _ = write_results(args.out, meta, result, [], md)
    print(md)
    print(f"command: `{meta['command'].strip()}`  -> {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
