"""The low-level VLM protocol (messages, seeded generate, score, forward, module, mcq_posterior) on every backend:
tiny random Qwen2.5-VL and Qwen3-VL checkpoints and the shipped builtin weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.errors import InputError
from planners.builtin import WEIGHTS_DIR, load_builtin_vlm
from planners.hf import HFVisionLanguageModel
from planners.protocol import (MAX_RETURN_SEQUENCES, ContinuationScore, ImagePart, Message, TextPart, VideoPart,
                               VisionLanguageModel, check_continuations, check_messages, format_mcq_prompt,
                               generation_seed, mcq_posterior, user_turn)

pytestmark = pytest.mark.usefixtures("one_thread")

OPTIONS = ["red", "green", "blue", "yellow"]
PROMPT = format_mcq_prompt("What colour is the square?", OPTIONS)
BACKENDS = ["qwen2.5-vl", "qwen3-vl", "builtin"]
HOT = 5.0  # a temperature at which samples of the tiny random models and the builtin decoder differ between seeds

_rng = np.random.default_rng(0)
IMAGE = _rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
VIDEO = _rng.integers(0, 256, (4, 48, 64, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def caption_clip() -> dict:
    """A single-object worldgen clip the builtin captions correctly ("a red ring moves left")."""
    from training.vlm import caption_example

    return caption_example(3)


@pytest.fixture(scope="module")
def builtin():
    if not (WEIGHTS_DIR / "vlm" / "model.safetensors").is_file():
        pytest.skip("no shipped builtin VLM weights (run `make weights`)")
    return load_builtin_vlm("cpu")


@pytest.fixture(scope="module", params=BACKENDS)
def case(request, tiny_vlm_dirs, caption_clip) -> tuple[VisionLanguageModel, list[Message]]:
    """A backend and a conversation it answers."""
    if request.param == "builtin":
        vlm = request.getfixturevalue("builtin")
        return vlm, [user_turn(caption_clip["frames"], "Describe the video.", caption_clip["times"])]
    vlm = HFVisionLanguageModel.from_pretrained(tiny_vlm_dirs[request.param], device="cpu")
    return vlm, [Message("system", "Answer briefly."), user_turn(VIDEO, PROMPT, relative_times=[0, 0.3, 0.6, 1])]


def _dims(vlm) -> tuple[int, int, int]:
    """(layers, hidden size, vocabulary size) of the model's text side."""
    if vlm.backend == "builtin":
        c = vlm.model.config
        return c.layers, c.d_model, len(c.vocab)
    c = vlm.model.config.get_text_config()
    return c.num_hidden_layers, c.hidden_size, c.vocab_size


# ---- messages and arguments (no model) ---------------------------------------------------------


def test_messages_are_typed_and_checked():
    turn = user_turn(VIDEO, PROMPT, relative_times=[0, 0.25, 0.5, 1.0], fps=2.0)
    video, text = turn.content
    assert turn.role == "user" and isinstance(video, VideoPart) and isinstance(text, TextPart)
    assert video.relative_times == (0.0, 0.25, 0.5, 1.0) and video.fps == 2.0 and turn.text == PROMPT
    image = user_turn(IMAGE, "Describe the image.").content[0]
    assert isinstance(image, ImagePart) and image.frames.shape == (1, 48, 64, 3)
    assert isinstance(Message("user", "hi").content[0], TextPart)  # a string is one text part
    assert check_messages(turn) == [turn]

    bad = [
        (lambda: Message("robot", "hi"), "role"),
        (lambda: Message("user", []), "content"),
        (lambda: Message("user", [42]), "content"),
        (lambda: ImagePart(VIDEO), "image"),
        (lambda: VideoPart(VIDEO, relative_times=[0, 1]), "relative_times"),
        (lambda: VideoPart(VIDEO, relative_times=[0, 2, 4, 6]), "not seconds"),
        (lambda: VideoPart(VIDEO, fps=0), "fps"),
        (lambda: VideoPart(VIDEO.astype(np.float32)), "frames"),
        (lambda: user_turn(VIDEO, 3), "prompt"),
        (lambda: check_messages([]), "messages"),
        (lambda: check_messages("hello"), "messages"),
        (lambda: check_messages([turn, "hello"]), "messages"),
        (lambda: check_messages([turn, Message("system", "be brief")]), "system turn first"),
        (lambda: check_messages([turn, Message("assistant", "A")]), "end with a user turn"),
        (lambda: check_continuations("A"), "continuations"),
        (lambda: check_continuations(["A", 1]), "continuations"),
    ]
    for make, match in bad:
        with pytest.raises(InputError, match=match):
            make()


