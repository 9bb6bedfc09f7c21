"""Train the built-in instance reasoner (planners/builtin/instances.py) on worldgen vrs clips.

Data: a pool of vrs TRAIN-split clips (levels 1-3 in turn). Each clip gives the reasoner two candidate
sets, both read on the ``selection_frames`` frames CLEAR shows its planner:

- **the tracker's**: exactly what the pipeline hands its planner: the proposer on the sampled frames,
  then the classic tracker (``ClearPipeline.sample_proposals`` / ``candidate_tracks``), labelled with the
  candidate whose track overlaps the true target most (IoU over those frames >= ``match_iou``; else the
  right answer is "none"): the reasoner learns a tracker's errors (merged, drifting, late tracks);
- **the ground truth's**: every object's true track (``world.render(t).ids == id``).

Every step draws a batch of candidate sets from the pool (the tracker's with probability
``p_tracker``), each with its candidates shuffled and random slot ids: the full set (label: the
target), the set without the target (label: none), the target alone, another candidate alone
(none), or a random subset. Labels follow the world: a set answers "the target" exactly when it
contains it, which is what the counterfactual checks ask (sufficiency: only i shown; necessity: i
removed). The pools are built once (two processes) and cached under ``cache`` (a tensors-only file,
read back with ``weights_only=True``).

``python -m training.instances --out DIR --steps N``; VAL forward choice on the tracker's sets during
training, TEST (the CLEAR benchmark's clips) at the end (``eval.json``, ``card.md``).
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from core.atomic import atomic_path, write_json_atomic
from planners.builtin.instances import (KIND, VIT_DIR, BuiltinInstanceReasoner, InstanceReasonerConfig, appearance, collate, subset_features,
                                        track_features)
from planners.counterfactual import Mark
from training.common import load_recipe, run_recipe, sec_per_step, training_parser
from training.loop import Trainer, TrainConfig
from worldgen.tasks import vrs
from worldgen.tasks.base import split_seed

logger = logging.getLogger(__name__)
TEST_SEED = 500  # benchmarks/clear.py's TEST clips: the reasoner is measured on the clips CLEAR is
PART = 250  # clips per saved part of a pool build


@dataclass
class InstanceRecipe:
    model: InstanceReasonerConfig = field(default_factory=InstanceReasonerConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=6000, lr=1e-3, warmup=200, eval_every=500, ckpt_every=250,
                                                                   log_every=50, threads=1, eval_at_end=False))
    pool: int = 4000  # TRAIN clips, each with the tracker's and the ground truth's candidate sets
    p_tracker: float = 0.7  # share of drawn sets that are the tracker's
    match_iou: float = 0.5  # a tracker candidate "is" the target from this IoU over the selection frames
    selection_frames: int = 16  # ClearConfig's default: the frames the planner sees
    # the user's path [PROPOSED, measured and not shipped: docs/history/user_path.md]: this share of TRAIN clips goes through
    # an H.264 yuv420p file at a CRF drawn from crf (inclusive), read back as `atelier segment` reads it; VAL and TEST clips
    # then all do, at the CRF `atelier worldgen` writes (18). 0: raw frames throughout, the shipped model's recipe
    through_file: float = 0.0
    crf: tuple[int, int] = (15, 28)
    batch: int = 32
    val_items: int = 200
    test_items: int = 200
    seed: int = 0
    workers: int = 2  # processes building the pools
    cache: str = "outputs/instances_pool"

    def resolved(self) -> InstanceRecipe:
        return self


# ---------------------------------------------------------------------------- items


def clip_of(split: str, seed: int, index: int):
    """(frames, per-object GT masks (K, T, H, W) of the objects ever visible, target index, record)."""
    sample = vrs.generate(split_seed(split, seed, index), vrs.Config(level=1 + index % 3))
    world = sample.worlds["video"]
    frames = [world.render(t) for t in range(len(world))]
    rgb, ids = np.stack([f.rgb for f in frames]), np.stack([f.ids for f in frames])
    rec = sample.record
    objs = [o.id for o in world.objects if (ids == o.id).any() or o.id == rec["target_id"]]
    return rgb, np.stack([ids == i for i in objs]), objs.index(rec["target_id"]), rec


class _NoPlanner:
    """The planner slot of the pipeline that only proposes and tracks here."""

    def select(self, frames, marks, query):
        raise RuntimeError("the candidate pipeline does not select")


_WORKER: dict = {}


def _worker_models(selection_frames: int):
    """The proposer + classic tracker pipeline CLEAR runs and the builtin ViT, once per process."""
    if "pipe" not in _WORKER:
        from pipelines.clear import ClearConfig, ClearPipeline
        from planners.builtin.vit import BuiltinViT
        from trackers import load_tracker
        from trackers.proposals import load_proposer

        torch.set_num_threads(1)
        pipe = ClearPipeline(ClearConfig(selection_frames=selection_frames), planner=_NoPlanner(), tracker=load_tracker("classic"),
                             proposer=load_proposer("classic"))
        pipe.set_progress_bar_config(disable=True)
        _WORKER["pipe"], _WORKER["vit"] = pipe, BuiltinViT.from_pretrained(VIT_DIR)
    return _WORKER["pipe"], _WORKER["vit"]


def tracker_candidates(pipe, video, query: str) -> tuple[np.ndarray, np.ndarray]:
    """What CLEAR hands its planner for ``video`` (frames or a file): the selection frames ``(k, H, W, 3)`` as the
    pipeline reads them and the candidate tracks on them ``(N, k, H, W)``."""
    from pipelines.clear.pipeline import concept_phrase

    pipe._phrase = concept_phrase(query)  # as __call__ sets it (a concept proposer reads it)
    source, _ = pipe.working_source(video)
    sub = pipe.selection_indices(len(source))
    frames = np.asarray(source.get_frames(sub))
    samples = pipe.sample_proposals(source)
    if not any(c for _, c in samples):
        return frames, np.zeros((0, len(sub), *frames.shape[1:3]), bool)
    _, _, _, tracks, _ = pipe.candidate_tracks(source, samples, None)
    return frames, tracks[:, sub]


def as_user_file(rgb: np.ndarray, crf: int, fps: float):
    """``rgb`` written as the H.264 file a user would hand over, in a scratch folder removed with the returned object."""
    import tempfile

    from core.video import write_video

    scratch = tempfile.TemporaryDirectory(prefix="atelier-instances-")
    return scratch, str(write_video(Path(scratch.name) / "clip.mp4", rgb, fps=fps, crf=crf))


def overlap(tracks: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """IoU over all frames at once of each track ``(N, T, H, W)`` with ``truth`` ``(T, H, W)``."""
    inter = (tracks & truth).sum((1, 2, 3))
    union = (tracks | truth).sum((1, 2, 3))
    return inter / np.maximum(union, 1)


def _feats(vit, frames: np.ndarray, masks: np.ndarray, target: int) -> dict:
    # numpy, not tensors: a worker's tensors travel by file descriptor and run out of them
    f = track_features(frames, masks)
    return {"own": f["own"].astype(np.float16), "pair": f["pair"].astype(np.float16), "summary": f["summary"],
            "appearance": appearance(vit, frames, masks).astype(np.float16), "target": int(target)}


def _to_tensors(item: dict) -> dict:
    """An item as ``torch.save`` stores it for a ``weights_only`` load (arrays as tensors)."""
    return {k: _to_tensors(v) if isinstance(v, dict) else torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in item.items()}


def codec_of(split: str, seed: int, index: int, through_file: float, crf: tuple[int, int]) -> int | None:
    """The CRF a clip is written at (None: handed over as frames), drawn from the clip's own seed: TRAIN clips
    go through a file with probability ``through_file`` at a CRF in ``crf``; VAL / TEST always, at 18."""
    if not through_file:
        return None
    if split != "train":
        return 18
    rng = np.random.default_rng([seed, 7, index])
    return int(rng.integers(crf[0], crf[1] + 1)) if rng.random() < through_file else None


def make_item(args: tuple) -> dict:
    split, seed, index, selection_frames, match_iou, crf = args
    pipe, vit = _worker_models(selection_frames)
    rgb, gt, target, rec = clip_of(split, seed, index)
    sub = pipe.selection_indices(len(rgb))
    if crf is None:
        frames, tracks = tracker_candidates(pipe, rgb, rec["query"])
    else:
        scratch, path = as_user_file(rgb, crf, float(rec["world"]["fps"]))
        with scratch:
            frames, tracks = tracker_candidates(pipe, path, rec["query"])
    iou = overlap(tracks, gt[target][sub]) if len(tracks) else np.zeros(0)
    label = int(iou.argmax()) if len(iou) and iou.max() >= match_iou else -1  # -1: the target was not proposed
    return {"tracker": _feats(vit, frames, tracks, label), "gt": _feats(vit, frames, gt[:, sub], target),
            "target_iou": float(iou.max()) if len(iou) else 0.0, "query": rec["query"], "kind": rec["query_struct"]["kind"],
            "hard": ",".join(rec.get("hard", [])), "level": int(rec["level"]), "index": int(index), "crf": -1 if crf is None else crf}


def build_pool(split: str, seed: int, n: int, recipe: InstanceRecipe, workers: int = 1) -> list[dict]:
    """``n`` clips' candidate sets (cached in ``recipe.cache``: built once, ~0.35 s a clip on one core)."""
    files = f"_file{recipe.through_file:g}_crf{recipe.crf[0]}-{recipe.crf[1]}" if recipe.through_file else ""
    path = Path(recipe.cache) / f"{split}_seed{seed}_n{n}_k{recipe.selection_frames}_iou{recipe.match_iou:g}{files}.pt"
    if path.is_file():
        return torch.load(path, weights_only=True)
    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    items: list[dict] = []
    for start in range(0, n, PART):  # saved part by part: an interrupted build resumes at its last part
        part = path.with_name(f"{path.stem}.part{start}.pt")
        if part.is_file():
            items += torch.load(part, weights_only=True)
            continue
        jobs = [(split, seed, i, recipe.selection_frames, recipe.match_iou, codec_of(split, seed, i, recipe.through_file, recipe.crf))
                for i in range(start, min(n, start + PART))]
        if workers > 1 and len(jobs) > 1:
            with mp.get_context("fork").Pool(workers) as pool:
                done = pool.map(make_item, jobs, chunksize=8)
        else:
            done = [make_item(j) for j in jobs]
        done = [_to_tensors(it) for it in done]
        with atomic_path(part) as tmp:
            torch.save(done, tmp)
        items += done
        logger.info("%s: %d of %d clips (%.0f s)", path.name, len(items), n, time.perf_counter() - t0)
    with atomic_path(path) as tmp:
        torch.save(items, tmp)
    for start in range(0, n, PART):
        path.with_name(f"{path.stem}.part{start}.pt").unlink(missing_ok=True)
    logger.info("built %s (%d clips) in %.0f s", path, n, time.perf_counter() - t0)
    return items


