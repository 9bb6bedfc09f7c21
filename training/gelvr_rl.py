"""GePO on the builtin latent reasoner (``training.gepo`` holds the objective), from a GeLVR SFT checkpoint.

A step: draw ``candidates`` training prompts, roll each out G times with the current policy (first token sampled
at ``temperature``: ``<start>`` or a direct answer; K slot directions sampled from the latent policy; the answer
sampled after ``<end>``), reward = accuracy + ``format_weight`` x (the slots were used), keep the prompts whose
group accuracy lies in the band (the rest have no advantage signal) up to ``prompts``, then ``ppo_epochs``
updates on the replayed rollouts against the frozen SFT reference. Checkpoints hold the policy, the optimiser
and the history, and prompt draws are a function of the step: a stopped run resumes exactly.

Why not TRL's GRPOTrainer (which HUMOR's RL uses): it samples text only; a continuous action inside the
sequence, its ratio and its KL have no place in it.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core.arguments import StrictParser
from core.atomic import atomic_path, write_json_atomic
from training.common import resumed_recipe

logger = logging.getLogger(__name__)
KIND = "builtin-latent-reasoner"  # the tag of config.json and train_config.json (training.common.KINDS)


@dataclass
class RLRecipe:
    latent_policy: str = "vmf"  # vmf | gaussian | replay (LVR's text-only RL)
    steps: int = 30  # the shipped run's: longer runs and kappa 500 measured level on TEST (docs/BENCHMARKS.md)
    prompts: int = 8
    candidates: int = 16
    group: int = 8
    lr: float = 2e-5
    temperature: float = 0.9
    ppo_epochs: int = 2
    kappa: float = 50.0
    beta_text: float = 0.02
    beta_vmf: float = 0.01
    lambda_geo: float = 0.1
    format_weight: float = 0.1
    band_low: float = 0.1
    band_high: float = 0.9
    # [PROPOSED] keep only prompts the greedy policy answers wrong (and whose group is in the band): RL spent on the
    # systematic errors (docs/BENCHMARKS.md: look-alikes outside the relation's band), not on sampling noise
    greedy_wrong_only: bool = False
    train_items: int = 6000  # how many TRAIN items the prompts are drawn from ...
    prompt_start: int = 0  # ... from this one on; 6000: items the shipped SFT run never saw [PROPOSED]
    val_items: int = 300
    eval_every: int = 10
    seed: int = 0


def _tokens_logp(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    return F.log_softmax(logits.float() / temperature, -1).gather(-1, tokens[:, None]).squeeze(-1)


def rollout_group(core, pre: dict, correct, recipe: RLRecipe, gen: torch.Generator, num_slots: int, slot_norm: str = "image") -> dict:
    """Rollouts of a prefix batch (each prompt already repeated G times) on any ``planners.latent.LatentCore``, with
    no gradients: the first token sampled (``<start>`` or a direct answer), K slot directions from the latent
    policy, the answer sampled after ``<end>``; ``correct(answer_tokens) -> (B,)`` scores it."""
    from planners.latent import rollout, vmf_sampler
    from training.gepo import gaussian_sigma, sample_tokens

    with torch.no_grad():
        _, first_logits = core.begin(pre)
        first = sample_tokens(first_logits, recipe.temperature, gen)
        started = first == core.start_id
        if recipe.latent_policy == "vmf":
            sampler = vmf_sampler(recipe.kappa, gen)
        elif recipe.latent_policy == "gaussian":
            sampler = lambda mu: mu + gaussian_sigma(mu.shape[-1], recipe.kappa) * torch.randn(mu.shape, generator=gen, dtype=mu.dtype)  # noqa: E731
        else:
            sampler = None  # replay: greedy slots, recorded
        r = rollout(core, pre, num_slots, slot_norm=slot_norm, sampler=sampler, force_start=False, start_sampled=started)
        answer = torch.where(started, sample_tokens(r.answer_logits, recipe.temperature, gen), first)
        ok = correct(answer).float()
        logp_old = torch.stack([_tokens_logp(first_logits, first, recipe.temperature),
                                _tokens_logp(r.answer_logits, answer, recipe.temperature)], 1)
    return {"tokens": torch.stack([first, answer], 1), "text_mask": torch.stack([torch.ones_like(started), started], 1),
            "started": started, "slot_inputs": r.slot_inputs, "z": r.directions, "mu_old": r.means, "logp_old": logp_old,
            "correct": ok, "reward": ok + recipe.format_weight * started.float()}


def replay_group(core, pre: dict, roll: dict, recipe: RLRecipe) -> dict:
    """The log-probs of a rollout's text actions and the slot means under ``core`` (the policy or the reference),
    by teacher-forced replay of the recorded slot inputs. An item that did not start answered with its first
    token (its second column is masked)."""
    from planners.latent import replay

    out = replay(core, pre, roll["slot_inputs"])
    first, answer = roll["tokens"][:, 0], roll["tokens"][:, 1]
    logp = torch.stack([_tokens_logp(out["first_logits"], first, recipe.temperature),
                        _tokens_logp(out["answer_logits"], answer, recipe.temperature)], 1)
    return {"logp": logp, "mu": out["means"], "image": pre["image"], "image_mask": pre.get("image_mask")}


def collect(model, data, prompt_idx: np.ndarray, recipe: RLRecipe, gen: torch.Generator) -> dict:
    """G rollouts of each of the builtin reasoner's training prompts ``prompt_idx``."""
    from training.gelvr_sft import batch_inputs

    idx = np.repeat(prompt_idx, recipe.group)
    with torch.no_grad():
        pre, items = batch_inputs(model, data, idx)
    words = model.config.vocab
    correct = lambda ans: torch.tensor([words[int(a)] == it.answer for a, it in zip(ans, items)])  # noqa: E731
    return {"idx": idx, "items": items, **rollout_group(model, pre, correct, recipe, gen, model.config.num_slots, model.config.slot_norm)}


