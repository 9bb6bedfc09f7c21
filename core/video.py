"""Video: one reader for files, frame folders, single images and arrays, with real seeking.

A ``Video`` never holds more frames than the caller asked for: random access decodes from the
nearest keyframe, uniform sampling seeks, and streaming walks forward window by window.

File backends: PyAV everywhere (``backend="pyav"``), decord where it installs (``"decord"``).
``"auto"`` picks PyAV, whose packet index gives exact frame counts and keyframe-aware seeks;
both return the same frames within codec rounding (tests compare them on a real H.264 clip).
"""

from __future__ import annotations

import bisect
import logging
import re
from contextlib import contextmanager
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.atomic import atomic_path
from core.chroma import check_mode, restore_chroma, subsampled
from core.errors import (
    EmptyVideoError,
    FrameIndexError,
    InputError,
    MissingDependencyError,
    VideoDecodeError,
    VideoOpenError,
)
from core.frames import resize_frame
from core.memory import check_allocation

logger = logging.getLogger(__name__)

VIDEO_SUFFIXES = {".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff"}
MAX_SIDE = 16384  # larger than any real video; catches swapped or garbage sizes early
MAX_ASPECT = 16  # wider than any panorama a user hands over (32:9 is 3.6); 1 x 200000 is garbage
BACKENDS = ("auto", "pyav", "decord")


@dataclass(frozen=True)
class VideoInfo:
    """Metadata of an opened video. ``height``/``width`` are the decoded size (after resize)."""

    source: str
    backend: str
    num_frames: int
    fps: float
    height: int
    width: int
    codec: str | None = None

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return self.num_frames / self.fps if self.fps > 0 else 0.0

    def __repr__(self) -> str:  # the duration is a property, so the dataclass repr would leave it out
        return (f"VideoInfo(source={self.source!r}, frames={self.num_frames}, fps={self.fps:.3f}, size={self.height}x{self.width}, "
                f"duration={self.duration:.2f}s, codec={self.codec!r}, backend={self.backend!r})")