def feats_of(item: dict, variant: str) -> tuple[dict, int]:
    """A pool item's candidate set (``"tracker"`` or ``"gt"``) as numpy features, and its target (-1: none)."""
    v = item[variant]
    return {k: v[k].float().numpy() for k in ("own", "pair", "summary", "appearance")}, int(v["target"])


def draw_set(k: int, target: int, rng: np.random.Generator) -> tuple[list[int], int]:
    """A subset of ``k`` candidates (shuffled) and its label (0 = none, else 1 + position of the target;
    ``target`` -1: the set holds no target)."""
    others = [i for i in range(k) if i != target]
    r = rng.random()
    if target < 0 or not others:  # nothing to take away from: the full set, or any part of it
        keep = list(range(k)) if r < 0.6 or k == 1 else [i for i in range(k) if rng.random() < 0.6] or [int(rng.integers(k))]
    elif r < 0.4:
        keep = list(range(k))
    elif r < 0.6:
        keep = others
    elif r < 0.75:
        keep = [target]
    elif r < 0.85:
        keep = [int(rng.choice(others))]
    else:
        keep = [i for i in range(k) if rng.random() < 0.6] or [target]
    keep = [keep[i] for i in rng.permutation(len(keep))]
    return keep, (1 + keep.index(target)) if target in keep else 0


