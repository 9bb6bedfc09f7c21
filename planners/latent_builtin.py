"""The builtin latent reasoner: a small transformers ``LlamaModel`` over a grid of image tokens of a large image,
the question and the options, with latent slots (``planners.latent``) between the question and the answer.

Image tokens [PROPOSED]: the builtin ViT was trained on 64x64 frames, where objects are 4-10 px across; on a
512x512 ``spatial`` image they are 9-38 px. One scale cannot read both (measured with the ViT's patch attribute
head on 18 VAL stills: at 128x128 small level-3 objects' shapes are read 33% of the time, large ones' 81-92%; at
256x256 small 85-89%, large 8-60%), so the image is read at two scales, each cut into 64x64 tiles: per cell of a
16x16 grid (32x32 px of a 512 image) the token concatenates the 128-scale patch token and attribute
probabilities with the 256-scale 2x2 patches' mean token and their four attribute vectors (479 numbers), then a
trainable projection and a learned 2-D position. The ViT and the attribute head are frozen copies from the
builtin VLM, saved inside this model's weights so it loads alone.

Object tokens [PROPOSED, ``image_tokens="objects"``]: a grid cell mixes neighbours and leaves an object's size
implicit, and a model over 256 cells did not learn the first hop of the search (finding the anchor the question
names) in 600 steps (weights/builtin/latent_reasoner_sft/card.md). So the image can instead be read as up to
``max_objects`` tokens, one per region of ``planners.object_proposals``: the two scales' patch token and
attribute vector under the region's centroid, its mean colour, log area, box size, fill ratio and an
``MASK_SIDE`` x ``MASK_SIDE`` thumbnail of its footprint, with Fourier features of its centroid. Each token keeps
its box, so slot targets, the pointing rate and the attention pictures work on both kinds (``token_geometry``).

Vocabulary (the LM head's): ``<pad> <start> <slot> <end>`` then answer words (worldgen's colours and shapes);
options name the words the posterior is taken over. The question enters as the frozen MiniLM's token states.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.errors import InputError, MediaError
from core.frames import resize_frames
from core.weights_io import load_state_dict, save_state_dict
from planners.builtin.vit import BuiltinViT, ViTConfig

KIND = "builtin-latent-reasoner"
SPECIALS = ("<pad>", "<start>", "<slot>", "<end>")
PAD, START, SLOT, END = range(4)
GRID = 16
SCALES = (128, 256)
TILE = 64
ATTRIBUTES = 19  # P(object), 10 colours, 8 shapes: the builtin VLM's patch attribute head
MIN_SIDE = 128
COORD_FREQUENCIES = 4
IMAGE_TOKENS = ("cells", "objects")
ANSWER_READS = ("all", "slots")
OBJECT_READS = ("descriptor", "symbols", "both")
IMAGE_POSITIONS = ("sequence", "shared")
GEOMETRY = 7  # the last columns of an object token's features: valid, cx, cy, x0, y0, x1, y1 (fractions of the side)
MASK_SIDE = 8
PICTURE_GRID = 32  # object tokens' maps are painted onto this grid of the image for the pictures


def _fourier(xy: torch.Tensor) -> torch.Tensor:
    """``(..., 2)`` (x, y) in [-1, 1] -> ``(..., 4F)``: sin and cos at frequencies pi/2 * 2^f, f < F."""
    f = (torch.pi / 2) * 2.0 ** torch.arange(COORD_FREQUENCIES, device=xy.device)
    ang = xy[..., None] * f  # (..., 2, F)
    return torch.cat([ang.sin(), ang.cos()], -1).flatten(-2)


def _cell_centres(grid: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(grid*grid, 2)`` (x, y) of each cell's centre as fractions of the side, raster order."""
    c = (torch.arange(grid, device=device) + 0.5) / grid
    y, x = torch.meshgrid(c, c, indexing="ij")
    return torch.stack([x.reshape(-1), y.reshape(-1)], -1)


def _cell_fourier(grid: int) -> torch.Tensor:
    """``(grid*grid, 4F)``: ``_fourier`` of each cell's centre, raster order."""
    return _fourier(_cell_centres(grid) * 2 - 1)


