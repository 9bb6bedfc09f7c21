"""Tiny random Wan renderer folders, built fully offline, for testing the real loading path.

``build_tiny_bernini_r(dir)`` writes what the public ``Bernini-R-Diffusers`` release holds, at toy
size and with ``torch.manual_seed(0)``: ``transformer/`` (``WanTransformer3DModel``), optionally
``transformer_2/`` (the low-noise expert), ``vae/`` (``AutoencoderKLWan``), ``scheduler/`` (UniPC,
flow prediction), optionally ``text_encoder/`` + ``tokenizer/`` (UMT5 and a byte-level BPE), and the
root ``config.json`` of ``model_type: bernini_renderer``. Each part is saved with its own library's
``save_pretrained``, so the renderer's loader reads a folder it did not write.
Sizes follow ``shared/reference/stack_recipes.md`` section 2 (each forward takes milliseconds).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

TEXT_DIM = 32
MAX_SEQUENCE_LENGTH = 16

# 2 heads x 12 channels: 6 complex pairs per head, split (2, 2, 2) over frame / height / width.
TRANSFORMER_CONFIG = {"patch_size": (1, 2, 2), "num_attention_heads": 2, "attention_head_dim": 12,
                      "in_channels": 16, "out_channels": 16, "text_dim": TEXT_DIM, "freq_dim": 32, "ffn_dim": 32,
                      "num_layers": 2, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads",
                      "rope_max_seq_len": 32}

# Three spatial downsamplings (x8) and two temporal ones (x4), like the real Wan VAE, at 3 base channels.
VAE_CONFIG = {"base_dim": 3, "z_dim": 16, "dim_mult": [1, 1, 1, 1], "num_res_blocks": 1,
              "temperal_downsample": [False, True, True]}


def tiny_transformer(seed: int = 0):
    """A ~30k-parameter ``WanTransformer3DModel`` in eval mode."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    return WanTransformer3DModel(**TRANSFORMER_CONFIG).eval()


def tiny_vae(seed: int = 0):
    """A ~14k-parameter ``AutoencoderKLWan`` in eval mode."""
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
    return AutoencoderKLWan(**VAE_CONFIG).eval()


def tiny_text_encoder(seed: int = 0):
    """A 2-layer UMT5 encoder (d_model = the transformer's ``text_dim``) and its tokenizer."""
    from tiny_vlms import build_bpe_tokenizer
    from transformers import UMT5Config, UMT5EncoderModel

    tok = build_bpe_tokenizer(["<|endoftext|>", "</s>"], eos="</s>")
    torch.manual_seed(seed)
    cfg = UMT5Config(vocab_size=len(tok), d_model=TEXT_DIM, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                     pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, decoder_start_token_id=0)
    # .eval() matters: T5's dropout (0.1) would make every encoding different.
    return UMT5EncoderModel(cfg).eval(), tok


def build_tiny_bernini_r(dir: str | Path, *, two_experts: bool = False, text_encoder: bool = True,
                         root_config: bool = True) -> Path:
    """Save a tiny Bernini-R-style folder into ``dir`` and return it.

    ``two_experts``: also write ``transformer_2/`` (Wan2.2 A14B layout, switch at t = 875).
    ``text_encoder``: write ``text_encoder/`` and ``tokenizer/``; without them callers pass embeddings.
    ``root_config``: write the release's root ``config.json``; without it the folder looks like a stock
    Wan diffusers folder (``model_index.json`` only).
    """
    from diffusers import UniPCMultistepScheduler

    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    tiny_transformer(0).save_pretrained(dir / "transformer")
    if two_experts:
        tiny_transformer(1).save_pretrained(dir / "transformer_2")
    tiny_vae(0).save_pretrained(dir / "vae")
    UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
                            solver_order=2, solver_type="bh2").save_pretrained(dir / "scheduler")
    if text_encoder:
        te, tok = tiny_text_encoder(0)
        te.save_pretrained(dir / "text_encoder")
        tok.save_pretrained(dir / "tokenizer")
    if root_config:
        # The keys of the release's root config.json (ByteDance/Bernini-R-Diffusers).
        cfg = {"model_type": "bernini_renderer", "architectures": ["BerniniRendererModel"],
               "skip_transformer_1": False, "skip_transformer_2": not two_experts,
               "switch_dit_boundary": 0.875 if two_experts else 0.0, "max_sequence_length": MAX_SEQUENCE_LENGTH,
               "shift": 3.0, "use_unipc": True, "use_src_id_rotary_emb": True}
        (dir / "config.json").write_text(json.dumps(cfg, indent=2))
    else:
        index = {"_class_name": "WanPipeline", "boundary_ratio": 0.875 if two_experts else None,
                 "transformer": ["diffusers", "WanTransformer3DModel"], "vae": ["diffusers", "AutoencoderKLWan"],
                 "scheduler": ["diffusers", "UniPCMultistepScheduler"]}
        (dir / "model_index.json").write_text(json.dumps(index, indent=2))
    return dir
