"""The full Bernini release's components at their real sizes, as configs, and what their sizes are published as.

``scale_release(root)`` rewrites the configs of a (tiny) full-release folder to the real ones, so that
``pipelines.bernini.memory`` plans the real release from a folder of a few megabytes (its weights stay tiny; the plan
reads configs only). ``benchmarks/gpu_memory.py`` builds the same sizes from random weights on a GPU.

Published sizes, each with its source (bf16 = 2 bytes per parameter):

- planner: Qwen2.5-VL-7B-Instruct, **8.29B** parameters (Hugging Face model card, "Model size"); its config
  (hidden 3584, 28 layers, intermediate 18944, 28 / 4 heads, vocab 152064; vision 32 blocks of 1280) is the
  Qwen/Qwen2.5-VL-7B-Instruct ``config.json``.
- DiT experts: Wan2.2 A14B, "27B total parameters, two 14B experts" (Wan-Video/Wan2.2 README); each expert's
  bf16 backbone is **28.6 GB** (Wan-AI model card file sizes, i.e. 14.3B parameters); config dim 5120 (40 heads x 128),
  ffn 13824, 40 layers, text_dim 4096, freq_dim 256 (Wan2.2 ``wan/configs/wan_t2v_A14B.py``).
- text encoder: UMT5-XXL's encoder as Wan ships it, ``models_t5_umt5-xxl-enc-bf16.pth``, **11.36 GB** in bf16
  (5.68B parameters); d_model 4096, d_ff 10240, 24 layers, 64 heads of 64, vocab 256384 (google/umt5-xxl).
- VAE: Wan-VAE, **127M** parameters (Wan technical report, arXiv 2503.20314, section 3.1), diffusers'
  ``AutoencoderKLWan`` defaults (base_dim 96, z_dim 16).
"""

from __future__ import annotations

import json
from pathlib import Path

QWEN25_VL_7B_TEXT = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                     "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 128000,
                     "rms_norm_eps": 1e-06, "max_window_layers": 28, "layer_types": ["full_attention"] * 28,
                     "rope_parameters": {"mrope_section": [16, 24, 24], "rope_theta": 1000000.0, "rope_type": "default"}}
QWEN25_VL_7B_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 3584,
                       "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
                       "fullatt_block_indexes": [7, 15, 23, 31]}
WAN22_A14B_EXPERT = {"_class_name": "WanTransformer3DModel", "patch_size": [1, 2, 2], "num_attention_heads": 40,
                     "attention_head_dim": 128, "in_channels": 16, "out_channels": 16, "text_dim": 4096, "freq_dim": 256,
                     "ffn_dim": 13824, "num_layers": 40, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads",
                     "eps": 1e-06, "rope_max_seq_len": 1024}
UMT5_XXL = {"d_model": 4096, "d_ff": 10240, "d_kv": 64, "num_heads": 64, "num_layers": 24, "num_decoder_layers": 24,
            "vocab_size": 256384, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": True}
WAN_VAE = {"base_dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [],
           "temperal_downsample": [False, True, True], "dropout": 0.0}

# the planner's own heads in the release (planners.semantic.planner.SemanticPlannerConfig's docstring) [PORT]
RELEASE_HEADS = {"head_width": 4096, "head_depth": 16, "num_mask_tokens": 4096}

# component -> (published parameters, the check's tolerance is 2%)
PUBLISHED_PARAMS = {"planner (Qwen2.5-VL)": 8.29e9, "transformer (Wan DiT)": 28.6e9 / 2, "transformer_2 (Wan DiT)": 28.6e9 / 2,
                    "text encoder (UMT5)": 11.36e9 / 2, "vae": 127e6}


def _update(path: Path, values: dict, key: str | None = None) -> None:
    cfg = json.loads(path.read_text())
    (cfg[key] if key else cfg).update(values)
    path.write_text(json.dumps(cfg, indent=2))


def scale_release(root: str | Path) -> Path:
    """Rewrite a full-release folder's configs to the real component sizes (its shard files are left as they are)."""
    root = Path(root)
    _update(root / "mllm" / "config.json", QWEN25_VL_7B_TEXT, "text_config")
    _update(root / "mllm" / "config.json", QWEN25_VL_7B_VISION, "vision_config")
    for name in ("transformer_config.json", "transformer_2_config.json"):
        _update(root / name, WAN22_A14B_EXPERT)
    _update(root / "t5_text_encoder" / "config.json", UMT5_XXL)
    _update(root / "vae" / "config.json", WAN_VAE)
    return root


__all__ = ["PUBLISHED_PARAMS", "scale_release"]
