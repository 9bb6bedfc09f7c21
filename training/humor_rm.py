"""HUMOR stage 2: the builtin template-grouped reward model (``planners.meme_reward.BuiltinMemeRM``, spec b.3).

Data: worldgen meme TRAIN scenes (all six templates by default; the shipped model was trained with ``--hold-out
crowd,hide``, the generalisation study's templates, and ``make weights`` keeps that), every noisy pairwise vote within a
scene, i.e. within one template and one picture (10% of the votes flipped, as worldgen draws them). Loss:
``training.group_rl.reward_model_loss`` (Bradley-Terry -log sigmoid(r_w - r_l) plus reward centring 0.01 x
mean((r_w + r_l)^2), equal to TRL's ``RewardTrainer`` loss). Our own loop,
not TRL's ``RewardTrainer``: that trainer takes a sequence-classification language model over token ids, while
this model reads frozen image and text features; the loss is the same function.

Evaluation, on VAL during training and TEST at the end: pairwise accuracy against the **noise-free** preference
(worldgen's hidden score, read here and in scorers only) over every pair of a scene's candidates whose scores
differ, split into seen and held-out templates; agreement with the noisy votes; and how often a real caption
beats the same caption with its object names swapped for objects the picture does not show.

**Hallucinated negatives** [PROPOSED] (``RMRecipe.hallucination_share``, ``--hallucination-share``): that share
of each batch pairs a human caption that names the scene's objects (the winner) with copies whose names are
replaced by absent objects (``training.humor_data.hallucinated``, two per caption, drawn once per run).
Without them the model cannot tell a right name from an invented one (the votes never contrast the two), so a
writer that invents names is not caught.

Features of the frozen encoders are computed once per run and kept in memory (images: ViT patch tokens +
attribute read-out; texts: MiniLM token states per distinct box text). Checkpoints (model, optimiser, step)
every ``save_every`` steps in OUT/run/checkpoint.pt (``torch.load(weights_only=True)``); a rerun resumes.

    python -m training.humor_rm --out DIR [--steps N] [--hold-out T,T] [--tiny] [--no-resume]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from core.arguments import StrictParser
from core.atomic import atomic_path, write_json_atomic

logger = logging.getLogger(__name__)

KIND = "builtin-meme-rm"  # the saved model's tag (planners.meme_reward.KIND)


@dataclass(frozen=True)
class RMRecipe:
    scenes: int = 3000
    val_scenes: int = 300
    test_scenes: int = 600
    steps: int = 800
    batch: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    centering: float = 0.01
    eval_every: int = 500
    save_every: int = 500
    seed: int = 0
    hallucination_share: float = 0.25  # [PROPOSED] share of each batch that is (real names, swapped names) pairs
    # templates kept out of TRAIN (the shipped model: ("crowd", "hide"), the generalisation study); none by default
    held_out: tuple[str, ...] = ()
    negatives_per_caption: int = 2


def tiny_recipe() -> RMRecipe:
    return RMRecipe(scenes=16, val_scenes=12, test_scenes=12, steps=6, batch=8, eval_every=3, save_every=3)


class Features:
    """Frozen-encoder features of a list of scenes: ``image[s]`` (64, D) per scene and, per candidate, the
    index of its two box texts in ``boxes`` (U, L, 384) / ``box_mask`` (U, L). With ``negatives_per_caption``,
    each scene's hallucinated copies of its captions follow its candidates, and ``negatives`` lists
    ``(scene, real, copy)`` candidate indices."""

    def __init__(self, scenes, model, vlm, text, negatives_per_caption: int = 0, seed: int = 0):
        from training.humor_data import hallucinated

        self.scenes = scenes
        self.image = torch.cat([model.image_features(vlm, np.stack([s.still for s in scenes[i:i + 256]]))
                                for i in range(0, len(scenes), 256)]).half()
        captions = [list(s.candidates) for s in scenes]
        self.negatives = []
        for k, scene in enumerate(scenes):
            rng = np.random.default_rng([seed, scene.index, 7])
            for i, c in enumerate(scene.candidates):
                for _ in range(negatives_per_caption):
                    fake = hallucinated(c, scene.names, rng)
                    if fake is not None:
                        self.negatives.append((k, i, len(captions[k])))
                        captions[k].append(fake)
        texts = sorted({t for cs in captions for c in cs for t in c})
        index = {t: i for i, t in enumerate(texts)}
        L = model.config.max_text
        self.boxes = torch.zeros(len(texts), L, model.config.text_dim, dtype=torch.half)
        self.box_mask = torch.zeros(len(texts), L, dtype=torch.bool)
        for i, st in enumerate(text.tokens(texts)):
            n = min(L, len(st))
            self.boxes[i, :n], self.box_mask[i, :n] = st[:n].half(), True
        self.cand = [[(index[c[0]], index[c[1]]) for c in cs] for cs in captions]

    def batch(self, scene_ids: list[int], cand_ids: list[int], device) -> tuple[torch.Tensor, ...]:
        box = torch.tensor([self.cand[s][c] for s, c in zip(scene_ids, cand_ids)])
        return (self.image[scene_ids].float().to(device), self.boxes[box].float().to(device), self.box_mask[box].to(device))


def _scores(model, feats: Features, scene_ids: list[int], cand_ids: list[int], chunk: int = 512) -> torch.Tensor:
    return torch.cat([model(*feats.batch(scene_ids[i:i + chunk], cand_ids[i:i + chunk], model.device))
                      for i in range(0, len(scene_ids), chunk)])


def evaluate(model, feats: Features) -> dict:
    """Pairwise accuracy vs the noise-free preference (pairs with different scores), seen / held-out templates,
    agreement with the noisy votes, and (with negatives) real names against swapped ones."""
    model.eval()
    hits = {"seen": [0, 0], "held_out": [0, 0]}
    votes = [0, 0]
    with torch.no_grad():
        if feats.negatives:
            s_ids, real, fake = (list(x) for x in zip(*feats.negatives))
            hallucination_acc = float((_scores(model, feats, s_ids, real) > _scores(model, feats, s_ids, fake)).float().mean())
        for s, scene in enumerate(feats.scenes):
            n = len(scene.candidates)
            r = model(*feats.batch([s] * n, list(range(n)), model.device)).cpu().numpy()
            key = "held_out" if scene.held_out else "seen"
            for i in range(n):
                for j in range(i + 1, n):
                    if scene.scores[i] != scene.scores[j]:
                        hits[key][0] += (r[i] > r[j]) == (scene.scores[i] > scene.scores[j])
                        hits[key][1] += 1
            for i, j, label in scene.pairs:
                votes[0] += (r[i] > r[j]) == bool(label)
                votes[1] += 1
    model.train()
    out = {f"acc_{k}": round(float(h) / max(1, t), 4) for k, (h, t) in hits.items()}
    out.update({f"pairs_{k}": t for k, (_, t) in hits.items()}, vote_agreement=round(float(votes[0]) / max(1, votes[1]), 4))
    if feats.negatives:
        out.update(acc_hallucinated=round(hallucination_acc, 4), pairs_hallucinated=len(feats.negatives))
    return out


def train_rm(out: str | Path, recipe: RMRecipe = RMRecipe(), resume: bool = True) -> dict:
    from planners.builtin import load_builtin_vlm
    from planners.builtin.text import MiniLM
    from planners.meme_reward import BuiltinMemeRM
    from training.group_rl import reward_model_loss
    from training.humor_data import check_held_out, load_scenes

    recipe = RMRecipe(**{**asdict(recipe), "held_out": check_held_out(recipe.held_out)})
    out = Path(out)
    (out / "run").mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "train_config.json", {"model": KIND, "recipe": asdict(recipe)})
    t0 = time.perf_counter()
    torch.manual_seed(recipe.seed)
    model = BuiltinMemeRM()
    vlm, text = load_builtin_vlm(), MiniLM()
    def feats(split: str, n: int) -> Features:
        return Features(load_scenes(split, n, held_out=recipe.held_out), model, vlm, text, recipe.negatives_per_caption, recipe.seed)

    train, val = feats("train", recipe.scenes), feats("val", recipe.val_scenes)
    logger.info("features ready in %.1f min", (time.perf_counter() - t0) / 60)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: float(min(1.0, (s + 1) / 100) * 0.5 * (1 + np.cos(np.pi * min(1.0, s / recipe.steps)))))
    ckpt, step, history = out / "run" / "checkpoint.pt", 0, []
    if resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        step, history = int(state["step"]), json.loads(state["history"])
        logger.info("resumed at step %d", step)
    pairs = [(s, i, j, label) for s, sc in enumerate(train.scenes) for i, j, label in sc.pairs]
    n_fake = round(recipe.batch * recipe.hallucination_share) if train.negatives else 0
    t_loop, first = time.perf_counter(), step
    while step < recipe.steps:
        rng = np.random.default_rng([recipe.seed, step])  # the batch is a function of the step: exact resume
        pick = rng.integers(len(pairs), size=recipe.batch - n_fake)
        s_ids, order = [], []
        for k in pick:
            s, i, j, label = pairs[k]
            s_ids += [s, s]
            order += [i, j] if label else [j, i]  # (winner, loser) by the noisy vote
        for k in rng.integers(len(train.negatives), size=n_fake):
            s, real, fake = train.negatives[k]
            s_ids += [s, s]
            order += [real, fake]
        r = model(*train.batch(s_ids, order, model.device)).view(-1, 2)
        loss = reward_model_loss(r[:, 0], r[:, 1], recipe.centering)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if step % 50 == 0:
            logger.info("step %d loss %.4f", step, float(loss.detach()))
        if step % recipe.eval_every == 0 or step == recipe.steps:
            history.append({"step": step, "loss": round(float(loss.detach()), 4), **evaluate(model, val)})
            logger.info("val %s", history[-1])
        if step % recipe.save_every == 0 or step == recipe.steps:
            with atomic_path(ckpt) as tmp:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step,
                            "history": json.dumps(history)}, tmp)
    minutes = (time.perf_counter() - t0) / 60
    test = evaluate(model, feats("test", recipe.test_scenes))
    facts = {"kind": "humor-rm", "recipe": asdict(recipe), "steps": step, "train_minutes": round(minutes, 2),
             "loop_sec_per_step": round((time.perf_counter() - t_loop) / (step - first), 4) if step > first else None,
             "train_pairs": len(pairs), "train_hallucinated_pairs": len(train.negatives),
             "val_history": history, "test": test, "parameters": sum(p.numel() for p in model.parameters())}
    model.save_pretrained(out, {"steps": step, "test_acc_held_out": test["acc_held_out"]})
    write_json_atomic(out / "eval.json", facts)
    return facts


def main(argv=None) -> int:
    from training.humor_sft import add_hold_out_argument

    ap = StrictParser(prog="python -m training.humor_rm", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="outputs/train/humor_rm")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--hallucination-share", type=float, help="share of each batch that pairs a real caption with "
                    "its object names swapped for absent ones [PROPOSED] (the recipe's default: 0.25; 0: the human votes only)")
    add_hold_out_argument(ap)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    recipe = tiny_recipe() if args.tiny else RMRecipe()
    if args.hold_out is not None:
        recipe = RMRecipe(**{**asdict(recipe), "held_out": args.hold_out})
    if args.steps:
        recipe = RMRecipe(**{**asdict(recipe), "steps": args.steps})
    if args.hallucination_share is not None:
        if not 0 <= args.hallucination_share < 1:
            ap.error(f"--hallucination-share {args.hallucination_share}: pass a share in [0, 1)")
        recipe = RMRecipe(**{**asdict(recipe), "hallucination_share": args.hallucination_share})
    facts = train_rm(args.out, recipe, resume=not args.no_resume)
    print(json.dumps({"steps": facts["steps"], "test": facts["test"], "train_minutes": facts["train_minutes"]}))
    return 0


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
