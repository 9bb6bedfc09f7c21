"""The builtin backend: small models trained by this project on worldgen, shipped in weights/builtin/.

``BuiltinVisionLanguageModel`` implements the same ``VisionLanguageModel`` protocol as the hf
adapter, so a pipeline switches between them by configuration alone. It adds ``encode_text``,
which maps text into the same space as ``encode_images`` (the ViT was trained against MiniLM).

Reading messages: the model sees frames and one question, so the frames of every image and video in
the user turns are concatenated in order (one video's ``relative_times`` are used; with several parts
the concatenation counts as one evenly spread video), the question is ``question_from_prompt`` of the
last user turn that has text, and system and assistant turns are ignored. Its text output is the
small caption decoder (vocabulary ``model.config.vocab``: 0 <pad>, 1 <bos>, 2 <eos>, then words):
``generate`` and ``score`` work on that vocabulary, ``forward`` returns the encoder's hidden states.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core.device import select_device
from core.errors import InputError, MediaError
from core.flops import TransformerDims, transformer_flops
from core.frames import resize_frames
from planners.builtin.text import MiniLM
from planners.builtin.vlm import BuiltinVLMModel, collate, frames_to_tensor
from planners.protocol import (ContinuationScore, ForwardOutput, Message, check_continuations, check_frames, check_messages,
                               check_options, check_relative_times, generation_seed)

logger = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parents[2] / "weights" / "builtin"
MERGED_PATCH = 16  # 8-pixel ViT patches merged 2x2
MAX_SIDE = 128
PAD, BOS, EOS = 0, 1, 2  # the caption vocabulary's special words


def options_in_prompt(prompt: str, default: int = 4) -> int:
    """How many lettered options an MCQ prompt lists ("(A) ..." or "A. ..." lines)."""
    n = sum(1 for line in prompt.splitlines() if re.match(r"^\(?[A-J][.)] ", line.strip()))
    return n or default


def question_from_prompt(prompt: str) -> str:
    """The question line of an MCQ prompt (``format_mcq_prompt``), else the prompt's first line."""
    for line in prompt.splitlines():
        if line.startswith("Question:"):
            return line[len("Question:") :].strip()
    return prompt.strip().splitlines()[0] if prompt.strip() else prompt


