"""Warm starts fitted before the main loop: the object-level attribute detector (then frozen) and the motion path."""

from __future__ import annotations

import logging

import numpy as np
import torch
import torch.nn.functional as F

from core.frames import resize_frames
from planners.builtin.text import MiniLM
from planners.builtin.vlm import BuiltinVLMModel, frames_to_tensor
from training.vlm.data import CAPTION_PROMPT, caption_example, trajectory_examples
from worldgen.tasks import longqa
from worldgen.vocab import COLOR_NAMES, SHAPES

logger = logging.getLogger(__name__)


def patch_attribute_labels(world, frame, size: int, min_cover: float = 0.15) -> np.ndarray:
    """``(P, 2)`` int64 (colour, shape) index of the object covering most of each ViT patch of ``frame``
    shown at ``size`` (-1, -1 where objects cover less than ``min_cover`` of the patch), from the
    renderer's instance map."""
    side = 8 * world.width // size  # a patch's side in rendered pixels
    g = world.width // side
    ids = frame.ids.reshape(g, side, g, side).transpose(0, 2, 1, 3).reshape(g * g, -1)
    out = np.full((g * g, 2), -1, np.int64)
    for p, row in enumerate(ids):
        cover = np.bincount(row, minlength=256)
        cover[0] = 0
        i = int(cover.argmax())
        if cover[i] >= min_cover * side * side:
            o = world.obj(i)
            out[p] = COLOR_NAMES.index(o.color), SHAPES.index(o.shape)
    return out


def attribute_phrases() -> list[tuple[str, int, int]]:
    """(text, colour index, shape index) for the phrases longqa's questions, options and count probes
    use; index ``len(COLOR_NAMES)`` / ``len(SHAPES)`` = names no colour / shape."""
    nc, ns = len(COLOR_NAMES), len(SHAPES)
    out = [(c, i, ns) for i, c in enumerate(COLOR_NAMES)] + [(s, nc, j) for j, s in enumerate(SHAPES)]
    out += [(f"the {c} {s}", i, j) for i, c in enumerate(COLOR_NAMES) for j, s in enumerate(SHAPES)]
    out += [(str(k), nc, ns) for k in range(21)]
    out += [(f"What shape was the {c} object that briefly appeared?", i, ns) for i, c in enumerate(COLOR_NAMES)]
    out += [(f"How many {s}s appear in the video?", nc, j) for j, s in enumerate(SHAPES)]
    out += [(q, nc, ns) for q in ("Which of these appears first?", "Which colour never appears?",
                                  "Which colour is on screen for the longest time?", CAPTION_PROMPT)]
    return out


