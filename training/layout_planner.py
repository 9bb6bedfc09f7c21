"""Train the builtin Bernini layout planner (``planners/semantic/layout_planner.py``) on worldgen t2v / edit / ref2v.

Both parts learn from the same TRAIN pools (``training.bernini_data``) and the layouts worldgen's records give
(``training.bernini_layout``), in one loop: the writer by cross-entropy on the layout tokens (teacher-forced, the
prompt's MiniLM states, the source clip's and the references' ViT tokens in its prefix), the painter by regression
of the true plan (the builtin ViT's tokens on the plan frames) from the true layout (and, for an edit, the source's
tokens). They share no weights, so one loop is two trainings at the price of one schedule. Every batch is seeded by
its step: a resumed run continues exactly (``training/loop.py``).

Evaluation (VAL while training, TEST at the end) samples layouts as the pipeline does and reads, for the objects the
text names, how often their colour, shape, size and direction (first to last plan frame's cell) are the true
ones; and paints the true layouts, against the true plans (cosine per token). What the rendered clips show is
``benchmarks/bernini.py``'s job.

    python -m training.layout_planner --out DIR [--steps N] [--stop-at STEP] [--tiny] [--no-resume] [--eval-only]
                                      [--parts writer,painter] [--init DIR]
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
from planners.semantic.layout_planner import MODEL_NAME, LayoutPlanner, LayoutPlannerConfig, layout_params
from planners.semantic.layout_tokens import PAD, LayoutVocab, SceneLayout
from training.bernini_data import DEFAULT_CACHE, TASKS, DataConfig, Pool, load_pools
from training.bernini_layout import layout_array, layout_vocab
from training.common import TRAIN_CONFIG, check_run_dir, design_notes, earlier_run_facts, finish_run, parse_script, script_recipe
from training.loop import TrainConfig, Trainer
from training.renderer import TextStates

logger = logging.getLogger(__name__)

KIND = MODEL_NAME


@dataclass
class LayoutPlannerRecipe:
    planner: LayoutPlannerConfig = field(default_factory=LayoutPlannerConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=3000, lr=5e-4, warmup=200, weight_decay=0.01, ema=None,
                                                                   grad_clip=5.0, eval_every=1000, ckpt_every=100, log_every=25,
                                                                   threads=1, eval_at_end=False))
    data: DataConfig = field(default_factory=DataConfig)
    pool: int = 2000
    batch: int = 16  # writer items per step
    painter_batch: int = 8  # painter items per step (each gives plan_frames frames)
    mix: tuple = (0.34, 0.33, 0.33)
    cells: int = 16
    val_items: int = 60
    test_items: int = 200
    seed: int = 0
    workers: int = 1
    cache: str = str(DEFAULT_CACHE)
    parts: tuple = ("writer", "painter")  # what this run trains; the other part stays as ``init`` left it
    init: str | None = None  # start from this saved layout planner's weights (every tensor whose shape matches)

    def resolved(self) -> LayoutPlannerRecipe:
        if len(self.mix) != len(TASKS) or any(m < 0 for m in self.mix) or not sum(self.mix) > 0:
            raise InputError("mix", self.mix, f"give {len(TASKS)} non-negative weights for {TASKS}")
        if not self.parts or set(self.parts) - {"writer", "painter"}:
            raise InputError("parts", self.parts, "train 'writer', 'painter' or both")
        return self


def tiny_recipe(out: Path) -> LayoutPlannerRecipe:
    return LayoutPlannerRecipe(planner=LayoutPlannerConfig(width=32, depth=1, heads=2, painter_fine=16, painter_width=16, painter_depth=1),
                               train=TrainConfig(steps=3, lr=1e-3, warmup=1, eval_every=2, ckpt_every=1, log_every=1, threads=1,
                                                 eval_at_end=False),
                               pool=3, batch=2, painter_batch=2, val_items=2, test_items=2, cache=str(out / "cache"))


# ---------------------------------------------------------------------------- data


class Data:
    """A task's pool with its layouts and the prefix inputs the writer reads; with ``read_source``, a v2v pool also
    holds its source layouts (the "read" task's targets, and the edit's prefix in training)."""

    def __init__(self, pool: Pool, split: str, seed: int, vocab: LayoutVocab, read_source: bool = False):
        self.pool, self.vocab = pool, vocab
        self.ids = layout_array(pool, split, seed, vocab)
        self.source_ids = layout_array(pool, split, seed, vocab, source=True) if read_source and pool.task == "v2v" else None

    def layout(self, i: int) -> SceneLayout:
        return self.vocab.decode([int(x) for x in self.ids[i] if x != PAD])

    def inputs(self, i: int, texts: TextStates) -> tuple[str, torch.Tensor, torch.Tensor | None, list[torch.Tensor]]:
        p = self.pool
        source = torch.from_numpy(p.source_tokens[i].astype(np.float32)) if p.source_tokens is not None else None
        refs = [] if p.ref_tokens is None else [torch.from_numpy(p.ref_tokens[i, k].astype(np.float32))[None] for k in range(int(p.n_refs[i]))]
        return p.task, texts[p.text[i]], source, refs

    def source_layout(self, i: int) -> list[int] | None:
        return None if self.source_ids is None else [int(x) for x in self.source_ids[i] if x != PAD]


class Batches:
    """Step-seeded batches: a writer batch of one task and a painter batch of another (both drawn by ``mix``)."""

    def __init__(self, data: dict[str, Data], texts: TextStates, recipe: LayoutPlannerRecipe, step: int = 0):
        self.data, self.texts, self.r, self.step = data, texts, recipe, step
        self.mix = np.asarray(recipe.mix, np.float64) / sum(recipe.mix)

    def __next__(self) -> dict:
        r = self.r
        rng = np.random.default_rng([r.seed, 7, self.step])
        self.step += 1
        wt, pt = (TASKS[int(rng.choice(len(TASKS), p=self.mix))] for _ in range(2))
        wd, pd = self.data[wt], self.data[pt]
        widx = rng.integers(len(wd.pool), size=r.batch)  # both drawn every step, so a run's batches never depend on parts
        pidx = rng.integers(len(pd.pool), size=r.painter_batch)
        batch = {"tasks": (wt, pt)}
        if "writer" in r.parts:
            # an edit is taught with its true source layout in the prefix, and the same items' reading as "read" rows
            prefixes = [(*wd.inputs(int(i), self.texts), wd.source_layout(int(i))) for i in widx]
            ids = wd.ids[widx]
            if wd.source_ids is not None:
                prefixes += [("read", x[1][:0], x[2], [], None) for x in prefixes]
                ids = np.concatenate([ids, wd.source_ids[widx]])
            batch.update(writer=prefixes, ids=torch.from_numpy(ids))
        if "painter" in r.parts:  # the plans are read only when the painter trains
            src = torch.from_numpy(pd.pool.source_tokens[pidx].astype(np.float32)) if pt == "v2v" else None
            batch.update(layouts=[pd.layout(int(i)) for i in pidx], plan=torch.from_numpy(pd.pool.plan[pidx].astype(np.float32)), source=src)
        return batch


def loss_fn(model: LayoutPlanner, batch: dict):
    loss, logs = 0.0, {}
    if "writer" in batch:
        w = model.writer
        ids = batch["ids"]
        ids = ids[:, : int((ids != PAD).sum(1).max())]
        ce = w.loss([w.prefix(*x) for x in batch["writer"]], ids)
        loss, logs["writer_ce"] = loss + ce, ce.detach()
    if "layouts" in batch:
        plan = batch["plan"]
        mse = F.mse_loss(model.painter(batch["layouts"], *plan.shape[1:4], batch["source"]), plan)
        loss, logs["painter_mse"] = loss + mse, mse.detach()
    return loss, logs


def init_weights(model: LayoutPlanner, directory: str | Path) -> None:
    """Copy every tensor of a saved layout planner whose name and shape match (a writer whose vocabulary changed
    starts afresh; the painter carries over)."""
    from core.weights_io import load_state_dict

    saved = load_state_dict(Path(directory) / "model.safetensors")
    own = model.state_dict()
    taken = {k: v for k, v in saved.items() if k in own and own[k].shape == v.shape}
    for k in ("writer.task.weight", "writer.kind.weight"):  # tables that gained rows (a task, a prefix kind) keep the old ones
        if k in saved and k not in taken and own[k].shape[1:] == saved[k].shape[1:] and len(saved[k]) < len(own[k]):
            taken[k] = torch.cat([saved[k], own[k][len(saved[k]):]])
    model.load_state_dict(taken, strict=False)
    logger.info("init from %s: %d tensors taken, %d fresh", directory, len(taken), len(own) - len(taken))


# ---------------------------------------------------------------------------- evaluation


def _direction(cells: list[int | None], n: int) -> str | None:
    """Dominant direction between the first and last cell the object is in (None: it barely moves)."""
    seen = [c for c in cells if c is not None]
    if len(seen) < 2:
        return None
    (y0, x0), (y1, x1) = divmod(seen[0], n), divmod(seen[-1], n)
    dx, dy = x1 - x0, y1 - y0
    if max(abs(dx), abs(dy)) < 0.1 * n:
        return None
    if abs(dx) >= abs(dy):
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


def named_count(task: str, pool: Pool, i: int) -> int:
    """How many of the layout's first objects the item's text names."""
    if task == "t2v":
        return len(pool.attributes[i]["objects"])
    if task == "r2v":
        return len(pool.records[i]["references"])
    return 0  # an edit names one object; the whole layout is graded instead


@torch.no_grad()
def evaluate(model: LayoutPlanner, data: dict[str, Data], texts: TextStates, n: int, seed: int = 0) -> dict:
    model.eval()
    out = {}
    for task, d in data.items():
        right = {k: [] for k in ("color", "shape", "size", "direction", "count")}
        cos = []
        for i in range(min(n, len(d.pool))):
            truth = d.layout(i)
            gen = torch.Generator().manual_seed(seed * 100_003 + i)
            ids, _ = model.write(*d.inputs(i, texts), gen, model.config.temperature)
            got = model.vocab.decode(ids)  # the sampler follows the grammar, so its layout always decodes
            k = named_count(task, d.pool, i) or len(truth.objects)
            right["count"].append(len(got.objects) == len(truth.objects))
            for j in range(min(k, len(truth.objects))):
                t_o = truth.objects[j]
                g_o = got.objects[j] if j < len(got.objects) else None
                for a in ("color", "shape", "size"):
                    right[a].append(g_o is not None and getattr(g_o, a) == getattr(t_o, a))
                td = _direction(t_o.cells, model.vocab.cells)
                if td is not None:
                    right["direction"].append(g_o is not None and _direction(g_o.cells, model.vocab.cells) == td)
            p = d.pool
            src = torch.from_numpy(p.source_tokens[i: i + 1].astype(np.float32)) if task == "v2v" else None
            painted = model.painter([truth], *p.plan.shape[1:4], src)[0]
            cos.append(float(F.cosine_similarity(painted, torch.from_numpy(p.plan[i].astype(np.float32)), dim=-1).mean()))
        out[task] = {**{f"{k}_right": round(float(np.mean(v)), 4) if v else None for k, v in right.items()},
                     "painter_cosine": round(float(np.mean(cos)), 4), "items": min(n, len(d.pool))}
    return out


# ---------------------------------------------------------------------------- script


def _how_trained(recipe: LayoutPlannerRecipe) -> str:
    if len(recipe.parts) == 2:
        how = (f"one loop, the two parts side by side (no shared weights): writer cross-entropy (teacher-forced, batch {recipe.batch}) "
               f"+ painter MSE (batch {recipe.painter_batch} items)")
    else:
        how = f"this run trained the {recipe.parts[0]} alone, the other part frozen as loaded"
    return how + (f", from `{recipe.init}` (every tensor whose shape matched)" if recipe.init else "")


def card(recipe: LayoutPlannerRecipe, ev: dict, out: Path) -> str:
    c, t = recipe.planner, recipe.train
    size_mb = (out / "model.safetensors").stat().st_size / 2**20 if (out / "model.safetensors").is_file() else 0.0
    params = ev.get("params", {})
    rows = "\n".join(f"| {task} | {m['items']} | {m['color_right']} | {m['shape_right']} | {m['size_right']} | {m['direction_right']} | "
                     f"{m['count_right']} | {m['painter_cosine']} |" for task, m in ev.get("test", {}).items())
    return f"""# layout-planner (builtin)

