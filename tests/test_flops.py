"""Analytic LM FLOPs (GridProbe spec B.8) against a hand computation and against torch's FLOP counter."""

from __future__ import annotations

import pytest
import torch

from core.errors import InputError
from core.flops import TransformerDims, measured_flops, transformer_flops

DIMS = TransformerDims(hidden=64, intermediate=176, layers=2, heads=4, kv_heads=2, vocab=512)


def test_matches_a_hand_computation():
    # d=64, d_kv=64*2/4=32, d_ffn=176, N=10, L=2, V=512
    # per token and layer: 2(4096 + 4096) + 2*10*64 + 2*10*64 + 2*4096 + 6*64*176
    #                    = 16384 + 1280 + 1280 + 8192 + 67584 = 94720
    # F = 10*2*94720 + 2*10*64*512 = 1894400 + 655360 = 2549760
    assert transformer_flops(DIMS, 10) == 2_549_760
    assert transformer_flops(DIMS, 0) == 0


def test_attention_term_is_quadratic_in_tokens():
    f = lambda n: transformer_flops(DIMS, n)  # noqa: E731
    # F(N) = a*N + b*N^2, so the second difference is 2b = 2 * L * 4d
    assert f(3) - 2 * f(2) + f(1) == pytest.approx(2 * DIMS.layers * 4 * DIMS.hidden)


def test_from_config_reads_text_config_and_moe():
    from transformers import Qwen2Config

    text = dict(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2)
    assert TransformerDims.from_config(Qwen2Config(**text)) == DIMS
    assert TransformerDims.from_config({"text_config": text}) == DIMS  # VLM-style nesting
    no_kv = {k: v for k, v in text.items() if k != "num_key_value_heads"}
    assert TransformerDims.from_config(no_kv).kv_heads == 4  # defaults to full multi-head attention
    moe = dict(text, moe_intermediate_size=32, num_experts_per_tok=4, n_shared_experts=1)
    assert TransformerDims.from_config(moe).intermediate == 32 * 5
    with pytest.raises(InputError, match="vocab_size"):
        TransformerDims.from_config({k: v for k, v in text.items() if k != "vocab_size"})
    with pytest.raises(InputError):
        transformer_flops(DIMS, -1)


def _tiny_qwen2(attn_implementation: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=DIMS.vocab, hidden_size=DIMS.hidden, intermediate_size=DIMS.intermediate,
                      num_hidden_layers=DIMS.layers, num_attention_heads=DIMS.heads, num_key_value_heads=DIMS.kv_heads,
                      max_position_embeddings=256, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                      attn_implementation=attn_implementation)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).eval()


@pytest.mark.parametrize("n_tokens", [16, 96])
def test_formula_counts_every_matmul_of_a_real_forward(n_tokens):
    """With eager attention every FLOP the formula names is a matmul torch counts, and nothing else is:
    projections, QK^T and AV on all query heads (GQA repeats K/V), gated MLP, LM head over all
    positions. Norms, RoPE and softmax are elementwise and neither side counts them, so they agree."""
    model = _tiny_qwen2("eager")
    ids = torch.randint(0, DIMS.vocab, (1, n_tokens), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out, flops = measured_flops(model, input_ids=ids, use_cache=False)
    assert out.logits.shape == (1, n_tokens, DIMS.vocab)
    assert transformer_flops(TransformerDims.from_config(model.config), n_tokens) == pytest.approx(flops, rel=1e-9)


def test_formula_bounds_the_default_attention_forward():
    """With the default SDPA attention the CPU's fused kernel has no FLOP formula in torch, so the
    counter misses the 4·N²·d·L attention term: analytic >= measured. The bound is loose (factor 2)
    but meaningful: projections, MLP and LM head, the bulk of the cost at this length, must still agree."""
    model = _tiny_qwen2("sdpa")
    ids = torch.randint(0, DIMS.vocab, (1, 96), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, flops = measured_flops(model, input_ids=ids, use_cache=False)
    ratio = transformer_flops(DIMS, 96) / flops
    assert 0.99 <= ratio < 2.0
