"""Renderer step caching (issue 50): per mode, transformer evaluations, wall time and the cached clip's PSNR / SSIM
against the uncached clip from the same seed, on a scaled-down Wan and on the builtin renderer.

    python -m benchmarks.caching [--parts wan,wan_random,builtin] [--clips 8] [--n 20] [--tasks t2v,v2v]
                                 [--train-steps 1500] [--expert-steps 300] [--work outputs/bench/caching_model]
                                 [--out outputs/bench/caching]

(docs/BENCHMARKS.md, "Renderer step caching", has the commands and numbers.)

**Scaled Wan** (``--parts wan``). A ``WanTransformer3DModel`` with Wan's structure at toy size (``SCALED``:
6 blocks, 2 heads x 32, qk RMS norm, cross-attention to a text context, AdaLN time modulation), two
experts switching at t = 875 as Wan2.2 A14B, sampled as Bernini-R is: ``WanRenderer.generate``, UniPC at
flow shift 5, 40 steps, text guidance 5.0 (two branches a step), the low expert's scale x 0.8. Random weights
would mislead here (the control below flatters every mode): a cache bets that a step's residual is close to
the last one's, which only a model that denoises makes true or false, so the model is *trained* first (once, cached in ``--work``): flow
matching on a toy world of coloured discs moving in one of four directions (16 prompts, each a two-token
context: colour and direction), in pixel space (3 channels, 16x16, 5 frames; the VAE is a carrier that
never runs), ``--train-steps`` on all noise levels, then each expert ``--expert-steps`` on its own range,
keeping an exponential moving average of the weights (22 min on one shared thread; its samples are blobs
of the prompt's colour moving its way, not crisp discs). The clip compared is those frames as uint8. SSIM
runs on them upscaled 4x (nearest) so its 11-pixel window spans about three cells, not most of a frame.
``--parts wan_random`` is the control: the same model untrained, each mode at its default.

Why its ratios carry to full size, and how far: what decides a cache's skips is how much a step's
residual differs from the last full step's, relative to its size (first_block), the per-step ratio of
residual norms (mag), or how well a low-order Taylor series in the step index follows the output
(taylorseer). Those follow the sampler's trajectory (steps, shift, sigmas, the expert switch, the
guidance), which is exactly the full-size one here, and the model's smoothness in time, which training
gives at any size. Evaluations per clip are counted, not timed, so their ratio does not depend on the
machine. What does not carry: a 14B model's residual dynamics differ in detail (so thresholds are a
starting point: MagCache's ratios must be recalibrated on the real checkpoint, which the code does), and
at 81x480x832 a skipped step saves a larger share of wall time than here, where the VAE, scheduler and
Python overhead are a bigger part of each step.

**Builtin** (``--parts builtin``). The shipped builtin renderer decoding the true plan (``benchmarks.bernini``'s
``oracle_plan``: the renderer alone) on TEST items of ``training.bernini_data`` (``--n`` per task, the item's
index as the seed), 12 Euler steps and its "auto" guidance (two branches a step), each mode against the
uncached clip, and each clip graded by the classic judge as ``benchmarks.bernini`` grades it.

MagCache is calibrated once per run with diffusers' calibration mode on an item / seed outside the
evaluated ones (``calibrate_mag_cache``). Wall time is one CPU thread on a shared machine: compare within
a run. The uncached reference batches the two branches into one forward (the renderers' default); a cached
run cannot (one branch a forward, each in its own cache context), so ``none, unbatched`` is listed too.
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import command_line, markdown_table, paired_bootstrap, paired_cell, write_results
from core.arguments import StrictParser

logger = logging.getLogger("benchmarks.caching")

G, T = 16, 5  # the scaled model's latent grid and latent frames: 128x128 pixels, 17 frames at Wan's VAE factors
SCALED = {"patch_size": (1, 2, 2), "num_attention_heads": 2, "attention_head_dim": 32, "in_channels": 3, "out_channels": 3,
          "text_dim": 32, "freq_dim": 64, "ffn_dim": 256, "num_layers": 6, "cross_attn_norm": True,
          "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 64}
COLOURS = {"red": (0.9, -0.8, -0.8), "green": (-0.8, 0.8, -0.8), "blue": (-0.8, -0.6, 0.9), "yellow": (0.9, 0.8, -0.9)}
DIRECTIONS = {"right": (0, 1), "left": (0, -1), "down": (1, 0), "up": (-1, 0)}
STEPS, SHIFT, TEXT_SCALE = 40, 5.0, 5.0
CALIBRATION_SEED = 1000
BAR_RATIO, BAR_PSNR = 2.0, 24.0
PSNR_CAP = 60.0
# the modes and knobs measured (thresholds around diffusers' defaults: FirstBlockCache 0.05, MagCache 0.06)
WAN_MODES = [("none", {}), ("first_block", {"threshold": 0.05}), ("first_block", {"threshold": 0.1}),
             ("first_block", {"threshold": 0.2}), ("first_block", {"threshold": 0.3}), ("mag", {"threshold": 0.06}),
             ("mag", {"threshold": 0.12}), ("mag", {"threshold": 0.24}), ("taylorseer", {"interval": 2}),
             ("taylorseer", {"interval": 3}), ("taylorseer", {"interval": 4})]
DEFAULT_MODES = [("none", {}), ("first_block", {}), ("mag", {}), ("taylorseer", {})]  # each mode at its defaults
BUILTIN_MODES = DEFAULT_MODES + [("first_block", {"threshold": 0.2}), ("first_block", {"threshold": 0.3}), ("mag", {"threshold": 0.24})]
ATTRIBUTES = ("color", "shape", "direction", "size")


def label(mode: str, knobs: dict) -> str:
    """The mode with its knob as it runs (the default filled in)."""
    from renderers.caching import DEFAULT_INTERVAL, DEFAULT_THRESHOLD

    if mode in DEFAULT_THRESHOLD:
        return f"{mode} threshold {knobs.get('threshold', DEFAULT_THRESHOLD[mode])}"
    if mode == "taylorseer":
        return f"{mode} interval {knobs.get('interval', DEFAULT_INTERVAL)}"
    return mode


def settings(mode: str, knobs: dict):
    from renderers.caching import CacheSettings

    return None if mode == "none" else CacheSettings(mode, **knobs)


# ---------------------------------------------------------------------------------- the scaled Wan


def prompt_table(seed: int = 1234) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fixed random text tokens: one per colour, one per direction, and a two-token negative prompt."""
    g = torch.Generator().manual_seed(seed)
    d = SCALED["text_dim"]
    return torch.randn(len(COLOURS), d, generator=g), torch.randn(len(DIRECTIONS), d, generator=g), torch.randn(1, 2, d, generator=g)


