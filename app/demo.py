"""`make demo` / `atelier demo`: run the showcase jobs and write ``OUT/index.html``.

Each pipeline adds its showcase here as it lands: the video tools on the bundled real clip,
GridProbe answering a held-out long-video question with the builtin VLM, and worldgen previews.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from app import video_tools
from app.gallery import Gallery, Section

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
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
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
    logger.info("GridProbe on a held-out longqa clip")
    _add_gridprobe(gallery, out)
    logger.info("CLEAR on a held-out vrs clip")
    _add_clear(gallery, out)
    logger.info("worldgen previews")
    _add_worldgen(gallery, out)
    return gallery.write()


def _add_clear(gallery: Gallery, out: Path) -> None:
    """A held-out video reasoning segmentation clip segmented by CLEAR on the builtin backend."""
    from app.runner import run_app
    from core.video import write_video
    from pipelines.clear.app import format_summary
    from pipelines.registry import get_app
    from planners.loading import BuiltinUnavailableError
    from worldgen.tasks import vrs
    from worldgen.tasks.base import split_seed

    sample = vrs.generate(split_seed("test", 11, 1), vrs.Config(level=1))
    rec, world = sample.record, sample.worlds["video"]
    clip = write_video(out / "clear" / "clip.mp4", (world.render(t).rgb for t in range(world.num_frames)), fps=world.fps)
    try:
        _, s = run_app(get_app("segment"), {"video": str(clip), "query": rec["query"], "progress": False}, out_dir=out / "clear" / "result")
    except BuiltinUnavailableError as e:
        logger.warning("CLEAR demo skipped: %s", e)
        return
    gallery.add(Section(
        "CLEAR: segment the object a query describes",
        f"Query: \"{rec['query']}\" (truth: object {rec['target_id']}). Candidates proposed and tracked, the builtin planner "
        "chooses one (checked by showing it alone and removing it), the classic tracker follows it under the event monitor. "
        "The builtin planner chooses right about 40% of the time on held-out clips (docs/BENCHMARKS.md).",
        images=[s["files"]["marks.png"], s["files"]["timeline.png"]], videos=[s["files"]["overlay.mp4"]],
        data={"summary": format_summary(s)}, command=f"atelier segment {clip} \"{rec['query']}\" -o seg/",
    ))


def _add_gridprobe(gallery: Gallery, out: Path) -> None:
    """A 1,000-frame needle question (test split, never trained on), answered by GridProbe with the builtin VLM."""
    from app.runner import run_app
    from pipelines.gridprobe.pipeline import format_summary
    from pipelines.registry import get_app
    from planners.loading import BuiltinUnavailableError
    from core.video import write_video
    from worldgen.tasks import longqa
    from worldgen.tasks.base import split_seed

    sample = longqa.generate(split_seed("test", 7, 0), longqa.Config(level=1, kind="needle"))
    rec, world = sample.record, sample.worlds["video"]
    clip = write_video(out / "gridprobe" / "clip.mp4", (world.render(t, annotations=False).rgb for t in range(world.num_frames)),
                       fps=world.fps)
    try:
        _, s = run_app(get_app("ask"), {"video": str(clip), "question": rec["question"], "options": rec["options"], "progress": False},
                       out_dir=out / "gridprobe")
    except BuiltinUnavailableError as e:
        logger.warning("GridProbe demo skipped: %s", e)
        return
    evidence = longqa.evidence_frames(rec)
    gallery.add(Section(
        "GridProbe: long-video QA that chooses its own frames",
        f"{rec['question']} Options: {', '.join(rec['options'])} (truth: {rec['answer']}; the object is on screen in "
        f"frames {evidence[0]}-{evidence[-1]} of {rec['num_frames']}). Row and column probes of a 12x12 pool at half "
        f"resolution give the importance map (chosen cells outlined); the chosen frames go to the focused pass.",
        images=[s["files"]["importance_map.png"], s["files"]["selected_frames.png"]], videos=[str(clip)],
        data={"summary": format_summary(s)},
        command=f"atelier ask {clip} --question \"{rec['question']}\" --options {' '.join(rec['options'])}",
    ))


def _add_worldgen(gallery: Gallery, out: Path) -> None:
    """Two held-out samples of every worldgen task, with their annotations drawn on top."""
    from worldgen import tasks
    from worldgen.preview import write_preview
    from worldgen.tasks.base import split_seed

    for name in tasks.NAMES:
        mod = tasks.get(name)
        cfg = mod.Config()
        samples = [mod.generate(split_seed("val", 0, i), cfg) for i in range(2)]
        page = write_preview(out / "worldgen" / name, name, samples)
        sheets = sorted(page.parent.glob("*.png"))[:2]
        gallery.add(Section(
            f"worldgen: {name}",
            f"Synthetic-world task '{name}' (val split): masks, boxes and skeletons are the exact ground truth. "
            f"All samples: {page.relative_to(out)}",
            images=[str(p) for p in sheets],
            command=f"atelier worldgen {name} --n 2 --split val -o outputs/worldgen/{name} --preview",
        ))