@torch.no_grad()
def greedy_right(model, data, prompt_idx: np.ndarray) -> torch.Tensor:
    """``(P,)`` bool: whether the greedy policy (mean slots, the best option) answers each prompt right."""
    from planners.latent import rollout
    from training.gelvr_sft import answered_right, batch_inputs

    pre, items = batch_inputs(model, data, prompt_idx)
    logits = rollout(model, pre, model.config.num_slots, slot_norm=model.config.slot_norm).answer_logits
    return torch.tensor(answered_right(model, logits, items))


def replayed(model, data, roll: dict, recipe: RLRecipe) -> dict:
    from training.gelvr_sft import batch_inputs

    pre, _ = batch_inputs(model, data, roll["idx"])
    return replay_group(model, pre, roll, recipe)


@torch.no_grad()
def r_geo_on(model, reference, data, num: int = 100) -> float:
    """R_geo of greedy slots: the policy's slot means against the reference's on the same inputs, over ``num`` items."""
    from planners.latent import replay, rollout
    from planners.latent_geometry import geometry_regulariser
    from training.gelvr_sft import batch_inputs

    idx = np.arange(min(num, len(data)))
    pre, _ = batch_inputs(model, data, idx)
    r = rollout(model, pre, model.config.num_slots, slot_norm=model.config.slot_norm)
    pre_ref, _ = batch_inputs(reference, data, idx)
    ref = replay(reference, pre_ref, r.slot_inputs)
    return round(float(geometry_regulariser(r.means, ref["means"], pre_ref["image"], mask=pre_ref.get("image_mask"))), 5)


