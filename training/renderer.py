"""Train the builtin Bernini renderer (renderers/builtin.py) on worldgen t2v / edit / ref2v with ground-truth plans.

The renderer is trained apart from the planner (spec b.10, stage R): its plan input is the builtin
ViT's patch tokens of the target clip itself (``training.bernini_data``), so what it learns is to decode
a plan into pixels, with the prompt and the in-context sources. Every step draws one task (``mix``), a
batch of that task's TRAIN pool, and drops each condition at random for guidance: the text
(``p_drop_text``), the plan (``p_drop_plan``) and the sources (``p_drop_sources``) independently, all
three together with ``p_drop_all``. Batches, dropout, sigmas and noise are seeded by the step, so a
resumed run continues exactly (``training/loop.py``).

Evaluation renders held-out clips from their ground-truth plans (VAL during training, TEST at the end)
and grades them with the classic judge (``scorers.generation.judge_against``: colour / shape / direction
/ size of each caption object): the renderer's ceiling, what a perfect planner would get. The final
evaluation also renders without the plan (the text-only renderer), and measures v2v's PSNR outside
the edited object against the source.

    python -m training.renderer --out DIR [--steps N] [--stop-at STEP] [--tiny] [--no-resume] [--eval-only]
                                [--init DIR] [--lr LR] [--sigma-logit-mean M] [--sigma-logit-std S] [--plan-draft H]
                                [--draft-kind mlp|conv] [--draft-residual] [--draft-only] [--ema DECAY]
                                [--guidance-scale G]

``--sigma-logit-mean`` / ``--sigma-logit-std`` set the training noise levels (sigma = 1 - sigmoid(N(M, S)),
``flow.sample_sigmas``). JiT's -0.8 / 0.8, the shipped run's until 2026-12-05, draws sigma < 0.2 for 0.3% of
examples, and that renderer, never trained there, made a noised clip worse at sigma 0.05-0.1 than at 0.2-0.3
(docs/BENCHMARKS.md): the last sampling steps, where edges are drawn, blurred them.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from core.atomic import atomic_path, write_json_atomic
from core.errors import InputError
from renderers.builtin import (
    KIND,
    BuiltinRenderer,
    BuiltinRendererConfig,
    Conditions,
    frames_to_tensor,
    pad_text,
    patchify,
)
from training.bernini_data import (
    DEFAULT_CACHE,
    TASKS,
    DataConfig,
    Pool,
    edit_region,
    load_pools,
)
from training.common import TRAIN_CONFIG, check_run_dir, design_notes, earlier_run_facts, finish_run, parse_script, script_recipe
from training.loop import TrainConfig, Trainer

logger = logging.getLogger(__name__)

ATTRIBUTES = ("color", "shape", "direction", "size")
PSNR_CAP = 60.0  # dB; identical clips (inf) count as this in means


@dataclass
class RendererRecipe:
    # the shipped size: measured ~1.3 s/step at batch 4 on one thread, so 4,500 steps fit ~1.5 h of one core
    # (the config's default size, width 192 x 8 blocks, took 5-13 s/step at batch 8)
    renderer: BuiltinRendererConfig = field(default_factory=lambda: BuiltinRendererConfig(width=128, depth=4, heads=2))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=4500, lr=5e-4, warmup=200, weight_decay=0.01, ema=0.999,
                                                                   eval_every=1500, ckpt_every=100, log_every=25, threads=1,
                                                                   eval_at_end=False))
    data: DataConfig = field(default_factory=DataConfig)
    pool: int = 2000  # TRAIN items per task, built once (training.bernini_data caches them)
    mix: tuple[float, ...] = (0.4, 0.3, 0.3)  # step probabilities of t2v, v2v, r2v
    batch: int = 4
    p_drop_text: float = 0.1
    p_drop_plan: float = 0.1
    p_drop_sources: float = 0.1
    p_drop_all: float = 0.05
    # [PROPOSED] Gaussian noise on the plan, std ~ U(0, plan_noise) per clip (the tokens' RMS is ~1): the
    # planner's tokens are never the ViT's exact ones, so the renderer learns to decode near-misses too
    plan_noise: float = 0.3
    val_items: int = 4  # VAL items per task rendered at each periodic evaluation
    test_items: int = 30  # TEST items per task in the final evaluation
    text_only_items: int = 10  # of those, rendered again without the plan (0: skip)
    eval_steps: int | None = None  # sampling steps for evaluation (None: the model's default)
    seed: int = 0
    workers: int = 1  # processes generating the pools
    cache: str = str(DEFAULT_CACHE)
    init: str | None = None  # start from this saved renderer's weights (a fine-tune; the sizes must match)
    # [PROPOSED] train the plan draft alone, by its own loss (the DiT gets no gradient and stays as it was): a draft
    # trained jointly at the DiT's learning rate stayed a grey blur (draft MSE 0.02-0.03 after 1,500 steps)
    draft_only: bool = False
    # [PROPOSED, issue 61] denoise in the latent space of this autoencoder folder (renderers/autoencoder.py): the
    # pools' frames, sources and references are encoded once (cached beside the pools); the renderer's config then
    # needs latent_channels / latent_factor to match it (``--latent`` sets them, with 2x2 patches)
    autoencoder: str | None = None

    def resolved(self) -> RendererRecipe:
        if len(self.mix) != len(TASKS) or any(m < 0 for m in self.mix) or not sum(self.mix) > 0:
            raise InputError("mix", self.mix, f"give {len(TASKS)} non-negative weights for {TASKS}")
        return self


def tiny_recipe(out: Path) -> RendererRecipe:
    """A model and data small enough for a smoke test of the whole script (seconds)."""
    return RendererRecipe(renderer=BuiltinRendererConfig(width=32, depth=1, heads=2, steps=2),
                          train=TrainConfig(steps=3, lr=1e-3, warmup=1, ema=0.9, eval_every=2, ckpt_every=1, log_every=1, threads=1,
                                            eval_at_end=False),
                          pool=2, batch=2, val_items=1, test_items=1, text_only_items=1, workers=1, cache=str(out / "cache"))


# ---------------------------------------------------------------------------- batches


class TextStates:
    """MiniLM token states per distinct text, computed once (``(L, 384)`` float32 each, kept on the CPU).

    The encoder runs on ``device`` (default: a GPU when there is one, ``core.device.select_device``): a large
    pool has tens of thousands of distinct prompts, minutes of MiniLM on one CPU thread."""

    def __init__(self, encoder=None, device=None):
        if encoder is None:
            from core.device import select_device
            from planners.builtin.text import MiniLM

            encoder = MiniLM(device=select_device(device))
        self.encoder, self.states = encoder, {}

    def add(self, texts) -> None:
        new = sorted(set(texts) - set(self.states))
        for s in range(0, len(new), 512):
            chunk = new[s : s + 512]
            self.states.update(zip(chunk, (t.float().cpu() for t in self.encoder.tokens(chunk))))

    def __getitem__(self, text: str) -> torch.Tensor:
        if text not in self.states:
            self.add([text])
        return self.states[text]


class LatentPools:
    """The latent mode's pools in the autoencoder's space: each pool's frames, sources and references encoded once
    (float16 ``(n, F, h, w, C)`` / ``(n, 5, h, w, C)``), cached beside the pools, keyed by the autoencoder's weights."""

    def __init__(self, pools: dict[str, Pool], vae, vae_dir: str | Path, cache: str | Path):
        from renderers.autoencoder import encode_frames
        from training.bernini_data import weights_hash

        self.arrays: dict[str, dict[str, np.ndarray]] = {}
        tag = weights_hash(Path(vae_dir), "diffusion_pytorch_model.safetensors")
        for task, pool in pools.items():
            path = Path(cache) / f"latents_{task}_n{len(pool)}_idx{int(pool.index[0])}-{int(pool.index[-1])}_vae{tag}.npz"
            if path.is_file():
                with np.load(path, allow_pickle=False) as z:
                    self.arrays[task] = {k: z[k] for k in z.files}
                continue
            arrays = {}
            for name in ("frames", "source", "refs"):
                pix = getattr(pool, name)
                if pix is None:
                    continue
                flat = pix.reshape(-1, *pix.shape[-3:])
                z = torch.cat([encode_frames(vae, flat[i : i + 256]) for i in range(0, len(flat), 256)])
                arrays[name] = z.permute(0, 2, 3, 1).reshape(*pix.shape[:-3], *z.shape[2:], z.shape[1]).numpy().astype(np.float16)
            with atomic_path(path) as tmp:
                np.savez(tmp, **arrays)
            self.arrays[task] = arrays
            logger.info("encoded %s's %d items into latents (%s)", task, len(pool), path)

    def get(self, task: str, name: str, idx) -> torch.Tensor:
        return torch.from_numpy(self.arrays[task][name][idx].astype(np.float32))


