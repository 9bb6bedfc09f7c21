"""The builtin Bernini planner, second design: decide the scene first, then paint its plan (issue 51) [PROPOSED].
The builtin planner of t2v and r2v (weights/builtin/layout_planner, through ``planners.semantic.by_task``); edits keep
the token planner, which reads a source better (docs/history/bernini.md, "The layout planner for t2v and r2v").
``load_planner`` loads any folder whose config.json names it.

    planner = LayoutPlanner.from_pretrained("weights/builtin/layout_planner")
    out = planner.plan(PlanRequest(prompt_embeds=minilm_states), grid=(4, 8, 8), generator=gen)
    out.cot_text     # "background: checker, tone dark green; 1. red star, medium, linear: (12, 7) -> ... "
    out.tokens       # (T', h, w, 192): the plan in builtin-ViT space, what the builtin renderer decodes

Two parts, trained apart (``training/layout_planner.py``):

- ``LayoutWriter``: what a caption leaves open (where each object starts, how it moves, the background) is a
  handful of discrete choices; MaskGIT over 256 continuous plan tokens did not coordinate them at this size
  (docs/history/bernini.md). The writer samples them first, autoregressively, as the layout tokens of
  ``layout_tokens`` (the planner's chain of thought, spec b.9), from the prompt's MiniLM token states, the source
  clip's ViT tokens (v2v) and the references' (r2v), under the layout grammar; trained by cross-entropy,
  teacher-forced from worldgen's records.
- ``PlanPainter``: given the layout the plan is nearly determined, so it is painted by a deterministic network:
  each object's embedding splatted on a fine grid at its cell on each plan frame, over the background's, then
  convolutions down to the plan's token grid (beside the source clip's tokens for an edit, so what the edit does
  not touch can be copied); trained by regression on the true ViT tokens. This replaces the flow head for the
  builtin model (the spec's head samples what is still open; here nothing is).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import InputError
from core.weights_io import load_state_dict, save_state_dict
from planners.semantic.layout_tokens import BOS, EOS, PAD, LayoutVocab, SceneLayout

MODEL_NAME = "layout-planner"
FORMAT_VERSION = 1
# "read": the writer's own task of writing an edit's source layout from the source's tokens (``read_source``)
TASK_IDS = {"t2v": 0, "v2v": 1, "r2v": 2, "read": 3}
# tasks the builtin pipeline may ask for, read as the one the writer was trained on
TASK_ALIASES = {"t2i": "t2v", "i2v": "v2v", "rv2v": "v2v"}
_POS = 8  # learned place embeddings per axis; larger grids share them by scaled index


@dataclass
class LayoutPlannerConfig:
    layout_vocab: dict = field(default_factory=dict)
    # sized for one CPU thread: about a second a training step at the recipe's batches
    width: int = 128
    depth: int = 4
    heads: int = 4
    text_dim: int = 384
    vit_dim: int = 192
    plan_frames: int = 4
    max_refs: int = 5
    painter_fine: int = 64  # channels on the fine grid (twice the plan grid's side), where objects are splatted
    painter_width: int = 128  # channels on the plan grid
    painter_depth: int = 3
    temperature: float = 1.0
    # [PROPOSED] an edit's layout is written in two passes: the source's layout read from its tokens (task "read",
    # greedy), then the target's with that layout in the prefix, so that what the edit keeps is copied from text the
    # writer wrote rather than re-read from 256 ViT tokens (one pass read 40% of v2v colours right, docs/history)
    read_source: bool = False

    # what the Bernini pipeline reads from a planner's config
    @property
    def text_embed_dim(self) -> int:
        return self.text_dim

    @property
    def token_dim(self) -> int:
        return self.vit_dim

    @property
    def cot(self) -> bool:
        return True

    @property
    def planning_steps(self) -> int:
        return LayoutVocab.from_dict(self.layout_vocab).max_length - 1


def _scaled(n: int, base: int = _POS) -> torch.Tensor:
    return torch.div(torch.arange(n) * base, n, rounding_mode="floor")


class _Places(nn.Module):
    """Learned embeddings of (frame, row, column), shared by grids of any size."""

    def __init__(self, frames: int, width: int):
        super().__init__()
        self.frame, self.row, self.col = nn.Embedding(frames, width), nn.Embedding(_POS, width), nn.Embedding(_POS, width)

    def forward(self, t: int, h: int, w: int) -> torch.Tensor:
        dev = self.row.weight.device
        ft = torch.clamp(torch.arange(t, device=dev), max=self.frame.num_embeddings - 1)
        return (self.frame(ft)[:, None, None] + self.row(_scaled(h).to(dev))[None, :, None] + self.col(_scaled(w).to(dev))[None, None, :])


class LayoutWriter(nn.Module):
    """A transformer decoder: the layout tokens, causally, cross-attending to [task | text | sources]. The prefix is
    read as it comes (MiniLM's and the ViT's states are contextual already): its keys and values are a projection
    away, so a 256-token source clip costs a few percent of what self-attention over it would."""

    def __init__(self, c: LayoutPlannerConfig, vocab: LayoutVocab):
        super().__init__()
        self.vocab, W = vocab, c.width
        self.task = nn.Embedding(len(TASK_IDS), W)
        self.text = nn.Linear(c.text_dim, W)
        self.visual = nn.Linear(c.vit_dim, W)
        self.places = _Places(c.plan_frames, W)
        self.ref_index = nn.Embedding(c.max_refs, W)
        self.kind = nn.Embedding(4, W)  # text, source clip, reference, the source's layout (read_source)
        self.memory_norm = nn.LayerNorm(W)
        self.tok = nn.Embedding(vocab.size_total, W)
        self.pos = nn.Embedding(vocab.max_length, W)
        layer = nn.TransformerDecoderLayer(W, c.heads, 4 * W, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerDecoder(layer, c.depth)
        self.norm = nn.LayerNorm(W)
        self.head = nn.Linear(W, vocab.size_total)
        allowed = torch.zeros(vocab.max_length, vocab.size_total, dtype=torch.bool)
        for p in range(vocab.max_length):
            a, b, eos = vocab.allowed(p)
            allowed[p, a:b] = True
            allowed[p, EOS] |= eos
        self.register_buffer("allowed", allowed, persistent=False)  # allowed[p]: what token p may be

    def prefix(self, task: str, text: torch.Tensor, source: torch.Tensor | None, refs: list[torch.Tensor],
               source_layout: list[int] | None = None) -> torch.Tensor:
        """One item's prefix ``(P, W)``: text ``(L, text_dim)``, source ``(T', h, w, D)``, refs ``[(1, h, w, D)]``,
        and an edit's source layout ids (``read_source``), embedded as the writer's own tokens."""
        dev = self.text.weight.device
        W = self.text.out_features
        parts = [self.task.weight[TASK_IDS[task]][None], self.text(text.to(dev).float()) + self.kind.weight[0]]
        if source is not None:
            t, h, w, _ = source.shape
            parts.append((self.visual(source.to(dev).float()) + self.places(t, h, w) + self.kind.weight[1]).reshape(-1, W))
        for k, r in enumerate(refs[: self.ref_index.num_embeddings]):
            # a reference shows one centred object: its 2x2-pooled tokens are enough
            g = F.avg_pool2d(r.to(dev).float()[0].permute(2, 0, 1), 2).permute(1, 2, 0)
            e = self.visual(g) + self.places(1, *g.shape[:2])[0] + self.ref_index.weight[k] + self.kind.weight[2]
            parts.append(e.reshape(-1, W))
        if source_layout is not None:
            ids = torch.as_tensor(list(source_layout)[: self.pos.num_embeddings], device=dev)
            parts.append(self.tok(ids) + self.pos.weight[: len(ids)] + self.kind.weight[3])
        return torch.cat(parts)

    def forward(self, prefixes: list[torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, L, V)`` over the next token at each of the ``L`` layout positions given, grammar-masked."""
        B, L = ids.shape
        dev = ids.device
        P = max(len(p) for p in prefixes)
        memory = torch.zeros(B, P, self.text.out_features, device=dev)
        pad = torch.ones(B, P, dtype=torch.bool, device=dev)
        for i, p in enumerate(prefixes):
            memory[i, : len(p)] = p
            pad[i, : len(p)] = False
        x = self.tok(ids) + self.pos.weight[:L]
        causal = torch.triu(torch.ones(L, L, dtype=torch.bool, device=dev), 1)
        h = self.blocks(x, self.memory_norm(memory), tgt_mask=causal, tgt_key_padding_mask=ids == PAD, memory_key_padding_mask=pad)
        logits = self.head(self.norm(h))
        nxt = self.allowed[1 : L + 1] if L < self.vocab.max_length else torch.cat([self.allowed[1:], self.allowed[-1:]])
        return logits.masked_fill(~nxt[None], -1e4)

    def loss(self, prefixes: list[torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
        logits = self(prefixes, ids[:, :-1])
        target = ids[:, 1:]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=PAD)

    @torch.no_grad()
    def sample(self, prefix: torch.Tensor, generator: torch.Generator | None = None, temperature: float = 1.0,
               callback=None) -> list[int]:
        ids = [BOS]
        dev = prefix.device
        for step in range(self.vocab.max_length - 1):
            logits = self([prefix], torch.tensor([ids], device=dev))[0, -1]
            if temperature <= 0:
                nxt = int(logits.argmax())
            else:
                probs = torch.softmax(logits.float() / temperature, -1).cpu()
                nxt = int(torch.multinomial(probs, 1, generator=generator))
            ids.append(nxt)
            if callback is not None:
                callback(step, {"layout_ids": list(ids)})
            if nxt == EOS:
                break
        return ids


class _Block(nn.Module):
    def __init__(self, w: int):
        super().__init__()
        self.norm = nn.GroupNorm(8, w)
        self.conv1, self.conv2 = nn.Conv2d(w, w, 3, padding=1), nn.Conv2d(w, w, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.gelu(self.conv1(F.gelu(self.norm(x)))))


class PlanPainter(nn.Module):
    """Layout -> plan tokens, one plan frame at a time (see the module docstring)."""

    def __init__(self, c: LayoutPlannerConfig, vocab: LayoutVocab):
        super().__init__()
        self.vocab, Wf, W = vocab, c.painter_fine, c.painter_width
        self.fields = nn.ModuleDict({f: nn.Embedding(len(getattr(vocab, f)), Wf)
                                     for f in ("bg_kind", "bg_tone", "color", "shape", "size", "motion")})
        self.slot = nn.Embedding(vocab.max_objects, Wf)
        self.fine = nn.Sequential(nn.Conv2d(Wf, Wf, 3, padding=1), _Block(Wf))
        self.down = nn.Conv2d(Wf, W, 2, stride=2)
        self.source = nn.Conv2d(c.vit_dim, W, 1)
        self.no_source = nn.Parameter(torch.zeros(W))
        self.coarse = nn.Sequential(*[_Block(W) for _ in range(c.painter_depth)])
        self.out = nn.Sequential(nn.GroupNorm(8, W), nn.Conv2d(W, c.vit_dim, 1))
        self.out_norm = nn.LayerNorm(c.vit_dim)

    def canvas(self, layout: SceneLayout, t: int, h: int, w: int) -> torch.Tensor:
        """``(t, W, 2h, 2w)``: the background everywhere, each object's embedding at its cell on each frame."""
        v, f = self.vocab, self.fields
        dev = self.slot.weight.device

        def emb(name: str, value: str) -> torch.Tensor:
            return f[name].weight[getattr(v, name).index(value)]

        x = (emb("bg_kind", layout.bg_kind) + emb("bg_tone", layout.bg_tone))[None, :, None, None].repeat(t, 1, 2 * h, 2 * w)
        for k, o in enumerate(layout.objects[: v.max_objects]):
            e = emb("color", o.color) + emb("shape", o.shape) + emb("size", o.size) + emb("motion", o.motion) + self.slot.weight[k]
            for j, cell in enumerate(o.cells[:t]):
                if cell is None:
                    continue
                cy, cx = divmod(cell, v.cells)
                x[j, :, cy * 2 * h // v.cells, cx * 2 * w // v.cells] += e
        return x.to(dev)

    def forward(self, layouts: list[SceneLayout], t: int, h: int, w: int, sources: torch.Tensor | None = None) -> torch.Tensor:
        """Plan tokens ``(B, t, h, w, D)``; ``sources`` ``(B, t, h, w, D)`` (an edit's source clip) or None."""
        x = torch.cat([self.canvas(lay, t, h, w) for lay in layouts])  # (B*t, W, 2h, 2w)
        x = self.down(self.fine(x))
        if sources is None:
            x = x + self.no_source[None, :, None, None]
        else:
            s = sources.to(x.device).float().reshape(-1, h, w, sources.shape[-1]).permute(0, 3, 1, 2)
            x = x + self.source(s)
        y = self.out(self.coarse(x)).permute(0, 2, 3, 1)
        return self.out_norm(y).reshape(len(layouts), t, h, w, -1)


@dataclass
class LayoutPlanOutput:
    """What ``SemanticPlanner.plan`` returns, for the pipeline: ``tokens``, ``order``, ``reveal_counts``, ``cot_text``."""

    tokens: torch.Tensor
    order: torch.Tensor
    reveal_counts: list[int]
    cot_text: str | None = None
    contexts: Any = None
    codes: Any = None
    layout: SceneLayout | None = None


class LayoutPlanner(nn.Module):
    """The writer and the painter, saved together (``config.json`` names the model and holds the vocabulary)."""

    def __init__(self, config: LayoutPlannerConfig):
        super().__init__()
        if not config.layout_vocab:
            raise InputError("layout_vocab", None, "a layout planner needs its vocabulary (training writes it)")
        self.config = config
        self.vocab = LayoutVocab.from_dict(config.layout_vocab)
        self.writer = LayoutWriter(config, self.vocab)
        self.painter = PlanPainter(config, self.vocab)

    @property
    def device(self) -> torch.device:
        return self.writer.head.weight.device

    @staticmethod
    def task_of(task: str) -> str:
        task = TASK_ALIASES.get(task, task)
        if task not in TASK_IDS:
            raise InputError("task", task, f"the builtin layout planner plans {sorted(TASK_IDS)} (and {sorted(TASK_ALIASES)} as those)")
        return task

    def read(self, request: Any) -> tuple[str, torch.Tensor, torch.Tensor | None, list[torch.Tensor]]:
        """(task, text states, source clip tokens or None, reference tokens) of a ``PlanRequest``."""
        if request.prompt_embeds is None:
            raise InputError("prompt_embeds", None, "the builtin layout planner reads the prompt's MiniLM states: pass encoder='builtin'")
        task = self.task_of(request.task)
        videos = [s.tokens for s in request.sources if s.kind == "video"]
        images = [s.tokens for s in request.sources if s.kind == "image"]
        source = videos[0] if videos else (images[0] if task == "v2v" and images else None)
        refs = images if task == "r2v" else []
        return task, request.prompt_embeds, source, refs

    @torch.no_grad()
    def plan(self, request: Any, grid: tuple[int, int, int] | None = None, generator: Any = None, callback=None,
             temperature: float | None = None, **_: Any) -> LayoutPlanOutput:
        """Write a layout, then paint the plan on ``grid`` (T', h, w). Settings of the MaskGIT planner (steps,
        guidance) do not apply and are ignored."""
        from planners.semantic.planner import _generator

        task, text, source, refs = self.read(request)
        t, h, w = grid or (self.config.plan_frames, 8, 8)
        gen = _generator(generator)
        temp = self.config.temperature if temperature is None else temperature
        ids, read = self.write(task, text, source, refs, gen, temp, callback)
        layout = self.vocab.decode(ids)
        cot = layout.text(self.vocab.cells)
        if read is not None:
            cot = f"source: {self.vocab.decode(read).text(self.vocab.cells)} | edit: {cot}"
        src = None
        if source is not None and task == "v2v":
            src = _fit_source(source, t, h, w)[None]
        tokens = self.painter([layout], t, h, w, src)[0].cpu()
        n = t * h * w
        return LayoutPlanOutput(tokens=tokens, order=torch.arange(n), reveal_counts=[n], cot_text=cot, layout=layout)

    def write(self, task: str, text: torch.Tensor, source: torch.Tensor | None, refs: list[torch.Tensor], generator: Any = None,
              temperature: float = 1.0, callback=None) -> tuple[list[int], list[int] | None]:
        """The layout ids the writer samples for one request, and (an edit with ``read_source``) the source layout it
        read first (greedily: reading is perception, not a choice), else None."""
        read = None
        if task == "v2v" and self.config.read_source and source is not None:
            read = self.writer.sample(self.writer.prefix("read", text[:0], source, []), None, 0.0)
        return self.writer.sample(self.writer.prefix(task, text, source, refs, read), generator, temperature, callback), read

    # ---- saving
    def save_pretrained(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps({"model": MODEL_NAME, "format_version": FORMAT_VERSION,
                                                            "config": asdict(self.config)}, indent=1))
        save_state_dict(self.state_dict(), directory / "model.safetensors")
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None, **_: Any) -> LayoutPlanner:
        directory = Path(directory)
        try:
            raw = json.loads((directory / "config.json").read_text())
        except (OSError, ValueError) as e:
            raise InputError("planner", str(directory), f"no readable config.json ({e})") from None
        if raw.get("model") != MODEL_NAME:
            raise InputError("planner", str(directory), f"config.json names {raw.get('model')!r}, not {MODEL_NAME!r}")
        model = cls(LayoutPlannerConfig(**raw["config"]))
        state = load_state_dict(directory / "model.safetensors")
        own = model.state_dict()
        for name in ("writer.task.weight", "writer.kind.weight"):  # a folder from before the "read" task had one row fewer
            old = state.get(name)
            if old is not None and len(old) == len(own[name]) - 1 and not model.config.read_source:
                state[name] = torch.cat([old, own[name][len(old):]])  # the new row, never used without read_source
        model.load_state_dict(state)
        model.eval().requires_grad_(False)
        if device is not None:
            model.to(device)
        return model


def _fit_source(tokens: torch.Tensor, t: int, h: int, w: int) -> torch.Tensor:
    """A source's tokens on the plan grid ``(t, h, w, D)``: the nearest frames, tokens resized if the grid differs."""
    idx = [min(int(round(i * (len(tokens) - 1) / max(t - 1, 1))), len(tokens) - 1) for i in range(t)]
    x = tokens[idx].float()
    if x.shape[1:3] != (h, w):
        x = F.interpolate(x.permute(0, 3, 1, 2), size=(h, w), mode="bilinear", align_corners=False).permute(0, 2, 3, 1)
    return x


def layout_params(model: LayoutPlanner) -> dict[str, int]:
    return {name: sum(p.numel() for p in part.parameters()) for name, part in (("writer", model.writer), ("painter", model.painter))}


__all__ = ["MODEL_NAME", "LayoutPlanner", "LayoutPlannerConfig", "LayoutWriter", "PlanPainter", "LayoutPlanOutput", "layout_params"]
