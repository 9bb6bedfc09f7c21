"""The builtin text encoder (all-MiniLM-L6-v2 through the tokenizers library and ``SmallBert``) computes what
transformers' tokenizer and ``BertModel`` compute on the same weights, bit for bit."""

from __future__ import annotations

import torch

from planners.builtin.text import MAX_TOKENS, MiniLM, minilm_path

TEXTS = ["the red circle that disappears first", "Make the person raise the LEFT arm!", "a", "émigré café, naïve — x" * 3,
         " ".join(["word"] * (MAX_TOKENS + 10))]


def test_small_bert_matches_transformers():
    from transformers import AutoModel, AutoTokenizer

    path = str(minilm_path())
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    ours = MiniLM()
    with torch.no_grad():
        enc = tok(TEXTS, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
        ref = model(**enc).last_hidden_state
    hidden, mask = ours._forward(TEXTS)
    assert torch.equal(mask, enc["attention_mask"])
    assert torch.equal(hidden[mask.bool()], ref[mask.bool()]), (hidden - ref)[mask.bool()].abs().max()  # bit for bit
    sims = ours.encode(["a red star", "a crimson star", "a blue square"])
    assert sims[0] @ sims[1] > sims[0] @ sims[2]


def test_the_encoder_does_not_import_transformers():
    import subprocess
    import sys

    code = "import sys\nfrom planners.builtin.text import MiniLM\nMiniLM().encode(['hi'])\nprint(any(m.startswith('transformers') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr[-2000:]
