"""The builtin backend behind the VisionLanguageModel protocol (random weights: behaviour, not quality)."""

import numpy as np
import pytest
import torch

from planners.builtin import BuiltinVisionLanguageModel, question_from_prompt
from planners.builtin.vit import BuiltinViT, ViTConfig
from planners.builtin.vlm import BuiltinVLMModel, VLMConfig
from planners.protocol import VisionLanguageModel, format_mcq_prompt, user_turn

TINY_VIT = ViTConfig(width=32, depth=1, heads=2)


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    torch.manual_seed(0)
    model = BuiltinVLMModel(VLMConfig(d_model=32, layers=1, heads=2, vit=TINY_VIT, vocab=["<pad>", "<bos>", "<eos>", "a", "red", "circle"]))
    path = tmp_path_factory.mktemp("builtin") / "vlm"
    model.save_pretrained(path)
    return BuiltinVisionLanguageModel.from_pretrained(path)


def _frames(t, size=64, seed=0):
    return np.random.default_rng(seed).integers(0, 255, (t, size, size, 3), dtype=np.uint8)


def test_protocol_and_posterior(vlm):
    assert isinstance(vlm, VisionLanguageModel) and vlm.backend == "builtin"
    opts = ["red", "green", "blue", "white"]
    prompt = format_mcq_prompt("Which colour never appears?", opts)
    for frames in (_frames(1)[0], _frames(4), _frames(12, 32)):
        logp = vlm.option_posterior(frames, prompt, opts)
        assert logp.shape == (4,) and abs(np.exp(logp).sum() - 1) < 1e-9
        np.testing.assert_array_equal(logp, vlm.option_posterior(frames, prompt, opts))  # deterministic
    assert question_from_prompt(prompt) == "Which colour never appears?"


def test_relative_times_reach_the_model_and_are_checked(vlm):
    from core.errors import InputError

    opts = ["red", "green"]
    prompt = format_mcq_prompt("Which colour never appears?", opts)
    frames = _frames(4, 32)
    spread = vlm.option_posterior(frames, prompt, opts)  # no times: taken as evenly spread over the video
    np.testing.assert_allclose(vlm.option_posterior(frames, prompt, opts, relative_times=[0, 1 / 3, 2 / 3, 1]), spread, atol=1e-6)
    stretch = vlm.option_posterior(frames, prompt, opts, relative_times=[0.50, 0.51, 0.52, 0.53])
    assert not np.allclose(stretch, spread)  # a short stretch is a different input from a spread sample
    with pytest.raises(InputError, match="relative_times"):
        vlm.option_posterior(frames, prompt, opts, relative_times=[0.1, 0.2])
    with pytest.raises(InputError, match=r"not seconds"):
        vlm.option_posterior(frames, prompt, opts, relative_times=[0, 2.5, 5, 7.5])


def test_generate_encode_and_flops(vlm):
    texts = vlm.generate(user_turn(_frames(4), "Describe the video."))
    assert len(texts) == 1 and isinstance(texts[0], str)
    img = vlm.encode_images(_frames(3))
    txt = vlm.encode_text(["a red circle", "a blue star"])
    assert img.shape == (3, 384) and txt.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1, atol=1e-5)
    assert vlm.count_tokens(12, "q", (32, 32)) - vlm.count_tokens(0, "q", (32, 32)) == 12 * 4
    assert vlm.count_tokens(1, "q", (64, 64)) - vlm.count_tokens(0, "q", (64, 64)) == 16
    assert vlm.flops(2, "q") < vlm.flops(4, "q") < vlm.flops(8, "q")
    assert vlm.flops(12, "q", (32, 32)) < vlm.flops(12, "q", (64, 64)) / 3  # probes at half size are much cheaper


def test_odd_sizes_are_resized_and_roundtrip(vlm, tmp_path):
    opts = ["a", "b"]
    a = vlm.option_posterior(_frames(2, 50), "Question: x", opts)
    assert a.shape == (2,)
    vlm.save_pretrained(tmp_path / "again")
    b = BuiltinVisionLanguageModel.from_pretrained(tmp_path / "again")
    np.testing.assert_allclose(b.option_posterior(_frames(2, 50), "Question: x", opts), a)


def test_missing_weights_error(tmp_path):
    from core.errors import MediaError

    with pytest.raises(MediaError, match="make weights"):
        BuiltinVisionLanguageModel.from_pretrained(tmp_path)


def test_vit_embeds_at_two_resolutions(tmp_path):
    torch.manual_seed(0)
    vit = BuiltinViT(TINY_VIT)
    assert vit.embed(_frames(2, 64)).shape == (2, 384) and vit.embed(_frames(2, 32)).shape == (2, 384)
    vit.save_pretrained(tmp_path / "vit")
    np.testing.assert_allclose(BuiltinViT.from_pretrained(tmp_path / "vit").embed(_frames(1)), vit.embed(_frames(1)), atol=1e-6)
    from core.errors import InputError

    with pytest.raises(InputError, match="multiples"):
        vit.embed(_frames(1, 60))


def test_vision_cache_reuses_frames_and_changes_nothing(vlm, monkeypatch):
    frames = _frames(6, 32, seed=3)
    prompt = format_mcq_prompt("Which colour never appears?", ["red", "blue"])
    vlm._vision_cache.clear()
    first = vlm.option_posterior(frames, prompt, ["red", "blue"])
    seen = []
    real = vlm.model.vision
    monkeypatch.setattr(vlm.model, "vision", lambda x: seen.append(len(x)) or real(x))
    again = vlm.option_posterior(frames[[5, 0, 2, 1, 3, 4]][[1, 3, 2, 4, 5, 0]], prompt, ["red", "blue"])
    np.testing.assert_allclose(again, first, atol=1e-6)
    assert seen == []  # every frame came from the cache
    vlm.option_posterior(np.concatenate([frames[:2], _frames(2, 32, seed=9)]), prompt, ["red", "blue"])
    assert seen == [2]  # only the two new frames went through the ViT
    vlm._vision_cache_size, size = 3, vlm._vision_cache_size
    try:
        vlm.option_posterior(frames, prompt, ["red", "blue"])
        assert len(vlm._vision_cache) == 3
    finally:
        vlm._vision_cache_size = size


def test_text_longer_than_the_encoder_reads_is_warned_about_not_cut_silently(caplog):
    from planners.builtin.text import MAX_TOKENS, MiniLM

    with caplog.at_level("WARNING", logger="planners.builtin.text"):
        MiniLM().encode(["how many stars " * 40])
    assert f"reads {MAX_TOKENS} of the" in caplog.text