class Batches:
    """Step-seeded batches (resuming at step s gives exactly the batches from s on)."""

    def __init__(self, pools: dict[str, Pool], texts: TextStates, recipe: RendererRecipe, step: int = 0,
                 latents: LatentPools | None = None):
        self.pools, self.texts, self.r, self.step, self.latents = pools, texts, recipe, step, latents
        self.mix = np.asarray(recipe.mix, np.float64) / sum(recipe.mix)

    def __next__(self) -> dict:
        r, p = self.r, self.r.renderer.patch
        rng = np.random.default_rng([r.seed, 2, self.step])
        seed = int(np.random.default_rng([r.seed, 3, self.step]).integers(2**62))
        self.step += 1
        task = TASKS[int(rng.choice(len(TASKS), p=self.mix))]
        pool = self.pools[task]
        idx = rng.integers(len(pool), size=r.batch)
        b = len(idx)
        drop_all = rng.random(b) < r.p_drop_all
        keep_text = (rng.random(b) >= r.p_drop_text) & ~drop_all
        keep_plan = (rng.random(b) >= r.p_drop_plan) & ~drop_all
        keep_src = (rng.random(b) >= r.p_drop_sources) & ~drop_all
        text, text_mask = pad_text([self.texts[pool.text[i]] for i in idx])
        plan = pool.plan[idx].astype(np.float32)
        if r.plan_noise > 0:
            std = rng.uniform(0, r.plan_noise, size=(b, 1, 1, 1, 1)).astype(np.float32)
            plan = plan + std * rng.standard_normal(plan.shape, dtype=np.float32)
        cond = Conditions(plan=torch.from_numpy(plan), plan_mask=torch.from_numpy(keep_plan),
                          text=text, text_mask=text_mask & torch.from_numpy(keep_text)[:, None])
        def space(name: str, pixels: np.ndarray, sel) -> torch.Tensor:  # the DiT's space: pixels or latents
            return frames_to_tensor(pixels[sel]) if self.latents is None else self.latents.get(task, name, sel)

        if pool.source is not None:
            cond.source = patchify(space("source", pool.source, idx), p)
            cond.source_mask = torch.from_numpy(keep_src)
        if pool.refs is not None:
            k = int(pool.n_refs[idx].max())
            cond.refs = patchify(space("refs", pool.refs, (idx[:, None], np.arange(k)[None])), p)
            cond.ref_mask = torch.from_numpy((np.arange(k)[None] < pool.n_refs[idx][:, None]) & keep_src[:, None])
            cond.ref_ids = tuple(float(j + 1) for j in range(k))
        return {"task": task, "target": space("frames", pool.frames, idx), "cond": cond, "seed": seed, "draft_only": r.draft_only}


