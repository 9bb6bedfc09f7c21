"""Deterministic test doubles for GridProbe: frames that carry their index, an oracle VLM, a counting source.

A frame's id is written into every pixel (R = id % 256, G = id // 256), so it survives the
INTER_AREA resizes of the probes and the focused pass, and the fake VLM can tell which source
frames it was shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def id_frames(n: int, size: tuple[int, int] = (8, 12)) -> np.ndarray:
    """``(n, H, W, 3)`` uint8 frames; frame i is uniformly coloured with its id."""
    frames = np.zeros((n, *size, 3), np.uint8)
    ids = np.arange(n)
    frames[..., 0] = (ids % 256)[:, None, None]
    frames[..., 1] = (ids // 256)[:, None, None]
    return frames


def frame_ids(frames: np.ndarray) -> list[int]:
    f = np.asarray(frames)
    if f.ndim == 3:
        f = f[None]
    return [int(x[0, 0, 0]) + 256 * int(x[0, 0, 1]) for x in f]


Rule = Callable[[list[int], int], np.ndarray]


def needle_rule(needles: set[int], answer: int, conf: float = 0.95) -> Rule:
    """The answer with probability ``conf`` when any needle frame is in view, else a uniform posterior."""

    def rule(ids: list[int], n_options: int) -> np.ndarray:
        if not needles.intersection(ids):
            return np.full(n_options, 1.0 / n_options)
        p = np.full(n_options, (1.0 - conf) / (n_options - 1))
        p[answer] = conf
        return p

    return rule


def holistic_rule(answer: int, conf: float = 0.7) -> Rule:
    """Every frame is equally informative: the same posterior whatever the model sees."""

    def rule(ids: list[int], n_options: int) -> np.ndarray:
        p = np.full(n_options, (1.0 - conf) / (n_options - 1))
        p[answer] = conf
        return p

    return rule


class FakeVLM:
    """A GridProbe ``ProbeModel`` (plus ``generate`` / ``encode_images`` / ``encode_text`` for the
    baselines) whose posterior is ``rule(frame ids, |options|)``; records every call."""

    backend = "fake"

    def __init__(self, rule: Rule, dim: int = 16, text_target: Sequence[int] = ()):
        self.rule = rule
        self.dim = dim
        self.text_target = set(text_target)  # encode_text points at these frame ids' embeddings
        self.calls: list[dict] = []
        self.flop_calls: list[tuple] = []

    def option_posterior(self, frames: np.ndarray, prompt: str, options: Sequence[str], relative_times=None) -> np.ndarray:
        frames = np.asarray(frames)
        ids = frame_ids(frames)
        self.calls.append({"n_frames": len(ids), "ids": ids, "size": tuple(frames.shape[1:3]), "prompt": prompt, "times": relative_times})
        return np.log(self.rule(ids, len(options)))

    def generate(self, messages, max_new_tokens: int = 32, do_sample: bool = False, temperature: float = 1.0,
                 top_p: float = 1.0, num_return_sequences: int = 1, generator=None) -> list[str]:
        return ["A"] * num_return_sequences

    def _axis(self, k: int) -> np.ndarray:
        v = np.zeros(self.dim, np.float32)
        v[k] = 1.0
        return v

    def encode_images(self, frames: np.ndarray) -> np.ndarray:
        """Frame i points along axis i mod (D-1); ``text_target`` frames lean towards the text axis D-1."""
        text = self._axis(self.dim - 1)
        return np.stack([self._axis(i % (self.dim - 1)) + (3.0 * text if i in self.text_target else 0.0)
                         for i in frame_ids(frames)])

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._axis(self.dim - 1) for _ in texts])

    def flops(self, n_frames: int, prompt: str, frame_size: tuple[int, int] | None = None) -> float:
        h, w = frame_size or (8, 8)
        self.flop_calls.append((n_frames, frame_size))
        return float(n_frames * h * w * 1000 + len(prompt))


class BatchingVLM(FakeVLM):
    """A ``FakeVLM`` that also answers several clips in one call (``option_posteriors``); records each batch's size."""

    def __init__(self, rule: Rule, **kw):
        super().__init__(rule, **kw)
        self.batches: list[int] = []

    def option_posteriors(self, clips, prompt: str, options: Sequence[str], relative_times=None) -> np.ndarray:
        self.batches.append(len(clips))
        times = relative_times or [None] * len(clips)
        return np.stack([self.option_posterior(c, prompt, options, t) for c, t in zip(clips, times)])


class ImageOnlyVLM(FakeVLM):
    """Like FakeVLM but without ``encode_text`` (a transformers chat VLM, for the encoder baseline)."""

    encode_text = None  # type: ignore[assignment]


class CountingSource:
    """A frame source that records every ``get_frames`` call."""

    def __init__(self, n: int, size: tuple[int, int] = (8, 12)):
        self.frames = id_frames(n, size)
        self.requests: list[list[int]] = []

    def __len__(self) -> int:
        return len(self.frames)

    def get_frames(self, indices) -> np.ndarray:
        indices = list(indices)
        self.requests.append(indices)
        return self.frames[indices]