class Batches:
    """Step-seeded batches from the pool (resuming at step s gives exactly the batches from s on)."""

    def __init__(self, pool: list[dict], queries: dict, recipe: InstanceRecipe, step: int = 0):
        self.pool, self.queries, self.recipe, self.step = pool, queries, recipe, step

    def __next__(self) -> dict:
        r = self.recipe
        rng = np.random.default_rng([r.seed, 1, self.step])
        self.step += 1
        feats, qs, labels, slots = [], [], [], []
        for n in rng.integers(len(self.pool), size=r.batch):
            item = self.pool[int(n)]
            variant = "tracker" if rng.random() < r.p_tracker and len(item["tracker"]["own"]) else "gt"
            f, target = feats_of(item, variant)
            keep, label = draw_set(len(f["own"]), target, rng)
            feats.append(subset_features(f, keep))
            qs.append(self.queries[item["query"]])
            labels.append(label)
            slots.append(rng.permutation(r.model.max_candidates)[: len(keep)])
        out = collate(feats, qs, slots)
        out["label"] = torch.as_tensor(labels)
        return out


def loss_fn(model, batch):
    logits = model({k: v for k, v in batch.items() if k != "label"})
    loss = F.cross_entropy(logits, batch["label"])
    return loss, {"acc": (logits.argmax(-1) == batch["label"]).float().mean()}