class Video:
    """A random-access, streamable video.

    Args:
        source: a video file (mp4/avi/mkv/webm/mov), a folder of frame images (natural sort order),
            a single image, or a ``uint8`` array ``(T, H, W, 3)`` / ``(H, W, 3)``.
        height, width: decode to this size. Give one to keep the aspect ratio.
        backend: ``"auto"``, ``"pyav"`` or ``"decord"`` for files; ignored for frames and arrays.
        fps: frame rate for folders, images and arrays (files carry their own), default 30.
        chroma: how a file's subsampled colour (yuv420p video, 4:2:0 JPEG) is brought to full size:
            ``"plain"`` as the decoder does (bilinear), ``"guided"`` along the luma's edges
            (``core.chroma``: a small object keeps its colour instead of sharing it with its
            neighbours), ``"auto"`` (the default) decodes plain and lets a pipeline ask for guided
            (``with_chroma``). Arrays and 4:4:4 files are never changed.

    Example:
        >>> v = Video("clip.mp4", height=224)
        >>> v.info.num_frames, v.fps
        >>> frames = v.sample(16)                  # (16, 224, W, 3), seeks, decodes ~16 GOP tails
        >>> for start, chunk in v.windows(64):     # bounded memory over a long video
        ...     ...
    """

    def __init__(
        self,
        source: str | Path | np.ndarray,
        *,
        height: int | None = None,
        width: int | None = None,
        backend: str = "auto",
        fps: float | None = None,
        chroma: str = "auto",
    ):
        self.chroma = check_mode(chroma)
        self._args = {"source": source, "height": height, "width": width, "backend": backend, "fps": fps}
        for name, val in (("height", height), ("width", width)):
            if val is not None and (not isinstance(val, (int, np.integer)) or not 0 < val <= MAX_SIDE):
                raise InputError(name, val, f"use a positive integer of at most {MAX_SIDE}, or None to keep the size")
        if fps is not None and not (isinstance(fps, (int, float)) and 0 < fps <= 1000):
            raise InputError("fps", fps, "use a frame rate in (0, 1000]")
        if backend not in BACKENDS:
            raise InputError("backend", backend, f"choose one of {BACKENDS}")
        self._reader = _open_reader(source, backend, fps or 30.0)
        n = self._reader.num_frames
        if n <= 0:
            self._reader.close()
            raise EmptyVideoError(self._reader.source, "the video has no frames", "re-encode or re-export it")
        src_h, src_w = self._reader.src_size
        try:
            check_frame_size(self._reader.source, src_h, src_w)
        except VideoOpenError:
            self._reader.close()
            raise
        self._out_size = _target_size(src_h, src_w, height, width)
        # guided only where the output keeps more detail than the stored colour: above half the source's size
        self._guided = (chroma == "guided" and self._reader.subsampled and 2 * self._out_size[0] > src_h
                        and 2 * self._out_size[1] > src_w)
        self.info = VideoInfo(
            source=self._reader.source,
            backend=self._reader.name,
            num_frames=n,
            fps=float(self._reader.fps),
            height=self._out_size[0],
            width=self._out_size[1],
            codec=self._reader.codec,
        )

    # ---- metadata
    def __len__(self) -> int:
        return self.info.num_frames

    @property
    def fps(self) -> float:
        return self.info.fps

    @property
    def duration(self) -> float:
        return self.info.duration

    @property
    def size(self) -> tuple[int, int]:
        """Decoded ``(height, width)``."""
        return self._out_size

    def __repr__(self) -> str:
        i = self.info
        return f"Video({i.source!r}, frames={i.num_frames}, fps={i.fps:.3f}, size={i.height}x{i.width}, backend={i.backend})"

    def reopen(self, **changes) -> Video:
        """The same source opened again, at this size and with this chroma unless ``changes`` say otherwise
        (any of ``Video``'s keyword arguments)."""
        return Video(**{**self._args, "height": self.size[0], "width": self.size[1], "chroma": self.chroma, **changes})

    # ---- random access
    def __getitem__(self, key: int | slice) -> np.ndarray:
        if isinstance(key, slice):
            return self.get_frames(range(*key.indices(len(self))))
        return self.get_frames([key])[0]

    def get_frames(self, indices: Iterable[int]) -> np.ndarray:
        """Frames at ``indices`` (any order, repeats allowed) as ``(N, H, W, 3)`` uint8."""
        idx = [self._check_index(i) for i in indices]
        if not idx:
            return np.zeros((0, *self._out_size, 3), np.uint8)
        h, w = self._out_size
        check_allocation("frames", f"{len(idx)} frames of {w}x{h}", len(idx) * h * w * 3, "ask for fewer frames or a smaller size")
        wanted = sorted(set(idx))
        frames = self._reader.read(wanted, self._out_size)
        if self._guided:
            frames = restore_chroma(frames)
        if wanted == idx:  # the common case (sorted, no repeats): no extra copy
            return frames
        return frames[np.searchsorted(wanted, idx)]

    def sample_indices(self, n: int) -> list[int]:
        """``n`` uniformly spaced indices: the centre frame of each of ``n`` equal segments."""
        if not isinstance(n, (int, np.integer)) or n <= 0:
            raise InputError("n", n, "ask for at least one frame")
        if n > len(self):
            logger.warning("asked for %d frames from a %d-frame video: some frames repeat", n, len(self))
        return [int(x) for x in ((np.arange(n) + 0.5) * len(self) / n).astype(np.int64)]

    def sample(self, n: int) -> np.ndarray:
        """``n`` uniformly sampled frames ``(n, H, W, 3)``; decodes only around those frames."""
        if isinstance(n, (int, np.integer)) and n > 0:
            h, w = self._out_size
            check_allocation("n", n, int(n) * h * w * 3, f"ask for fewer frames (each is {w}x{h})")
        return self.get_frames(self.sample_indices(n))

    # ---- streaming
    def windows(
        self, window: int, stride: int | None = None, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first_index, frames)`` chunks of up to ``window`` frames, ``stride`` apart.

        Consecutive windows decode forward without seeking; at most one window is in memory.
        """
        if not isinstance(window, (int, np.integer)) or window <= 0:
            raise InputError("window", window, "use a positive number of frames")
        stride = window if stride is None else stride
        if not isinstance(stride, (int, np.integer)) or stride <= 0:
            raise InputError("stride", stride, "use a positive number of frames")
        stop = len(self) if stop is None else min(stop, len(self))
        for s in range(self._check_index(start) if start else 0, stop, stride):
            yield s, self.get_frames(range(s, min(s + window, stop)))

    def __iter__(self) -> Iterator[np.ndarray]:
        """Every frame in order, one ``(H, W, 3)`` array at a time."""
        frames = self._reader.iter_frames(0, len(self), self._out_size)
        return (restore_chroma(f) for f in frames) if self._guided else frames

    # ---- lifecycle
    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> Video:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_index(self, i: int) -> int:
        n = len(self)
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise InputError("index", i, "frame indices are integers")
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise FrameIndexError(self.info.source, int(i), n)
        return j


def with_chroma(video: Video, chroma: str) -> Video:
    """``video`` decoding its colour as ``chroma`` asks: the same object when it already does, or when the
    user chose its mode (anything but ``"auto"``); else the same source opened again at the same size."""
    check_mode(chroma)
    if video.chroma != "auto" or chroma == "auto":
        return video
    return video.reopen(chroma=chroma)


@contextmanager
def reading(source: str | Path | np.ndarray | Video, **kwargs) -> Iterator[Video]:
    """``with reading(x) as v``: a ``Video`` of a path or array (``kwargs`` to ``Video``), closed afterwards, or the
    caller's own ``Video`` as it is, left open for the caller."""
    if isinstance(source, Video):
        yield source
        return
    with Video(source, **kwargs) as video:
        yield video


