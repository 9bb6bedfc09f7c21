"""The built-in multi-frame VLM: ViT tokens of up to 256 frames + a question + options -> option
scores, and a small caption decoder.

Layout of the encoder input (one sequence, bidirectional attention):

    [question tokens (MiniLM states)] [option tokens (MiniLM sentence embeddings + slot)]
    [count probes (MiniLM embeddings of attribute words)] [frame tokens]

Visual tokens follow Qwen-VL's recipe: the ViT's 8x8-pixel patch tokens are merged 2x2 (concatenated,
then projected), so a 64x64 frame gives 16 tokens and a 32x32 frame 4; compute therefore scales with
resolution as in real VLMs, which is what makes GridProbe's compute accounting meaningful. Each frame
token gets a spatial position (merged grid, interpolated) and a temporal one: when the frame was
taken as a fraction of the video (the protocol's ``relative_times``; without them, its rank in the input
scaled to [0, 1]), read from a small learned table by linear interpolation, so order questions are
answerable and a clip of 144 frames uses the same positions as the 4-48 frame inputs of training
(an absolute-rank table leaves every rank beyond the longest training input untrained). Like a real
VLM's timestamps, the times also tell the sufficiency gate how much of the video the frames cover
(a GridProbe row: a short stretch; a column: all of it) [PROPOSED].
The ViT is frozen inside the VLM (it is trained separately, CLIP-style).

Option scores come from a *grounded read-out* [PROPOSED; the task spec leaves the head open]: a
bilinear grounding head scores every (option, frame) pair (max over the frame's tokens), giving each
option a presence timeline p_t; the score is a linear read-out of the option's state plus
question-weighted summaries of its timeline -- ever seen (max), how long (mean), when first (expected
first-hit rank) -- and, for counting, the agreement between the option's number and the count of
distinct referents the count probes ground (one probe per attribute word, e.g. colour, each
grounding "a <colour> <thing the question asks about>"); the grounding query adds a projection of
the question to the referent's, so conjunctions (colour from the question, shape from the option)
are one bilinear match. A zero-shot prior starts the head off: the cosine of the referent's MiniLM
embedding with each frame's ViT embedding (the ViT is aligned to MiniLM) plus the cosine of the
question's own embedding, which supplies the conjunction's other half; the question sets both
weights; in practice the priors do the grounding and training tunes their mix.
Frame-level embeddings mix every object in a frame, so they cannot bind "purple" to "star" when a
frame shows a purple circle and a red star; the timelines therefore also get an object-level
detector's evidence [PROPOSED]: a small head on the frozen ViT's patch tokens gives each patch
P(object), P(colour), P(shape), a linear head on the MiniLM embedding of the referent (and of the
question, for what the referent leaves open) gives the colour and shape asked for, and a frame's
score is its best patch's P(object) x P(colour) x P(shape). Both heads are fitted before the main
loop from the renderer's instance maps and the phrase templates, then frozen.
The posterior is s * softmax(scores) + (1 - s) * uniform, with s a learned probability that the
frames shown determine the answer (from the question, the pooled frames, the read-out's evidence
for its two best options and its margin between them, the count estimate, how alike consecutive
frames are and the span of time they cover) [PROPOSED], trained on
the same "determined by these frames" labels as the answer targets: GridProbe reads confidence.
Training supervises the timelines densely (which frames show the option's referent), so the model
learns to look before it learns to answer, instead of discovering through the answer loss alone
which of ~500 frame tokens to attend.

The numbers behind these choices (what was tried, what it measured) are in the model card,
weights/builtin/vlm/card.md, "Design notes and measurements".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.errors import InputError
from core.weights_io import load_state_dict
from planners.builtin.vit import Block, BuiltinViT, ViTConfig, save_builtin

TEXT_DIM = 384  # MiniLM
KIND = "builtin-vlm"  # the "model" entry of a saved VLM's config.json
TRAJECTORY_POINTS = 12
SUFFICIENCY_STATS = 19
GROUNDING_CACHE = {"option_states": "option_grounding", "probe_states": "probe_grounding"}  # which -> Encoding field


@dataclass
class VLMConfig:
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    mlp_ratio: int = 4
    max_frames: int = 256
    time_slots: int = 32  # entries of the temporal position table (interpolated at normalised ranks)
    max_options: int = 10
    dec_layers: int = 1
    max_caption: int = 16
    aux_classes: int = 98  # per-frame presence of 10 colours, 8 shapes, 80 colour-shape pairs (training signal only)
    motion_classes: int = 8  # clip-level motion phrases of the captions (training signal only)
    ground_dim: int = 64  # the grounding head's query/key width
    colors: int = 10  # classes of the patch attribute detector (worldgen's colours and shapes)
    shapes: int = 8
    count_words: list[str] = field(default_factory=list)  # attribute words of the count probes (e.g. colours)
    layer_scale: float = 1e-2
    vit: ViTConfig = field(default_factory=ViTConfig)
    vocab: list[str] = field(default_factory=list)  # caption words; 0 = <pad>, 1 = <bos>, 2 = <eos>


class CaptionDecoder(nn.Module):
    """A 2-layer causal transformer over caption words, cross-attending to the encoder output."""

    def __init__(self, vocab_size: int, d: int, heads: int, layers: int, max_len: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d)
        self.pos = nn.Parameter(torch.randn(1, max_len + 1, d) * 0.02)
        layer = nn.TransformerDecoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True, activation="gelu")
        self.layers = nn.TransformerDecoder(layer, layers)
        self.out = nn.Linear(d, vocab_size)

    def forward(self, words: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor | None) -> torch.Tensor:
        n = words.shape[1]
        causal = torch.triu(torch.full((n, n), float("-inf"), device=words.device), 1)
        h = self.embed(words) + self.pos[:, :n]
        return self.out(self.layers(h, memory, tgt_mask=causal, memory_key_padding_mask=memory_pad))


@dataclass
class Encoding:
    """What ``BuiltinVLMModel.encode`` returns for a collated batch: the encoder's states and the inputs
    the read-outs need. B items, L sequence tokens, O options, C count probes, T frames (padded),
    P merged tokens per frame, Pv ViT patches per frame.

    The last three fields are caches, None until a read-out fills them: the answer and the training
    losses both read the grounding timelines, and the sufficiency loss reads the gate behind a posterior.
    """

    hidden: torch.Tensor  # (B, L, d) the encoder's output, which the caption decoder attends to
    valid: torch.Tensor  # (B, L) bool: False on padding
    question_state: torch.Tensor  # (B, d) mean state of the question tokens
    question_emb: torch.Tensor  # (B, 384) the question's MiniLM sentence embedding
    option_states: torch.Tensor  # (B, O, d)
    probe_states: torch.Tensor  # (B, C, d) the count probes'
    motion_embedding: torch.Tensor  # (B, d) the salient object's trajectory, embedded
    frame_states: torch.Tensor  # (B, T, P, d)
    frame_mask: torch.Tensor  # (B, T) bool
    options: torch.Tensor  # (B, O, 384) the options' MiniLM embeddings
    frame_emb: torch.Tensor  # (B, T, 384) the frames' ViT embeddings
    where: torch.Tensor  # (B, T, 2) the salient object's position per frame, in [-1, 1]
    attributes: torch.Tensor  # (B, T, Pv, 1 + colors + shapes) the patch attribute detector's probabilities
    frame_time: torch.Tensor  # (B, T) when each frame was taken, in [0, 1]
    option_grounding: torch.Tensor | None = None  # cache: (B, O, T) logits, ``grounding(enc, "option_states")``
    probe_grounding: torch.Tensor | None = None  # cache: (B, C, T) logits, ``grounding(enc, "probe_states")``
    sufficiency_logit: torch.Tensor | None = None  # cache: (B,) the gate of the last ``option_logits(enc, ...)``


class BuiltinVLMModel(nn.Module):
    def __init__(self, config: VLMConfig):
        super().__init__()
        self.config = c = config
        d = c.d_model
        self.vit = BuiltinViT(c.vit).requires_grad_(False)
        self.merge = nn.Sequential(nn.LayerNorm(4 * c.vit.width), nn.Linear(4 * c.vit.width, d))
        grid = c.vit.image_size // c.vit.patch // 2
        self.spatial = nn.Parameter(torch.randn(1, grid * grid, d) * 0.02)
        self.temporal = nn.Parameter(torch.randn(1, c.time_slots, d) * 0.02)
        self.text_in = nn.Linear(TEXT_DIM, d)
        self.option_in = nn.Linear(TEXT_DIM, d)
        self.option_slot = nn.Embedding(c.max_options, d)
        self.kind = nn.Embedding(5, d)  # 0 question, 1 option, 2 frame, 3 count probe, 4 motion
        self.register_buffer("count_words", torch.zeros(len(c.count_words), TEXT_DIM))  # MiniLM embeddings, set in training
        self.blocks = nn.ModuleList(Block(d, c.heads, c.mlp_ratio, c.layer_scale) for _ in range(c.layers))
        self.ln = nn.LayerNorm(d)
        self.ground_q, self.ground_k = nn.Linear(d, c.ground_dim), nn.Linear(d, c.ground_dim)
        self.ground_question = nn.Linear(d, c.ground_dim)
        self.ground_bias = nn.Parameter(torch.tensor(-2.0))
        self.score = nn.Linear(d, 1)
        self.number = nn.Linear(d, 1)  # an option's numeric value, for the count agreement term
        self.mix = nn.Linear(d, 4)  # question -> weights of (max, mean, first, count agreement)
        nn.init.zeros_(self.mix.weight)
        nn.init.zeros_(self.mix.bias)
        self.aux = nn.Linear(d, c.aux_classes)
        self.motion_head = nn.Linear(d, c.motion_classes)  # training only
        w = c.vit.width
        self.objectness = nn.Sequential(nn.LayerNorm(w), nn.Linear(w, 64), nn.GELU(), nn.Linear(64, 1))
        self.where_offset, self.where_in = nn.Linear(w, 2), nn.Linear(2, d)
        # how much the referent's and the question's embeddings enter the prior, per question: one shared
        # scale settles on a mix that suits no kind
        self.prior_weights = nn.Linear(d, 3)
        nn.init.zeros_(self.prior_weights.weight)
        with torch.no_grad():
            self.prior_weights.bias.copy_(torch.tensor([10.0, 10.0, 1.0]))  # referent cos, question cos, detector logit
        # object-level attributes [PROPOSED]: per ViT patch, is there an object and which colour and shape
        # it has; per text, which colour / shape it names (or none). Both are fitted before the main loop
        # (``training.vlm.warm_start_attributes``: patch labels from the renderer's instance map, text labels
        # from the phrase templates) and then frozen, so the conjunction "purple AND star" is a product of
        # two probabilities on the same patch instead of a frame-level embedding that mixes every object
        self.attributes = nn.Sequential(nn.LayerNorm(w), nn.Linear(w, 256), nn.GELU(), nn.Linear(256, 1 + c.colors + c.shapes))
        self.text_attributes = nn.Linear(TEXT_DIM, c.colors + 1 + c.shapes + 1)
        self.attributes.requires_grad_(False)
        self.text_attributes.requires_grad_(False)
        # evidence sufficiency [PROPOSED]: the probability that the frames shown determine the answer; the
        # posterior is mixed with uniform by it, so a probe that missed the evidence says so
        self.sufficiency_in = nn.Linear(2 * d, 128)
        self.sufficiency_stats = nn.Linear(SUFFICIENCY_STATS, 128)
        self.sufficiency_out = nn.Linear(128, 1)
        nn.init.constant_(self.sufficiency_out.bias, 2.0)
        self.trajectory = nn.Sequential(nn.Linear(4 * TRAJECTORY_POINTS - 2, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, d))
        self.decoder = CaptionDecoder(max(3, len(c.vocab)), d, c.heads, c.dec_layers, c.max_caption)

    @property
    def device(self) -> torch.device:
        return self.score.weight.device

    # ---- vision
    @torch.no_grad()
    def vision(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(N, 3, H, W)`` in [-1, 1] -> (ViT patch tokens ``(N, gh, gw, width)``, frame embeddings ``(N, 384)``
        in MiniLM space), from the frozen ViT."""
        self.vit.eval()
        emb, tok = self.vit(frames)
        g = frames.shape[-1] // self.config.vit.patch
        return tok.reshape(len(frames), frames.shape[-2] // self.config.vit.patch, g, -1), emb

    def salient_position(self, patches: torch.Tensor) -> torch.Tensor:
        """The frame's salient-object centre ``(N, 2)`` in [-1, 1]: a soft-argmax of a learned objectness
        over the ViT's patch grid (8x8 at 64x64), each patch adding a bounded sub-cell offset.

        Read from the frozen ViT's patch tokens, not the merged ones: the 4x4 merged grid is too coarse
        to tell a stop-and-go from a circle. Motion is then a comparison of a few numbers across frames."""
        n, gh, gw, w = patches.shape
        t = patches.reshape(n, gh * gw, w)
        gy, gx = torch.meshgrid(torch.linspace(-1, 1, gh, device=t.device), torch.linspace(-1, 1, gw, device=t.device), indexing="ij")
        coords = torch.stack([gx * (1 - 1 / gw), gy * (1 - 1 / gh)], -1).reshape(-1, 2)  # patch centres
        attend = torch.softmax(self.objectness(t).squeeze(-1), -1)  # (N, P)
        offset = torch.tanh(self.where_offset(t)) * (2 / torch.tensor([gw, gh], device=t.device))  # at most one cell
        return (attend[..., None] * (coords + offset)).sum(1)

    def patch_attributes(self, patches: torch.Tensor) -> torch.Tensor:
        """``(N, gh, gw, w)`` patch tokens -> ``(N, gh*gw, 1 + colors + shapes)``: P(object) and, given an
        object, P(colour) and P(shape) of the object covering each patch."""
        c = self.config
        o = self.attributes(patches.flatten(1, 2))
        obj = torch.sigmoid(o[..., :1])
        return torch.cat([obj, F.softmax(o[..., 1 : 1 + c.colors], -1), F.softmax(o[..., 1 + c.colors :], -1)], -1)

    def text_attribute_probs(self, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """MiniLM embeddings ``(..., 384)`` -> (colour ``(..., colors + 1)``, shape ``(..., shapes + 1)``)
        distributions; the last class is "names none"."""
        o = self.text_attributes(F.normalize(text, dim=-1))
        return F.softmax(o[..., : self.config.colors + 1], -1), F.softmax(o[..., self.config.colors + 1 :], -1)

    def detector(self, enc: Encoding, text: torch.Tensor) -> torch.Tensor:
        """``(B, O, T)`` in [0, 1]: the best patch of each frame showing an object with the colour and
        shape the referent ``text`` ``(B, O, 384)`` names, what it leaves open filled in from the question
        ("star" x "the purple object ..." -> a purple star; "red" x "How many stars ..." -> a red star)."""
        nc = self.config.colors
        r_col, r_shp = self.text_attribute_probs(text)
        q_col, q_shp = self.text_attribute_probs(enc.question_emb)

        def need(r, q):  # the referent's requirement, else the question's, else any object
            return r[..., :-1] + r[..., -1:] * q[:, None, :-1], r[..., -1] * q[:, None, -1]

        (a, a_any), (b, b_any) = need(r_col, q_col), need(r_shp, q_shp)
        attr = enc.attributes  # (B, T, Pv, 1 + colors + shapes)
        col_ok = torch.einsum("boc,btpc->botp", a, attr[..., 1 : 1 + nc]) + a_any[..., None, None]
        shp_ok = torch.einsum("bos,btps->botp", b, attr[..., 1 + nc :]) + b_any[..., None, None]
        return (attr[..., 0][:, None] * col_ok * shp_ok).amax(-1)

    def visual_tokens(self, patches: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """2x2 merge + spatial position + the frame's salient-object position:
        ``(N, gh, gw, w)`` -> (tokens ``(N, gh*gw/4, d)``, positions ``(N, 2)`` in [-1, 1])."""
        n, gh, gw, w = patches.shape
        where = self.salient_position(patches)
        x = patches.reshape(n, gh // 2, 2, gw // 2, 2, w).permute(0, 1, 3, 2, 4, 5).reshape(n, (gh // 2) * (gw // 2), 4 * w)
        x = self.merge(x) + self.where_in(where)[:, None]
        g = int(round(self.spatial.shape[1] ** 0.5))
        sp = self.spatial
        if (gh // 2, gw // 2) != (g, g):
            sp = F.interpolate(sp.reshape(1, g, g, -1).permute(0, 3, 1, 2), size=(gh // 2, gw // 2), mode="bilinear", align_corners=False)
            sp = sp.permute(0, 2, 3, 1).reshape(1, -1, sp.shape[1])
        return x + sp, where

    def temporal_positions(self, frame_time: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` frame times in [0, 1] -> ``(B, T, d)``: the table interpolated at each time."""
        slots = self.temporal.shape[1]
        pos = frame_time.clamp(0, 1) * (slots - 1)
        lo = pos.floor().long().clamp(max=slots - 2)
        w = (pos - lo).unsqueeze(-1)
        table = self.temporal[0]
        return table[lo] * (1 - w) + table[lo + 1] * w

    # ---- the encoder
    def encode(self, batch: dict) -> Encoding:
        """Run the encoder on a collated batch (see ``collate``)."""
        d = self.config.d_model
        # each frame token also gets the frame's ViT embedding through the options' projection: text
        # and image share MiniLM space, so an option and the frames showing it start out similar
        vis, where = self.visual_tokens(batch["patches"])
        attributes = self.patch_attributes(batch["patches"])
        vis = vis + self.option_in(batch["frame_emb"])[:, None]  # (sumT, P, d)
        P = vis.shape[1]
        B, Tm = batch["frame_mask"].shape
        where_t = _padded(where, batch["frame_mask"])
        frames = _padded(vis, batch["frame_mask"]) + self.temporal_positions(batch["frame_time"])[:, :, None] + self.kind.weight[2]
        q = self.text_in(batch["question"]) + self.kind.weight[0]
        o = self.option_in(batch["options"]) + self.option_slot.weight[: batch["options"].shape[1]] + self.kind.weight[1]
        c = (self.option_in(self.count_words) + self.kind.weight[3]).expand(B, -1, -1)
        motion = self.motion_token(where_t, batch["frame_mask"])
        c = torch.cat([c, (motion + self.kind.weight[4])[:, None]], 1)
        x = torch.cat([q, o, c, frames.reshape(B, Tm * P, d)], 1)
        cm = batch["frame_mask"].new_ones(B, c.shape[1])
        valid = torch.cat([batch["question_mask"], batch["option_mask"], cm, batch["frame_mask"].repeat_interleave(P, 1)], 1)
        attn = valid[:, None, None, :]  # key mask, broadcast over heads and queries
        for blk in self.blocks:
            x = blk(x, attn)
        x = self.ln(x)
        nq, no, nc = q.shape[1], o.shape[1], c.shape[1]
        qm = batch["question_mask"].unsqueeze(-1).float()
        # MiniLM's sentence embedding of the question is the mean of its token states, normalised
        question_emb = F.normalize((batch["question"] * qm).sum(1), dim=-1)
        return Encoding(hidden=x, valid=valid, question_state=(x[:, :nq] * qm).sum(1) / qm.sum(1).clamp(min=1), question_emb=question_emb,
                        option_states=x[:, nq : nq + no], probe_states=x[:, nq + no : nq + no + nc - 1], motion_embedding=motion,
                        frame_states=x[:, nq + no + nc :].reshape(B, Tm, P, d), frame_mask=batch["frame_mask"], options=batch["options"],
                        frame_emb=_padded(batch["frame_emb"], batch["frame_mask"]), where=where_t,
                        attributes=_padded(attributes, batch["frame_mask"]), frame_time=batch["frame_time"])

    def motion_token(self, where: torch.Tensor, frame_mask: torch.Tensor) -> torch.Tensor:
        """The per-frame object positions resampled to a fixed-length trajectory and embedded:
        ``(B, T, 2)`` -> ``(B, d)``."""
        rows = []
        for w, n in zip(where, frame_mask.sum(1).tolist()):
            w = w[: max(n, 1)].T[None]  # (1, 2, n)
            rows.append(F.interpolate(w, size=TRAJECTORY_POINTS, mode="linear", align_corners=True)[0].T)
        return self.motion_embedding(torch.stack(rows))

    def motion_embedding(self, trajectory: torch.Tensor) -> torch.Tensor:
        """An MLP over a trajectory ``(B, TRAJECTORY_POINTS, 2)`` and its steps -> ``(B, d)``; the
        training-only ``motion_head`` reads the motion class from it linearly, so the caption decoder
        can too."""
        steps = (trajectory[:, 1:] - trajectory[:, :-1]) * 5  # steps are small
        return self.trajectory(torch.cat([trajectory.flatten(1), steps.flatten(1)], 1))

    def grounding(self, enc: Encoding, which: str = "option_states") -> torch.Tensor:
        """Logits that each option (``which="option_states"``) or count probe (``"probe_states"``) is
        visible in each frame: ``(B, O, T)``, max over the frame's tokens. Computed once per ``enc``
        (its ``option_grounding`` / ``probe_grounding`` cache): the read-out and the training loss both need them."""
        if which not in GROUNDING_CACHE:
            raise InputError("which", which, f"choose one of {sorted(GROUNDING_CACHE)}")
        if getattr(enc, GROUNDING_CACHE[which]) is None:
            setattr(enc, GROUNDING_CACHE[which], self._grounding(enc, which))
        return getattr(enc, GROUNDING_CACHE[which])

    def _grounding(self, enc: Encoding, which: str) -> torch.Tensor:
        # query = referent + question: additive, so "the purple object ... which shape?" x "star" grounds
        # the conjunction (a token must match both) without the option token first learning to copy
        # the question's colour through attention (slow: needle and counting lagged every other kind)
        q = self.ground_q(getattr(enc, which)) + self.ground_question(enc.question_state)[:, None]  # (B, O, g)
        k = self.ground_k(enc.frame_states)  # (B, T, P, g)
        g = torch.einsum("bog,btpg->botp", q, k).amax(-1) / q.shape[-1] ** 0.5 + self.ground_bias
        # zero-shot prior: cosine of the referent's MiniLM embedding and the frame's ViT embedding
        text = enc.options if which == "option_states" else self.count_words.expand(len(g), -1, -1)
        w = self.prior_weights(enc.question_state)  # (B, 3)
        g = g + w[:, :1, None] * torch.einsum("boe,bte->bot", F.normalize(text, dim=-1), enc.frame_emb)
        # ... plus the question's: the sum fires on frames matching the referent *and* the question, the
        # conjunction of needle ("the purple object" x "star") and count probes ("red" x "stars"); its
        # weight depends on the question
        g = g + (w[:, 1:2] * torch.einsum("be,bte->bt", enc.question_emb, enc.frame_emb))[:, None]
        # ... plus the object-level detector's evidence, as a logit
        g = g + w[:, 2:, None] * torch.logit(self.detector(enc, text).clamp(1e-3, 1 - 1e-3))
        return g.masked_fill(~enc.frame_mask[:, None], -30.0)

    def option_logits(self, enc: Encoding, option_mask: torch.Tensor) -> torch.Tensor:
        """``(B, O)`` log-posteriors over the options (-inf on padding); also sets ``enc.sufficiency_logit``."""
        fm = enc.frame_mask.float()
        n = fm.sum(1).clamp(min=1)[:, None]  # (B, 1)
        p = torch.sigmoid(self.grounding(enc))  # (B, O, T); 0 on padding frames
        rank = (fm.cumsum(1) - 1).clamp(min=0) / (n - 1).clamp(min=1)  # frame order in [0, 1]
        survive = torch.cumprod(torch.cat([torch.ones_like(p[..., :1]), 1 - p[..., :-1]], -1), -1)
        first = (p * survive * rank[:, None]).sum(-1) + survive[..., -1] * (1 - p[..., -1])  # never seen -> 1
        agree = -(self.count_estimate(enc)[:, None] - self.number_value(enc)).square()
        feats = torch.stack([p.amax(-1), p.sum(-1) / n, first, agree], -1)  # (B, O, 4)
        w = self.mix(enc.question_state)[:, None]  # (B, 1, 4)
        logits = self.score(enc.option_states).squeeze(-1) + (w * feats).sum(-1)
        safe = option_mask | ~option_mask.any(1, keepdim=True)  # rows without options (captions) stay finite
        logp = F.log_softmax(logits.masked_fill(~safe, float("-inf")), -1)
        # the posterior: s * softmax + (1 - s) * uniform, s = P(the frames determine the answer)
        ever = p.amax(-1).masked_fill(~safe, 0).sort(-1, descending=True).values
        ever = torch.cat([ever, ever.new_zeros(len(ever), 2)], -1)
        # the read-out's own evidence for its two best options: a close call or an option never seen says
        # the frames may not settle the question [PROPOSED]
        pad = max(0, 2 - logits.shape[1])
        top = F.pad(logits.masked_fill(~safe, -1e4), (0, pad), value=-1e4).topk(2, -1).indices  # (B, 2)
        top_feats = F.pad(feats, (0, 0, 0, pad)).gather(1, top[..., None].expand(-1, -1, feats.shape[-1])).flatten(1)
        best2 = F.pad(logp.exp(), (0, pad)).topk(2, -1).values
        # detached: the gate reads these, the sufficiency loss must not reshape the read-out to suit it
        margin = (best2[:, 0] - best2[:, 1]).detach()
        stats = torch.cat([torch.stack([ever[:, 0], ever[:, 1], best2[:, 0], margin], -1), top_feats.detach()], -1)
        enc.sufficiency_logit = self.sufficiency_logit(enc, stats)  # the training loss supervises the gate
        suff = enc.sufficiency_logit[:, None]
        uniform = -safe.sum(1, keepdim=True).float().log()
        mixed = torch.logaddexp(F.logsigmoid(suff) + logp, F.logsigmoid(-suff) + uniform)
        return mixed.masked_fill(~option_mask, float("-inf"))

    def sufficiency_logit(self, enc: Encoding, option_stats: torch.Tensor) -> torch.Tensor:
        """``(B,)``: the logit that the frames shown determine the answer, from the question, the frames
        (pooled), how strongly the two best options were seen, the read-out's peak and its margin over the
        runner-up, the read-out features of the two best options (seen at all, how long, when first, count
        agreement), the count estimate (also as a log: "no count probe fires" is a sharp signal),
        how alike consecutive frames are, and the span of video time the frames cover and their mean
        spacing (a contiguous run of frames vs a spread: a run is likelier to miss an object that a
        spread would catch)."""
        fm = enc.frame_mask
        n = fm.sum(1).clamp(min=1).float()
        pooled = (enc.frame_states.mean(2) * fm[..., None]).sum(1) / n[:, None]
        e = F.normalize(enc.frame_emb, dim=-1)
        pair = fm[:, 1:] & fm[:, :-1]
        cos = (e[:, 1:] * e[:, :-1]).sum(-1)
        mean_cos = (cos * pair).sum(1) / pair.sum(1).clamp(min=1)
        min_cos = cos.masked_fill(~pair, 1.0).amin(1) if cos.shape[1] else n.new_ones(len(n))
        t = enc.frame_time
        span = t.masked_fill(~fm, -1).amax(1) - t.masked_fill(~fm, 2).amin(1)
        gap = span / (n - 1).clamp(min=1)
        count = self.count_estimate(enc)
        stats = torch.cat([option_stats, torch.stack([count / 5, (count + 0.1).log() / 3, mean_cos, min_cos, n.log() / 5, span, 10 * gap], -1)], -1)
        h = F.gelu(self.sufficiency_in(torch.cat([enc.question_state, pooled], -1)) + self.sufficiency_stats(stats))
        return self.sufficiency_out(h).squeeze(-1)

    def count_probe_presence(self, enc: Encoding) -> torch.Tensor:
        """``(B, C)``: P(count probe c, "a <colour c> <asked shape>", is seen in some frame)."""
        return torch.sigmoid(self.grounding(enc, "probe_states")).amax(-1)

    def count_estimate(self, enc: Encoding) -> torch.Tensor:
        """``(B,)``: how many count probes ground somewhere in the frames (soft)."""
        return self.count_probe_presence(enc).sum(-1)

    def number_value(self, enc: Encoding) -> torch.Tensor:
        """``(B, O)``: each option read as a number (supervised on counting options in training)."""
        return self.number(enc.option_states).squeeze(-1)

    def aux_logits(self, enc: Encoding) -> torch.Tensor:
        return self.aux(enc.frame_states.mean(2))  # (B, Tm, aux_classes)

    def caption_logits(self, enc: Encoding, words: torch.Tensor, rows: list[int] | None = None) -> torch.Tensor:
        """Next-word logits ``(B, n, vocab)`` for caption prefixes ``words`` ``(B, n)``; ``rows``: the items
        of ``enc`` they belong to (default: all, in order)."""
        hidden, valid = (enc.hidden, enc.valid) if rows is None else (enc.hidden[rows], enc.valid[rows])
        return self.decoder(words, hidden, ~valid)

    # ---- persistence
    def save_pretrained(self, directory: str | Path, metadata: dict | None = None) -> Path:
        return save_builtin(self, directory, KIND, metadata)

    @staticmethod
    def is_saved_in(directory: str | Path) -> bool:
        """Whether ``directory`` holds a saved builtin VLM (its config.json names this model)."""
        config = Path(directory) / "config.json"
        try:
            return config.is_file() and json.loads(config.read_text()).get("model") == KIND
        except (OSError, ValueError):
            return False

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device | None = None) -> BuiltinVLMModel:
        directory = Path(directory)
        cfg = json.loads((directory / "config.json").read_text())
        cfg.pop("model", None)
        cfg["vit"] = ViTConfig(**cfg["vit"])
        model = cls(VLMConfig(**cfg))
        model.load_state_dict(load_state_dict(directory / "model.safetensors"))
        return model.eval().to(device or "cpu")


def _padded(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scatter per-frame ``values`` ``(sum T, ...)`` into a zero-padded ``(B, Tmax, ...)`` by ``mask``."""
    out = values.new_zeros(*mask.shape, *values.shape[1:])
    out[mask] = values
    return out


def collate(items: list[dict], device: torch.device | str = "cpu") -> dict:
    """Pad a list of examples into one batch.

    Each item: ``patches`` ``(T, gh, gw, w)`` (all items in a batch share one resolution), ``frame_emb`` ``(T, 384)``,
    ``question`` ``(Lq, 384)``, ``options`` ``(O, 384)``.
    """
    B = len(items)
    Tm = max(len(it["patches"]) for it in items)
    Lq = max(len(it["question"]) for it in items)
    No = max(len(it["options"]) for it in items)
    q = torch.zeros(B, Lq, TEXT_DIM)
    o = torch.zeros(B, No, TEXT_DIM)
    qm = torch.zeros(B, Lq, dtype=torch.bool)
    om = torch.zeros(B, No, dtype=torch.bool)
    fm = torch.zeros(B, Tm, dtype=torch.bool)
    ft = torch.zeros(B, Tm)
    for i, it in enumerate(items):
        q[i, : len(it["question"])], qm[i, : len(it["question"])] = it["question"], True
        o[i, : len(it["options"])], om[i, : len(it["options"])] = it["options"], True
        t = len(it["patches"])
        fm[i, :t] = True
        # when each frame was taken, as a fraction of the video; without times, the rank (frames evenly spread)
        ft[i, :t] = torch.as_tensor(it["times"], dtype=torch.float32) if it.get("times") is not None else torch.arange(t) / max(1, t - 1)
    patches = torch.cat([it["patches"] for it in items]).to(device)
    frame_emb = torch.cat([it["frame_emb"] for it in items]).to(device)
    return {"patches": patches, "frame_emb": frame_emb, "question": q.to(device), "options": o.to(device), "question_mask": qm.to(device),
            "option_mask": om.to(device), "frame_mask": fm.to(device), "frame_time": ft.to(device)}


def frames_to_tensor(frames: np.ndarray, device) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(frames), device=device).permute(0, 3, 1, 2).float().div(127.5).sub(1)
