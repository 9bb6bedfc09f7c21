"""The VLM's training objective: answer, grounding, sufficiency, counting, per-frame presence, captions, motion."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from planners.builtin.text import MiniLM
from planners.builtin.vlm import BuiltinVLMModel, Encoding, collate, frames_to_tensor
from training.vlm.data import CAPTION_PROMPT


class VLMObjective:
    """``loss_fn`` for the Trainer over a list of items (``training.vlm.data``); also prepares evaluation batches."""

    def __init__(self, text: MiniLM, vocab: list[str], aux_weight: float = 0.5, caption_weight: float = 1.0,
                 ground_weight: float = 1.0, sufficiency_weight: float = 1.0, count_weight: float = 0.2, fast_vit: bool = False):
        self.text, self.vocab = text, {w: i for i, w in enumerate(vocab)}
        self.fast_vit = fast_vit  # training only: evaluation runs the ViT in float32, as inference does
        self.aux_weight, self.caption_weight, self.ground_weight = aux_weight, caption_weight, ground_weight
        self.sufficiency_weight, self.count_weight = sufficiency_weight, count_weight

    def tokens(self, caption: str, max_len: int) -> list[int]:
        return [1] + [self.vocab[w] for w in caption.split()][: max_len - 2] + [2]

    def prepare(self, model: BuiltinVLMModel, items: list[dict]) -> dict:
        dev = model.device
        frames = np.concatenate([it["frames"] for it in items])
        # the frozen ViT dominates a step's cost; bfloat16 autocast makes it cheaper where bf16 is native
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.fast_vit):
            patches, emb = model.vision(frames_to_tensor(frames, dev))
        patches, emb = patches.float(), emb.float()
        out, k = [], 0
        questions = [it.get("question", CAPTION_PROMPT) for it in items]
        qtok = self.text.tokens(questions)
        for it, q in zip(items, qtok):
            t = len(it["frames"])
            opts = self.text.encode(it["options"]) if it.get("options") else torch.zeros(0, 384)
            out.append({"patches": patches[k : k + t], "frame_emb": emb[k : k + t], "question": q, "options": opts, "times": it.get("times")})
            k += t
        return collate(out, dev)

    def __call__(self, model: BuiltinVLMModel, items: list[dict]) -> tuple[torch.Tensor, dict]:
        trajectories = [it for it in items if "trajectories" in it]
        items = [it for it in items if "frames" in it]
        batch = self.prepare(model, items)
        enc = model.encode(batch)
        dev = model.device
        qa = [i for i, it in enumerate(items) if "target" in it]
        logs = {}
        loss = torch.zeros((), device=dev)
        if qa:
            logits = model.option_logits(enc, batch["option_mask"])[qa]
            tgt = torch.zeros_like(logits)
            for row, i in enumerate(qa):
                tgt[row, : len(items[i]["target"])] = torch.from_numpy(items[i]["target"])
            logp = F.log_softmax(logits, -1).masked_fill(tgt == 0, 0)
            qa_loss = -(tgt * logp).sum(-1).mean()
            loss = loss + qa_loss
            det = [row for row, i in enumerate(qa) if items[i]["determined"]]
            if det:
                logs["qa_acc_determined"] = float((logits[det].argmax(-1).cpu() == torch.tensor([items[qa[r]]["answer_index"] for r in det])).float().mean())
            logs["qa_loss"] = float(qa_loss.detach())
            g_loss = self.ground_loss(model, enc, [items[i] for i in qa], qa)
            loss = loss + self.ground_weight * g_loss
            logs["ground_loss"] = float(g_loss.detach())
            determined = torch.tensor([float(items[i]["determined"]) for i in qa], device=dev)
            s_loss = F.binary_cross_entropy_with_logits(enc.sufficiency_logit[qa], determined)  # set by option_logits
            loss = loss + self.sufficiency_weight * s_loss
            logs["sufficiency_loss"] = float(s_loss.detach())
            counting = [i for i in qa if items[i]["kind"] == "counting"]
            if counting:
                c_loss = self.count_loss(model, enc, items, counting)
                loss = loss + self.count_weight * c_loss
                logs["count_loss"] = float(c_loss.detach())
        aux_pred = model.aux_logits(enc)[batch["frame_mask"]]
        aux_tgt = torch.from_numpy(np.concatenate([it["aux"] for it in items])).to(dev)
        aux_loss = F.binary_cross_entropy_with_logits(aux_pred, aux_tgt)
        loss = loss + self.aux_weight * aux_loss
        logs["aux_loss"] = float(aux_loss.detach())
        cap = [i for i, it in enumerate(items) if "caption" in it]
        if cap:
            L = model.config.max_caption
            seqs = [self.tokens(items[i]["caption"], L) for i in cap]
            words = torch.zeros(len(cap), max(map(len, seqs)), dtype=torch.long)
            for r, s in enumerate(seqs):
                words[r, : len(s)] = torch.tensor(s)
            words = words.to(dev)
            logits = model.caption_logits(enc, words[:, :-1], rows=cap)
            cap_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), words[:, 1:].reshape(-1), ignore_index=0)
            loss = loss + self.caption_weight * cap_loss
            logs["caption_loss"] = float(cap_loss.detach())
            # motion needs positions compared across frames: supervise where the object is in each
            # frame and which motion the clip shows (training-only heads)
            fm = batch["frame_mask"][cap].float()[..., None]
            motion_logits = model.motion_head(enc.motion_embedding[cap])
            motion_loss = F.cross_entropy(motion_logits, torch.tensor([items[i]["motion"] for i in cap], device=dev))
            centre = torch.zeros(len(cap), fm.shape[1], 2, device=dev)
            for r, i in enumerate(cap):
                centre[r, : len(items[i]["centre"])] = torch.from_numpy(items[i]["centre"])
            where_loss = ((enc.where[cap] - centre).square() * fm).sum() / fm.sum() / 2
            # x5: Adam is scale-free per parameter, but the position head also gets the QA losses' gradients
            loss = loss + self.caption_weight * (motion_loss + 5 * where_loss)
            logs["motion_loss"], logs["where_loss"] = float(motion_loss.detach()), float(where_loss.detach())
        for t in trajectories:
            logits = model.motion_head(model.motion_embedding(torch.from_numpy(t["trajectories"]).to(dev)))
            traj_loss = F.cross_entropy(logits, torch.from_numpy(t["motions"]).to(dev))
            loss = loss + self.caption_weight * traj_loss
            logs["trajectory_loss"] = float(traj_loss.detach())
        return loss, logs

    @staticmethod
    def count_loss(model: BuiltinVLMModel, enc: Encoding, items: list[dict], rows: list[int]) -> torch.Tensor:
        """Counting, supervised in its two halves: the soft count of grounded probes against how many
        probes' referents the shown frames contain, and each option read as its number; the answer
        loss alone leaves both badly off (card: "Design notes and measurements")."""
        dev = model.device
        count = model.count_estimate(enc)[rows]
        seen = torch.tensor([float(np.nan_to_num(items[i]["probe_ground"]).max(1).sum()) for i in rows], device=dev)
        values = model.number_value(enc)[rows]
        n_opt = [len(items[i]["options"]) for i in rows]
        tgt = torch.zeros_like(values)
        for r, i in enumerate(rows):
            tgt[r, : n_opt[r]] = torch.tensor([float(o) for o in items[i]["options"]])
        ok = torch.arange(values.shape[1], device=dev)[None] < torch.tensor(n_opt, device=dev)[:, None]
        return F.smooth_l1_loss(count, seen) + F.smooth_l1_loss(values[ok], tgt[ok])

    @staticmethod
    def ground_loss(model: BuiltinVLMModel, enc: Encoding, items: list[dict], rows: list[int]) -> torch.Tensor:
        """BCE of the grounding timelines (options and count probes) against which frames show their referents."""
        terms = []
        for which, key in (("option_states", "opt_ground"), ("probe_states", "probe_ground")):
            logits = model.grounding(enc, which)[rows]
            tgt = torch.full_like(logits, float("nan"))
            for r, it in enumerate(items):
                t = torch.from_numpy(it[key])[: logits.shape[1]]  # a model may have fewer count probes
                tgt[r, : t.shape[0], : t.shape[1]] = t
            ok = ~torch.isnan(tgt)
            if ok.any():
                terms.append(F.binary_cross_entropy_with_logits(logits[ok], tgt[ok]))
        return torch.stack(terms).mean() if terms else torch.zeros((), device=model.device)
