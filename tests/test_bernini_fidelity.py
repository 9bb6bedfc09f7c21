"""Bernini's hf numerics against the official formulas (issue 47, item 2).

Every expected value here is computed inside the test from the formula's definition, written out with
plain loops and tensor ops, never by calling the code under test: the guidance modes (Bernini-R's
x0-space, per-frame APG modes and plain chains; full Bernini's whole-latent APG delta), the planner's
three-stream CFG and which stream drops what, the per-release task tables (numbers copied from
bytedance/Bernini gradio_demo.py at 7ef670d), the source resize rule (tools/vae_transform.py), the
frame sampling rules and the T5 crop + concat of the renderer contexts.
"""

import math

import pytest
import torch

from pipelines.bernini.tasks import (
    DEFAULT_NEG_PROMPT,
    SCRIPT_NEG_PROMPT,
    fit_media_size,
    infer_task,
    source_frame_indices,
    system_prompt_for_task,
    task_defaults,
)
from planners.semantic import flow_head
from planners.semantic.layout import TokenType, VisualTokens, official_system_prompt, planner_frame_indices
from renderers import guidance as G
from renderers.hf_wan import PlanContexts, WanRenderer, crop_text_features, pad_context

pytestmark = pytest.mark.usefixtures("one_thread")
SHAPE = (1, 4, 3, 5, 6)  # (B, C, T, H, W)


def rand(seed, scale=1.0):
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


# ---- the official formulas, from their definitions

def official_frame_apg(diff, ref, eta=0.5, threshold=50.0):
    """wan_diffusion ``_normalize_diff`` (momentum 0): per frame, the (C, H, W) vector capped at norm
    ``threshold``, split along the unit (C, H, W) vector of ``ref``; orthogonal + eta * parallel."""
    out = torch.empty_like(diff)
    for b in range(diff.shape[0]):
        for t in range(diff.shape[2]):
            d = diff[b, :, t].reshape(-1).clone()
            n = d.norm()
            if threshold > 0 and n > threshold:
                d = d * (threshold / n)
            r = ref[b, :, t].reshape(-1)
            r = r / max(r.norm(), 1e-12)
            par = (d @ r) * r
            out[b, :, t] = (d - par + eta * par).reshape(diff.shape[1], diff.shape[3], diff.shape[4])
    return out


def official_apg_delta(delta, ref, parallel=0.2, orthogonal=1.0):
    """T8mars ``apg_delta``: the whole flattened latent per sample."""
    d, r = delta.reshape(delta.shape[0], -1), ref.reshape(ref.shape[0], -1)
    coef = (d * r).sum(1, keepdim=True) / (r * r).sum(1, keepdim=True).clamp_min(1e-8)
    par = coef * r
    return (parallel * par + orthogonal * (d - par)).reshape(delta.shape)


def test_t2v_apg_and_v2v_apg_are_x0_space_per_frame_apg():
    sigma_f32 = torch.tensor(0.7)  # a scheduler sigma, float32; the release takes it to float64
    x_t, sigma, w = rand(0), float(sigma_f32), 4.0
    eu, ec = rand(1, 40.0), rand(2, 40.0)  # big enough that some frames hit the norm cap
    xu, xc = x_t - sigma * eu, x_t - sigma * ec
    expected = (x_t - (xu + w * official_frame_apg(xc - xu, xc))) / sigma
    assert any((xc - xu)[0, :, t].norm() > 50 for t in range(SHAPE[2]))  # the cap is exercised
    scales = G.GuidanceScales(video=1.25, image=4.5, text=w, plan=0.5)
    t2v = G.ModeGuidance("t2v_apg", scales, has_video=False, has_images=False)
    assert [b.name for b in t2v.branches] == ["base", "text_only"]
    assert t2v.branches[0].latents == "wovae" and t2v.branches[1].latents == "wovae"  # no sources in either arm
    got = t2v.combine({"base": eu, "text_only": ec}, sample=x_t, sigma=sigma_f32)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    # v2v_apg: the same formula; the unconditional arm KEEPS the sources (wvae + negative), no source rung
    v2v = G.ModeGuidance("v2v_apg", scales, has_video=True, has_images=False)
    (u, c) = v2v.branches
    assert (u.latents, u.context) == ("wvae", "wotxt_wovit") and (c.latents, c.context) == ("wvae", "wtxt_wvit")
    got = v2v.combine({u.name: eu, c.name: ec}, sample=x_t, sigma=sigma)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    with pytest.raises(Exception, match="sample"):
        v2v.combine({u.name: eu, c.name: ec})


