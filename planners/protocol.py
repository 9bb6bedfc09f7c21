"""The one interface every vision-language backend implements, and the answer-letter scoring they share.

Planners (GridProbe's probes, CLEAR's instance selection, ...) only see ``VisionLanguageModel``, so
a builtin model, a transformers checkpoint or a test oracle are interchangeable. Multiple-choice
answers are read from the next-token posterior, not from generated text (specs/gridprobe.md, B.2):
one forward pass, letter scores pooled over the letter's surface forms, renormalised over the options.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from core.errors import InputError

OPTION_LETTERS = "ABCDEFGHIJ"


@runtime_checkable
class VisionLanguageModel(Protocol):
    """A VLM behind Atelier's boundary convention.

    Frames are RGB ``uint8`` numpy arrays: ``(H, W, 3)`` for one image, ``(T, H, W, 3)`` for a video.
    Every method is deterministic: identical inputs give identical outputs. Implementations also
    carry a ``backend`` name ("hf", "builtin", ...) for logs and configs.
    """

    def option_posterior(self, frames: np.ndarray, prompt: str, options: Sequence[str], relative_times: Sequence[float] | None = None) -> np.ndarray:
        """Log-probabilities over ``options`` (answer letters A, B, ... in order); ``exp`` sums to 1.

        ``relative_times``: when each frame was taken, as a fraction of the video (0 first frame, 1 last;
        not seconds, so a model needs no duration to tell a short stretch from a spread sample); a
        model that reads time uses it (a contiguous run of frames and a spread sample differ in what
        they can have missed), others ignore it. None: the frames are taken to be evenly spread."""
        ...

    def generate(self, frames: np.ndarray, prompt: str, max_new_tokens: int = 32) -> str:
        """Greedy free-form answer: only the new text, stripped."""
        ...

    def encode_images(self, frames: np.ndarray) -> np.ndarray:
        """One embedding per frame, ``(T, D)`` float32, in the model's own vision feature space."""
        ...

    def flops(self, n_frames: int, prompt: str, frame_size: tuple[int, int] | None = None) -> float:
        """Analytic FLOPs of one forward over ``n_frames`` frames of ``frame_size`` (H, W) and ``prompt``."""
        ...


def check_frames(frames: np.ndarray, name: str = "frames") -> np.ndarray:
    """Check the boundary convention and return ``(T, H, W, 3)`` uint8 (a single image gets T = 1)."""
    frames = np.asarray(frames)
    if frames.ndim == 3:
        frames = frames[None]
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or 0 in frames.shape:
        raise InputError(name, f"array {frames.shape} {frames.dtype}",
                         "pass RGB uint8 frames shaped (H, W, 3) for an image or (T, H, W, 3) for a video")
    return frames


def letter_surface_forms(letter: str) -> list[str]:
    """The ways a model may start writing answer ``letter``.

    Spec B.2 lists ``L, " L", "(L", "L.", " L.", "L)"``; we add ``" (L"`` and ``"L:"``, which chat
    models also emit. Extra forms can only add probability mass that belongs to the letter.
    """
    if not isinstance(letter, str) or len(letter) != 1:
        raise InputError("letter", letter, "pass a single character such as 'A'")
    return [letter, f" {letter}", f"({letter}", f"{letter}.", f" {letter}.", f"{letter})", f" ({letter}", f"{letter}:"]


def letter_token_ids(tokenizer: Any, letters: Sequence[str]) -> list[list[int]]:
    """For each letter, the distinct first token ids of its surface forms (no special tokens).

    A first token shared by several letters (e.g. ``"("`` when a tokenizer splits ``"(B"`` into
    ``"(" + "B"``) says nothing about which letter follows, and pooling it would pull every letter's
    score towards the same value; such ids are dropped. A letter left with no id keeps the first
    token of its bare form, so every letter always has a score.
    """
    firsts: list[list[int]] = []
    for letter in letters:
        ids: list[int] = []
        for form in letter_surface_forms(letter):
            tokens = tokenizer.encode(form, add_special_tokens=False)
            if len(tokens) and int(tokens[0]) not in ids:
                ids.append(int(tokens[0]))
        if not ids:
            raise InputError("letters", letter, "the tokenizer encodes none of this letter's surface forms")
        firsts.append(ids)
    owners: dict[int, int] = {}
    for ids in firsts:
        for i in ids:
            owners[i] = owners.get(i, 0) + 1
    return [[i for i in ids if owners[i] == 1] or ids[:1] for ids in firsts]


def posterior_from_logits(logits: torch.Tensor, letter_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """Option log-probabilities from next-token ``logits`` ``(V,)``.

    ``s_L = logsumexp(log_softmax(logits)[ids_L])``, then ``s - logsumexp(s)``: the distribution over
    the options alone (float64, so ``exp`` sums to 1 to machine precision).
    """
    if logits.ndim != 1:
        raise InputError("logits", tuple(logits.shape), "pass the last position's logits as a (V,) tensor")
    if len(letter_ids) == 0:
        raise InputError("letter_ids", letter_ids, "pass at least one option's token ids")
    logp = torch.log_softmax(logits.detach().to(torch.float64).cpu(), dim=-1)
    scores = torch.stack([torch.logsumexp(logp[list(ids)], dim=0) for ids in letter_ids])
    return (scores - torch.logsumexp(scores, dim=0)).numpy()


def peak_posterior(logp: np.ndarray) -> float:
    """The pass confidence of spec B.2: the largest option probability, in [1/|O|, 1]."""
    return float(np.exp(np.max(logp)))


def check_options(options: Sequence[str]) -> list[str]:
    """Validate an option list and return its letters (A, B, ...)."""
    if isinstance(options, str) or not 2 <= len(options) <= len(OPTION_LETTERS):
        raise InputError("options", options, f"pass a list of 2 to {len(OPTION_LETTERS)} option texts")
    return list(OPTION_LETTERS[: len(options)])


def format_mcq_prompt(question: str, options: Sequence[str], style: str = "default", subtitles: str | None = None) -> str:
    """The multiple-choice prompt, options lettered A, B, ... in order.

    ``style="default"``: the generic lmms-eval wording ("Question: ... Options: (A) ... Answer with the
    option's letter from the given choices directly."). ``"videomme_v2"`` and ``"longvideobench"``
    follow the wording of GridProbe's benchmark scripts (spec B.7); the line breaks between their
    parts are our reading of the spec. ``subtitles`` is only used by the benchmark styles.
    """
    letters = check_options(options)
    if style == "default":
        lines = [f"Question: {question}", "Options:"] + [f"({L}) {o}" for L, o in zip(letters, options)]
        return "\n".join(lines + ["Answer with the option's letter from the given choices directly."])
    if style == "videomme_v2":
        listed = ", ".join(letters[:-1]) + f", or {letters[-1]}"
        lines = ["Select the best answer to the following multiple-choice question based on the video.",
                 f"Respond with only the letter ({listed}) of the correct option.",
                 f"Question: {question}"] + [f"{L}. {o}." for L, o in zip(letters, options)]
        text = "\n".join(lines)
        return f"This video's subtitles are listed below: {subtitles}\n{text}" if subtitles else text
    if style == "longvideobench":
        lines = ([f"[Video subtitles: {subtitles}]"] if subtitles else []) + [f"Question: {question}"]
        lines += [f"({L}) {o}" for L, o in zip(letters, options)]
        return "\n".join(lines + ["Answer with the letter of the correct option."])
    raise InputError("style", style, "use 'default', 'videomme_v2' or 'longvideobench'")
