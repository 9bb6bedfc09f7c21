"""Issue 61's first two pieces: the builtin world's autoencoder (renderers/autoencoder.py, training/autoencoder.py) and
the builtin renderer denoising in its latent space (``BuiltinRendererConfig.latent_channels``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.errors import InputError
from renderers.autoencoder import decode_latents, encode_frames, load_autoencoder, world_autoencoder
from renderers.builtin import BuiltinRenderer, BuiltinRendererConfig, Conditions, patchify

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def vae():
    torch.manual_seed(0)
    return world_autoencoder((16, 16, 16), 8).eval()


def clip(n=16, seed=0):
    return (np.random.default_rng(seed).random((n, 64, 64, 3)) * 255).astype(np.uint8)


def test_the_autoencoder_compresses_4x_per_side_and_normalises_its_latents(vae):
    z = encode_frames(vae, clip(4))
    assert z.shape == (4, 8, 16, 16)
    assert decode_latents(vae, z).shape == (4, 64, 64, 3)
    vae.register_to_config(shift_factor=0.5, scaling_factor=2.0)
    try:  # the normalisation is undone exactly on the way back
        assert torch.allclose(encode_frames(vae, clip(2)), (encode_frames_raw(vae, clip(2)) - 0.5) * 2.0, atol=1e-5)
    finally:
        vae.register_to_config(shift_factor=0.0, scaling_factor=1.0)


def encode_frames_raw(vae, frames):
    from renderers.autoencoder import to_unit

    with torch.no_grad():
        return vae.encode(to_unit(frames)).latent_dist.mean


def test_a_folder_without_an_autoencoder_is_refused_by_name(tmp_path):
    with pytest.raises(InputError, match="AutoencoderKL.save_pretrained"):
        load_autoencoder(tmp_path)


def test_latent_renderer_generates_saves_and_loads_with_its_autoencoder(vae, tmp_path):
    cfg = BuiltinRendererConfig(width=32, depth=1, heads=2, patch=2, latent_channels=8, steps=2)
    model = BuiltinRenderer(cfg)
    with pytest.raises(InputError, match="autoencoder"):
        model.generate(None, "a red star", sources=[clip()])  # no autoencoder attached: said, not a traceback
    model.attach_autoencoder(vae)
    z = model.to_space(clip())
    assert z.shape == (16, 16, 16, 8) and cfg.token_pixels == 8 and cfg.patch_values == 32
    loss, _ = model.loss(z[None], Conditions(source=patchify(z, 2)[None]))
    assert torch.isfinite(loss)
    out = model.generate(None, "a red star", sources=[clip()], generator=0)
    assert out.shape == (16, 64, 64, 3) and out.dtype == np.uint8
    model.save_pretrained(tmp_path / "r")
    assert json.loads((tmp_path / "r" / "config.json").read_text())["latent_channels"] == 8
    again = BuiltinRenderer.from_pretrained(tmp_path / "r")
    assert np.array_equal(again.generate(None, "a red star", sources=[clip()], generator=0), out)


def test_latent_mode_refuses_what_draws_pixels(vae):
    for bad in ({"plan_draft": 64}, {"pose_channels": 20}):
        with pytest.raises(InputError, match="latent_channels"):
            BuiltinRendererConfig(width=32, depth=1, heads=2, patch=2, latent_channels=8, **bad)
    with pytest.raises(InputError, match="channels"):
        BuiltinRenderer(BuiltinRendererConfig(width=32, depth=1, heads=2, patch=2, latent_channels=4)).attach_autoencoder(vae)


def test_tiny_autoencoder_and_latent_renderer_runs(tmp_path):
    from training.autoencoder import main as train_autoencoder
    from training.renderer import main as train_renderer

    ae = tmp_path / "ae"
    assert train_autoencoder(["--tiny", "--out", str(ae)]) == 0
    ev = json.loads((ae / "eval.json").read_text())
    assert set(ev["val"]) == {"t2v", "v2v", "r2v"} and "gate" in ev and (ae / "card.md").is_file()
    assert load_autoencoder(ae).config.scaling_factor > 0  # calibrated from TRAIN latents
    out = tmp_path / "renderer"
    assert train_renderer(["--tiny", "--out", str(out), "--latent", str(ae)]) == 0
    model = BuiltinRenderer.from_pretrained(out)
    assert model.config.latent_channels == 4 and model.autoencoder is not None
