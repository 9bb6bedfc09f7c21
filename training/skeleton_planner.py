"""Train the builtin SCoT planner (planners/skeleton_cot.py) on worldgen ``motion_edit`` (spec b.5, stage S1).

From the instruction (MiniLM token states) and the source skeleton (worldgen's ground truth, jittered
and with joints dropped, the way a pose reader errs), it learns the reasoning labels (category, fine
class, moving parts), the target skeleton frame by frame, and its MetaQueries' auxiliary summary
(``BuiltinSkeletonPlanner.loss``). Instructions are free language: the dataset's own sentence or a
paraphrase (``training.motion_data.paraphrase``: templates and synonyms), and a share of "keep it as it
is" instructions whose target is the source (the ``no_change`` class). Batches, jitter and wording are
seeded by the step, so a resumed run continues exactly (``training/loop.py``).

Evaluation (VAL during training, TEST at the end): PCK@0.05 / 0.1 / 0.2 of the planned skeleton against
the target's (``scorers.pose.pck``, box-diagonal normalised, every labelled joint of every frame), also
on the joints that move in the edit, split into seen and held-out fine classes
(``training.motion_data.HELD_OUT``), with the dataset's instructions and with unseen paraphrase
templates; fine-class accuracy; how often a "keep" instruction is recognised.

    python -m training.skeleton_planner --out DIR [--steps N] [--stop-at STEP] [--tiny] [--no-resume] [--eval-only]
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
from planners.skeleton_cot import (
    CATEGORIES,
    FINE_CLASSES,
    KIND,
    NO_CHANGE,
    BuiltinSkeletonPlanner,
    SkeletonPlannerConfig,
    person_frame,
    skeleton_features,
    to_pixels,
)
from scorers.pose import pck
from training.common import check_run_dir, design_notes, earlier_run_facts, finish_run, parse_script, script_recipe
from training.loop import TrainConfig, Trainer
from training.motion_data import (
    DEFAULT_CACHE,
    KEEP_INSTRUCTIONS,
    KEEP_TEST,
    TEST_TEMPLATES,
    MotionDataConfig,
    MotionPool,
    load_motion_pool,
    paraphrase,
)
from training.renderer import TextStates

logger = logging.getLogger(__name__)
THRESHOLDS = (0.05, 0.1, 0.2)


@dataclass
class SkeletonPlannerRecipe:
    planner: SkeletonPlannerConfig = field(default_factory=SkeletonPlannerConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=2500, lr=1e-3, warmup=150, weight_decay=0.01, ema=0.998,
                                                                   eval_every=1250, ckpt_every=250, log_every=50, threads=1,
                                                                   eval_at_end=False))
    # every class in TRAIN: a held-out "right" class was planned as its left mirror (issue 48)
    data: MotionDataConfig = field(default_factory=lambda: MotionDataConfig(hold_out=False))
    pool: int = 3000
    batch: int = 32
    p_dataset_text: float = 0.3  # the dataset's own sentence; otherwise a paraphrase
    p_keep: float = 0.06  # "keep it as it is" examples (target = source)
    jitter_px: float = 0.6  # source keypoint noise std ~ U(0, this) pixels per clip
    p_drop_joint: float = 0.03
    teacher_jitter: float = 0.02  # torso lengths of noise on the teacher-forced skeleton the queries read
    val_items: int = 60
    test_items: int = 240
    seed: int = 0
    cache: str = str(DEFAULT_CACHE)
    workers: int = 2

    def resolved(self) -> SkeletonPlannerRecipe:
        for name in ("p_dataset_text", "p_keep", "p_drop_joint"):
            if not 0 <= getattr(self, name) <= 1:
                raise InputError(name, getattr(self, name), "use a probability in [0, 1]")
        return self


def tiny_recipe(out: Path) -> SkeletonPlannerRecipe:
    return SkeletonPlannerRecipe(planner=SkeletonPlannerConfig(width=32, depth=1, heads=2, num_queries=2, query_depth=1, query_dim=16),
                                 train=TrainConfig(steps=3, lr=1e-3, warmup=1, ema=0.9, eval_every=2, ckpt_every=1, log_every=1, threads=1,
                                                   eval_at_end=False),
                                 pool=4, batch=2, val_items=2, test_items=3, workers=1, cache=str(out / "cache"))


# ---------------------------------------------------------------------------- batches


def _example(pool: MotionPool, i: int, rng: np.random.Generator, r: SkeletonPlannerRecipe) -> dict:
    src = pool.source_kp[i].copy()
    h = w = r.data.size
    keep = rng.random() < r.p_keep
    src[..., :2] += rng.normal(0, rng.uniform(0, r.jitter_px), src[..., :2].shape)
    drop = rng.random(src.shape[:2]) < r.p_drop_joint
    src[..., 2] = np.where(drop, 0.0, src[..., 2])
    tgt = pool.source_kp[i] if keep else pool.target_kp[i]
    try:
        origin, scale = person_frame(src)
    except Exception:  # every torso joint dropped on every frame: use the clean source
        src = pool.source_kp[i].copy()
        origin, scale = person_frame(src)
    if keep:
        text, fine, cat = KEEP_INSTRUCTIONS[int(rng.integers(len(KEEP_INSTRUCTIONS)))], NO_CHANGE, NO_CHANGE
        parts = np.zeros(7, bool)
    else:
        fine, cat = pool.fine[i], pool.category[i]
        text = pool.text[i] if rng.random() < r.p_dataset_text else paraphrase(fine, rng)
        parts = pool.parts_of(i)
    xy = (tgt[..., :2] - origin) / scale
    teacher = tgt.copy()
    teacher[..., :2] += rng.normal(0, r.teacher_jitter * scale, teacher[..., :2].shape)
    return {"text": text, "source": skeleton_features(src, origin, scale, w, h), "target": xy.astype(np.float32),
            "target_valid": (tgt[..., 2] > 0), "target_features": skeleton_features(teacher, origin, scale, w, h),
            "fine": FINE_CLASSES.index(fine), "category": CATEGORIES.index(cat), "parts": parts}


def collate(examples: list[dict], texts: TextStates) -> dict:
    from renderers.builtin import pad_text

    text, mask = pad_text([texts[e["text"]] for e in examples])
    out = {"text": text, "text_mask": mask}
    for k in ("source", "target", "target_valid", "target_features", "parts"):
        out[k] = torch.from_numpy(np.stack([e[k] for e in examples]))
    for k in ("fine", "category"):
        out[k] = torch.tensor([e[k] for e in examples])
    return out


class Batches:
    """Step-seeded batches (resuming at step s gives exactly the batches from s on)."""

    def __init__(self, pool: MotionPool, texts: TextStates, recipe: SkeletonPlannerRecipe, step: int = 0):
        self.pool, self.texts, self.r, self.step = pool, texts, recipe, step

    def __next__(self) -> dict:
        rng = np.random.default_rng([self.r.seed, 5, self.step])
        self.step += 1
        idx = rng.integers(len(self.pool), size=self.r.batch)
        return collate([_example(self.pool, int(i), rng, self.r) for i in idx], self.texts)


def loss_fn(model, batch):
    return model.loss(batch)


# ---------------------------------------------------------------------------- evaluation


def moving_joints(source: np.ndarray, target: np.ndarray, scale: float, threshold: float = 0.25) -> np.ndarray:
    """``(T, 17)`` bool: the joints of frames where the target is more than ``threshold`` torso lengths from the source."""
    d = np.linalg.norm(target[..., :2] - source[..., :2], axis=-1) / scale
    return (d > threshold) & (target[..., 2] > 0) & (source[..., 2] > 0)


@torch.no_grad()
def plan_batch(model: BuiltinSkeletonPlanner, pool: MotionPool, idx: list[int], texts: list[str], tstates: TextStates) -> tuple[list[np.ndarray], list[str]]:
    """Planned target skeletons (pixels) and fine classes for items ``idx`` with instructions ``texts`` (GT source skeletons)."""
    from renderers.builtin import pad_text

    h = w = pool.cfg.size
    frames = [person_frame(pool.source_kp[i]) for i in idx]
    feats = torch.from_numpy(np.stack([skeleton_features(pool.source_kp[i], o, s, w, h) for i, (o, s) in zip(idx, frames)]))
    text, mask = pad_text([tstates[t] for t in texts])
    model.eval()
    out = model(text, mask, feats)
    xy = out["keypoints"].float().numpy()
    fine = [FINE_CLASSES[int(k)] for k in out["fine"].argmax(-1)]
    kps = []
    for j, (o, s) in enumerate(frames):
        kps.append(pool.source_kp[idx[j]].copy() if fine[j] == NO_CHANGE else to_pixels(xy[j], o, s, w, h))
    return kps, fine


def _pck_of(pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    if not pairs:
        return {}
    p = np.concatenate([a for a, _ in pairs])
    g = np.concatenate([b for _, b in pairs])
    res = pck(p, g, THRESHOLDS)
    return {f"pck@{t:g}": round(float(v), 4) for t, v in res.values.items()} | {"keypoints": res.keypoints}


def evaluate(model: BuiltinSkeletonPlanner, pool: MotionPool, tstates: TextStates, n: int, seed: int = 0) -> dict:
    """The planner's accuracy on the first ``n`` items of ``pool`` (see the module docstring)."""
    from training.motion_data import HELD_OUT

    n = min(n, len(pool))
    idx = list(range(n))
    rng = np.random.default_rng([seed, 6])
    out = {}
    wordings = {"dataset": [pool.text[i] for i in idx], "paraphrase": [paraphrase(pool.fine[i], rng, TEST_TEMPLATES) for i in idx]}
    for name, texts in wordings.items():
        kps, fine = [], []
        for s in range(0, n, 64):
            k, f = plan_batch(model, pool, idx[s : s + 64], texts[s : s + 64], tstates)
            kps += k
            fine += f
        groups = {"seen": [], "held_out": []}
        moving = {"seen": [], "held_out": []}
        correct = {"seen": [], "held_out": []}
        for i, k in zip(idx, kps):
            g = "held_out" if pool.fine[i] in HELD_OUT else "seen"
            groups[g].append((k, pool.target_kp[i]))
            _, scale = person_frame(pool.source_kp[i])
            m = moving_joints(pool.source_kp[i], pool.target_kp[i], scale)
            gt = pool.target_kp[i].copy()
            gt[..., 2] = np.where(m, gt[..., 2], 0)
            if m.any():
                moving[g].append((k, gt))
            correct[g].append(fine[i] == pool.fine[i])
        out[name] = {g: {**_pck_of(groups[g]), "moving_joints": _pck_of(moving[g]), "fine_acc": round(float(np.mean(correct[g])), 4) if correct[g] else None,
                         "items": len(groups[g])} for g in groups}
    keep_idx = idx[: min(n, 40)]
    keep_texts = [KEEP_TEST[j % len(KEEP_TEST)] for j in range(len(keep_idx))]
    _, fine = plan_batch(model, pool, keep_idx, keep_texts, tstates)
    out["keep_recognised"] = round(float(np.mean([f == NO_CHANGE for f in fine])), 4)
    _, fine = plan_batch(model, pool, idx, wordings["dataset"], tstates)
    out["edit_taken_for_keep"] = round(float(np.mean([f == NO_CHANGE for f in fine])), 4)
    return out