def loss_fn(model, batch):
    if batch["draft_only"]:
        loss = model.draft_loss(batch["target"], batch["cond"])
        if loss is None:  # every plan of this batch dropped: a zero loss that still touches the draft
            loss = sum(p.sum() for p in model.draft.parameters()) * 0.0
        return loss, {"draft_mse": loss.detach(), f"loss_{batch['task']}": loss.detach()}
    loss, logs = model.loss(batch["target"], batch["cond"], torch.Generator().manual_seed(batch["seed"]))
    return loss, {**logs, f"loss_{batch['task']}": loss.detach()}


# ---------------------------------------------------------------------------- evaluation


def render_item(model: BuiltinRenderer, pool: Pool, i: int, texts: TextStates, steps: int | None, use_plan: bool = True) -> np.ndarray:
    plan = torch.from_numpy(pool.plan[i].astype(np.float32)) if use_plan else None
    return model.generate(plan, texts[pool.text[i]], sources=pool.sources(i), steps=steps, generator=int(pool.index[i]))


def _mean(values) -> float | None:
    v = [x for x in values if x is not None and np.isfinite(x)]
    return round(float(np.mean(v)), 4) if v else None


@torch.no_grad()
def evaluate(model: BuiltinRenderer, pools: dict[str, Pool], texts: TextStates, n: int, steps: int | None, *, split: str, seed: int,
             use_plan: bool = True) -> dict:
    """Render the first ``n`` items of each task's pool and judge them against the target's caption record.

    Per task: the share of caption objects whose colour / shape / direction / size the judge reads right,
    clips with everything right, PSNR against the ground-truth target (a plan's ceiling is pixel
    agreement), v2v's PSNR outside the edited object against the source, and seconds per clip.
    """
    from scorers.generation import edit_preservation, judge_against, psnr

    model.eval()
    out = {}
    for task, pool in pools.items():
        flags, clips, psnrs, kept, secs = defaultdict(list), [], [], [], []
        for i in range(min(n, len(pool))):
            t0 = time.perf_counter()
            frames = render_item(model, pool, i, texts, steps, use_plan)
            secs.append(time.perf_counter() - t0)
            res = judge_against(frames, pool.attributes[i])
            for o in res["objects"]:
                for a in ATTRIBUTES:
                    if o[a] is not None:
                        flags[a].append(bool(o[a]))
            clips.append(bool(res["all_correct"]))
            psnrs.append(min(psnr(pool.frames[i], frames), PSNR_CAP))
            if task == "v2v":
                region = edit_region(split, seed, int(pool.index[i]), pool.cfg)
                if region is not None:
                    kept.append(min(edit_preservation(pool.source[i], frames, region)["psnr"], PSNR_CAP))
        row = {a: _mean(flags[a]) for a in ATTRIBUTES}
        row.update(objects=len(flags["color"]), clips=len(clips), clips_all_right=_mean(clips), psnr_target=_mean(psnrs),
                   seconds_per_clip=_mean(secs))
        if task == "v2v":
            row["psnr_outside_edit"] = _mean(kept)
            row["n_outside_edit"] = len(kept)
        out[task] = row
    return out


