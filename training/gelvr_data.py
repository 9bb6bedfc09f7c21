"""GeLVR's data: worldgen ``spatial`` questions with the builtin reasoner's frozen image features, cached, and
the slot targets of spec B.1 / B.2.

``SpatialSet(split, n, start=0)`` generates items ``start..start+n-1`` of a split (levels 1, 2, 3 in turn),
computes each image's frozen multi-scale cell features once and keeps them in memory as float16 (256 x 479 per
image, ~245 KB); ``cache=PATH`` stores them on disk in chunks of ``CHUNK`` items (safetensors + a JSON of the records), so the
benchmark's variants and the RL stage read the same arrays and ``python -m training.gelvr_data --shard i/n`` fills
one cache from several processes.

Slot targets, from the record's ``evidence_box`` and where its anchor and target sit [PROPOSED, selectable]:
- ``"roi"`` (LVR: the ROI's own visual tokens): the K image tokens nearest K evenly spaced points on the
  segment from the anchor's centre to the target's, so s_1 sits on the anchor and s_K on the answer;
- ``"chunks"`` (Mirage: chunk means): the image tokens whose cells lie in the evidence box, in raster order,
  split into K contiguous chunks, each chunk's mean;
- ``"chain"`` (the default): the steps of the search, each computable from the ones before and the question: the
  anchor (the mean of its cells), the relation's region beyond it (the mean of the cells in the band), the target
  object (its cells' mean), the target's centre cell; K slots spread over these four stages in order. The
  straight ``"roi"`` path asks the middle slots for cells whose place depends on where the target is, which a
  slot cannot know before it has found it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from core.arguments import StrictParser
from core.atomic import atomic_path, write_json_atomic
from core.weights_io import load_state_dict, save_state_dict

logger = logging.getLogger(__name__)
TARGETS = ("chain", "roi", "chunks")
SIZE = 512  # worldgen spatial's canvas


@dataclass
class Item:
    question: str
    options: list[str]
    answer: str
    level: int
    box: tuple[float, float, float, float]  # evidence box, xyxy pixels of the 512 canvas
    path: tuple[float, float, float, float]  # anchor centre -> target centre (x0, y0, x1, y1)
    target_size: str  # the asked object's size word
    relation: str = "right of"
    radii: tuple[float, float] = (0.0, 0.0)  # anchor's and target's radii (pixels)
    image_size: int = SIZE


def record_item(record: dict) -> Item:
    objs = {o["id"]: o for o in record["objects"]}
    a, t = objs[record["anchor_id"]], objs[record["target_id"]]
    return Item(record["question"], list(record["options"]), record["answer"], int(record["level"]), tuple(record["evidence_box"]),
                (a["x"], a["y"], t["x"], t["y"]), t["size"], record.get("relation", "right of"), (a["r"], t["r"]))


def cell_centres(grid: int, size: float = SIZE) -> np.ndarray:
    """``(grid*grid, 2)`` (x, y) of each cell's centre, raster order."""
    c = (np.arange(grid) + 0.5) * size / grid
    ys, xs = np.meshgrid(c, c, indexing="ij")
    return np.stack([xs.ravel(), ys.ravel()], -1)


def _nearest(xy: np.ndarray, point) -> int:
    return int(np.argmin(np.hypot(xy[:, 0] - point[0], xy[:, 1] - point[1])))


def box_cells(box, grid: int, size: float = SIZE, xy: np.ndarray | None = None) -> np.ndarray:
    """Indices of the tokens (the grid's cells, or the tokens centred at ``xy``) whose centres lie in ``box``; at
    least the one nearest the box's centre."""
    xy = cell_centres(grid, size) if xy is None else xy
    x0, y0, x1, y1 = box
    inside = np.nonzero((xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1))[0]
    return inside if len(inside) else np.array([_nearest(xy, ((x0 + x1) / 2, (y0 + y1) / 2))])


def disc_cells(x: float, y: float, r: float, xy: np.ndarray) -> np.ndarray:
    """Tokens whose centres lie within ``r`` of (x, y); at least the nearest."""
    inside = np.nonzero(np.hypot(xy[:, 0] - x, xy[:, 1] - y) <= r)[0]
    return inside if len(inside) else np.array([_nearest(xy, (x, y))])


def region_cells(item: Item, xy: np.ndarray) -> np.ndarray:
    """Tokens whose centres lie in the relation's region beyond the anchor (worldgen spatial's rule)."""
    from worldgen.tasks.spatial import in_region

    x0, y0 = item.path[:2]
    anchor = {"x": x0, "y": y0, "r": item.radii[0]}
    inside = [i for i, (x, y) in enumerate(xy) if in_region(anchor, {"x": x, "y": y}, item.relation, item.image_size)]
    return np.array(inside) if inside else np.array([_nearest(xy, item.path[2:])])


