"""The builtin Bernini renderer: shapes, the target-only loss, SA-3D segments, guidance, determinism,
persistence, input errors, and one tiny run of its training script."""

import json

import numpy as np
import pytest
import torch

from core.errors import InputError
from renderers import rope
from renderers.builtin import (
    BuiltinRenderer,
    BuiltinRendererConfig,
    Conditions,
    _rope_table,
    _rotate,
    frames_to_tensor,
    patchify,
    plan_frame_indices,
    unpatchify,
)
from renderers.guidance import GuidanceScales

TINY = BuiltinRendererConfig(width=32, depth=2, heads=2, steps=2)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (on a busy 2-core machine, 2 threads measured 25x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(seed=0, **kw):
    torch.manual_seed(seed)
    model = BuiltinRenderer(BuiltinRendererConfig(**{**TINY.__dict__, **kw})).eval()
    # the zero-initialised gates and head make a fresh model ignore its inputs: give them weights
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "table" in name or name.startswith(("time_mod", "out_mod", "head")) or "cross.out" in name:
                p.normal_(0, 0.2)
    return model


def inputs(seed=0, frames=16, size=64):
    rng = np.random.default_rng(seed)
    plan = rng.normal(size=(4, size // 8, size // 8, 192)).astype(np.float32)
    video = rng.integers(0, 256, (frames, size, size, 3), dtype=np.uint8)
    refs = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(2)]
    return torch.from_numpy(plan), torch.from_numpy(rng.normal(size=(5, 384)).astype(np.float32)), video, refs


def tokens(x: np.ndarray) -> torch.Tensor:
    return patchify(frames_to_tensor(x), 8)


# ---------------------------------------------------------------------------- pieces


def test_plan_frames_and_patches_round_trip():
    assert plan_frame_indices(16, 4) == [0, 5, 10, 15]
    assert plan_frame_indices(1, 1) == [0]
    x = torch.randn(2, 3, 16, 24, 3)
    assert patchify(x, 8).shape == (2, 3, 6, 192)
    assert torch.equal(unpatchify(patchify(x, 8), 8, 16, 24), x)


def test_complex_rotation_equals_rope_apply_rotary():
    rot = _rope_table(3, 4, 4, 1.0, (2.0, 3.5), 32, 10000.0)
    cos, sin = rope.multi_segment_freqs([((3, 4, 4), 1.0), ((1, 4, 4), 2.0), ((1, 4, 4), 3.5), ((3, 4, 4), 0.0)], 32)
    x = torch.randn(2, rot.shape[0], 2, 32)
    assert torch.allclose(_rotate(x, rot[None]), rope.apply_rotary(x, (cos, sin)), atol=1e-6)


@pytest.mark.parametrize("attention", ["factorised", "full"])
def test_forward_shapes(attention):
    model = tiny(attention=attention)
    plan, text, video, refs = inputs()
    x = torch.randn(2, 16, 64, 192)
    for cond in (Conditions(plan=plan[None].expand(2, -1, -1, -1, -1), text=text[None].expand(2, -1, -1)),
                 Conditions(source=tokens(video)[None].expand(2, -1, -1, -1), source_mask=torch.tensor([True, False])),
                 Conditions(refs=tokens(np.stack(refs))[None].expand(2, -1, -1, -1), ref_ids=(1.0, 2.0))):
        with torch.no_grad():
            assert model(x, torch.rand(2), cond).shape == (2, 16, 64, 192)
    with torch.no_grad():
        packed = model(x, torch.rand(2), Conditions(source=tokens(video)[None].expand(2, -1, -1, -1)), all_tokens=True)
    assert packed.shape == (2, 2 * 16 * 64, 192)


def test_loss_ignores_source_positions_but_sources_are_attended():
    model = tiny()
    plan, text, video, refs = inputs()
    target = frames_to_tensor(inputs(1)[2])[None]
    cond = Conditions(plan=plan[None], text=text[None], source=tokens(video)[None], refs=tokens(np.stack(refs))[None], ref_ids=(2.0, 3.0))
    loss, _ = model.loss(target, cond, torch.Generator().manual_seed(0))
    n_ctx = (16 + 2) * 64

    def spoil(module, args, out):  # whatever the head says at source positions must not count
        out = out.clone()
        if out.ndim == 3 and out.shape[1] > n_ctx:
            out[:, :n_ctx] += 1e3
        return out

    handle = model.head.register_forward_hook(spoil)
    try:
        spoiled, _ = model.loss(target, cond, torch.Generator().manual_seed(0))
    finally:
        handle.remove()
    assert torch.allclose(loss, spoiled)
    other = Conditions(**{**cond.__dict__, "source": tokens(inputs(2)[2])[None]})
    changed, _ = model.loss(target, other, torch.Generator().manual_seed(0))
    assert not torch.allclose(loss, changed)  # the target's prediction reads the source
    loss.backward()
    assert model.patch_embed.weight.grad is not None and model.null_text.grad is not None


def test_plan_draft_starts_silent_learns_the_tokens_pixels_and_reaches_the_target():
    base = tiny()
    drafted = BuiltinRenderer(BuiltinRendererConfig(**{**TINY.__dict__, "plan_draft": 16})).eval()
    missing, unexpected = drafted.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and sorted({k.split(".")[0] for k in missing}) == ["draft", "draft_embed"]
    plan, text, _, _ = inputs()
    x_t = torch.randn(1, 16, 64, 192, generator=torch.Generator().manual_seed(0))
    cond = Conditions(plan=plan[None], text=text[None])
    with torch.no_grad():  # zero-initialised: attaching a draft to trained weights changes nothing
        assert torch.allclose(base(x_t, 0.5, cond), drafted(x_t, 0.5, cond))
    target = frames_to_tensor(inputs(1)[2])[None]
    opt = torch.optim.Adam(drafted.draft.parameters(), lr=1e-2)
    first = None
    for step in range(30):  # the draft's own loss term teaches it the target's pixels at the plan frames
        loss, logs = drafted.loss(target, cond, torch.Generator().manual_seed(step))
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = float(logs["draft_mse"]) if first is None else first
    assert float(logs["draft_mse"]) < 0.8 * first
    with torch.no_grad():
        drafted.draft_embed.weight.normal_(0, 0.2)
        drafted.draft_embed.bias.normal_(0, 0.2)
        other = Conditions(plan=plan[None], text=text[None], plan_mask=torch.tensor([False]))
        assert not torch.allclose(drafted(x_t, 0.5, cond), base(x_t, 0.5, cond))  # the draft reaches the target tokens
        # a dropped plan takes its draft with it: the row reads as in the model without one
        assert torch.allclose(drafted(x_t, 0.5, other), base(x_t, 0.5, other))
    with pytest.raises(InputError, match="plan_draft"):
        BuiltinRendererConfig(plan_draft=-1)
    with pytest.raises(InputError, match="plan_draft"):
        BuiltinRendererConfig(patch=4, plan_draft=8)


def test_conv_draft_is_a_residual_on_the_clean_frame_where_the_plan_is_kept():
    base = tiny()
    cfg = BuiltinRendererConfig(**{**TINY.__dict__, "plan_draft": 16, "draft_kind": "conv", "draft_residual": True})
    drafted = BuiltinRenderer(cfg).eval()
    drafted.load_state_dict(base.state_dict(), strict=False)
    plan, text, _, _ = inputs()
    x_t = torch.randn(1, 16, 64, 192, generator=torch.Generator().manual_seed(0))
    cond = Conditions(plan=plan[None], text=text[None])
    dropped = Conditions(plan=plan[None], text=text[None], plan_mask=torch.tensor([False]))
    with torch.no_grad():
        assert torch.allclose(base(x_t, 0.5, cond), drafted(x_t, 0.5, cond))  # a blank draft: no change
        pixels = drafted.plan_draft(plan[None])
        assert pixels.shape == (1, 4, 64, 192)  # each plan frame's grid decoded to the 8x8 patches of 64x64 pixels
        drafted.draft.out.weight.normal_(0, 0.2)
        pixels = drafted.plan_draft(plan[None])
        out, ref = drafted(x_t, 0.5, cond), base(x_t, 0.5, cond)
        # draft_embed is still zero, so the only change is the draft added to the clean-frame prediction, exact at plan frames
        for k, t in enumerate(plan_frame_indices(16, 4)):
            assert torch.allclose(out[0, t], ref[0, t] + pixels[0, k], atol=1e-5)
        mid = out[0, 2] - ref[0, 2]  # frame 2 lies 2/5 of the way from plan frame 0 to plan frame 1 (frame 5)
        assert torch.allclose(mid, 0.6 * pixels[0, 0] + 0.4 * pixels[0, 1], atol=1e-5)
        assert torch.allclose(drafted(x_t, 0.5, dropped), base(x_t, 0.5, dropped))  # a dropped plan drops its draft
    for bad, match in (({"draft_kind": "cnn", "plan_draft": 8}, "draft_kind"), ({"draft_residual": True}, "draft_residual"),
                       ({"draft_residual": True, "plan_draft": 8, "prediction": "v"}, "draft_residual"),
                       ({"draft_kind": "conv", "plan_draft": 8, "patch": 12, "plan_patch": 12, "image_size": 48}, "power of 2")):
        with pytest.raises(InputError, match=match):
            BuiltinRendererConfig(**bad)


def test_references_keep_their_segment_ids_through_a_reordering():
    model = tiny()
    _, _, _, refs = inputs()
    x, sigma = torch.randn(1, 16, 64, 192), torch.tensor([0.5])
    r = tokens(np.stack(refs))[None]
    with torch.no_grad():
        a = model(x, sigma, Conditions(refs=r, ref_ids=(1.0, 2.0)))
        swapped = model(x, sigma, Conditions(refs=r[:, [1, 0]], ref_ids=(2.0, 1.0)))  # same tokens, same ids
        relabelled = model(x, sigma, Conditions(refs=r, ref_ids=(2.0, 1.0)))  # the ids trade images
    assert torch.allclose(a, swapped, atol=1e-5)
    assert not torch.allclose(a, relabelled, atol=1e-4)  # SA-3D tells the references apart
    plain = tiny(segment_rope=False)
    with torch.no_grad():
        p1 = plain(x, sigma, Conditions(refs=r, ref_ids=(1.0, 2.0)))
        p2 = plain(x, sigma, Conditions(refs=r, ref_ids=(2.0, 1.0)))
    assert torch.allclose(p1, p2)  # plain 3D RoPE ignores the ids


# ---------------------------------------------------------------------------- generate


def test_generate_is_deterministic_for_a_generator():
    model = tiny()
    plan, text, video, refs = inputs()
    out = model.generate(plan, text, sources=[video], generator=torch.Generator().manual_seed(3))
    assert out.shape == (16, 64, 64, 3) and out.dtype == np.uint8
    again = model.generate(plan, text, sources=[video], generator=torch.Generator().manual_seed(3))
    other = model.generate(plan, text, sources=[video], generator=torch.Generator().manual_seed(4))
    assert np.array_equal(out, again) and not np.array_equal(out, other)
    steps = []
    model.generate(plan.reshape(4, 64, 192), None, sources=refs, generator=0, callback=lambda i, info: steps.append((i, info["denoised"].shape)))
    assert steps == [(0, (1, 16, 64, 192)), (1, (1, 16, 64, 192))]


def test_guidance_with_every_scale_one_is_the_conditional_prediction():
    model = tiny()
    plan, text, video, refs = inputs()
    kw = {"sources": [video, *refs], "generator": 0, "output_type": "tokens"}
    cond = model.generate(plan, text, guidance=None, **kw)
    ones = model.generate(plan, text, guidance=GuidanceScales(1.0, 1.0, 1.0, 1.0), **kw)
    assert torch.allclose(cond, ones, atol=1e-4)
    assert model.generate(None, "", guidance="auto", generator=0).shape == (16, 64, 64, 3)  # nothing to guide


def test_save_and_reload_give_identical_output(tmp_path):
    model = tiny()
    plan, text, _, refs = inputs()
    model.save_pretrained(tmp_path / "r")
    assert json.loads((tmp_path / "r" / "config.json").read_text())["model"] == "builtin-renderer"
    back = BuiltinRenderer.from_pretrained(tmp_path / "r")
    a = model.generate(plan, text, sources=refs, generator=7)
    assert np.array_equal(a, back.generate(plan, text, sources=refs, generator=7))


def test_default_model_fits_the_size_budget():
    n = sum(p.numel() for p in BuiltinRenderer().parameters())
    assert n * 4 / 2**20 <= 40


@pytest.mark.parametrize("kwargs, name", [
    ({"height": 60}, "height"),
    ({"width": 0}, "width"),
    ({"steps": 0}, "steps"),
    ({"plan": np.zeros((4, 4, 4, 192), np.float32)}, "plan"),
    ({"plan": np.zeros((4, 8, 8, 100), np.float32)}, "plan"),
    ({"sources": [np.zeros((64, 64, 3), np.uint8)] * 6}, "references"),
    ({"sources": [np.zeros((16, 32, 32, 3), np.uint8)]}, "sources[0]"),
    ({"sources": [np.zeros((8, 64, 64, 3), np.uint8)], "num_frames": 16}, "sources[0]"),
    ({"sources": [np.zeros((16, 64, 64, 3), np.uint8)] * 2}, "sources[1]"),
    ({"text": torch.zeros(3, 10)}, "text"),
    ({"guidance": "loud"}, "guidance"),
    ({"generator": -1}, "generator"),
])
def test_bad_inputs_name_the_argument(kwargs, name):
    model = tiny()
    args = {"plan": inputs()[0], **kwargs}
    with pytest.raises(InputError) as e:
        model.generate(**args)
    assert e.value.name == name


# ---------------------------------------------------------------------------- the training script


def test_tiny_training_run_writes_a_model_card_and_resumes(tmp_path):
    from training.renderer import main

    assert main(["--out", str(tmp_path / "run"), "--tiny"]) == 0
    out = tmp_path / "run"
    for name in ("config.json", "model.safetensors", "train_config.json", "eval.json", "card.md"):
        assert (out / name).is_file(), name
    ev = json.loads((out / "eval.json").read_text())
    assert set(ev["test"]) == {"t2v", "v2v", "r2v"} and "test_text_only" in ev
    assert "| GT plan (ceiling) | t2v |" in (out / "card.md").read_text()
    BuiltinRenderer.from_pretrained(out).generate(None, "a red circle", generator=0)
    # stop at step 2, resume to 3: the same weights as the uninterrupted run (its pools rebuilt from the same seeds)
    part = tmp_path / "part"
    assert main(["--out", str(part), "--tiny", "--stop-at", "2"]) == 0
    assert main(["--out", str(part), "--tiny"]) == 0
    a, b = BuiltinRenderer.from_pretrained(out).state_dict(), BuiltinRenderer.from_pretrained(part).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
