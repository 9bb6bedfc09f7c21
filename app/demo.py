"""`make demo` / `atelier demo`: run the showcase jobs and write ``OUT/index.html``.

The video tools on the bundled real clip, then one section per method: its showcase item, chosen by the
rule in ``app/showcase.py`` (the first held-out TEST item of its task), run on the builtin models, with
the ground truth beside the result and a computed verdict ("right: ..." / "wrong: ..."); then worldgen
previews.
"""

from __future__ import annotations

import json

import logging
import shlex
from pathlib import Path

import numpy as np

from app import showcase, video_tools
from app.gallery import Gallery, Section
from core.arguments import StrictParser
from core.outputs import check_folder
from core.paths import check_output_dir

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CLIP = REPO.parent / "shared" / "data" / "bigbuckbunny_clip" / "bigbuckbunny.mp4"


def _synthetic_clip(path: Path) -> Path:
    """A moving disc on a gradient, for machines without the shared real clip."""
    from core.video import write_video

    t, h, w = 60, 180, 320
    yy, xx = np.mgrid[:h, :w]
    frames = []
    for i in range(t):
        f = np.zeros((h, w, 3), np.uint8)
        f[..., 2] = (xx * 255 / w).astype(np.uint8)
        cx, cy = 30 + i * 4, h // 2
        f[(xx - cx) ** 2 + (yy - cy) ** 2 < 20**2] = (230, 60, 40)
        frames.append(f)
    return write_video(path, np.stack(frames), fps=20)


def run_demo(out: str | Path, video: str | Path | None = None) -> Path:
    out = check_output_dir(out, "--out")
    # the shared output rule: a file of someone else's under a name the demo writes stops it before any work (an
    # interrupted demo's own files are ours and are replaced); the writers below check their own files again
    check_folder(out, ["index.html", "synthetic_clip.mp4", "video_tools/**", "worldgen/**", *(f"{v}/**" for v in showcase.VERBS)],
                 "--out")
    if video is None:
        video = DEFAULT_CLIP if DEFAULT_CLIP.is_file() else _synthetic_clip(out / "synthetic_clip.mp4")
        if video != DEFAULT_CLIP:
            logger.warning("the shared real clip is missing; using a synthetic clip instead")
    gallery = Gallery(out, "Atelier demo")
    info = video_tools.probe(video)
    logger.info("video tools on %s", video)
    sheet = video_tools.sample(video, out / "video_tools" / "frames", n=8, height=180)
    ov = video_tools.overlay(video, out / "video_tools" / "motion_overlay.mp4", motion=True,
                             caption="moving regions (OpenCV MOG2)", height=360)
    gallery.add(Section(
        "Video tools",
        "Uniform sampling seeks to 8 frames (the decoder never reads the whole file); the overlay "
        "tints moving regions found by background subtraction, streamed window by window.",
        images=[sheet["contact_sheet"]], videos=[ov["output"]], data=info,
        command=f"atelier video sample {video} -n 8 && atelier video overlay {video} --motion",
    ))
    for verb in showcase.VERBS:
        _add_showcase(gallery, out, verb)
    logger.info("worldgen previews")
    _add_worldgen(gallery, out)
    return gallery.write()


# what each method's section says about it, beside its showcase item (the item: app.showcase's rule)
_TITLES = {
    "ask": "GridProbe: long-video QA that chooses its own frames",
    "segment": "CLEAR: segment the object a query describes",
    "generate": "Bernini: generate a clip through a plan in ViT space (t2v)",
    "edit": "Bernini: edit a clip through a plan in ViT space (v2v)",
    "motion": "AnyMotion: edit a person's motion through a planned skeleton",
    "meme": "HUMOR: memes by multi-path reasoning, ranked by a pairwise reward model",
    "reason": "Latent visual reasoning: an answer after K latent slots (GeLVR + GePO)",
}
_ABOUT = {
    "ask": "Row and column probes of a 12x12 pool at half resolution give the importance map (chosen cells outlined); the "
           "chosen frames go to the focused pass.",
    "segment": "Candidates proposed and tracked, the builtin planner chooses one (checked by showing it alone and removing it), "
               "the classic tracker follows it under the event monitor. The builtin planner's forward choice is right on "
               "{planner_choice} of held-out clips (its card, weights/builtin/instances/card.md).",
    "generate": "The planner writes the clip as builtin-ViT tokens on 4 plan frames (plan.png: the tokens' principal components "
                "as colours, above the frames they describe), the renderer decodes them into 16 frames of 64x64. How often the "
                "judge reads the prompt in the result: docs/BENCHMARKS.md.",
    "edit": "The planner writes the edited clip as builtin-ViT tokens from the source's tokens and the instruction; the renderer "
            "decodes them with the source in context. How often the judge reads the asked change: docs/BENCHMARKS.md.",
    "motion": "The SCoT planner reads the source skeleton and writes its reasoning and the target skeleton per frame; the "
              "pose-guided renderer draws it with the source clip in context. side_by_side.png: source + skeleton | planned "
              "skeleton | output. How often the re-detected pose matches the target: docs/BENCHMARKS.md.",
    "meme": "The writer reads the picture (the builtin VLM's object list), writes the template's intent, three reasoning paths "
            "under different contexts, anchors on one and writes the boxes; the reward model compares every two memes and ranks "
            "them. gallery.png: best first. How often they beat the scene's human memes: docs/BENCHMARKS.md.",
    "reason": "The reasoner emits <start>, thinks in continuous slots (each its own last hidden state fed back) and answers "
              "after <end>. slots.png: where each slot looks, and the region they found (the truth picture marks the evidence in magenta). Accuracy over 1,200 held-out "
              "questions: docs/BENCHMARKS.md.",
}


