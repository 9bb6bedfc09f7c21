"""Tiny real HUMOR components for tests: a small causal LM overfit in seconds on three direct captions of one
scene (``num_paths=0``: short, so a few steps make its samples parse), and a tiny random builtin reward model."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=1)
def scene_and_perception():
    from planners.builtin import load_builtin_vlm
    from planners.meme_perception import perceive
    from training.humor_data import make_scene

    s = make_scene("test", 2, perception="-")
    s.perception = perceive(load_builtin_vlm(), s.still).text
    return s


def tiny_writer(steps: int = 80, seed: int = 0):
    from planners.meme_lm import BuiltinMemeWriter, MemeLMConfig, lm_prompt, new_meme_lm, train_tokenizer
    from training.humor_data import trace

    s = scene_and_perception()
    prompt = lm_prompt(s.perception, None, 0)
    texts = [prompt + trace(s, gt, [], 0) + "<|endoftext|>" for gt in (0, 1, 2)]
    tok = train_tokenizer(texts, vocab_size=400)
    model = new_meme_lm(tok, MemeLMConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                          max_position_embeddings=512), seed=seed)
    ids = [torch.tensor(tok(t)["input_ids"]) for t in texts]
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2)
    model.train()
    for step in range(steps):
        x = ids[step % 3][None]
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return BuiltinMemeWriter(model.eval(), tok)


def tiny_reward_model(seed: int = 0):
    from planners.meme_reward import BuiltinMemeRM, MemeRMConfig

    torch.manual_seed(seed)
    return BuiltinMemeRM(MemeRMConfig(width=32, heads=2, layers=1)).eval()
