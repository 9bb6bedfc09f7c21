"""Train the builtin renderer in its pose-guided mode (AnyMotion spec b.5, stage S2) on worldgen ``motion_edit``.

The model is ``renderers.builtin.BuiltinRenderer`` with ``pose_channels=20`` (the target skeleton's limb map
and joint heatmaps, ``core.skeleton.pose_maps``, added to the target tokens they cover through a
zero-initialised PoseGuider), the source clip in context (identity and background) and
``source_residual`` [PROPOSED]: the clean-frame prediction is the source frame plus the network's output,
so what is not edited is copied by construction and the network learns the change (erase the source
figure, draw the target one). Training windows of ``renderer.num_frames`` frames are cut at random from
the 36-frame quadruplets; the skeleton is the ground-truth target's (teacher forcing), jittered
[PROPOSED] so planned skeletons, which are never exact, render as well. The instruction is read by
cross-attention. Conditions are dropped at random (the pose map, for the direct-editing ablation and
guidance; the text). Batches are seeded by the step, so a resumed run continues exactly.

Evaluation renders whole held-out clips from the ground-truth target skeleton (``renderers.pose_guided``:
window by window) and grades them with ``scorers.motion.grade_motion_edit``: PCK of the re-detected
pose (the classic stick-figure reader), identity kept, background PSNR outside the person masks. The
final evaluation also renders without the skeleton (instruction only: the direct-editing ablation).

    python -m training.motion_renderer --out DIR [--steps N] [--stop-at STEP] [--tiny] [--no-resume] [--eval-only]
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from core.atomic import write_json_atomic
from core.errors import InputError
from core.skeleton import POSE_MAP_CHANNELS, pose_maps
from renderers.builtin import KIND, BuiltinRenderer, BuiltinRendererConfig, Conditions, frames_to_tensor, pad_text, patchify
from renderers.pose_guided import render_motion
from training.common import check_run_dir, design_notes, earlier_run_facts, finish_run, parse_script, script_recipe
from training.loop import TrainConfig, Trainer
from training.motion_data import DEFAULT_CACHE, HELD_OUT, MotionDataConfig, MotionPool, load_motion_pool
from training.renderer import TextStates

logger = logging.getLogger(__name__)


def motion_renderer_config(**kw) -> BuiltinRendererConfig:
    """The shipped pose-guided renderer's size: Bernini's builtin renderer size, 8-frame windows."""
    base = dict(width=128, depth=4, heads=2, num_frames=8, pose_channels=POSE_MAP_CHANNELS, source_residual=True,
                guidance_scale=1.0, steps=8)
    return BuiltinRendererConfig(**{**base, **kw})


@dataclass
class MotionRendererRecipe:
    renderer: BuiltinRendererConfig = field(default_factory=motion_renderer_config)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=3000, lr=5e-4, warmup=200, weight_decay=0.01, ema=0.999,
                                                                   eval_every=1000, ckpt_every=100, log_every=25, threads=1,
                                                                   eval_at_end=False))
    data: MotionDataConfig = field(default_factory=MotionDataConfig)
    pool: int = 3000
    batch: int = 4
    p_drop_text: float = 0.1
    p_drop_pose: float = 0.15
    pose_jitter_px: float = 0.8  # [PROPOSED] target-skeleton noise std ~ U(0, this) pixels per window
    # [PROPOSED] regional loss amplification (spec b.5, after MimicMotion): tokens that touch the source or target
    # person weigh this much more, since everything else is copied from the source; 1 = off (the shipped run:
    # x5 measured no better at step 1,000, see the card)
    person_weight: float = 1.0
    val_items: int = 4
    test_items: int = 30
    direct_items: int = 10  # TEST items also rendered without the skeleton (the direct-editing ablation)
    eval_steps: int | None = None
    seed: int = 0
    cache: str = str(DEFAULT_CACHE)
    workers: int = 2

    def resolved(self) -> MotionRendererRecipe:
        if self.renderer.pose_channels != POSE_MAP_CHANNELS or not self.renderer.source_residual:
            raise InputError("renderer", self.renderer, f"the motion renderer needs pose_channels={POSE_MAP_CHANNELS} and source_residual")
        return self


def tiny_recipe(out: Path) -> MotionRendererRecipe:
    return MotionRendererRecipe(renderer=motion_renderer_config(width=32, depth=1, num_frames=4, steps=2),
                                train=TrainConfig(steps=3, lr=1e-3, warmup=1, ema=0.9, eval_every=2, ckpt_every=1, log_every=1, threads=1,
                                                  eval_at_end=False),
                                pool=3, batch=2, val_items=1, test_items=1, direct_items=1, workers=1, cache=str(out / "cache"))


class Batches:
    """Step-seeded batches of random windows (resuming at step s gives exactly the batches from s on)."""

    def __init__(self, pool: MotionPool, texts: TextStates, recipe: MotionRendererRecipe, step: int = 0):
        self.pool, self.texts, self.r, self.step = pool, texts, recipe, step

    def __next__(self) -> dict:
        r, c = self.r, self.r.renderer
        rng = np.random.default_rng([r.seed, 7, self.step])
        seed = int(np.random.default_rng([r.seed, 8, self.step]).integers(2**62))
        self.step += 1
        idx = rng.integers(len(self.pool), size=r.batch)
        f = c.num_frames
        total = self.pool.source.shape[1]
        starts = rng.integers(0, total - f + 1, size=r.batch)
        tgt = np.stack([self.pool.target[i, s : s + f] for i, s in zip(idx, starts)])
        src = np.stack([self.pool.source[i, s : s + f] for i, s in zip(idx, starts)])
        maps = []
        for i, s in zip(idx, starts):
            kp = self.pool.target_kp[i, s : s + f].copy()
            kp[..., :2] += rng.normal(0, rng.uniform(0, r.pose_jitter_px), kp[..., :2].shape)
            maps.append(pose_maps(kp, *src.shape[2:4]))
        keep_text = rng.random(r.batch) >= r.p_drop_text
        keep_pose = rng.random(r.batch) >= r.p_drop_pose
        text, text_mask = pad_text([self.texts[self.pool.text[i]] for i in idx])
        cond = Conditions(text=text, text_mask=text_mask & torch.from_numpy(keep_text)[:, None],
                          source=patchify(frames_to_tensor(src), c.patch),
                          pose=patchify(torch.from_numpy(np.stack(maps)), c.patch), pose_mask=torch.from_numpy(keep_pose))
        out = {"target": frames_to_tensor(tgt), "cond": cond, "seed": seed}
        if r.person_weight != 1.0:
            person = np.stack([self.pool.person[i, s : s + f] for i, s in zip(idx, starts)])  # (B, F, H, W)
            p = c.patch
            b_, f_, h_, w_ = person.shape
            touched = person.reshape(b_, f_, h_ // p, p, w_ // p, p).any((3, 5)).reshape(b_, f_, -1)
            out["token_weight"] = torch.from_numpy(np.where(touched, r.person_weight, 1.0).astype(np.float32))
        return out


def loss_fn(model, batch):
    return model.loss(batch["target"], batch["cond"], torch.Generator().manual_seed(batch["seed"]), token_weight=batch.get("token_weight"))


# ---------------------------------------------------------------------------- evaluation


def _mean(values) -> float | None:
    v = [float(x) for x in values if x is not None and np.isfinite(x)]
    return round(float(np.mean(v)), 4) if v else None


@torch.no_grad()
def evaluate(model: BuiltinRenderer, pool: MotionPool, n: int, steps: int | None, use_pose: bool = True) -> dict:
    """Render the first ``n`` items from their ground-truth target skeletons (or none) and grade them."""
    from scorers.motion import grade_motion_edit
    from trackers.pose import ClassicPoseReader

    model.eval()
    reader = ClassicPoseReader()
    grades, secs = {"seen": [], "held_out": []}, []
    for i in range(min(n, len(pool))):
        t0 = time.perf_counter()
        out = render_motion(model, pool.source[i], pool.target_kp[i] if use_pose else None, pool.text[i], steps=steps,
                            generator=int(pool.index[i]))
        secs.append(time.perf_counter() - t0)
        g = grade_motion_edit(out, pool.source[i], pool.target[i], pool.target_kp[i], pool.source_kp[i], pool.edit_region(i), reader)
        grades["held_out" if pool.fine[i] in HELD_OUT else "seen"].append(g)
    res = {}
    for k, gs in grades.items():
        if gs:
            res[k] = {m: _mean(g.get(m) for g in gs) for m in ("pck@0.05", "pck@0.1", "pck@0.2", "moving_pck@0.1", "identity_kept",
                                                                 "colour_kept", "proportions_kept", "background_psnr", "background_ssim")}
            res[k]["items"] = len(gs)
    res["seconds_per_clip"] = _mean(secs)
    return res


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def card(recipe: MotionRendererRecipe, ev: dict, out: Path) -> str:
    c, t = recipe.renderer, recipe.train
    rows = []
    for label, key in (("GT skeleton (ceiling)", "test"), ("no skeleton (direct editing)", "test_direct")):
        for g in ("seen", "held_out"):
            m = ev.get(key, {}).get(g)
            if m:
                rows.append(f"| {label} | {g} | {m['items']} | {_fmt(m['pck@0.1'])} | {_fmt(m['moving_pck@0.1'])} | {_fmt(m['identity_kept'])} | "
                            f"{_fmt(m['background_psnr'])} | {_fmt(m['background_ssim'])} |")
    size_mb = (out / "model.safetensors").stat().st_size / 2**20 if (out / "model.safetensors").is_file() else 0.0
    return f"""# builtin-motion-renderer

