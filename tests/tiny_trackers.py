"""Tiny random SAM 2 / SAM 3 video checkpoints, built fully offline, for testing the real loading path.

Each ``build_tiny_*`` builds transformers' real model and processor classes at toy size with
``torch.manual_seed(0)`` and saves both into ``dir``, so tests load them through
``trackers.load_tracker(dir)`` exactly like a downloaded checkpoint. Sizes are the smallest the
code allows: SAM 2's memory attention reads 64-channel memories (``kv_in_dim=64`` is fixed) and
splits object pointers into memory-sized pieces, so the model width is 128 with 64-channel
memories; Hiera's global-attention blocks may not open a stage. A frame forward takes ~10 ms.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tiny_vlms import _save

SAM2_IMAGE = 64  # pixels; Hiera strides 4, 8, 16 -> 16x16, 8x8, 4x4 feature maps
SAM3_IMAGE, SAM3_PATCH = 112, 14  # ViT 8x8 tokens; FPN 32x32, 16x16, 8x8


def _memory_config(width: int = 128) -> dict:
    """The tracker's memory attention / encoder / fuser at toy depth (shared by SAM 2 and SAM 3)."""
    return dict(memory_attention_hidden_size=width, memory_attention_num_layers=1, memory_attention_feed_forward_hidden_size=64,
                memory_encoder_hidden_size=width, memory_encoder_output_channels=64, mask_downsampler_embed_dim=width,
                memory_fuser_embed_dim=width, memory_fuser_intermediate_dim=64, memory_fuser_num_layers=1)


def _prompt_and_decoder(image_size: int, patch: int, width: int = 128) -> dict:
    return dict(prompt_encoder_config=dict(hidden_size=width, image_size=image_size, patch_size=patch),
                mask_decoder_config=dict(hidden_size=width, mlp_dim=64, num_attention_heads=2, iou_head_hidden_dim=32))


def build_tiny_sam2_video(dir: str | Path) -> Path:
    """SAM 2 video model at ~1M parameters: Hiera with 5 blocks (8..64 channels), 64 px input."""
    from transformers import Sam2ImageProcessor, Sam2VideoConfig, Sam2VideoModel, Sam2VideoProcessor, Sam2VideoVideoProcessor

    s = SAM2_IMAGE
    cfg = Sam2VideoConfig(
        vision_config=dict(
            model_type="sam2_vision_model", fpn_hidden_size=128, backbone_channel_list=[64, 32, 16, 8],
            backbone_feature_sizes=[[s // 4] * 2, [s // 8] * 2, [s // 16] * 2],
            backbone_config=dict(model_type="sam2_hiera_det_model", hidden_size=8, num_attention_heads=1, image_size=[s, s],
                                 blocks_per_stage=[1, 1, 2, 1], embed_dim_per_stage=[8, 16, 32, 64],
                                 num_attention_heads_per_stage=[1, 1, 2, 2], window_size_per_stage=[4, 4, 4, 2],
                                 global_attention_blocks=[3], window_positional_embedding_background_size=[2, 2])),
        image_size=s, memory_attention_rope_feat_sizes=[s // 16, s // 16], **_prompt_and_decoder(s, 16), **_memory_config(),
    )
    proc = Sam2VideoProcessor(
        image_processor=Sam2ImageProcessor(size={"height": s, "width": s}, mask_size={"height": s // 4, "width": s // 4}),
        video_processor=Sam2VideoVideoProcessor(size={"height": s, "width": s}),
    )
    torch.manual_seed(0)
    return _save(Sam2VideoModel(cfg), proc, dir)


def build_clip_tokenizer():
    """A real ``CLIPTokenizer`` with a byte-level character vocabulary (no merges): every word is
    spelled out, which is all a random text encoder needs. No download."""
    from tokenizers import pre_tokenizers
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    return CLIPTokenizer(vocab=vocab, merges=[])


def _sam3_vit(s: int, p: int) -> dict:
    return dict(model_type="sam3_vision_model", fpn_hidden_size=128,
                backbone_feature_sizes=[[4 * s // p] * 2, [2 * s // p] * 2, [s // p] * 2],
                backbone_config=dict(model_type="sam3_vit_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=2, image_size=s, patch_size=p, window_size=4, global_attn_indexes=[1],
                                     pretrain_image_size=4 * p))


def build_tiny_sam3_video(dir: str | Path) -> Path:
    """SAM 3 video model (detector + tracker) at ~3M parameters, 112 px input, 4 queries.

    The random detector's scores sit near 0.25 (sigmoid(0) x sigmoid(0)), so the detection
    thresholds are lowered to let a text prompt propose instances; NMS and the hotstart delay use
    their real code paths."""
    from transformers import Sam2VideoVideoProcessor, Sam3ImageProcessor, Sam3VideoConfig, Sam3VideoModel, Sam3VideoProcessor

    s, p = SAM3_IMAGE, SAM3_PATCH
    tok = build_clip_tokenizer()
    width, layer = 128, dict(num_layers=1, num_attention_heads=2, intermediate_size=64)
    detector = dict(
        vision_config=_sam3_vit(s, p),
        text_config=dict(model_type="clip_text_model", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         projection_dim=32, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=32,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        geometry_encoder_config=dict(hidden_size=width, **layer), detr_encoder_config=dict(hidden_size=width, **layer),
        detr_decoder_config=dict(hidden_size=width, num_queries=4, **layer),
        mask_decoder_config=dict(hidden_size=width, num_upsampling_stages=3, num_attention_heads=2),
    )
    tracker = dict(vision_config=_sam3_vit(s, p), **_prompt_and_decoder(s, p), **_memory_config())
    cfg = Sam3VideoConfig(detector_config=detector, tracker_config=tracker, low_res_mask_size=4 * s // p,
                          score_threshold_detection=0.2, new_det_thresh=0.2, hotstart_delay=2, hotstart_unmatch_thresh=1,
                          hotstart_dup_thresh=1)
    cfg.image_size = s  # propagates to detector, tracker, their feature sizes and RoPE tables
    mask = 4 * s // p
    proc = Sam3VideoProcessor(
        image_processor=Sam3ImageProcessor(size={"height": s, "width": s}, mask_size={"height": mask, "width": mask}),
        video_processor=Sam2VideoVideoProcessor(size={"height": s, "width": s}), tokenizer=tok,
    )
    torch.manual_seed(0)
    return _save(Sam3VideoModel(cfg), proc, dir)


BUILDERS = {
    "sam2": build_tiny_sam2_video,
    "sam3": build_tiny_sam3_video,
}
