"""HUMOR's hf path against the official code (issue 47, item 3), offline and small.

- The author's reward model in its released layout (a tiny Qwen2.5-VL base, a LoRA adapter saved by peft, and
  ``classification_head.pt`` written with ``torch.save`` in the author's dict layout and key names) loads through
  ``load_reward_model`` and through ``atelier meme --reward-model DIR``, and scores pairs; a head with a tensor
  missing or renamed is an error naming the key.
- The attention pooling + head, written here from the author's definition (classification_head.py), equals ours.
- The format reward, re-implemented here from LightRFT ``meme_utils.compute_meme_format_reward``, equals ours on
  imperfect outputs; the judge parser and normalisation on fixed strings; the prompt texts byte-exact.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

import numpy as np
import pytest
import torch

from core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_thread")
HIDDEN = 64  # tiny_vlms' Qwen2.5-VL text width

peft = pytest.importorskip("peft", reason="the LoRA adapter fixture needs peft (pip install 'atelier[lora]')")


# ---- the released layout, tiny ------------------------------------------------------------------------


def official_head_state(hidden: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"classification_head": {"weight": torch.randn(2, hidden, generator=g), "bias": torch.randn(2, generator=g)},
            "attention_pooling": {"k.weight": torch.randn(hidden, hidden, generator=g) * 0.2,
                                  "v.weight": torch.randn(hidden, hidden, generator=g) * 0.2,
                                  "query": torch.randn(hidden, generator=g)}}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    from tiny_vlms import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("qwen_base"))


@pytest.fixture(scope="module")
def official_dir(base_dir, tmp_path_factory):
    """An adapter folder as LLaMA-Factory's LoRA run leaves it: adapter_config.json (naming the base),
    adapter_model.safetensors, classification_head.pt."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    out = tmp_path_factory.mktemp("humor_rm")
    torch.manual_seed(1)
    model = AutoModelForImageTextToText.from_pretrained(str(base_dir))
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False)
    get_peft_model(model, lora).save_pretrained(str(out))
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base_dir)
    torch.save(official_head_state(HIDDEN), out / "classification_head.pt")
    return out


@pytest.fixture(scope="module")
def memes():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (56, 56, 3), dtype=np.uint8), rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def loaded(official_dir):
    from planners.meme_reward import load_reward_model

    return load_reward_model(str(official_dir))


# ---- the author's pooling + head, from its definition ------------------------------------------------------


def official_logits(hidden_states: torch.Tensor, state: dict, heads: int = 4) -> torch.Tensor:
    """classification_head.py: k, v = Linear(no bias); query reshaped to (heads, d); (q @ k^T) * d^-0.5 + arange(S)
    / S * 3.0; softmax over S; @ v; heads concatenated; then the Linear(hidden, 2) head."""
    B, S, C = hidden_states.shape
    d = C // heads
    ap, ch = state["attention_pooling"], state["classification_head"]
    k = (hidden_states @ ap["k.weight"].T).reshape(B, S, heads, d).permute(0, 2, 1, 3)
    v = (hidden_states @ ap["v.weight"].T).reshape(B, S, heads, d).permute(0, 2, 1, 3)
    q = ap["query"].unsqueeze(0).expand(B, -1).reshape(B, heads, 1, d)
    attn = (q @ k.transpose(-2, -1)) * d ** -0.5 + (torch.arange(S).float() / S * 3.0).view(1, 1, 1, -1)
    pooled = (torch.softmax(attn, -1) @ v).squeeze(2).reshape(B, -1)
    return pooled @ ch["weight"].T + ch["bias"]


def test_pooling_and_head_equal_the_official_definition_on_random_hidden_states():
    from planners.meme_reward import AttentionPooling

    state = official_head_state(HIDDEN, seed=3)
    pool = AttentionPooling(HIDDEN)
    pool.load_state_dict(state["attention_pooling"])  # strict: the author's keys are ours, no output projection
    head = torch.nn.Linear(HIDDEN, 2)
    head.load_state_dict(state["classification_head"])
    for S in (1, 7, 300):
        h = torch.randn(3, S, HIDDEN, generator=torch.Generator().manual_seed(S))
        torch.testing.assert_close(head(pool(h)), official_logits(h, state), rtol=1e-5, atol=1e-5)


