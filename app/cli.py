"""The `atelier` command line. Results go to stdout (``--json`` for machines), logs to stderr.

Exit codes: 0 ok, 1 failure (including any failed batch item), 2 usage error.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import signal
import sys
from pathlib import Path

from core.arguments import StrictParser
from core.errors import AtelierError

DESCRIPTION = """\
Atelier: staged video/vision pipelines (planners, renderers, trackers), offline by default.

Verbs:
  info       versions, device, backends, weights and the pipelines that exist
{pipelines}
  video      video utilities: probe (metadata), sample (frames + contact sheet), overlay (masks/captions)
  score      benchmark scorers that match the official evaluation code (vos: DAVIS-2017 J, F, J&F;
             pose: COCO keypoint AP/AR and OKS by pycocotools, PCK, MPJPE; mcq: letter extraction)
  batch      run any verb over a JSONL manifest, resumably, one result folder per item
  convert    an official Bernini release folder -> our pipeline.json layout, and back
  worldgen   generate synthetic-world datasets (masks, keypoints, tasks) and preview galleries
  train      train a built-in model on worldgen, with evaluation and a model card (vit, vlm,
             humor-sft, humor-rm, humor-rl, gelvr-sft, gelvr-rl)
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
  atelier generate "a red star bouncing to the left" -o star.mp4
  atelier edit clip.mp4 "make the blue square green" -o edited.mp4
  atelier meme template.png --topic mondays -n 4 -o memes/
  atelier batch jobs.jsonl -o out/          # re-run the same line to resume