def test_r2v_apg_is_the_chained_x0_apg_over_references():
    x_t, sigma, (wi, wt) = rand(3), 0.4, (4.5, 4.0)
    eu, ei, eti = rand(4, 30.0), rand(5, 30.0), rand(6, 30.0)
    xu, xi, xti = (x_t - sigma * e for e in (eu, ei, eti))
    guided = xu + wi * official_frame_apg(xi - xu, xi) + wt * official_frame_apg(xti - xi, xti)
    expected = (x_t - guided) / sigma
    mode = G.ModeGuidance("r2v_apg", G.GuidanceScales(image=wi, text=wt), has_video=False, has_images=True)
    names = [(b.name, b.latents, b.context) for b in mode.branches]
    assert names == [("base", "wovae", "wotxt_wovit"), ("refs", "wimgvae", "wotxt_wovit"), ("refs_text", "wimgvae", "wtxt_wvit")]
    got = mode.combine({"base": eu, "refs": ei, "refs_text": eti}, sample=x_t, sigma=sigma)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_plain_chains_rv2v_and_v2v():
    s = G.GuidanceScales(video=1.25, image=4.5, text=4.0, plan=1.5, omega_scale=0.8)
    eu, ev, evi, evti, evtic = (rand(k) for k in range(10, 15))
    rv2v = G.ModeGuidance("rv2v", s, has_video=True, has_images=True)
    assert [b.name for b in rv2v.branches] == ["base", "video", "image", "text"]
    got = rv2v.combine({"base": eu, "video": ev, "image": evi, "text": evti})
    torch.testing.assert_close(got, eu + 1.25 * (ev - eu) + 4.5 * (evi - ev) + 4.0 * (evti - evi))
    # full Bernini's rv2v (table name rv2v_wapg): the same chain plus the plan arm, no projection
    with_plan = G.ModeGuidance("rv2v", s, has_video=True, has_images=True, has_plan=True)
    got = with_plan.combine({"base": eu, "video": ev, "image": evi, "text": evti, "plan": evtic})
    torch.testing.assert_close(got, eu + 1.25 * (ev - eu) + 4.5 * (evi - ev) + 4.0 * (evti - evi) + 1.5 * (evtic - evti))
    # Bernini-R's i2i mode "v2v": u = (sources, neg), c = (sources, prompt), u + w_txt (c - u)
    v2v = G.ModeGuidance("v2v", s, has_video=False, has_images=True)
    (u, c) = v2v.branches
    torch.testing.assert_close(v2v.combine({u.name: eu, c.name: evti}), eu + 4.0 * (evti - eu))
    # omega_scale once at the expert switch, on every omega
    rv2v.switch_expert()
    rv2v.switch_expert()
    got = rv2v.combine({"base": eu, "video": ev, "image": evi, "text": evti})
    torch.testing.assert_close(got, eu + 1.0 * (ev - eu) + 3.6 * (evi - ev) + 3.2 * (evti - evi))


