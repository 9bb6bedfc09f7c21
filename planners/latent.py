"""Latent visual reasoning through continuous slots (specs/gelvr.md B.1, B.3, B.5).

The sequence is ``[image tokens] [question] <start> s_1 ... s_K <end> [answer]``. The model emits ``<start>``
itself; then exactly K slots are forced: the input embedding at slot k is the last hidden state of position
k-1 (no token is sampled, the LM head is unused), and ``<end>`` is forced after them. Inference feeds back the
mean direction (greedy); GePO's rollouts feed back a direction drawn from a von Mises-Fisher policy around it
(``planners.vmf``). Either way the fed-back vector is ``scale * z`` with ``z`` a unit direction and ``scale``
the ``slot_norm`` rule [PROPOSED, a parameter]: ``"hidden"`` restores ``||h_{k-1}||`` (spec B.3), ``"image"``
uses the mean norm of this input's image tokens, the magnitude slot targets have in training (the norm
mismatch GAP reports between decoder outputs and input embeddings cannot arise).

Everything model-specific sits behind ``LatentCore`` (embed the prefix, embed a special token, run the causal
stack on input embeddings); the recurrence (``rollout``) and its teacher-forced replay (``replay``) are written
once, for the builtin reasoner here and the transformers VLM wrapper in ``planners.latent_hf``. Replay
reproduces a rollout's logits and slot means exactly (same inputs, one parallel pass): importance ratios are
1 at the old policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from core.errors import InputError
from planners import vmf

MAX_SLOTS = 32  # the precursors use 4-32 (LVR 4/8/16, HyLaR up to 32)
MAX_TEXT_CHARS = 2000  # as the other verbs: a longer question or option is a pasted file, not a question
SLOT_NORMS = ("hidden", "image")


class LatentCore(Protocol):
    """What the recurrence needs from a model. ``prefix`` is the model's own encoding of image + question."""

    start_id: int
    end_id: int

    def token_embeds(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B, n)`` token ids -> input embeddings ``(B, n, d)``."""
        ...

    def run(self, prefix: dict, tail: torch.Tensor, answer: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The causal stack on the prefix followed by input embeddings ``tail`` ``(B, n, d)``, in one pass: (last
        hidden states of the tail positions ``(B, n, d)`` and, for the position just before the tail and every
        tail position, next-token logits ``(B, n + 1, V)``). ``answer``: the tail's last position is ``<end>``
        (a core may restrict what the answer reads)."""
        ...

    def begin(self, prefix: dict) -> tuple[object, torch.Tensor]:
        """The prefix alone, keeping its key/value cache: (state, next-token logits at its end ``(B, V)``)."""
        ...

    def extend(self, state: object, embeds: torch.Tensor, answer: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Append input embeddings ``(B, n, d)`` to ``state`` (updated in place): (their last hidden states
        ``(B, n, d)``, their next-token logits ``(B, n, V)``). ``answer``: the last of them is ``<end>``."""
        ...

    def image_norm(self, prefix: dict) -> torch.Tensor:
        """``(B,)`` the mean L2 norm of each item's image-token input embeddings."""
        ...


@dataclass
class Rollout:
    """One pass of the recurrence over a batch. ``started`` ``(B,)``: whether the model emitted ``<start>``
    (otherwise its first token is already the answer and there are no slots); ``first_logits`` ``(B, V)`` at
    the end of the prefix; ``slot_inputs`` ``(B, K, d)`` the fed-back embeddings; ``means`` ``(B, K, d)`` the
    unit mean directions ``n(h_{k-1})``; ``directions`` the unit directions fed back (= ``means`` unless
    sampled); ``answer_logits`` ``(B, V)`` after ``<end>`` (or after the prefix when not started);
    ``slot_states`` ``(B, K, d)`` the hidden states at the slot positions."""

    started: torch.Tensor
    first_logits: torch.Tensor
    slot_inputs: torch.Tensor
    means: torch.Tensor
    directions: torch.Tensor
    answer_logits: torch.Tensor
    slot_states: torch.Tensor
    hidden_before: torch.Tensor  # (B, K, d): h_0 .. h_{K-1}, the states the slots come from


def check_num_slots(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= int(k) <= MAX_SLOTS:
        raise InputError("num_slots", k, f"pass an integer K in [0, {MAX_SLOTS}] (0: answer directly, no latent slots)")
    return int(k)


def slot_scale(core: LatentCore, prefix: dict, hidden: torch.Tensor, slot_norm: str) -> torch.Tensor:
    """``(B, 1)``: the norm a fed-back direction is given."""
    if slot_norm == "hidden":
        return hidden.norm(dim=-1, keepdim=True)
    if slot_norm == "image":
        return core.image_norm(prefix)[:, None].to(hidden.dtype)
    raise InputError("slot_norm", slot_norm, f"choose one of {SLOT_NORMS}")


def vmf_sampler(kappa: float, generator: torch.Generator | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """A slot policy for ``rollout``: each direction drawn from vMF(mean, kappa)."""
    return lambda mu: vmf.sample(mu, kappa, generator)


def rollout(core: LatentCore, prefix: dict, num_slots: int, *, slot_norm: str = "image",
            sampler: Callable[[torch.Tensor], torch.Tensor] | None = None, force_start: bool = True,
            start_sampled: torch.Tensor | None = None) -> Rollout:
    """Run the recurrence. ``sampler=None``: greedy slots (z = the mean direction); otherwise ``sampler(mu)``
    draws each slot's direction (``vmf_sampler``). ``force_start``: slots for every item (inference with a fixed K); otherwise
    ``start_sampled`` ``(B,)`` bool says which items emitted ``<start>`` (a rollout's sampled first token) and the
    rest answer from the prefix. Items are batched; the ones that did not start are run through the slots too
    (fixed shapes) and their answer taken from the prefix."""
    num_slots = check_num_slots(num_slots)
    state, first = core.begin(prefix)
    b, dev = len(first), first.device
    started = torch.ones(b, dtype=torch.bool, device=dev) if force_start else start_sampled.to(dev)
    hidden, _ = core.extend(state, core.token_embeds(torch.full((b, 1), core.start_id, dtype=torch.long, device=dev)))
    h = hidden[:, -1]
    inputs, means, dirs, states, before = [], [], [], [], []
    for _ in range(num_slots):
        before.append(h)
        mu = F.normalize(h, dim=-1)
        z = mu if sampler is None else sampler(mu)
        x = slot_scale(core, prefix, h, slot_norm) * z
        inputs.append(x)
        means.append(mu)
        dirs.append(z)
        hidden, _ = core.extend(state, x[:, None])
        h = hidden[:, -1]
        states.append(h)
    _, logits = core.extend(state, core.token_embeds(torch.full((b, 1), core.end_id, dtype=torch.long, device=dev)), answer=True)
    answer = torch.where(started[:, None], logits[:, -1], first)
    d = h.shape[-1]
    stack = lambda xs: torch.stack(xs, 1) if xs else h.new_zeros(b, 0, d)  # noqa: E731
    return Rollout(started, first, stack(inputs), stack(means), stack(dirs), answer, stack(states), stack(before))


def replay(core: LatentCore, prefix: dict, slot_inputs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Teacher-forced recomputation of a rollout in one parallel pass: ``[prefix] <start> slot_inputs <end>``.
    Returns ``first_logits`` ``(B, V)`` (at the prefix's end), ``hidden_before`` ``(B, K, d)`` (h_0 .. h_{K-1}),
    ``means`` (their unit directions: the policy's slot means on these inputs), ``slot_states`` ``(B, K, d)``
    and ``answer_logits`` ``(B, V)`` (after ``<end>``)."""
    b, k = slot_inputs.shape[:2]
    dev = slot_inputs.device
    start = core.token_embeds(torch.full((b, 1), core.start_id, dtype=torch.long, device=dev))
    end = core.token_embeds(torch.full((b, 1), core.end_id, dtype=torch.long, device=dev))
    hidden, logits = core.run(prefix, torch.cat([start, slot_inputs, end], 1), answer=True)
    before = hidden[:, :k]
    return {"first_logits": logits[:, 0], "hidden_before": before, "means": F.normalize(before, dim=-1),
            "slot_states": hidden[:, 1 : k + 1], "answer_logits": logits[:, -1]}


def teacher_forced_inputs(core: LatentCore, prefix: dict, targets: torch.Tensor) -> torch.Tensor:
    """SFT's slot inputs: the targets' directions at the ``"image"`` norm (the magnitude greedy inference feeds
    back under ``slot_norm="image"``)."""
    return F.normalize(targets, dim=-1) * core.image_norm(prefix).detach()[:, None, None].to(targets.dtype)


def slot_attention(slots: torch.Tensor, image_tokens: torch.Tensor, tau: float = 0.07,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """Where each slot looks: ``softmax(n(s) n(P)^T / tau)`` over the image tokens, ``(B, K, N)`` (the map the
    cross-structure loss shapes); ``mask`` ``(B, N)`` marks the real tokens (a prefix's ``"image_mask"``)."""
    from planners.latent_geometry import cross_structure

    return cross_structure(slots, image_tokens, tau, mask)


@dataclass
class LatentAnswer:
    """A reasoner's answer to one multiple-choice question: the option it picks and its ``posterior`` over the
    options; ``slots`` ``(K, d)`` the K fed-back slot vectors; ``attention`` ``(K, gh, gw)`` where each slot looks
    over the image's token grid (the slot-to-image map the cross-structure loss shapes, rows summing to 1);
    ``grid`` ``(gh, gw)``; ``started``: whether the model emitted ``<start>`` itself before the forced slots."""

    answer: str
    index: int
    posterior: np.ndarray
    slots: np.ndarray
    attention: np.ndarray
    grid: tuple[int, int]
    started: bool


def check_question(question: str, options) -> tuple[str, list[str]]:
    if not isinstance(question, str) or not question.strip():
        raise InputError("question", question, "ask a question, e.g. -q \"What colour is the small star right of the large triangle?\"")
    if len(question) > MAX_TEXT_CHARS:
        raise InputError("question", f"{len(question)} characters", f"keep it under {MAX_TEXT_CHARS} characters (it would not fit a model's prompt)")
    if isinstance(options, str) or not options:
        raise InputError("options", options, "pass the answer options as a list, e.g. --options red blue green yellow "
                                             "(the answer is read as a posterior over them)")
    options = [str(o) for o in options]
    for i, opt in enumerate(options):
        if len(opt) > MAX_TEXT_CHARS:
            raise InputError(f"options[{i}]", f"{len(opt)} characters", f"keep each option under {MAX_TEXT_CHARS} characters")
    seen = [o.strip().casefold() for o in options]
    if len(options) < 2 or len(set(seen)) < len(seen):  # "red", "Red" and "red " are one answer
        raise InputError("options", options, "pass at least two distinct options (case and spaces aside)")
    return question.strip(), options


def load_latent_reasoner(source: str = "builtin", device: str | torch.device | None = None, dtype=None,
                         trust_remote_code: bool = False):
    """``"builtin"`` (the shipped reasoner), a folder holding a builtin reasoner, or a transformers VLM checkpoint
    (a local folder or an HF cache id) wrapped with latent slots (``planners.latent_hf``)."""
    from pathlib import Path

    from planners.latent_builtin import BuiltinReasoner, BuiltinLatentReasoner

    if source in (None, "builtin"):
        return BuiltinReasoner.from_pretrained(None, device=device)
    if BuiltinLatentReasoner.is_saved_in(source):
        return BuiltinReasoner.from_pretrained(Path(source), device=device)
    from planners.latent_hf import HFLatentReasoner

    return HFLatentReasoner.from_pretrained(source, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