def open_video(source: str | Path | np.ndarray | Video, **kwargs) -> Video:
    """``Video(source, **kwargs)``, passing an already-open ``Video`` through unchanged."""
    return source if isinstance(source, Video) else Video(source, **kwargs)


# --------------------------------------------------------------------------- readers


def read_still(image, max_pixels: int | None = None) -> np.ndarray:
    """One RGB uint8 ``(H, W, 3)`` picture from an array (checked, returned as is) or a path: an image, or a
    video's middle frame. ``max_pixels`` refuses a larger picture before it is decoded; the decode itself is
    bounded by the memory budget."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
            raise InputError("image", getattr(image, "shape", image), "pass an RGB uint8 (H, W, 3) image or an image / video path")
        return image
    if not isinstance(image, (str, Path)):
        raise InputError("image", type(image).__name__, "pass an image path, a video path (its middle frame is used) or an RGB array")
    with Video(image) as v:
        size = f"{v.info.width}x{v.info.height}"
        if max_pixels is not None and v.info.width * v.info.height > max_pixels:
            raise InputError("image", size, f"pictures up to {max_pixels / 1e6:.0f} megapixels are read; shrink it first")
        check_allocation("image", size, v.info.height * v.info.width * 3 * 4, "pass a smaller image")
        return np.asarray(v.get_frames([len(v) // 2]))[0]


def _target_size(h: int, w: int, height: int | None, width: int | None) -> tuple[int, int]:
    if height is None and width is None:
        return h, w
    if height is None:
        return max(1, round(h * width / w)), int(width)
    if width is None:
        return int(height), max(1, round(w * height / h))
    return int(height), int(width)


def _resize(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return frame if frame.shape[:2] == size else resize_frame(frame, size)


def _natural_key(p: Path) -> list:
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", p.name)]


def _open_reader(source, backend: str, fps: float) -> _Reader:
    if isinstance(source, np.ndarray):
        return _ArrayReader(source, fps)
    if not isinstance(source, (str, Path)):
        raise InputError("source", type(source).__name__, "pass a path, a folder of frames or a uint8 array")
    path = Path(source)
    if not path.exists():
        raise VideoOpenError(path, "no such file or folder", "check the path")
    check_regular(path)
    if path.is_dir():
        frames = sorted((p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES), key=_natural_key)
        if not frames:
            raise EmptyVideoError(path, "the folder holds no frame images", f"expected files ending in {sorted(IMAGE_SUFFIXES)}")
        return _ImageFilesReader(path, frames, fps)
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return _ImageFilesReader(path, [path], fps)
    if backend == "decord":
        return _DecordReader(path)
    return _PyAVReader(path)


def check_regular(path: Path) -> None:
    """A media input is a regular file or a folder: a FIFO, a socket or a device (``/dev/zero``) is refused before it is
    opened, since reading one blocks or never ends."""
    import stat

    mode = path.stat().st_mode  # follows a link to what it names; stat() itself never blocks on a FIFO
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise VideoOpenError(path, f"it is {kind}, which is read without end", "pass a video or image file, or a folder of frames")


def check_frame_size(source: str, height: int, width: int) -> None:
    """Every side at most ``MAX_SIDE`` and the long side at most ``MAX_ASPECT`` times the short one: a 1 x 200000 picture
    passes the pixel budget and then fails every encoder and viewer."""
    if min(height, width) < 1 or max(height, width) > MAX_SIDE or max(height, width) > MAX_ASPECT * min(height, width):
        raise VideoOpenError(source, f"its frames are {width}x{height}; atelier reads sides up to {MAX_SIDE} pixels and aspect ratios "
                                     f"up to {MAX_ASPECT}:1", "crop or resize it first")


class _Reader:
    name: str
    source: str
    num_frames: int
    fps: float
    src_size: tuple[int, int]
    codec: str | None = None
    subsampled: bool = False  # colour stored below the luma's resolution (core.chroma)

    def read(self, indices: Sequence[int], size: tuple[int, int]) -> np.ndarray:
        """Frames at sorted, unique, in-range ``indices``, resized to ``size``, as ``(N, H, W, 3)``."""
        raise NotImplementedError

    def iter_frames(self, start: int, stop: int, size: tuple[int, int]) -> Iterator[np.ndarray]:
        """Frames ``start..stop-1`` one by one; readers that decode per frame avoid a batch copy."""
        for s in range(start, stop, 32):
            yield from self.read(range(s, min(s + 32, stop)), size)

    def close(self) -> None:
        pass


class _ArrayReader(_Reader):
    name = "array"

    def __init__(self, arr: np.ndarray, fps: float):
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4 or arr.shape[-1] != 3:
            raise InputError("source", f"array of shape {arr.shape}", "frames are (T, H, W, 3) or (H, W, 3) RGB")
        if arr.dtype != np.uint8:
            raise InputError("source", f"array of dtype {arr.dtype}", "frames are uint8; use (x * 255).round().astype(np.uint8)")
        self.arr, self.fps, self.source = arr, fps, f"<array {tuple(arr.shape)}>"
        self.num_frames, self.src_size = arr.shape[0], arr.shape[1:3]

    def read(self, indices, size):
        if tuple(self.src_size) == tuple(size):
            return self.arr[list(indices)]
        return np.stack([_resize(self.arr[i], size) for i in indices])


class _ImageFilesReader(_Reader):
    name = "images"

    def __init__(self, source: Path, files: list[Path], fps: float):
        self.source, self.files, self.fps, self.num_frames = str(source), files, fps, len(files)
        self._check_decode_memory(files[0])
        first = self._load(0)  # decoded here, so a broken picture fails at open
        self.src_size = first.shape[:2]
        self.subsampled = _jpeg_subsampled(files[0])
        # the last frame decoded, keyed by (index, size): a still sampled again and again (a picture handed to a video
        # pipeline, read on every probe) is decoded once, not once a read (a 12000 x 12000 PNG took 352 s in `ask`)
        self._last: tuple[tuple[int, tuple[int, int] | None], np.ndarray] = ((0, None), first)

    @staticmethod
    def _check_decode_memory(path: Path) -> None:
        """Refuse, from the header alone, an image whose decode would not fit in memory (decoding a 13000 x 13000
        PNG to RGB peaked at 1.8 GB, about 11 bytes a pixel: the file's image, its RGB copy and the array)."""
        from PIL import UnidentifiedImageError

        from core.images import open_image

        try:
            with open_image(path) as im:
                width, height = im.size
        except (UnidentifiedImageError, OSError):
            return  # _load says what is wrong with the file
        check_allocation(str(path), f"{width}x{height} pixels", width * height * 11, "downscale the image first")

    def _load(self, i: int, size: tuple[int, int] | None = None) -> np.ndarray:
        """Frame ``i`` at its stored size (its size is checked against the first frame's), or resized to ``size``. A JPEG
        much larger than ``size`` is decoded at a reduced scale (PIL's ``draft``: 1/2 to 1/8, in the decoder), so a
        large photo never costs its full-size decode."""
        from PIL import UnidentifiedImageError

        from core.images import open_image, unreadable

        try:
            with open_image(self.files[i]) as im:  # refuses an image over the pixel budget before decoding it
                stored = im.size[::-1]
                if i and stored != tuple(self.src_size):
                    raise VideoDecodeError(self.files[i], f"frame size {stored} differs from the first frame's {tuple(self.src_size)}")
                if size is not None and im.format == "JPEG":
                    im.draft("RGB", (size[1], size[0]))  # the smallest scale still at least ``size``
                frame = np.asarray(im.convert("RGB"))
        except ValueError as e:  # PIL stops a text chunk that inflates past its limit
            raise VideoDecodeError(self.files[i], str(unreadable(self.files[i], e))) from None
        except (UnidentifiedImageError, OSError) as e:
            raise VideoDecodeError(self.files[i], f"cannot read frame image: {e}") from None
        return frame if size is None else _resize(frame, size)

    def _frame(self, i: int, size: tuple[int, int]) -> np.ndarray:
        (last, last_size), frame = self._last
        if last == i and last_size in (size, None):
            frame = frame if last_size == size else _resize(frame, size)
        else:
            frame = self._load(i, size)
        self._last = ((i, size), frame)  # the full-size first frame is dropped once a size is asked for
        return frame

    def read(self, indices, size):
        return np.stack([self._frame(i, size) for i in indices])


def _jpeg_subsampled(path: Path) -> bool:
    """Whether a frame image is a JPEG with subsampled colour (4:2:0 or 4:2:2, PIL's sampling 2 or 1)."""
    from PIL import JpegImagePlugin, UnidentifiedImageError

    from core.images import open_image

    try:
        with open_image(path) as im:
            return im.format == "JPEG" and JpegImagePlugin.get_sampling(im) in (1, 2)
    except (UnidentifiedImageError, OSError):
        return False


def _stream_subsampled(path: Path) -> bool:
    """Whether a file's first video stream subsamples colour, read from its header by PyAV (decord does not say)."""
    import av

    try:
        with av.open(str(path)) as container:
            return bool(container.streams.video) and subsampled(container.streams.video[0].codec_context.pix_fmt)
    except (av.FFmpegError, UnicodeDecodeError):
        return False


class _PyAVReader(_Reader):
    """PyAV with a packet index (built by demuxing, no decoding) for exact counts and keyframe seeks."""

    name = "pyav"

    def __init__(self, path: Path):
        import av

        self.source = str(path)
        try:
            self.container = av.open(str(path))
        except (av.FFmpegError, UnicodeDecodeError) as e:
            why = getattr(e, "strerror", None) or str(e)  # PyAV's message without its errno and the path again
            raise VideoOpenError(path, f"not a readable video ({why})", "is the file complete and really a video?") from None
        if not self.container.streams.video:
            self.container.close()
            raise EmptyVideoError(path, "the file holds no video stream (zero frames, or cut short?)", "re-encode or re-export it")
        self.stream = self.container.streams.video[0]
        self.stream.thread_type = "AUTO"
        self.codec = self.stream.codec_context.name
        self.subsampled = subsampled(self.stream.codec_context.pix_fmt)
        pts = []
        keys = []
        try:
            for packet in self.container.demux(self.stream):
                if packet.pts is None or packet.size == 0:
                    continue
                pts.append(packet.pts)
                if packet.is_keyframe:
                    keys.append(packet.pts)
        except av.FFmpegError as e:
            self.container.close()
            raise VideoOpenError(path, f"the container is corrupt ({e})", "re-encode or re-download the file") from None
        self.pts = sorted(pts)
        self.keyframes = sorted(keys) or self.pts[:1]
        self.num_frames = len(self.pts)
        rate = self.stream.average_rate or self.stream.guessed_rate
        self.fps = float(rate) if rate else 30.0
        self.src_size = (self.stream.codec_context.height, self.stream.codec_context.width)
        from av.video.reformatter import VideoReformatter

        self._reformatter = VideoReformatter()
        self._frames: Iterator | None = None  # live decode iterator
        self._last_pts: int | None = None  # pts of the frame it produced last

    def _seek(self, target_pts: int) -> None:
        k = self.keyframes[max(0, bisect.bisect_right(self.keyframes, target_pts) - 1)]
        self.container.seek(k, stream=self.stream, backward=True, any_frame=False)
        self._frames, self._last_pts = self.container.decode(self.stream), None

    def _needs_seek(self, target_pts: int) -> bool:
        if self._frames is None or self._last_pts is None or target_pts <= self._last_pts:
            return True
        # a keyframe between where we are and the target: jumping there beats decoding up to it
        k = self.keyframes[max(0, bisect.bisect_right(self.keyframes, target_pts) - 1)]
        return k > self._last_pts

    def _frame_at(self, i: int):
        """The decoded ``av.VideoFrame`` with index ``i``: decode forward, or seek first if cheaper."""
        import av

        target = self.pts[i]
        if self._needs_seek(target):
            self._seek(target)
        try:
            for frame in self._frames:
                if frame.pts is None:
                    continue
                self._last_pts = frame.pts
                if frame.pts >= target:
                    return frame
        except av.FFmpegError as e:
            self._frames = None
            raise VideoDecodeError(self.source, f"frame {i} could not be decoded ({e})", "the file may be truncated or corrupt") from None
        self._frames = None
        raise VideoDecodeError(self.source, f"frame {i} could not be decoded (stream ended early)", "the file may be truncated")

    def _rgb(self, frame, size) -> np.ndarray:
        # one reusable reformatter: PyAV builds a new swscale context per frame otherwise (2x slower)
        return self._reformatter.reformat(frame, width=size[1], height=size[0], format="rgb24").to_ndarray()

    def read(self, indices, size):
        out = np.empty((len(indices), size[0], size[1], 3), np.uint8)
        for k, i in enumerate(indices):
            out[k] = self._rgb(self._frame_at(i), size)
        return out

    def iter_frames(self, start, stop, size):
        for i in range(start, stop):
            yield self._rgb(self._frame_at(i), size)

    def close(self):
        self.container.close()


class _DecordReader(_Reader):
    name = "decord"

    def __init__(self, path: Path):
        try:
            import decord
        except ImportError:
            raise MissingDependencyError("decord", "decord", "decode with backend='decord' (x86-64 only)") from None
        self.source = str(path)
        self._decord = decord
        self._vr_cache: dict[tuple[int, int], object] = {}
        try:
            vr = decord.VideoReader(str(path), ctx=decord.cpu(0))
        except (decord.DECORDError, RuntimeError) as e:
            raise VideoOpenError(path, f"not a readable video (decord: {str(e).splitlines()[0]})", "is the file complete and really a video?") from None
        self.num_frames = len(vr)
        self.fps = float(vr.get_avg_fps()) or 30.0
        h, w = vr[0].shape[:2] if self.num_frames else (0, 0)
        vr.seek(0)
        self.src_size = (h, w)
        self._vr_cache[self.src_size] = vr
        self.subsampled = _stream_subsampled(path)

    def _reader_for(self, size):
        if size not in self._vr_cache:
            self._vr_cache.clear()  # one open decoder at a time
            self._vr_cache[size] = self._decord.VideoReader(self.source, ctx=self._decord.cpu(0), height=size[0], width=size[1])
        return self._vr_cache[size]

    def read(self, indices, size):
        try:
            batch = self._reader_for(tuple(size)).get_batch(list(indices)).asnumpy()
        except (self._decord.DECORDError, RuntimeError) as e:
            raise VideoDecodeError(self.source, f"frames could not be decoded ({str(e).splitlines()[0]})", "the file may be truncated or corrupt") from None
        return batch

    def close(self):
        self._vr_cache.clear()


# --------------------------------------------------------------------------- writing

_CONTAINERS = {".mp4": "mp4", ".mov": "mov", ".mkv": "matroska", ".m4v": "mp4"}


VIEW_SIDE = 256  # the shortest side a written clip is enlarged to (nearest, by a whole factor)


def viewable(frames: np.ndarray) -> np.ndarray:
    """``frames`` ``(T, H, W, 3)`` enlarged by the whole factor (nearest: each pixel a k x k block) that brings the short
    side to at least ``VIEW_SIDE``; unchanged when it already is. A 64x64 clip is a speck in a player, and H.264's
    yuv420p keeps one colour per 2x2 pixels (resampled across a few more), so at 64x64 a 3-pixel red object on blue reads
    back purple; at 4x each stored colour block lies inside one original pixel and it stays red (docs/history/user_path.md).
    ``Video(path, height=H, width=W)`` reads it back at the original size (area averaging of each block)."""
    h, w = frames.shape[1:3]
    k = -(-VIEW_SIDE // min(h, w)) if min(h, w) < VIEW_SIDE else 1
    return frames if k == 1 else np.repeat(np.repeat(frames, k, axis=1), k, axis=2)


def write_video(
    path: str | Path,
    frames: np.ndarray | Iterable[np.ndarray],
    fps: float = 30.0,
    *,
    crf: int = 18,
    keyframe_interval: int | None = None,
) -> Path:
    """Write RGB uint8 frames as H.264 yuv420p (plays in browsers), atomically.

    ``frames`` may be an array ``(T, H, W, 3)`` or any iterable of ``(H, W, 3)`` frames, so long
    videos stream to disk. Odd sizes are padded by one pixel (yuv420p needs even sides), with a
    warning. If anything fails, no file is left at ``path``. The same frames give the same bytes in
    every process: x264's macroblock-tree rate control is off, because with it the bundled libx264
    encodes identical frames differently after an earlier encode in the same process (measured: 60
    processes that each wrote a different noise clip first wrote the same 48 frames as 6 distinct
    files; with ``mbtree=0``, as one), which broke worldgen's byte-identical exports.
    """
    import av

    path = Path(path)
    fmt = _CONTAINERS.get(path.suffix.lower())
    if fmt is None:
        raise InputError("path", str(path), f"H.264 output needs one of the suffixes {sorted(_CONTAINERS)}")
    if not (isinstance(fps, (int, float)) and 0 < fps <= 1000):
        raise InputError("fps", fps, "use a frame rate in (0, 1000]")
    count = 0
    with atomic_path(path) as tmp:
        with av.open(str(tmp), "w", format=fmt, options={"movflags": "+faststart"} if fmt in ("mp4", "mov") else {}) as out:
            stream = None
            for frame in frames:
                frame = np.asarray(frame)
                if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
                    raise InputError(f"frames[{count}]", f"array {frame.shape} {frame.dtype}", "frames are (H, W, 3) uint8 RGB")
                if stream is None:
                    h, w = frame.shape[:2]
                    eh, ew = h + h % 2, w + w % 2
                    if (eh, ew) != (h, w):
                        logger.warning("padding %dx%d frames to %dx%d for yuv420p", h, w, eh, ew)
                    stream = out.add_stream("libx264", rate=_fps_fraction(fps))
                    stream.width, stream.height, stream.pix_fmt = ew, eh, "yuv420p"
                    stream.options = {"crf": str(crf), "x264-params": "mbtree=0"}
                    if keyframe_interval:
                        stream.codec_context.gop_size = int(keyframe_interval)
                        stream.options["keyint"] = str(int(keyframe_interval))
                if frame.shape[:2] != (h, w):
                    raise InputError(f"frames[{count}]", f"size {frame.shape[:2]}", f"every frame must match the first one's size {(h, w)}")
                if (eh, ew) != (h, w):
                    frame = np.pad(frame, ((0, eh - h), (0, ew - w), (0, 0)), mode="edge")
                out.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")))
                count += 1
            if stream is None:
                raise InputError("frames", "no frames", "a video needs at least one frame")
            out.mux(stream.encode(None))
    return path


def _fps_fraction(fps: float):
    from fractions import Fraction

    return Fraction(fps).limit_denominator(1001)