# ---------------------------------------------------------------------------- evaluation


@torch.no_grad()
def predict(model, sets: list[dict], queries: list[torch.Tensor], bs: int = 64) -> list[np.ndarray]:
    out = []
    for s in range(0, len(sets), bs):
        b = collate(sets[s : s + bs], queries[s : s + bs])
        p = torch.softmax(model(b).float(), -1).numpy()
        out += [p[n, : 1 + len(f["own"])] for n, f in enumerate(sets[s : s + bs])]
    return out


def _summarise(d: dict) -> dict:
    return {k: {"acc": round(float(np.mean(v)), 4), "n": len(v)} for k, v in sorted(d.items())}


def evaluate_pool(model, pool: list[dict], queries: dict) -> dict:
    """Forward choice on the full sets, per variant: on the tracker's, a hit is the candidate that is the
    target (a clip whose target was never proposed counts as a miss; ``acc_proposed`` leaves those out);
    per query kind, hard-distractor kind and level; "none" accuracy with the target removed, and P(target)
    with the target alone (ground-truth sets)."""
    model.eval()
    qs = [queries[it["query"]] for it in pool]
    out = {}
    for variant in ("tracker", "gt"):
        sets = [feats_of(it, variant) for it in pool]
        probs = predict(model, [f for f, _ in sets], qs)
        hit = [int(t >= 0 and len(p) > 1 and int(np.argmax(p)) == 1 + t) for p, (_, t) in zip(probs, sets)]
        kinds, hards, levels = defaultdict(list), defaultdict(list), defaultdict(list)
        for h, it in zip(hit, pool):
            kinds[it["kind"]].append(h)
            levels[str(it["level"])].append(h)
            for tag in filter(None, it["hard"].split(",")):
                hards[tag].append(h)
        proposed = [h for h, (_, t) in zip(hit, sets) if t >= 0]
        out[variant] = {"acc": round(float(np.mean(hit)), 4), "n": len(hit), "acc_proposed": round(float(np.mean(proposed)), 4) if proposed else None,
                        "proposed": len(proposed), "per_kind": _summarise(kinds), "per_hard": _summarise(hards), "per_level": _summarise(levels),
                        "chance": round(float(np.mean([1 / max(1, len(f["own"])) for f, _ in sets])), 4)}
    gt = [feats_of(it, "gt") for it in pool]
    rem = [(subset_features(f, [i for i in range(len(f["own"])) if i != t]), q) for (f, t), q in zip(gt, qs) if len(f["own"]) > 1]
    p_rem = predict(model, [r[0] for r in rem], [r[1] for r in rem])
    p_alone = predict(model, [subset_features(f, [t]) for f, t in gt], qs)
    out["gt"] |= {"none_acc_target_removed": round(float(np.mean([np.argmax(p) == 0 for p in p_rem])), 4), "n_removed": len(p_rem),
                  "p_target_alone": round(float(np.mean([p[1] for p in p_alone])), 4)}
    out["acc"] = out["tracker"]["acc"]  # what the run's VAL curve follows
    return out


def evaluate_select(model, pool: list[dict], n: int) -> dict:
    """``select()``'s rule (forward + checks) on the first ``n`` tracker sets: accuracy, ambiguous rate."""
    hits, amb = [], []
    for it in pool[:n]:
        f, t = feats_of(it, "tracker")
        if not len(f["own"]):
            hits.append(0)
            amb.append(False)
            continue
        sel = model.choose(f, list(range(1, len(f["own"]) + 1)), it["query"])
        hits.append(int(t >= 0 and sel.number == t + 1))
        amb.append(bool(sel.ambiguous))
    return {"acc": round(float(np.mean(hits)), 4), "ambiguous": round(float(np.mean(amb)), 4), "n": len(hits)}


# ---------------------------------------------------------------------------- the run


def _table(rows: dict) -> str:
    return "\n".join(f"| {k} | {v['acc']:.3f} | {v['n']} |" for k, v in rows.items())