def test_vae_txt_vit_wapg_projects_each_delta_over_the_whole_latent():
    s = G.GuidanceScales(video=9.0, image=1.25, text=4.0, plan=1.2)
    base, src, txt, tgt = (rand(k, 3.0) for k in range(20, 24))
    expected = (base + 1.25 * official_apg_delta(src - base, src) + 4.0 * official_apg_delta(txt - src, txt)
                + 1.2 * official_apg_delta(tgt - txt, tgt))
    mode = G.ModeGuidance("vae_txt_vit_wapg", s, has_video=True, has_images=False, has_plan=True)
    assert [(b.name, b.latents, b.context) for b in mode.branches] == [
        ("base", "wovae", "wotxt_wovit"), ("image", "wvae", "wotxt_wovit"), ("text", "wvae", "wtxt_wovit"),
        ("plan", "wvae", "wtxt_wvit")]
    got = mode.combine({"base": base, "image": src, "text": txt, "plan": tgt})
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)  # omega_vid (9) plays no part
    # no sources: the source arm stands in as the base (apg of a zero delta is zero)
    t2v = G.ModeGuidance("vae_txt_vit_wapg", s, has_video=False, has_images=False, has_plan=True)
    assert [b.name for b in t2v.branches] == ["base", "text", "plan"]
    got = t2v.combine({"base": base, "text": txt, "plan": tgt})
    torch.testing.assert_close(got, base + 4.0 * official_apg_delta(txt - base, txt) + 1.2 * official_apg_delta(tgt - txt, tgt))
    # the delta itself: parallel 0.2 + orthogonal 1.0, no cap even for a huge delta
    d, r = rand(30, 1e4), rand(31)
    torch.testing.assert_close(G.apg_delta(d, r), official_apg_delta(d, r))


# ---- the planner's three-stream CFG

def official_difflossfm(v_cond, v_uncond, v_imgcond, txt, img):
    """T8mars DiffLossFM.sample + forward_with_txt_img_cfg: three streams only when txt > 1, else cond alone."""
    if txt > 1.0:
        return v_uncond + img * (v_imgcond - v_uncond) + txt * (v_cond - v_imgcond)
    return v_cond


@pytest.mark.parametrize(("txt", "img"), [(1.2, 1.0), (1.4, 1.2), (1.0, 1.5), (0.5, 2.0), (3.0, 0.0)])
def test_three_stream_cfg_and_the_txt_above_one_rule(txt, img):
    g = torch.Generator().manual_seed(7)
    vc, vu, vic = (torch.randn(6, 8, generator=g) for _ in range(3))
    t, i = flow_head.effective_cfg(txt, img, "txt_above_1")
    torch.testing.assert_close(flow_head.three_stream_cfg(vc, vic, vu, t, i), official_difflossfm(vc, vu, vic, txt, img))
    need_ic, need_u = flow_head.needed_streams(t, i, imgcond_is_cond=False)
    if txt <= 1:
        assert (need_ic, need_u) == (False, False)  # cond alone: no extra forwards
    assert flow_head.effective_cfg(txt, img, "always") == (txt, img)  # the builtin planner's rule, unchanged


def _planner():
    from planners.semantic import SemanticPlannerConfig, builtin_planner
    from planners.semantic.backbones import TinyBackboneConfig

    torch.manual_seed(0)
    cfg = SemanticPlannerConfig(token_dim=8, plan_grid=(1, 2, 2), head_width=16, head_depth=1, cot=False)
    return builtin_planner(cfg, TinyBackboneConfig(hidden_size=32, num_layers=2, num_heads=2)).eval()


def _recorded_streams(planner, **kwargs):
    from planners.semantic import PlanRequest

    calls, build = [], planner._build

    def spy(request, grid, **kw):
        out = build(request, grid, **kw)
        if kw.get("target_rows") is not None:
            calls.append((kw.get("text", True), kw.get("visuals", True), out))
        return out

    planner._build = spy
    src = VisualTokens(torch.randn(2, 2, 2, 8, generator=torch.Generator().manual_seed(1)), "video")
    ref = VisualTokens(torch.randn(1, 2, 2, 8, generator=torch.Generator().manual_seed(2)), "image")
    request = PlanRequest(prompt="make it red", negative_prompt="ugly", sources=[ref, src], task="rv2v")
    planner.plan(request, steps=1, denoising_steps=1, generator=0, **kwargs)
    return calls


