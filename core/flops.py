"""FLOP accounting for decoder-only language models: the analytic count GridProbe reports, and a measured one.

Compute budgets are compared in FLOPs of the *language model* forward, the way GridProbe's official
code reports TFLOPs/question (specs/gridprobe.md, B.8): the vision tower is excluded, token counts
come from the processor, and no model call is needed. ``measured_flops`` counts the matmuls torch
actually runs, to keep the analytic formula honest.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import Any, Callable

from core.errors import InputError


@dataclass(frozen=True)
class TransformerDims:
    """The few sizes the FLOP formula needs. ``intermediate`` is the FFN width one token actually uses."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int

    def __post_init__(self):
        for name in ("hidden", "intermediate", "layers", "heads", "kv_heads", "vocab"):
            value = getattr(self, name)
            if not isinstance(value, Integral) or value <= 0:
                raise InputError(name, value, "transformer dimensions are positive integers")

    @classmethod
    def from_config(cls, cfg: Any) -> "TransformerDims":
        """Read a transformers config; for VLM configs the language model's ``text_config`` is used.

        Mixture-of-experts text configs (``num_experts_per_tok`` + ``moe_intermediate_size``) count the
        routed experts each token uses plus any shared experts, as spec B.8 prescribes
        (d_ffn × (n_active + n_shared)); dense layers of a mostly-MoE model are not distinguished.
        """
        cfg = _read(cfg, "text_config") or cfg

        def need(name: str) -> Any:
            value = _read(cfg, name)
            if value is None:
                raise InputError("cfg", type(cfg).__name__, f"the config has no {name!r}; pass a decoder LM or VLM config")
            return value

        heads = need("num_attention_heads")
        intermediate = need("intermediate_size")
        active, moe_width = _read(cfg, "num_experts_per_tok"), _read(cfg, "moe_intermediate_size")
        if active and moe_width:
            shared = _read(cfg, "n_shared_experts") or _read(cfg, "num_shared_experts") or 0
            intermediate = moe_width * (active + shared)
        return cls(
            hidden=need("hidden_size"),
            intermediate=intermediate,
            layers=need("num_hidden_layers"),
            heads=heads,
            kv_heads=_read(cfg, "num_key_value_heads") or heads,
            vocab=need("vocab_size"),
        )


def _read(cfg: Any, name: str) -> Any:
    """An attribute of a config object, or a key of a config dict; None when absent."""
    return cfg.get(name) if isinstance(cfg, dict) else getattr(cfg, name, None)


def transformer_flops(dims: TransformerDims, n_tokens: int) -> float:
    """FLOPs of one forward over ``n_tokens`` tokens (spec B.8), counting 2 FLOPs per multiply-add.

    Per token and layer: Q, K, V projections 2(d² + 2·d·d_kv), attention scores 2Nd and the weighted
    sum of values 2Nd (full N×N, no causal discount, as in the reference), output projection 2d²,
    gated FFN 6·d·d_ffn. Plus the LM head 2·N·d·V. Norms, RoPE and softmax are ignored.
    """
    if not isinstance(n_tokens, Integral) or n_tokens < 0:
        raise InputError("n_tokens", n_tokens, "pass the prompt length in tokens (an integer >= 0)")
    n, d, f = float(n_tokens), float(dims.hidden), float(dims.intermediate)
    d_kv = d * dims.kv_heads / dims.heads
    per_tok_per_layer = 2 * (d * d + 2 * d * d_kv) + 2 * n * d + 2 * n * d + 2 * d * d + 6 * d * f
    return n * dims.layers * per_tok_per_layer + 2 * n * d * dims.vocab


def measured_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """Run ``fn(*args, **kwargs)`` under torch's FLOP counter; return ``(result, flops)``.

    Only ops torch has a formula for are counted (matmuls, convolutions, some attention kernels): a
    CPU fused SDPA kernel may go uncounted, so use ``attn_implementation="eager"`` when comparing
    against ``transformer_flops``.
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        result = fn(*args, **kwargs)
    return result, float(counter.get_total_flops())