# ---------------------------------------------------------------------------- the run


def _row(label: str, m: dict) -> str:
    def f(v):
        return "-" if v is None else f"{v:.3f}"
    mv = m.get("moving_joints", {})
    return (f"| {label} | {m['items']} | {f(m.get('pck@0.05'))} | {f(m.get('pck@0.1'))} | {f(m.get('pck@0.2'))} | "
            f"{f(mv.get('pck@0.1'))} | {f(m.get('fine_acc'))} |")


def card(recipe: SkeletonPlannerRecipe, ev: dict, out: Path) -> str:
    c, t = recipe.planner, recipe.train
    test = ev.get("test", {})
    names = {"seen": "seen", "held_out": "held_out"} if recipe.data.hold_out else {"seen": "other classes", "held_out": "the five right-side classes"}
    rows = [_row(f"{w}, {names[g]}", test[w][g]) for w in ("dataset", "paraphrase") if w in test for g in ("seen", "held_out") if test[w][g]["items"]]
    size_mb = (out / "model.safetensors").stat().st_size / 2**20 if (out / "model.safetensors").is_file() else 0.0
    return f"""# builtin-skeleton-planner

AnyMotion's builtin SCoT planner (`planners/skeleton_cot.py`): a transformer ({c.depth} layers, width {c.width},
{c.heads} heads) over [CLS | instruction (MiniLM token states) | skeleton, one token per frame] that predicts the reasoning labels (category, fine class of worldgen's motion_edit taxonomy
plus `no_change`, moving parts) and the target COCO-17 skeleton per frame; then {c.num_queries} MetaQueries
({c.query_depth} layers, reading the instruction, the source and the planned skeleton) -> {c.query_dim}-d states
for the pose-guided renderer.

## Data and training
- worldgen `motion_edit` TRAIN split, {recipe.pool} items ({recipe.data.num_frames} frames, {recipe.data.size}x{recipe.data.size},
  levels 1-3 in turn), {"no item whose target is a held-out fine class (`training.motion_data.HELD_OUT`)" if recipe.data.hold_out
  else "every fine class among the targets (the `held_out` rows below are the right-side mirror classes, trained on too)"}; source
  skeletons are the world's ground truth with jitter up to {recipe.jitter_px} px and {recipe.p_drop_joint:.0%} of joints dropped;
  instructions: the dataset's sentence ({recipe.p_dataset_text:.0%}) or a paraphrase (templates and synonyms), and
  {recipe.p_keep:.0%} "keep it as it is" instructions (target = source).
- {ev.get('steps')} of {t.steps} steps, batch {recipe.batch}, AdamW lr {t.lr}, warmup {t.warmup} + cosine, EMA {t.ema};
  {ev.get('train_minutes')} min, {ev.get('sec_per_step')} s/step on {t.threads} CPU thread(s). Weights {size_mb:.1f} MB.

## Measured (TEST split, first {recipe.test_items} items; ground-truth source skeletons)
PCK of the planned skeleton against the target's (every labelled joint of every frame, threshold x the
target's box diagonal), PCK@0.1 of the joints that move in the edit only (more than a quarter torso length
from the source), and fine-class accuracy. "paraphrase" words every instruction with templates never seen in
training.

| instructions, classes | items | PCK@0.05 | PCK@0.1 | PCK@0.2 | PCK@0.1 moving joints | fine class |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

"Keep" instructions (unseen wordings) recognised as `no_change`: {ev.get('test', {}).get('keep_recognised')}; edit
instructions taken for `no_change`: {ev.get('test', {}).get('edit_taken_for_keep')}.

## What it can and cannot do
- It reads the skeleton, not the pixels: identity (proportions) and placement come from the source skeleton.
- Trained on one person, worldgen's 33 actions and their paraphrases; an action outside the taxonomy gets the
  nearest one it knows. Clips of other lengths run (time is embedded by frame and by phase) but are untested.
{design_notes(out, "skeleton_planner")}"""