def card(recipe: InstanceRecipe, ev: dict, minutes: float, sps: float | None, size_mb: float) -> str:
    t, g, sel = ev["test"]["tracker"], ev["test"]["gt"], ev.get("select", {})
    raw = ev.get("test_raw_frames", ev["test"])["tracker"]
    files = (f"- The user's path: {recipe.through_file:.0%} of the TRAIN clips are written as H.264 yuv420p files at a CRF drawn from "
             f"{recipe.crf[0]}-{recipe.crf[1]}\n  and read back as `atelier segment` reads them (colour upsampled along the luma, "
             "`core.chroma`), the rest handed over as\n  frames; VAL and TEST clips are files at CRF 18, as `atelier worldgen` writes them.\n"
             if recipe.through_file else "")
    where = "as H.264 files at CRF 18" if recipe.through_file else "as raw frames"
    kinds = "\n".join(f"| {k} | {v['acc']:.3f} | {g['per_kind'].get(k, {}).get('acc', float('nan')):.3f} | {v['n']} |"
                      for k, v in t["per_kind"].items())
    hards = "\n".join(f"| {k} | {v['acc']:.3f} | {g['per_hard'].get(k, {}).get('acc', float('nan')):.3f} | {v['n']} |"
                      for k, v in t["per_hard"].items())
    return f"""# builtin-instance-reasoner

Chooses which of K candidate tracks a free-language temporal query refers to (CLEAR's builtin
backend, `planners/builtin/instances.py`), with counterfactual checks on the candidate set. It reads
each candidate's track, its clip summary beside the set's extremes, pairwise contact, and its
appearance in MiniLM space (the builtin ViT over the candidate alone), matched against the query's
MiniLM tokens by {recipe.model.match_heads} attention heads [PROPOSED]. It stands in for the paper's
training-free VLM selector (the hf path: `--planner` with a Qwen-VL checkpoint), which it is not.

## Data and training
- worldgen vrs TRAIN split, {recipe.pool} clips (64x64, 48 frames, levels 1-3 in turn), each read on the
  {recipe.selection_frames} frames CLEAR shows its planner, twice: the candidate tracks CLEAR's proposer and
  classic tracker give (`ClearPipeline.sample_proposals` / `candidate_tracks`, exactly as the pipeline runs
  them), labelled with the one overlapping the target at IoU >= {recipe.match_iou} (else "none"), drawn
  {recipe.p_tracker:.0%} of the time; and the objects' ground-truth tracks. Candidate sets drawn per step
  (full, target removed -> none, target alone, another alone -> none, random subsets).
{files}- {ev['steps']} steps, batch {recipe.batch}, AdamW lr {recipe.train.lr}, cosine; {minutes:.1f} min on 2 shared CPU
  cores ({sps} s/step; building the pools included). Weights {size_mb:.1f} MB.
- `python -m training.instances --out DIR` (`make weights` runs it).

## Measured (TEST: the {t['n']} clips of `benchmarks/clear.py`, {where})
- **Forward choice on the classic tracker's candidates: {t['acc']:.3f}** (the target was among them in
  {t['proposed']} clips; on those {t['acc_proposed']}); chance (1/K) {t['chance']:.3f}.{f" The same clips handed over as raw frames: {raw['acc']:.3f} (target among the candidates in {raw['proposed']})." if recipe.through_file else ""}
- On ground-truth tracks: {g['acc']:.3f}; "none" with the target removed {g['none_acc_target_removed']:.3f};
  mean P(target) shown alone {g['p_target_alone']:.3f}.
- `select()`'s rule with the counterfactual checks on the tracker's candidates: {sel.get('acc')}, ambiguous
  {sel.get('ambiguous')} (n={sel.get('n')}).
- VAL ({ev['val']['tracker']['n']} clips) forward choice on the tracker's candidates: {ev['val']['tracker']['acc']:.3f}.

| query kind | tracker's candidates | ground truth | n |
|---|---|---|---|
{kinds}

| hard distractor present | tracker's candidates | ground truth | n |
|---|---|---|---|
{hards}

## What it can and cannot do
- It knows worldgen's eight query kinds, its colours and shapes; real videos, real trackers' errors beyond
  the classic tracker's, and other phrasings of relations than worldgen's are outside what it has seen.
- Clips of another length are read on the same number of frames (time is normalised).
"""