@dataclass
class ReasonerConfig:
    d_model: int = 128
    layers: int = 4
    heads: int = 4
    mlp_ratio: int = 3
    grid: int = GRID
    max_question: int = 32  # MiniLM tokens
    max_options: int = 8
    num_slots: int = 4  # the K it was trained with
    slot_norm: str = "image"
    # [PROPOSED] a prefix-LM mask: image, question and options attend to each other both ways (so image tokens can
    # be read in the light of the question), the slots and the answer causally; False: causal throughout, like Qwen
    prefix_lm: bool = False
    answers: list[str] = field(default_factory=list)
    vit: ViTConfig = field(default_factory=ViTConfig)
    image_tokens: str = "cells"  # or "objects" [PROPOSED]: see the module's docstring
    max_objects: int = 64  # object tokens per image (the largest regions; padded to this many)
    # [PROPOSED] what the answer position (<end>) attends to: "all" (the spec's causal sequence) or "slots" (<start>,
    # the slots and itself, so what the answer knows of the image passed through the slots)
    answer_reads: str = "all"
    # [PROPOSED] what an object token is made of: "descriptor" (its frozen features through the trainable projection),
    # "symbols" (the probabilities of planners.object_attributes' head: shape, size word, colour, embedded) or "both";
    # the place is added to each
    object_reads: str = "descriptor"
    # [PROPOSED] the image tokens' RoPE positions: "sequence" (0..N-1, their order in the sequence) or "shared" (all at
    # 0, the text counting on from 1): object tokens are a set whose order (by area) means nothing, and their places
    # are in their own features. Measured in a diagnostic on perfect symbolic object tokens (2026-12-03, one run
    # each): the same LlamaModel learned the questions with shared positions and memorised them with sequence ones
    image_positions: str = "sequence"
    # [PROPOSED] the answer read off what the last slot points at: its word distribution is the mixture, over the
    # image tokens, of a per-token word head weighted by the last slot's map (softmax(cos / pointer_tau), the map the
    # pointer and cross terms shape), so the answer is the colour of the object the search found; the LM head still
    # emits <start>, and answers with no slots. False: the LM head answers (the spec's sequence). Why: on symbolic
    # object tokens a hand-written search over the attribute head's reads answers 98.9% of TEST, while the LM-head
    # answer stayed at chance in 1,500 steps with or without slots; read off the last slot, 92.2% (docs/BENCHMARKS.md,
    # "The pointer answer on symbolic object tokens")
    answer_pointer: bool = False
    pointer_tau: float = 0.07

    def __post_init__(self):
        if self.image_tokens not in IMAGE_TOKENS:
            raise ValueError(f"image_tokens {self.image_tokens!r}: choose one of {IMAGE_TOKENS}")
        if self.answer_reads not in ANSWER_READS:
            raise ValueError(f"answer_reads {self.answer_reads!r}: choose one of {ANSWER_READS}")
        if self.object_reads not in OBJECT_READS:
            raise ValueError(f"object_reads {self.object_reads!r}: choose one of {OBJECT_READS}")
        if self.image_positions not in IMAGE_POSITIONS:
            raise ValueError(f"image_positions {self.image_positions!r}: choose one of {IMAGE_POSITIONS}")
        if self.object_reads != "descriptor" and self.image_tokens != "objects":
            raise ValueError(f"object_reads {self.object_reads!r} needs image_tokens='objects'")
        if not self.pointer_tau > 0:
            raise ValueError(f"pointer_tau {self.pointer_tau!r}: pass a temperature above 0")

    @property
    def vocab(self) -> list[str]:
        return [*SPECIALS, *self.answers]

    @property
    def descriptor_dim(self) -> int:
        """What the projection reads per image token. A cell: two ViT tokens (one per scale) and five attribute
        vectors (one at 128, four at 256). An object: the two scales' token and attribute vector under its
        centroid, mean RGB, log area, box width and height, fill ratio and its footprint thumbnail."""
        if self.image_tokens == "cells":
            return 2 * self.vit.width + 5 * ATTRIBUTES
        return 2 * (self.vit.width + ATTRIBUTES) + 7 + MASK_SIDE**2

    @property
    def feature_dim(self) -> int:
        """Per image token as cached: the descriptor, plus ``GEOMETRY`` columns for object tokens."""
        return self.descriptor_dim + (GEOMETRY if self.image_tokens == "objects" else 0)

    @property
    def num_tokens(self) -> int:
        return self.grid**2 if self.image_tokens == "cells" else self.max_objects


