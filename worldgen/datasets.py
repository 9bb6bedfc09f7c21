"""Streaming torch datasets: generate task items on the fly, so training needs no files.

``WorldgenDataset("vrs", n=10_000, split="train")`` yields dicts with the item's ``record`` and,
for each clip, ``<name>_frames`` ``(T, H, W, 3)`` uint8 and ``<name>_ids`` ``(T, H, W)`` uint8 numpy
arrays (plus ``<name>_keypoints`` ``(T, P, 17, 3)`` when people are present), and stills by name.
Items are sharded across DataLoader workers by index (worker k takes items k, k + W, ...), so
every item is produced exactly once and the order is the same for any worker count when sorted.
Use ``collate_fn=lambda x: x`` (records are dicts of varying shape).
"""

from __future__ import annotations

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from worldgen import tasks
from worldgen.tasks.base import split_seed


def render_arrays(world, max_frames: int | None = None) -> dict:
    """Render a clip (uniformly subsampled to ``max_frames`` if given) into arrays."""
    idx = np.arange(world.num_frames)
    if max_frames is not None and world.num_frames > max_frames:
        idx = ((np.arange(max_frames) + 0.5) * world.num_frames / max_frames).astype(int)
    frames = [world.render(int(t)) for t in idx]
    out = {"frames": np.stack([f.rgb for f in frames]), "ids": np.stack([f.ids for f in frames]), "frame_indices": idx}
    people = sorted({k for f in frames for k in f.keypoints})
    if people:
        out["keypoints"] = np.stack([np.stack([f.keypoints.get(p, np.zeros((17, 3), np.float32)) for p in people]) for f in frames])
    return out


class WorldgenDataset(IterableDataset):
    """Items ``0..n-1`` of a task's split, generated lazily; ``render=False`` yields records only."""

    def __init__(self, task: str, n: int, seed: int = 0, split: str = "train", config=None, render: bool = True, max_frames: int | None = 64):
        self.module = tasks.get(task)
        self.task, self.n, self.seed, self.split = task, int(n), int(seed), split
        self.config = config or self.module.Config()
        self.render, self.max_frames = render, max_frames
        split_seed(split, seed, max(n - 1, 0))  # validate the seed range up front

    def __len__(self) -> int:
        return self.n

    def item(self, i: int) -> dict:
        sample = self.module.generate(split_seed(self.split, self.seed, i), self.config)
        out = {"index": i, "seed": sample.seed, "record": sample.record}
        if self.render:
            for name, world in sample.worlds.items():
                for k, v in render_arrays(world, self.max_frames).items():
                    out[f"{name}_{k}"] = v
            out.update(sample.images)
        return out

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(wid, self.n, nw):
            yield self.item(i)