Bernini's builtin planner, second design (`planners/semantic/layout_planner.py`) [PROPOSED]: a layout writer
(prefix-LM transformer, {c.depth} layers, width {c.width}, {c.heads} heads; {params.get('writer', '?'):,} parameters) samples the
scene's layout tokens (background; per object colour, shape, size, motion and its cell on a {recipe.cells}x{recipe.cells} grid on
each of the {c.plan_frames} plan frames) from the prompt's MiniLM states, the source clip's and the references'
builtin-ViT tokens; a plan painter (convolutions, width {c.painter_width}; {params.get('painter', '?'):,} parameters) paints the plan
(builtin-ViT tokens, {c.plan_frames} x 8 x 8 x {c.vit_dim}) from the layout and, for an edit, the source's tokens.

## Data and training
- worldgen TRAIN split, {recipe.pool} items per task (t2v, edit as v2v, ref2v as r2v; levels 1-3 in turn), 16 frames 64x64;
  layouts read from worldgen's records (`training/bernini_layout.py`), plans = the shipped builtin ViT's tokens on the plan frames.
- {_how_trained(recipe)};
  {ev.get('steps')} of {t.steps} steps, AdamW lr {t.lr}, warmup {t.warmup} + cosine; {ev.get('train_minutes')} min, {ev.get('sec_per_step')} s/step
  on {t.threads} CPU thread(s). Weights {size_mb:.1f} MB. `make weights` runs the shipped recipe (Makefile).

