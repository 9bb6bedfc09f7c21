"""The built-in instance reasoner: which of K candidate tracks a temporal query refers to [PROPOSED].

The built-in VLM cannot read set-of-mark numbers nor answer yes/no about "the circle that disappears
first", so CLEAR's builtin backend chooses among candidate tracks with this small model instead
(``training/instances.py`` trains it on worldgen vrs clips). It sees only what a tracker gives it:
per candidate and frame, cheap features computed from the frames and that candidate's masks
(presence, centroid, area, bbox size and fill, mean colour, velocity, wall contact, time), per pair
of candidates and frame, their contact and relative position (what hidden_behind / collides_with
need), each candidate's clip summary beside the set's extremes (the fastest, the last to appear and
the one that never moves are relative facts), and its **appearance read in language space**: the
builtin ViT's pooled output (MiniLM sentence space) over the candidate on its largest frame, with
everything else blacked out. The query's frozen MiniLM token states are read by attention: a few
learned heads weigh the tokens, and each candidate gets each head's cosine between its appearance and
the weighted tokens (so "the red circle ..." and "... behind the orange square" can be matched to
the right candidates without a parser). A transformer over [query tokens, candidate tokens, pair
tokens, a "none" token] gives logits over ``[none, candidate 1, ..., candidate K]`` [PROPOSED].

``select`` is CLEAR's causal-counterfactual choice (specs/clear.md B.3) on the candidate set: the
forward choice over the full set; sufficiency of i = P(i) against "none" with only i shown;
necessity of i = 1 - P(none) with i removed; the score combination and the decision rule are
``planners.counterfactual``'s, shared with the VLM-based ``CounterfactualSelector``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.errors import InputError
from core.weights_io import load_state_dict
from planners.builtin.text import EMBED_DIM
from planners.builtin.vit import save_builtin
from planners.counterfactual import CandidateScore, Mark, Selection, decide, combined_score, shortlist

KIND = "builtin-instance-reasoner"
VIT_DIR = Path(__file__).resolve().parents[2] / "weights" / "builtin" / "vit"  # the appearance encoder
OWN_FEATURES = 17  # per candidate and frame (see track_features)
PAIR_FEATURES = 8  # per ordered pair of candidates and frame
SUMMARY_FEATURES = 8  # per candidate, over the clip


@dataclass
class InstanceReasonerConfig:
    width: int = 128
    depth: int = 3
    heads: int = 4
    own_width: int = 64  # the temporal convolutions over a candidate's frames
    pair_width: int = 32  # ... over a pair's frames
    max_candidates: int = 16  # slot embeddings; select() keeps at most this many candidates
    dropout: float = 0.0
    text_dim: int = EMBED_DIM
    match_heads: int = 4  # attention reads of the query tokens, each matched against every candidate's appearance


# ---------------------------------------------------------------------------- features


def dilate(m: np.ndarray) -> np.ndarray:
    """3x3 binary dilation of ``(..., H, W)`` bool stacks (shifted maxima, no OpenCV loop per frame)."""
    out = m.copy()
    out[..., 1:, :] |= m[..., :-1, :]
    out[..., :-1, :] |= m[..., 1:, :]
    o2 = out.copy()
    o2[..., :, 1:] |= out[..., :, :-1]
    o2[..., :, :-1] |= out[..., :, 1:]
    return o2


def track_features(frames: np.ndarray, masks: np.ndarray) -> dict[str, np.ndarray]:
    """Features of K candidate tracks: ``masks`` bool ``(K, T, H, W)`` over uint8 ``frames`` ``(T, H, W, 3)``.

    Returns ``own (K, T, 17)``: presence, centroid x/y, area, bbox w/h, fill (area / bbox area),
    mean RGB, velocity x/y, contact with the left/right/top/bottom border, t/T; ``pair (K, K, T, 8)``:
    fraction of i's dilated rim on j, the same for j on i, both present, dx, dy, distance, j present,
    j present with i absent (i hidden or gone while j is there); ``summary (K, 8)``: first and last
    present frame, number of visible spans, fraction present, mean speed, net displacement, wall-contact
    frames, mean area. Positions are in units of the frame side; absent frames hold the last seen value.
    """
    m = np.asarray(masks, bool)
    k, t_len, h, w = m.shape
    s = float(max(h, w))
    area = m.sum((2, 3)).astype(np.float32)  # (K, T)
    present = area > 0
    ys, xs = np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32)
    row, col = m.any(3), m.any(2)  # (K, T, H), (K, T, W)
    safe = np.maximum(area, 1)
    cx = (m.sum(2) * xs).sum(-1) / safe / s
    cy = (m.sum(3) * ys).sum(-1) / safe / s
    x0 = np.where(col.any(-1), col.argmax(-1), 0)
    x1 = np.where(col.any(-1), w - 1 - col[..., ::-1].argmax(-1), 0)
    y0 = np.where(row.any(-1), row.argmax(-1), 0)
    y1 = np.where(row.any(-1), h - 1 - row[..., ::-1].argmax(-1), 0)
    bw, bh = (x1 - x0 + 1) * present, (y1 - y0 + 1) * present
    fill = area / np.maximum(bw * bh, 1)
    rgb = np.einsum("kthw,thwc->ktc", m.astype(np.float32), np.asarray(frames, np.float32)) / safe[..., None] / 255.0
    walls = np.stack([(x0 <= 0), (x1 >= w - 1), (y0 <= 0), (y1 >= h - 1)], -1) & present[..., None]
    # hold the last seen centroid through absent frames so velocities stay meaningful
    cxh, cyh = cx.copy(), cy.copy()
    for t in range(1, t_len):
        gone = ~present[:, t]
        cxh[gone, t], cyh[gone, t] = cxh[gone, t - 1], cyh[gone, t - 1]
    both = np.zeros_like(present)
    both[:, 1:] = present[:, 1:] & present[:, :-1]
    vx = np.zeros_like(cx)
    vy = np.zeros_like(cy)
    vx[:, 1:], vy[:, 1:] = np.diff(cx, axis=1) * both[:, 1:] * 10, np.diff(cy, axis=1) * both[:, 1:] * 10
    tt = np.broadcast_to(np.arange(t_len, dtype=np.float32) / t_len, (k, t_len))
    own = np.stack([present, cxh, cyh, area / (h * w) * 10, bw / s, bh / s, fill, rgb[..., 0], rgb[..., 1], rgb[..., 2], vx, vy,
                    walls[..., 0], walls[..., 1], walls[..., 2], walls[..., 3], tt], -1).astype(np.float32)
    # pairs: contact through a one-pixel rim, relative position
    rim = dilate(m) & ~m
    rim_n = np.maximum(rim.sum((2, 3)), 1).astype(np.float32)  # (K, T)
    touch = np.einsum("ithw,jthw->ijt", rim.astype(np.float32), m.astype(np.float32)) / rim_n[:, None]  # i's rim on j
    pi, pj = present[:, None, :], present[None, :, :]
    dx, dy = cxh[None] - cxh[:, None], cyh[None] - cyh[:, None]
    pair = np.stack([touch, touch.transpose(1, 0, 2), pi & pj, dx, dy, np.sqrt(dx**2 + dy**2), np.broadcast_to(pj, touch.shape),
                     ~pi & pj], -1).astype(np.float32)
    # clip summaries
    any_p = present.any(1)
    first = np.where(any_p, present.argmax(1), t_len) / t_len
    last = np.where(any_p, t_len - 1 - present[:, ::-1].argmax(1), -1) / t_len
    spans = (np.diff(present.astype(np.int8), axis=1, prepend=0) == 1).sum(1) / 2.0
    speed = np.sqrt(vx**2 + vy**2).sum(1) / np.maximum(both.sum(1), 1)
    fi, ar = present.argmax(1), np.arange(k)
    disp = np.sqrt((cxh[:, -1] - cxh[ar, fi]) ** 2 + (cyh[:, -1] - cyh[ar, fi]) ** 2)
    summary = np.stack([first, last, spans, present.mean(1), speed, disp, walls.any(-1).mean(1) * 4, area.mean(1) / (h * w) * 10], -1)
    return {"own": own, "pair": pair, "summary": summary.astype(np.float32)}


def candidate_views(frames: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Each candidate alone: its largest frame with everything off its (one-pixel dilated) mask black,
    uint8 ``(K, H, W, 3)`` [PROPOSED: black measured 99% colour / 95% shape zero-shot with the builtin ViT
    on 318 TRAIN objects, the frame's median colour 99% / 93%]."""
    m = np.asarray(masks, bool)
    best = m.sum((2, 3)).argmax(1)
    k = np.arange(len(m))
    keep = dilate(m[k, best])
    return np.where(keep[..., None], np.asarray(frames)[best], 0).astype(np.uint8)