def final_eval(out: Path, recipe: InstanceRecipe, model, text, queries: dict, train_min: float, sps: float | None, steps: int) -> dict:
    """``eval.json`` and ``card.md``: VAL and TEST pools (TEST: the CLEAR benchmark's clips)."""
    val = build_pool("val", recipe.seed, recipe.val_items, recipe, recipe.workers)
    test = build_pool("test", TEST_SEED, recipe.test_items, recipe, recipe.workers)
    raw = build_pool("test", TEST_SEED, recipe.test_items, replace(recipe, through_file=0.0), recipe.workers) if recipe.through_file else test
    new = sorted({it["query"] for it in val + test + raw} - set(queries))
    queries.update(zip(new, (q.float() for q in text.tokens(new))))
    torch.set_num_threads(1)
    model._text_encoder = text
    ev = {"steps": steps, "train_minutes": round(train_min, 2), "sec_per_step": sps, "val": evaluate_pool(model, val, queries),
          "test": evaluate_pool(model, test, queries), "test_raw_frames": evaluate_pool(model, raw, queries),
          "select": evaluate_select(model, test, recipe.test_items)}
    write_json_atomic(out / "eval.json", ev)
    size_mb = (out / "model.safetensors").stat().st_size / 2**20
    (out / "card.md").write_text(card(recipe, ev, train_min, sps, size_mb))
    logger.info("test: %s", json.dumps(ev["test"]["tracker"]))
    return ev


def main(argv=None) -> int:
    ap = training_parser("python -m training.instances", "Train the built-in instance reasoner on worldgen vrs.", "outputs/train/instances")
    ap.add_argument("--stop-at", type=int, help="pause after this step (resume later with the same --out)")
    ap.add_argument("--through-file", type=float, help="share of TRAIN clips written as H.264 and read back as `atelier segment` "
                                                       "reads them (VAL / TEST then files at CRF 18); default 0, the shipped recipe")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recipe = None
    if args.tiny:
        recipe = InstanceRecipe(model=InstanceReasonerConfig(width=32, depth=1, heads=2, own_width=16, pair_width=16),
                                train=replace(InstanceRecipe().train, steps=2, warmup=1, eval_every=1000, ckpt_every=1000, log_every=1),
                                pool=4, batch=4, val_items=2, test_items=2, workers=1, cache=str(out / "pools"))
    recipe = run_recipe(InstanceRecipe, out, recipe, not args.no_resume and load_recipe(InstanceRecipe, out) is not None,
                        pool=args.pool, batch=args.batch)
    if args.steps:
        recipe = replace(recipe, train=replace(recipe.train, steps=args.steps))
    if args.through_file is not None:
        recipe = replace(recipe, through_file=args.through_file)
    write_json_atomic(out / "train_config.json", {"kind": KIND, "recipe": type(recipe).__name__, "provenance": "python -m training.instances", **asdict(recipe)})
    from planners.builtin.text import MiniLM

    if args.eval_only:
        hist = json.loads((out / "run" / "history.json").read_text())["history"]
        old = json.loads((out / "eval.json").read_text()) if (out / "eval.json").is_file() else {}
        model = BuiltinInstanceReasoner.from_pretrained(out)
        final_eval(out, recipe, model, MiniLM(), {}, old.get("train_minutes", 0.0), sec_per_step(hist), old.get("steps", recipe.train.steps))
        return 0
    t_start = time.perf_counter()
    pool = build_pool("train", recipe.seed, recipe.pool, recipe, recipe.workers)
    val = build_pool("val", recipe.seed, recipe.val_items, recipe, recipe.workers)
    logger.info("pools ready in %.0f s", time.perf_counter() - t_start)
    torch.set_num_threads(recipe.train.threads or 1)
    text = MiniLM()
    texts = sorted({it["query"] for it in pool + val})
    queries = dict(zip(texts, (q.float() for q in text.tokens(texts))))
    torch.manual_seed(recipe.train.seed)
    model = BuiltinInstanceReasoner(recipe.model)
    trainer = Trainer(model, loss_fn, recipe.train, out / "run", evaluate=lambda m: evaluate_pool(m, val, queries))
    if not args.no_resume:
        trainer.load_checkpoint()
    trainer.fit(Batches(pool, queries, recipe, trainer.step), until=args.stop_at)
    if trainer.step < recipe.train.steps:
        logger.info("paused at step %d of %d", trainer.step, recipe.train.steps)
        return 0
    final = trainer.eval_model().eval()
    final.save_pretrained(out, {"steps": trainer.step})
    final_eval(out, recipe, final, text, queries, (time.perf_counter() - t_start) / 60, sec_per_step(trainer.history), trainer.step)
    return 0


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