def test_the_released_layout_loads_and_scores_a_pair(loaded, official_dir, base_dir, memes):
    from planners.meme_reward import HFPairwiseRM

    assert isinstance(loaded, HFPairwiseRM) and loaded.decision == "argmax" and loaded.render_style == "official"
    state = torch.load(official_dir / "classification_head.pt", weights_only=True)
    torch.testing.assert_close(loaded.pool.k.weight.detach(), state["attention_pooling"]["k.weight"])
    # the adapter is merged: the attention weights differ from the base's
    from transformers import AutoModelForImageTextToText

    base = dict(AutoModelForImageTextToText.from_pretrained(str(base_dir)).named_parameters())
    merged = dict(loaded.vlm.model.named_parameters())
    assert set(merged) == set(base)  # merged away: no LoRA modules left
    name = next(k for k in base if k.endswith("layers.0.self_attn.q_proj.weight"))
    assert not torch.allclose(merged[name].detach(), base[name].detach())
    assert torch.equal(merged[name.replace("q_proj", "mlp.gate_proj").replace("self_attn.", "")].detach(),
                       base[name.replace("q_proj", "mlp.gate_proj").replace("self_attn.", "")].detach())
    # logits = the official pooling + head over the model's last hidden states (AutoModel's last_hidden_state)
    a, b = memes
    with torch.no_grad():
        inputs = loaded.vlm._chat_inputs(loaded.messages(a, b))
        h = loaded.vlm.model.model(**inputs).last_hidden_state.float()
        torch.testing.assert_close(loaded(a, b), official_logits(h, state), rtol=1e-4, atol=1e-4)
        expected = float(int(torch.argmax(official_logits(h, state)[0])) == 0)
    assert loaded.prefer_rendered(a, b) == expected
    p = loaded.prefer(np.full((64, 64, 3), 200, np.uint8), ("when the code works", "it does not"), ("me", "also me"))
    assert p in (0.0, 1.0)


def test_the_critic_prompt_is_the_authors_row(loaded, memes):
    from planners.meme_prompts import CRITIC_PAIR_SUFFIX, CRITIC_PROMPT

    row = CRITIC_PROMPT + CRITIC_PAIR_SUFFIX
    assert len(row) == 897 and hashlib.sha256(row.encode()).hexdigest().startswith("edea496573e0")
    system, user = loaded.messages(*memes)
    assert system.role == "system" and system.content[0].text == "You are a helpful assistant."
    assert "".join(p.text if hasattr(p, "text") else "<image>" for p in user.content) == row


def test_the_decisions_are_named(official_dir, loaded, memes):
    from planners.meme_reward import load_pairwise_rm

    ours = load_pairwise_rm(official_dir, decision="softmax_symmetrised")
    a, b = memes
    p = ours.prefer_rendered(a, b)
    assert 0 < p < 1 and p + ours.prefer_rendered(b, a) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(InputError, match="decision"):
        load_pairwise_rm(official_dir, decision="mean")