def test_planner_streams_drop_what_the_release_drops():
    planner = _planner()
    official = {"imgcond_drop": "visuals", "cfg_rule": "txt_above_1", "user_order": "sources_first"}
    streams = _recorded_streams(planner, txt_cfg=1.4, img_cfg=1.2, **official)[:3]
    assert [(t, v) for t, v, _ in streams] == [(True, True), (True, False), (False, False)]  # cond, imgcond, uncond
    imgcond = streams[1][2]
    assert not bool((imgcond["token_type"] == TokenType.INPUT).any())  # the visuals are gone, the text stays
    # txt_cfg <= 1: the cond stream alone
    assert [(t, v) for t, v, _ in _recorded_streams(planner, txt_cfg=1.0, img_cfg=1.5, **official)] == [(True, True)]
    # the builtin planner keeps its trained behaviour: imgcond drops the text, keeps the visuals
    builtin = _recorded_streams(planner, txt_cfg=1.4, img_cfg=1.2)[:3]
    assert [(t, v) for t, v, _ in builtin] == [(True, True), (False, True), (False, False)]


def test_user_turn_is_videos_then_images_then_prompt():
    from planners.semantic import PlanRequest

    planner = _planner()
    src = VisualTokens(torch.randn(2, 2, 2, 8), "video")
    ref = VisualTokens(torch.randn(1, 2, 2, 8), "image")
    request = PlanRequest(prompt="make it red", sources=[ref, src], task="rv2v", system_prompt=official_system_prompt("rv2v"))
    seq = planner._build(request, (1, 2, 2), target_rows=torch.zeros(4, 32), user_order="sources_first")
    tt = seq["token_type"].tolist()
    first_input = tt.index(int(TokenType.INPUT))
    inputs = [i for i, t in enumerate(tt) if t == TokenType.INPUT]
    assert inputs[:8] == list(range(first_input, first_input + 8))  # the 8-token video block comes first
    prompt = planner._text_rows(planner.backbone.encode_text("make it red"))
    after = inputs[-1] + 2  # past the last <|vision_end|>
    torch.testing.assert_close(seq["embeds"][after:after + len(prompt)], prompt)
    assert official_system_prompt("r2v") == "You are a helpful assistant specialized in subject-to-video generation."
    assert official_system_prompt("rv2v") == "You are a helpful assistant specialized in video editing with reference."


# ---- the per-release task tables (gradio_demo.py BASE / RENDERER / BERNINI_V1 / BERNINI_V2)

