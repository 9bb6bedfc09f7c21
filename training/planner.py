"""Train the builtin Bernini planner (planners/semantic/) on worldgen t2v / edit / ref2v plan targets.

The planner is trained apart from the renderer (spec b.10, stage P): from the prompt (MiniLM token
states, ``text_embed_dim`` 384, through a learned projection) and the sources in ViT token space (the
source clip's plan-frame tokens for v2v, each reference image's tokens for r2v), it predicts the target
clip's builtin-ViT patch tokens on the plan frames (``training.bernini_data``): a MaskGIT loss, masked
tokens scored by the per-token flow head (``SemanticPlanner.loss``). Batches, masks, dropout and noise
are seeded by the step, so a resumed run continues exactly (``training/loop.py``).

The builtin planner has no chain of thought (``cot=False``): worldgen has no reasoning text to teach,
and a byte-level decoder this small would only echo the prompt; the flag and its loss are exercised on
the hf backbone and in tests.

Evaluation plans held-out items (VAL during training, TEST at the end) with the full MaskGIT loop and
three-stream CFG, and compares them with the ground-truth tokens: cosine similarity per token, and the
share of tokens whose nearest ground-truth token (among the clip's own) sits at the same place, so a
plan that puts the right thing in the right place scores high. How the plans render is measured with
the renderer by ``benchmarks/bernini.py``.

The discrete plan [PROPOSED] (``--head codebook``, ``SemanticPlannerConfig.head``): before the first step the
codebook is fitted with k-means on a seeded sample of at most ``codebook_sample`` TRAIN target tokens and
stored in the model (a buffer, so checkpoints and the saved model carry it and a resumed run restores it
instead of refitting); how well it represents the VAL targets (mean cosine between a token and its code,
the ceiling of any codebook plan) is logged, and evaluation adds that ceiling per task.

Attribute supervision [PROPOSED] (``--attribute-loss W``, ``SemanticPlannerConfig.attribute_classes``): each
target token's labels are what the builtin VLM's patch read-out (``BuiltinVLMModel.patch_attributes``) sees in
its ground-truth ViT token: the colour and the shape of the object on it, none on background. A linear read-out
of the head condition is trained to name them (cross-entropy over the object tokens), and whether a token shows
an object at all (over every masked token: where the object is follows from the revealed tokens). Why: the spec's
loss alone left the shipped planner deaf to the prompt's colour (its flow loss on object tokens is the same
with the colour word swapped: 0.9265 vs 0.9272 on 20 VAL level-1 prompts), since object tokens are ~5% of a
plan and the colour a small part of their loss.

    python -m training.planner --out DIR [--steps N] [--stop-at STEP] [--tiny] [--no-resume] [--eval-only]
                               [--head {flow,codebook}] [--codebook-size K] [--local-context K] [--init DIR]
                               [--attribute-loss W] [--full-mask P] [--regression-loss W] [--denoising-steps N]

Fully masked examples [PROPOSED] (``--full-mask P``, ``SemanticPlannerConfig.full_mask_prob``): a builtin-ViT token
carries its whole frame's facts, so with part of the target revealed (the spec's ratio range) the planner reads
the object's colour off any revealed token and never learns it from the prompt, while MaskGIT's first step
reveals nothing. Measured from the planner shipped before: the attribute read-out learns the prompt's colour in 50
steps on fully masked level-1 targets alone, but after 1,500 steps of the spec's ratio range (attribute loss on) it
names the level-1 object's colour with nothing revealed on 12% of object tokens (chance 10%); with half the examples
fully masked, 90% (weights/builtin/planner/card.md).

Token regression [PROPOSED] (``--regression-loss W``, ``SemanticPlannerConfig.regression_weight``): a linear read-out
of each masked token's head condition, scored by MSE against the token. It gives the backbone a direct target for
what a masked token is, and measures what it passes on to a masked position (shown half a true plan, the interleaved
planner fine-tuned with it reads worse than the plain mean of the revealed tokens: docs/BENCHMARKS.md); training only.

Per-position mask rows [PROPOSED] (``--position-mask-tokens``, ``SemanticPlannerConfig.position_mask_tokens``): masked
target position k enters as row k of the mask-token table instead of the release's shared row 0, so the backbone is
told outright where each masked token sits (a ViT token's position-dependent part; the config's docstring).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core.atomic import write_json_atomic
from core.errors import InputError
from planners.semantic import PlanExample, PlanRequest, SemanticPlanner, SemanticPlannerConfig, builtin_planner
from planners.semantic import codebook as codebook_lib
from planners.semantic.backbones import TinyBackboneConfig
from planners.semantic.layout import VisualTokens
from training.bernini_data import DEFAULT_CACHE, TASKS, DataConfig, Pool, load_pools
from training.common import (
    SHIPPED,
    TRAIN_CONFIG,
    check_run_dir,
    design_notes,
    earlier_run_facts,
    finish_run,
    load_recipe,
    script_recipe,
    training_parser,
)
from training.loop import TrainConfig, Trainer
from training.renderer import TextStates

logger = logging.getLogger(__name__)

KIND = "semantic-planner"


def default_planner_config() -> SemanticPlannerConfig:
    """The builtin planner: builtin-ViT tokens (192-d) on a (4, 8, 8) plan grid, MiniLM prompt states."""
    return SemanticPlannerConfig(token_dim=192, plan_grid=(4, 8, 8), text_embed_dim=384, head_width=256, head_depth=3,
                                 cot=False, planning_steps=16, denoising_steps=3)


@dataclass
class PlannerRecipe:
    planner: SemanticPlannerConfig = field(default_factory=default_planner_config)
    backbone: TinyBackboneConfig = field(default_factory=lambda: TinyBackboneConfig(hidden_size=128, num_layers=4, num_heads=2))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=4000, lr=5e-4, warmup=200, weight_decay=0.01, ema=0.999,
                                                                   eval_every=1500, ckpt_every=100, log_every=25, threads=1,
                                                                   eval_at_end=False))
    data: DataConfig = field(default_factory=DataConfig)
    pool: int = 2000  # TRAIN items per task (the renderer's cached pools)
    mix: tuple[float, ...] = (0.4, 0.3, 0.3)  # step probabilities of t2v, v2v, r2v
    batch: int = 8
    val_items: int = 4
    test_items: int = 30
    seed: int = 0
    workers: int = 1
    cache: str = str(DEFAULT_CACHE)
    # the codebook head's k-means fit [PROPOSED]: at most 200k TRAIN target tokens, 20 Lloyd iterations
    codebook_sample: int = 200_000
    codebook_iters: int = 20
    # start from this saved planner's weights (a fine-tune); modules it lacks (e.g. local_context) start fresh
    init: str | None = None
    init_raw: bool = False  # take ``init``'s raw weights from its run's last checkpoint, not its saved (EMA) ones

    def resolved(self) -> PlannerRecipe:
        if len(self.mix) != len(TASKS) or any(m < 0 for m in self.mix) or not sum(self.mix) > 0:
            raise InputError("mix", self.mix, f"give {len(TASKS)} non-negative weights for {TASKS}")
        for name in ("codebook_sample", "codebook_iters"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(name, v, "use a positive integer")
        return self


def tiny_recipe(out: Path) -> PlannerRecipe:
    """A model and data small enough for a smoke test of the whole script (seconds)."""
    return PlannerRecipe(planner=replace(default_planner_config(), head_width=32, head_depth=1, planning_steps=2, denoising_steps=1),
                         backbone=TinyBackboneConfig(hidden_size=32, num_layers=2, num_heads=2),
                         train=TrainConfig(steps=3, lr=1e-3, warmup=1, ema=0.9, eval_every=2, ckpt_every=1, log_every=1, threads=1,
                                           eval_at_end=False),
                         pool=2, batch=2, val_items=1, test_items=1, cache=str(out / "cache"))


def request_of(pool: Pool, i: int, texts: TextStates) -> PlanRequest:
    """Item ``i`` as the planner sees it: prompt states and the sources in ViT token space."""
    sources = []
    if pool.source_tokens is not None:
        sources.append(VisualTokens(torch.from_numpy(pool.source_tokens[i].astype(np.float32)), "video"))
    if pool.ref_tokens is not None:
        sources += [VisualTokens(torch.from_numpy(pool.ref_tokens[i, j : j + 1].astype(np.float32)), "image")
                    for j in range(int(pool.n_refs[i]))]
    return PlanRequest(prompt_embeds=texts[pool.text[i]], sources=sources, task=pool.task)


class Batches:
    """Step-seeded batches (resuming at step s gives exactly the batches from s on)."""

    def __init__(self, pools: dict[str, Pool], texts: TextStates, recipe: PlannerRecipe, step: int = 0,
                 labels: dict[str, np.ndarray] | None = None):
        self.pools, self.texts, self.r, self.step, self.labels = pools, texts, recipe, step, labels
        self.mix = np.asarray(recipe.mix, np.float64) / sum(recipe.mix)

    def __next__(self) -> dict:
        r = self.r
        rng = np.random.default_rng([r.seed, 12, self.step])
        seed = int(np.random.default_rng([r.seed, 13, self.step]).integers(2**62))
        self.step += 1
        task = TASKS[int(rng.choice(len(TASKS), p=self.mix))]
        pool = self.pools[task]
        labels = self.labels[task] if self.labels is not None else None
        examples = [PlanExample(request_of(pool, int(i), self.texts), torch.from_numpy(pool.plan[int(i)].astype(np.float32)),
                                token_classes=None if labels is None else torch.from_numpy(labels[int(i)].astype(np.int64)))
                    for i in rng.integers(len(pool), size=r.batch)]
        return {"task": task, "examples": examples, "seed": seed}


# ---------------------------------------------------------------------------- the codebook head


def sample_target_tokens(pools: dict[str, Pool], limit: int, seed: int) -> torch.Tensor:
    """At most ``limit`` target tokens ``(n, D)`` float32, drawn without replacement (seeded) from every pool's
    plan targets together, so each task contributes in proportion to its tokens."""
    flat = [p.plan.reshape(-1, p.plan.shape[-1]) for p in pools.values()]  # views of the cached arrays
    sizes = np.array([len(f) for f in flat])
    total = int(sizes.sum())
    pick = np.sort(np.random.default_rng([seed, 14]).choice(total, size=min(limit, total), replace=False))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    parts = [flat[k][pick[(pick >= starts[k]) & (pick < starts[k + 1])] - starts[k]] for k in range(len(flat))]
    return torch.from_numpy(np.concatenate(parts).astype(np.float32))


def codebook_quality(model: SemanticPlanner, pools: dict[str, Pool]) -> dict[str, float]:
    """``codebook_stats`` of ``model``'s codebook on every target token of ``pools`` (cosine = the plan ceiling)."""
    tokens = torch.cat([torch.from_numpy(p.plan.reshape(-1, p.plan.shape[-1]).astype(np.float32)) for p in pools.values()])
    return {k: round(v, 4) for k, v in codebook_lib.codebook_stats(tokens, model.codebook.detach().cpu()).items()}