def check_image(image: np.ndarray) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
        raise InputError("image", getattr(image, "shape", type(image).__name__), "pass an RGB uint8 (H, W, 3) image")
    h, w = image.shape[:2]
    if min(h, w) < MIN_SIDE:
        raise InputError("image", f"{w}x{h}", f"the builtin reasoner reads a {GRID}x{GRID} grid of cells at two scales (128 and 256 px "
                                             f"square): pass an image at least {MIN_SIDE} px on its shorter side")
    return image


class BuiltinLatentReasoner(nn.Module):
    """The model. ``features(images)`` -> frozen multi-scale cell features; ``prefix(features, question_tokens,
    option_embeddings)`` -> the encoded prefix; then ``planners.latent.rollout`` / ``replay`` (this class is
    their ``LatentCore``)."""

    backend = "builtin"
    start_id, end_id = START, END

    def __init__(self, config: ReasonerConfig):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel

        self.config = c = config
        d = c.d_model
        self.vit = BuiltinViT(c.vit).requires_grad_(False)
        w = c.vit.width
        self.attributes = nn.Sequential(nn.LayerNorm(w), nn.Linear(w, 256), nn.GELU(), nn.Linear(256, ATTRIBUTES)).requires_grad_(False)
        self.project = nn.Sequential(nn.LayerNorm(c.descriptor_dim), nn.Linear(c.descriptor_dim, d), nn.GELU(), nn.Linear(d, d), nn.LayerNorm(d))
        if c.object_reads != "descriptor":
            from planners.object_attributes import WIDTH, ObjectAttributeHead

            # frozen while the reasoner trains: training.gelvr_sft fits it first, on worldgen's ground truth
            self.perceive = ObjectAttributeHead(c.descriptor_dim, log_area=2 * (w + ATTRIBUTES) + 3).requires_grad_(False)
            self.symbols = nn.Linear(WIDTH, d, bias=False)
        # each cell's place as fixed Fourier features of (x, y): "right of the anchor" is then a smooth function a query
        # can express from the first step, which learned position tables only become after long training
        self.coords = nn.Linear(4 * COORD_FREQUENCIES, d, bias=False)
        self.register_buffer("cell_xy", _cell_fourier(c.grid), persistent=False)
        self.row, self.col = nn.Parameter(torch.randn(c.grid, d) * 0.02), nn.Parameter(torch.randn(c.grid, d) * 0.02)
        self.text_in = nn.Linear(384, d)
        self.option_in = nn.Linear(384, d)
        self.option_slot = nn.Parameter(torch.randn(c.max_options, d) * 0.02)
        self.kind = nn.Parameter(torch.randn(3, d) * 0.02)  # question, option, padding
        lm = LlamaConfig(hidden_size=d, intermediate_size=c.mlp_ratio * d, num_hidden_layers=c.layers, num_attention_heads=c.heads,
                         num_key_value_heads=c.heads, vocab_size=len(c.vocab), max_position_embeddings=1024, tie_word_embeddings=False)
        self.lm = LlamaModel(lm)
        self.head = nn.Linear(d, len(c.vocab), bias=False)
        if c.answer_pointer:
            self.read = nn.Linear(d, len(c.vocab))  # each image token's word distribution (its colour, its shape)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    # ---- vision (frozen)
    @torch.no_grad()
    def _patch_grids(self, images: np.ndarray) -> dict[int, torch.Tensor]:
        """Per scale: ``(N, side/8, side/8, width + ATTRIBUTES)`` the frozen ViT's patch tokens and attribute
        probabilities (P(object), colour, shape) over 64x64 tiles of the image resized to ``side``."""
        self.vit.eval()
        out = {}
        for side in SCALES:
            small = resize_frames(images, (side, side))
            n, t = len(small), side // TILE
            tiles = small.reshape(n, t, TILE, t, TILE, 3).transpose(0, 1, 3, 2, 4, 5).reshape(-1, TILE, TILE, 3)
            x = torch.as_tensor(np.ascontiguousarray(tiles), device=self.device).permute(0, 3, 1, 2).float().div(127.5).sub(1)
            tok = self.vit(x)[1]  # (n*t*t, 64, w)
            g = TILE // self.config.vit.patch
            attr = self.attributes(tok)
            attr = torch.cat([torch.sigmoid(attr[..., :1]), F.softmax(attr[..., 1:11], -1), F.softmax(attr[..., 11:], -1)], -1)
            both = torch.cat([tok, attr], -1)  # (n*t*t, g*g, w + 19)
            out[side] = both.reshape(n, t, t, g, g, -1).permute(0, 1, 3, 2, 4, 5).reshape(n, t * g, t * g, -1)
        return out

    @torch.no_grad()
    def features(self, images: np.ndarray) -> torch.Tensor:
        """RGB uint8 ``(N, H, W, 3)`` (or one image) -> ``(N, num_tokens, feature_dim)`` frozen image-token features."""
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[None]
        for im in images:
            check_image(im)
        grids = self._patch_grids(images)
        if self.config.image_tokens == "objects":
            return torch.stack([self._object_features(im, {s: g[i] for s, g in grids.items()}) for i, im in enumerate(images)])
        parts, w = [], self.config.vit.width
        for side in SCALES:
            grid = grids[side]
            n, f = len(grid), grid.shape[1] // self.config.grid  # patches per cell side: 1 at 128, 2 at 256
            cells = grid.reshape(n, self.config.grid, f, self.config.grid, f, -1).permute(0, 1, 3, 2, 4, 5)
            cells = cells.reshape(n, self.config.grid**2, f * f, -1)
            parts += [cells[..., :w].mean(2), cells[..., w:].flatten(2)]
        return torch.cat(parts, -1)

    def _object_features(self, image: np.ndarray, grids: dict[int, torch.Tensor]) -> torch.Tensor:
        """``(max_objects, feature_dim)`` one image's object tokens (largest regions first, zero rows as padding)."""
        import cv2

        from planners.object_proposals import propose_objects

        c = self.config
        h, w = image.shape[:2]
        out = torch.zeros(c.max_objects, c.feature_dim, device=self.device)
        for j, p in enumerate(propose_objects(image, limit=c.max_objects)):
            cx, cy = p.centre
            reads = []
            for side in SCALES:
                g = grids[side]
                reads.append(g[min(int(cy / h * g.shape[0]), g.shape[0] - 1), min(int(cx / w * g.shape[1]), g.shape[1] - 1)])
            x0, y0, x1, y1 = p.box
            bw, bh = (x1 - x0) / w, (y1 - y0) / h
            thumb = cv2.resize(p.mask.astype(np.float32), (MASK_SIDE, MASK_SIDE), interpolation=cv2.INTER_AREA)
            shape_terms = [*(v / 255 for v in p.color), np.log(p.area / (h * w) * 4096 + 1), bw * 8, bh * 8,
                           p.area / max(1, (x1 - x0) * (y1 - y0))]
            geometry = [1.0, cx / w, cy / h, x0 / w, y0 / h, x1 / w, y1 / h]
            extra = torch.tensor([*shape_terms, *thumb.ravel(), *geometry], dtype=torch.float32, device=self.device)
            out[j] = torch.cat([*reads, extra])
        return out

    def token_geometry(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(B, N, F)`` -> each image token's centre ``(B, N, 2)`` and box ``(B, N, 4)`` (x, y as fractions of
        the image's width and height) and whether it is a real token ``(B, N)`` (object padding is not)."""
        b = len(features)
        if self.config.image_tokens == "objects":
            geo = features[..., -GEOMETRY:].float()
            valid = geo[..., 0] > 0.5
            valid[:, 0] |= ~valid.any(1)  # an image with no object: its first padding token stands in, so maps stay defined
            return geo[..., 1:3], geo[..., 3:], valid
        g = self.config.grid
        centres = _cell_centres(g, features.device)
        boxes = torch.cat([centres - 0.5 / g, centres + 0.5 / g], -1)
        return centres.expand(b, -1, -1), boxes.expand(b, -1, -1), torch.ones(b, g * g, dtype=torch.bool, device=features.device)

    def object_attributes(self, features: torch.Tensor) -> torch.Tensor:
        """``(B, N, F)`` object-token features -> ``(B, N, 21)`` the attribute head's logits
        (``planners.object_attributes.GROUPS``); only for ``object_reads`` other than "descriptor"."""
        return self.perceive(features[..., : self.config.descriptor_dim], self.token_geometry(features)[2])

    # ---- the prefix
    def image_tokens(self, features: torch.Tensor) -> torch.Tensor:
        """``(B, N, feature_dim)`` -> the image tokens' input embeddings ``(B, N, d)`` (projection + 2-D position):
        the space slot targets and the slot-to-image maps live in. Object padding gets the padding embedding."""
        if self.config.image_tokens == "objects":
            centres, _, valid = self.token_geometry(features)
            tokens = self.coords(_fourier(centres * 2 - 1))
            if self.config.object_reads != "symbols":
                tokens = tokens + self.project(features[..., : self.config.descriptor_dim])
            if self.config.object_reads != "descriptor":
                from planners.object_attributes import attribute_probabilities

                tokens = tokens + self.symbols(attribute_probabilities(self.object_attributes(features)))
            return torch.where(valid[..., None], tokens, self.kind[2].expand_as(tokens))
        g = self.config.grid
        pos = (self.row[:, None] + self.col[None]).reshape(g * g, -1) + self.coords(self.cell_xy)
        return self.project(features) + pos

    def prefix(self, features: torch.Tensor, questions: list[torch.Tensor], options: list[torch.Tensor]) -> dict:
        """Encode a batch: ``features`` ``(B, N, F)``, per item the question's MiniLM token states ``(Lq, 384)`` and the
        options' MiniLM embeddings ``(O, 384)``. Questions and options are padded to fixed lengths with a learned
        padding embedding (attended, so no masks are needed)."""
        c = self.config
        dev = self.device
        img = self.image_tokens(features.to(dev))
        b, d = len(img), c.d_model
        q = self.kind[2].expand(b, c.max_question, d).clone()
        o = self.kind[2].expand(b, c.max_options, d).clone()
        for i, (qi, oi) in enumerate(zip(questions, options)):
            if len(qi) > c.max_question:
                raise InputError("question", f"{len(qi)} tokens", f"the builtin reasoner reads at most {c.max_question}: shorten it")
            if not 1 <= len(oi) <= c.max_options:
                raise InputError("options", f"{len(oi)} options", f"pass 1 to {c.max_options}")
            q[i, : len(qi)] = self.text_in(qi.to(dev)) + self.kind[0]
            o[i, : len(oi)] = self.option_in(oi.to(dev)) + self.option_slot[: len(oi)] + self.kind[1]
        pre = {"embeds": torch.cat([img, q, o], 1), "image": img}
        if c.image_tokens == "objects":  # the maps, losses and norms over the image skip object padding
            pre["image_mask"] = self.token_geometry(features.to(dev))[2]
        return pre

    # ---- LatentCore
    def token_embeds(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm.embed_tokens(ids)

    def _mask(self, n_prefix: int, n_total: int, b: int, dtype: torch.dtype, n_query: int | None = None,
              answer: bool = False) -> torch.Tensor | None:
        """The 4-D additive mask ``(b, 1, n_query, n_total)`` of the last ``n_query`` positions (default all): a
        prefix-LM's, and with ``answer`` and ``answer_reads="slots"`` the last position kept off the prefix (None:
        plain causal). Shared image positions always get an explicit mask: given position ids that restart at 0,
        transformers would take the sequence for several packed ones and mask between them."""
        bottleneck = answer and self.config.answer_reads == "slots"
        if not self.config.prefix_lm and not bottleneck and self.config.image_positions == "sequence":
            return None
        allowed = torch.ones(n_total, n_total, dtype=torch.bool, device=self.device).tril()
        if self.config.prefix_lm:
            allowed[:n_prefix, :n_prefix] = True
        if bottleneck:
            allowed[-1, :n_prefix] = False
        allowed = allowed[n_total - (n_query or n_total):]
        return torch.zeros(b, 1, *allowed.shape, dtype=dtype, device=self.device).masked_fill(~allowed, torch.finfo(dtype).min)

    def _positions(self, start: int, length: int, batch: int) -> torch.Tensor | None:
        """RoPE positions of sequence places ``start .. start + length - 1`` (None: the model's default, 0, 1, ...);
        with ``image_positions="shared"`` the image tokens (the sequence's first ``num_tokens``) all sit at 0."""
        if self.config.image_positions == "sequence":
            return None
        p = (torch.arange(start, start + length, device=self.device) - (self.config.num_tokens - 1)).clamp(min=0)
        return p[None].expand(batch, -1)

    def pointer_answer(self, last_slot: torch.Tensor, image: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``answer_pointer``'s answer: ``(B, d)`` the last slot's input, ``(B, N, d)`` the image tokens ->
        ``(B, V)`` log-probabilities, log sum_j map_j softmax(read(image_j))."""
        from planners.latent_geometry import cross_structure

        log_map = cross_structure(last_slot[:, None], image, self.config.pointer_tau, mask, log=True)[:, 0]  # (B, N)
        return torch.logsumexp(log_map[..., None] + F.log_softmax(self.read(image).float(), -1), 1).to(last_slot.dtype)

    def run(self, prefix: dict, tail: torch.Tensor, answer: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([prefix["embeds"], tail], 1)
        n = prefix["embeds"].shape[1]
        mask = self._mask(n, x.shape[1], len(x), x.dtype, answer=answer)
        out = self.lm(inputs_embeds=x, attention_mask=mask, position_ids=self._positions(0, x.shape[1], len(x)),
                      use_cache=False).last_hidden_state
        logits = self.head(out[:, n - 1 :])
        if answer and self.config.answer_pointer and tail.shape[1] >= 3:  # <start> s_1 .. s_K <end>, K >= 1
            logits = torch.cat([logits[:, :-1], self.pointer_answer(tail[:, -2], prefix["image"], prefix.get("image_mask"))[:, None]], 1)
        return out[:, n:], logits

    def begin(self, prefix: dict) -> tuple[object, torch.Tensor]:
        x = prefix["embeds"]
        out = self.lm(inputs_embeds=x, attention_mask=self._mask(x.shape[1], x.shape[1], len(x), x.dtype),
                      position_ids=self._positions(0, x.shape[1], len(x)), use_cache=True)
        state = {"cache": out.cache, "prefix_len": x.shape[1], "appended": 0}
        if self.config.answer_pointer:
            state.update(image=prefix["image"], image_mask=prefix.get("image_mask"))
        return state, self.head(out.last_hidden_state[:, -1])

    def extend(self, state: dict, embeds: torch.Tensor, answer: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        mask = None  # causal over the cache: every earlier position
        start = state["cache"].get_seq_length()
        if (answer and self.config.answer_reads == "slots") or self.config.image_positions == "shared":
            mask = self._mask(state["prefix_len"], start + embeds.shape[1], len(embeds), embeds.dtype, embeds.shape[1], answer=answer)
        out = self.lm(inputs_embeds=embeds, attention_mask=mask, position_ids=self._positions(start, embeds.shape[1], len(embeds)),
                      cache=state["cache"], use_cache=True)
        state["cache"] = out.cache
        logits = self.head(out.last_hidden_state)
        if self.config.answer_pointer:
            if answer and state["appended"] >= 2:  # <start> and at least one slot came before <end>
                ptr = self.pointer_answer(state["last"], state["image"], state["image_mask"])
                logits = torch.cat([logits[:, :-1], ptr[:, None]], 1)
            state["appended"] += embeds.shape[1]
            state["last"] = embeds[:, -1]
        return out.last_hidden_state, logits

    def image_norm(self, prefix: dict) -> torch.Tensor:
        norms = prefix["image"].norm(dim=-1)
        mask = prefix.get("image_mask")
        if mask is None:
            return norms.mean(-1)
        return (norms * mask).sum(-1) / mask.sum(-1).clamp(min=1)

    # ---- answers
    def answer_ids(self, options: list[str]) -> list[int]:
        vocab = {w: i for i, w in enumerate(self.config.vocab) if i >= len(SPECIALS)}
        missing = [o for o in options if o.strip().lower() not in vocab]
        if missing:
            raise InputError("options", missing, f"the builtin reasoner answers with one of {self.config.answers}")
        return [vocab[o.strip().lower()] for o in options]

    # ---- persistence
    def save_pretrained(self, directory: str | Path, metadata: dict | None = None) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps({"model": KIND, **asdict(self.config)}, indent=1))
        save_state_dict(self.state_dict(), directory / "model.safetensors", metadata={k: str(v) for k, v in (metadata or {}).items()})
        return directory

    @staticmethod
    def is_saved_in(directory: str | Path) -> bool:
        try:
            return json.loads((Path(directory) / "config.json").read_text()).get("model") == KIND
        except (OSError, ValueError):
            return False

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device | None = None) -> BuiltinLatentReasoner:
        directory = Path(directory)
        if not (directory / "model.safetensors").is_file():
            raise MediaError(directory, "no builtin latent reasoner weights here", "run `make weights`, or pass --reasoner PATH")
        cfg = json.loads((directory / "config.json").read_text())
        cfg.pop("model", None)
        cfg["vit"] = ViTConfig(**cfg["vit"])
        model = cls(ReasonerConfig(**cfg))
        model.load_state_dict(load_state_dict(directory / "model.safetensors"))
        return model.eval().to(device or "cpu")

    @classmethod
    def from_vlm(cls, vlm_model, config: ReasonerConfig) -> BuiltinLatentReasoner:
        """A fresh reasoner whose frozen ViT and attribute head are copies of the builtin VLM's."""
        config.vit = vlm_model.config.vit
        model = cls(config)
        model.vit.load_state_dict(vlm_model.vit.state_dict())
        model.attributes.load_state_dict(vlm_model.attributes.state_dict())
        return model


def paint_on_grid(weights: torch.Tensor, boxes: torch.Tensor, grid: int) -> torch.Tensor:
    """``(K, N)`` maps over object tokens -> ``(K, grid, grid)`` maps over the image: each token's weight spread
    evenly over the cells whose centres lie in its box (at least the cell under the box's centre), so each map
    still sums to what it did."""
    x, y = _cell_centres(grid, weights.device).T
    inside = ((x[None] >= boxes[:, :1]) & (x[None] <= boxes[:, 2:3]) & (y[None] >= boxes[:, 1:2]) & (y[None] <= boxes[:, 3:])).float()
    centre = ((boxes[:, :2] + boxes[:, 2:]) / 2 * grid).long().clamp(0, grid - 1)
    inside[torch.arange(len(boxes)), centre[:, 1] * grid + centre[:, 0]] = 1.0
    spread = inside / inside.sum(-1, keepdim=True)  # (N, grid*grid)
    return (weights @ spread).reshape(-1, grid, grid)


class BuiltinReasoner:
    """The builtin reasoner as a pipeline component: the model plus the frozen MiniLM that encodes its text."""

    backend = "builtin"

    def __init__(self, model: BuiltinLatentReasoner, text=None):
        from planners.builtin.text import MiniLM

        self.model = model.eval()
        self.text = text or MiniLM()

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, *, device: str | torch.device | None = None, dtype=None) -> BuiltinReasoner:
        from core.device import select_device
        from planners.builtin import WEIGHTS_DIR

        path = Path(path) if path is not None else WEIGHTS_DIR / "latent_reasoner"
        return cls(BuiltinLatentReasoner.from_pretrained(path, device=select_device(device)))

    def save_pretrained(self, path: str | Path) -> Path:
        return self.model.save_pretrained(path)

    def to(self, device=None, dtype=None) -> BuiltinReasoner:
        from core.device import select_device

        if device is not None:
            self.model.to(select_device(device))
        return self

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def trained_slots(self) -> int:
        return self.model.config.num_slots

    @torch.no_grad()
    def answer(self, image: np.ndarray, question: str, options: list[str], num_slots: int | None = None,
               tau: float = 0.07):
        """A ``planners.latent.LatentAnswer``; ``num_slots=None`` uses the K the model was trained with."""
        from planners.latent import LatentAnswer, check_num_slots, check_question, rollout, slot_attention

        question, options = check_question(question, options)
        k = self.trained_slots if num_slots is None else check_num_slots(num_slots)
        ids = self.model.answer_ids(options)
        m = self.model
        features = m.features(check_image(image))
        pre = m.prefix(features, self.text.tokens([question]), [self.text.encode(options)])
        g = m.config.grid if m.config.image_tokens == "cells" else PICTURE_GRID
        if k == 0:
            _, first = m.begin(pre)
            logits, slots, amap, started = first[0], torch.zeros(0, m.config.d_model), torch.zeros(0, g, g), False
        else:
            r = rollout(m, pre, k, slot_norm=m.config.slot_norm)
            logits, slots = r.answer_logits[0], r.slot_inputs[0]
            weights = slot_attention(r.slot_inputs, pre["image"], tau, pre.get("image_mask"))[0]  # (K, N)
            if m.config.image_tokens == "cells":
                amap = weights.reshape(k, g, g)
            else:
                amap = paint_on_grid(weights, m.token_geometry(features)[1][0], g)
            started = bool(r.first_logits[0].argmax() == START)
        post = torch.softmax(logits[ids].double(), -1).cpu().numpy()
        i = int(post.argmax())
        return LatentAnswer(options[i], i, post, slots.float().cpu().numpy(), amap.float().cpu().numpy(), (g, g), started)
