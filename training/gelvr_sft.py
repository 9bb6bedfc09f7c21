"""GeLVR SFT of the builtin latent reasoner on worldgen ``spatial`` (specs/gelvr.md B.1-B.2).

One teacher-forced pass per batch: ``[image] [question] [options] <start> v_1 .. v_K <end>`` with the slot inputs
the targets' directions (at the image tokens' norm); the hidden states h_0 .. h_{K-1} before each slot are
pulled towards the targets V:

    L = CE(<start>) + CE(answer) + lambda_pt L_pt(H, V) + lambda_gram L_gram(H, V) + lambda_cross L_cross(H, V; P)

``--variant`` picks the benchmark's ablations: ``direct`` (no slots: the first token is the answer), ``pointwise``
(L_pt only, LVR-style), ``gram`` (+ Gram), ``full`` (+ the slot-to-image cross KL: GeLVR), and ``cka`` / ``rkd``
(the relational term swapped for 1 - linear CKA or RKD). Targets and P are detached (P is "shared and fixed").
Batches are a function of the step and checkpoints hold the optimiser, so a stopped run resumes exactly.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core.arguments import StrictParser
from core.atomic import atomic_path, write_json_atomic
from training.common import resumed_recipe

logger = logging.getLogger(__name__)
KIND = "builtin-latent-reasoner"  # the tag of config.json and train_config.json (training.common.KINDS)
VARIANTS = ("direct", "pointwise", "gram", "full", "cka", "rkd")


@dataclass
class SFTRecipe:
    variant: str = "full"
    steps: int = 900
    batch: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: int = 100
    num_slots: int = 4  # LVR's K = 4 / 8 / 16; 4 is Mirage's and fits a relation's anchor -> target path
    targets: str = "chain"
    # how the slots are fed in training [PROPOSED]: "teacher" (the targets, one parallel pass: LVR / Mirage stage 1),
    # "free" (the model's own states fed back, as at inference; losses back-propagate through the recurrence),
    # "both" (slot losses teacher-forced; the answer only after free-running slots). Measured: teacher-forced
    # answers read the answer off the last target (the target's own token) and never learn to find it
    slot_inputs: str = "both"
    pointwise: str = "cos"
    lambda_pt: float = 1.0  # spec B.2 defaults: 1.0 (cos) or 0.1 (mse)
    lambda_geo: float = 0.5
    # [PROPOSED] pointer supervision: cross-entropy of each slot's slot-to-image map against its target tokens (uniform
    # over the group), i.e. the cross term with the target map sharpened to its tokens. Measured (one diagnostic run
    # per term, slot 1 alone, object tokens, 300 steps): the anchor peak reached 49.5% with it, 33.5% with the spec's
    # pointwise + cross terms; 0 keeps the spec's loss
    lambda_pointer: float = 0.0
    # [PROPOSED] the answer bottleneck: "slots" keeps the answer position off the image and question, so it reads only
    # what the slots carry (planners/latent_builtin.py ReasonerConfig.answer_reads); "all" is the spec's sequence
    answer_reads: str = "all"
    # [PROPOSED] pointing first: the answer's CE is off before this step, so the slots learn their search before the
    # answer can learn to do without them (0: from the start, the spec's single stage)
    answer_from: int = 0
    # [PROPOSED] the answer read off the last slot's map (planners/latent_builtin.py ReasonerConfig.answer_pointer)
    answer_pointer: bool = False
    tau: float = 0.07
    d_model: int = 128
    layers: int = 4
    prefix_lm: bool = True
    image_tokens: str = "cells"  # or "objects": planners/latent_builtin.py [PROPOSED]
    # [PROPOSED] object tokens as "descriptor", "symbols" or "both" (ReasonerConfig.object_reads); for the last two the
    # attribute head is first fitted for attribute_steps on the training images' ground truth, then frozen
    object_reads: str = "descriptor"
    attribute_steps: int = 1500
    image_positions: str = "sequence"  # or "shared" [PROPOSED]: ReasonerConfig.image_positions
    train_items: int = 6000
    val_items: int = 300
    eval_every: int = 300
    seed: int = 0

    def weights(self) -> dict[str, float]:
        """Which loss terms this variant uses, with their weights."""
        v = self.variant
        if v not in VARIANTS:
            raise ValueError(f"variant {v!r}: choose one of {VARIANTS}")
        if v == "direct":
            return {}
        w = {"pt": self.lambda_pt}
        if self.lambda_pointer:
            w["pointer"] = self.lambda_pointer
        if v in ("gram", "full"):
            w["gram"] = self.lambda_geo
        if v == "full":
            w["cross"] = self.lambda_geo
        if v in ("cka", "rkd"):
            w[v] = self.lambda_geo
            w["cross"] = self.lambda_geo
        return w

    @property
    def slots(self) -> int:
        return 0 if self.variant == "direct" else self.num_slots


def shipped_recipe(**changes) -> SFTRecipe:
    """The recipe of ``weights/builtin/latent_reasoner_sft`` (its card), with ``changes``: what ``atelier train
    gelvr-sft`` runs. ``SFTRecipe()`` itself keeps the spec's loss on the cell grid."""
    shipped = SFTRecipe(steps=750, eval_every=250, image_tokens="objects", lambda_pointer=1.0, object_reads="symbols",
                        image_positions="shared", answer_pointer=True)
    return replace(shipped, **changes)