def fit_codebook(models: list[SemanticPlanner], pools: dict[str, Pool], recipe: PlannerRecipe) -> None:
    """k-means on a sample of the TRAIN targets (seeded by the recipe), stored in every model given (the
    trained weights and their EMA copy)."""
    c = recipe.planner
    t0 = time.perf_counter()
    tokens = sample_target_tokens(pools, recipe.codebook_sample, recipe.seed)
    book = codebook_lib.fit_codebook(tokens, c.codebook_size, iters=recipe.codebook_iters,
                                     generator=torch.Generator().manual_seed(recipe.seed))
    for m in models:
        m.set_codebook(book)
    logger.info("codebook: %d codes fitted on %d TRAIN tokens in %.1f s", c.codebook_size, len(tokens), time.perf_counter() - t0)


def loss_fn(model: SemanticPlanner, batch: dict):
    out = model.loss(batch["examples"], torch.Generator().manual_seed(batch["seed"]))
    logs = {f"loss_{batch['task']}": out.loss.detach()}
    if out.attributes is not None:
        logs[f"attributes_{batch['task']}"] = out.attributes.detach()
    if out.regression is not None:
        logs[f"regression_{batch['task']}"] = out.regression.detach()
    return out.loss, logs


VLM_DIR = SHIPPED / "vlm"
OBJECT_THRESHOLD = 0.5  # P(object) of the VLM's patch read-out above which a token is labelled