def final_eval(out: Path, recipe: SkeletonPlannerRecipe, model: BuiltinSkeletonPlanner, tstates: TextStates, extra: dict) -> dict:
    test = load_motion_pool("test", recipe.seed, recipe.test_items, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    ev = {**extra, "test": evaluate(model, test, tstates, recipe.test_items, recipe.seed)}
    write_json_atomic(out / "eval.json", ev)
    (out / "card.md").write_text(card(recipe, ev, out))
    logger.info("test: %s", json.dumps(ev["test"]))
    return ev


def main(argv=None) -> int:
    args = parse_script("python -m training.skeleton_planner", "Train the builtin SCoT planner on worldgen motion_edit.",
                        "outputs/train/skeleton_planner", argv)
    out = check_run_dir(args.out, KIND, "skeleton planner")
    recipe = script_recipe(SkeletonPlannerRecipe, out, args, tiny_recipe, KIND, "python -m training.skeleton_planner")
    tstates = TextStates()
    torch.set_num_threads(recipe.train.threads or 1)
    if args.eval_only:
        final_eval(out, recipe, BuiltinSkeletonPlanner.from_pretrained(out), tstates, earlier_run_facts(out))
        return 0
    t_start = time.perf_counter()
    pool = load_motion_pool("train", recipe.seed, recipe.pool, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    val = load_motion_pool("val", recipe.seed, recipe.val_items, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    torch.manual_seed(recipe.train.seed)
    model = BuiltinSkeletonPlanner(recipe.planner)
    trainer = Trainer(model, loss_fn, recipe.train, out / "run", evaluate=lambda m: evaluate(m, val, tstates, recipe.val_items, recipe.seed))
    if not args.no_resume:
        trainer.load_checkpoint()
    trainer.fit(Batches(pool, tstates, recipe, trainer.step), until=args.stop_at)
    return finish_run(trainer, out, recipe.train.steps, (time.perf_counter() - t_start) / 60,
                      lambda final, facts: final_eval(out, recipe, final, tstates, facts))


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