def context(prompt: int, table) -> torch.Tensor:
    colours, directions, _ = table
    return torch.stack([colours[prompt // len(DIRECTIONS)], directions[prompt % len(DIRECTIONS)]])[None]


def toy_clips(prompts: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Clips ``(B, 3, T, G, G)`` in [-1, 1]: a soft disc of the prompt's colour moving 1.5 cells a frame in its
    direction, its whole path inside the frame, over a grey background with a random tilt."""
    b = len(prompts)
    yy, xx = torch.meshgrid(torch.arange(G, dtype=torch.float32), torch.arange(G, dtype=torch.float32), indexing="ij")
    u = torch.rand(b, 6, generator=g)
    grey = -0.6 + 0.4 * u[:, 0]
    tilt = (u[:, 1] - 0.5) * 0.04
    bg = grey[:, None, None] + tilt[:, None, None] * (yy + xx)[None]
    radius = 2.0 + u[:, 2]
    colours = torch.tensor(list(COLOURS.values()))[prompts // len(DIRECTIONS)]
    steps = torch.tensor(list(DIRECTIONS.values()), dtype=torch.float32)[prompts % len(DIRECTIONS)] * 1.5
    travel = 1.5 * (T - 1)
    lo, hi = radius + 0.5, G - 0.5 - radius
    start = lo[:, None] + u[:, 3:5] * (hi - lo)[:, None]  # anywhere across the motion
    forward = lo + u[:, 5] * (hi - lo - travel)  # along it: the path [forward, forward + travel] fits
    for axis in (0, 1):
        s = steps[:, axis]
        start[:, axis] = torch.where(s > 0, forward, torch.where(s < 0, forward + travel, start[:, axis]))
    out = torch.empty(b, 3, T, G, G)
    for t in range(T):
        cy, cx = (start + t * steps).unbind(1)
        dist = ((yy[None] - cy[:, None, None]) ** 2 + (xx[None] - cx[:, None, None]) ** 2).sqrt()
        alpha = (radius[:, None, None] + 0.5 - dist).clamp(0, 1)
        out[:, :, t] = bg[:, None] * (1 - alpha[:, None]) + colours[:, :, None, None] * alpha[:, None]
    return out


def train_scaled_wan(steps: int, expert_steps: int, batch: int = 8, seed: int = 0):
    """The scaled Wan renderer, trained by flow matching on ``toy_clips``: both experts from one base."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel

    from renderers import flow
    from renderers.hf_wan import RendererConfig, WanRenderer, packed_forward

    table = prompt_table()
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    base = WanTransformer3DModel(**SCALED)

    def fit(model, n: int, expert: str, lr: float):
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, n, eta_min=lr / 10)
        ema = copy.deepcopy(model).eval()  # what is kept: an exponential moving average of the weights
        model.train()
        for i in range(n):
            prompts = torch.randint(0, len(COLOURS) * len(DIRECTIONS), (batch,), generator=g)
            x0 = toy_clips(prompts, g)
            ctx = torch.cat([context(int(p), table) for p in prompts])
            drop = torch.rand(batch, generator=g) < 0.1  # the negative prompt stands in: what guidance contrasts with
            ctx = torch.where(drop[:, None, None], table[2].expand(batch, -1, -1), ctx)
            # every noise level alike (shift 1): the sampler's shift 5 would leave the low-noise detail untrained
            sigma = flow.sample_sigmas(batch, generator=g, density="uniform", shift=1.0, sigma_range=flow.expert_sigma_range(expert))
            noise = torch.randn(x0.shape, generator=g)
            pred = packed_forward(model, flow.add_noise(x0, noise, sigma), flow.sigmas_to_timesteps(sigma), ctx)
            loss = flow.flow_matching_loss(pred, x0, noise)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            with torch.no_grad():
                decay = min(0.995, (1 + i) / (10 + i))
                for e, p in zip(ema.parameters(), model.parameters()):
                    e.lerp_(p, 1 - decay)
            if i % 100 == 0 or i == n - 1:
                logger.info("train %s step %d/%d: loss %.4f", expert, i + 1, n, loss.item())
        return ema

    base = fit(base, steps, "all", 1e-3)
    high = fit(copy.deepcopy(base), expert_steps, "high", 3e-4)
    low = fit(copy.deepcopy(base), expert_steps, "low", 3e-4)
    torch.manual_seed(seed)
    vae = AutoencoderKLWan(base_dim=4, z_dim=3, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True],
                           latents_mean=[0.0] * 3, latents_std=[1.0] * 3).eval()
    return WanRenderer(high, vae, flow.make_scheduler("unipc", SHIFT), transformer_2=low,
                       config=RendererConfig(switch_dit_boundary=flow.EXPERT_BOUNDARY))


def untrained_wan(seed: int = 0):
    """The same scaled Wan at its random initialisation: the control (see ``run_wan``)."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel

    from renderers import flow
    from renderers.hf_wan import RendererConfig, WanRenderer

    torch.manual_seed(seed)
    high, low = WanTransformer3DModel(**SCALED).eval(), WanTransformer3DModel(**SCALED).eval()
    vae = AutoencoderKLWan(base_dim=4, z_dim=3, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True],
                           latents_mean=[0.0] * 3, latents_std=[1.0] * 3).eval()
    return WanRenderer(high, vae, flow.make_scheduler("unipc", SHIFT), transformer_2=low,
                       config=RendererConfig(switch_dit_boundary=flow.EXPERT_BOUNDARY))


def scaled_wan(work: Path, steps: int, expert_steps: int):
    """The trained scaled Wan from ``work`` (trained and saved there the first time)."""
    from renderers.hf_wan import WanRenderer

    folder = work / f"scaled_wan_s{steps}_e{expert_steps}"
    if not (folder / "config.json").is_file():
        t0 = time.perf_counter()
        train_scaled_wan(steps, expert_steps).save_pretrained(folder)
        logger.info("trained the scaled Wan in %.0f s -> %s", time.perf_counter() - t0, folder)
    return WanRenderer.from_pretrained(folder, device="cpu", dtype="float32")


def wan_kwargs(prompt: int, seed: int, table) -> dict:
    from renderers.guidance import GuidanceScales

    return dict(text_embeds=context(prompt, table), negative_text_embeds=table[2], height=8 * G, width=8 * G, num_frames=4 * (T - 1) + 1,
                num_inference_steps=STEPS, guidance=GuidanceScales(video=0.0, image=0.0, text=TEXT_SCALE, plan=0.0), flow_shift=SHIFT,
                generator=seed, output_type="latent")


def as_frames(latents: torch.Tensor) -> np.ndarray:
    x = latents[0].float().clamp(-1, 1).permute(1, 2, 3, 0)  # (T, G, G, 3)
    return ((x + 1) * 127.5).round().to(torch.uint8).numpy()


def fidelity(ref: np.ndarray, frames: np.ndarray, upscale: int = 1) -> tuple[float, float]:
    from scorers.generation import psnr, ssim

    p = min(psnr(ref, frames), PSNR_CAP)
    if upscale > 1:
        ref, frames = (np.repeat(np.repeat(f, upscale, 1), upscale, 2) for f in (ref, frames))
    return p, ssim(ref, frames)


def run_wan(args, part: str = "wan") -> list[dict]:
    """``part`` "wan": the trained scaled Wan over ``WAN_MODES``; "wan_random": the control, the same model untrained,
    each mode at its default: what a cache does on a trajectory that is not a denoiser's."""
    from renderers.caching import EvaluationCounter

    renderer = scaled_wan(args.work, args.train_steps, args.expert_steps) if part == "wan" else untrained_wan()
    modes = WAN_MODES if part == "wan" else DEFAULT_MODES
    table = prompt_table()
    n_prompts = len(COLOURS) * len(DIRECTIONS)
    ratios = renderer.calibrate_mag_cache(**wan_kwargs(0, CALIBRATION_SEED, table))
    logger.info("%s MagCache ratios (calibrated on seed %d): %s", part, CALIBRATION_SEED,
                {k: [round(r, 3) for r in v] for k, v in ratios.items()})
    rows, refs = [], {}
    variants = [(label(m, k), m, k) for m, k in modes]
    variants.insert(1, ("none, unbatched", "none", {}))  # after its reference
    for clip in range(args.clips):
        prompt, seed = (clip * 5) % n_prompts, clip  # every colour and direction within 16 clips
        for name, mode, knobs in variants:
            kw = wan_kwargs(prompt, seed, table)
            if name == "none, unbatched":
                kw["batch_branches"] = False
            with EvaluationCounter(renderer.transformer, renderer.transformer_2) as count:
                t0 = time.perf_counter()
                frames = as_frames(renderer.generate(**kw, cache=settings(mode, knobs)))
                seconds = time.perf_counter() - t0
            if name == "none":
                refs[clip] = frames
            p, s = fidelity(refs[clip], frames, upscale=4)
            rows.append({"part": part, "clip": clip, "prompt": prompt, "seed": seed, "mode": name, "evaluations": count.evaluations,
                         "full": count.full, "seconds": seconds, "psnr": p, "ssim": s})
            logger.info("%s clip %d %s: %.2f evaluations, %.2f s, %.1f dB", part, clip, name, count.evaluations, seconds, p)
    return rows


# ---------------------------------------------------------------------------------- the builtin renderer


def run_builtin(args) -> list[dict]:
    from benchmarks.bernini import grade
    from renderers.builtin import BuiltinRenderer
    from renderers.caching import EvaluationCounter
    from training.bernini_data import load_pools

    renderer = BuiltinRenderer.from_pretrained()
    pools = load_pools("test", 0, args.n, tasks=tuple(args.tasks), workers=1)
    val = load_pools("val", 0, 1, tasks=("t2v",), workers=1)["t2v"]
    ratios = renderer.calibrate_mag_cache(val.plan[0].astype(np.float32), val.text[0], generator=CALIBRATION_SEED)
    logger.info("builtin MagCache ratios (VAL item 0): %s", [round(r, 3) for r in ratios["model"]])
    rows = []
    for task in args.tasks:
        pool = pools[task]
        for i in range(args.n):
            seed, ref = int(pool.index[i]), None
            for mode, knobs in BUILTIN_MODES:
                with EvaluationCounter(renderer) as count:
                    t0 = time.perf_counter()
                    frames = renderer.generate(pool.plan[i].astype(np.float32), pool.text[i], sources=pool.sources(i), generator=seed,
                                               cache=settings(mode, knobs))
                    seconds = time.perf_counter() - t0
                ref = frames if mode == "none" else ref
                p, s = fidelity(ref, frames)
                g = grade(frames, pool, i, "test", 0)
                rows.append({"part": "builtin", "task": task, "item": i, "mode": label(mode, knobs), "evaluations": count.evaluations,
                             "full": count.full, "seconds": seconds, "psnr": p, "ssim": s, "objects": g["objects"],
                             "all_correct": g["all_correct"], **({"asked": g["asked"]} if "asked" in g else {})})
                logger.info("builtin %s %d %s: %.2f evaluations, %.2f s, %.1f dB", task, i, label(mode, knobs), count.evaluations, seconds, p)
    return rows


# ---------------------------------------------------------------------------------- tables


def _share(rows: list[dict], attr: str) -> list[bool]:
    return [bool(o[attr]) for r in rows for o in r["objects"] if o[attr] is not None]


def _clip_share(row: dict, attr: str) -> float:
    return float(np.mean([bool(o[attr]) for o in row["objects"] if o[attr] is not None] or [0]))


TITLES = {"wan": "Scaled Wan, trained (UniPC 40 steps, shift 5, two experts, text guidance 5.0)",
          "wan_random": "Control: the same scaled Wan untrained (random weights), each mode at its default",
          "builtin": "Builtin renderer decoding the true plan (TEST, 12 Euler steps, auto guidance), judged"}


def summarise(rows: list[dict]) -> tuple[dict, str]:
    from scorers.videoqa import accuracy

    summary: dict = {}
    lines = ["# Renderer step caching", "",
             "Per mode, mean over clips: transformer evaluations per clip (block evaluations / depth, both branches and experts),",
             "x fewer than uncached, full forwards, seconds per clip (1 thread), PSNR (dB) and SSIM against the uncached clip from the",
             f"same seed (min PSNR over clips in brackets). Bar: >= {BAR_RATIO:g}x fewer evaluations at PSNR >= {BAR_PSNR:g} dB."]
    for part in TITLES:
        prows = [r for r in rows if r["part"] == part]
        if not prows:
            continue
        groups: dict = {}
        for r in prows:
            groups.setdefault((r.get("task", "-"), r["mode"]), []).append(r)
        base = {task: np.mean([r["evaluations"] for r in v]) for (task, mode), v in groups.items() if mode == "none"}
        table = []
        for (task, mode), rs in groups.items():
            ev = float(np.mean([r["evaluations"] for r in rs]))
            ratio = base[task] / ev
            psnr = float(np.mean([r["psnr"] for r in rs]))
            cached = not mode.startswith("none")
            cell = {"clips": len(rs), "evaluations": ev, "fewer": ratio, "full": float(np.mean([r["full"] for r in rs])),
                    "seconds": float(np.mean([r["seconds"] for r in rs])), "psnr": psnr, "psnr_min": float(min(r["psnr"] for r in rs)),
                    "ssim": float(np.mean([r["ssim"] for r in rs])), "meets_bar": bool(cached and ratio >= BAR_RATIO and psnr >= BAR_PSNR)}
            row = ([task] if part == "builtin" else []) + [mode, len(rs), f"{ev:.1f}", f"{ratio:.2f}x", f"{cell['full']:.1f}",
                                                          f"{cell['seconds']:.2f}", f"{psnr:.1f} [{cell['psnr_min']:.1f}]" if cached else "-",
                                                          f"{cell['ssim']:.3f}" if cached else "-",
                                                          ("yes" if cell["meets_bar"] else "no") if cached else "-"]
            if part == "builtin":
                ref = {r["item"]: r for r in groups[(task, "none")]}
                for a in ("color", "direction", "shape"):
                    cell[a] = accuracy(_share(rs, a)).to_dict()
                    cell[f"{a}_vs_none"] = paired_bootstrap([_clip_share(r, a) for r in rs], [_clip_share(ref[r["item"]], a) for r in rs])
                    row.append(f"{100 * cell[a]['value']:.1f}" + (f" ({paired_cell(cell[f'{a}_vs_none'])})" if cached else ""))
                asked = [r["asked"] for r in rs if r.get("asked") is not None]
                cell["asked"] = accuracy(asked).to_dict() if asked else None
                row.append(f"{100 * cell['asked']['value']:.1f}" if asked else "-")
                cell["all_correct"] = float(np.mean([r["all_correct"] for r in rs]))
            summary[f"{part}/{task}/{mode}" if part == "builtin" else f"{part}/{mode}"] = cell
            table.append(row)
        lines += ["", f"## {TITLES[part]}", ""]
        head = ["mode", "clips", "evaluations", "fewer", "full", "s / clip", "PSNR", "SSIM", "bar"]
        if part == "builtin":
            lines += ["Judge: share of caption objects right, % (paired difference to uncached per clip, points [bootstrap 95%]);",
                      "v2v: the asked change, % of edits.", ""]
            head = ["task"] + head + ["colour", "direction", "shape", "asked change"]
        lines += markdown_table(head, table)
    return summary, "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m benchmarks.caching", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", type=lambda s: [p for p in s.split(",") if p], default=["wan", "wan_random", "builtin"])
    ap.add_argument("--clips", type=int, default=8, help="scaled Wan: clips (prompt, seed) per mode (default 8)")
    ap.add_argument("--train-steps", type=int, default=1500, help="scaled Wan: training steps on all noise levels (default 1500)")
    ap.add_argument("--expert-steps", type=int, default=300, help="scaled Wan: fine-tuning steps per expert (default 300)")
    ap.add_argument("--n", type=int, default=20, help="builtin: TEST items per task (default 20)")
    ap.add_argument("--tasks", type=lambda s: [t for t in s.split(",") if t], default=["t2v", "v2v"])
    ap.add_argument("--work", type=Path, default=Path("outputs/bench/caching_model"), help="where the trained scaled Wan is kept")
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/caching"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    bad = [p for p in args.parts if p not in ("wan", "wan_random", "builtin")] + [t for t in args.tasks if t not in ("t2v", "v2v", "r2v")]
    if bad:
        ap.error(f"unknown parts / tasks {bad}: parts are wan, wan_random, builtin; tasks t2v, v2v, r2v")
    torch.set_num_threads(1)
    rows = [r for part in args.parts for r in (run_builtin(args) if part == "builtin" else run_wan(args, part))]
    summary, md = summarise(rows)
    write_results(args.out, {"command": command_line("benchmarks.caching", argv)}, summary, rows, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