def train_rl(out: str | Path, init: str | Path, recipe: RLRecipe = RLRecipe(), cache: str | Path = "outputs/gelvr",
             resume: bool = True) -> dict:
    from planners.builtin.text import MiniLM
    from planners.latent_builtin import BuiltinLatentReasoner
    from training.gelvr_data import SpatialSet
    from training.gelvr_sft import evaluate
    from training.gepo import GePOLoss, accuracy_band, group_advantages

    out = Path(out)
    (out / "run").mkdir(parents=True, exist_ok=True)
    recipe = resumed_recipe(out, recipe, resume)
    write_json_atomic(out / "train_config.json", {"model": KIND, "stage": "rl", "init": str(init), "recipe": asdict(recipe)})
    t0 = time.perf_counter()
    torch.manual_seed(recipe.seed)
    model = BuiltinLatentReasoner.from_pretrained(init)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    text = MiniLM()
    cache = Path(cache)
    train = SpatialSet("train", recipe.train_items, model, text, cache=cache / "train", start=recipe.prompt_start)
    val = SpatialSet("val", recipe.val_items, model, text, cache=cache / "val")
    objective = GePOLoss(beta_text=recipe.beta_text, beta_vmf=recipe.beta_vmf, kappa=recipe.kappa, latent_policy=recipe.latent_policy,
                         lambda_geo=0.0 if recipe.latent_policy == "replay" else recipe.lambda_geo)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)
    ckpt, step, history, step_log = out / "run" / "checkpoint.pt", 0, [], []  # history: at evaluations; step_log: every step
    if resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, history = int(state["step"]), json.loads(state["history"])
        step_log = json.loads(state.get("step_log", "[]"))
        logger.info("resumed at step %d", step)
    if not history:
        history.append({"step": 0, **evaluate(model, val, model.config.num_slots), "r_geo": 0.0})
        logger.info("val %s", history[-1])
    t_loop, first_step = time.perf_counter(), step
    while step < recipe.steps:
        rng = np.random.default_rng([recipe.seed, step])
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        cand = rng.choice(len(train), recipe.candidates, replace=False)
        model.eval()
        roll = collect(model, train, cand, recipe, gen)
        g = recipe.group
        acc = roll["correct"].view(-1, g).mean(-1)
        band = accuracy_band(acc, recipe.band_low, recipe.band_high)
        if recipe.greedy_wrong_only:
            band &= ~greedy_right(model, train, cand)
        keep = band.nonzero().squeeze(-1)[: recipe.prompts]
        info = {"step": step + 1, "reward": round(float(roll["reward"].mean()), 4), "accuracy": round(float(roll["correct"].mean()), 4),
                "started": round(float(roll["started"].float().mean()), 4), "kept_prompts": int(len(keep))}
        if len(keep):
            rows = (keep[:, None] * g + torch.arange(g)).reshape(-1)
            sub = {k: (v[rows] if isinstance(v, torch.Tensor) else ([v[i] for i in rows.tolist()] if isinstance(v, list) else v[rows.numpy()]))
                   for k, v in roll.items()}
            adv = group_advantages(sub["reward"].view(-1, g)).reshape(-1)
            with torch.no_grad():
                ref = replayed(reference, train, sub, recipe)
            model.train()
            for _ in range(recipe.ppo_epochs):
                now = replayed(model, train, sub, recipe)
                loss, metrics = objective(adv=adv, logp=now["logp"], logp_old=sub["logp_old"], logp_ref=ref["logp"],
                                          text_mask=sub["text_mask"], mu=now["mu"], mu_old=sub["mu_old"], mu_ref=ref["mu"], z=sub["z"],
                                          latent_mask=sub["started"], image_tokens=ref["image"], image_mask=ref["image_mask"])
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
            info.update({k: round(v, 5) for k, v in metrics.items()}, loss=round(float(loss.detach()), 5))
        step += 1
        step_log.append(info)
        logger.info("step %s", info)
        if step % recipe.eval_every == 0 or step == recipe.steps:
            history.append({**info, **{f"val_{k}": v for k, v in evaluate(model, val, model.config.num_slots).items()},
                            "val_r_geo": r_geo_on(model, reference, val)})
            logger.info("val %s", history[-1])
            with atomic_path(ckpt) as tmp:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "history": json.dumps(history),
                            "step_log": json.dumps(step_log)}, tmp)
    facts = {"kind": KIND, "stage": "rl", "init": str(init), "recipe": asdict(recipe), "steps": step,
             "train_minutes": round((time.perf_counter() - t0) / 60, 2),
             "loop_sec_per_step": round((time.perf_counter() - t_loop) / (step - first_step), 3) if step > first_step else None,
             "val_history": history, "step_log": step_log}
    model.save_pretrained(out, {"steps": step, "latent_policy": recipe.latent_policy})
    write_json_atomic(out / "eval.json", facts)
    return facts


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m training.gelvr_rl", description=__doc__.splitlines()[0])
    ap.add_argument("--init", required=True, help="a GeLVR SFT run's folder (what `atelier train gelvr-sft` writes)")
    ap.add_argument("--out", default="outputs/train/gelvr_rl")
    ap.add_argument("--latent-policy", choices=("vmf", "gaussian", "replay"), default="vmf")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--kappa", type=float)
    ap.add_argument("--candidates", type=int, help="prompts drawn per step, of which the accuracy band keeps at most --prompts")
    ap.add_argument("--prompts", type=int, help="prompts kept per step (their groups are the batch)")
    ap.add_argument("--prompt-start", type=int, help="draw prompts from TRAIN items N.. on (a multiple of 1000; default 0, "
                    "the SFT run's own items; 6000: items the shipped SFT run never saw)")
    ap.add_argument("--train-items", type=int, help="how many TRAIN items, from --prompt-start on, prompts are drawn from (default 6000)")
    ap.add_argument("--greedy-wrong-only", action="store_true", help="learn only from prompts the greedy policy answers wrong [PROPOSED]")
    ap.add_argument("--eval-every", type=int)
    ap.add_argument("--cache", default="outputs/gelvr")
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for name in ("candidates", "prompts", "steps", "train_items"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)}: pass 1 or more")
    if args.prompt_start is not None and (args.prompt_start < 0 or args.prompt_start % 1000):
        ap.error(f"--prompt-start {args.prompt_start}: pass 0 or a multiple of 1000 (the feature cache's chunk)")
    recipe = RLRecipe(latent_policy=args.latent_policy, greedy_wrong_only=args.greedy_wrong_only)
    for name in ("steps", "lr", "kappa", "eval_every", "candidates", "prompts", "prompt_start", "train_items"):
        if getattr(args, name) is not None:
            setattr(recipe, name, getattr(args, name))
    facts = train_rl(args.out, args.init, recipe, args.cache, resume=not args.no_resume)
    print(json.dumps({"steps": facts["steps"], "val": facts["val_history"][-1], "train_minutes": facts["train_minutes"]}))
    return 0


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