def test_generation_arguments_are_checked():
    ok = dict(max_new_tokens=4, do_sample=True, temperature=1.0, top_p=1.0, num_return_sequences=2, generator=0)
    assert generation_seed(**ok) == 0
    assert generation_seed(**dict(ok, do_sample=False, num_return_sequences=1, generator=None)) is None  # greedy needs no RNG
    g = torch.Generator().manual_seed(7)
    first, second = generation_seed(**dict(ok, generator=g)), generation_seed(**dict(ok, generator=g))
    assert first != second  # drawing a seed advances the generator, as a sampler would
    assert first == generation_seed(**dict(ok, generator=torch.Generator().manual_seed(7)))
    for change, name in [({"temperature": 0.0}, "temperature"), ({"temperature": -1.0}, "temperature"),
                         ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
                         ({"num_return_sequences": 0}, "num_return_sequences"),
                         ({"num_return_sequences": 10**6}, "num_return_sequences"),
                         ({"num_return_sequences": MAX_RETURN_SEQUENCES + 1}, "num_return_sequences"),
                         ({"do_sample": False}, "num_return_sequences"),  # greedy has one answer
                         ({"max_new_tokens": 0}, "max_new_tokens"), ({"do_sample": 1}, "do_sample"),
                         ({"generator": None}, "generator"), ({"generator": "seed"}, "generator"),
                         ({"generator": -1}, "generator")]:
        with pytest.raises(InputError, match=name):
            generation_seed(**dict(ok, **change))


class _Scorer:
    """A backend with only ``score``: fixed token ids and totals per continuation."""

    def __init__(self, table: dict[str, tuple[list[int], float]]):
        self.table = table

    def score(self, messages, continuations):
        return [ContinuationScore([str(i) for i in ids], ids, [total] + [0.0] * (len(ids) - 1))
                for ids, total in (self.table[c] for c in continuations)]


def test_mcq_posterior_pools_distinct_forms_and_renormalises():
    forms = {"A": [1], " A": [2], "(A": [3, 1], "A.": [1, 9], " A.": [2, 9], "A)": [1, 8], " (A": [4, 1], "A:": [1, 7],
             "B": [5], " B": [6], "(B": [3, 5], "B.": [5, 9], " B.": [6, 9], "B)": [5, 8], " (B": [4, 5], "B:": [5, 7]}
    table = {f: (ids, -1.0) for f, ids in forms.items()}
    table["A."] = (forms["A."], 5.0)  # extends "A": its mass is already inside "A" and must not count again
    logp = mcq_posterior(_Scorer(table), None, ["x", "y"])
    # A and B each keep "L", " L", "(L", " (L": four forms of logprob -1
    np.testing.assert_allclose(logp, np.log([0.5, 0.5]), atol=1e-12)
    table["(B"] = (forms["(B"], 0.0)
    expected = np.log(np.array([4 * np.exp(-1.0), 3 * np.exp(-1.0) + 1.0]))
    np.testing.assert_allclose(mcq_posterior(_Scorer(table), None, ["x", "y"]), expected - np.logaddexp.reduce(expected), atol=1e-12)
    with pytest.raises(InputError, match="answer"):
        mcq_posterior(_Scorer(table), None, ["x", "y"], answer="nope")


# ---- every backend -------------------------------------------------------------------------------


def test_is_a_vision_language_model(case):
    vlm, _ = case
    assert isinstance(vlm, VisionLanguageModel)


def test_greedy_generate_is_deterministic(case):
    vlm, messages = case
    texts = vlm.generate(messages, max_new_tokens=5)
    assert len(texts) == 1 and isinstance(texts[0], str)
    assert vlm.generate(messages, max_new_tokens=5, temperature=0.0) == texts  # sampling knobs unused when greedy


def test_sampling_depends_only_on_the_generator(case):
    vlm, messages = case

    def sample(seed, n=3):
        return vlm.generate(messages, max_new_tokens=6, do_sample=True, temperature=HOT, num_return_sequences=n,
                            generator=torch.Generator().manual_seed(seed))

    state = torch.get_rng_state()
    a = sample(0)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is neither used nor moved
    with torch.random.fork_rng():
        torch.manual_seed(123)  # ... nor read: another global state changes nothing
        assert sample(0) == a and len(a) == 3 and all(isinstance(t, str) for t in a)
    assert sample(1) != a
    assert len(sample(2, n=1)) == 1
    assert vlm.generate(messages, max_new_tokens=6, do_sample=True, temperature=HOT, top_p=0.9, generator=5) == \
        vlm.generate(messages, max_new_tokens=6, do_sample=True, temperature=HOT, top_p=0.9, generator=5)
    with pytest.raises(InputError, match="temperature"):
        vlm.generate(messages, do_sample=True, temperature=0.0, generator=0)
    with pytest.raises(InputError, match="num_return_sequences"):
        vlm.generate(messages, do_sample=True, num_return_sequences=10**6, generator=0)
    with pytest.raises(InputError, match="messages"):
        vlm.generate([Message("assistant", "hi")])


