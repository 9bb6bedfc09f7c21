"""The one interface every vision-language backend implements, its message types, and the answer scoring they share.

Planners (GridProbe's probes, CLEAR's instance selection, meme chain-of-thought, RL, reward models,
latent slots) only see ``VisionLanguageModel``, so a builtin model, a transformers checkpoint or a
test oracle are interchangeable. The protocol is low level on purpose: structured chat messages in,
seeded sampling (``generate``), exact log-probabilities of given continuations (``score``), hidden
states and the trainable module (``forward``, ``module``) out; whatever a method needs above that is
a helper over these calls (``mcq_posterior``), not a new backend method.

Multiple-choice answers are read from the next-token posterior, not from generated text (specs/gridprobe.md,
B.2): ``option_posterior`` is one forward pass, letter scores pooled over the letter's surface forms,
renormalised over the options (GridProbe's fast path); ``mcq_posterior`` computes the same kind of
posterior for any backend from ``score`` alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from core.errors import InputError

OPTION_LETTERS = "ABCDEFGHIJ"
ROLES = ("system", "user", "assistant")
# [DEFAULT] the most samples one ``generate`` call returns: a bound on memory, far above what RL groups use
MAX_RETURN_SEQUENCES = 256


# ---- messages ------------------------------------------------------------------------------------


@dataclass(eq=False)
class TextPart:
    """Text inside a turn."""

    text: str

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise InputError("text", self.text, "pass the text as a string")


@dataclass(eq=False)
class ImagePart:
    """One RGB ``uint8`` image ``(H, W, 3)`` inside a turn."""

    image: np.ndarray

    def __post_init__(self):
        frames = check_frames(self.image, "image")
        if len(frames) != 1:
            raise InputError("image", f"array {frames.shape}", "pass one (H, W, 3) image; use VideoPart for (T, H, W, 3) frames")
        self.image = frames[0]

    @property
    def frames(self) -> np.ndarray:
        """The image as a one-frame ``(1, H, W, 3)`` stack, the shape backends read."""
        return self.image[None]

    def __repr__(self) -> str:
        return f"ImagePart(image={self.image.shape})"


@dataclass(eq=False)
class VideoPart:
    """Frames of one video ``(T, H, W, 3)`` inside a turn, in time order.

    ``relative_times``: when each frame was taken, as a fraction of the video (0 its first frame, 1 its
    last; not seconds, so a model needs no duration to tell a short stretch from a spread sample); None:
    the frames are taken to be evenly spread over it. ``fps``: the rate the given frames were sampled at,
    for backends that write timestamps into the prompt (hf: Qwen3-VL, SmolVLM); None: the backend's default.
    """

    frames: np.ndarray
    relative_times: Sequence[float] | None = None
    fps: float | None = None

    def __post_init__(self):
        self.frames = check_frames(self.frames)
        if self.relative_times is not None:
            self.relative_times = tuple(float(t) for t in check_relative_times(self.relative_times, len(self.frames)))
        if self.fps is not None and not (isinstance(self.fps, Real) and math.isfinite(self.fps) and self.fps > 0):
            raise InputError("fps", self.fps, "pass the frames' sampling rate as a positive number, or None")

    def __repr__(self) -> str:
        return f"VideoPart(frames={self.frames.shape}, relative_times={self.relative_times}, fps={self.fps})"


Part = TextPart | ImagePart | VideoPart


@dataclass(eq=False)
class Message:
    """One chat turn: ``role`` ("system", "user" or "assistant") and its parts in order (a str is one TextPart)."""

    role: str
    content: Sequence[Part | str] | str

    def __post_init__(self):
        if self.role not in ROLES:
            raise InputError("role", self.role, f"use one of {', '.join(ROLES)}")
        content = [self.content] if isinstance(self.content, (str, TextPart, ImagePart, VideoPart)) else self.content
        if not isinstance(content, Sequence) or not content:
            raise InputError("content", content, "pass a non-empty list of TextPart / ImagePart / VideoPart (or a string)")
        parts = [TextPart(p) if isinstance(p, str) else p for p in content]
        for p in parts:
            if not isinstance(p, (TextPart, ImagePart, VideoPart)):
                raise InputError("content", type(p).__name__, "each part is a TextPart, ImagePart or VideoPart (or a string)")
        self.content = parts

    @property
    def text(self) -> str:
        """The turn's text parts joined by newlines (what a text-only reader sees)."""
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def visuals(self) -> list[ImagePart | VideoPart]:
        """The turn's image and video parts, in order."""
        return [p for p in self.content if not isinstance(p, TextPart)]