# ---------------------------------------------------------------------------- the run


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def card(recipe: RendererRecipe, ev: dict, out: Path) -> str:
    c, t = recipe.renderer, recipe.train
    rows = []
    for label, key in (("GT plan (ceiling)", "test"), ("no plan (text only)", "test_text_only")):
        for task, m in ev.get(key, {}).items():
            rows.append(f"| {label} | {task} | {_fmt(m['color'])} | {_fmt(m['shape'])} | {_fmt(m['direction'])} | {_fmt(m['size'])} | "
                        f"{_fmt(m['clips_all_right'])} | {_fmt(m['psnr_target'])} | {_fmt(m.get('psnr_outside_edit'))} | {m['clips']} |")
    size_mb = (out / "model.safetensors").stat().st_size / 2**20 if (out / "model.safetensors").is_file() else 0.0
    notes_text = design_notes(out, "renderer")  # carried over from this folder's card, else the shipped one
    space = (f"a latent DiT over the {c.latent_channels}-channel latents of its autoencoder (`autoencoder/`, 1/{c.latent_factor} "
             "per side)" if getattr(c, "latent_channels", None) else "a pixel-patch DiT")
    return f"""# builtin-renderer

Bernini's builtin renderer (`renderers/builtin.py`): {space} ({c.depth} blocks, width {c.width},
{c.heads} heads, {c.patch}x{c.patch} patches, {c.attention} attention, SA-3D RoPE, {c.prediction}-prediction) that
decodes a plan of builtin-ViT patch tokens ({c.plan_frames} plan frames x {c.image_size // c.plan_patch}x{c.image_size // c.plan_patch}
x {c.plan_dim}) into a {c.num_frames}-frame {c.image_size}x{c.image_size} clip, with the prompt's MiniLM token states by
cross-attention and the source clip (v2v) or reference images (r2v) in context.

## Data and training
- worldgen TRAIN split, {recipe.pool} clips per task (t2v, edit as v2v, ref2v as r2v; levels 1-3 in turn), 16 frames
  64x64; plans are the shipped builtin ViT's patch tokens of the target clip (ground truth: the renderer is trained
  apart from the planner).
- {ev.get('steps')} of {t.steps} steps, batch {recipe.batch}, task mix {recipe.mix}, AdamW lr {t.lr}, warmup {t.warmup} + cosine,
  EMA {t.ema}; condition dropout text {recipe.p_drop_text}, plan {recipe.p_drop_plan}, sources {recipe.p_drop_sources},
  all {recipe.p_drop_all}; plan noise std up to {recipe.plan_noise}. {ev.get('train_minutes')} min, {ev.get('sec_per_step')} s/step on {t.threads} CPU thread(s).
  Weights {size_mb:.1f} MB.

## Measured (TEST split, first {recipe.test_items} items per task; {ev.get('sampling')})
Share of caption objects the classic judge reads right (`scorers.generation.judge_against`), clips with every
attribute right, PSNR (dB) against the ground-truth target, and v2v's PSNR outside the edited object against
the source (identical pixels count as {PSNR_CAP:.0f} dB).

| plan | task | colour | shape | direction | size | clips all right | PSNR target | PSNR outside edit | clips |
|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Seconds per clip (1 thread, the settings above): {', '.join(f"{k} {v['seconds_per_clip']}" for k, v in ev.get('test', {}).items())}.

## What it can and cannot do
- With a ground-truth plan this is the renderer's ceiling; the Bernini pipeline's numbers depend on the planner's
  plans, measured by the benchmark, not here.
- Trained on worldgen clips only: flat-coloured shapes and stick figures on plain or textured backgrounds, at
  16 frames 64x64. Other sizes run (RoPE and the plan alignment are size-free) but are untested.
{notes_text}"""


