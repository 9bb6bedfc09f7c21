"""Latent slots on a transformers Qwen-VL model (Qwen2.5-VL, Qwen3-VL): the hf backend of ``planners.latent``.

The prefix is Qwen's chat layout with the image's merged vision tokens in place::

    <|im_start|>user\\n<|vision_start|>{image tokens}<|vision_end|>{question}\\n(A) ..\\n(B) ..\\n{instruction}<|im_end|>\\n
    <|im_start|>assistant\\n

then ``<|lvr_start|> s_1 .. s_K <|lvr_end|>`` and the answer letter. The three markers are LVR's, added to the
tokenizer (and the embedding table resized) when a checkpoint lacks them; a checkpoint without latent-slot
training emits ``<|lvr_start|>`` only by chance, so the slots are forced (``answer``) and its answer is what
the base model makes of them. Slot targets and maps live in the LM's input space: the merged vision tokens.

The language model runs on ``inputs_embeds`` with an explicit causal mask and M-RoPE positions (the vision block
on its (t, h, w) grid, text sequential after the block's largest position, slots continuing as text), through
``planners.semantic.backbones.HFPlannerBackbone``. ``extend`` recomputes the whole sequence: a few forwards
per answer at K <= 32; a key/value cache is the next optimisation at real sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from core.errors import InputError

MARKERS = ("<|lvr_start|>", "<|lvr|>", "<|lvr_end|>")
SLOTS_FILE = "latent_slots.json"
DEFAULT_SLOTS = 8  # LVR's best fixed K overall [PROPOSED as the default for an untrained checkpoint]
INSTRUCTION = "Answer with the option's letter from the given choices directly."
LETTERS = "ABCDEFGHIJ"


class HFLatentReasoner:
    """A Qwen-VL checkpoint with latent slots: ``answer`` for the pipeline, ``prefix`` / ``run`` / ``begin`` /
    ``extend`` as a ``planners.latent.LatentCore`` for SFT and GePO."""

    backend = "hf"

    def __init__(self, model, processor, num_slots: int = DEFAULT_SLOTS, slot_norm: str = "image"):
        from planners.semantic.backbones import HFPlannerBackbone

        tok = processor.tokenizer
        missing = [m for m in MARKERS if tok.convert_tokens_to_ids(m) in (None, tok.unk_token_id)]
        if missing:
            tok.add_special_tokens({"additional_special_tokens": list(MARKERS)})
            model.resize_token_embeddings(len(tok))
        self.backbone = HFPlannerBackbone(model, processor)
        self.model, self.processor = model, processor
        self.start_id, self.slot_id, self.end_id = (int(tok.convert_tokens_to_ids(m)) for m in MARKERS)
        self.trained_slots, self.slot_norm = int(num_slots), slot_norm

    # ---- persistence
    @classmethod
    def from_pretrained(cls, path: str | Path, *, device=None, dtype=None, trust_remote_code: bool = False) -> HFLatentReasoner:
        from planners.hf import HFVisionLanguageModel

        vlm = HFVisionLanguageModel.from_pretrained(path, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
        meta = Path(path) / SLOTS_FILE
        info = json.loads(meta.read_text()) if meta.is_file() else {}
        return cls(vlm.model, vlm.processor, info.get("num_slots", DEFAULT_SLOTS), info.get("slot_norm", "image"))

    def save_pretrained(self, path: str | Path) -> Path:
        path = Path(path)
        self.backbone.save_pretrained(path)
        (path / SLOTS_FILE).write_text(json.dumps({"num_slots": self.trained_slots, "slot_norm": self.slot_norm}))
        return path

    def to(self, device=None, dtype=None) -> HFLatentReasoner:
        self.model.to(device=device, dtype=dtype)
        return self

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ---- the prefix
    def _text(self, text: str) -> torch.Tensor:
        return torch.tensor(self.backbone.encode_text(text), dtype=torch.long)

    def prefix(self, images: list[np.ndarray], questions: list[str], options: list[list[str]]) -> dict:
        """Encode a batch (every image must give the same vision grid: resize them alike)."""
        from planners.semantic.layout import grid_positions

        rows, grids, visuals = [], [], []
        for image, q, opts in zip(images, questions, options):
            vis = self.backbone.encode_visual(image, "image")  # (1, h, w, hidden)
            tokens = vis.tokens
            grid = tuple(tokens.shape[:3])
            lettered = "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(opts))
            head = self._text("<|im_start|>user\n<|vision_start|>")
            tail = self._text(f"<|vision_end|>{q}\n{lettered}\n{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n")
            embed = self.backbone.embed_tokens
            dev = self.device
            e_head, e_tail = embed(head.to(dev))[None], embed(tail.to(dev))[None]
            v = tokens.reshape(1, -1, tokens.shape[-1]).to(e_head.dtype).to(dev)
            pos = [torch.arange(len(head)).expand(3, -1)]
            pos.append(grid_positions(len(head), grid, 1))
            nxt = int(pos[-1].max()) + 1
            pos.append(nxt + torch.arange(len(tail)).expand(3, -1))
            rows.append((torch.cat([e_head, v, e_tail], 1), torch.cat(pos, 1)))
            grids.append(grid)
            visuals.append(v)
        if len({g for g in grids}) > 1 or len({r[0].shape[1] for r in rows}) > 1:
            raise InputError("images", grids, "batch items need the same vision grid and prompt length; run them one at a time")
        embeds = torch.cat([r[0] for r in rows])
        positions = torch.stack([r[1] for r in rows], 1).to(self.device)  # (3, B, L)
        return {"embeds": embeds, "positions": positions, "image": torch.cat(visuals).float(), "grid": grids[0][1:]}

    # ---- LatentCore
    def token_embeds(self, ids: torch.Tensor) -> torch.Tensor:
        return self.backbone.embed_tokens(ids.to(self.device))

    def run(self, prefix: dict, tail: torch.Tensor, answer: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        # ``answer`` changes nothing here: the wrapped VLM keeps the spec's plain causal sequence
        from planners.semantic.layout import additive_mask

        x = torch.cat([prefix["embeds"], tail.to(prefix["embeds"].dtype)], 1)
        b, n, L = len(x), tail.shape[1], x.shape[1]
        nxt = prefix["positions"].amax(-1, keepdim=True) + 1  # (3, B, 1)
        pos = torch.cat([prefix["positions"], nxt + torch.arange(n, device=x.device)], -1)
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril().expand(b, L, L)
        dtype = self.model.get_input_embeddings().weight.dtype
        out = self.model.model(inputs_embeds=x.to(dtype), attention_mask=additive_mask(causal, dtype), position_ids=pos,
                               use_cache=False)
        h = out.last_hidden_state
        m = prefix["embeds"].shape[1]
        return h[:, m:].float(), self.model.lm_head(h[:, m - 1 :]).float()

    def begin(self, prefix: dict) -> tuple[dict, torch.Tensor]:
        state = {"prefix": prefix, "tail": prefix["embeds"][:, :0]}
        _, logits = self.run(prefix, state["tail"])
        return state, logits[:, -1]

    def extend(self, state: dict, embeds: torch.Tensor, answer: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        n = embeds.shape[1]
        state["tail"] = torch.cat([state["tail"], embeds.to(state["tail"].dtype)], 1)
        hidden, logits = self.run(state["prefix"], state["tail"])
        return hidden[:, -n:], logits[:, -n:]

    def image_norm(self, prefix: dict) -> torch.Tensor:
        return prefix["image"].norm(dim=-1).mean(-1)

    def letter_ids(self, n: int) -> list[int]:
        ids = [self.backbone.encode_text(LETTERS[i])[0] for i in range(n)]
        if len(set(ids)) < n:
            raise InputError("options", n, "the tokenizer does not give each option letter its own first token")
        return ids

    # ---- the pipeline's call
    @torch.no_grad()
    def answer(self, image: np.ndarray, question: str, options: list[str], num_slots: int | None = None, tau: float = 0.07):
        from planners.latent import LatentAnswer, check_num_slots, check_question, rollout, slot_attention

        question, options = check_question(question, options)
        if len(options) > len(LETTERS):
            raise InputError("options", len(options), f"pass at most {len(LETTERS)} options")
        k = self.trained_slots if num_slots is None else check_num_slots(num_slots)
        pre = self.prefix([image], [question], [options])
        gh, gw = pre["grid"]
        ids = self.letter_ids(len(options))
        if k == 0:
            _, logits = self.begin(pre)
            logits, slots, amap, started = logits[0], torch.zeros(0, pre["image"].shape[-1]), torch.zeros(0, gh, gw), False
        else:
            r = rollout(self, pre, k, slot_norm=self.slot_norm)
            logits, slots = r.answer_logits[0], r.slot_inputs[0]
            amap = slot_attention(r.slot_inputs.float(), pre["image"], tau)[0].reshape(k, gh, gw)
            started = bool(r.first_logits[0].argmax() == self.start_id)
        post = torch.softmax(logits[ids].double(), -1).cpu().numpy()
        i = int(post.argmax())
        return LatentAnswer(options[i], i, post, slots.float().cpu().numpy(), amap.float().cpu().numpy(), (gh, gw), started)