def answer_vocab() -> list[str]:
    from worldgen.vocab import COLOR_NAMES, SHAPES

    return [*COLOR_NAMES, *SHAPES]


def batch_inputs(model, data, idx: np.ndarray) -> tuple[dict, list]:
    pre = model.prefix(data.features[idx].float(), [data.questions[i] for i in idx], [data.options[i] for i in idx])
    return pre, [data.items[i] for i in idx]


def batch_layout(model, data, idx: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``training.gelvr_data.token_layout`` of items ``idx``: their image tokens' centres and boxes in pixels."""
    from training.gelvr_data import token_layout

    return token_layout(model, data.features[idx], [data.items[i] for i in idx])


def latent_sft_losses(core, pre: dict, targets: torch.Tensor | None, answer_ids: torch.Tensor, recipe: SFTRecipe,
                      target_maps: torch.Tensor | None = None, with_answer: bool = True) -> dict[str, torch.Tensor]:
    """The SFT terms on any ``planners.latent.LatentCore``: ``targets`` ``(B, K, d)`` the slot targets (None: the
    direct variant, whose first token is the answer), ``answer_ids`` ``(B,)`` the answer tokens, ``target_maps``
    ``(B, K, N)`` each slot's target tokens as a distribution (for ``lambda_pointer``); ``with_answer=False`` leaves
    the answer's CE out (``SFTRecipe.answer_from``)."""
    from planners import latent_geometry as geo
    from planners.latent import replay, rollout, teacher_forced_inputs

    if targets is None:
        _, first = core.begin(pre)
        return {"ce": F.cross_entropy(first.float(), answer_ids)}
    p = pre["image"].detach()
    start = torch.full_like(answer_ids, core.start_id)
    k = targets.shape[1]
    if recipe.slot_inputs in ("teacher", "both"):
        out = replay(core, pre, teacher_forced_inputs(core, pre, targets))
        h = out["hidden_before"].float()
        first, answer = out["first_logits"], out["answer_logits"]
    if recipe.slot_inputs == "free" or (recipe.slot_inputs == "both" and with_answer):
        r = rollout(core, pre, k, slot_norm=getattr(core, "slot_norm", None) or core.config.slot_norm)
        answer = r.answer_logits  # "both": the first token's CE stays the teacher-forced pass's (the same prefix)
        if recipe.slot_inputs == "free":
            h, first = r.hidden_before.float(), r.first_logits
    if recipe.slot_inputs not in ("teacher", "free", "both"):
        raise ValueError(f"slot_inputs {recipe.slot_inputs!r}: choose teacher, free or both")
    losses = {"ce": F.cross_entropy(first.float(), start)}
    if with_answer:
        losses["ce"] = losses["ce"] + F.cross_entropy(answer.float(), answer_ids)
    v, p = targets.float(), p.float()
    terms = {"pt": lambda: geo.pointwise_loss(h, v, recipe.pointwise), "gram": lambda: geo.gram_loss(h, v),
             "cross": lambda: geo.cross_kl(h, v, p, recipe.tau, pre.get("image_mask")),
             "pointer": lambda: -(target_maps * geo.cross_structure(h, p, recipe.tau, pre.get("image_mask"), log=True)
                                  .nan_to_num(0.0, neginf=0.0)).sum(-1).mean(), "cka": lambda: geo.cka_loss(h, v), "rkd": lambda: geo.rkd_loss(h, v)}
    for name, weight in recipe.weights().items():
        losses[name] = weight * terms[name]()
    return losses


def sft_losses(model, data, idx: np.ndarray, recipe: SFTRecipe, with_answer: bool = True) -> dict[str, torch.Tensor]:
    """The builtin reasoner's SFT terms on items ``idx`` of a ``SpatialSet``."""
    from training.gelvr_data import slot_targets, target_groups

    pre, items = batch_inputs(model, data, idx)
    answers = torch.tensor([model.answer_ids([it.answer])[0] for it in items], device=model.device)
    targets = None
    if recipe.slots:
        centres = batch_layout(model, data, idx)[0]
        targets = slot_targets(pre["image"].detach(), items, recipe.slots, model.config.grid, recipe.targets, centres)
        if recipe.lambda_pointer:
            maps = torch.zeros(*targets.shape[:2], pre["image"].shape[1], device=targets.device)
            for b, (it, xy) in enumerate(zip(items, centres)):
                for k, g in enumerate(target_groups(it, recipe.slots, model.config.grid, recipe.targets, xy)):
                    maps[b, k, torch.as_tensor(g)] = 1.0 / len(g)
            return latent_sft_losses(model, pre, targets, answers, recipe, maps, with_answer)
    return latent_sft_losses(model, pre, targets, answers, recipe, with_answer=with_answer)


@torch.no_grad()
def item_rows(model, data, num_slots: int, batch: int = 50, limit: int | None = None) -> list[dict]:
    """Per item, greedy: whether the answer is right, the item's level and asked size, and (with slots) whether the
    peak of the slots' mean map over the image lies on an image token (a cell, an object) whose box overlaps the
    evidence box (``pointing``)."""
    from planners.latent import rollout, slot_attention

    was_training = model.training
    model.eval()
    n = min(len(data), limit or len(data))
    rows = []
    for s in range(0, n, batch):
        idx = np.arange(s, min(n, s + batch))
        pre, items = batch_inputs(model, data, idx)
        point = [None] * len(idx)
        if num_slots == 0:
            logits = model.begin(pre)[1]
        else:
            r = rollout(model, pre, num_slots, slot_norm=model.config.slot_norm)
            logits = r.answer_logits
            amap = slot_attention(r.slot_inputs, pre["image"], mask=pre.get("image_mask")).mean(1)  # (B, N)
            boxes = batch_layout(model, data, idx)[1]
            point = [boxes_overlap(b[int(a.argmax())], it.box) for a, b, it in zip(amap, boxes, items)]
        for i, ok, it, pt in zip(idx, answered_right(model, logits, items), items, point):
            rows.append({"item": int(i), "correct": ok, "level": it.level, "size": it.target_size, "pointing": pt})
    model.train(was_training)
    return rows


def answered_right(model, answer_logits: torch.Tensor, items: list) -> list[bool]:
    """Per item, whether the best-scoring of its options (``answer_logits`` over the model's words) is the answer."""
    return [it.options[int(lg[model.answer_ids(it.options)].argmax())] == it.answer for lg, it in zip(answer_logits, items)]


@torch.no_grad()
def slot_diagnostics(model, data, num_slots: int, targets: str = "chain", n: int = 200, batch: int = 50) -> dict:
    """Per slot, how close the greedy (free-running) state before it is to its target, against the same with the
    targets fed (teacher-forced) and against a state that is just the image's mean token; and how often its map's
    peak lands on one of its target's cells. Says which step of the search a model has learned."""
    from planners.latent import replay, rollout, slot_attention, teacher_forced_inputs
    from training.gelvr_data import slot_targets, target_groups

    was_training = model.training
    model.eval()
    sums = {"cos_free": 0, "cos_teacher": 0, "cos_mean_token": 0, "peak_on_target": 0}
    count = 0
    for s in range(0, min(n, len(data)), batch):
        idx = np.arange(s, min(n, len(data), s + batch))
        pre, items = batch_inputs(model, data, idx)
        centres = batch_layout(model, data, idx)[0]
        v = slot_targets(pre["image"], items, num_slots, model.config.grid, targets, centres)
        r = rollout(model, pre, num_slots, slot_norm=model.config.slot_norm)
        tf = replay(model, pre, teacher_forced_inputs(model, pre, v))
        mask = pre.get("image_mask")
        weights = torch.ones(pre["image"].shape[:2], device=v.device) if mask is None else mask.float()
        mean = ((pre["image"] * weights[..., None]).sum(1, keepdim=True) / weights.sum(1)[:, None, None]).expand_as(v)
        sums["cos_free"] = sums["cos_free"] + F.cosine_similarity(r.hidden_before, v, dim=-1).sum(0)
        sums["cos_teacher"] = sums["cos_teacher"] + F.cosine_similarity(tf["hidden_before"], v, dim=-1).sum(0)
        sums["cos_mean_token"] = sums["cos_mean_token"] + F.cosine_similarity(mean, v, dim=-1).sum(0)
        peaks = slot_attention(r.slot_inputs, pre["image"], mask=mask).argmax(-1)  # (B, K)
        groups = [target_groups(it, num_slots, model.config.grid, targets, xy) for it, xy in zip(items, centres)]
        hits = torch.tensor([[int(peaks[b, k]) in set(g.tolist()) for k, g in enumerate(gs)] for b, gs in enumerate(groups)],
                            dtype=torch.float32)
        sums["peak_on_target"] = sums["peak_on_target"] + hits.sum(0)
        count += len(idx)
    model.train(was_training)
    return {k: [round(float(x) / count, 4) for x in v] for k, v in sums.items()} | {"n": count}


def summarise_rows(rows: list[dict]) -> dict:
    """Accuracy overall, by level and by the asked object's size, and the pointing rate."""
    hits = np.array([r["correct"] for r in rows], dtype=float)
    out = {"accuracy": round(float(hits.mean()), 4), "n": len(rows)}
    for key in ("level", "size"):
        for v in sorted({r[key] for r in rows}):
            out[f"{key}_{v}"] = round(float(np.mean([r["correct"] for r in rows if r[key] == v])), 4)
    point = [r["pointing"] for r in rows if r["pointing"] is not None]
    if point:
        out["pointing"] = round(float(np.mean(point)), 4)
    return out


def evaluate(model, data, num_slots: int, batch: int = 50, limit: int | None = None) -> dict:
    """``summarise_rows`` of ``item_rows``."""
    return summarise_rows(item_rows(model, data, num_slots, batch, limit))


def boxes_overlap(a, b) -> bool:
    """Whether two xyxy boxes overlap (touching counts)."""
    return a[0] <= b[2] and a[2] >= b[0] and a[1] <= b[3] and a[3] >= b[1]


def build_model(recipe: SFTRecipe):
    from planners.builtin import load_builtin_vlm
    from planners.latent_builtin import BuiltinLatentReasoner, ReasonerConfig

    vlm = load_builtin_vlm()
    cfg = ReasonerConfig(d_model=recipe.d_model, layers=recipe.layers, num_slots=recipe.slots, prefix_lm=recipe.prefix_lm,
                         answers=answer_vocab(), image_tokens=recipe.image_tokens, answer_reads=recipe.answer_reads,
                         object_reads=recipe.object_reads, image_positions=recipe.image_positions,
                         answer_pointer=recipe.answer_pointer and recipe.slots > 0)
    return BuiltinLatentReasoner.from_vlm(vlm.model, cfg), vlm.text


def train_object_attributes(model, train, val, steps: int = 1500, batch: int = 32, lr: float = 1e-3, seed: int = 0) -> dict:
    """Fit the reasoner's object attribute head (``planners.object_attributes``) to worldgen's ground truth of the
    training images, then freeze it; returns its VAL accuracy per attribute (over tokens matched to an object)."""
    from planners.object_attributes import GROUPS, attribute_loss
    from training.gelvr_data import object_attribute_targets

    head = model.perceive.requires_grad_(True).train()
    y_train, y_val = object_attribute_targets(train.features, train.records), object_attribute_targets(val.features, val.records)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.01)
    for step in range(steps):
        idx = np.random.default_rng([seed, step, 7]).integers(len(train), size=batch)
        loss = attribute_loss(model.object_attributes(train.features[idx].float().to(model.device)), y_train[idx].to(model.device))
        opt.zero_grad()
        loss.backward()
        opt.step()
    head.requires_grad_(False).eval()
    with torch.no_grad():
        logits = torch.cat([model.object_attributes(val.features[s : s + 100].float().to(model.device)).cpu()
                            for s in range(0, len(val), 100)])
    hit = y_val[..., 0] >= 0
    acc = {name: round(float((logits[..., a:b].argmax(-1) == y_val[..., k])[hit].float().mean()), 4)
           for k, (name, (a, b)) in enumerate(GROUPS.items())}
    logger.info("object attributes (VAL, %d tokens): %s", int(hit.sum()), acc)
    return {"val_accuracy": acc, "val_tokens": int(hit.sum()), "steps": steps, "final_loss": round(loss.item(), 4)}