def test_task_tables_per_release():
    def row(task, release):
        d = task_defaults(task, release)
        g = d.guidance
        return (d.mode, g.video, g.image, g.text, g.plan, g.omega_scale, d.steps, d.num_frames, d.planning_steps,
                d.denoising_steps, d.txt_cfg, d.img_cfg)

    # Bernini-R: base scales, one mode per task, 40 steps, 81 frames, 480x848
    assert row("t2v", "r") == ("t2v_apg", 1.25, 4.5, 4.0, 0.5, 0.8, 40, 81, 25, 5, 1.2, 1.0)
    assert [task_defaults(t, "r").mode for t in ("t2i", "i2i", "v2v", "mv2v", "r2v", "rv2v", "ads2v")] == \
        ["t2v_apg", "v2v", "v2v_apg", "v2v_apg", "r2v_apg", "rv2v", "v2v_apg"]
    assert (task_defaults("t2v", "r").height, task_defaults("t2v", "r").width) == (480, 848)
    assert task_defaults("t2v", "r").flow_shift == 3.0 and task_defaults("t2v", "v2").flow_shift == 5.0
    assert task_defaults("t2i", "r").num_frames == 1 and task_defaults("v2v", "r").eta == 0.5 and task_defaults("v2v", "r").momentum == 0.0
    # v1
    assert row("t2v", "v1") == ("vae_txt_vit_wapg", 1.0, 1.0, 4.0, 0.5, 1.0, 50, 81, 25, 5, 1.2, 1.0)
    assert row("v2v", "v1") == ("vae_txt_vit_wapg", 1.25, 1.25, 4.0, 0.5, 0.75, 40, 81, 25, 5, 1.2, 1.0)
    assert row("rv2v", "v1") == ("rv2v", 0.75, 3.0, 4.0, 1.5, 0.75, 40, 81, 25, 5, 1.2, 1.0)
    assert row("r2v", "v1") == ("rv2v", 1.25, 2.5, 4.0, 1.5, 0.8, 40, 81, 25, 5, 1.2, 1.0)
    t2i = task_defaults("t2i", "v1")
    assert (t2i.height, t2i.width, t2i.num_frames, t2i.steps, t2i.max_image_size) == (512, 512, 1, 50, 842)
    # v2
    assert row("t2v", "v2") == ("vae_txt_vit_wapg", 1.0, 1.0, 5.0, 1.2, 1.0, 50, 81, 50, 1, 1.2, 1.0)
    assert row("v2v", "v2") == ("vae_txt_vit_wapg", 1.25, 1.25, 4.0, 1.2, 0.75, 40, 81, 50, 1, 1.2, 1.0)
    assert row("rv2v", "v2") == ("rv2v", 1.75, 4.0, 5.5, 1.5, 0.75, 40, 81, 50, 1, 1.2, 1.0)
    assert row("r2v", "v2") == ("vae_txt_vit_wapg", 1.0, 3.0, 4.5, 1.5, 0.75, 40, 81, 50, 1, 1.2, 1.0)
    assert row("t2i", "v2")[9] == 5 and task_defaults("v2v", "v2").height == 0  # size from the source
    # negative prompts: Wan's Chinese one by default, the English script prompt for v2 v2v / mv2v / r2v
    assert DEFAULT_NEG_PROMPT.startswith("\u8272\u8c03\u8273\u4e3d") and DEFAULT_NEG_PROMPT.endswith("\u5012\u7740\u8d70")
    assert SCRIPT_NEG_PROMPT.startswith("vivid tones, overexposed") and SCRIPT_NEG_PROMPT.endswith("walking backwards")
    for task, release, neg in (("v2v", "v2", SCRIPT_NEG_PROMPT), ("mv2v", "v2", SCRIPT_NEG_PROMPT), ("r2v", "v2", SCRIPT_NEG_PROMPT),
                               ("rv2v", "v2", DEFAULT_NEG_PROMPT), ("v2v", "v1", DEFAULT_NEG_PROMPT), ("t2v", "r", DEFAULT_NEG_PROMPT)):
        assert task_defaults(task, release).negative_prompt == neg, (task, release)
    assert system_prompt_for_task("t2v") == "You are a helpful assistant specialized in text-to-video generation."
    assert system_prompt_for_task("mv2v").startswith("You are a helpful assistant for editing. You might need")
    assert infer_task("i2i", False, True, 0) == "i2i" and infer_task("ads2v", True, False, 1) == "ads2v"
    with pytest.raises(Exception, match="release"):
        task_defaults("t2v", "v3")


# ---- geometry and sampling

def official_resize(height, width, max_size=848, min_size=240, stride=16, max_pixels=2048 * 2048):
    """tools/vae_transform.py MaxLongEdgeMinShortEdgeResize, written out."""
    def div(v):
        return max(stride, int(round(v / stride) * stride))

    scale = min(max_size / max(width, height), 1.0)
    scale = max(scale, min_size / min(width, height))
    w, h = div(round(width * scale)), div(round(height * scale))
    if w * h > max_pixels:
        f = max_pixels / (w * h)
        w, h = div(round(w * f)), div(round(h * f))
    if max(w, h) > max_size:
        f = max_size / max(w, h)
        w, h = div(round(w * f)), div(round(h * f))
    return h, w


def test_source_resize_keeps_aspect_like_the_release():
    for h, w in [(480, 832), (1080, 1920), (1920, 1080), (720, 720), (100, 3000), (240, 320), (37, 61), (2000, 300)]:
        for cap in (848, 842):
            assert fit_media_size(h, w, cap) == official_resize(h, w, cap), (h, w, cap)
    assert fit_media_size(1080, 1920) == (480, 848) and fit_media_size(480, 832) == (480, 832)
    assert all(v % 16 == 0 for v in fit_media_size(1001, 777))


def official_nframes(total, video_fps, fps=16, frame_factor=4, max_frames=81):
    """tools/video_utils.py smart_video_nframes(add_one=True), then the reader's clamp to the last frame."""
    n = math.floor(total / video_fps * fps / frame_factor) * frame_factor + 1
    n = max(n, frame_factor + 1)
    span = math.floor(total / frame_factor) * frame_factor + 1 if video_fps == fps else total
    idx = [int(v) for v in torch.linspace(0, span - 1, n).round().long().tolist()]
    n = min(math.floor(max_frames / frame_factor) * frame_factor + 1, n)
    return [min(i, total - 1) for i in idx[:n]]