def user_turn(frames: np.ndarray, prompt: str, relative_times: Sequence[float] | None = None, fps: float | None = None) -> Message:
    """The old ``(frames, prompt)`` pair as one user turn: the frames first, then the prompt.

    ``(H, W, 3)`` is an image, ``(T, H, W, 3)`` a video (with its ``relative_times`` / ``fps``)."""
    if not isinstance(prompt, str):
        raise InputError("prompt", prompt, "pass the question text as a string")
    single = np.ndim(frames) == 3 and relative_times is None
    frames = check_frames(frames)
    media = ImagePart(frames[0]) if single else VideoPart(frames, relative_times, fps)
    return Message("user", [media, TextPart(prompt)])


def check_messages(messages: Message | Sequence[Message]) -> list[Message]:
    """A conversation the model can answer: Messages, a system turn only first, a user turn last."""
    messages = [messages] if isinstance(messages, Message) else messages
    if isinstance(messages, (str, np.ndarray)) or not isinstance(messages, Sequence) or not messages:
        raise InputError("messages", type(messages).__name__,
                         "pass a list of planners.protocol.Message (user_turn(frames, prompt) builds one)")
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise InputError("messages", f"item {i} is a {type(m).__name__}", "pass planners.protocol.Message objects")
        if m.role == "system" and i > 0:
            raise InputError("messages", f"a system turn at position {i}", "put the system turn first")
    if messages[-1].role != "user":
        raise InputError("messages", f"the last turn is '{messages[-1].role}'",
                         "end with a user turn, which the model answers (score an assistant's partial answer as a continuation)")
    return list(messages)


def check_continuations(continuations: Sequence[str]) -> list[str]:
    """``score``'s continuations: a non-empty list of strings."""
    if isinstance(continuations, str) or not isinstance(continuations, Sequence) or not continuations:
        raise InputError("continuations", continuations, "pass a non-empty list of strings, e.g. ['A', 'B']")
    for c in continuations:
        if not isinstance(c, str):
            raise InputError("continuations", c, "each continuation is a string")
    return list(continuations)


