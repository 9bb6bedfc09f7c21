"""The builtin backend: small models trained by this project on worldgen, shipped in weights/builtin/.

``BuiltinVisionLanguageModel`` implements the same ``VisionLanguageModel`` protocol as the hf
adapter, so a pipeline switches between them by configuration alone. It adds ``encode_text``,
which maps text into the same space as ``encode_images`` (the ViT was trained against MiniLM).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from core.device import select_device
from core.errors import InputError, MediaError
from core.flops import TransformerDims, transformer_flops
from planners.builtin.text import MiniLM
from planners.builtin.vlm import BuiltinVLMModel, collate, frames_to_tensor
from planners.protocol import check_frames, check_options

logger = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parents[2] / "weights" / "builtin"
MERGED_PATCH = 16  # 8-pixel ViT patches merged 2x2
MAX_SIDE = 128


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
    def _frames(self, frames: np.ndarray) -> np.ndarray:
        frames = check_frames(frames)
        h, w = frames.shape[1:3]
        if h % MERGED_PATCH == 0 and w % MERGED_PATCH == 0 and max(h, w) <= MAX_SIDE:
            return frames
        return np.stack([cv2.resize(f, (64, 64), interpolation=cv2.INTER_AREA) for f in frames])

    def _batch(self, frames: np.ndarray, question: str, options: Sequence[str], relative_times: Sequence[float] | None = None) -> dict:
        frames = self._frames(frames)
        if len(frames) > self.model.config.max_frames:
            raise InputError("frames", f"{len(frames)} frames", f"the built-in VLM takes at most {self.model.config.max_frames}")
        patches, emb = self._vision(frames)
        opts = self.text.encode(list(options)) if options else torch.zeros(0, 384)
        times = relative_times
        if times is not None:
            times = np.asarray(times, np.float32)
            if len(times) != len(frames):
                raise InputError("relative_times", f"{len(times)} values for {len(frames)} frames", "pass one per frame: when it was taken, as a fraction of the video (0-1)")
            if not np.all((times >= 0) & (times <= 1)):
                raise InputError("relative_times", f"values from {times.min():g} to {times.max():g}", "pass fractions of the video in [0, 1] (time / duration), not seconds")
        return collate([{"patches": patches, "frame_emb": emb, "question": self.text.tokens([question])[0], "options": opts,
                         "times": times}], self.device)

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
        check_options(options)
        batch = self._batch(frames, question_from_prompt(prompt), options, relative_times)
        logits = self.model.option_logits(self.model.encode(batch), batch["option_mask"])[0].double()
        return F.log_softmax(logits, -1).cpu().numpy()

    @torch.no_grad()
    def generate(self, frames: np.ndarray, prompt: str, max_new_tokens: int = 32) -> str:
        batch = self._batch(frames, question_from_prompt(prompt), [])
        enc = self.model.encode(batch)
        words = torch.ones(1, 1, dtype=torch.long, device=self.device)
        for _ in range(min(max_new_tokens, self.model.config.max_caption - 1)):
            nxt = self.model.caption_logits(enc, words)[:, -1].argmax(-1)
            if int(nxt) == 2:
                break
            words = torch.cat([words, nxt[:, None]], 1)
        return " ".join(self._vocab[int(i)] for i in words[0, 1:] if int(i) > 2)

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


def load_builtin_vlm(device: str | torch.device | None = None) -> BuiltinVisionLanguageModel:
    """The shipped VLM from ``weights/builtin/vlm`` (clear error if it has not been trained yet)."""
    return BuiltinVisionLanguageModel.from_pretrained(WEIGHTS_DIR / "vlm", device=device)