def test_score_is_teacher_forced_and_matches_forward(case):
    vlm, messages = case
    greedy = vlm.generate(messages, max_new_tokens=5)[0]
    other = "a blue star" if vlm.backend == "builtin" else " A"
    scores = vlm.score(messages, [greedy, other, ""])
    for s in scores:
        assert len(s.tokens) == len(s.token_ids) == len(s.token_logprobs)
        assert s.token_logprobs.dtype == np.float64 and np.all(s.token_logprobs <= 0)
        assert s.total == float(np.sum(s.token_logprobs))
    assert scores[2].total == 0.0 and scores[2].tokens == []
    # the first token's score is the forward's next-token distribution
    with torch.no_grad():
        first = torch.log_softmax(vlm.forward(messages, output_hidden_states=False).logits.double(), -1)
    np.testing.assert_allclose(scores[1].token_logprobs[0], float(first[scores[1].token_ids[0]]), atol=1e-5)
    assert [s.total for s in vlm.score(messages, [other, greedy])] == [scores[1].total, scores[0].total]  # order-free


def test_forward_hidden_states_and_the_trainable_module(case):
    vlm, messages = case
    layers, hidden, vocab = _dims(vlm)
    with torch.no_grad():
        out = vlm.forward(messages)
        plain = vlm.forward(messages, output_hidden_states=False)
    assert out.logits.shape == (vocab,) and plain.hidden_states is None
    torch.testing.assert_close(out.logits, plain.logits)
    assert len(out.hidden_states) == layers + 1
    length = out.hidden_states[0].shape[1]
    assert all(h.shape == (1, length, hidden) for h in out.hidden_states)
    module = vlm.module
    assert isinstance(module, torch.nn.Module)
    trainable = [p for p in module.parameters() if p.requires_grad]
    assert trainable and all(p.grad is None for p in trainable)
    try:
        vlm.forward(messages).hidden_states[-1].float().pow(2).mean().backward()  # grad mode on: training works
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in trainable)
    finally:
        module.zero_grad(set_to_none=True)


# ---- the transformers backend ------------------------------------------------------------------


@pytest.fixture(scope="module", params=["qwen2.5-vl", "qwen3-vl"])
def hf_vlm(request, tiny_vlm_dirs) -> HFVisionLanguageModel:
    return HFVisionLanguageModel.from_pretrained(tiny_vlm_dirs[request.param], device="cpu")


