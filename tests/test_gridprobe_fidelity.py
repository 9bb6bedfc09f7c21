"""GridProbe held to its released code (mohammad2012191/GridProbe eval/, qwen-vl-utils 0.0.14).

Each expected value is computed here from the official definition, written out independently of
our implementation: the letter pooling (grid_sampled_ensemble_eval.py get_letter_token_id_variants +
letters_log_probs_from_logits), the benchmark prompts (video_mme.py, video_mme_v2.py,
longvideobench.py), the probe resolutions (two_stage_eval.py / two_stage_eval_crossmodel.py through
qwen-vl-utils) and the Qwen3-VL frame timestamps (build_inputs -> process_vision_info -> processor).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from core.errors import InputError
from pipelines.gridprobe import GridProbeConfig, GridProbePipeline
from pipelines.gridprobe.frames import official_probe_sizes
from planners.hf import HFVisionLanguageModel
from planners.protocol import format_mcq_prompt, letter_token_ids, posterior_from_logits, user_turn

from gridprobe_fakes import FakeVLM, holistic_rule, id_frames

OFFICIAL_FORMS = ("{L}", " {L}", "({L}", "{L}.", " {L}.", "{L})")
BENCHMARK_LETTERS = {"v1": "ABCD", "v2": "ABCDEFGH", "lvb": "ABCDE"}


# ---- 1. letter pooling ---------------------------------------------------------------------------


class SplitTokenizer:
    """Greedy longest match over single characters and bare letters: "(B" -> "(" + "B", " B." -> " " + "B" + ".",
    so the first tokens "(" and " " are shared by every letter (the case the two poolings treat differently)."""

    def __init__(self):
        self.vocab = {p: i for i, p in enumerate([" ", "(", ")", ".", ":", "x", *"ABCDEFGH"])}

    def __call__(self, text, add_special_tokens=False):
        return type("Enc", (), {"input_ids": self.encode(text)})()

    def encode(self, text, add_special_tokens=False):
        ids, i = [], 0
        while i < len(text):
            piece = max((p for p in self.vocab if text.startswith(p, i)), key=len)
            ids.append(self.vocab[piece])
            i += len(piece)
        return ids

    def __len__(self):
        return len(self.vocab)


def official_letter_probs(tokenizer, letters, logits: torch.Tensor) -> np.ndarray:
    """The official per-letter probabilities: all first-token ids of the six forms (a set), log-sum-exp of
    float32 log-softmax over them, softmax over the letters (the confidence's distribution)."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    scores = []
    for L in letters:
        ids = sorted({int(tokenizer(f.format(L=L), add_special_tokens=False).input_ids[0]) for f in OFFICIAL_FORMS})
        scores.append(torch.logsumexp(log_probs[torch.tensor(ids)], dim=0))
    return torch.softmax(torch.stack(scores), dim=0).double().numpy()


@pytest.fixture(scope="module")
def bpe():
    from tiny_vlms import _QWEN_SPECIALS, build_bpe_tokenizer

    return build_bpe_tokenizer(_QWEN_SPECIALS, eos="<|im_end|>")


@pytest.mark.parametrize("tok_kind", ["bpe", "split"])
@pytest.mark.parametrize("bench", sorted(BENCHMARK_LETTERS))
def test_official_letter_pooling_matches_the_definition(bpe, tok_kind, bench):
    tok = bpe if tok_kind == "bpe" else SplitTokenizer()
    letters = BENCHMARK_LETTERS[bench]
    ids = letter_token_ids(tok, letters, "official")
    rng = np.random.default_rng(len(letters))
    for _ in range(20):
        logits = torch.tensor(rng.normal(0, 4, len(tok)), dtype=torch.float32)
        ours = np.exp(posterior_from_logits(logits, ids))
        np.testing.assert_allclose(ours, official_letter_probs(tok, letters, logits), rtol=1e-5, atol=1e-6)


def test_official_pooling_keeps_shared_first_tokens_and_distinct_drops_them():
    tok = SplitTokenizer()
    official, distinct = letter_token_ids(tok, "ABCD", "official"), letter_token_ids(tok, "ABCD", "distinct")
    shared = {tok.vocab["("], tok.vocab[" "]}
    assert all(shared <= set(ids) for ids in official)
    assert not any(shared & set(ids) for ids in distinct)
    logits = torch.zeros(len(tok))
    logits[tok.vocab["("]] = 8.0  # mass on "(": official spreads it over every letter, flattening the posterior
    logits[tok.vocab["B"]] = 3.0
    assert np.exp(posterior_from_logits(logits, official)).max() < np.exp(posterior_from_logits(logits, distinct)).max()
    with pytest.raises(InputError):
        letter_token_ids(tok, "AB", "nope")


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> HFVisionLanguageModel:
    from transformers.utils import logging as hf_logging

    from tiny_vlms import build_tiny_qwen3_vl

    hf_logging.disable_progress_bar()
    return HFVisionLanguageModel.from_pretrained(build_tiny_qwen3_vl(tmp_path_factory.mktemp("qwen3")), device="cpu")


def test_hf_option_posterior_pools_officially_by_default(qwen3):
    assert qwen3.letter_pooling == "official"
    frames = np.random.default_rng(0).integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)
    prompt = format_mcq_prompt("What colour is the square?", ["red", "green", "blue", "yellow"], style="videomme")
    with torch.no_grad():
        logits = qwen3.model(**qwen3._inputs(frames, prompt), use_cache=False).logits[0, -1]
    expected = official_letter_probs(qwen3.processor.tokenizer, "ABCD", logits)
    np.testing.assert_allclose(np.exp(qwen3.option_posterior(frames, prompt, ["red", "green", "blue", "yellow"])),
                               expected, rtol=1e-5, atol=1e-6)


