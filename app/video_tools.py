"""Video utilities behind `atelier video probe|sample|overlay`, the batch runner and the web tab.

Each tool takes plain arguments, writes its files atomically under ``out_dir`` and returns a
JSON-safe dict describing what it did.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from core.atomic import atomic_path
from core.errors import InputError
from core.frames import resize_frames
from core.masks import read_mask_folder
from core.memory import check_allocation
from core.overlay import contact_sheet, draw_caption, draw_masks
from core.outputs import check_file, check_folder, publish_file, publish_folder
from core.paths import check_output_dir, check_output_file
from core.video import Video, write_video


def probe(video: str | Path) -> dict:
    """Metadata of a video: frames, fps, size, duration, codec, decoder and file size."""
    with Video(video) as v:
        i = v.info
        return {
            "source": i.source,
            "num_frames": i.num_frames,
            "fps": round(i.fps, 4),
            "height": i.height,
            "width": i.width,
            "duration": round(i.duration, 4),
            "codec": i.codec,
            "backend": i.backend,
            "bytes": os.path.getsize(video) if Path(video).is_file() else None,
        }


SAMPLE_CLAIMS = ("frame_*.png", "contact_sheet.png")


def sample(video: str | Path, out_dir: str | Path, n: int = 8, height: int | None = None, columns: int = 4,
           overwrite: bool = False) -> dict:
    """Save ``n`` uniformly sampled frames as PNGs plus a labelled contact sheet (a file of those names
    that atelier did not write is replaced only with ``overwrite``)."""
    from PIL import Image

    from core.values import parse_bool

    overwrite = parse_bool("overwrite", overwrite)  # a manifest's "false" is truthy: never let it replace files

    out_dir = check_output_dir(out_dir)
    check_folder(out_dir, SAMPLE_CLAIMS, "--out", overwrite)
    with Video(video, height=height) as v:
        h, w = v.size
        if isinstance(n, int) and n > 0:  # PNGs of every frame plus the contact sheet hold them all at once
            check_allocation("n", n, 2 * n * h * w * 3, f"ask for fewer frames (each is {w}x{h}), or pass --height")
        idx = v.sample_indices(n)
        frames = v.get_frames(idx)
        fps = v.fps
    names = [f"frame_{i:06d}.png" for i in idx]
    with publish_folder(out_dir, SAMPLE_CLAIMS, "--out", overwrite) as stage:
        for name, frame in zip(names, frames):
            _save_png(stage / name, frame, Image)
        labels = [f"#{i}  {i / fps:.2f}s" for i in idx]
        _save_png(stage / "contact_sheet.png", contact_sheet(frames, columns, labels), Image)
    return {"indices": idx, "times": [round(i / fps, 4) for i in idx], "frames": [str(out_dir / n) for n in names],
            "contact_sheet": str(out_dir / "contact_sheet.png")}


def overlay(
    video: str | Path,
    out: str | Path,
    masks: str | Path | None = None,
    motion: bool = False,
    caption: str | None = None,
    alpha: float = 0.5,
    height: int | None = None,
    overwrite: bool = False,
) -> dict:
    """Write ``out`` (mp4): the video with masks from a DAVIS folder or from motion, and a caption.

    Streams window by window, so memory stays bounded for long videos. An existing ``out`` that
    atelier did not write is replaced only with ``overwrite``.
    """
    from core.values import parse_bool

    # a manifest's "false" is truthy: read both strictly
    motion, overwrite = parse_bool("motion", motion), parse_bool("overwrite", overwrite)
    if masks is not None and motion:
        raise InputError("motion", motion, "choose either --masks or --motion, not both")
    if not 0 <= alpha <= 1:
        raise InputError("alpha", alpha, "use a value in [0, 1]")
    out = check_output_file(out, suffixes=(".mp4",))
    if Path(video).resolve() == out.resolve():
        raise InputError("--out", str(out), "is the input video; choose another file name")
    check_file(out, "--out", overwrite)
    v = Video(video, height=height)
    id_maps = None
    if masks is not None:
        id_maps = read_mask_folder(masks)
        if len(id_maps) != len(v):
            raise InputError("masks", str(masks), f"the folder holds {len(id_maps)} masks for {len(v)} frames")
    stats = {"foreground_fraction": []}

    def frames() -> Iterator[np.ndarray]:
        subtractor = _motion_segmenter() if motion else None
        for start, chunk in v.windows(32):
            if id_maps is not None:
                chunk = draw_masks(chunk, _fit(id_maps[start : start + len(chunk)], chunk.shape[1:3]), alpha)
            elif subtractor is not None:
                maps = np.stack([subtractor(f) for f in chunk])
                stats["foreground_fraction"].append(float((maps > 0).mean()))
                chunk = draw_masks(chunk, maps, alpha)
            if caption:
                chunk = draw_caption(chunk, caption)
            yield from chunk

    try:
        with publish_file(out, "--out", overwrite) as tmp:
            write_video(tmp, frames(), fps=v.fps)
    finally:
        v.close()
    result = {"output": str(out), "num_frames": len(v), "fps": round(v.fps, 4)}
    if motion:
        result["mean_foreground_fraction"] = round(float(np.mean(stats["foreground_fraction"] or [0])), 4)
    return result


def _motion_segmenter():
    """OpenCV MOG2 background subtraction, cleaned with a morphological opening; returns id maps."""
    import cv2

    mog = cv2.createBackgroundSubtractorMOG2(history=50, varThreshold=25, detectShadows=False)
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (5, 5))

    started = False

    def segment(frame: np.ndarray) -> np.ndarray:
        nonlocal started
        if not started:  # the first frame is the background: MOG2 would call all of it foreground (a tinted poster frame)
            started = True
            mog.apply(frame, learningRate=1.0)
            return np.zeros(frame.shape[:2], np.uint8)
        fg = mog.apply(frame)
        fg = cv2.morphologyEx(fg, cv2.MORPH_OPEN, kernel)
        return (fg > 0).astype(np.uint8)

    return segment


def _fit(maps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return resize_frames(maps, size, "nearest")  # ids are labels: never blend them


def _save_png(path: Path, image: np.ndarray, Image) -> str:
    with atomic_path(path) as tmp:
        Image.fromarray(image).save(tmp, format="PNG")
    return str(path)