AnyMotion's builtin pose-guided renderer: `renderers/builtin.py`'s pixel-patch DiT ({c.depth} blocks, width {c.width},
{c.heads} heads, {c.patch}x{c.patch} patches, factorised attention, SA-3D RoPE, x-prediction) in its pose-guided mode:
the target skeleton's {c.pose_channels}-channel pose maps through a zero-initialised PoseGuider added to the target
tokens, the source clip in context (segment 1), the instruction by cross-attention, and the clean frame predicted
as the source frame plus the network's output (`source_residual`). {c.num_frames}-frame windows; a clip of any length
is rendered window by window (`renderers/pose_guided.py`).

## Data and training
- worldgen `motion_edit` TRAIN split, {recipe.pool} quadruplets ({recipe.data.num_frames} frames, {recipe.data.size}x{recipe.data.size}, levels 1-3),
  no held-out fine class as a target (`training.motion_data.HELD_OUT`); random {c.num_frames}-frame windows; the
  ground-truth target skeleton jittered by up to {recipe.pose_jitter_px} px (teacher forcing, stage S2); tokens touching
  the source or target person weigh {recipe.person_weight}x in the loss (regional amplification; 1 = off).
- {ev.get('steps')} of {t.steps} steps, batch {recipe.batch}, AdamW lr {t.lr}, warmup {t.warmup} + cosine, EMA {t.ema};
  dropout: text {recipe.p_drop_text}, pose map {recipe.p_drop_pose}. {ev.get('train_minutes')} min, {ev.get('sec_per_step')} s/step
  on {t.threads} CPU thread(s). Weights {size_mb:.1f} MB.