def about(verb: str) -> str:
    """A method's paragraph, its numbers read from where they are measured (a builtin model's eval.json)."""
    if verb == "segment":
        from planners.loading import INSTANCES_DIR

        test = json.loads((INSTANCES_DIR / "eval.json").read_text())["test"]["tracker"]
        return _ABOUT[verb].format(planner_choice=f"{test['acc']:.0%}")
    return _ABOUT[verb]


def _media(verb: str, it, s: dict) -> tuple[list[str], list[str]]:
    """The result's pictures and videos the section shows (the item's own input clip first)."""
    f = s.get("files", {})
    pick = lambda *names: [str(f[n]) for n in names if n in f]  # noqa: E731
    source = [it.inputs["video"]] if "video" in it.inputs else []
    return {
        "ask": (pick("importance_map.png", "selected_frames.png"), source),
        "segment": (pick("marks.png", "timeline.png"), pick("overlay.mp4")),
        "generate": (pick("plan.png", "frames.png"), pick("video.mp4")),
        "edit": (pick("source_and_result.png", "plan.png"), source + pick("video.mp4")),
        "motion": (pick("side_by_side.png"), source + pick("video.mp4")),
        "meme": (pick("gallery.png"), []),
        "reason": (pick("slots.png"), []),
    }[verb]


def _command(verb: str, it) -> str:
    """The CLI line that reproduces the item, quoted for a shell (options and paths may hold spaces)."""
    x = it.inputs
    argv = {
        "ask": lambda: [x["video"], "-q", x["question"], "--options", *x["options"]],
        "segment": lambda: [x["video"], x["query"], "-o", "seg/"],
        "generate": lambda: [x["prompt"], "-o", "gen/"],
        "edit": lambda: [x["video"], x["instruction"], "-o", "edit/"],
        "motion": lambda: [x["video"], x["instruction"], "-o", "motion/"],
        "meme": lambda: [x["image"], "-o", "memes/"],
        "reason": lambda: [x["image"], "-q", x["question"], "--options", *x["options"], "-o", "answer/"],
    }[verb]()
    return shlex.join(["atelier", verb, *map(str, argv)])


def _question(verb: str, it) -> str:
    x = it.inputs
    return {"ask": lambda: f"{x['question']} Options: {', '.join(x['options'])}.",
            "segment": lambda: f"Query: \"{x['query']}\".", "generate": lambda: f"Prompt: \"{x['prompt']}\".",
            "edit": lambda: f"Instruction: \"{x['instruction']}\".", "motion": lambda: f"Instruction: \"{x['instruction']}\".",
            "meme": lambda: "A meme template picture.",
            "reason": lambda: f"{x['question']} Options: {', '.join(x['options'])}."}[verb]()


def showcase_section(verb: str, out: Path) -> tuple[Section, object]:
    """``verb``'s gallery section: its showcase item (``app.showcase``'s rule, item 0) run on the builtin models, the
    ground truth beside the result, and the computed verdict in words. Returns ``(section, verdict)``."""
    folder = out / verb
    it, _, s, verdict = showcase.run(verb, folder / "input", out_dir=folder / "result")
    images, videos = _media(verb, it, s)
    issue = showcase.OPEN_QUALITY_ISSUES.get(verb)
    note = ("" if verdict.right else
            " This output is not what the method should do: the builtin models are still wrong on items like this"
            + (f" (issue {issue})." if issue else "."))
    section = Section(
        _TITLES[verb],
        f"Showcase item (the rule in app/showcase.py: the first held-out TEST item, not chosen by its output): "
        f"{it.about}. {_question(verb, it)} {about(verb)}",
        images=images, videos=videos, data={"summary": {k: v for k, v in s.items() if k not in ("files", "config")}},
        command=_command(verb, it), truth=it.truth, truth_images=it.truth_images, verdict=verdict.words() + note,
        right=verdict.right,
    )
    return section, verdict


def _add_showcase(gallery: Gallery, out: Path, verb: str) -> None:
    from core.errors import AtelierError

    logger.info("%s: showcase item 0 (app/showcase.py)", verb)
    try:
        section, _ = showcase_section(verb, out)
    except AtelierError as e:  # the builtin weights are missing
        logger.warning("%s demo skipped: %s", verb, e)
        return
    gallery.add(section)


def _add_worldgen(gallery: Gallery, out: Path) -> None:
    """Two held-out samples of every worldgen task, with their annotations drawn on top: made by the very
    command the section prints, so running it again reproduces the same files in the same place."""
    import argparse
    import contextlib
    import sys

    from worldgen import cli as worldgen_cli
    from worldgen import tasks

    for name in tasks.NAMES:
        folder = out / "worldgen" / name
        argv = [name, "--n", "2", "--split", "val", "-o", str(folder), "--preview"]
        parser = StrictParser()
        worldgen_cli.add_arguments(parser)
        with contextlib.redirect_stdout(sys.stderr):  # its one summary line is a log line here
            worldgen_cli.run(parser.parse_args(argv))
        page = folder / "preview" / "index.html"
        sheets = sorted(page.parent.glob("*.png"))[:2]
        gallery.add(Section(
            f"worldgen: {name}",
            f"Synthetic-world task '{name}' (val split): masks, boxes and skeletons are the exact ground truth. "
            f"All samples: {page.relative_to(out)}",
            images=[str(p) for p in sheets],
            command="atelier worldgen " + " ".join(argv),
        ))

