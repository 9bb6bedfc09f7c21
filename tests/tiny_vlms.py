"""Tiny random transformers VLM checkpoints, built fully offline, for testing the real loading path.

Each ``build_tiny_*`` trains a ~400-token byte-level BPE in milliseconds, builds the family's
real processor and model classes at toy size with ``torch.manual_seed(0)``, and saves both into
``dir`` so tests go through ``from_pretrained(dir)`` exactly like a downloaded checkpoint.
Sizes follow ``shared/reference/stack_recipes.md`` section 3 (each forward takes milliseconds).
"""

from __future__ import annotations

from pathlib import Path

import torch

# Text the tokenizer is trained on: MCQ scaffolding, option letters in every surface form we score,
# and a few everyday words so prompts do not shatter into single bytes.
_CORPUS = [
    "Question: what colour is the square? Options: (A) red (B) green (C) blue (D) yellow",
    "Answer with the option's letter from the given choices directly.",
    "A B C D E F G H I J",
    "A. B. C. D. E. F. G. H. I. J.",
    "(A (B (C (D (E (F (G (H (I (J",
    "A) B) C) D) E) F) G) H) I) J) A: B: C: D: E: F: G: H: I: J:",
    "The answer is A. The answer is B. The answer is C. The answer is D.",
    "Describe the image. Describe the video. How many circles move to the left?",
    "a red circle, a green square, a blue triangle, a yellow star and a stick figure",
    "Which object appears first in the video? Which object appears last?",
    "You are provided the following series of four frames from a video. Frame from",
    "user assistant system Assistant: User:",
    "0 1 2 3 4 5 6 7 8 9 00:00 00:01 00:02 00:03 seconds",
]

_QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>", "<|vision_pad|>"]

_QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_SMOL_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<image>", "<fake_token_around_image>",
                  "<global-img>", "<video>"] + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]

# SmolVLM's processor expands "<image>" / "<video>" itself; the template only places them.
_SMOL_TEMPLATE = (
    "<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}:"
    "{% if m['content'] is string %} {{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>{% elif c['type'] == 'video' %}<video>"
    "{% elif c['type'] == 'text' %} {{ c['text'] }}{% endif %}{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


def build_bpe_tokenizer(specials: list[str], eos: str, vocab_size: int = 400):
    """A byte-level BPE trained on ``_CORPUS``: a real fast tokenizer, no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(_CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=eos, pad_token="<|endoftext|>",
                                   additional_special_tokens=[s for s in specials if s != "<|endoftext|>"])


def _qwen_text_config(tok, **extra) -> dict:
    rope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]}  # sum = head_dim / 2
    rope.update(extra.pop("rope", {}))
    return dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=512, bos_token_id=None, eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id, rope_parameters=rope, **extra)


def _qwen_token_ids(tok) -> dict:
    ids = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
           "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"}
    return {k: tok.convert_tokens_to_ids(v) for k, v in ids.items()}


def _save(model, processor, dir: str | Path) -> Path:
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(dir)
    processor.save_pretrained(dir)
    return dir


def build_tiny_qwen2_5_vl(dir: str | Path) -> Path:
    """Qwen2.5-VL at ~200k parameters (2 text layers, hidden 64; 2 windowed ViT blocks)."""
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor,
                              Qwen2VLImageProcessor, Qwen2VLVideoProcessor)

    tok = build_bpe_tokenizer(_QWEN_SPECIALS, eos="<|im_end|>")
    cfg = Qwen2_5_VLConfig(
        text_config=_qwen_text_config(tok),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1]),
        **_qwen_token_ids(tok),
    )
    proc = Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112),
                               tokenizer=tok, chat_template=_QWEN_TEMPLATE,
                               video_processor=Qwen2VLVideoProcessor(min_pixels=56 * 56, max_pixels=112 * 112))
    torch.manual_seed(0)
    return _save(Qwen2_5_VLForConditionalGeneration(cfg), proc, dir)


def build_tiny_qwen3_vl(dir: str | Path) -> Path:
    """Qwen3-VL at ~240k parameters (interleaved M-RoPE, one deepstack layer)."""
    from transformers import (Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor,
                              Qwen3VLVideoProcessor)

    tok = build_bpe_tokenizer(_QWEN_SPECIALS, eos="<|im_end|>")
    cfg = Qwen3VLConfig(
        text_config=_qwen_text_config(tok, head_dim=16, rope={"mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                           deepstack_visual_indexes=[1]),
        **_qwen_token_ids(tok),
    )
    proc = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(patch_size=16, min_pixels=64 * 64, max_pixels=128 * 128),
        tokenizer=tok, chat_template=_QWEN_TEMPLATE,
        video_processor=Qwen3VLVideoProcessor(patch_size=16, size={"shortest_edge": 64 * 64, "longest_edge": 128 * 128}),
    )
    torch.manual_seed(0)
    return _save(Qwen3VLForConditionalGeneration(cfg), proc, dir)


def build_tiny_smolvlm(dir: str | Path) -> Path:
    """SmolVLM (Idefics3 family) at ~150k parameters: 32 px images, 4 tokens per image, no splitting."""
    from transformers import (SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMImageProcessor, SmolVLMProcessor,
                              SmolVLMVideoProcessor)

    tok = build_bpe_tokenizer(_SMOL_SPECIALS, eos="<end_of_utterance>")
    image_size, patch, scale = 32, 8, 2
    cfg = SmolVLMConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=image_size, patch_size=patch),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        scale_factor=scale, image_token_id=tok.convert_tokens_to_ids("<image>"),
    )
    edge = {"longest_edge": image_size}
    proc = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(do_image_splitting=False, size=edge, max_image_size=edge),
        video_processor=SmolVLMVideoProcessor(size=edge, max_image_size=edge),
        tokenizer=tok, image_seq_len=(image_size // patch) ** 2 // scale**2, chat_template=_SMOL_TEMPLATE,
    )
    torch.manual_seed(0)
    return _save(SmolVLMForConditionalGeneration(cfg), proc, dir)


def build_tiny_idefics3(dir: str | Path) -> Path:
    """Idefics3 at SmolVLM's tiny size; its processor has no video support (videos go in as several images)."""
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessor, Idefics3Processor

    tok = build_bpe_tokenizer(_SMOL_SPECIALS, eos="<end_of_utterance>")
    image_size, patch, scale = 32, 8, 2
    cfg = Idefics3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=image_size, patch_size=patch),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        scale_factor=scale, image_token_id=tok.convert_tokens_to_ids("<image>"),
    )
    edge = {"longest_edge": image_size}
    proc = Idefics3Processor(image_processor=Idefics3ImageProcessor(do_image_splitting=False, size=edge, max_image_size=edge),
                             tokenizer=tok, image_seq_len=(image_size // patch) ** 2 // scale**2,
                             chat_template=_SMOL_TEMPLATE)
    torch.manual_seed(0)
    return _save(Idefics3ForConditionalGeneration(cfg), proc, dir)


BUILDERS = {
    "qwen2.5-vl": build_tiny_qwen2_5_vl,
    "qwen3-vl": build_tiny_qwen3_vl,
    "smolvlm": build_tiny_smolvlm,
    "idefics3": build_tiny_idefics3,
}
