"""The `atelier` command line. Results go to stdout (``--json`` for machines), logs to stderr.

Exit codes: 0 ok, 1 failure (including any failed batch item), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from core.errors import AtelierError

DESCRIPTION = """\
Atelier: staged video/vision pipelines (planners, renderers, trackers), offline by default.

Verbs:
  info       versions, device, backends and the weights found
  ask        answer a multiple-choice question about a long video (GridProbe: picks its own frames)
  video      video utilities: probe (metadata), sample (frames + contact sheet), overlay (masks/captions)
  batch      run any verb over a JSONL manifest, resumably, one result folder per item
  worldgen   generate synthetic-world datasets (masks, keypoints, tasks) and preview galleries
  train      train a built-in model (vit, vlm) on worldgen, with evaluation and a model card
  serve      start the web demo on http://127.0.0.1:7860
  demo       run the showcase jobs and write a gallery page (outputs/demo/index.html)

Run `atelier VERB --help` for each verb's options and examples.
"""

EPILOG = """\
examples:
  atelier info --json
  atelier video probe clip.mp4
  atelier video sample clip.mp4 -n 16 -o frames/
  atelier video overlay clip.mp4 --motion --caption "moving parts" -o overlay.mp4
  atelier ask clip.mp4 -q "What colour is the ball?" --options red green blue --grid 8 -o answer/
  atelier batch jobs.jsonl -o out/          # re-run the same line to resume
"""


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atelier", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")

    p = sub.add_parser("info", help="versions, device, backends, weights", description="Print versions, the compute device, available backends and the weights Atelier can find.")
    _add_common(p)
    p.set_defaults(func=_cmd_info)

    _add_ask(sub)

    video = sub.add_parser("video", help="video utilities (probe, sample, overlay)", description="Video utilities built on core.Video (decord/PyAV, real seeking, bounded memory).")
    vsub = video.add_subparsers(dest="tool", metavar="TOOL", required=True)
    p = vsub.add_parser("probe", help="print a video's metadata", description="Print frame count, fps, size, duration and codec of a video file, frame folder or image.")
    p.add_argument("video", help="video file, folder of frames, or image")
    _add_common(p)
    p.set_defaults(func=_cmd_video_probe)
    p = vsub.add_parser("sample", help="save N uniformly spaced frames", description="Save N uniformly spaced frames as PNGs plus a labelled contact sheet. Seeks; never decodes the whole video.")
    p.add_argument("video")
    p.add_argument("-n", type=int, default=8, help="number of frames (default 8)")
    p.add_argument("--height", type=int, help="resize to this height, keeping the aspect ratio")
    p.add_argument("-o", "--out", default="frames", help="output folder (default ./frames)")
    _add_common(p)
    p.set_defaults(func=_cmd_video_sample)
    p = vsub.add_parser("overlay", help="draw masks / motion / a caption onto a video", description="Write an H.264 mp4 with masks drawn on every frame: from a DAVIS folder of palette PNGs (--masks) or from OpenCV background subtraction (--motion); optional caption. Streams, so any length works.")
    p.add_argument("video")
    p.add_argument("-o", "--out", default="overlay.mp4", help="output mp4 (default overlay.mp4)")
    p.add_argument("--masks", help="folder of DAVIS palette PNG masks, one per frame")
    p.add_argument("--motion", action="store_true", help="segment moving regions with background subtraction")
    p.add_argument("--caption", help="text drawn at the bottom of every frame")
    p.add_argument("--alpha", type=float, default=0.5, help="mask opacity in [0, 1] (default 0.5)")
    p.add_argument("--height", type=int, help="resize to this height")
    _add_common(p)
    p.set_defaults(func=_cmd_video_overlay)

    p = sub.add_parser(
        "batch",
        help="run verbs over a JSONL manifest (resumable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one verb per manifest line. Each item's result is written atomically to OUT/<id>/, its status appended to OUT/status.jsonl. Re-running skips finished items and retries failed ones; one bad item never stops the rest. Exit code 1 if any item failed.",
        epilog='manifest lines look like:\n  {"id": "bbb", "verb": "video.sample", "args": {"video": "bbb.mp4", "n": 8}}\nverbs: ' + ", ".join(sorted(_batch_verbs())),
    )
    p.add_argument("manifest", help="JSON Lines file, one item per line")
    p.add_argument("-o", "--out", required=True, help="output folder (holds status.jsonl and one folder per item)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    _add_common(p)
    p.set_defaults(func=_cmd_batch)

    p = sub.add_parser("serve", help="start the web demo (127.0.0.1)", description="Start the Gradio web demo on this machine only (loopback), never shared publicly; uploads are size- and length-limited.")
    p.add_argument("--host", default="127.0.0.1", help="loopback interface to bind (default 127.0.0.1); another address also needs --allow-remote")
    p.add_argument("--allow-remote", action="store_true", help="permit a non-loopback --host (the demo has no authentication)")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--max-video-seconds", type=float, default=600.0, help="reject longer uploads (default 600)")
    p.add_argument("--max-file-size", default="500mb", help="upload size limit (default 500mb)")
    p.add_argument("--vlm", action="append", default=[], metavar="PATH", help="also offer this VLM checkpoint (directory or HF cache id) in the web tabs; repeatable")
    _add_common(p)
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("demo", help="run the showcase jobs, write a gallery", description="Run the showcase jobs on the bundled real clip (and the synthetic world) and write OUT/index.html.")
    p.add_argument("-o", "--out", default="outputs/demo", help="output folder (default outputs/demo)")
    p.add_argument("--video", help="video to use (default: ../shared/data/bigbuckbunny_clip/bigbuckbunny.mp4, else a synthetic clip)")
    _add_common(p)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("train", help="train a built-in model (vit, vlm)", formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Train a built-in model from scratch on worldgen data streamed on the fly (no dataset files), "
                                   "evaluate it on held-out seeds and write weights, eval.json and card.md. Resumes from OUT/run/checkpoint.",
                       epilog="examples:\n  atelier train vit --out weights/builtin/vit\n  atelier train vlm --vit weights/builtin/vit --out weights/builtin/vlm")
    p.add_argument("model", choices=["vit", "vlm"], help="which built-in model")
    p.add_argument("--out", help="output folder (default weights/builtin/MODEL)")
    p.add_argument("--steps", type=int, help="optimisation steps (default: the model's recipe)")
    p.add_argument("--vit", default="weights/builtin/vit", help="trained ViT folder (vlm only)")
    p.add_argument("--no-resume", action="store_true", help="start over instead of resuming a checkpoint")
    _add_common(p)
    p.set_defaults(func=_cmd_train)

    _add_worldgen(sub)
    return parser


ASK_EPILOG = """\
examples:
  atelier ask talk.mp4 -q "What does the speaker hold?" --options "a pen" "a cup" "a phone"
  atelier ask talk.mp4 -q "..." --options A B C D --vlm /models/Qwen3-VL-2B-Instruct --answerer /models/Qwen3-VL-8B-Instruct
  atelier ask talk.mp4 -q "..." --options A B C D --grid 16 --probe-scale 0.5 --json -o out/

