"""The VLM protocol helpers (letter scoring, prompts) and the transformers backend on tiny random checkpoints."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from core.errors import InputError
from core.flops import TransformerDims, transformer_flops
from planners import hf
from planners.hf import HFVisionLanguageModel
from planners.protocol import (OPTION_LETTERS, VisionLanguageModel, format_mcq_prompt, letter_surface_forms,
                               letter_token_ids, peak_posterior, posterior_from_logits, user_turn)

OPTIONS = ["red", "green", "blue", "yellow"]
PROMPT = format_mcq_prompt("What colour is the square?", OPTIONS)


class FakeTokenizer:
    """Greedy longest-match over a fixed vocabulary, enough to control how surface forms split."""

    def __init__(self, pieces: list[str]):
        self.vocab = {p: i for i, p in enumerate(pieces)}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            piece = max((p for p in self.vocab if text.startswith(p, i)), key=len)
            ids.append(self.vocab[piece])
            i += len(piece)
        return ids


def whole_form_tokenizer(letters: str = "ABCD") -> FakeTokenizer:
    """Every surface form of every letter is one token (like Qwen's vocabulary for most forms)."""
    pieces = [" ", "(", ")", ".", ":", "x"] + [f for L in letters for f in letter_surface_forms(L)]
    return FakeTokenizer(list(dict.fromkeys(pieces)))


def logits_for(tok: FakeTokenizer, mass: dict[str, float]) -> torch.Tensor:
    logits = torch.zeros(len(tok.vocab))
    for piece, value in mass.items():
        logits[tok.vocab[piece]] = value
    return logits


# ---- pure helpers -------------------------------------------------------------------------------


def test_surface_forms_cover_the_spec_list():
    spec_b2 = ["B", " B", "(B", "B.", " B.", "B)"]
    assert set(spec_b2) <= set(letter_surface_forms("B"))
    with pytest.raises(InputError):
        letter_surface_forms("AB")


def test_mass_on_a_parenthesised_letter_selects_it():
    tok = whole_form_tokenizer()
    ids = letter_token_ids(tok, "ABCD")
    assert all(len(i) == len(letter_surface_forms("A")) for i in ids)  # one distinct id per form
    logp = posterior_from_logits(logits_for(tok, {"(B": 8.0}), ids)
    assert int(np.argmax(logp)) == 1
    assert np.exp(logp).sum() == pytest.approx(1.0, abs=1e-12)
    assert 0.99 < peak_posterior(logp) <= 1.0


def test_scores_pool_all_surface_forms_of_a_letter():
    tok = whole_form_tokenizer()
    ids = letter_token_ids(tok, "ABCD")
    # A holds the single largest logit, but C's mass is spread over two forms and adds up to more.
    logp = posterior_from_logits(logits_for(tok, {"A": 5.0, " C": 4.7, "C.": 4.7}), ids)
    assert int(np.argmax(logp)) == 2
    n = len(letter_surface_forms("A"))  # the other forms of each letter sit at logit 0
    expected = np.log(2 * np.exp(4.7) + n - 2) - np.log(np.exp(5.0) + n - 1)  # pooled score of C minus A's
    assert logp[2] - logp[0] == pytest.approx(expected, abs=1e-6)  # logits are float32


def test_first_tokens_shared_by_all_letters_are_dropped():
    # "(" and " " are separate tokens: "(B" -> "(" + "B", so "(" says nothing about the letter.
    tok = FakeTokenizer([" ", "(", ")", ".", ":", "A", "B", "C", "D"])
    ids = letter_token_ids(tok, "ABCD")
    flat = [i for letter_ids in ids for i in letter_ids]
    assert tok.vocab["("] not in flat and tok.vocab[" "] not in flat
    assert ids == [[tok.vocab[L]] for L in "ABCD"]
    logp = posterior_from_logits(logits_for(tok, {"(": 20.0, "D": 3.0}), ids)
    assert int(np.argmax(logp)) == 3


def test_letter_scoring_with_a_real_bpe_tokenizer():
    from tiny_vlms import _QWEN_SPECIALS, build_bpe_tokenizer

    tok = build_bpe_tokenizer(_QWEN_SPECIALS, eos="<|im_end|>")
    ids = letter_token_ids(tok, "ABCD")
    assert all(ids) and len({i for x in ids for i in x}) == sum(len(x) for x in ids)  # disjoint per letter
    logits = torch.zeros(len(tok))
    logits[tok.encode(" C", add_special_tokens=False)[0]] = 9.0
    logp = posterior_from_logits(logits, ids)
    assert int(np.argmax(logp)) == 2 and np.exp(logp).sum() == pytest.approx(1.0, abs=1e-12)


def test_uniform_logits_give_the_uniform_posterior():
    tok = whole_form_tokenizer()
    logp = posterior_from_logits(torch.zeros(len(tok.vocab)), letter_token_ids(tok, "ABCD"))
    assert np.allclose(logp, np.log(0.25)) and peak_posterior(logp) == pytest.approx(0.25)
    with pytest.raises(InputError):
        posterior_from_logits(torch.zeros(2, len(tok.vocab)), letter_token_ids(tok, "AB"))


def test_mcq_prompt_wording():
    assert format_mcq_prompt("Which shape moves first?", ["circle", "star"]) == (
        "Question: Which shape moves first?\nOptions:\n(A) circle\n(B) star\n"
        "Answer with the option's letter from the given choices directly."
    )
    v2 = format_mcq_prompt("Q?", [str(i) for i in range(8)], style="videomme_v2")
    assert "Respond with only the letter (A, B, C, D, E, F, G, or H) of the correct option." in v2
    assert v2.endswith("H. 7.")
    assert format_mcq_prompt("Q?", ["x", "y"], style="longvideobench").endswith("Answer with the letter of the correct option.")
    with pytest.raises(InputError):
        format_mcq_prompt("Q?", ["only one"])
    with pytest.raises(InputError):
        format_mcq_prompt("Q?", ["x"] * (len(OPTION_LETTERS) + 1))
    with pytest.raises(InputError):
        format_mcq_prompt("Q?", ["x", "y"], style="nope")


# ---- the transformers backend -----------------------------------------------------------------

FAMILIES = ["qwen2.5-vl", "qwen3-vl", "smolvlm", "idefics3"]  # idefics3: video as several images


@pytest.fixture(scope="module")
def frames() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"image": rng.integers(0, 256, (48, 64, 3), dtype=np.uint8),
            "video": rng.integers(0, 256, (4, 48, 64, 3), dtype=np.uint8)}