# ---- 2. prompts ------------------------------------------------------------------------------------

QUESTION = "What does the man pick up after the phone rings?"
OPTIONS = ["A red cup", "The phone", "A notebook", "Nothing"]
SUBTITLES = "  Hello there.\nPlease pick it up.  "


def test_videomme_v1_prompt_is_the_official_text():
    assert format_mcq_prompt(QUESTION, OPTIONS, style="videomme") == (
        "Question: What does the man pick up after the phone rings?\n"
        "\n"
        "(A) A red cup\n(B) The phone\n(C) A notebook\n(D) Nothing\n"
        "\n"
        "Answer with the letter of the correct option (A, B, C, or D).")
    with pytest.raises(InputError, match="subtitles"):
        format_mcq_prompt(QUESTION, OPTIONS, style="videomme", subtitles=SUBTITLES)


def test_videomme_v2_prompt_is_the_official_text():
    body = ("Select the best answer to the following multiple-choice question based on the video.\n"
            "Respond with only the letter (A, B, C, D, E, F, G, or H) of the correct option.\n"
            "Question: What does the man pick up after the phone rings?\n"
            "A. A red cup.\nB. The phone.\nC. A notebook.\nD. Nothing.")  # A-H listed even for four options
    assert format_mcq_prompt(QUESTION, OPTIONS, style="videomme_v2") == body
    assert format_mcq_prompt(QUESTION, OPTIONS, style="videomme_v2", subtitles=SUBTITLES) == (
        "This video's subtitles are listed below:\nHello there.\nPlease pick it up.\n\n" + body)


def test_longvideobench_prompt_is_the_official_text():
    body = ("Question: What does the man pick up after the phone rings?\n\n"
            "(A) A red cup\n(B) The phone\n(C) A notebook\n(D) Nothing\n\n"
            "Answer with the letter of the correct option.")
    assert format_mcq_prompt(QUESTION, OPTIONS, style="longvideobench") == body
    assert format_mcq_prompt(QUESTION, OPTIONS, style="longvideobench", subtitles=SUBTITLES) == (
        "Video subtitles:\n  Hello there.\nPlease pick it up.  \n\n" + body)  # not stripped by the official


def test_pipeline_prompt_styles_include_the_official_ones():
    pipe = GridProbePipeline(GridProbeConfig(grid=2, prompt_style="videomme"), selector=FakeVLM(holistic_rule(0)))
    assert pipe.prompt(QUESTION, OPTIONS) == format_mcq_prompt(QUESTION, OPTIONS, style="videomme")


# ---- 3. probe resolution ---------------------------------------------------------------------------