## Measured (TEST split, first {recipe.test_items} items; {ev.get('sampling')})
Graded by `scorers.motion.grade_motion_edit`: PCK@0.1 of the output's pose re-detected by the classic
stick-figure reader against the target skeleton (all labelled joints; and the joints the edit moves),
identity kept (colour, and proportions against the reader's reading of the true target where that reading is right), background PSNR (dB, capped at 60) / SSIM outside the source and target
person masks, against the ground-truth target.

| skeleton | classes | items | PCK@0.1 | PCK@0.1 moving joints | identity kept | background PSNR | background SSIM |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Seconds per 36-frame clip (1 thread): {ev.get('test', {}).get('seconds_per_clip')}.

## What it can and cannot do
- With the ground-truth skeleton this is the renderer's ceiling; AnyMotion's numbers depend on the planner's
  skeletons, measured by `benchmarks/anymotion.py`.
- Trained on worldgen's stick figures only (one person, a static camera: the source residual assumes the
  background stays where it is), at 64x64.
- It does not read MetaQuery states (`query_dim=0`): it was trained apart from, and at the same time as, the
  SCoT planner; the skeleton carries what the stick world needs. The pipeline passes the planner's queries to any
  renderer whose `query_dim` is set.
{design_notes(out, "motion_renderer")}"""


def final_eval(out: Path, recipe: MotionRendererRecipe, model: BuiltinRenderer, extra: dict) -> dict:
    torch.set_num_threads(1)
    test = load_motion_pool("test", recipe.seed, max(recipe.test_items, recipe.direct_items), recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    steps = recipe.eval_steps or model.config.steps
    ev = {**extra, "sampling": f"{steps} Euler steps, one forward a step", "test": evaluate(model, test, recipe.test_items, steps)}
    if recipe.direct_items:
        ev["test_direct"] = evaluate(model, test, recipe.direct_items, steps, use_pose=False)
    write_json_atomic(out / "eval.json", ev)
    (out / "card.md").write_text(card(recipe, ev, out))
    logger.info("test: %s", json.dumps(ev))
    return ev


def main(argv=None) -> int:
    args = parse_script("python -m training.motion_renderer", "Train the builtin pose-guided renderer on worldgen motion_edit.",
                        "outputs/train/motion_renderer", argv)
    out = check_run_dir(args.out, KIND, "renderer")
    recipe = script_recipe(MotionRendererRecipe, out, args, tiny_recipe, KIND, "python -m training.motion_renderer")
    torch.set_num_threads(recipe.train.threads or 1)
    if args.eval_only:
        final_eval(out, recipe, BuiltinRenderer.from_pretrained(out), earlier_run_facts(out))
        return 0
    t_start = time.perf_counter()
    pool = load_motion_pool("train", recipe.seed, recipe.pool, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    val = load_motion_pool("val", recipe.seed, max(recipe.val_items, 1), recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    texts = TextStates()
    texts.add(pool.text + val.text)
    torch.manual_seed(recipe.train.seed)
    model = BuiltinRenderer(recipe.renderer)
    steps = recipe.eval_steps or recipe.renderer.steps
    trainer = Trainer(model, loss_fn, recipe.train, out / "run", evaluate=lambda m: evaluate(m, val, recipe.val_items, steps))
    if not args.no_resume:
        trainer.load_checkpoint()
    trainer.fit(Batches(pool, texts, recipe, trainer.step), until=args.stop_at)
    return finish_run(trainer, out, recipe.train.steps, (time.perf_counter() - t_start) / 60,
                      lambda final, facts: final_eval(out, recipe, final, facts))


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