@pytest.fixture(scope="module", params=FAMILIES)
def vlm(request, tiny_vlm_dirs) -> HFVisionLanguageModel:
    return HFVisionLanguageModel.from_pretrained(tiny_vlm_dirs[request.param], device="cpu")


def test_is_a_vision_language_model(vlm):
    assert isinstance(vlm, VisionLanguageModel) and vlm.backend == "hf"
    assert vlm.device == torch.device("cpu") and vlm.dtype == torch.float32


@pytest.mark.parametrize("kind", ["image", "video"])
def test_option_posterior_is_normalised_and_deterministic(vlm, frames, kind):
    logp = vlm.option_posterior(frames[kind], PROMPT, OPTIONS)
    assert logp.shape == (4,) and np.isfinite(logp).all()
    assert np.exp(logp).sum() == pytest.approx(1.0, abs=1e-9)
    assert 0.25 <= peak_posterior(logp) <= 1.0
    assert np.array_equal(logp, vlm.option_posterior(frames[kind].copy(), PROMPT, list(OPTIONS)))


def test_option_posterior_matches_the_full_forward(vlm, frames):
    """``logits_to_keep=1`` must not change the last position's logits."""
    inputs = vlm._inputs(frames["video"], PROMPT)
    with torch.no_grad():
        logits = vlm.model(**inputs, use_cache=False).logits[0, -1]
    expected = posterior_from_logits(logits, letter_token_ids(vlm.processor.tokenizer, "ABCD", vlm.letter_pooling))
    np.testing.assert_allclose(vlm.option_posterior(frames["video"], PROMPT, OPTIONS), expected, atol=1e-5)