@torch.no_grad()
def token_labels(pools: dict[str, Pool], chunk: int = 64) -> dict[str, np.ndarray]:
    """Per task, ``(n, T', h, w, 3)`` int16 labels of every target token: the colour and the shape of the object the
    builtin VLM reads on it (-100 where it reads none), and whether it reads one (1 / 0) (module docstring)."""
    from planners.builtin.vlm import BuiltinVLMModel

    vlm = BuiltinVLMModel.from_pretrained(VLM_DIR)
    colors = vlm.config.colors
    out = {}
    for task, pool in pools.items():
        n, t, h, w, _ = pool.plan.shape
        labels = np.full((n, t, h, w, 3), -100, np.int16)
        for start in range(0, n, chunk):
            tokens = torch.from_numpy(pool.plan[start:start + chunk].astype(np.float32))
            a = vlm.patch_attributes(tokens.reshape(-1, h, w, tokens.shape[-1])).reshape(len(tokens), t, h, w, -1)
            obj = (a[..., 0] > OBJECT_THRESHOLD).numpy()
            lab = np.stack([a[..., 1:1 + colors].argmax(-1).numpy(), a[..., 1 + colors:].argmax(-1).numpy()], -1)
            labels[start:start + chunk] = np.concatenate([np.where(obj[..., None], lab, -100), obj[..., None]], -1)
        out[task] = labels
    return out


def attribute_groups() -> tuple[int, int, int]:
    """The label groups of ``token_labels``: colours and shapes of the shipped builtin VLM's read-out, and object or
    not."""
    cfg = json.loads((VLM_DIR / "config.json").read_text())
    return int(cfg["colors"]), int(cfg["shapes"]), 2


# ---------------------------------------------------------------------------- evaluation


