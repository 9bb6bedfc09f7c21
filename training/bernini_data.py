"""Bernini's training data: worldgen t2v / edit / ref2v clips with their plan targets, built once and cached.

    pool = load_pool("t2v", "train", seed=0, count=2000)      # outputs/bernini_data/t2v_train_seed0_n2000_...npz
    ex = pool.example(3)   # {"task", "frames", "text", "plan", "source", "refs", "attributes", ...}

Every example is a 16-frame 64x64 clip (``DataConfig``) of one task:

- ``t2v``: worldgen ``t2v`` (caption -> clip);
- ``v2v``: worldgen ``edit`` (source clip + instruction -> target clip; exactly one thing differs);
- ``r2v``: worldgen ``ref2v`` (1-5 reference images of single objects + prompt -> clip).

Levels cycle 1, 2, 3 with the item index. Item ``i`` of a split uses the world seed
``worldgen.tasks.base.split_seed(split, seed + TASK_SEED_OFFSETS[task], i)``, so train, val and test never
share a world, and the three tasks do not draw the same scenes at the same index (worldgen's scene
sampler would otherwise start every task's item ``i`` from one scene).

**The plan target** is what the Bernini planner predicts and the builtin renderer decodes: the shipped
builtin ViT's patch tokens (``BuiltinViT.forward``'s second output, after its final LayerNorm) of the
target clip on ``plan_frames`` frames, ``(T', 8, 8, 192)`` for 64x64 (patch 8, width 192), computed
under ``torch.no_grad``. ``T' = 4`` (frames 0, 5, 10, 15 of 16, ``renderers.builtin.plan_frame_indices``):
256 tokens keep the planner's target block near Bernini's own size (N = 300 for 81 frames at 480p)
while holding the first and last frames, which decide the direction of a motion; between plan frames
worldgen motion is smooth for 5 frames, which the renderer's temporal attention interpolates.

For the planner, examples also carry the same ViT's tokens of the inputs: the source clip on the plan
frames (``source_tokens``, v2v) and each reference image (``ref_tokens``, r2v). ``attributes`` is the
caption record of the *target* clip for every task (worldgen's ``caption`` of the target world; for
t2v exactly its own record), which ``scorers.generation.judge_against`` grades a rendering against.

Pools are saved as ``.npz`` (no pickles) under ``cache_dir``, keyed by task, split, seed, count, the
clip geometry and a hash of the ViT weights, so each is built once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.atomic import atomic_path
from core.errors import InputError
from renderers.builtin import plan_frame_indices
from worldgen.captions import caption
from worldgen.tasks import edit, ref2v, t2v
from worldgen.tasks.base import split_seed

logger = logging.getLogger(__name__)

TASKS = ("t2v", "v2v", "r2v")
GENERATORS = {"t2v": t2v, "v2v": edit, "r2v": ref2v}
DEFAULT_CACHE = Path("outputs") / "bernini_data"
VIT_DIR = Path(__file__).resolve().parents[1] / "weights" / "builtin" / "vit"
MAX_REFERENCES = 5
TASK_SEED_OFFSETS = {"t2v": 0, "v2v": 300_000_000, "r2v": 600_000_000}  # seed + index stays < 10**9 per split


@dataclass(frozen=True)
class DataConfig:
    """The clip geometry of every example."""

    num_frames: int = 16
    size: int = 64
    plan_frames: int = 4

    @property
    def plan_indices(self) -> list[int]:
        return plan_frame_indices(self.num_frames, self.plan_frames)


def render(world: Any) -> np.ndarray:
    """All frames of a worldgen world, uint8 ``(T, H, W, 3)``."""
    return np.stack([world.render(t, annotations=False).rgb for t in range(world.num_frames)])


def _check_task(task: str) -> str:
    if task not in TASKS:
        raise InputError("task", task, f"choose one of {TASKS}")
    return task


def world_sample(task: str, split: str, seed: int, index: int, cfg: DataConfig = DataConfig()):
    """The worldgen sample of item ``index`` (level ``1 + index % 3``)."""
    mod = GENERATORS[_check_task(task)]
    world_seed = split_seed(split, seed + TASK_SEED_OFFSETS[task], index)
    return mod.generate(world_seed, mod.Config(size=cfg.size, num_frames=cfg.num_frames, level=1 + index % 3))


def make_item(args: tuple) -> dict:
    """One example without ViT tokens (those are computed batched in the parent process)."""
    task, split, seed, index, cfg = args
    sample = world_sample(task, split, seed, index, cfg)
    rec = sample.record
    item: dict[str, Any] = {"index": index, "world_seed": int(sample.seed), "level": int(rec["level"]), "source": None, "refs": None}
    if task == "t2v":
        world = sample.worlds["video"]
        item.update(text=rec["caption"], attributes=rec["attributes"], record={"caption": rec["caption"]})
    elif task == "v2v":
        world = sample.worlds["target"]
        item["source"] = render(sample.worlds["source"])
        _, attrs = caption(world, np.random.default_rng([int(sample.seed), 9]))
        item.update(text=rec["instruction"], attributes=attrs, record={"instruction": rec["instruction"], "edit": rec["edit"]})
    else:
        world = sample.worlds["video"]
        item["refs"] = np.stack([sample.images[f"ref_{j + 1}"] for j in range(len(rec["references"]))])
        _, attrs = caption(world, np.random.default_rng([int(sample.seed), 9]))
        item.update(text=rec["prompt"], attributes=attrs, record={"prompt": rec["prompt"], "references": rec["references"]})
    item["frames"] = render(world)
    return item


def edit_region(split: str, seed: int, index: int, cfg: DataConfig = DataConfig()) -> np.ndarray | None:
    """Where v2v item ``index`` may change pixels: the edited object's masks in source and target,
    ``(T, H, W)`` bool; None when the edit is the background (everything may change)."""
    sample = world_sample("v2v", split, seed, index, cfg)
    obj = sample.record["edit"]["object_id"]
    if obj is None:
        return None
    src, tgt = sample.worlds["source"], sample.worlds["target"]
    return np.stack([(src.render(t).ids == obj) | (tgt.render(t).ids == obj) for t in range(cfg.num_frames)])


# ---------------------------------------------------------------------------- ViT tokens


def load_vit(directory: str | Path | None = None, device: str | torch.device = "cpu"):
    """The builtin ViT (the shipped one unless ``directory`` is given), frozen, in eval mode; loaded once."""
    return _load_vit(str(Path(directory or VIT_DIR).resolve()), str(device))


@lru_cache(maxsize=2)
def _load_vit(directory: str, device: str):
    from planners.builtin.vit import BuiltinViT

    return BuiltinViT.from_pretrained(directory, device=device).requires_grad_(False)


@torch.no_grad()
def vit_tokens(vit: Any, frames: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Patch tokens of uint8 frames ``(N, H, W, 3)`` -> float16 ``(N, H/8, W/8, width)``."""
    n, h, w = frames.shape[:3]
    p = vit.config.patch
    out = [vit(vit.preprocess(frames[i : i + batch_size]))[1].float().cpu() for i in range(0, n, batch_size)]
    return torch.cat(out).reshape(n, h // p, w // p, -1).numpy().astype(np.float16)


def weights_hash(folder: Path, name: str = "model.safetensors") -> str:
    """A short hash of the weights file ``name`` in ``folder``: what cached data derived from them is keyed by."""
    h = hashlib.blake2b(digest_size=4)
    with open(Path(folder) / name, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------- pools


class Pool:
    """The examples of one task and split, as stacked arrays (see the module docstring)."""

    def __init__(self, task: str, arrays: dict[str, np.ndarray], cfg: DataConfig):
        self.task, self.cfg = task, cfg
        self.frames = arrays["frames"]  # (n, F, H, W, 3) uint8
        self.plan = arrays["plan"]  # (n, T', h, w, D) float16
        self.text = [str(t) for t in arrays["text"]]
        self.index, self.world_seed, self.level = arrays["index"], arrays["world_seed"], arrays["level"]
        self.attributes = [json.loads(str(a)) for a in arrays["attributes"]]
        self.records = [json.loads(str(r)) for r in arrays["record"]]
        self.source = arrays.get("source")  # v2v: (n, F, H, W, 3)
        self.source_tokens = arrays.get("source_tokens")  # v2v: (n, T', h, w, D)
        self.refs = arrays.get("refs")  # r2v: (n, 5, H, W, 3), padded
        self.ref_tokens = arrays.get("ref_tokens")  # r2v: (n, 5, h, w, D), padded
        self.n_refs = arrays.get("n_refs")  # r2v: (n,)

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def plan_indices(self) -> list[int]:
        return self.cfg.plan_indices

    def references(self, i: int) -> list[np.ndarray]:
        """The reference images of example ``i`` (r2v), in prompt order."""
        return [] if self.refs is None else list(self.refs[i, : int(self.n_refs[i])])

    def sources(self, i: int) -> list[np.ndarray]:
        """What the renderer takes as ``sources`` for example ``i``: the source clip (v2v) or the references (r2v)."""
        return [self.source[i]] if self.source is not None else self.references(i)

    def example(self, i: int) -> dict:
        out = {"task": self.task, "index": int(self.index[i]), "world_seed": int(self.world_seed[i]), "level": int(self.level[i]),
               "frames": self.frames[i], "text": self.text[i], "plan": self.plan[i], "plan_indices": self.plan_indices,
               "attributes": self.attributes[i], "record": self.records[i], "source": None, "source_tokens": None,
               "refs": None, "ref_tokens": None}
        if self.source is not None:
            out["source"], out["source_tokens"] = self.source[i], self.source_tokens[i]
        if self.refs is not None:
            k = int(self.n_refs[i])
            out["refs"], out["ref_tokens"] = self.refs[i, :k], self.ref_tokens[i, :k]
        return out


def pool_path(task: str, split: str, seed: int, count: int, cfg: DataConfig, cache_dir: str | Path, vit_hash: str) -> Path:
    name = f"{task}_{split}_seed{seed}_n{count}_f{cfg.num_frames}_s{cfg.size}_p{cfg.plan_frames}_vit{vit_hash}.npz"
    return Path(cache_dir) / name


def build_arrays(task: str, split: str, seed: int, count: int, cfg: DataConfig, vit: Any, workers: int = 1) -> dict[str, np.ndarray]:
    """Generate ``count`` items (``workers`` processes), then their ViT tokens, as the arrays a ``Pool`` holds."""
    jobs = [(task, split, seed, i, cfg) for i in range(count)]
    if workers > 1 and count > 1:
        with mp.get_context("fork").Pool(workers) as pool:
            items = pool.map(make_item, jobs, chunksize=16)
    else:
        items = [make_item(j) for j in jobs]
    frames = np.stack([it["frames"] for it in items])
    idx = cfg.plan_indices
    arrays = {"frames": frames, "plan": vit_tokens(vit, frames[:, idx].reshape(-1, *frames.shape[2:])).reshape(count, len(idx), *_grid(vit, cfg)),
              "text": np.array([it["text"] for it in items]), "index": np.array([it["index"] for it in items], np.int64),
              "world_seed": np.array([it["world_seed"] for it in items], np.int64), "level": np.array([it["level"] for it in items], np.int64),
              "attributes": np.array([json.dumps(it["attributes"]) for it in items]), "record": np.array([json.dumps(it["record"]) for it in items])}
    if task == "v2v":
        src = np.stack([it["source"] for it in items])
        arrays["source"] = src
        arrays["source_tokens"] = vit_tokens(vit, src[:, idx].reshape(-1, *src.shape[2:])).reshape(count, len(idx), *_grid(vit, cfg))
    if task == "r2v":
        n_refs = np.array([len(it["refs"]) for it in items], np.int64)
        refs = np.zeros((count, MAX_REFERENCES, cfg.size, cfg.size, 3), np.uint8)
        for i, it in enumerate(items):
            refs[i, : len(it["refs"])] = it["refs"]
        tokens = np.zeros((count, MAX_REFERENCES, *_grid(vit, cfg)), np.float16)
        flat = np.concatenate([it["refs"] for it in items])
        flat_tokens = vit_tokens(vit, flat)
        starts = np.concatenate([[0], np.cumsum(n_refs)])
        for i in range(count):
            tokens[i, : n_refs[i]] = flat_tokens[starts[i] : starts[i + 1]]
        arrays.update(refs=refs, ref_tokens=tokens, n_refs=n_refs)
    return arrays


def _grid(vit: Any, cfg: DataConfig) -> tuple[int, int, int]:
    g = cfg.size // vit.config.patch
    return g, g, vit.config.width


def load_pool(task: str, split: str, seed: int, count: int, cfg: DataConfig = DataConfig(), *,
              cache_dir: str | Path = DEFAULT_CACHE, vit_dir: str | Path | None = None, workers: int = 1, vit: Any = None) -> Pool:
    """The cached pool of ``count`` items of ``task`` on ``split``; built (and saved) on first use."""
    _check_task(task)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InputError("count", count, "use a positive number of examples")
    vit_dir = Path(vit_dir) if vit_dir is not None else VIT_DIR
    path = pool_path(task, split, seed, count, cfg, cache_dir, weights_hash(vit_dir))
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            return Pool(task, {k: z[k] for k in z.files}, cfg)
    t0 = time.perf_counter()
    arrays = build_arrays(task, split, seed, count, cfg, vit if vit is not None else load_vit(vit_dir), workers)
    with atomic_path(path) as tmp:
        np.savez_compressed(tmp, **arrays)
    logger.info("built %s (%d %s items) in %.0f s", path, count, task, time.perf_counter() - t0)
    return Pool(task, arrays, cfg)


def load_pools(split: str, seed: int, count: int, cfg: DataConfig = DataConfig(), tasks: tuple[str, ...] = TASKS, **kw) -> dict[str, Pool]:
    """``load_pool`` for every task."""
    return {t: load_pool(t, split, seed, count, cfg, **kw) for t in tasks}