def qwen_utils_size(h, w, n, patch, px):
    """qwen-vl-utils fetch_image then fetch_video for a frame list, as the official build_inputs calls it."""
    f = 2 * patch

    def smart(hh, ww, lo, hi):
        a, b = max(f, round(hh / f) * f), max(f, round(ww / f) * f)
        if a * b > hi:
            s = math.sqrt(hh * ww / hi)
            a, b = math.floor(hh / s / f) * f, math.floor(ww / s / f) * f
        elif a * b < lo:
            s = math.sqrt(lo / (hh * ww))
            a, b = math.ceil(hh * s / f) * f, math.ceil(ww * s / f) * f
        return a, b

    if px > 0:  # build_inputs: resized_height = resized_width = side
        side = max(56, (int(math.sqrt(px)) // 28) * 28)
        return smart(side, side, 4 * f * f, 16384 * f * f)
    h1, w1 = smart(h, w, 4 * f * f, 16384 * f * f)
    n2 = n + n % 2
    lo = 128 * f * f
    return smart(h1, w1, lo, max(min(768 * f * f, 128000 * f * f * 0.9 / n2 * 2), int(lo * 1.05)))


@pytest.mark.parametrize("size", [(360, 640), (1080, 1920), (120, 160), (480, 854), (1920, 1080)])
@pytest.mark.parametrize("patch", [16, 14])
def test_official_probe_sizes(size, patch):
    for k in (8, 12, 15):
        assert official_probe_sizes(*size, k, "official", patch)[-1] == qwen_utils_size(*size, k, patch, 0)
        assert official_probe_sizes(*size, k, "official_crossmodel", patch)[-1] == qwen_utils_size(*size, k, patch, 50176) == (224, 224)
    # hand-checked corners: 360p keeps its aspect (rounded to 32), 1080p is capped at 768 tokens, 120p raised to 128
    assert official_probe_sizes(360, 640, 12, "official", 16)[-1] == (352, 640)
    assert official_probe_sizes(1080, 1920, 12, "official", 16)[-1] == (640, 1152)
    assert official_probe_sizes(120, 160, 12, "official", 16)[-1] == (352, 416)


def test_qwen3_processor_keeps_the_official_probe_sizes():
    """The hf path hands the official-size frames to the processor (do_resize on, cap_pixels_per_frame on);
    with Qwen3-VL's shipped video_preprocessor_config sizes it keeps them, as the official's do_resize=False does."""
    from transformers import Qwen3VLVideoProcessor

    vp = Qwen3VLVideoProcessor(patch_size=16, temporal_patch_size=2, merge_size=2,
                               size={"shortest_edge": 4096, "longest_edge": 25165824})
    for size in [(360, 640), (1080, 1920), (120, 160), (480, 854), (2160, 3840)]:
        for k in (8, 12, 16):
            for mode in ("official", "official_crossmodel"):
                h, w = official_probe_sizes(*size, k, mode, 16)[-1]
                kept = vp.get_num_of_video_patches(k, h, w, {"cap_pixels_per_frame": True})
                assert kept == math.ceil(k / 2) * (h // 16) * (w // 16), (size, k, mode)


@pytest.mark.parametrize("mode,expected", [("official", (352, 640)), ("official_crossmodel", (224, 224)), ("scale", (90, 320))])
def test_pipeline_probes_at_the_official_resolution(mode, expected):
    vlm = FakeVLM(holistic_rule(0))
    vlm.vision_patch_size = 16  # Qwen3-VL's, as HFVisionLanguageModel reports it
    pipe = GridProbePipeline(GridProbeConfig(grid=4, probe_resolution=mode), selector=vlm)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(id_frames(40, (360, 640)), "q?", ["a", "b"], output_frames=False)
    probe_sizes = {c["size"] for c in vlm.calls[:8]}
    assert probe_sizes == {expected} and out.answer == "A"
    assert {c["size"] for c in vlm.calls[8:]} == {(360, 640)}  # the focused pass is untouched


# ---- 4. Qwen3-VL timestamps --------------------------------------------------------------------------


def official_timestamps(n_frames: int) -> list[str]:
    """The official path: qwen-vl-utils pads the frame list to an even count with the last frame and returns
    no metadata, so transformers' Qwen3-VL processor takes fps = 24 with frame indices 0..n-1 and writes the
    mean time of each temporal pair of frames, to one decimal."""
    n = n_frames + n_frames % 2
    times = [i / 24 for i in range(n)]
    return [f"<{(times[i] + times[i + 1]) / 2:.1f} seconds>" for i in range(0, n, 2)]


def rendered_timestamps(processor, input_ids) -> list[str]:
    return re.findall(r"<[0-9.]+ seconds>", processor.tokenizer.decode(input_ids[0]))


@pytest.mark.parametrize("n", [12, 7])  # 7: the padded last pair reads 0.3 s, unpadded 0.2 s
def test_qwen3_timestamps_equal_the_official_path(qwen3, n):
    frames = np.random.default_rng(n).integers(0, 256, (n, 64, 64, 3), dtype=np.uint8)
    ours = rendered_timestamps(qwen3.processor, qwen3._encode_chat([user_turn(frames, "Describe.")])["input_ids"])
    assert ours == official_timestamps(n)
    # the processor called exactly as the official build_inputs calls it (no video_metadata, fps=2.0,
    # do_sample_frames / do_resize False) on qwen-vl-utils' padded float frame stack
    padded = np.concatenate([frames, frames[-1:]]) if n % 2 else frames
    video = torch.from_numpy(padded).permute(0, 3, 1, 2).float()
    chat = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Describe."}]}]
    text = qwen3.processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    official = qwen3.processor(text=[text], videos=[video], fps=2.0, do_sample_frames=False, do_resize=False,
                               padding=True, return_tensors="pt")
    assert rendered_timestamps(qwen3.processor, official["input_ids"]) == ours
    if n == 12:
        assert ours == ["<0.0 seconds>", "<0.1 seconds>", "<0.2 seconds>", "<0.3 seconds>", "<0.4 seconds>", "<0.4 seconds>"]


def test_declared_fps_is_still_an_option(qwen3, tmp_path):
    one = HFVisionLanguageModel(qwen3.model, qwen3.processor, video_fps=1.0, letter_pooling="distinct")
    frames = np.zeros((4, 64, 64, 3), np.uint8)
    assert rendered_timestamps(one.processor, one._encode_chat([user_turn(frames, "x")])["input_ids"]) == ["<0.5 seconds>", "<2.5 seconds>"]
    with pytest.raises(InputError):
        HFVisionLanguageModel(qwen3.model, qwen3.processor, letter_pooling="max")