def plan_agreement(pred: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """How a plan ``(T', h, w, D)`` matches the ground truth: mean cosine per token, and the share of tokens
    whose nearest ground-truth token (cosine, over the clip's own tokens) is the one at their place."""
    p = F.normalize(pred.reshape(-1, pred.shape[-1]).float(), dim=-1)
    t = F.normalize(target.reshape(-1, target.shape[-1]).float().to(p.device), dim=-1)  # a GPU plan, CPU truth
    sim = p @ t.T
    return {"cosine": float(sim.diagonal().mean()),
            "placed": float((sim.argmax(1) == torch.arange(len(p), device=p.device)).float().mean())}


@torch.no_grad()
def evaluate(model: SemanticPlanner, pools: dict[str, Pool], texts: TextStates, n: int) -> dict:
    """Plan the first ``n`` items of each task and score them against their targets (see the module doc).

    ``copy_source`` is the same score for the source clip's own tokens (v2v): what planning nothing but
    "keep the source" would get, the bar an edit plan must beat on the edited tokens. ``codebook_ceiling``
    (codebook head only) scores the quantised ground truth: the most a plan from this codebook can reach."""
    model.eval()
    out = {}
    for task, pool in pools.items():
        rows, secs, copy, ceiling = [], [], [], []
        for i in range(min(n, len(pool))):
            t0 = time.perf_counter()
            tokens = model.plan(request_of(pool, i, texts), grid=tuple(pool.plan.shape[1:4]), generator=int(pool.index[i])).tokens
            secs.append(time.perf_counter() - t0)
            target = torch.from_numpy(pool.plan[i].astype(np.float32))
            rows.append(plan_agreement(tokens, target))
            if model.codebook is not None:  # the quantised ground truth: the best a codebook plan can do
                ceiling.append(plan_agreement(model.codebook[model.quantize(target)].cpu(), target))
            if pool.source_tokens is not None:
                copy.append(plan_agreement(torch.from_numpy(pool.source_tokens[i].astype(np.float32)), target))
        out[task] = {k: round(float(np.mean([r[k] for r in rows])), 4) for k in ("cosine", "placed")}
        out[task].update(clips=len(rows), seconds_per_plan=round(float(np.mean(secs)), 3))
        if copy:
            out[task]["copy_source"] = {k: round(float(np.mean([r[k] for r in copy])), 4) for k in ("cosine", "placed")}
        if ceiling:
            out[task]["codebook_ceiling"] = {k: round(float(np.mean([r[k] for r in ceiling])), 4) for k in ("cosine", "placed")}
    return out


def _head_text(c: SemanticPlannerConfig, ev: dict) -> str:
    if c.head == "codebook":
        q = ev.get("codebook", {})
        return (f"with a discrete head [PROPOSED]: a classifier (depth {c.head_depth}, width {c.head_width}) over a "
                f"{c.codebook_size}-code k-means codebook of ViT tokens (VAL cosine token-to-code "
                f"{q.get('cosine', '-')}); MaskGIT reveal by {c.reveal_mode} over {c.planning_steps} steps (choice "
                f"temperature {c.choice_temperature}), three-stream CFG on the logits (text {c.txt_cfg}, image {c.img_cfg}).")
    return (f"with a per-token AdaLN flow head ({c.head_depth} blocks, width {c.head_width}); MaskGIT reveal over "
            f"{c.planning_steps} steps, {c.denoising_steps} Euler steps per token, three-stream CFG (text {c.txt_cfg}, "
            f"image {c.img_cfg}).")


def _options_text(recipe: PlannerRecipe) -> str:
    """The card's lines for a fine-tune and the [PROPOSED] training options, when used."""
    c, lines = recipe.planner, []
    if recipe.init:
        which = "its last checkpoint's raw (non-EMA) weights" if recipe.init_raw else "its weights"
        lines.append(f"- Fine-tuned from the planner in `{recipe.init}` ({which} at the start of this run).")
    if recipe.backbone.mrope_layout == "interleaved":
        lines.append("- Interleaved M-RoPE [PROPOSED for this backbone; Qwen3-VL's layout] (`--mrope-layout interleaved`): every grid "
                     "axis gets fast rotary frequencies (TinyBackboneConfig's docstring).")
    if c.local_context:
        lines.append(f"- Local context [PROPOSED] (`--local-context {c.local_context}`): a {c.local_context}x{c.local_context}x"
                     f"{c.local_context} convolution over the target grid (and an edit's aligned source) joins each head condition.")
    if c.full_mask_prob:
        lines.append(f"- {c.full_mask_prob:g} of the examples fully masked [PROPOSED] (`--full-mask`; training/planner.py's docstring).")
    if c.attribute_classes:
        lines.append(f"- Attribute supervision [PROPOSED] (`--attribute-loss {c.attribute_weight:g}`): a linear read-out of each masked "
                     f"token's head condition names the colour / shape / presence of the object the builtin VLM reads on its "
                     f"target ({'/'.join(str(k) for k in c.attribute_classes)} classes).")
    if c.regression_weight:
        lines.append(f"- Token regression [PROPOSED] (`--regression-loss {c.regression_weight:g}`): a linear read-out of each masked "
                     "token's head condition is scored by MSE against the token (training only).")
    if c.position_mask_tokens:
        lines.append(f"- Per-position mask rows [PROPOSED] (`--position-mask-tokens`): masked target position k enters as row k "
                     f"of a {c.num_mask_tokens}-row mask-token table (SemanticPlannerConfig's docstring).")
    return "".join("\n" + line for line in lines)


def card(recipe: PlannerRecipe, ev: dict, out: Path) -> str:
    c, b, t = recipe.planner, recipe.backbone, recipe.train
    rows = [f"| {task} | {m['cosine']:.3f} | {m['placed']:.3f} | {m.get('copy_source', {}).get('cosine', '-')} | {m['clips']} | {m['seconds_per_plan']} |"
            for task, m in ev.get("test", {}).items()]
    size_mb = (out / "model.safetensors").stat().st_size / 2**20 if (out / "model.safetensors").is_file() else 0.0
    return f"""# semantic-planner (builtin)

Bernini's builtin planner (`planners/semantic/`): the tiny decoder backbone ({b.num_layers} layers, width
{b.hidden_size}, {b.num_heads} heads, M-RoPE, the block attention mask of spec b.2) reads the system prompt
(bytes), the prompt's MiniLM token states (projected) and the sources' builtin-ViT tokens, and predicts the
target's builtin-ViT patch tokens on a {c.plan_grid} plan grid {_head_text(c, ev)} No chain of thought (`cot=False`).

## Data and training
- worldgen TRAIN split, {recipe.pool} clips per task (t2v, edit as v2v, ref2v as r2v; levels 1-3 in turn);
  targets are the shipped builtin ViT's patch tokens of the target clip on frames 0, 5, 10, 15.
- {ev.get('steps')} of {t.steps} steps, batch {recipe.batch}, task mix {recipe.mix}, AdamW lr {t.lr}, warmup {t.warmup} +
  cosine, EMA {t.ema}; mask ratio U[{c.mask_ratio_min}, {c.mask_ratio_max}], text dropout {c.text_dropout}, source
  dropout {c.visual_dropout}. {ev.get('train_minutes')} min, {ev.get('sec_per_step')} s/step on {t.threads} CPU thread(s).
  Weights {size_mb:.1f} MB.{_options_text(recipe)}

## Measured (TEST split, first {recipe.test_items} items per task)
Per plan token: cosine to the ground-truth token at its place, and the share of tokens whose nearest
ground-truth token (of the clip's own) is the one at their place. `copy source` is the cosine the source
clip's own tokens get (v2v: most of an edit is "keep").

| task | cosine | placed | copy source | clips | s/plan |
|---|---|---|---|---|---|
{chr(10).join(rows)}

## What it can and cannot do
- What the plans look like rendered, and how often the judge reads the prompt's colour, shape and motion
  in them, is measured by `benchmarks/bernini.py` (planner + renderer), not here.
- Trained on worldgen prompts only; other words reach it through MiniLM and may land on the nearest
  worldgen concept.
{design_notes(out, "planner")}"""


def final_eval(out: Path, recipe: PlannerRecipe, model: SemanticPlanner, texts: TextStates, extra: dict) -> dict:
    test = load_pools("test", recipe.seed, recipe.test_items, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    ev = {**extra, "test": evaluate(model, test, texts, recipe.test_items)}
    write_json_atomic(out / "eval.json", ev)
    (out / "card.md").write_text(card(recipe, ev, out))
    logger.info("test: %s", json.dumps(ev["test"]))
    return ev


def parse_args(argv=None):
    """The recipe scripts' shared options (``training_parser``), ``--stop-at``, and the plan head's flags."""
    ap = training_parser("python -m training.planner", "Train the builtin Bernini planner on worldgen plan targets.",
                         "outputs/train/planner")
    ap.add_argument("--stop-at", type=int, help="stop at this step (checkpointed; resume later with the same --steps)")
    ap.add_argument("--head", choices=("flow", "codebook"),
                    help="the plan head: flow (spec, default) or codebook (discrete plan, MaskGIT over k-means codes) [PROPOSED]")
    ap.add_argument("--codebook-size", type=int, help="codes in the codebook (default 512) [PROPOSED]")
    ap.add_argument("--local-context", type=int, metavar="K",
                    help="a KxKxK convolution over the target grid joins the head's condition (0 = off) [PROPOSED]")
    ap.add_argument("--init", metavar="DIR", help="start from the weights of the planner saved in DIR (fine-tune)")
    ap.add_argument("--init-raw", action="store_true",
                    help="with --init: start from that run's raw weights (DIR/run/checkpoint/model.safetensors), not its "
                         "saved EMA weights, which still hold part of the weights it started from")
    ap.add_argument("--txt-cfg", type=float, metavar="S",
                    help="guidance scale of the instruction over the sources when planning (an edit's or references' "
                         "text; saved in the model's config, an inference setting like --img-cfg; default 1.4)")
    ap.add_argument("--img-cfg", type=float, metavar="S",
                    help="guidance scale of the prompt and sources when planning (saved in the model's config; an inference "
                         "setting like --denoising-steps; default 1.2)")
    ap.add_argument("--denoising-steps", type=int, metavar="N",
                    help="Euler steps of the flow head per revealed token when planning (saved in the model's config; "
                         "an inference setting, so a resumed run or --eval-only may change it)")
    ap.add_argument("--full-mask", type=float, metavar="P",
                    help="share of training examples with every target token masked (0 = the spec's ratio range) [PROPOSED]")
    ap.add_argument("--mrope-layout", choices=("sections", "interleaved"),
                    help="which rotary frequencies each grid axis gets in the builtin backbone: sections (Qwen2.5-VL; "
                         "width barely rotates at this size) or interleaved (Qwen3-VL) [PROPOSED]")
    ap.add_argument("--attribute-loss", type=float, metavar="W",
                    help="weight of the attribute supervision of the head conditions (0 = off, the spec's loss) [PROPOSED]")
    ap.add_argument("--regression-loss", type=float, metavar="W",
                    help="weight of a token regression from the head conditions (MSE to the masked token; 0 = off, the "
                         "spec's loss; flow head only) [PROPOSED]")
    ap.add_argument("--position-mask-tokens", action="store_true",
                    help="each masked target position enters as its own learned mask row, not one shared row (a fine-tune "
                         "from a planner without them starts every row at its shared one) [PROPOSED]")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return args


def head_recipe(recipe: PlannerRecipe, args, saved: PlannerRecipe | None, resuming: bool) -> PlannerRecipe:
    """``recipe`` with ``--head`` / ``--codebook-size`` applied. A run resuming a checkpoint keeps its saved head
    (also under ``--tiny``, whose recipe is rebuilt each time); asking it for another one is an error, since the
    checkpoint's weights are that head's."""
    p = recipe.planner
    keep = saved.planner if resuming and saved is not None else p
    head = args.head if args.head is not None else keep.head
    size = args.codebook_size if args.codebook_size is not None else keep.codebook_size
    if resuming and saved is not None and (head, size) != (saved.planner.head, saved.planner.codebook_size):
        flag = "--head" if head != saved.planner.head else "--codebook-size"
        raise InputError(flag, head if flag == "--head" else size,
                         f"{args.out} holds a checkpoint of a head={saved.planner.head!r} (codebook_size "
                         f"{saved.planner.codebook_size}) run; resume it without the flag, or pass --no-resume / a new --out")
    if (head, size) == (p.head, p.codebook_size):
        return recipe
    return replace(recipe, planner=replace(p, head=head, codebook_size=size))


def _guidance_flag(args, name: str, kept: float, example: float) -> float:
    """``--img-cfg`` / ``--txt-cfg``: the flag's guidance scale (>= 1), or ``kept`` when it is not given."""
    value = getattr(args, name, None)
    if value is None:
        return kept
    if not (np.isfinite(value) and value >= 1):
        raise InputError("--" + name.replace("_", "-"), value, f"use a guidance scale >= 1 (1 = no guidance), e.g. {example:g}")
    return value


def option_recipe(recipe: PlannerRecipe, args, saved: PlannerRecipe | None, resuming: bool) -> PlannerRecipe:
    """``recipe`` with ``--local-context``, ``--attribute-loss``, ``--full-mask``, ``--denoising-steps``, ``--img-cfg``,
    ``--txt-cfg``, ``--regression-loss``, ``--position-mask-tokens``, ``--mrope-layout`` and ``--init`` applied; a resumed
    run cannot change the model's shape (the local context, the read-outs, the mask rows) or its positions (the rotary
    layout)."""
    local = recipe.planner.local_context if args.local_context is None else args.local_context
    if resuming and saved is not None and local != saved.planner.local_context:
        raise InputError("--local-context", local, f"{args.out} holds a checkpoint with local_context "
                                                   f"{saved.planner.local_context}; resume without the flag, or pass "
                                                   "--no-resume / a new --out")
    weight = getattr(args, "attribute_loss", None)
    if weight is not None and not (np.isfinite(weight) and weight >= 0):
        raise InputError("--attribute-loss", weight, "use a weight >= 0 (0 = off)")
    keep = saved.planner if resuming and saved is not None else recipe.planner  # --tiny rebuilds its recipe each run
    keep_bb = saved.backbone if resuming and saved is not None else recipe.backbone
    classes, weight = ((keep.attribute_classes, keep.attribute_weight) if weight is None
                       else ((attribute_groups() if weight > 0 else ()), weight if weight > 0 else 1.0))
    if resuming and saved is not None and tuple(classes) != tuple(saved.planner.attribute_classes):
        raise InputError("--attribute-loss", args.attribute_loss, f"{args.out} holds a checkpoint "
                                                                  f"{'with' if saved.planner.attribute_classes else 'without'} the "
                                                                  "attribute read-out; resume without the flag, or pass --no-resume / a new --out")
    reg = getattr(args, "regression_loss", None)
    if reg is not None and not (np.isfinite(reg) and reg >= 0):
        raise InputError("--regression-loss", reg, "use a weight >= 0 (0 = off)")
    reg = keep.regression_weight if reg is None else float(reg)
    if resuming and saved is not None and (reg > 0) != (saved.planner.regression_weight > 0):
        raise InputError("--regression-loss", reg, f"{args.out} holds a checkpoint "
                                                   f"{'with' if saved.planner.regression_weight > 0 else 'without'} the token "
                                                   "regression read-out; resume without the flag, or pass --no-resume / a new --out")
    if reg > 0 and (args.head or keep.head) != "flow":
        raise InputError("--regression-loss", reg, "the token regression needs the flow head (drop --head codebook)")
    if args.init is not None and not (Path(args.init) / "config.json").is_file():
        raise InputError("--init", args.init, "pass a folder holding a saved planner (config.json + model.safetensors)")
    full = getattr(args, "full_mask", None)
    if full is not None and not (np.isfinite(full) and 0 <= full <= 1):
        raise InputError("--full-mask", full, "use a probability in [0, 1] (0 = off)")
    full = keep.full_mask_prob if full is None else full
    steps = getattr(args, "denoising_steps", None)
    if steps is not None and steps < 1:
        raise InputError("--denoising-steps", steps, "use a positive number of Euler steps (e.g. 25)")
    steps = keep.denoising_steps if steps is None else steps
    img_cfg = _guidance_flag(args, "img_cfg", keep.img_cfg, 2.5)
    txt_cfg = _guidance_flag(args, "txt_cfg", keep.txt_cfg, 6)
    init_raw = bool(getattr(args, "init_raw", False)) or recipe.init_raw
    if init_raw and args.init is not None and not (Path(args.init) / "run" / "checkpoint" / "model.safetensors").is_file():
        raise InputError("--init-raw", args.init, "that folder holds no run checkpoint (run/checkpoint/model.safetensors)")
    by_position = bool(getattr(args, "position_mask_tokens", False)) or keep.position_mask_tokens
    if resuming and saved is not None and by_position != saved.planner.position_mask_tokens:
        raise InputError("--position-mask-tokens", by_position, f"{args.out} holds a checkpoint "
                                                                f"{'with' if saved.planner.position_mask_tokens else 'without'} "
                                                                "per-position mask rows; resume without the flag, or pass --no-resume / a new --out")
    grid = recipe.planner.plan_grid
    rows = max(recipe.planner.num_mask_tokens, grid[0] * grid[1] * grid[2]) if by_position else recipe.planner.num_mask_tokens
    layout = getattr(args, "mrope_layout", None) or keep_bb.mrope_layout
    if resuming and saved is not None and layout != saved.backbone.mrope_layout:
        raise InputError("--mrope-layout", layout, f"{args.out} holds a checkpoint trained with {saved.backbone.mrope_layout!r}; "
                                                   "resume without the flag, or pass --no-resume / a new --out")
    backbone = recipe.backbone if layout == recipe.backbone.mrope_layout else replace(recipe.backbone, mrope_layout=layout, mrope_section=None)
    return replace(recipe, planner=replace(recipe.planner, local_context=local, attribute_classes=tuple(classes),
                                           attribute_weight=weight, full_mask_prob=full, denoising_steps=steps, img_cfg=img_cfg,
                                           txt_cfg=txt_cfg,
                                           regression_weight=reg, position_mask_tokens=by_position, num_mask_tokens=rows),
                   backbone=backbone, init=recipe.init if args.init is None else args.init, init_raw=init_raw)


def init_weights(model: SemanticPlanner, directory: str, raw: bool = False) -> None:
    """Copy a saved planner's weights into ``model``: every tensor must match, and only modules the saved
    planner lacks (the local context, the attribute and regression read-outs) may be left at their fresh initialisation.
    ``raw``: the weights of the run's last checkpoint (``directory/run/checkpoint/model.safetensors``) instead of
    the saved EMA ones."""
    src = SemanticPlanner.from_pretrained(directory)
    if raw:
        from core.weights_io import load_state_dict

        src.load_state_dict(load_state_dict(Path(directory) / "run" / "checkpoint" / "model.safetensors"))
    state = src.state_dict()
    if model.config.position_mask_tokens and not src.config.position_mask_tokens:  # every row starts as the shared one
        state["mask_tokens"] = state["mask_tokens"][:, :1].expand_as(model.mask_tokens).clone()
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # a tensor of another shape (another width, grid or head)
        raise InputError("--init", directory, f"its weights do not fit this recipe's planner ({str(e).splitlines()[-1].strip()})") from None
    fresh = [k for k in missing if not k.startswith(("local.", "attribute_head.", "regression_head."))]
    if fresh or unexpected:
        raise InputError("--init", directory, f"its weights do not fit this recipe's planner (missing {fresh}, "
                                              f"unexpected {unexpected}); the sizes must match")
    logger.info("initialised from %s (fresh: %s)", directory, sorted({k.split(".")[0] for k in missing}) or "none")


def main(argv=None) -> int:
    args = parse_args(argv)
    option_recipe(PlannerRecipe(), args, None, False)  # the flags' values, checked before anything is written
    out = check_run_dir(args.out, KIND, "planner")
    saved = load_recipe(PlannerRecipe, out) if not args.no_resume else None
    resuming = saved is not None and (out / "run" / "checkpoint" / "state.pt").is_file()
    if resuming:  # refuse a head the checkpoint does not hold before anything is written
        head_recipe(saved, args, saved, resuming)
        option_recipe(saved, args, saved, resuming)
    # --tiny rebuilds its recipe each run: give it the head too, so resuming a tiny run compares like with like
    recipe = script_recipe(PlannerRecipe, out, args, lambda o: head_recipe(tiny_recipe(o), args, saved, resuming), KIND,
                           "python -m training.planner")
    with_head = option_recipe(head_recipe(recipe, args, saved, resuming), args, saved, resuming)
    if with_head != recipe:  # script_recipe saved the recipe before the head flags: save it again
        recipe = with_head
        write_json_atomic(out / TRAIN_CONFIG, {"model": KIND, "recipe": PlannerRecipe.__name__,
                                               "provenance": "python -m training.planner", **asdict(recipe)})
    texts = TextStates()
    torch.set_num_threads(recipe.train.threads or 1)
    if args.eval_only:
        facts = earlier_run_facts(out)
        old = json.loads((out / "eval.json").read_text()) if (out / "eval.json").is_file() else {}
        if "codebook" in old:  # the VAL quantisation numbers measured when the codebook was fitted
            facts["codebook"] = old["codebook"]
        model = SemanticPlanner.from_pretrained(out)
        settings = ("denoising_steps", "img_cfg", "txt_cfg")
        if any(getattr(model.config, k) != getattr(recipe.planner, k) for k in settings):
            # --denoising-steps / --img-cfg / --txt-cfg on a saved model: inference settings
            for k in settings:
                setattr(model.config, k, getattr(recipe.planner, k))
            model.save_pretrained(out)
        final_eval(out, recipe, model, texts, facts)
        return 0
    t_start = time.perf_counter()
    pools = load_pools("train", recipe.seed, recipe.pool, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    val = load_pools("val", recipe.seed, recipe.val_items, recipe.data, cache_dir=recipe.cache, workers=recipe.workers)
    texts.add([t for p in (*pools.values(), *val.values()) for t in p.text])
    torch.manual_seed(recipe.train.seed)  # the initial weights depend on the recipe alone
    model = builtin_planner(recipe.planner, recipe.backbone)
    if recipe.init and not resuming:
        init_weights(model, recipe.init, raw=recipe.init_raw)
    trainer = Trainer(model, loss_fn, recipe.train, out / "run", evaluate=lambda m: evaluate(m, val, texts, recipe.val_items))
    resumed = False if args.no_resume else trainer.load_checkpoint()
    extra: dict = {}
    if recipe.planner.head == "codebook":
        trained = trainer.accelerator.unwrap_model(trainer.model)
        if not (resumed and bool(trained.head.fitted)):  # a resumed run's codebook came back with its checkpoint
            fit_codebook([trained] + ([trainer.ema] if trainer.ema is not None else []), pools, recipe)
        extra["codebook"] = codebook_quality(trained, val)
        logger.info("codebook on VAL targets: %s", json.dumps(extra["codebook"]))
    labels = token_labels(pools) if recipe.planner.attribute_classes else None
    trainer.fit(Batches(pools, texts, recipe, trainer.step, labels), until=args.stop_at)
    return finish_run(trainer, out, recipe.train.steps, (time.perf_counter() - t_start) / 60,
                      lambda final, facts: final_eval(out, recipe, final, texts, {**facts, **extra}))


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