def warm_start_attributes(model: BuiltinVLMModel, text: MiniLM, seed: int, worlds: int = 400, frames: int = 8, steps: int = 4000) -> dict:
    """Fit the object-level attribute detector, then freeze it: the patch head on ViT tokens of
    rendered longqa frames at 64x64 and 32x32 against the instance map's per-patch colour and shape,
    and the text head on ``attribute_phrases``' sentence embeddings (which are also what the model's
    ``question_emb`` computes from a question's token states, and MiniLM is frozen, so this is exact)."""
    logger.info("attribute warm start: rendering %d x %d longqa frames", worlds, frames)
    rng = np.random.default_rng([seed, 54321])
    dev = model.device
    toks, labels = [], []
    for s in rng.integers(2**31, size=worlds):
        world = longqa.generate(int(s), longqa.Config(level=int(rng.integers(1, 4)))).worlds["video"]
        shown = [world.render(int(t)) for t in rng.integers(0, world.num_frames, frames)]
        for size in (64, 32):
            rgb = resize_frames(np.stack([f.rgb for f in shown]), (size, size), "area")
            with torch.no_grad():
                patches, _ = model.vision(frames_to_tensor(rgb, dev))
            toks.append(patches.flatten(0, 2))
            labels.append(torch.from_numpy(np.concatenate([patch_attribute_labels(world, f, size) for f in shown])))
    x, y = torch.cat(toks), torch.cat(labels).to(dev)
    phrases = attribute_phrases()
    emb = text.encode([t for t, _, _ in phrases]).to(dev)
    t_col = torch.tensor([p[1] for p in phrases], device=dev)
    t_shp = torch.tensor([p[2] for p in phrases], device=dev)
    nc = model.config.colors
    heads = [*model.attributes.parameters(), *model.text_attributes.parameters()]
    for p in heads:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(heads, 2e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        i = torch.randint(0, len(x), (512,), generator=g)
        out, (col, shp) = model.attributes(x[i]), y[i].T
        obj = col >= 0
        loss = F.binary_cross_entropy_with_logits(out[:, 0], obj.float())
        if obj.any():
            loss = loss + F.cross_entropy(out[obj, 1 : 1 + nc], col[obj]) + F.cross_entropy(out[obj, 1 + nc :], shp[obj])
        t = model.text_attributes(emb)
        loss = loss + F.cross_entropy(t[:, : nc + 1], t_col) + F.cross_entropy(t[:, nc + 1 :], t_shp)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    for p in heads:
        p.requires_grad_(False)
        p.grad = None
    with torch.no_grad():
        out = model.attributes(x)
        obj = y[:, 0] >= 0
        t = model.text_attributes(emb)
        stats = {"patches": len(x), "object_acc": float(((out[:, 0] > 0) == obj).float().mean()),
                 "colour_acc": float((out[obj, 1 : 1 + nc].argmax(-1) == y[obj, 0]).float().mean()),
                 "shape_acc": float((out[obj, 1 + nc :].argmax(-1) == y[obj, 1]).float().mean()),
                 "text_acc": float(((t[:, : nc + 1].argmax(-1) == t_col) & (t[:, nc + 1 :].argmax(-1) == t_shp)).float().mean())}
    logger.info("attribute warm start (training patches): %s", {k: round(v, 4) for k, v in stats.items()})
    return stats


def warm_start_motion(model: BuiltinVLMModel, seed: int, clips: int = 300, steps: int = 600, trajectories: int = 4000) -> dict:
    """Fit the motion path before the main loop: the position head on rendered caption clips' ViT
    tokens (it reads the frozen ViT, so its inputs do not drift later), then the trajectory MLP and
    motion head on unrendered trajectories. Left to the main loop alone (a lower learning rate, ~3
    caption clips per step), the motion head stays near chance and the caption decoder trains
    against an uninformative motion token (card: "Design notes and measurements")."""
    rng = np.random.default_rng([seed, 12345])
    dev = model.device
    ex = [caption_example(int(s)) for s in rng.integers(2**31, size=clips)]
    with torch.no_grad():
        patches = torch.cat([model.vision(frames_to_tensor(e["frames"], dev))[0] for e in ex])
    centre = torch.from_numpy(np.concatenate([e["centre"] for e in ex])).to(dev)
    heads = [*model.objectness.parameters(), *model.where_offset.parameters()]
    opt = torch.optim.AdamW(heads, 3e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        i = torch.randint(0, len(patches), (256,), generator=g)
        loss = (model.salient_position(patches[i]) - centre[i]).square().sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    pos_rmse = float(loss.detach().sqrt())
    data = trajectory_examples(int(rng.integers(2**31)), trajectories)
    traj, motions = torch.from_numpy(data["trajectories"]).to(dev), torch.from_numpy(data["motions"]).to(dev)
    opt = torch.optim.AdamW([*model.trajectory.parameters(), *model.motion_head.parameters()], 2e-3)
    for _ in range(3 * steps):
        i = torch.randint(0, len(traj), (128,), generator=g)
        jitter = 0.02 * torch.randn(traj[i].shape, generator=g).to(dev)
        loss = F.cross_entropy(model.motion_head(model.motion_embedding(traj[i] + jitter)), motions[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = {"position_rmse": round(pos_rmse, 4), "motion_loss": round(float(loss.detach()), 4)}
    logger.info("motion warm start: %s", out)
    return out