class BuiltinVisionLanguageModel:
    """The shipped multi-frame VLM behind the ``VisionLanguageModel`` protocol.

    Frames whose sides are multiples of 16 and at most 128 are used as they are (64x64 is the
    training size; 32x32 is GridProbe's cheap probe size); anything else is resized to 64x64.
    """

    backend = "builtin"

    def __init__(self, model: BuiltinVLMModel, text: MiniLM | None = None, vision_cache: int = 512):
        self.model = model.eval()
        self.text = text or MiniLM()
        # ViT outputs of recently seen frames, keyed by their bytes: GridProbe shows every pool frame
        # to a row and a column probe, and the focused / baseline passes show them again
        self._vision_cache: OrderedDict[bytes, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._vision_cache_size = vision_cache
        c = model.config
        self._dims = TransformerDims(hidden=c.d_model, intermediate=c.mlp_ratio * c.d_model, layers=c.layers, heads=c.heads, kv_heads=c.heads, vocab=1)
        self._vocab = c.vocab
        self._word_ids = {w: i for i, w in enumerate(c.vocab) if i not in (PAD, BOS)}

    # ---- loading
    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, *, device: str | torch.device | None = None, dtype=None) -> BuiltinVisionLanguageModel:
        path = Path(path) if path is not None else WEIGHTS_DIR / "vlm"
        if not (path / "model.safetensors").is_file():
            raise MediaError(path, "no built-in VLM weights here", "run `make weights`, or pass --vlm PATH to a real checkpoint")
        return cls(BuiltinVLMModel.from_pretrained(path, device=select_device(device)))

    def save_pretrained(self, path: str | Path) -> Path:
        return self.model.save_pretrained(path)

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> BuiltinVisionLanguageModel:
        if device is not None:
            self.model.to(select_device(device))
            self._vision_cache.clear()
        if dtype is not None and dtype != torch.float32:
            logger.warning("the built-in VLM runs in float32; ignoring dtype=%s", dtype)
        return self

    @property
    def device(self) -> torch.device:
        return self.model.device

    # ---- inputs
    def _frames(self, frames: np.ndarray, resize: bool = False) -> np.ndarray:
        frames = check_frames(frames)
        h, w = frames.shape[1:3]
        if not resize and h % MERGED_PATCH == 0 and w % MERGED_PATCH == 0 and max(h, w) <= MAX_SIDE:
            return frames
        return resize_frames(frames, (64, 64), "area")

    def _batch(self, frames: np.ndarray, question: str, options: Sequence[str], relative_times: Sequence[float] | None = None) -> dict:
        return self._batches([frames], question, options, [relative_times])

    def _batches(self, clips: Sequence[np.ndarray], question: str, options: Sequence[str],
                 relative_times: Sequence[Sequence[float] | None]) -> dict:
        """One collated batch of several clips asked the same question: their frames go through the ViT together."""
        clips = [self._frames(f) for f in clips]
        if len({f.shape[1:3] for f in clips}) > 1:  # clips of different sizes meet at the training size
            clips = [self._frames(f, resize=True) for f in clips]
        for f in clips:
            if len(f) > self.model.config.max_frames:
                raise InputError("frames", f"{len(f)} frames", f"the built-in VLM takes at most {self.model.config.max_frames}")
        patches, emb = self._vision(np.concatenate(clips))
        opts = self.text.encode(list(options)) if options else torch.zeros(0, 384)
        words = self.text.tokens([question])[0]
        items, start = [], 0
        for f, times in zip(clips, relative_times):
            if times is not None:
                check_relative_times(times, len(f))
                times = np.asarray(times, np.float32)
            items.append({"patches": patches[start:start + len(f)], "frame_emb": emb[start:start + len(f)], "question": words,
                          "options": opts, "times": times})
            start += len(f)
        return collate(items, self.device)

    def _message_batch(self, messages: Message | Sequence[Message]) -> dict:
        """The collated encoder input of a conversation (see the module docstring for how turns are read)."""
        users = [m for m in check_messages(messages) if m.role == "user"]
        parts = [p for m in users for p in m.visuals]
        if not parts:
            raise InputError("messages", "no image or video in a user turn",
                             "the builtin VLM answers about frames: add an ImagePart or VideoPart")
        frames = [self._frames(p.frames) for p in parts]
        if len({f.shape[1:3] for f in frames}) > 1:  # parts of different sizes meet at the training size
            frames = [self._frames(f, resize=True) for f in frames]
        times = getattr(parts[0], "relative_times", None) if len(parts) == 1 else None
        text = next((m.text for m in reversed(users) if m.text), "")
        return self._batch(np.concatenate(frames), question_from_prompt(text), [], times)

    def _vision(self, frames: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The frozen ViT's (patch tokens, frame embeddings), reusing cached frames."""
        keys = [hashlib.blake2b(f.tobytes(), digest_size=16, person=str(f.shape).encode()[:16]).digest() for f in frames]
        todo = sorted({i for i, k in enumerate(keys) if k not in self._vision_cache})
        if todo:
            patches, emb = self.model.vision(frames_to_tensor(frames[todo], self.device))
            for j, i in enumerate(todo):
                self._vision_cache[keys[i]] = (patches[j], emb[j])
        out = [self._vision_cache[k] for k in keys]
        for k in keys:
            self._vision_cache.move_to_end(k)
        while len(self._vision_cache) > self._vision_cache_size:
            self._vision_cache.popitem(last=False)
        return torch.stack([o[0] for o in out]), torch.stack([o[1] for o in out])

    # ---- the protocol
    @torch.no_grad()
    def option_posterior(self, frames: np.ndarray, prompt: str, options: Sequence[str], relative_times: Sequence[float] | None = None) -> np.ndarray:
        return self.option_posteriors([frames], prompt, options, [relative_times])[0]

    @torch.no_grad()
    def option_posteriors(self, clips: Sequence[np.ndarray], prompt: str, options: Sequence[str],
                          relative_times: Sequence[Sequence[float] | None] | None = None) -> np.ndarray:
        """``option_posterior`` of each clip, ``(len(clips), len(options))``, in one batched forward (GridProbe's
        probes: equal clips, so no padding; row i equals ``option_posterior(clips[i], ...)`` up to float rounding)."""
        check_options(options)
        times = list(relative_times) if relative_times is not None else [None] * len(clips)
        if len(times) != len(clips):
            raise InputError("relative_times", f"{len(times)} lists for {len(clips)} clips", "pass one list of times per clip, or None")
        batch = self._batches(clips, question_from_prompt(prompt), options, times)
        logits = self.model.option_logits(self.model.encode(batch), batch["option_mask"]).double()
        return F.log_softmax(logits, -1).cpu().numpy()

    @torch.no_grad()
    def generate(self, messages: Message | Sequence[Message], max_new_tokens: int = 32, do_sample: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0, num_return_sequences: int = 1,
                 generator: torch.Generator | int | None = None) -> list[str]:
        """Captions from the caption decoder (see the protocol), at most ``max_caption - 1`` words each; the
        words are joined by spaces, <pad>/<bos> (which training never targets) dropped."""
        seed = generation_seed(max_new_tokens, do_sample, temperature, top_p, num_return_sequences, generator)
        enc = self.model.encode(self._message_batch(messages))
        rng = torch.Generator(self.device).manual_seed(seed) if do_sample else None
        steps = min(max_new_tokens, self.model.config.max_caption - 1)
        texts = []
        for _ in range(num_return_sequences):
            words = torch.full((1, 1), BOS, dtype=torch.long, device=self.device)
            for _ in range(steps):
                logits = self.model.caption_logits(enc, words)[0, -1]
                nxt = logits.argmax() if rng is None else _sample(logits / temperature, top_p, rng)
                if int(nxt) == EOS:
                    break
                words = torch.cat([words, nxt.view(1, 1)], 1)
            texts.append(" ".join(self._vocab[int(i)] for i in words[0, 1:] if int(i) > EOS))
        return texts

    @torch.no_grad()
    def score(self, messages: Message | Sequence[Message], continuations: Sequence[str]) -> list[ContinuationScore]:
        """Teacher-forced log-probabilities of each continuation's words (split on whitespace) under the caption
        decoder, from <bos>. The end is not scored unless the continuation ends in the word "<eos>"
        (the same choice as hf, and it makes a greedy caption score at least as high as one with its
        last word changed)."""
        words = [self._caption_ids(c) for c in check_continuations(continuations)]
        enc = self.model.encode(self._message_batch(messages))
        scores = []
        for ids in words:
            logp = np.zeros(0)
            if ids:
                prefix = torch.tensor([[BOS] + ids[:-1]], device=self.device)
                logits = self.model.caption_logits(enc, prefix)[0].double()
                logp = F.log_softmax(logits, -1).gather(-1, torch.tensor(ids, device=self.device)[:, None])[:, 0].cpu().numpy()
            scores.append(ContinuationScore([self._vocab[i] for i in ids], ids, logp))
        return scores

    def _caption_ids(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word not in self._word_ids:
                raise InputError("continuations", word, "the builtin VLM only knows its caption vocabulary "
                                 f"(model.config.vocab: {' '.join(self._vocab[EOS + 1:])}, and <eos>)")
            ids.append(self._word_ids[word])
        if len(ids) > self.model.config.max_caption:
            raise InputError("continuations", text, f"the caption decoder reads at most {self.model.config.max_caption} words")
        return ids

    def forward(self, messages: Message | Sequence[Message], output_hidden_states: bool = True) -> ForwardOutput:
        """The encoder over the messages: the caption decoder's first-word logits ``(V,)`` (the next token after
        the messages) and, if asked, ``layers + 1`` hidden states ``(1, L, d_model)`` (each block's input, then
        the final norm's output, as transformers counts them; L covers question, option, count-probe and frame
        tokens). Collected by hooks on ``model.blocks`` / ``model.ln``; runs under the caller's grad mode."""
        states: list[torch.Tensor] = []
        hooks = []
        if output_hidden_states:
            hooks = [b.register_forward_pre_hook(lambda _, args: states.append(args[0])) for b in self.model.blocks]
            hooks.append(self.model.ln.register_forward_hook(lambda _, args, out: states.append(out)))
        try:
            enc = self.model.encode(self._message_batch(messages))
        finally:
            for h in hooks:
                h.remove()
        logits = self.model.caption_logits(enc, torch.full((1, 1), BOS, dtype=torch.long, device=self.device))[0, -1]
        return ForwardOutput(logits, tuple(states) if output_hidden_states else None)

    @property
    def module(self) -> torch.nn.Module:
        """The ``BuiltinVLMModel`` (its ViT and attribute detector frozen, ``requires_grad=False``)."""
        return self.model

    @torch.no_grad()
    def encode_images(self, frames: np.ndarray) -> np.ndarray:
        return self.model.vit.embed(self._frames(frames)).astype(np.float32)

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        """Text in the same space as ``encode_images`` (unit vectors, cosine = dot product)."""
        return self.text.encode(list(texts)).numpy().astype(np.float32)

    def count_tokens(self, n_frames: int, prompt: str, frame_size: tuple[int, int] | None = None, n_options: int | None = None) -> int:
        """Encoder sequence length: question tokens + one token per option + 16 (64x64) or 4 (32x32) per frame."""
        h, w = frame_size or (64, 64)
        if not (h % MERGED_PATCH == 0 and w % MERGED_PATCH == 0 and max(h, w) <= MAX_SIDE):
            h, w = 64, 64
        q = len(self.text.tokens([question_from_prompt(prompt)])[0])
        n_opt = n_options if n_options is not None else options_in_prompt(prompt)
        return q + n_opt + n_frames * (h // MERGED_PATCH) * (w // MERGED_PATCH)

    def flops(self, n_frames: int, prompt: str, frame_size: tuple[int, int] | None = None, n_options: int | None = None) -> float:
        """Analytic LM FLOPs of one pass (spec GridProbe B.8; the ViT is excluded, as there)."""
        return transformer_flops(self._dims, self.count_tokens(n_frames, prompt, frame_size, n_options))


def _sample(logits: torch.Tensor, top_p: float, generator: torch.Generator) -> torch.Tensor:
    """One id from ``softmax(logits)`` cut to its nucleus: the most probable ids holding ``top_p`` of the mass
    (the first always kept), renormalised."""
    probs, order = torch.softmax(logits.double(), -1).sort(descending=True)
    probs = probs * (probs.cumsum(0) - probs < top_p)
    return order[torch.multinomial(probs, 1, generator=generator)[0]]


def load_builtin_vlm(device: str | torch.device | None = None) -> BuiltinVisionLanguageModel:
    """The shipped VLM from ``weights/builtin/vlm`` (clear error if it has not been trained yet)."""
    return BuiltinVisionLanguageModel.from_pretrained(WEIGHTS_DIR / "vlm", device=device)