def target_groups(item: Item, k: int, grid: int, kind: str = "chain", xy: np.ndarray | None = None) -> list[np.ndarray]:
    """Per slot, the image-token indices whose mean is its target. The tokens are the grid's cells, or (object
    tokens) the real tokens centred at ``xy`` ``(N, 2)`` pixels."""
    xy = cell_centres(grid, item.image_size) if xy is None else xy
    if kind == "chain":
        (ax, ay, tx, ty), (ar, tr) = item.path, item.radii
        stages = [disc_cells(ax, ay, ar, xy), region_cells(item, xy), disc_cells(tx, ty, tr, xy), np.array([_nearest(xy, (tx, ty))])]
        picks = np.round(np.linspace(0, 3, k)).astype(int) if k > 1 else np.array([3])
        return [stages[i] for i in picks]
    if kind == "roi":
        x0, y0, x1, y1 = item.path
        ts = np.linspace(0, 1, k) if k > 1 else np.ones(1)
        return [np.array([_nearest(xy, (x0 + t * (x1 - x0), y0 + t * (y1 - y0)))]) for t in ts]
    if kind == "chunks":
        cells = box_cells(item.box, grid, item.image_size, xy)
        if len(cells) < k:
            cells = np.resize(cells, k)
        return list(np.array_split(cells, k))
    raise ValueError(f"targets {kind!r}: choose one of {TARGETS}")