def generation_seed(max_new_tokens: int, do_sample: bool, temperature: float, top_p: float, num_return_sequences: int,
                    generator: torch.Generator | int | None) -> int | None:
    """Check ``generate``'s arguments (the same for every backend) and return the sampling seed, None when greedy.

    The seed is drawn from ``generator`` (advancing it, so successive calls draw different samples) or is the
    int given; a backend seeds its sampler with it and nothing else, so the same generator state gives the
    same texts and the global RNG is neither read nor changed."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, Integral) or max_new_tokens < 1:
        raise InputError("max_new_tokens", max_new_tokens, "pass a positive integer")
    if not isinstance(do_sample, bool):
        raise InputError("do_sample", do_sample, "pass True (sample) or False (greedy)")
    n = num_return_sequences
    if isinstance(n, bool) or not isinstance(n, Integral) or not 1 <= n <= MAX_RETURN_SEQUENCES:
        raise InputError("num_return_sequences", n, f"pass an integer from 1 to {MAX_RETURN_SEQUENCES} (call again for more)")
    if not do_sample:
        if n != 1:
            raise InputError("num_return_sequences", n, "greedy decoding has one answer: pass do_sample=True (and a generator) for several")
        return None
    if isinstance(temperature, bool) or not isinstance(temperature, Real) or not (0 < temperature < math.inf):
        raise InputError("temperature", temperature,
                         "pass a positive temperature (1.0: the model's own distribution; do_sample=False for greedy)")
    if isinstance(top_p, bool) or not isinstance(top_p, Real) or not 0 < top_p <= 1:
        raise InputError("top_p", top_p, "pass a nucleus mass in (0, 1]; 1.0 keeps every token")
    if isinstance(generator, torch.Generator):
        return int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    if isinstance(generator, Integral) and not isinstance(generator, bool) and generator >= 0:
        return int(generator)
    raise InputError("generator", generator, "sampling draws only from the generator you pass: "
                     "pass torch.Generator().manual_seed(seed) or a non-negative int seed")


@dataclass
class ContinuationScore:
    """The log-probability of one given continuation after the messages, token by token (teacher forcing).

    ``tokens`` are the continuation's tokens as text pieces and ``token_ids`` their ids in the model's
    vocabulary; ``token_logprobs`` (float64) is log p(token_i | messages, tokens_<i); ``total`` their sum."""

    tokens: list[str]
    token_ids: list[int]
    token_logprobs: np.ndarray
    total: float = field(init=False)

    def __post_init__(self):
        self.token_logprobs = np.asarray(self.token_logprobs, np.float64)
        self.total = float(self.token_logprobs.sum())


@dataclass
class ForwardOutput:
    """One forward over the messages (with the generation prompt): ``logits`` ``(V,)`` of the next token after
    them, and with ``output_hidden_states`` the ``hidden_states``: one ``(1, L, D)`` tensor per layer, the
    input embeddings first and the last after the final norm (transformers' convention), else None."""

    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


@runtime_checkable
class VisionLanguageModel(Protocol):
    """A VLM behind Atelier's boundary convention.

    Inputs are chat ``Message``s (system / user / assistant turns of text, images and videos;
    ``user_turn(frames, prompt)`` turns the old pair into one); frames are RGB ``uint8`` numpy arrays,
    ``(H, W, 3)`` for an image and ``(T, H, W, 3)`` for a video. Every call is deterministic: identical
    inputs (and for sampling an identical generator state) give identical outputs. Implementations also
    carry a ``backend`` name ("hf", "builtin", ...) for logs and configs.

    - ``generate``: free-form answers, greedy or sampled from the caller's generator alone;
    - ``score``: exact (teacher-forced) log-probabilities of given continuations: RL ratios, reward models, MCQ;
    - ``forward``: next-token logits and per-layer hidden states, with gradients when grad mode is on;
    - ``module``: the ``torch.nn.Module`` those depend on, to hand to an optimizer;
    - ``option_posterior``: GridProbe's one-forward multiple-choice posterior (``mcq_posterior`` is the
      generic one over ``score``);
    - ``encode_images`` and ``flops``: frame embeddings and compute accounting.
    """

    def generate(self, messages: Message | Sequence[Message], max_new_tokens: int = 32, do_sample: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0, num_return_sequences: int = 1,
                 generator: torch.Generator | int | None = None) -> list[str]:
        """``num_return_sequences`` answers to the last user turn: only the new text, as decoded (not stripped).

        ``do_sample=False``: greedy (one answer, ``temperature``/``top_p``/``generator`` unused). Sampling draws
        from ``softmax(logits / temperature)`` cut to the ``top_p`` nucleus, and from nothing else (no
        checkpoint defaults such as top-k or a repetition penalty), seeded only by ``generator`` (a
        ``torch.Generator`` or an int seed; required). See ``generation_seed`` for the checks."""
        ...

    def score(self, messages: Message | Sequence[Message], continuations: Sequence[str]) -> list[ContinuationScore]:
        """For each continuation, the log-probability of its tokens as the assistant's answer to the messages,
        teacher-forced in one forward; no end-of-turn token is added (append it to score the end too)."""
        ...

    def forward(self, messages: Message | Sequence[Message], output_hidden_states: bool = True) -> ForwardOutput:
        """One forward over the messages and the generation prompt, under the caller's grad mode: wrap it
        in ``torch.no_grad()`` for inference, leave grad on to train ``module`` through it."""
        ...

    @property
    def module(self) -> torch.nn.Module:
        """The trainable model whose parameters ``forward`` depends on (for an optimizer, ``state_dict``, ...)."""
        ...

    def option_posterior(self, frames: np.ndarray, prompt: str, options: Sequence[str], relative_times: Sequence[float] | None = None) -> np.ndarray:
        """Log-probabilities over ``options`` (answer letters A, B, ... in order); ``exp`` sums to 1.

        ``relative_times``: when each frame was taken, as a fraction of the video (0 first frame, 1 last;
        not seconds, so a model needs no duration to tell a short stretch from a spread sample); a
        model that reads time uses it (a contiguous run of frames and a spread sample differ in what
        they can have missed), others ignore it. None: the frames are taken to be evenly spread."""
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


def check_relative_times(relative_times: Sequence[float], n_frames: int) -> np.ndarray:
    """One time per frame, each a fraction of the video in [0, 1]; returned as float64."""
    times = np.asarray(relative_times, np.float64).reshape(-1)
    if len(times) != n_frames:
        raise InputError("relative_times", f"{len(times)} values for {n_frames} frames",
                         "pass one per frame: when it was taken, as a fraction of the video (0-1)")
    if not np.all((times >= 0) & (times <= 1)):
        raise InputError("relative_times", f"values from {times.min():g} to {times.max():g}",
                         "pass fractions of the video in [0, 1] (time / duration), not seconds")
    return times


# How letter scores are pooled over surface forms (``letter_token_ids``): "official" is GridProbe's
# released code (eval/grid_sampled_ensemble_eval.py get_letter_token_id_variants), "distinct" ours.
LETTER_POOLINGS = ("official", "distinct")
# The surface forms the official code pools, in its order.
OFFICIAL_LETTER_FORMS = ("{L}", " {L}", "({L}", "{L}.", " {L}.", "{L})")


def letter_surface_forms(letter: str, pooling: str = "distinct") -> list[str]:
    """The ways a model may start writing answer ``letter``.

    ``pooling="official"``: the six forms of GridProbe's released code and spec B.2, ``L, " L", "(L",
    "L.", " L.", "L)"``. ``"distinct"`` (ours) adds ``" (L"`` and ``"L:"``, which chat models also
    emit; extra forms can only add probability mass that belongs to the letter.
    """
    if not isinstance(letter, str) or len(letter) != 1:
        raise InputError("letter", letter, "pass a single character such as 'A'")
    check_letter_pooling(pooling)
    forms = [f.format(L=letter) for f in OFFICIAL_LETTER_FORMS]
    return forms if pooling == "official" else forms + [f" ({letter}", f"{letter}:"]


def check_letter_pooling(pooling: str) -> str:
    if pooling not in LETTER_POOLINGS:
        raise InputError("letter_pooling", pooling, "use 'official' (GridProbe's released code) or 'distinct' (ours)")
    return pooling


def letter_token_ids(tokenizer: Any, letters: Sequence[str], pooling: str = "distinct") -> list[list[int]]:
    """For each letter, the first token ids of its surface forms (no special tokens), sorted or in form order.

    ``pooling="official"`` (GridProbe's released code; the default of ``HFVisionLanguageModel``): every
    first token of the six official forms, sorted, kept even when several letters share it (``"("``
    when a tokenizer splits ``"(B"`` into ``"(" + "B"``): each letter then also receives that token's
    probability, which pulls the letters' scores, and so the probe confidences, towards each other.

    ``"distinct"`` (ours): the eight forms of ``letter_surface_forms``, and a first token shared by
    several letters is dropped, since it says nothing about which letter follows. A letter left with
    no id keeps the first token of its bare form, so every letter always has a score.
    """
    check_letter_pooling(pooling)
    firsts: list[list[int]] = []
    for letter in letters:
        ids: list[int] = []
        for form in letter_surface_forms(letter, pooling):
            tokens = tokenizer.encode(form, add_special_tokens=False)
            if len(tokens) and int(tokens[0]) not in ids:
                ids.append(int(tokens[0]))
        if not ids:
            raise InputError("letters", letter, "the tokenizer encodes none of this letter's surface forms")
        firsts.append(sorted(ids) if pooling == "official" else ids)
    if pooling == "official":
        return firsts
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


PROMPT_STYLES = ("default", "videomme", "videomme_v2", "longvideobench")


def format_mcq_prompt(question: str, options: Sequence[str], style: str = "default", subtitles: str | None = None) -> str:
    """The multiple-choice prompt, options lettered A, B, ... in order.

    ``style="default"`` (ours): the generic lmms-eval wording ("Question: ... Options: (A) ... Answer
    with the option's letter from the given choices directly."); ``subtitles`` are not shown.
    The benchmark styles are the prompts of GridProbe's released code, character for character:

    - ``"videomme"``: Video-MME v1 (eval/video_mme.py ``build_prompt``); its last line names
      "(A, B, C, or D)" whatever the option count, and it has no subtitle block (passing
      ``subtitles`` is an error rather than a silent drop).
    - ``"videomme_v2"``: Video-MME v2 (eval/video_mme_v2.py ``build_prompt_v2``); it always lists
      "(A, B, C, D, E, F, G, or H)" and, with subtitles, opens with "This video's subtitles are
      listed below:", the stripped subtitles and a blank line.
    - ``"longvideobench"``: LongVideoBench (eval/longvideobench.py ``build_prompt_lvb``), blank lines
      between its parts and an optional "Video subtitles:" block.
    """
    letters = check_options(options)
    if style == "default":
        lines = [f"Question: {question}", "Options:"] + [f"({L}) {o}" for L, o in zip(letters, options)]
        return "\n".join(lines + ["Answer with the option's letter from the given choices directly."])
    if style == "videomme":
        if subtitles:
            raise InputError("subtitles", f"{len(subtitles)} characters", "the official Video-MME v1 prompt has no subtitle "
                                                                          "block: use prompt_style 'videomme_v2' or 'longvideobench', or pass none")
        listed = "\n".join(f"({L}) {o}" for L, o in zip(letters, options))
        return f"Question: {question}\n\n{listed}\n\nAnswer with the letter of the correct option (A, B, C, or D)."
    if style == "videomme_v2":
        listed = "\n".join(f"{L}. {o}." for L, o in zip(letters, options))
        body = ("Select the best answer to the following multiple-choice question based on the video.\n"
                "Respond with only the letter (A, B, C, D, E, F, G, or H) of the correct option.\n"
                f"Question: {question}\n{listed}")
        return f"This video's subtitles are listed below:\n{subtitles.strip()}\n\n{body}" if subtitles else body
    if style == "longvideobench":
        listed = "\n".join(f"({L}) {o}" for L, o in zip(letters, options))
        body = f"Question: {question}\n\n{listed}\n\nAnswer with the letter of the correct option."
        return f"Video subtitles:\n{subtitles}\n\n{body}" if subtitles else body
    raise InputError("style", style, f"use one of {', '.join(repr(s) for s in PROMPT_STYLES)}")


def mcq_posterior(vlm: VisionLanguageModel, messages: Message | Sequence[Message], options: Sequence[str],
                  answer: str = "letter") -> np.ndarray:
    """Option log-probabilities (``exp`` sums to 1) from ``vlm.score`` alone, so any backend that scores gets MCQ.

    ``answer="letter"``: each option's letter is scored in all its surface forms (``letter_surface_forms``)
    as whole continuations and pooled (logsumexp); a form whose tokens extend another form of the same
    letter (``"A."`` as ``"A" + "."``) is dropped, its probability being part of the shorter one's.
    ``"text"``: the option texts themselves, for a model that answers in words (the builtin caption
    decoder knows no letters). The scores are then renormalised over the options (float64). Unlike
    ``option_posterior`` (one forward, first tokens only) this costs a forward per scored form and scores
    multi-token forms exactly, so the two agree in kind, not digit for digit.
    """
    letters = check_options(options)
    if answer == "letter":
        forms = [letter_surface_forms(L) for L in letters]
    elif answer == "text":
        forms = [[o] for o in options]
    else:
        raise InputError("answer", answer, "use 'letter' (score the answer letters) or 'text' (score the option texts)")
    scores = iter(vlm.score(messages, [f for fs in forms for f in fs]))
    pooled = []
    for fs in forms:
        kept: list[tuple[int, ...]] = []
        totals = []
        for s in sorted((next(scores) for _ in fs), key=lambda s: len(s.token_ids)):
            ids = tuple(s.token_ids)
            if not ids:
                raise InputError("options", fs, "every scored answer needs at least one token")
            if not any(ids[: len(k)] == k for k in kept):
                kept.append(ids)
                totals.append(s.total)
        pooled.append(np.logaddexp.reduce(totals))
    s = np.asarray(pooled, np.float64)
    return s - np.logaddexp.reduce(s)