## Measured (TEST split, first {recipe.test_items} items per task)
Sampled layouts (temperature {c.temperature}): the share of the objects the text names (t2v: the caption's, r2v: the
references'; v2v: every object of the target) whose colour / shape / size / direction (first to last cell) the
writer gets right, and of layouts with the right number of objects; the painter's cosine to the true plan token
at each place, painting the true layout.

| task | items | colour | shape | size | direction | object count | painter cosine |
|---|---|---|---|---|---|---|---|
{rows}

## What it can and cannot do
- Trained on worldgen prompts only; other words reach it through MiniLM and land on the nearest worldgen concept.
- A layout places each object by its centre on a {recipe.cells}x{recipe.cells} grid; the painter knows nothing of an
  object's pose (people) or a background's texture beyond its kind and tone.
{design_notes(out, "layout_planner")}"""


def final_eval(out: Path, recipe: LayoutPlannerRecipe, model: LayoutPlanner, texts: TextStates, extra: dict) -> dict:
    vocab = model.vocab
    test = {t: Data(p, "test", recipe.seed, vocab, model.config.read_source) for t, p in
            load_pools("test", recipe.seed, recipe.test_items, recipe.data, cache_dir=recipe.cache, workers=recipe.workers).items()}
    ev = {**extra, "params": layout_params(model), "test": evaluate(model, test, texts, recipe.test_items, recipe.seed)}
    write_json_atomic(out / "eval.json", ev)
    (out / "card.md").write_text(card(recipe, ev, out))
    logger.info("test: %s", json.dumps(ev["test"]))
    return ev


def _flags(ap) -> None:
    ap.add_argument("--parts", help="what to train: writer, painter or writer,painter (default both)")
    ap.add_argument("--init", metavar="DIR", help="start from a saved layout planner's weights (those whose shapes match)")
    ap.add_argument("--mix", help="the writer's and painter's task weights, t2v,v2v,r2v (default 0.34,0.33,0.33)")
    ap.add_argument("--read-source", action="store_true", help="write an edit's source layout first, then the edit's "
                    "(LayoutPlannerConfig.read_source) [PROPOSED]")


def main(argv=None) -> int:
    args = parse_script("python -m training.layout_planner", "Train the builtin Bernini layout planner (writer + painter) on worldgen.",
                        "outputs/train/layout_planner", argv, extra=_flags)
    out = check_run_dir(args.out, KIND, "layout planner")
    recipe = script_recipe(LayoutPlannerRecipe, out, args, tiny_recipe, KIND, "python -m training.layout_planner")
    if args.parts or args.init or args.read_source or args.mix:
        try:
            mix = tuple(float(x) for x in args.mix.split(",")) if args.mix else recipe.mix
        except ValueError:
            raise InputError("mix", args.mix, "give three weights, e.g. 0.2,0.6,0.2") from None
        recipe = replace(recipe, parts=tuple(args.parts.split(",")) if args.parts else recipe.parts, init=args.init or recipe.init, mix=mix,
                         planner=replace(recipe.planner, read_source=recipe.planner.read_source or args.read_source)).resolved()
        write_json_atomic(out / TRAIN_CONFIG, {"model": KIND, "recipe": LayoutPlannerRecipe.__name__,
                                               "provenance": "python -m training.layout_planner", **asdict(recipe)})
    torch.set_num_threads(recipe.train.threads or 1)
    texts = TextStates()
    if args.eval_only:
        final_eval(out, recipe, LayoutPlanner.from_pretrained(out), texts, earlier_run_facts(out))
        return 0
    t_start = time.perf_counter()
    vocab = layout_vocab(recipe.cells, recipe.data.plan_frames)
    recipe.planner.layout_vocab = vocab.to_dict()
    data = {t: Data(p, "train", recipe.seed, vocab, recipe.planner.read_source) for t, p in
            load_pools("train", recipe.seed, recipe.pool, recipe.data, cache_dir=recipe.cache, workers=recipe.workers).items()}
    val = {t: Data(p, "val", recipe.seed, vocab, recipe.planner.read_source) for t, p in
           load_pools("val", recipe.seed, recipe.val_items, recipe.data, cache_dir=recipe.cache, workers=recipe.workers).items()}
    texts.add([t for d in (*data.values(), *val.values()) for t in d.pool.text])
    logger.info("data ready in %.0f s", time.perf_counter() - t_start)
    torch.manual_seed(recipe.train.seed)
    model = LayoutPlanner(recipe.planner)
    if recipe.init and not (out / "run" / "checkpoint" / "state.pt").is_file():
        init_weights(model, recipe.init)
    for name in ("writer", "painter"):
        getattr(model, name).requires_grad_(name in recipe.parts)
    logger.info("parameters: %s; training %s", layout_params(model), ", ".join(recipe.parts))
    trainer = Trainer(model, loss_fn, recipe.train, out / "run", evaluate=lambda m: evaluate(m, val, texts, min(20, recipe.val_items), recipe.seed))
    if not args.no_resume:
        trainer.load_checkpoint()
    trainer.fit(Batches(data, texts, recipe, trainer.step), until=args.stop_at)
    return finish_run(trainer, out, recipe.train.steps, (time.perf_counter() - t_start) / 60,
                      lambda final, facts: final_eval(out, recipe, final, texts, facts))


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