def test_hf_score_equals_a_manual_log_softmax(hf_vlm):
    messages = [user_turn(VIDEO, PROMPT)]
    text = " (B) blue"
    [s] = hf_vlm.score(messages, [text])
    ids = hf_vlm.processor.tokenizer.encode(text, add_special_tokens=False)
    assert s.token_ids == ids and "".join(s.tokens) == text
    inputs = hf_vlm._chat_inputs(messages)
    n, cont = inputs["input_ids"].shape[1], torch.tensor([ids])
    full = dict(inputs, input_ids=torch.cat([inputs["input_ids"], cont], 1),
                attention_mask=torch.cat([inputs["attention_mask"], torch.ones_like(cont)], 1))
    if "mm_token_type_ids" in inputs:
        full["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(cont)], 1)
    with torch.no_grad():
        logits = hf_vlm.model(**full, use_cache=False).logits[0]
    expected = torch.log_softmax(logits.double(), -1)[torch.arange(n - 1, n - 1 + len(ids)), cont[0]]
    np.testing.assert_allclose(s.token_logprobs, expected.numpy(), atol=1e-5)
    assert len(hf_vlm.forward(messages).hidden_states[0][0]) == n  # hidden states cover every prompt token


def test_hf_reads_interleaved_turns(hf_vlm):
    """Images and videos interleaved with text, several turns: all of it reaches the template and the pixels."""
    clip = VIDEO[:2]
    chat = [Message("system", "You are terse."),
            Message("user", [ImagePart(IMAGE), "and", VideoPart(clip), "Describe them."]),
            Message("assistant", "A red circle."),
            Message("user", [VideoPart(VIDEO, fps=2.0), TextPart("And this one?")])]
    inputs = hf_vlm._chat_inputs(chat)
    assert inputs["video_grid_thw"].shape[0] == 2 and inputs["image_grid_thw"].shape[0] == 1
    text = hf_vlm.processor.tokenizer.decode(inputs["input_ids"][0])
    assert text.index("You are terse.") < text.index("Describe them.") < text.index("A red circle.") < text.index("And this one?")
    [s] = hf_vlm.score(chat, ["A"])
    assert np.isfinite(s.total)
    assert len(hf_vlm.generate(chat, max_new_tokens=2, do_sample=True, generator=0)) == 1


def test_hf_mcq_posterior_is_a_distribution(hf_vlm):
    logp = mcq_posterior(hf_vlm, user_turn(VIDEO, PROMPT), OPTIONS)
    assert logp.shape == (4,) and np.isfinite(logp).all()
    assert np.exp(logp).sum() == pytest.approx(1.0, abs=1e-12)


# ---- the builtin backend -----------------------------------------------------------------------


def test_builtin_greedy_caption_outscores_a_changed_last_word(builtin, caption_clip):
    messages = [user_turn(caption_clip["frames"], "Describe the video.", caption_clip["times"])]
    greedy = builtin.generate(messages)[0]
    assert greedy == caption_clip["caption"]  # a clear case: the shipped decoder gets it right
    words = greedy.split()
    changed = " ".join(words[:-1] + ["right" if words[-1] != "right" else "left"])
    best, worse, ended = builtin.score(messages, [greedy, changed, greedy + " <eos>"])
    assert best.total >= worse.total  # same prefix, and greedy took the argmax last word
    assert ended.tokens[-1] == "<eos>" and ended.total <= best.total  # the end is scored only when asked for
    with pytest.raises(InputError, match="zebra.*caption vocabulary"):
        builtin.score(messages, ["a zebra"])
    with pytest.raises(InputError, match="at most"):
        builtin.score(messages, ["a " * 40])


def test_builtin_reads_turns_as_documented(builtin, caption_clip):
    """System and assistant turns are ignored; images and videos are concatenated as frames in order."""
    frames, times = caption_clip["frames"], caption_clip["times"]
    plain = [user_turn(frames, "Describe the video.")]
    chat = [Message("system", "Be brief."), Message("assistant", "a blue star stays still"), plain[0]]
    split = [Message("user", [VideoPart(frames[:5]), ImagePart(frames[5]), VideoPart(frames[6:]), "Describe the video."])]
    with torch.no_grad():
        torch.testing.assert_close(builtin.forward(chat).logits, builtin.forward(plain).logits)
        torch.testing.assert_close(builtin.forward(split).logits, builtin.forward(plain).logits)
        timed = builtin.forward(user_turn(frames, "Describe the video.", times)).logits
    assert not torch.allclose(timed, builtin.forward(plain).logits)  # one video's times reach the model
    with pytest.raises(InputError, match="ImagePart or VideoPart"):
        builtin.generate(Message("user", "Describe the video."))


def test_builtin_mcq_posterior_agrees_with_option_posterior(builtin, caption_clip):
    frames, times, caption = caption_clip["frames"], caption_clip["times"], caption_clip["caption"]
    colour = caption.split()[1]
    options = [caption] + [caption.replace(colour, c) for c in ("blue", "green", "yellow")]
    prompt = format_mcq_prompt("Which caption describes the video?", options)
    logp = mcq_posterior(builtin, user_turn(frames, prompt, times), options, answer="text")
    assert np.exp(logp).sum() == pytest.approx(1.0, abs=1e-12)
    assert int(np.argmax(logp)) == int(np.argmax(builtin.option_posterior(frames, prompt, options, times))) == 0
    with pytest.raises(InputError, match="caption vocabulary"):
        mcq_posterior(builtin, user_turn(frames, prompt, times), options)  # the decoder knows no letters


def test_batched_option_posteriors_equal_one_clip_at_a_time(case):
    """GridProbe's batched probes: one forward over several equal clips gives each clip's lone posterior."""
    vlm, _ = case
    rng = np.random.default_rng(1)
    size = (64, 64) if vlm.backend == "builtin" else (48, 64)
    clips = [rng.integers(0, 256, (4, *size, 3), dtype=np.uint8) for _ in range(3)]
    times = [[0, 0.3, 0.6, 1], [0.1, 0.2, 0.3, 0.4], None]
    batched = vlm.option_posteriors(clips, PROMPT, OPTIONS, relative_times=times)
    alone = np.stack([vlm.option_posterior(c, PROMPT, OPTIONS, relative_times=t) for c, t in zip(clips, times)])
    assert batched.shape == (3, len(OPTIONS))
    np.testing.assert_allclose(batched, alone, atol=1e-4)
    assert not np.allclose(alone[0], alone[1], atol=1e-3)  # the clips differ, so a shared row would fail
    with pytest.raises(InputError, match="relative_times"):
        vlm.option_posteriors(clips, PROMPT, OPTIONS, relative_times=times[:2])