def train_sft(out: str | Path, recipe: SFTRecipe = SFTRecipe(), cache: str | Path = "outputs/gelvr", resume: bool = True) -> dict:
    from training.gelvr_data import SpatialSet

    out = Path(out)
    (out / "run").mkdir(parents=True, exist_ok=True)
    recipe = resumed_recipe(out, recipe, resume)
    write_json_atomic(out / "train_config.json", {"model": KIND, "stage": "sft", "recipe": asdict(recipe)})
    t0 = time.perf_counter()
    torch.manual_seed(recipe.seed)
    model, text = build_model(recipe)
    cache = Path(cache)
    train = SpatialSet("train", recipe.train_items, model, text, cache=cache / "train")
    val = SpatialSet("val", recipe.val_items, model, text, cache=cache / "val")
    ckpt, step, history = out / "run" / "checkpoint.pt", 0, []
    if recipe.object_reads != "descriptor" and not (resume and ckpt.exists()):  # a resumed run has it in the checkpoint
        attributes = train_object_attributes(model, train, val, recipe.attribute_steps, seed=recipe.seed)
        write_json_atomic(out / "run" / "attributes.json", attributes)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=recipe.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: float(min(1.0, (s + 1) / recipe.warmup) * 0.5 * (1 + np.cos(np.pi * min(1.0, s / recipe.steps)))))
    if resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        step, history = int(state["step"]), json.loads(state["history"])
        logger.info("resumed at step %d", step)
    model.train()
    t_loop, first = time.perf_counter(), step
    while step < recipe.steps:
        idx = np.random.default_rng([recipe.seed, step]).integers(len(train), size=recipe.batch)  # exact resume
        losses = sft_losses(model, train, idx, recipe, with_answer=step >= recipe.answer_from)
        loss = sum(losses.values())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        step += 1
        if step % 50 == 0:
            logger.info("step %d %s", step, {k: round(float(v), 4) for k, v in losses.items()})
        if step % recipe.eval_every == 0 or step == recipe.steps:
            history.append({"step": step, **{k: round(float(v.detach()), 4) for k, v in losses.items()}, **evaluate(model, val, recipe.slots)})
            logger.info("val %s", history[-1])
            with atomic_path(ckpt) as tmp:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step,
                            "history": json.dumps(history)}, tmp)
    facts = {"kind": KIND, "stage": "sft", "recipe": asdict(recipe), "steps": step, "train_minutes": round((time.perf_counter() - t0) / 60, 2),
             "loop_sec_per_step": round((time.perf_counter() - t_loop) / (step - first), 4) if step > first else None,
             "val_history": history, "trainable_parameters": sum(p.numel() for p in params)}
    if (out / "run" / "attributes.json").is_file():
        facts["object_attributes"] = json.loads((out / "run" / "attributes.json").read_text())
    model.save_pretrained(out, {"steps": step, "variant": recipe.variant})
    write_json_atomic(out / "eval.json", facts)
    return facts


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m training.gelvr_sft", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="outputs/train/gelvr_sft")
    ap.add_argument("--variant", choices=VARIANTS, default="full")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--num-slots", type=int)
    ap.add_argument("--targets", choices=("chain", "roi", "chunks"))
    ap.add_argument("--image-tokens", choices=("cells", "objects"), help="a grid of cells, or one token per proposed object")
    ap.add_argument("--object-reads", choices=("descriptor", "symbols", "both"),
                    help="object tokens from their descriptor, the attribute head's shape/size/colour, or both [PROPOSED]")
    ap.add_argument("--image-positions", choices=("sequence", "shared"),
                    help="the image tokens' RoPE positions: their order, or one shared position (a set) [PROPOSED]")
    ap.add_argument("--train-items", type=int)
    ap.add_argument("--lambda-pointer", type=float, help="weight of the pointer term [PROPOSED] (default 0: the spec's loss)")
    ap.add_argument("--answer-reads", choices=("all", "slots"), help="slots: the answer sees only the slots [PROPOSED]")
    ap.add_argument("--answer-from", type=int, help="step from which the answer is trained (pointing first) [PROPOSED]")
    ap.add_argument("--answer-pointer", action="store_true", default=None,
                    help="the answer is the word read off what the last slot points at [PROPOSED]")
    ap.add_argument("--eval-every", type=int)
    ap.add_argument("--cache", default="outputs/gelvr", help="folder of the cached image features (made on first use)")
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    recipe = SFTRecipe(variant=args.variant)
    for name in ("steps", "num_slots", "targets", "image_tokens", "train_items", "eval_every", "lambda_pointer",
                 "answer_reads", "answer_from", "object_reads", "image_positions", "answer_pointer"):
        if getattr(args, name) is not None:
            setattr(recipe, name, getattr(args, name))
    facts = train_sft(args.out, recipe, args.cache, resume=not args.no_resume)
    print(json.dumps({"steps": facts["steps"], "val": facts["val_history"][-1] if facts["val_history"] else None,
                      "train_minutes": facts["train_minutes"]}))
    return 0


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
