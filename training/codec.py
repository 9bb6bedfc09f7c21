"""The user's path as training augmentation: frames and stills through the files a user hands over.

A user's clip went through H.264 yuv420p (a quarter of the colour resolution, blocky quantisation) and a
still through JPEG; the builtin models were trained on worldgen's raw frames. These helpers write what the
CLI writes (``core.video.write_video``; Pillow's JPEG) and read it back with the CLI's own loader
(``core.video.Video`` with plain chroma), in a scratch folder removed afterwards.

    frames_as_file = through_h264(frames, crf=23)       # (T, H, W, 3) uint8 in, the decoded frames out
    still_as_file = through_jpeg(image, quality=85)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from core.video import Video, write_video

# What `atelier worldgen` writes (CRF 18) up to a low-quality upload; JPEG at a phone's to a web page's quality.
CRF_RANGE = (18, 30)
JPEG_QUALITY_RANGE = (70, 95)


def through_h264(frames: np.ndarray, crf: int, fps: float = 8.0) -> np.ndarray:
    """``frames`` ``(T, H, W, 3)`` uint8 written as H.264 yuv420p at ``crf`` and decoded as `atelier` decodes a file."""
    with tempfile.TemporaryDirectory(prefix="atelier-codec-") as scratch:
        path = write_video(Path(scratch) / "clip.mp4", frames, fps=fps, crf=int(crf))
        with Video(path, chroma="plain") as video:
            out = np.asarray(video.get_frames(range(len(video))))
    h, w = frames.shape[1:3]
    return out[:, :h, :w]  # write_video pads an odd side by one pixel


def through_jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    """``image`` ``(H, W, 3)`` uint8 saved as a 4:2:0 JPEG at ``quality`` and read back with the CLI's loader."""
    from PIL import Image

    with tempfile.TemporaryDirectory(prefix="atelier-codec-") as scratch:
        path = Path(scratch) / "still.jpg"
        Image.fromarray(image).save(path, quality=int(quality), subsampling=2)
        with Video(path, chroma="plain") as video:
            return np.asarray(video.get_frames([0]))[0]