"""


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number; use 1-65535") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside 1-65535")
    return port


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")


def build_parser(verb: str | None = "*") -> argparse.ArgumentParser:
    """The whole command line (``verb="*"``), or with only ``verb`` built in full and the other pipeline verbs and
    the training code left as bare names: ``main`` passes the verb it is given, so `atelier --help`, any verb's
    --help and its argument errors never import torch (a pipeline verb's parser is built from its torch-free
    config module; the pipeline is imported when its run starts)."""
    from pipelines.registry import PIPELINE_APPS, PIPELINE_HELP, get_app

    # a verb registered without a line in PIPELINE_HELP (a plugin, a test) costs its import here, nothing else
    helps = {v: PIPELINE_HELP.get(v) or get_app(v).help for v in PIPELINE_APPS}
    parser = StrictParser(
        prog="atelier", usage="atelier [-h] VERB ...", description=DESCRIPTION.format(pipelines="\n".join(f"  {v:10s} {h}" for v, h in helps.items())),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB", prog="atelier", help=argparse.SUPPRESS)  # the description lists them

    p = sub.add_parser("info", help="versions, device, backends, weights, pipelines; --plan: a release's memory plan",
                       description="Print versions, the compute device, available backends, the weights Atelier can find and the "
                                   "pipelines it offers. With --plan, print where each model of an official Bernini release would "
                                   "go for a memory budget, and the estimated device peak, from its configs alone (nothing loads).",
                       epilog="example: atelier info --plan ByteDance/Bernini-Diffusers-v2 --max-memory 24GB --num-frames 81")
    p.add_argument("--plan", metavar="PATH_OR_ID", help="an official Bernini release folder or hub id (Bernini-Diffusers, -v2, Bernini-R)")
    p.add_argument("--max-memory", metavar="SIZE", help="the device memory to plan for, e.g. 24GB (default: what the device has free)")
    p.add_argument("--revision", metavar="REV", help="the hub revision of --plan's id")
    for flag, default, text in (("--num-frames", 81, "frames of the clip"), ("--height", 480, "its height"), ("--width", 832, "its width"),
                                ("--segments", 2, "clips side by side in the DiT's context (2: an edit and its source)")):
        p.add_argument(flag, type=int, default=default, metavar="N", help=f"--plan: {text} (default {default})")
    _add_common(p)
    p.set_defaults(func=_cmd_info)

    for name, help_ in helps.items():
        if verb in ("*", name):
            _add_pipeline_verb(sub, get_app(name))
        else:
            sub.add_parser(name, help=help_)

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
    _add_overwrite(p)
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
    _add_overwrite(p)
    _add_common(p)
    p.set_defaults(func=_cmd_video_overlay)

    if verb in ("*", "batch"):
        _add_batch(sub)
    else:
        sub.add_parser("batch", help="run verbs over a JSONL manifest (resumable)")

    p = sub.add_parser("serve", help="start the web demo (127.0.0.1)", description="Start the Gradio web demo on this machine only (loopback), never shared publicly; uploads are size- and length-limited.")
    p.add_argument("--host", default="127.0.0.1", help="loopback interface to bind (default 127.0.0.1); another address also needs --allow-remote")
    p.add_argument("--allow-remote", action="store_true", help="permit a non-loopback --host (the demo has no authentication)")
    p.add_argument("--port", type=_port, default=7860, help="TCP port, 1-65535 (default 7860)")
    p.add_argument("--max-video-seconds", type=float, default=600.0, metavar="SECONDS", help="reject longer uploads (above 0; default 600)")
    p.add_argument("--max-file-size", default="500mb", help="upload size limit: 500mb, 2gb or a number of bytes (default 500mb)")
    p.add_argument("--keep-files", type=float, default=60.0, metavar="MINUTES",
                   help="delete uploads and served results older than this (default 60; checked every few minutes, all deleted when the server stops)")
    p.add_argument("--vlm", action="append", default=[], metavar="PATH", help="also offer this VLM checkpoint (directory or HF cache id) in the web tabs; repeatable")
    _add_common(p)
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("demo", help="run the showcase jobs, write a gallery", description="Run the showcase jobs on the bundled real clip (and the synthetic world) and write OUT/index.html.")
    p.add_argument("-o", "--out", default="outputs/demo", help="output folder (default outputs/demo)")
    p.add_argument("--video", help="video to use (default: ../shared/data/bigbuckbunny_clip/bigbuckbunny.mp4, else a synthetic clip)")
    _add_common(p)
    p.set_defaults(func=_cmd_demo)

    if verb in ("*", "train"):
        _add_train(sub)
    else:
        sub.add_parser("train", help="train a built-in model")

    _add_worldgen(sub)
    _add_score(sub)
    _add_convert(sub)
    return parser


def _add_batch(sub) -> None:
    p = sub.add_parser(
        "batch",
        help="run verbs over a JSONL manifest (resumable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one verb per manifest line. Each item's result is written atomically to OUT/<id>/, its status appended to OUT/status.jsonl. Re-running skips finished items and retries failed ones; one bad item never stops the rest. Exit code 1 if any item failed. Nothing in OUT that atelier batch did not write is ever deleted or overwritten: an item whose OUT/<id> is someone else's fails instead.",
        epilog=(
            'manifest lines look like (UTF-8 JSON Lines; "#" lines are comments):\n'
            '  {"id": "bbb", "verb": "video.sample", "args": {"video": "bbb.mp4", "n": 8}}\n'
            "paths: a top-level string arg that is a relative path existing beside the manifest\n"
            '  ("bbb.mp4" above) is resolved against the manifest\'s folder, whatever the current\n'
            "  directory and engine; other strings (and absolute paths) pass unchanged.\n"
            "engines:\n"
            "  atelier batch jobs.jsonl -o out/                          # local: one item after another\n"
            "  atelier batch jobs.jsonl -o out/ --engine ray             # a Ray cluster started for this run\n"
            "  atelier batch jobs.jsonl -o /nfs/out --engine ray --ray-address auto   # an existing cluster\n"
            "  (on a cluster, OUT must be a folder every node sees, and atelier must be installed on\n"
            "  every node: pip install 'atelier[distributed]')\n"
            "verbs: " + ", ".join(sorted(_batch_verbs()))
        ),
    )
    p.add_argument("manifest", help="JSON Lines file, one item per line")
    p.add_argument("-o", "--out", required=True, help="output folder (holds status.jsonl and one folder per item); may not be the manifest or an input")
    p.add_argument("--engine", choices=("local", "ray"), default="local", help="local (default): run here, one item at a time; ray: a pool of Ray actors, same results and status.jsonl")
    p.add_argument("--ray-address", metavar="ADDR", help="join an existing Ray cluster: 'auto' (started with `ray start --head` on this machine) or 'ray://HOST:10001'; default: start a local one")
    p.add_argument("--workers", type=int, metavar="N", help="ray engine: actors in the pool (default: one per GPU, else one per CPU; fewer if each item loads a large model)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    _add_common(p)
    p.set_defaults(func=_cmd_batch)


def _add_train(sub) -> None:
    from training.common import training_time_help

    p = sub.add_parser("train", help="train a built-in model (vit, vlm, humor-sft, humor-rm, humor-rl, gelvr-sft, gelvr-rl)", formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Train a built-in model from scratch on worldgen data streamed on the fly (no dataset files), "
                                   "evaluate it on held-out seeds and write weights, train_config.json (the recipe), eval.json and "
                                   "card.md to OUT. Resumes from OUT/run/checkpoint with the recipe saved in OUT (--steps overrides it). "
                                   "The shipped weights (weights/builtin/MODEL) are overwritten only when --out names them.",
                       epilog=training_time_help() + "\nexamples:\n"
                              "  atelier train vit                                  # -> outputs/train/vit\n"
                              "  atelier train vit --steps 20 --out /tmp/vit-speed  # how fast is this machine?\n"
                              "  atelier train vlm --vit outputs/train/vit          # a VLM on your ViT -> outputs/train/vlm\n"
                              "  atelier train vit --out weights/builtin/vit        # replace the shipped weights (only when named)\n"
                              "  atelier train humor-sft                            # HUMOR's meme writer: SFT on traced-back CoTs\n"
                              "  atelier train humor-rm                             # HUMOR's pairwise reward model\n"
                              "  atelier train humor-rl --sft outputs/train/humor-sft  # group RL (GRPO) against the reward model\n"
                              "  atelier train gelvr-sft                            # the latent reasoner: GeLVR SFT on worldgen spatial (the shipped recipe)\n"
                              "  atelier train gelvr-sft --variant pointwise        # an ablation: slots with the pointwise loss only\n"
                              "  atelier train gelvr-rl --sft outputs/train/gelvr-sft  # GePO (vMF latent policy) from the SFT model")
    p.add_argument("model", choices=["vit", "vlm", "humor-sft", "humor-rm", "humor-rl", "gelvr-sft", "gelvr-rl"], help="which built-in model")
    p.add_argument("--out", help="output folder: new, empty or an earlier run of MODEL (default outputs/train/MODEL)")
    p.add_argument("--steps", type=int, help="optimisation steps (default: the model's recipe, or the resumed run's)")
    p.add_argument("--vit", help="trained ViT folder (vlm only; default: the resumed run's, else the shipped weights/builtin/vit)")
    p.add_argument("--sft", help="humor-rl only: the SFT writer to start from (default: outputs/train/humor-sft if it exists, "
                                 "else the shipped weights/builtin/meme_writer_sft)")
    p.add_argument("--reward", choices=["pairwise", "pointwise"], help="humor-rl only: the published pairwise group reward "
                                                                       "(default) or the pointwise ablation")
    p.add_argument("--variant", choices=["direct", "pointwise", "gram", "full", "cka", "rkd"],
                   help="gelvr-sft only: the loss (default full = pointwise + Gram + slot-to-image cross KL)")
    p.add_argument("--latent-policy", choices=["vmf", "gaussian", "replay"],
                   help="gelvr-rl only: the slot policy (default vmf; replay = LVR's text-only RL)")
    p.add_argument("--no-resume", action="store_true", help="start over instead of resuming a checkpoint")
    p.add_argument("--trust-remote-code", action="store_true", help="humor-rl: let the --sft checkpoint run its own Python code "
                                                                  "(off by default; a folder is data)")
    _add_common(p)
    p.set_defaults(func=_cmd_train)


def _add_convert(sub) -> None:
    p = sub.add_parser("convert", help="official Bernini folder <-> our pipeline.json layout", formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Convert an official Bernini release folder (Bernini-Diffusers, -v2, Bernini-R-Diffusers) into our "
                                   "pipeline.json layout, or a saved Bernini pipeline into the official layout (the direction follows SRC). "
                                   "Tensors keep their stored dtype; files atelier did not write are never replaced without --overwrite.",
                       epilog="examples:\n"
                              "  atelier convert /models/Bernini-Diffusers-v2 -o /runs/bernini-v2          # -> pipeline.json\n"
                              "  atelier convert /runs/bernini-v2 -o /models/Bernini-Diffusers-v2-mine     # -> official layout")
    p.add_argument("src", metavar="SRC", help="an official release folder, or a saved Bernini pipeline (pipeline.json)")
    p.add_argument("-o", "--out", required=True, help="the folder to write")
    p.add_argument("--release", choices=["r", "v1", "v2"], help="which release SRC is, when its folder name does not say "
                                                                 "(default: detected; v2 only from a name containing Bernini-Diffusers-v2)")
    _add_overwrite(p)
    _add_common(p)
    p.set_defaults(func=_cmd_convert)


def _add_pipeline_verb(sub, app) -> None:
    """A pipeline's verb, built from its ``PipelineApp``: inputs, every config setting, component overrides."""
    p = sub.add_parser(app.verb, help=app.help, description=app.description, epilog=app.examples,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    for inp in app.inputs:
        listed = inp.kind in ("texts", "images")
        nargs = "+" if listed else None
        meta = inp.name.upper().rstrip("S") if listed else inp.name.upper()
        if inp.flag is None and not listed:
            p.add_argument(inp.name, help=inp.help)
        else:
            flags = [f"--{inp.name}"] + ([inp.flag] if inp.flag and inp.flag != f"--{inp.name}" else [])
            p.add_argument(*flags, dest=inp.name, required=inp.required, nargs=nargs, metavar=meta, help=inp.help)
    settings = p.add_argument_group("settings (the pipeline config; saved beside every output)")
    for s in app.settings():
        flags = [f"--{s.name.replace('_', '-')}"] + ([s.flag] if s.flag else [])
        extra = f" (default {s.default})" if s.default is not None and "default" not in s.help else ""
        if s.range is not None:
            low, high = (f"{v:g}" if v is not None else "" for v in s.range)
            extra += f"; range {low or '-inf'}..{high or 'inf'}"
        kw: dict = {"dest": f"setting_{s.name}", "help": s.help + extra}
        if s.type is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif s.pair:
            kw.update(nargs=2, type=int, metavar=("H", "W"))
        else:
            kw.update(type=_typed(s), metavar=s.name.split("_")[-1].upper() if not s.choices else None, choices=s.choices)
        settings.add_argument(*flags, **kw)
    models = p.add_argument_group("models and placement")
    for slot, flag in app.components.items():
        spec = app.component_specs[slot]
        default = app.defaults.get(slot)
        models.add_argument(f"--{flag}", dest=f"component_{slot}", metavar="PATH",
                            help=f"{spec.help}: 'builtin', a builtin model folder, a checkpoint directory, or a hub id "
                                 "(owner/name[@revision]: the Hugging Face cache first, downloaded when online)"
                                 + (f" (default {default})" if default else ""))
    models.add_argument("--pipeline", metavar="DIR", help=f"a saved {app.name} pipeline (directory with pipeline.json) or its hub id")
    models.add_argument("--revision", metavar="REV", help="the hub revision (branch, tag or commit) of every hub id given "
                                                          "without its own @revision (default: main)")
    models.add_argument("--device", help="cuda, mps or cpu (default: the best available)")
    models.add_argument("--dtype", help="float32, bfloat16 or float16 (default: bfloat16 on CUDA, float32 otherwise)")
    models.add_argument("--seed", type=int, help="seed of the run's random generator (0 .. 2^63-1)")
    models.add_argument("--threads", metavar="N", help="CPU threads for torch (default: 1 for small models such as the builtin "
                                                        "ones, measured faster; else one per core; or $ATELIER_THREADS)")
    models.add_argument("--trust-remote-code", action="store_true", help="let a checkpoint run its own Python code (off by default)")
    p.add_argument("-o", "--out", help=f"save {app.saved_files or 'the outputs'} in this folder"
                   + (" (or NAME.mp4: the clip there, the rest in the folder NAME/)" if app.video_output else ""))
    for flag, _, text in app.file_outputs:
        p.add_argument(flag, dest=f"fileout_{flag.lstrip('-').replace('-', '_')}", metavar="FILE", help=text)
    _add_overwrite(p)
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    _add_common(p)
    p.set_defaults(func=_cmd_pipeline, app=app)


def _add_overwrite(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true",
                   help="replace files of the same names that atelier did not write (by default the run refuses before it starts)")


def _typed(setting):
    """argparse ``type=`` for a setting: its own parser, so errors name the setting."""
    def parse(text: str):
        try:
            return setting.parse(text)
        except Exception as e:  # argparse turns this into "argument --x: invalid value" with our message
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = setting.type.__name__
    return parse


def _batch_verbs() -> list[str]:
    from app.batch import VERBS

    return list(VERBS)


def _add_worldgen(sub) -> None:
    from worldgen import cli as worldgen_cli

    p = sub.add_parser("worldgen", help="synthetic-world datasets and previews", description=(worldgen_cli.__doc__ or "").strip(), formatter_class=argparse.RawDescriptionHelpFormatter)
    worldgen_cli.add_arguments(p)
    p.set_defaults(func=worldgen_cli.run)


def _add_score(sub) -> None:
    """``atelier score SCORER``: benchmark scorers that match the official evaluation code, one sub-command each."""
    score = sub.add_parser("score", help="benchmark scores that match the official evaluators (vos, pose, mcq)",
                           description="Score saved predictions against ground truth exactly as the official evaluation code does.")
    ssub = score.add_subparsers(dest="scorer", metavar="SCORER", required=True)
    p = ssub.add_parser("vos", help="J, F and J&F of video object masks (DAVIS-2017)", formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="J (region IoU), F (boundary accuracy) and J&F with Mean / Recall / Decay, as the official\n"
                                    "DAVIS-2017 evaluation computes them. PRED and GT are each a folder of DAVIS palette PNGs\n"
                                    "(one sequence), a folder of such folders (sequences paired by name) or an SA-V style masklet JSON.",
                        epilog="examples:\n"
                               "  atelier score vos results/osvos/ DAVIS/Annotations/480p/        # semi-supervised, every sequence\n"
                               "  atelier score vos pred/dog/ DAVIS/Annotations/480p/dog --json\n"
                               "  atelier score vos proposals/ DAVIS/Annotations_unsupervised/480p/ --unsupervised")
    p.add_argument("pred", metavar="PRED", help="predicted masks: PNG folder, folder of sequence folders, or masklet .json")
    p.add_argument("gt", metavar="GT", help="ground-truth masks, in any of the same forms")
    p.add_argument("--unsupervised", action="store_true", help="unsupervised protocol: every frame, void pixels, Hungarian matching of predicted ids to objects (default: semi-supervised, first and last frame not scored)")
    p.add_argument("--bound-th", type=float, default=0.008, help="boundary tolerance: a fraction of the image diagonal, or pixels when >= 1 (default 0.008)")
    _add_common(p)
    p.set_defaults(func=_cmd_score_vos)
    p = ssub.add_parser("pose", help="COCO keypoint AP/AR, OKS, PCK and MPJPE of COCO-17 keypoints", formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="Keypoint AP/AR by pycocotools' COCOeval (iouType keypoints, default params), per-person OKS,\n"
                                    "PCK@t (t x box diagonal or torso length) and MPJPE in pixels. PRED is a COCO results list or a\n"
                                    "COCO annotations file; GT a COCO keypoint annotations file. Persons pair by annotation id when\n"
                                    "every prediction carries a GT id of its image, else greedily by OKS within each image.",
                        epilog="examples:\n"
                               "  atelier score pose results/keypoints_val2017_results.json annotations/person_keypoints_val2017.json\n"
                               "  atelier score pose out/keypoints.coco.json target.coco.json --normalise torso --json")
    p.add_argument("pred", metavar="PRED", help="predicted keypoints: COCO results .json or COCO annotations .json")
    p.add_argument("gt", metavar="GT", help="ground-truth COCO keypoint annotations .json")
    p.add_argument("--thresholds", type=float, nargs="+", default=[0.05, 0.1, 0.2], metavar="T", help="PCK thresholds as fractions of the scale (default 0.05 0.1 0.2)")
    p.add_argument("--normalise", choices=("bbox", "torso"), default="bbox", help="PCK scale: GT keypoint box diagonal (default) or torso length")
    _add_common(p)
    p.set_defaults(func=_cmd_score_pose)
    p = ssub.add_parser("mcq", help="multiple-choice accuracy from generated text (V*Bench / HR-Bench style, VLMEvalKit's letter rules)",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="Accuracy of generated answers to lettered multiple-choice questions, overall and per category,\n"
                                    "with 95% Wilson intervals. The letter is extracted as VLMEvalKit's can_infer does (the letter rule,\n"
                                    "then the option text). QUESTIONS: JSON lines / list of {question_id, label, options?, category?};\n"
                                    "PREDICTIONS: {question_id, prediction}. A missing or unreadable prediction counts as wrong.",
                        epilog="examples:\n"
                               "  atelier score mcq vstar/questions.jsonl runs/qwen_latent.jsonl\n"
                               "  atelier score mcq questions.jsonl predictions.jsonl --article-guard --json   # older VLMEvalKit / Qwen eval")
    p.add_argument("questions", metavar="QUESTIONS", help="questions with their right letter (JSON lines or a JSON list)")
    p.add_argument("predictions", metavar="PREDICTIONS", help="the model's answers as text (JSON lines or a JSON list)")
    p.add_argument("--article-guard", action="store_true", help="refuse answers of more than three words containing 'A' "
                                                                  "(older VLMEvalKit releases, Qwen's evaluation)")
    _add_common(p)
    p.set_defaults(func=_cmd_score_mcq)


# --------------------------------------------------------------------------- commands


def _emit(args, result: dict, human: str | None = None) -> None:
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(human if human is not None else "\n".join(f"{k}: {v}" for k, v in result.items()))


def _cmd_info(args) -> int:
    from app.info import collect_info, format_info

    if args.plan is not None:
        from app.info import memory_plan

        plan = memory_plan(args.plan, args.max_memory, revision=args.revision, num_frames=args.num_frames, height=args.height,
                           width=args.width, segments=args.segments)
        _emit(args, plan.to_dict(), str(plan))
        return 0
    for flag in ("max_memory", "revision"):
        if getattr(args, flag) is not None:
            from core.errors import InputError

            raise InputError(flag, getattr(args, flag), "it applies to --plan; pass --plan PATH_OR_ID too")

    info = collect_info()
    _emit(args, info, format_info(info))
    return 0


def _cmd_pipeline(args) -> int:
    from app.runner import input_paths
    from core.outputs import protecting

    app = args.app
    values = {inp.name: getattr(args, inp.name) for inp in app.inputs}
    values.update({k[len("setting_"):]: v for k, v in vars(args).items() if k.startswith("setting_") and v is not None})
    values.update({k[len("component_"):]: v for k, v in vars(args).items() if k.startswith("component_") and v is not None})
    values.update(pipeline=args.pipeline, device=args.device, dtype=args.dtype, seed=args.seed, threads=args.threads,
                  trust_remote_code=args.trust_remote_code, progress=not args.no_progress, revision=args.revision)
    inputs, config, _, options = app.split_args(values)
    app.check_settings(config, options)  # an argument error is said alone, before any model (or torch) loads
    with protecting(input_paths(app, inputs)):  # `-o NAME.mp4` and the extra files included: never over an input
        return _run_verb(app, args, values)


def _named_by_flag(app, run):
    """``run()``, an error about a model slot naming the option the user typed when it differs (selector -> --vlm)."""
    from core.errors import InputError

    try:
        return run()
    except InputError as e:
        flag = app.components.get(e.name)
        if flag is not None and flag != e.name.replace("_", "-"):
            raise InputError(f"{e.name} (--{flag})", e.value, e.hint) from None
        raise


def _run_verb(app, args, values: dict) -> int:
    import shutil
    import tempfile

    from app.runner import run_app
    from core.outputs import move_file, publish_file

    out_dir, video_file = args.out, _video_out(app, args.out, args.overwrite)
    if video_file is not None:
        out_dir = video_file.with_suffix("")
    extra = _file_outputs(app, args)
    scratch = None
    if extra and out_dir is None:  # the run needs a folder to save into before its files are copied out
        scratch = out_dir = tempfile.mkdtemp(prefix="atelier-run-")
    try:
        _, summary = _named_by_flag(app, lambda: run_app(app, values, out_dir=out_dir, overwrite=args.overwrite,
                                                         on_start=lambda c, o: _note_builtin(app, c, o)))
        if video_file is not None:  # the clip moves to NAME.mp4 (written once), the rest stays in NAME/
            move_file(summary["files"].pop(f"{app.video_output}.mp4"), video_file, "--out", args.overwrite)
            summary["files"] = {"video": str(video_file), **summary["files"]}
        for name, path in extra.items():
            if name not in summary["files"]:
                print(f"atelier: this run wrote no {name}; {path} was not written", file=sys.stderr)
                continue
            flag = next(f for f, n, _ in app.file_outputs if n == name)
            with publish_file(path, flag, args.overwrite) as tmp:
                shutil.copyfile(summary["files"][name], tmp)
            summary["files"] = {**summary["files"], f"{name} (copy)": str(path)}
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if scratch is not None:  # only the copies remain
        summary["files"] = {k: v for k, v in summary["files"].items() if not str(v).startswith(scratch)}
    if summary.get("unlike_builtin_world"):
        from app.world_check import unlike_message

        print(f"atelier {app.verb}: note: {unlike_message(summary)}", file=sys.stderr)
    if summary.get("notice"):  # a pipeline's own word about this run (e.g. a topic its builtin writer cannot follow)
        print(f"atelier {app.verb}: note: {summary['notice']}", file=sys.stderr)
    _emit(args, summary, app.format(summary))
    return 0


def _note_builtin(app, components: dict, options: dict) -> None:
    """The builtin models' notice on stderr, once every check of the run has passed and before its pipeline loads:
    a run that then fails has said it, an argument error says only the error."""
    from app.world_check import notice, uses_builtin

    if uses_builtin(app, components, options):
        print(f"atelier {app.verb}: note: {notice(app)}", file=sys.stderr)


def _file_outputs(app, args) -> dict[str, Path]:
    """The extra files asked for (``app.file_outputs``), each checked before any compute: a new file, or
    one atelier wrote and nobody changed since, or anything with --overwrite."""
    from core.outputs import check_file
    from core.paths import check_output_file

    out = {}
    for flag, name, _ in app.file_outputs:
        value = getattr(args, f"fileout_{flag.lstrip('-').replace('-', '_')}", None)
        if not value:
            continue
        path = check_output_file(value, flag, tuple(Path(name).suffixes[-1:]))
        check_file(path, flag, args.overwrite)
        out[name] = path
    return out


def _video_out(app, out: str | None, overwrite: bool = False) -> Path | None:
    """``-o NAME.mp4`` for an app with a video output: the file, checked before any compute (an existing
    one only when atelier wrote it, or with --overwrite); else None (a folder)."""
    from core.outputs import check_file
    from core.paths import check_output_file

    if not out or not app.video_output or Path(out).suffix.lower() != ".mp4":
        return None
    path = check_output_file(out, "--out", (".mp4",))
    check_file(path, "--out", overwrite)
    return path


def _cmd_video_probe(args) -> int:
    from app.video_tools import probe

    _emit(args, probe(args.video))
    return 0


def _cmd_video_sample(args) -> int:
    from app.video_tools import sample

    res = sample(args.video, args.out, n=args.n, height=args.height, overwrite=args.overwrite)
    _emit(args, res, f"wrote {len(res['frames'])} frames and {res['contact_sheet']}")
    return 0


def _cmd_video_overlay(args) -> int:
    from app.video_tools import overlay

    res = overlay(args.video, args.out, masks=args.masks, motion=args.motion, caption=args.caption, alpha=args.alpha, height=args.height,
                  overwrite=args.overwrite)
    _emit(args, res, f"wrote {res['output']} ({res['num_frames']} frames)")
    return 0


def _cmd_batch(args) -> int:
    from app.batch import run_batch
    from core.errors import InputError, MediaError

    if args.engine != "ray" and (args.ray_address or args.workers):
        raise InputError("--engine", args.engine, "--ray-address and --workers need --engine ray")
    if args.workers is not None and args.workers < 1:
        raise InputError("--workers", args.workers, "use 1 or more actors")
    try:
        s = run_batch(args.manifest, args.out, progress=not args.no_progress, engine=args.engine, ray_address=args.ray_address, workers=args.workers)
    except OSError as e:  # e.g. the disk filled up while writing status.jsonl: one line, never a traceback
        raise MediaError(e.filename or args.out, e.strerror or str(e), "free space or fix -o/--out, then re-run the same command to resume") from None
    res = {"total": s.total, "ok": s.ok, "failed": s.failed, "skipped": s.skipped, "out": s.out_dir}
    _emit(args, res, f"{s.ok} ok, {s.failed} failed, {s.skipped} skipped (already done) of {s.total}; status in {Path(s.out_dir) / 'status.jsonl'}")
    return s.exit_code


def _cmd_serve(args) -> int:
    from app.web import launch

    launch(host=args.host, allow_remote=args.allow_remote, port=args.port, max_video_seconds=args.max_video_seconds, max_file_size=args.max_file_size,
           models=("builtin", *args.vlm), keep_files_minutes=args.keep_files)
    return 0


def _cmd_train(args) -> int:
    from core.errors import InputError
    from training.common import check_out_dir, check_vit_dir, default_out

    if args.steps is not None and args.steps < 1:  # 0 or fewer steps would "train" nothing and still exit 0
        raise InputError("--steps", args.steps, "train for at least 1 step, e.g. --steps 20 (or leave it out for the recipe's)")
    # refuse a bad --out / --vit before loading anything: the shipped weights only when named
    out = check_out_dir(args.out or default_out(args.model), args.model, explicit=args.out is not None)
    if args.model.startswith(("humor-", "gelvr-")):
        import contextlib
        import sys

        with contextlib.redirect_stdout(sys.stderr):  # the trainers' log lines; stdout keeps only the result (--json)
            facts = _train_humor(args, out) if args.model.startswith("humor-") else _train_gelvr(args, out)
        _emit(args, {"out": str(out), **facts})
        return 0
    if args.model == "vit":
        if args.vit is not None:
            logging.getLogger(__name__).warning("--vit %s is for `atelier train vlm`; training a ViT ignores it", args.vit)
        from training.vit import train_vit

        metrics = train_vit(out, args.steps, resume=not args.no_resume)
    else:
        if args.vit is not None:
            check_vit_dir(args.vit)
        from training.vlm import train_vlm

        metrics = train_vlm(out, args.vit, args.steps, resume=not args.no_resume)
    _emit(args, {"out": str(out), **metrics})
    return 0


def _train_humor(args, out) -> dict:
    """``atelier train humor-sft | humor-rm | humor-rl``: the recipes of training/humor_*.py."""
    from dataclasses import replace
    from pathlib import Path

    from core.errors import InputError
    from training.common import SHIPPED

    if args.vit is not None:
        raise InputError("--vit", args.vit, "--vit is for `atelier train vlm`")
    if args.model == "humor-sft":
        from training.humor_sft import SFTRecipe, train_sft

        recipe = SFTRecipe() if args.steps is None else replace(SFTRecipe(), steps=args.steps)
        facts = train_sft(out, recipe, resume=not args.no_resume)
    elif args.model == "humor-rm":
        from training.humor_rm import RMRecipe, train_rm

        recipe = RMRecipe() if args.steps is None else replace(RMRecipe(), steps=args.steps)
        facts = {"test": train_rm(out, recipe, resume=not args.no_resume)["test"]}
    else:
        from planners.meme_lm import MARKER
        from training.humor_rl import RLRecipe, train_rl

        sft = Path(args.sft) if args.sft else next((p for p in (Path("outputs/train/humor-sft"), SHIPPED / "meme_writer_sft")
                                                    if (p / MARKER).exists()), SHIPPED / "meme_writer_sft")
        if not (sft / MARKER).exists() and not (sft / "config.json").is_file():
            raise InputError("--sft", str(sft), "no meme writer there: run `atelier train humor-sft` first or pass its --out")
        recipe = replace(RLRecipe(), **{k: v for k, v in (("steps", args.steps), ("reward", args.reward)) if v is not None})
        facts = train_rl(out, sft, recipe, resume=not args.no_resume, trust_remote_code=args.trust_remote_code)
    return {k: v for k, v in facts.items() if k not in ("loss_curve", "curve", "val_history")}


def _train_gelvr(args, out) -> dict:
    """``atelier train gelvr-sft | gelvr-rl``: the recipes of training/gelvr_sft.py and training/gelvr_rl.py."""
    from dataclasses import replace
    from pathlib import Path

    from core.errors import InputError
    from training.common import SHIPPED

    for flag, value, owner in (("--vit", args.vit, "vlm"), ("--variant", args.variant, "gelvr-sft"),
                               ("--latent-policy", args.latent_policy, "gelvr-rl")):
        if value is not None and args.model != owner:
            raise InputError(flag, value, f"{flag} is for `atelier train {owner}`")
    if args.model == "gelvr-sft":
        from training.gelvr_sft import shipped_recipe, train_sft

        recipe = shipped_recipe(**{k: v for k, v in (("steps", args.steps), ("variant", args.variant)) if v is not None})
        facts = train_sft(out, recipe, resume=not args.no_resume)
    else:
        from planners.latent_builtin import BuiltinLatentReasoner
        from training.gelvr_rl import RLRecipe, train_rl

        sft = Path(args.sft) if args.sft else next((p for p in (Path("outputs/train/gelvr-sft"), SHIPPED / "latent_reasoner_sft")
                                                    if BuiltinLatentReasoner.is_saved_in(p)), SHIPPED / "latent_reasoner_sft")
        if not BuiltinLatentReasoner.is_saved_in(sft):
            raise InputError("--sft", str(sft), "no latent reasoner there: run `atelier train gelvr-sft` first or pass its --out")
        recipe = replace(RLRecipe(), **{k: v for k, v in (("steps", args.steps), ("latent_policy", args.latent_policy)) if v is not None})
        facts = train_rl(out, sft, recipe, resume=not args.no_resume)
    return {k: v for k, v in facts.items() if k != "val_history"} | {"val": facts["val_history"][-1] if facts["val_history"] else None}


def _cmd_demo(args) -> int:
    from app.demo import run_demo

    page = run_demo(args.out, video=args.video)
    _emit(args, {"gallery": str(page)}, f"gallery: {page}")
    return 0


def _cmd_convert(args) -> int:
    from pipelines.bernini.official import convert

    result = convert(args.src, args.out, release=args.release, overwrite=args.overwrite)
    _emit(args, result)
    return 0


def _cmd_score_vos(args) -> int:
    from app.score import vos

    result = vos(args.pred, args.gt, unsupervised=args.unsupervised, bound_th=args.bound_th)
    _emit(args, result.to_dict(), result.format())
    return 0


def _cmd_score_mcq(args) -> int:
    from scorers.mcq import format_mcq, mcq_accuracy

    result = mcq_accuracy(args.questions, args.predictions, article_guard=args.article_guard)
    _emit(args, {k: v.to_dict() for k, v in result.items()}, format_mcq(result))
    return 0


def _cmd_score_pose(args) -> int:
    from app.score import pose

    result = pose(args.pred, args.gt, thresholds=args.thresholds, normalise=args.normalise)
    _emit(args, result.to_dict(), result.format())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(next((a for a in argv if not a.startswith("-")), None))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from core.paths import keep_made_folders, remove_made_folders

    previous = signal.signal(signal.SIGTERM, _terminate)  # SIGTERM unwinds like Ctrl-C: temp files are removed
    try:
        code = int(args.func(args) or 0)
        keep_made_folders()
        return code
    except AtelierError as e:
        print(f"atelier {args.verb}: error: {_one_line(e)}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    except OSError as e:  # a disk or permission problem met mid-run: one line, never a traceback
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        fix = "; free some space or write elsewhere (-o/--out), then run again" if e.errno == errno.ENOSPC else ""
        print(f"atelier {args.verb}: error: {where}{e.strerror or e}{fix}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"atelier {args.verb}: error: out of memory; ask for less (fewer frames, a smaller grid or size)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug of ours: one line for the user, the traceback only with --verbose
        if _disk_full(e):  # a library that wraps the OSError (safetensors' SafetensorError) still ran out of space
            print(f"atelier {args.verb}: error: no space left on the disk; free some space or write elsewhere (-o/--out), "
                  "then run again", file=sys.stderr)
            return 1
        logging.getLogger("atelier").debug("internal error", exc_info=True)
        print(f"atelier {args.verb}: internal error: {type(e).__name__}: {_one_line(e)[:300]} (this is a bug in atelier; "
              "re-run with -v to see where, and please report it)", file=sys.stderr)
        return 1
    finally:
        remove_made_folders()  # a failed or stopped run's output folders, where still empty (none after a success)
        signal.signal(signal.SIGTERM, previous)


def _disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is the disk running out of space."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _terminate(signum, frame):
    raise KeyboardInterrupt


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


if __name__ == "__main__":
    sys.exit(main())