def final_eval(out: Path, recipe: RendererRecipe, model: BuiltinRenderer, texts: TextStates, extra: dict) -> dict:
    """``eval.json`` and ``card.md``: TEST items rendered from ground-truth plans, and without plans."""
    torch.set_num_threads(1)
    test = load_pools("test", recipe.seed, recipe.test_items, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    texts.add([t for p in test.values() for t in p.text])
    steps = recipe.eval_steps or model.config.steps
    ev = {**extra, "sampling": f"{steps} Euler steps, guidance 'auto' at scale {model.config.guidance_scale}",
          "test": evaluate(model, test, texts, recipe.test_items, steps, split="test", seed=recipe.seed)}
    if recipe.text_only_items:
        ev["test_text_only"] = evaluate(model, test, texts, recipe.text_only_items, steps, split="test", seed=recipe.seed, use_plan=False)
    write_json_atomic(out / "eval.json", ev)
    (out / "card.md").write_text(card(recipe, ev, out))
    logger.info("test: %s", json.dumps(ev["test"]))
    return ev


def _check_flags(args) -> None:
    """The fine-tune flags' values, checked before anything is written."""
    if args.init is not None and not (Path(args.init) / "config.json").is_file():
        raise InputError("--init", args.init, "pass a folder holding a saved renderer (config.json + model.safetensors)")
    if args.lr is not None and not (np.isfinite(args.lr) and args.lr > 0):
        raise InputError("--lr", args.lr, "use a positive learning rate, e.g. 2e-4")
    if args.sigma_logit_std is not None and not (np.isfinite(args.sigma_logit_std) and args.sigma_logit_std > 0):
        raise InputError("--sigma-logit-std", args.sigma_logit_std, "use a positive spread, e.g. 1.0")
    if args.guidance_scale is not None and not (np.isfinite(args.guidance_scale) and args.guidance_scale >= 1):
        raise InputError("--guidance-scale", args.guidance_scale, "use a scale >= 1 (1: no guidance), e.g. 2.0")
    if args.ema is not None and not (0 <= args.ema < 1):
        raise InputError("--ema", args.ema, "use a decay in [0, 1), e.g. 0.999, or 0 for none")
    if args.sigma_logit_mean is not None and not np.isfinite(args.sigma_logit_mean):
        raise InputError("--sigma-logit-mean", args.sigma_logit_mean, "use a finite number, e.g. 0.0")
    if args.plan_draft is not None and args.plan_draft < 0:
        raise InputError("--plan-draft", args.plan_draft, "use 0 (off) or the draft's hidden width, e.g. 128")
    for flag, on in (("--draft-residual", args.draft_residual), ("--draft-only", args.draft_only)):
        if on and not args.plan_draft:
            raise InputError(flag, True, "needs a plan draft: add --plan-draft H")


def _options(recipe: RendererRecipe, args) -> RendererRecipe:
    """``recipe`` with ``--init``, ``--lr``, the noise-level flags and ``--plan-draft`` applied."""
    r = recipe.renderer
    renderer = replace(r, sigma_logit_mean=r.sigma_logit_mean if args.sigma_logit_mean is None else args.sigma_logit_mean,
                       sigma_logit_std=r.sigma_logit_std if args.sigma_logit_std is None else args.sigma_logit_std,
                       plan_draft=r.plan_draft if args.plan_draft is None else args.plan_draft,
                       draft_kind=r.draft_kind if args.draft_kind is None else args.draft_kind,
                       draft_residual=r.draft_residual or args.draft_residual,
                       guidance_scale=r.guidance_scale if args.guidance_scale is None else args.guidance_scale)
    train = recipe.train if args.lr is None else replace(recipe.train, lr=args.lr)
    if args.ema is not None:
        train = replace(train, ema=args.ema or None)
    if args.draft_only:  # the draft starts at zero: an EMA would keep much of that start
        train = replace(train, ema=None)
    if args.latent is not None:
        from renderers.autoencoder import load_autoencoder

        vae = load_autoencoder(args.latent)  # an InputError naming the folder if it holds none
        renderer = replace(renderer, latent_channels=int(vae.config.latent_channels), patch=2,
                           latent_factor=2 ** (len(vae.config.block_out_channels) - 1))
    return replace(recipe, renderer=renderer, train=train, init=recipe.init if args.init is None else args.init,
                   draft_only=recipe.draft_only or args.draft_only, autoencoder=recipe.autoencoder if args.latent is None else args.latent)


def init_weights(model: BuiltinRenderer, directory: str) -> None:
    """Copy a saved renderer's weights into ``model``: every tensor must match, and only the plan draft (which a
    renderer saved without it lacks) may start fresh; an ``InputError`` otherwise."""
    src = BuiltinRenderer.from_pretrained(directory)
    try:
        missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
    except RuntimeError as e:  # another width, depth or patch
        raise InputError("--init", directory, f"its weights do not fit this recipe's renderer ({str(e).splitlines()[-1].strip()})") from None
    fresh = [k for k in missing if not k.startswith(("draft.", "draft_embed."))]
    if fresh or unexpected:
        raise InputError("--init", directory, f"its weights do not fit this recipe's renderer (missing {fresh}, unexpected {unexpected})")
    logger.info("initialised from %s (fresh: %s)", directory, sorted({k.split(".")[0] for k in missing}) or "none")


def _flags(ap) -> None:
    ap.add_argument("--init", metavar="DIR", help="start from the weights of the renderer saved in DIR (a fine-tune)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default 5e-4)")
    ap.add_argument("--sigma-logit-mean", type=float, metavar="M", help="training noise levels: sigma = 1 - sigmoid(N(M, S)) (default -0.8)")
    ap.add_argument("--sigma-logit-std", type=float, metavar="S", help="(default 0.8; see the module docstring)")
    ap.add_argument("--plan-draft", type=int, metavar="H", help="hidden width of the plan draft, a decoder from the plan tokens to "
                    "pixels that the DiT reads as an input (0 = off, the default) [PROPOSED]")
    ap.add_argument("--draft-kind", choices=("mlp", "conv"), help="the draft's decoder: 'mlp' reads each token alone (the default), "
                    "'conv' each plan frame's token grid [PROPOSED]")
    ap.add_argument("--draft-residual", action="store_true", help="predict the clean target as the draft plus a correction [PROPOSED]")
    ap.add_argument("--guidance-scale", type=float, metavar="G", help="the guidance scale saved in the config, what generate() "
                    "uses by default (default 2.0; 1: no guidance)")
    ap.add_argument("--ema", type=float, metavar="DECAY", help="EMA decay of the saved weights (default 0.999; 0: none, the last "
                    "weights are saved). A fine-tune that changes what the output means (--draft-residual on weights trained "
                    "without it) needs 0: an EMA of 0.999 over 1,500 steps still holds 22%% of the start")
    ap.add_argument("--latent", metavar="DIR", help="denoise in the latent space of the autoencoder saved in DIR "
                    "(python -m training.autoencoder), with 2x2 latent patches [PROPOSED]")
    ap.add_argument("--draft-only", action="store_true", help="train only the plan draft, by its own loss, without an EMA "
                    "(a first stage before a joint fine-tune) [PROPOSED]")


def main(argv=None) -> int:
    args = parse_script("python -m training.renderer", "Train the builtin Bernini renderer on worldgen with GT plans.", "outputs/train/renderer",
                        argv, extra=_flags)
    _check_flags(args)
    out = check_run_dir(args.out, KIND, "renderer")
    recipe = script_recipe(RendererRecipe, out, args, tiny_recipe, KIND, "python -m training.renderer")
    with_options = _options(recipe, args)
    if with_options != recipe:  # script_recipe saved the recipe before these flags: save it again
        recipe = with_options
        write_json_atomic(out / TRAIN_CONFIG, {"model": KIND, "recipe": RendererRecipe.__name__,
                                               "provenance": "python -m training.renderer", **asdict(recipe)})
    texts = TextStates()
    if args.eval_only:
        final_eval(out, recipe, BuiltinRenderer.from_pretrained(out), texts, earlier_run_facts(out))
        return 0
    t_start = time.perf_counter()
    torch.set_num_threads(recipe.train.threads or 1)
    pools = load_pools("train", recipe.seed, recipe.pool, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    val = load_pools("val", recipe.seed, recipe.val_items, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    logger.info("pools ready in %.0f s", time.perf_counter() - t_start)
    texts.add([t for p in (*pools.values(), *val.values()) for t in p.text])
    torch.manual_seed(recipe.train.seed)  # the initial weights depend on the recipe alone
    model = BuiltinRenderer(recipe.renderer)
    if recipe.init and not (out / "run" / "checkpoint" / "state.pt").is_file():
        init_weights(model, recipe.init)
    latents = None
    if recipe.autoencoder:
        from renderers.autoencoder import load_autoencoder

        model.attach_autoencoder(load_autoencoder(recipe.autoencoder))
        latents = LatentPools(pools, model.autoencoder, recipe.autoencoder, recipe.cache)
    steps = recipe.eval_steps or recipe.renderer.steps

    def periodic(m):
        return evaluate(m, val, texts, recipe.val_items, steps, split="val", seed=recipe.seed)

    trainer = Trainer(model, loss_fn, recipe.train, out / "run", evaluate=periodic)
    if not args.no_resume:
        trainer.load_checkpoint()
    trainer.fit(Batches(pools, texts, recipe, trainer.step, latents), until=args.stop_at)
    return finish_run(trainer, out, recipe.train.steps, (time.perf_counter() - t_start) / 60,
                      lambda final, facts: final_eval(out, recipe, final, texts, facts))


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