def test_frame_sampling_rules():
    # renderer sources: the clip at the output fps from its start, 4k+1 frames, at most num_frames
    assert source_frame_indices(200, 16.0, 81) == list(range(81))
    for total, fps, frames in [(300, 30.0, 81), (40, 16.0, 81), (97, 24.0, 81), (500, 60.0, 49), (3, 16.0, 81), (81, 16.0, 1)]:
        assert source_frame_indices(total, fps, frames) == official_nframes(total, fps, max_frames=frames), (total, fps, frames)
    # planner sources: 2 fps, an even count (T8mars planner_video_frame_indices): 81 frames at 16 fps -> 10
    assert planner_frame_indices(81, 16.0) == torch.linspace(0, 80, 10).round().long().tolist()
    assert len(planner_frame_indices(5, 16.0)) == 2


# ---- text contexts

def test_t5_is_cropped_to_its_length_before_the_plan_then_padded():
    d = 6
    text = torch.zeros(1, 512, d)
    text[0, :7] = torch.randn(7, d)
    neg = torch.zeros(1, 512, d)
    neg[0, :3] = torch.randn(3, d)
    plan = PlanContexts(torch.randn(1, 20, d), torch.randn(1, 16, d), torch.randn(1, 16, d))
    stub = type("Stub", (), {"_check_context": staticmethod(lambda name, x: x)})()
    ctx = WanRenderer._contexts(stub, text, neg, plan, 512)
    expected = torch.cat([text[:, :7], plan.with_target, torch.zeros(1, 512 - 27, d)], 1)
    torch.testing.assert_close(ctx["wtxt_wvit"], expected)
    torch.testing.assert_close(ctx["wtxt_wovit"][:, 7:23], plan.without_target)
    torch.testing.assert_close(ctx["wotxt_wovit"][:, :19], torch.cat([neg[:, :3], plan.uncond], 1))
    assert all(v.shape == (1, 512, d) for v in ctx.values())
    exact = WanRenderer._contexts(stub, text, neg, plan, 0)  # xocialize's exact-length reading, an option
    assert exact["wtxt_wvit"].shape == (1, 27, d) and exact["wotxt_wovit"].shape == (1, 19, d)
    assert crop_text_features(text).shape == (1, 7, d) and pad_context(torch.ones(1, 600, d)).shape == (1, 600, d)
    # without a plan the 512-row features go in unchanged (Bernini-R)
    assert WanRenderer._contexts(stub, text, neg, None)["wtxt_wvit"] is text


def test_bernini_r_pipeline_runs_the_official_row():
    """End to end on a tiny in-memory Wan: release r, t2v -> t2v_apg, shift 3.0, Wan's negative, the t2v system
    prompt before the UMT5 prompt (not before the negative)."""
    from tiny_wan import tiny_text_encoder, tiny_transformer, tiny_vae

    from pipelines.bernini import BerniniConfig, BerniniPipeline

    te, tok = tiny_text_encoder(0)
    renderer = WanRenderer(tiny_transformer(0), tiny_vae(0), None, te, tok)
    seen = {}
    real = renderer.generate

    def spy(**kwargs):
        seen.update(kwargs)
        return real(**kwargs)

    renderer.generate = spy
    pipe = BerniniPipeline(BerniniConfig(num_frames=5, height=32, width=32, steps=2), renderer=renderer)
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a red fox", generator=0)
    assert out.config["release"] == "r" and out.config["guidance_mode"] == "t2v_apg" and out.config["flow_shift"] == 3.0
    assert seen["negative_prompt"] == DEFAULT_NEG_PROMPT and seen["system_prompt"] == system_prompt_for_task("t2v")
    assert seen["guidance"].text == 4.0 and seen["apg"].eta == 0.5 and seen["apg"].norm_threshold == 50.0
