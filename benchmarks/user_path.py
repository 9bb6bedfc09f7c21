"""The user's path: what every method benchmark measures for its headline number.

A user hands Atelier a file, and the file went through a codec: a clip is H.264 yuv420p (colour at half
resolution), a still a PNG or JPEG. So each benchmark item is written here as the file a user would have
(``core.video.write_video`` at the CRF ``atelier worldgen`` writes, or the image file), run through the very
code behind the CLI verb (``app.runner.run_app``: the same input checks, model loading, seeding and
``output.save``), and scored from the files that call writes (masks PNGs, mp4, keypoints JSON, result.json).
Raw rendered frames handed over in memory stay a reference row beside it, never the headline
(``tests/test_user_path.py`` checks that each method benchmark goes through here).

    with UserPath() as user:                       # a temporary folder, removed on exit
        video = user.clip(frames, fps=12, name="clip_000")
        run = user.run("segment", {"video": video, "query": "the red circle"}, planner=selector, monitor=False)
        masks = run.masks()            # (T, H, W) uint8, read back from run.folder / "masks"
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CRF = 18  # what `atelier worldgen` writes (core.video.write_video's default)


@dataclass
class UserRun:
    """One verb run as the CLI runs it: the output object, its summary and the folder it was saved to."""

    output: Any
    summary: dict
    folder: Path

    def masks(self) -> np.ndarray:
        """The id maps the run wrote (``masks/``, DAVIS palette PNGs) as ``(T, H, W)`` uint8."""
        from core.masks import read_mask_folder

        return read_mask_folder(self.folder / "masks")

    def result(self) -> dict:
        """The run's ``result.json``."""
        return json.loads((self.folder / "result.json").read_text())


class UserPath:
    """A temporary folder of user files and the runs on them, removed on close (``with``)."""

    def __init__(self, crf: int = CRF, seed: int = 0):
        self.root = Path(tempfile.mkdtemp(prefix="atelier-userpath-"))
        self.crf, self.seed = crf, seed
        self._runs = itertools.count()

    def clip(self, frames: np.ndarray, fps: float, name: str = "clip") -> str:
        """``frames`` (T, H, W, 3) uint8 as the H.264 yuv420p mp4 a user would have; its path."""
        from core.video import write_video

        return str(write_video(self.root / f"{name}.mp4", frames, fps=fps, crf=self.crf))

    def still(self, image: np.ndarray, name: str = "image", suffix: str = ".png", quality: int = 90) -> str:
        """``image`` (H, W, 3) uint8 as the PNG (or JPEG at ``quality``) a user would have; its path."""
        from PIL import Image

        from core.atomic import atomic_path

        path = self.root / f"{name}{suffix}"
        with atomic_path(path) as tmp:
            Image.fromarray(np.asarray(image)).save(tmp, format="JPEG" if suffix.lower() in (".jpg", ".jpeg") else "PNG",
                                                    **({"quality": quality} if suffix.lower() in (".jpg", ".jpeg") else {}))
        return str(path)

    def run(self, verb: str, inputs: dict[str, Any], seed: int | None = None, **arguments: Any) -> UserRun:
        """``atelier <verb>`` on ``inputs`` (paths from ``clip`` / ``still``) with ``arguments`` (settings by their
        config names, components by slot: an instance, folder or 'builtin'), saved to a new folder under the root."""
        from app.runner import run_app
        from pipelines.registry import get_app

        folder = self.root / f"run_{next(self._runs):05d}_{verb}"
        args = {**inputs, **arguments, "seed": self.seed if seed is None else seed, "progress": False}
        output, summary = run_app(get_app(verb), args, out_dir=folder)
        return UserRun(output, summary, folder)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)  # the mkdtemp folder this object made, with only its own files

    def __enter__(self) -> UserPath:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["CRF", "UserPath", "UserRun"]
