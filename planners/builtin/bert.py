"""The BERT encoder forward of all-MiniLM-L6-v2, in plain torch, reading the package's own safetensors.

Why not transformers' ``BertModel``: importing transformers' modeling machinery costs about 3 s of a cold
`atelier ask` (measured: ``BertModel`` import 3.3 s + load 0.1 s, ``AutoModel`` 0.9 + 2.1 s, this module
0.1 s), for a frozen 6-layer encoder the builtin models only read. The computation is transformers' BERT
(post-LN, exact GELU, absolute positions, token type 0, SDPA with an additive padding mask, its order of
sums); tests/test_builtin_text.py checks it equals ``BertModel`` bit for bit on the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from core.errors import InputError


class SmallBert(torch.nn.Module):
    """``forward(input_ids, attention_mask) -> last hidden states (B, L, hidden)`` of a BERT checkpoint folder."""

    def __init__(self, directory: str | Path):
        super().__init__()
        from safetensors.torch import load_file

        directory = Path(directory)
        cfg = json.loads((directory / "config.json").read_text())
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act", "gelu") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise InputError("text encoder", str(directory), "expected a BERT checkpoint (gelu, absolute positions), as all-MiniLM-L6-v2")
        self.heads, self.layers, self.eps = int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"]), float(cfg["layer_norm_eps"])
        weights = load_file(str(directory / "model.safetensors"))
        self.w = torch.nn.ParameterDict({k.replace(".", "/"): torch.nn.Parameter(v, requires_grad=False)
                                         for k, v in weights.items() if not k.startswith("pooler") and k != "embeddings.position_ids"})

    def _p(self, name: str) -> torch.Tensor:
        return self.w[name.replace(".", "/")]

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self._p(f"{name}.weight"), self._p(f"{name}.bias"))

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self._p(f"{name}.weight"), self._p(f"{name}.bias"), self.eps)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, n = input_ids.shape
        # transformers' order of the sums (float addition is not associative)
        x = (self._p("embeddings.word_embeddings.weight")[input_ids] + self._p("embeddings.token_type_embeddings.weight")[0]
             + self._p("embeddings.position_embeddings.weight")[:n])
        x = self._norm(x, "embeddings.LayerNorm")
        d = x.shape[-1] // self.heads
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for i in range(self.layers):
            pre = f"encoder.layer.{i}"
            q, k, v = (self._linear(x, f"{pre}.attention.self.{w}").view(b, n, self.heads, d).transpose(1, 2) for w in ("query", "key", "value"))
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # what transformers' BERT runs (sdpa)
            x = self._norm(x + self._linear(att.transpose(1, 2).reshape(b, n, -1), f"{pre}.attention.output.dense"), f"{pre}.attention.output.LayerNorm")
            h = F.gelu(self._linear(x, f"{pre}.intermediate.dense"))
            x = self._norm(x + self._linear(h, f"{pre}.output.dense"), f"{pre}.output.LayerNorm")
        return x