def test_the_meme_cli_takes_the_released_folder(official_dir, tmp_path, capsys):
    from PIL import Image

    from app.cli import main
    from worldgen.tasks import meme

    image = tmp_path / "template.png"
    Image.fromarray(meme.generate(7).images["still"]).save(image)
    assert main(["meme", str(image), "--reward-model", str(official_dir), "-n", "2", "--seed", "1", "--json", "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["memes"] and all(m["reward"] in (0.0, 1.0) for m in res["memes"])  # one argmax per pair


@pytest.mark.parametrize("group,key,how", [("attention_pooling", "k.weight", "drop"), ("attention_pooling", "query", "rename"),
                                           ("classification_head", "bias", "drop"), ("classification_head", "weight", "rename")])
def test_a_head_missing_one_tensor_names_it(official_dir, tmp_path, group, key, how):
    import shutil

    from planners.meme_reward import load_reward_model

    broken = tmp_path / "broken"
    shutil.copytree(official_dir, broken)
    state = official_head_state(HIDDEN)
    tensor = state[group].pop(key)
    if how == "rename":
        state[group][key + "_renamed"] = tensor
    torch.save(state, broken / "classification_head.pt")
    with pytest.raises(InputError, match=re.escape(f"{group}.{key}")):
        load_reward_model(str(broken))


def test_other_broken_heads_raise_and_never_fall_back(official_dir, tmp_path):
    import shutil

    from planners.meme_reward import load_reward_model

    old = tmp_path / "old_format"
    shutil.copytree(official_dir, old)
    torch.save(official_head_state(HIDDEN)["classification_head"], old / "classification_head.pt")
    with pytest.raises(InputError, match="attention_pooling"):
        load_reward_model(str(old))
    wrong = tmp_path / "wrong_size"
    shutil.copytree(official_dir, wrong)
    torch.save(official_head_state(32), wrong / "classification_head.pt")
    with pytest.raises(InputError, match=r"classification_head\.weight"):
        load_reward_model(str(wrong))
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "reward_head.safetensors").write_bytes(b"")
    with pytest.raises(InputError, match="output projection"):
        load_reward_model(str(legacy))
    lost = tmp_path / "adapter_without_weights"
    shutil.copytree(official_dir, lost)
    (lost / "adapter_model.safetensors").unlink()
    with pytest.raises(InputError, match="adapter_model.safetensors"):
        load_reward_model(str(lost))


def test_our_saved_head_is_the_authors_layout_and_round_trips(base_dir, tmp_path, memes):
    from planners.loading import load_vlm
    from planners.meme_reward import HFPairwiseRM, load_reward_model

    rm = HFPairwiseRM(load_vlm(str(base_dir)))
    torch.nn.init.normal_(rm.head.weight)
    rm.save_pretrained(tmp_path / "rm")
    state = torch.load(tmp_path / "rm" / "classification_head.pt", weights_only=True)
    assert set(state) == {"classification_head", "attention_pooling"}
    assert set(state["attention_pooling"]) == {"k.weight", "v.weight", "query"}
    again = load_reward_model(str(tmp_path / "rm"))
    assert again.decision == "softmax_symmetrised"
    assert again.prefer_rendered(*memes) == pytest.approx(rm.prefer_rendered(*memes), abs=1e-6)


# ---- the LightRFT pairwise judge ----------------------------------------------------------------------------


def official_parse(text):
    """reward_model.parse_pair_judge_response, from its definition."""
    text = (text or "").strip()
    if not text:
        return 0.5, 0.5
    s = [re.search(rf"Image\s*{k}\s*score\s*[:：]\s*([0-9]+(?:\.[0-9]+)?)", text, re.I) for k in (1, 2)]
    if s[0] and s[1]:
        return float(s[0].group(1)), float(s[1].group(1))
    w = re.search(r"Winner\s*[:：]\s*(1|2|tie)", text, re.I)
    if w:
        return {"1": (1.0, 0.0), "2": (0.0, 1.0)}.get(w.group(1).lower(), (0.5, 0.5))
    nums = re.findall(r"([0-9]+(?:\.[0-9]+)?)", text)
    return (float(nums[0]), float(nums[1])) if len(nums) >= 2 else (0.5, 0.5)


REPLIES = [
    ("Image 1 score: 7\nImage 2 score: 3\nWinner: 1\nReason: sharper.", (7.0, 3.0), (0.7, 0.3)),
    ("image 1 score：8.5\nIMAGE 2 SCORE: 1.5", (8.5, 1.5), (0.85, 0.15)),
    ("Image 1 score: 0\nImage 2 score: 0\nWinner: tie", (0.0, 0.0), (0.5, 0.5)),
    ("Image 1 score: 9\nWinner: 2\nReason: x", (0.0, 1.0), (0.0, 1.0)),
    ("winner: TIE", (0.5, 0.5), (0.5, 0.5)),
    ("Winner：1", (1.0, 0.0), (1.0, 0.0)),
    ("Image 1 score: 6", (1.0, 6.0), (1 / 7, 6 / 7)),  # the third fallback reads "1" and "6"
    ("I would give 4 and 6 out of 10", (4.0, 6.0), (0.4, 0.6)),
    ("**Image 1 score:** 7\n**Image 2 score:** 2", (1.0, 7.0), (0.125, 0.875)),  # markdown breaks the score pattern
    ("only 5", (0.5, 0.5), (0.5, 0.5)),
    ("", (0.5, 0.5), (0.5, 0.5)),
    ("   \n", (0.5, 0.5), (0.5, 0.5)),
    ("no numbers at all", (0.5, 0.5), (0.5, 0.5)),
]


@pytest.mark.parametrize("reply,scores,rewards", REPLIES)
def test_the_judge_parser_and_normalisation_are_the_published_ones(reply, scores, rewards):
    from planners.meme_ranking import normalise_pair, official_pair_rewards, official_pair_scores

    assert official_pair_scores(reply) == official_parse(reply) == scores
    total = sum(scores)
    expected = (0.5, 0.5) if total <= 0 else (scores[0] / total, scores[1] / total)
    assert official_pair_rewards(reply) == pytest.approx(expected)
    assert expected == pytest.approx(rewards)
    assert normalise_pair(*scores) == pytest.approx(expected)
    assert official_pair_scores(None) == (0.5, 0.5)


def test_the_judge_message_is_the_published_one(base_dir, memes):
    from planners.meme_prompts import REWARD_COMPARE_PROMPT
    from planners.meme_reward import VLMJudgeRM, load_reward_model

    assert len(REWARD_COMPARE_PROMPT) == 669 and hashlib.sha256(REWARD_COMPARE_PROMPT.encode()).hexdigest().startswith("7d1088adac60")
    judge = load_reward_model(str(base_dir))
    assert isinstance(judge, VLMJudgeRM) and (judge.parser, judge.order, judge.render_style) == ("official", "once", "official")
    [turn] = judge.messages(*memes, text_a=judge.extracted_text(["top", "bottom"]), text_b="", user_request=None)
    text0, img1, text1, img2 = turn.content
    assert text0.text.endswith("\n\nCandidate 1 image:") and text1.text == "Candidate 2 image:"
    assert "User request:\nN/A\n" in text0.text and "Candidate 1 extracted text:\ntop\\nbottom\n" in text0.text
    assert "Candidate 2 extracted text:\n(empty)\n" in text0.text
    calls = []
    judge.reply = lambda *args: calls.append(args) or "Image 1 score: 6\nImage 2 score: 2"
    assert judge.prefer(np.zeros((64, 64, 3), np.uint8), ("a", "b"), ("c", "d"), user_request="mondays") == pytest.approx(0.75)
    assert len(calls) == 1 and calls[0][2:] == ("a\\nb", "c\\nd", "mondays")  # each pair once, a first
    judge.order, calls[:] = "both", []
    assert judge.prefer(np.zeros((64, 64, 3), np.uint8), ("a", "b"), ("c", "d")) == pytest.approx(0.5)
    assert len(calls) == 2


# ---- the published format reward ----------------------------------------------------------------------------


def official_format(response: str, expected_boxes=None) -> float:
    """meme_utils.compute_meme_format_reward, from its definition."""
    def assistant(t):
        if "<|im_start|>assistant" in t:
            return t.split("<|im_start|>assistant")[-1].strip()
        if "assistant\n" in t:
            return t.split("assistant\n")[-1].strip()
        return t.strip()

    def boxes(t):
        m = re.search(r"Text on the Meme:\s*(.*)$", assistant(t), re.IGNORECASE | re.DOTALL)
        section = m.group(1).strip() if m else ""
        if not section:
            return []
        found = [x.group(2).strip().strip('"').strip()
                 for x in re.finditer(r"(?im)^\s*box\s*(\d+)\s*:\s*(.*?)(?=^\s*box\s*\d+\s*:|\Z)", section, re.DOTALL)]
        found = [x for x in found if x]
        return found or [ln.strip().strip('"').strip() for ln in section.splitlines() if ln.strip().strip('"').strip()]

    r = assistant(response)
    heads = [r"\[Comprehensive Description Section\]", r"\[Usage Scenarios Section\]", r"\[Text Analysis Section\]",
             r"\[Specific Analysis with User Input\]", r"Text on the Meme:"]
    passed = sum(bool(re.search(h, r, re.IGNORECASE)) for h in heads)
    passed += bool(re.search(r"(?im)^\s*Step\s*1\s*:", r)) + bool(re.search(r"(?im)^\s*Step\s*2\s*:", r))
    frags = boxes(r)
    passed += bool(frags) + bool(frags and all(f.strip() for f in frags))
    checks = 9
    if expected_boxes is not None and expected_boxes > 0:
        checks += 1
        passed += len(frags) == expected_boxes
    return passed / checks


CLEAN = ("[Comprehensive Description Section]\nA cat.\n\n[Usage Scenarios Section]\nChats.\n\n[Text Analysis Section]\n"
         "Setup, payoff.\n\n[Specific Analysis with User Input]\nStep 1: link.\nStep 2: sharpen.\n\n"
         "Text on the Meme:\nbox1: When the alarm rings\nbox2: But the bed says no\n")
IMPERFECT = {
    "clean": CLEAN,
    "missing description": CLEAN.replace("[Comprehensive Description Section]\n", ""),
    "missing two headers": CLEAN.replace("[Usage Scenarios Section]\n", "").replace("[Text Analysis Section]\n", ""),
    "no brackets": CLEAN.replace("[Usage Scenarios Section]", "Usage Scenarios Section"),
    "markdown headers": CLEAN.replace("[Text Analysis Section]", "## [Text Analysis Section]").replace("Text on the Meme:", "**Text on the Meme**:"),
    "bold colon header": CLEAN.replace("Text on the Meme:", "**Text on the Meme:**"),
    "lower-case headers": CLEAN.lower(),
    "steps swapped": CLEAN.replace("Step 1:", "@@").replace("Step 2:", "Step 1:").replace("@@", "Step 2:"),
    "step 2 missing": CLEAN.replace("Step 2:", "Then:"),
    "steps mid-line": CLEAN.replace("Step 1: link.\nStep 2:", "So Step 1: link. Step 2:"),
    "bold steps": CLEAN.replace("Step 1:", "**Step 1:**").replace("Step 2:", "**Step 2:**"),
    "steps outside the section": CLEAN.replace("Step 1: link.\nStep 2: sharpen.\n", "") + "Step 1: late.\nStep 2: later.\n",
    "no box lines": CLEAN.replace("box1: ", "").replace("box2: ", ""),
    "quoted lines": CLEAN.split("Text on the Meme:")[0] + 'Text on the Meme:\n"When the alarm rings\nBut the bed says no"\n',
    "three boxes": CLEAN + "box3: and a third\n",
    "one box": CLEAN.replace("box2: But the bed says no\n", ""),
    "empty box": CLEAN.replace("box2: But the bed says no", "box2:   "),
    "all boxes empty": CLEAN.replace("box1: When the alarm rings", "box1:").replace("box2: But the bed says no", "box2:"),
    "boxes out of order": CLEAN.replace("box1:", "@@").replace("box2:", "box1:").replace("@@", "box2:"),
    "boxes numbered 1, 3": CLEAN.replace("box2:", "box3:"),
    "extra text after boxes": CLEAN + "\nHope you enjoy this meme!\n",
    "two Text on the Meme headers": CLEAN.replace("Setup, payoff.", "Text on the Meme: will be short.\nSetup, payoff."),
    "header mid-sentence": CLEAN.replace("[Usage Scenarios Section]", "See the [Usage Scenarios Section]"),
    "no Text on the Meme": CLEAN.replace("Text on the Meme:\n", ""),
    "prompt echoed before the answer": "<|im_start|>user\nWrite Text on the Meme: box1: x<|im_end|>\n<|im_start|>assistant\n" + CLEAN,
    "chat role prefix": "system\nbe funny\nuser\nhi\nassistant\n" + CLEAN,
    "only the caption": "Text on the Meme:\nbox1: hi\nbox2: there\n",
    "empty": "",
    "garbage": "\x00[]()**::",
    "multi-line box payload": CLEAN.replace("box1: When the alarm rings", "box1: When the alarm\nrings twice"),
    "BOX upper-case with spaces": CLEAN.replace("box1:", "BOX 1 :").replace("box2:", "Box 2:"),
}


@pytest.mark.parametrize("name", sorted(IMPERFECT))
def test_the_format_reward_is_the_published_rule(name):
    from planners.meme_cot import DEFAULT_FORMAT_RULE, meme_format_reward, official_format_reward

    text = IMPERFECT[name]
    assert DEFAULT_FORMAT_RULE == "official"
    for expected in (None, 0, 1, 2, 3):
        assert official_format_reward(text, expected) == pytest.approx(official_format(text, expected)), expected
    assert meme_format_reward(text, 2) == pytest.approx(official_format(text, 2))


def test_the_rules_differ_where_the_audit_says_and_ours_stays_a_named_option():
    from planners.meme_cot import format_reward, meme_format_reward

    assert len(IMPERFECT) >= 20
    differ = [n for n, t in IMPERFECT.items() if not math.isclose(meme_format_reward(t, 2, "ours"), meme_format_reward(t, 2))]
    assert {"steps swapped", "boxes out of order", "header mid-sentence", "no box lines"} <= set(differ)
    assert meme_format_reward(CLEAN, 2) == meme_format_reward(CLEAN, 2, "ours") == format_reward(CLEAN, 2) == 1.0
    with pytest.raises(InputError, match="rule"):
        meme_format_reward(CLEAN, 2, "lenient")
    with pytest.raises(InputError, match="num_paths"):
        meme_format_reward(CLEAN, 2, num_paths=3)


# ---- the policy prompt and the rendering --------------------------------------------------------------------


def test_the_official_policy_prompt_is_the_released_file(memes):
    from planners.meme_cot import build_official_prompt
    from planners.meme_prompts import GENERATE_MEME_PROMPT

    assert len(GENERATE_MEME_PROMPT) == 5165
    assert hashlib.sha256(GENERATE_MEME_PROMPT.encode()).hexdigest().startswith("21ef69803e9d")
    [turn] = build_official_prompt(memes[0], "[Emotion: joy]")
    image, text = turn.content
    assert image.frames.shape[1:] == memes[0].shape and text.text.startswith(GENERATE_MEME_PROMPT)
    assert text.text.endswith("\n**User Input Parameters**: [Emotion: joy]")
    assert build_official_prompt(None)[0].content[0].text == GENERATE_MEME_PROMPT


def test_the_vlm_writer_can_ask_with_the_official_prompt(base_dir):
    from planners.meme_lm import load_meme_writer

    w = load_meme_writer(str(base_dir), prompt_style="official")
    w.max_new_tokens = 4
    texts = w.write(np.zeros((56, 56, 3), np.uint8), "mondays", 3, 1, generator=torch.Generator().manual_seed(0))
    assert len(texts) == 1
    with pytest.raises(InputError, match="prompt_style"):
        load_meme_writer(str(base_dir), prompt_style="fancy")


def test_the_pipelines_style_setting_reaches_the_writer_and_the_rendering():
    """--style official: the writer is asked with the published prompt and the memes drawn the published way;
    the builtin writer, trained on our prompt, refuses it rather than switching silently."""
    from pipelines.humor.pipeline import HumorConfig, HumorPipeline
    from planners.meme_reward import load_reward_model

    class Writer:
        styles = []

        def write(self, image, topic=None, num_paths=3, n=4, *, num_boxes=2, temperature=1.0, top_p=1.0, generator=None,
                  prompt_style=None):
            self.styles.append(prompt_style)
            return [f"[Comprehensive Description Section]\nx\nText on the Meme:\nbox1: a{k}\nbox2: b{k}" for k in range(n)]

    pipe = HumorPipeline(HumorConfig(style="official", num_memes=2), writer=Writer(), reward_model=load_reward_model("builtin"))
    pipe.set_progress_bar_config(disable=True)
    pipe._parse = lambda text: {"boxes": [ln.split(": ", 1)[1] for ln in text.splitlines() if ln.startswith("box")],
                                "intent": "", "paths": [], "anchor": None}
    out = pipe(np.full((64, 64, 3), 200, np.uint8), "mondays", generator=0)
    assert Writer.styles and set(Writer.styles) == {"official"} and len(out.memes) == 2
    builtin = HumorPipeline.build(config={"style": "official"}, defaults={"writer": "builtin", "reward_model": "builtin"})
    builtin.set_progress_bar_config(disable=True)
    with pytest.raises(InputError, match="style"):
        builtin(np.full((64, 64, 3), 200, np.uint8), generator=0)


def test_the_official_rendering_boxes_and_colours():
    from renderers.meme import official_banners, official_detections, render_meme_official, render_meme_styled

    assert official_banners(100, 200, 2) == [(6, 12, 94, 40), (6, 156, 94, 188)]
    assert official_banners(100, 200, 1) == [(6, 12, 94, 40)]
    assert len(official_banners(100, 200, 4)) == 4
    ref = {"text_loc_info": {"loc": [[0.1, 0.1, 0.9, 0.3], "bad", [10, 150, 90, 190]], "text": "x"}}
    assert official_detections(ref) == [(0.1, 0.1, 0.9, 0.3), (10.0, 150.0, 90.0, 190.0)]
    assert official_detections({"detections": [{"bbox": [1, 2, 3, 4]}]}) == [(1.0, 2.0, 3.0, 4.0)]
    white, black = np.full((200, 200, 3), 255, np.uint8), np.zeros((200, 200, 3), np.uint8)
    on_white = render_meme_official(white, ["hello", "world"])
    on_black = render_meme_official(black, ["hello", "world"])
    assert (on_white[12:40] == 0).all(-1).any() and (on_black[12:40] == 255).all(-1).any()  # text colour by luminance
    assert (render_meme_official(white, ["", "  "]) == white).all()  # no text: the bare template
    boxed = render_meme_official(white, ["hi"], [[0.5, 0.5, 1.0, 1.0]])
    assert (boxed[:100] == 255).all() and not (boxed[100:] == 255).all()  # drawn inside the detection box only
    assert (render_meme_styled(white, ["a", "b"], "official") == render_meme_official(white, ["a", "b"])).all()
    with pytest.raises(InputError, match="style"):
        render_meme_styled(white, ["a", "b"], "comic")