def appearance(vit, frames: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Unit appearance vectors ``(K, 384)`` in MiniLM sentence space: ``vit.embed`` of ``candidate_views``."""
    if not len(masks):
        return np.zeros((0, EMBED_DIM), np.float32)
    return np.asarray(vit.embed(candidate_views(frames, masks)), np.float32)


def subset_features(feats: dict[str, np.ndarray], keep: Sequence[int]) -> dict[str, np.ndarray]:
    """The features of the candidates ``keep`` (in that order), as if only they had been proposed."""
    keep = np.asarray(keep, np.int64)
    return {"own": feats["own"][keep], "pair": feats["pair"][keep][:, keep], "summary": feats["summary"][keep],
            "appearance": feats["appearance"][keep]}


def collate(items: Sequence[dict[str, np.ndarray]], queries: Sequence[torch.Tensor], slots: Sequence[np.ndarray] | None = None) -> dict:
    """A padded batch from per-example features and query token states ``(L, 384)``.

    ``slots``: each example's slot index per candidate (training draws them at random so no slot
    means anything; inference uses 0..K-1)."""
    b = len(items)
    k = max(1, max(len(f["own"]) for f in items))
    t_len = items[0]["own"].shape[1] if any(len(f["own"]) for f in items) else 1
    ql = max(len(q) for q in queries)
    own = torch.zeros(b, k, t_len, OWN_FEATURES)
    pair = torch.zeros(b, k, k, t_len, PAIR_FEATURES)
    summ = torch.zeros(b, k, SUMMARY_FEATURES)
    app = torch.zeros(b, k, EMBED_DIM)
    cmask = torch.zeros(b, k, dtype=torch.bool)
    slot = torch.zeros(b, k, dtype=torch.long)
    q = torch.zeros(b, ql, queries[0].shape[-1])
    qmask = torch.zeros(b, ql, dtype=torch.bool)
    for n, (f, qt) in enumerate(zip(items, queries)):
        kk = len(f["own"])
        if kk:
            own[n, :kk], pair[n, :kk, :kk], summ[n, :kk], app[n, :kk] = (torch.from_numpy(np.ascontiguousarray(f[x], np.float32))
                                                                         for x in ("own", "pair", "summary", "appearance"))
            cmask[n, :kk] = True
            slot[n, :kk] = torch.as_tensor(slots[n] if slots is not None else np.arange(kk))
        q[n, : len(qt)], qmask[n, : len(qt)] = qt, True
    return {"own": own, "pair": pair, "summary": summ, "appearance": app, "cand_mask": cmask, "slot": slot, "query": q, "query_mask": qmask}


# ---------------------------------------------------------------------------- model


def _relative(summary: torch.Tensor, cand_mask: torch.Tensor) -> torch.Tensor:
    """``(B, K, 3S)``: each candidate's summary, minus the set's max and minus the set's min (over real
    candidates): "the fastest", "appears last" and "never moves" are facts about the set."""
    m = cand_mask[..., None]
    hi = summary.masked_fill(~m, float("-inf")).amax(1, keepdim=True)
    lo = summary.masked_fill(~m, float("inf")).amin(1, keepdim=True)
    return torch.cat([summary, (summary - hi).masked_fill(~m, 0.0), (summary - lo).masked_fill(~m, 0.0)], -1)


class TemporalPool(nn.Module):
    """Per-frame features ``(N, T, F)`` -> one vector ``(N, out)``: two temporal convolutions, mean + max."""

    def __init__(self, in_dim: int, width: int, out: int):
        super().__init__()
        self.inp = nn.Linear(in_dim, width)
        self.conv1 = nn.Conv1d(width, width, 5, padding=2)
        self.conv2 = nn.Conv1d(width, width, 5, padding=2)
        self.out = nn.Linear(2 * width, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x).transpose(1, 2)
        h = h + F.gelu(self.conv1(F.gelu(h)))
        h = h + F.gelu(self.conv2(h))
        return self.out(torch.cat([h.mean(-1), h.amax(-1)], -1))


class BuiltinInstanceReasoner(nn.Module):
    backend = "builtin"

    def __init__(self, config: InstanceReasonerConfig | None = None):
        super().__init__()
        self.config = c = config or InstanceReasonerConfig()
        d = c.width
        self.own = TemporalPool(OWN_FEATURES, c.own_width, d)
        self.summary = nn.Linear(3 * SUMMARY_FEATURES, d)  # the summary, minus the set's max, minus the set's min
        self.appearance = nn.Linear(c.text_dim, d)
        self.match_heads = nn.Linear(c.text_dim, c.match_heads)  # which query tokens each head reads
        self.match = nn.Linear(2 * c.match_heads, d)  # each head's match, and its distance to the set's best
        self.pair = TemporalPool(PAIR_FEATURES, c.pair_width, d)
        self.pair_a, self.pair_b = nn.Linear(d, d), nn.Linear(d, d)  # the pair's two candidates' appearance
        self.text = nn.Linear(c.text_dim, d)
        self.slots = nn.Embedding(c.max_candidates, d)
        self.slot_b = nn.Linear(d, d, bias=False)
        self.token_type = nn.Embedding(4, d)  # query, candidate, pair, none
        layer = nn.TransformerEncoderLayer(d, c.heads, 4 * d, c.dropout, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, c.depth, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Sequential(nn.Linear(2 * d, d), nn.GELU(), nn.Linear(d, 1))
        self.none_head = nn.Linear(d, 1)
        self._text_encoder = None
        self._encoders: dict = {}  # the builtin ViT, loaded on first use: a plain dict keeps it out of this model's weights

    @property
    def device(self) -> torch.device:
        return self.token_type.weight.device

    def forward(self, batch: dict) -> torch.Tensor:
        """Logits ``(B, 1 + K)`` over ``[none, candidate 1..K]`` (padding candidates at -inf)."""
        b, k, t_len, _ = batch["own"].shape
        d = self.config.width
        cm = batch["cand_mask"]
        slot = self.slots(batch["slot"])
        cand = (self.own(batch["own"].reshape(b * k, t_len, -1)).view(b, k, d) + self.summary(_relative(batch["summary"], cm))
                + self.appearance(batch["appearance"]) + self.match(self.query_match(batch)))
        pm = cm[:, :, None] & cm[:, None] & ~torch.eye(k, dtype=torch.bool, device=cm.device)
        pair = cand.new_zeros(b, k, k, d)
        pair[pm] = self.pair(batch["pair"][pm]).to(pair.dtype)  # only real pairs are encoded
        pair = pair + self.pair_a(cand)[:, :, None] + self.pair_b(cand)[:, None] + slot[:, :, None] + self.slot_b(slot)[:, None]
        q = self.text(batch["query"]) + self.token_type.weight[0]
        none = self.token_type.weight[3].expand(b, 1, d)
        x = torch.cat([q, cand + slot + self.token_type.weight[1], pair.reshape(b, k * k, d) + self.token_type.weight[2], none], 1)
        valid = torch.cat([batch["query_mask"], cm, pm.reshape(b, k * k), torch.ones(b, 1, dtype=torch.bool, device=cm.device)], 1)
        h = self.ln(self.encoder(x, src_key_padding_mask=~valid))
        lq = batch["query"].shape[1]
        hc = h[:, lq : lq + k]
        hp = h[:, lq + k : lq + k + k * k].reshape(b, k, k, d).masked_fill(~pm[..., None], -1e4).amax(2)
        hp = torch.where(pm.any(2, keepdim=True), hp, torch.zeros_like(hp))
        logits = self.head(torch.cat([hc, hp], -1)).squeeze(-1).masked_fill(~cm, float("-inf"))
        return torch.cat([self.none_head(h[:, -1]), logits], 1)

    def query_match(self, batch: dict) -> torch.Tensor:
        """``(B, K, 2H)``: per head, the cosine between each candidate's appearance and the head's weighted
        mean of the query tokens, then that minus the set's best (the query read by attention)."""
        q, qm, cm = batch["query"], batch["query_mask"], batch["cand_mask"]
        weights = self.match_heads(q).masked_fill(~qm[..., None], float("-inf")).softmax(1)  # (B, L, H)
        read = F.normalize(torch.einsum("blh,bld->bhd", weights, q), dim=-1)
        cos = torch.einsum("bkd,bhd->bkh", F.normalize(batch["appearance"], dim=-1), read)
        best = cos.masked_fill(~cm[..., None], float("-inf")).amax(1, keepdim=True)
        return torch.cat([cos, (cos - best).masked_fill(~cm[..., None], 0.0)], -1)

    # ---- inference on clips
    def query_tokens(self, query: str) -> torch.Tensor:
        if self._text_encoder is None:
            from planners.builtin.text import MiniLM

            self._text_encoder = MiniLM()
        return self._text_encoder.tokens([query])[0].float()

    def features(self, frames: np.ndarray, masks: np.ndarray) -> dict[str, np.ndarray]:
        """``track_features`` and the candidates' ``appearance`` (the shipped builtin ViT, loaded once)."""
        if "vit" not in self._encoders:
            from planners.builtin.vit import BuiltinViT

            self._encoders["vit"] = BuiltinViT.from_pretrained(VIT_DIR, device=self.device)
        return {**track_features(frames, masks), "appearance": appearance(self._encoders["vit"], frames, masks)}

    @torch.no_grad()
    def probabilities(self, feats: Sequence[dict[str, np.ndarray]], query: str) -> list[np.ndarray]:
        """``[P(none), P(candidate 1), ...]`` for each candidate set in ``feats`` (one batched pass)."""
        qt = self.query_tokens(query)
        batch = {k: v.to(self.device) for k, v in collate(list(feats), [qt] * len(feats)).items()}
        p = torch.softmax(self(batch).float(), -1).cpu().numpy()
        return [p[n, : 1 + len(f["own"])] for n, f in enumerate(feats)]

    def select(self, frames: np.ndarray, marks: Sequence[Mark], query: str, checks: bool = True, shortlist_size: int = 3,
               min_forward: float = 0.05, accept: float = 0.5, w_suff: float = 1.0, w_nec: float = 1.0) -> Selection:
        """The counterfactual choice of the candidate ``query`` refers to (module docstring); the same
        ``Selection`` as ``CounterfactualSelector.select``, checks computed on the candidate set."""
        from planners.counterfactual import _masks
        from planners.protocol import check_frames

        if not isinstance(query, str) or not query.strip():
            raise InputError("query", query, "pass what to segment as a non-empty string")
        frames = check_frames(frames)
        if not marks:
            return Selection(None, False, 1.0, [], ["no candidates were proposed: no object matches"])
        if len(marks) > self.config.max_candidates:
            raise InputError("marks", len(marks), f"the instance reasoner takes at most {self.config.max_candidates} candidates; keep the best first")
        t0 = time.perf_counter()
        masks = np.stack([_masks(m.masks, frames, f"marks[{i}].masks") for i, m in enumerate(marks)])
        sel = self.choose(self.features(frames, masks), [m.number for m in marks], query, checks, shortlist_size, min_forward, accept,
                          w_suff, w_nec)
        sel.reasoning.append(f"instance reasoner: {1000 * (time.perf_counter() - t0):.1f} ms")
        return sel

    def choose(self, feats: dict[str, np.ndarray], numbers: Sequence[int], query: str, checks: bool = True, shortlist_size: int = 3,
               min_forward: float = 0.05, accept: float = 0.5, w_suff: float = 1.0, w_nec: float = 1.0) -> Selection:
        """``select``'s rule on candidates already read (``features``), numbered ``numbers`` (training measures it this way)."""
        p = self.probabilities([feats], query)[0]
        p_none = float(p[0])
        scores = [CandidateScore(number, float(p[i + 1])) for i, number in enumerate(numbers)]
        lines = ["forward choice: " + ", ".join(f"#{s.number} {s.forward:.2f}" for s in scores) + f", none {p_none:.2f}"]
        order, short = shortlist(scores, shortlist_size, min_forward)
        if checks:
            n = len(numbers)
            sets = [subset_features(feats, [i]) for i in short] + [subset_features(feats, [j for j in range(n) if j != i]) for i in short]
            probs = self.probabilities(sets, query)
            for r, i in enumerate(short):
                keep, rest = probs[r], probs[len(short) + r]
                scores[i].sufficiency = float(keep[1])
                scores[i].necessity = float(rest[0]) if n > 1 else 1.0
                lines.append(f"#{scores[i].number}: alone it is chosen at {scores[i].sufficiency:.2f}; without it, {1 - scores[i].necessity:.2f} that another is")
        for i in short:
            scores[i].total = combined_score(scores[i], w_suff, w_nec)
        return decide(scores, order, short, p_none, lines, checks, accept)

    # ---- persistence
    def save_pretrained(self, directory: str | Path, metadata: dict | None = None) -> Path:
        return save_builtin(self, directory, KIND, metadata)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device | None = None) -> BuiltinInstanceReasoner:
        directory = Path(directory)
        cfg = json.loads((directory / "config.json").read_text())
        if cfg.pop("model", None) != KIND:
            raise InputError("directory", str(directory), f"config.json does not name {KIND}: pass a folder saved by BuiltinInstanceReasoner")
        model = cls(InstanceReasonerConfig(**cfg))
        model.load_state_dict(load_state_dict(directory / "model.safetensors"))
        return model.eval().to(device or "cpu")


__all__ = ["BuiltinInstanceReasoner", "InstanceReasonerConfig", "track_features", "appearance", "candidate_views", "subset_features",
           "collate", "dilate", "KIND"]