Put VIDEO before --options (which takes every word after it). The answer is read from the
answer-letter posterior, never generated text. Compute is the language model's analytic FLOPs
(vision tower excluded, as in the paper), next to one full-frame pass on all K² frames.
"""

# mirrored from pipelines.gridprobe (not imported here: building the parser stays fast)
BUDGET_RULES = ("skew", "pr", "mean", "otsu")
TIE_BREAKS = ("stable", "spread")
PROMPT_STYLES = ("default", "videomme_v2", "longvideobench")


def _add_ask(sub) -> None:
    p = sub.add_parser(
        "ask", help="answer a multiple-choice question about a video (GridProbe)", epilog=ASK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="GridProbe: probe a KxK grid of K² uniformly sampled frames with 2K cheap passes (rows, columns), "
                    "build a frame-importance map from the answer posteriors, pick a per-question number of frames "
                    "from the map's shape, and answer with one focused pass on those frames.",
    )
    p.add_argument("video", help="video file, folder of frames, or image")
    p.add_argument("-q", "--question", required=True, help="the question")
    p.add_argument("--options", nargs="+", required=True, metavar="OPTION", help="2 to 10 answer options, lettered A, B, ...")
    p.add_argument("--grid", "-K", type=int, help="grid side K: K² frames in the pool, 2K probes (default 12)")
    p.add_argument("--probe-scale", type=float, help="probe resolution as a fraction of the source side, in (0, 1] (default 1)")
    p.add_argument("--focus-scale", type=float, help="focused-pass resolution as a fraction of the source side (default 1)")
    p.add_argument("--budget-rule", choices=BUDGET_RULES, help="how many frames the focused pass gets (default skew, the paper's)")
    p.add_argument("--gamma", type=float, help="gamma of the budget rule (default 3.0)")
    p.add_argument("--min-frames", type=int, help="fewest frames for the focused pass (default 2)")
    p.add_argument("--max-frames", type=int, help="most frames for the focused pass (default K²)")
    p.add_argument("--tie-break", choices=TIE_BREAKS, help="order of equally important frames (default stable, the reference's)")
    p.add_argument("--prompt-style", choices=PROMPT_STYLES, help="MCQ prompt wording (default: lmms-eval's)")
    p.add_argument("--vlm", help="selector VLM: 'builtin' (default), a builtin VLM directory (atelier train vlm --out DIR), or a transformers checkpoint directory / HF cache id")
    p.add_argument("--answerer", help="VLM for the focused pass (default: the selector)")
    p.add_argument("--pipeline", metavar="DIR", help="a saved GridProbe pipeline (directory with pipeline.json)")
    p.add_argument("--device", help="cuda, mps or cpu (default: the best available)")
    p.add_argument("--dtype", help="float32, bfloat16 or float16 (default: bfloat16 on CUDA, float32 otherwise)")
    p.add_argument("--seed", type=int, help="seed Python, NumPy and torch first")
    p.add_argument("-o", "--out", help="save result.json, config.json, importance_map.png and selected_frames.png here")
    p.add_argument("--no-progress", action="store_true", help="hide the probe progress bar")
    _add_common(p)
    p.set_defaults(func=_cmd_ask)


def _batch_verbs() -> list[str]:
    from app.batch import VERBS

    return list(VERBS)


def _add_worldgen(sub) -> None:
    from worldgen import cli as worldgen_cli

    p = sub.add_parser("worldgen", help="synthetic-world datasets and previews", description=(worldgen_cli.__doc__ or "").strip(), formatter_class=argparse.RawDescriptionHelpFormatter)
    worldgen_cli.add_arguments(p)
    p.set_defaults(func=worldgen_cli.run)


# --------------------------------------------------------------------------- commands


def _emit(args, result: dict, human: str | None = None) -> None:
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(human if human is not None else "\n".join(f"{k}: {v}" for k, v in result.items()))


def _cmd_info(args) -> int:
    from app.info import collect_info, format_info

    info = collect_info()
    _emit(args, info, format_info(info))
    return 0


def _cmd_ask(args) -> int:
    from app.ask import ask, format_summary

    res = ask(
        args.video, args.question, args.options, out_dir=args.out, vlm=args.vlm, answerer=args.answerer,
        pipeline=args.pipeline, device=args.device, dtype=args.dtype, seed=args.seed, progress=not args.no_progress,
        grid=args.grid, probe_scale=args.probe_scale, focus_scale=args.focus_scale, budget_rule=args.budget_rule,
        gamma=args.gamma, min_frames=args.min_frames, max_frames=args.max_frames, tie_break=args.tie_break,
        prompt_style=args.prompt_style,
    )
    _emit(args, res, format_summary(res))
    return 0


def _cmd_video_probe(args) -> int:
    from app.video_tools import probe

    _emit(args, probe(args.video))
    return 0


def _cmd_video_sample(args) -> int:
    from app.video_tools import sample

    res = sample(args.video, args.out, n=args.n, height=args.height)
    _emit(args, res, f"wrote {len(res['frames'])} frames and {res['contact_sheet']}")
    return 0


def _cmd_video_overlay(args) -> int:
    from app.video_tools import overlay

    res = overlay(args.video, args.out, masks=args.masks, motion=args.motion, caption=args.caption, alpha=args.alpha, height=args.height)
    _emit(args, res, f"wrote {res['output']} ({res['num_frames']} frames)")
    return 0


def _cmd_batch(args) -> int:
    from app.batch import run_batch

    s = run_batch(args.manifest, args.out, progress=not args.no_progress)
    res = {"total": s.total, "ok": s.ok, "failed": s.failed, "skipped": s.skipped, "out": s.out_dir}
    _emit(args, res, f"{s.ok} ok, {s.failed} failed, {s.skipped} skipped (already done) of {s.total}; status in {Path(s.out_dir) / 'status.jsonl'}")
    return s.exit_code


def _cmd_serve(args) -> int:
    from app.web import launch

    launch(host=args.host, allow_remote=args.allow_remote, port=args.port, max_video_seconds=args.max_video_seconds, max_file_size=args.max_file_size,
           models=("builtin", *args.vlm))
    return 0


def _cmd_train(args) -> int:
    out = args.out or f"weights/builtin/{args.model}"
    if args.model == "vit":
        from training.vit import train_vit

        metrics = train_vit(out, **({"steps": args.steps} if args.steps else {}), resume=not args.no_resume)
    else:
        from training.vlm import train_vlm

        metrics = train_vlm(out, args.vit, **({"steps": args.steps} if args.steps else {}), resume=not args.no_resume)
    _emit(args, metrics)
    return 0


def _cmd_demo(args) -> int:
    from app.demo import run_demo

    page = run_demo(args.out, video=args.video)
    _emit(args, {"gallery": str(page)}, f"gallery: {page}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except AtelierError as e:
        print(f"atelier {args.verb}: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