@pytest.mark.parametrize("kind", ["image", "video"])
def test_generate_is_greedy_text(vlm, frames, kind):
    texts = vlm.generate(user_turn(frames[kind], PROMPT), max_new_tokens=4)
    assert len(texts) == 1 and isinstance(texts[0], str)
    assert texts == vlm.generate([user_turn(frames[kind], PROMPT)], max_new_tokens=4)


def test_encode_images_gives_one_row_per_frame(vlm, frames):
    video = vlm.encode_images(frames["video"])
    image = vlm.encode_images(frames["image"])
    assert video.dtype == np.float32 and video.ndim == 2 and video.shape[0] == 4
    assert image.shape == (1, video.shape[1]) and np.isfinite(video).all()
    # each frame is encoded on its own: batching does not mix frames
    np.testing.assert_allclose(vlm.encode_images(frames["video"][2]), video[2:3], atol=1e-4)
    np.testing.assert_allclose(vlm.encode_images(frames["video"], batch_size=3), video, atol=1e-4)
    assert not np.allclose(video[0], video[1])


def test_flops_grow_with_frames_and_use_processor_token_counts(vlm, frames):
    costs = [vlm.flops(n, PROMPT, (48, 64)) for n in (2, 4, 8)]
    assert costs[0] < costs[1] < costs[2]
    n_tokens = vlm._inputs(frames["video"], PROMPT)["input_ids"].shape[1]
    assert vlm.count_tokens(4, PROMPT, (48, 64)) == n_tokens
    assert costs[1] == transformer_flops(TransformerDims.from_config(vlm.model.config), n_tokens)
    assert vlm.flops(4, PROMPT) > 0  # default frame size


def test_bad_inputs_name_the_argument(vlm, frames):
    with pytest.raises(InputError, match="frames"):
        vlm.option_posterior(frames["video"].astype(np.float32), PROMPT, OPTIONS)
    with pytest.raises(InputError, match="frames"):
        vlm.encode_images(frames["image"][..., :2])
    with pytest.raises(InputError, match="options"):
        vlm.option_posterior(frames["image"], PROMPT, ["one"])
    with pytest.raises(InputError, match="n_frames"):
        vlm.count_tokens(0, PROMPT)


def test_save_pretrained_round_trip(vlm, frames, tmp_path):
    again = HFVisionLanguageModel.from_pretrained(vlm.save_pretrained(tmp_path / "copy"), device="cpu")
    np.testing.assert_array_equal(again.option_posterior(frames["image"], PROMPT, OPTIONS),
                                  vlm.option_posterior(frames["image"], PROMPT, OPTIONS))


def test_remote_code_is_off_unless_asked(tiny_vlm_dirs, monkeypatch):
    assert inspect.signature(HFVisionLanguageModel.from_pretrained).parameters["trust_remote_code"].default is False
    seen = []

    def spy(real):
        class Spy:
            @staticmethod
            def from_pretrained(path, **kwargs):
                seen.append(kwargs.get("trust_remote_code", "missing"))
                return real.from_pretrained(path, **kwargs)
        return Spy

    monkeypatch.setattr(hf, "AutoProcessor", spy(hf.AutoProcessor))
    monkeypatch.setattr(hf, "AutoModelForImageTextToText", spy(hf.AutoModelForImageTextToText))
    vlm = HFVisionLanguageModel.from_pretrained(tiny_vlm_dirs["qwen3-vl"], device="cpu")
    assert seen == [False, False] and vlm.trust_remote_code is False