def token_layout(model, features: torch.Tensor, items: list[Item]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per item, its real image tokens' centres ``(N_i, 2)`` and boxes ``(N_i, 4)`` in the item's pixels (real
    tokens come first: object padding is at the end)."""
    centres, boxes, valid = model.token_geometry(features)
    xy, bx = [], []
    for c, b, v, it in zip(centres, boxes, valid, items):
        xy.append(c[v].double().cpu().numpy() * it.image_size)
        bx.append(b[v].double().cpu().numpy() * it.image_size)
    return xy, bx


def slot_targets(image_tokens: torch.Tensor, items: list[Item], k: int, grid: int, kind: str = "chain",
                 centres: list[np.ndarray] | None = None) -> torch.Tensor:
    """``(B, K, d)``: the slot targets read from the (detached) image tokens ``(B, N, d)``; ``centres`` per item
    (``token_layout``) for object tokens, None for the grid's cells."""
    rows = []
    for b, (toks, it) in enumerate(zip(image_tokens, items)):
        xy = None if centres is None else centres[b]
        rows.append(torch.stack([toks[torch.as_tensor(g)].mean(0) for g in target_groups(it, k, grid, kind, xy)]))
    return torch.stack(rows).detach()


CHUNK = 1000  # items per cache file: chunks are built independently, so processes can fill one cache in parallel


class SpatialSet:
    """Items of a split with cached frozen features: ``features`` ``(n, N, F)`` float16, ``questions`` (MiniLM token
    states, a list), ``options`` ``(n, O, 384)``, ``items``."""

    def __init__(self, split: str, n: int, model, text, seed: int = 0, cache: str | Path | None = None, start: int = 0):
        if start % CHUNK:
            raise ValueError(f"start={start}: a split's items are cached in chunks of {CHUNK}; start at a multiple of it")
        self.split, self.n = split, int(n)
        folder = cache_folder(cache, model) if cache else None
        feats, self.records = [], []
        for c in range(start, start + self.n, CHUNK):
            f, r = cached_chunk(split, seed, c, min(start + self.n, c + CHUNK), model, folder)
            feats.append(f)
            self.records += r
        self.features = torch.cat(feats)
        self._finish(text)

    def _finish(self, text) -> None:
        self.items = [record_item(r) for r in self.records]
        self.questions = text.tokens([it.question for it in self.items])
        self.options = torch.stack([text.encode(it.options) for it in self.items])

    def __len__(self) -> int:
        return self.n


def cache_folder(cache: str | Path, model) -> Path:
    """Where a split's cached features live: ``cache`` itself for cell tokens, ``cache_<kind>`` for other kinds."""
    path = Path(cache)
    tokens = getattr(model.config, "image_tokens", "cells")
    return path if tokens == "cells" else path.with_name(f"{path.name}_{tokens}")


def cached_chunk(split: str, seed: int, start: int, stop: int, model, folder: Path | None) -> tuple[torch.Tensor, list[dict]]:
    """Items ``start..stop-1`` of a split (``start`` a multiple of ``CHUNK``): their features and records, read from
    the chunk's cache file when it holds them, else generated (and cached when ``folder`` is given)."""
    from worldgen.tasks import spatial
    from worldgen.tasks.base import split_seed

    name = folder / f"chunk_{start:06d}" if folder is not None else None
    if name is not None and name.with_suffix(".json").is_file():
        meta = json.loads(name.with_suffix(".json").read_text())
        if meta["split"] == split and meta["seed"] == seed and meta["stop"] >= stop:
            return load_state_dict(name.with_suffix(".safetensors"))["features"][: stop - start], meta["records"][: stop - start]
    from tqdm.auto import tqdm

    feats, records = [], []
    for i in tqdm(range(start, stop), desc=f"{split} images {start}-{stop - 1}", mininterval=5):
        s = spatial.generate(split_seed(split, seed, i), spatial.Config(level=1 + i % 3))
        feats.append(model.features(s.images["image"])[0].half().cpu())
        records.append({k: s.record[k] for k in ("question", "options", "answer", "answer_index", "level", "evidence_box",
                                                 "anchor_id", "target_id", "objects", "relation", "seed")})
    features = torch.stack(feats)
    if name is not None:
        name.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(name.with_suffix(".safetensors")) as tmp:
            save_state_dict({"features": features}, tmp)
        write_json_atomic(name.with_suffix(".json"), {"split": split, "seed": seed, "start": start, "stop": stop, "records": records})
    return features, records


def main(argv=None) -> int:
    """Fill a split's feature cache, one process per ``--shard i/n`` (chunk c goes to shard c % n)."""
    import argparse

    ap = StrictParser(prog="python -m training.gelvr_data", description=main.__doc__)
    ap.add_argument("--split", default="train", choices=("train", "val", "test"))
    ap.add_argument("--items", type=int, required=True)
    ap.add_argument("--image-tokens", choices=("cells", "objects"), default="objects")
    ap.add_argument("--shard", default="0/1", help="i/n: build the chunks c with c %% n == i")
    ap.add_argument("--cache", default="outputs/gelvr")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.items < 1:
        ap.error(f"--items {args.items}: give how many items of the split to cache (1 or more)")
    i, _, n = args.shard.partition("/")
    if not (i.isdigit() and n.isdigit() and int(i) < int(n)):
        ap.error(f"--shard {args.shard!r}: write i/n with 0 <= i < n, e.g. 0/2")
    i, n = int(i), int(n)
    from planners.builtin import load_builtin_vlm
    from planners.latent_builtin import BuiltinLatentReasoner, ReasonerConfig

    model = BuiltinLatentReasoner.from_vlm(load_builtin_vlm().model, ReasonerConfig(image_tokens=args.image_tokens))
    folder = cache_folder(Path(args.cache) / args.split, model)
    for c, start in enumerate(range(0, args.items, CHUNK)):
        if c % n == i:
            cached_chunk(args.split, 0, start, min(args.items, start + CHUNK), model, folder)
    return 0


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))


def object_attribute_targets(features: torch.Tensor, records: list[dict]) -> torch.Tensor:
    """``(n, N, 3)`` each object token's worldgen object as class ids (shape, size, colour: the columns of
    ``planners.object_attributes.GROUPS``), -100 where the token's centre is not within half a radius of any
    object's (padding, or a region spanning two objects). ``features`` are object-token features (their last
    ``GEOMETRY`` columns: valid, centre, box, as fractions of the side)."""
    from planners.latent_builtin import GEOMETRY
    from worldgen.vocab import COLOR_NAMES, SHAPES, SIZE_NAMES

    geo = features[..., -GEOMETRY:].float()
    out = torch.full((*features.shape[:2], 3), -100, dtype=torch.long)
    for i, r in enumerate(records):
        objs = r["objects"]
        xy = torch.tensor([[o["x"], o["y"]] for o in objs]) / SIZE
        radius = torch.tensor([o["r"] for o in objs]) / SIZE
        dist, j = torch.cdist(geo[i, :, 1:3], xy).min(1)
        hit = (geo[i, :, 0] > 0.5) & (dist < 0.5 * radius[j])
        for k in torch.nonzero(hit)[:, 0].tolist():
            o = objs[int(j[k])]
            out[i, k] = torch.tensor([SHAPES.index(o["shape"]), SIZE_NAMES.index(o["size"]), COLOR_NAMES.index(o["color"])])
    return out
