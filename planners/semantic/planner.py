"""Bernini's semantic planner: masked semantic planning in ViT space with a per-token flow head (spec b.2-b.4, b.9).

    planner = SemanticPlanner(SemanticPlannerConfig(token_dim=192, plan_grid=(2, 4, 4)), TinyPlannerBackbone())
    out = planner.plan("a red square moves left", generator=torch.Generator().manual_seed(0))
    out.tokens          # (T', h, w, token_dim): the predicted target ViT tokens
    out.order           # the reveal order over the flattened grid
    planner.loss([PlanExample(PlanRequest(prompt=...), target=vit_tokens)]).loss.backward()

The backbone (``backbones.PlannerBackbone``: a transformers Qwen2.5-VL, or the builtin transformer) reads
the planner sequence of ``layout.py`` as ``inputs_embeds`` under the block mask; its penultimate hidden
states at the target placeholders, through the ``for_vit`` connector, condition the flow head.

Training (b.3): part of the target tokens is masked (mask token in), the rest is given (its ground truth
in); the flow-matching loss is taken on the masked ones only; chain-of-thought text, when present, adds
next-token cross-entropy. Inference (b.4): all targets start masked; a cosine schedule reveals them in a
random order, each step sampling the revealed tokens with a few Euler steps of the head under three-stream
CFG and writing them back into every stream's sequence.

Streams (b.4) [interpretation]: ``cond`` is the full input; ``imgcond`` drops the instruction (and the
chain of thought) but keeps the source visuals; ``uncond`` drops both. Dropped text is replaced by the
negative prompt when one is given, else removed. Without sources the spec makes ``imgcond`` identical
to ``cond`` (``imgcond_without_sources="cond"``), so a t2v plan is guided by ``img_cfg`` alone.

Discrete plan (``head="codebook"``) [PROPOSED, not in the paper]: MaskGIT over a codebook of ViT tokens
(``codebook.py``). The head classifies each condition ``z_i`` into one of ``codebook_size`` codes; training
scores the masked positions with cross-entropy against the nearest code of their ground truth and feeds
the given positions their *quantised* ground truth (what inference writes); inference applies the same
three-stream CFG to the logits, samples a code per masked position and reveals the most confident ones
(``maskgit.run_confidence_loop``), writing the code vectors into every stream. ``head="flow"`` (the
default) is the spec's continuous head, unchanged.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.device import select_device, select_dtype
from core.errors import InputError
from core.weights_io import load_state_dict, save_state_dict
from planners.semantic import codebook as codebook_lib
from planners.semantic import flow_head, maskgit
from planners.semantic.backbones import BACKBONES, PlannerBackbone
from planners.semantic.layout import (
    SYSTEM_PROMPTS,
    PlannerSequence,
    TokenType,
    VisualTokens,
    additive_mask,
    block_attention_mask,
    check_grid,
    pad_batch,
)
from planners.semantic.local_context import LocalContext
from renderers import flow

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
MODEL_NAME = "semantic-planner"
HEADS = ("flow", "codebook")
USER_ORDERS = ("prompt_first", "sources_first")
# The released planner's stream settings (see SemanticPlannerConfig.imgcond_drop).
OFFICIAL_STREAMS = {"imgcond_drop": "visuals", "cfg_rule": "txt_above_1", "user_order": "sources_first"}


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x: object) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@dataclass
class SemanticPlannerConfig:
    """The planner's settings. Spec values are marked [PORT]/[C]; [DEFAULT]/[PROPOSED] were not published.

    Sizes: ``token_dim`` is the ViT token width of sources and targets (Qwen2.5-VL-7B's merged tokens:
    3584 = the LM width; builtin: the ViT width, 192), ``plan_grid`` the default target grid (T', h, w)
    [PROPOSED (2, 4, 4) for the builtin; Bernini's 81 frames at 480x832 give (5, 12, 20)].
    ``head_width`` / ``head_depth``: 4096 / 16 in the release [PORT]; small defaults here [PROPOSED].
    ``text_embed_dim``: if set, ``prompt_embeds`` of that width (e.g. MiniLM token states, 384) enter
    through a learned projection; None: they must already be in the backbone's input space.
    ``context_dim``: if set, the ``for_gen`` connector (Linear-GELU-RMSNorm-Linear) maps the final hidden
    states to the renderer's context width (4096 for Wan's UMT5) [PORT]; None: no renderer contexts.
    ``num_mask_tokens``: rows of the learned mask-token table (4096 in the release); only row 0 is ever
    used, in training and inference [DEFAULT]; ``position_mask_tokens`` [PROPOSED]: row k for target position k.

    ``head`` [PROPOSED option]: "flow" (spec b.3, the default) or "codebook" (a discrete plan: MaskGIT over
    ``codebook_size`` k-means codes of ViT tokens, a classifier of ``head_depth`` GELU layers of
    ``head_width`` after a LayerNorm, cross-entropy). ``reveal``: the order tokens leave the mask: "random"
    (MAR / spec b.4; the only one for the flow head) or "confidence" (MaskGIT; codebook only); None picks
    "random" for flow and "confidence" for codebook. ``choice_temperature`` scales MaskGIT's Gumbel noise
    on the confidences, annealed linearly to 0 over the steps (4.5, MaskGIT's default). With the codebook
    head ``temperature`` is the softmax temperature of the code draw (0 = argmax), and the flow-only
    fields (``head_shift``, ``head_sigma_*``, ``denoising_steps``, ``flow_batch_mul``) are unused.
    """

    token_dim: int = 192
    plan_grid: tuple[int, int, int] = (2, 4, 4)
    text_embed_dim: int | None = None
    context_dim: int | None = None
    num_mask_tokens: int = 1
    head_width: int = 256
    head_depth: int = 2
    # the head's flow-matching schedule [PORT]; extra_one_step's value [PROPOSED]
    head_shift: float = flow_head.HEAD_SHIFT
    head_sigma_min: float = flow_head.HEAD_SIGMA_MIN
    head_sigma_max: float = flow_head.HEAD_SIGMA_MAX
    head_extra_one_step: bool = True
    # inference [PORT]: planning_step 25, vit_denoising_step 3, vit_txt_cfg 1.4, vit_img_cfg 1.2
    planning_steps: int = 25
    denoising_steps: int = 3
    temperature: float = 1.0  # the head's initial-noise scale [PROPOSED; 1 = the spec's plain sampling]
    txt_cfg: float = 1.4
    img_cfg: float = 1.2
    imgcond_without_sources: str = "cond"
    # What the image-condition stream drops, the three-stream rule and the user turn's order. The builtin
    # planner was trained and measured with "text" / "always" / "prompt_first" (kept as its defaults);
    # the release drops the visuals and keeps the text, runs three streams only when txt_cfg > 1, and puts
    # [source videos][source images][prompt] (T8mars planner.py create_plan, DiffLossFM.sample,
    # template.py build_conversation): "visuals" / "txt_above_1" / "sources_first" (``OFFICIAL_STREAMS``).
    imgcond_drop: str = "text"
    cfg_rule: str = "always"
    user_order: str = "prompt_first"
    # training [DEFAULT]: mask ratio r ~ U[0.5, 1], text / source dropout 0.1, lambda_cot 1
    mask_ratio_min: float = 0.5
    mask_ratio_max: float = 1.0
    # [PROPOSED] share of training examples with every target token masked (else the ratio above). ViT tokens carry
    # the whole frame's facts, so one revealed token gives away the object's colour: with partly revealed targets
    # the planner never needs the prompt, yet MaskGIT's first step reveals nothing. 0 = the spec's training.
    full_mask_prob: float = 0.0
    text_dropout: float = 0.1
    visual_dropout: float = 0.1
    flow_batch_mul: int = 1  # noise draws per masked token per step [PROPOSED 1; MAR uses 4]
    # chain of thought [DEFAULT b.9]: greedy, at most 256 tokens, before the target block; False = ablation
    cot: bool = True
    cot_weight: float = 1.0
    max_cot_tokens: int = 256
    # M-RoPE time step between video frames of a vision block (Qwen2.5-VL at ViT fps 2) [PORT]
    video_t_step: int = 2
    # the discrete plan [PROPOSED]: head "flow" (spec) or "codebook"; 512 codes; reveal None = the head's own
    # ("random" for flow, "confidence" for codebook); MaskGIT's choice temperature 4.5
    head: str = "flow"
    codebook_size: int = 512
    reveal: str | None = None
    choice_temperature: float = 4.5
    # [PROPOSED] v2v with the codebook head: a target position whose source code has at least this probability
    # under the first step's logits (everything masked) keeps the source's code, and MaskGIT reveals only the
    # rest (MaskGIT-style editing: keep what the model finds likely, regenerate the remainder; confidence reveal only);
    # None: off
    keep_source: float | None = None
    # [PROPOSED] local context (local_context.py): kernel of a 3-D convolution over the target grid whose output
    # joins each target position's head condition; 0 = off (the spec's planner)
    local_context: int = 0
    # [PROPOSED] attribute supervision of the head conditions: sizes of the per-token label groups (e.g. (10, 8): the
    # colour and the shape of the object a target token shows, as PlanExample.token_classes); a linear read-out of
    # each masked token's condition is scored by cross-entropy, averaged over the tokens that carry a label, so the
    # few object tokens are not outweighed by the background. () = off (the spec's loss). Training only: the plan
    # itself is still drawn by the flow head.
    attribute_classes: tuple[int, ...] = ()
    attribute_weight: float = 1.0
    # [PROPOSED] weight of a token-regression loss: a linear read-out of each masked token's head condition is scored
    # by MSE against the token itself. The flow loss teaches the backbone what a masked token is only through a noisy
    # per-draw target; the regression gives it the token's mean directly (what its revealed neighbours say it is).
    # Training only: the plan is still drawn by the flow head. 0 = off (the spec's loss).
    regression_weight: float = 0.0
    # [PROPOSED] masked target position k enters as row k of the mask-token table (num_mask_tokens must cover the
    # target), in training and inference; False = row 0 everywhere, as the release plans. A ViT token carries a
    # position-dependent part (the ViT's own position embedding): measured on 200 VAL t2v plans, predicting a masked
    # token by the per-position mean plus the clip's offset leaves MSE 0.334, the clip's mean alone 0.448. One shared
    # mask row under relative (rotary) positions leaves that part for a small backbone to reconstruct.
    position_mask_tokens: bool = False

    def __post_init__(self):
        self.plan_grid = check_grid("plan_grid", self.plan_grid)
        for name in ("token_dim", "num_mask_tokens", "head_width", "planning_steps", "denoising_steps",
                     "flow_batch_mul"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise InputError(name, v, "use a positive integer")
        for name in ("head_depth", "max_cot_tokens", "video_t_step"):
            v = getattr(self, name)
            if not _is_int(v) or v < 0:
                raise InputError(name, v, "use a non-negative integer")
        for name in ("text_embed_dim", "context_dim"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or v < 1):
                raise InputError(name, v, "use a positive integer or None")
        for name in ("txt_cfg", "img_cfg", "cot_weight", "head_shift", "temperature"):
            v = getattr(self, name)
            if not _is_real(v) or v < 0:
                raise InputError(name, v, "use a finite number >= 0")
        if self.head_shift <= 0:
            raise InputError("head_shift", self.head_shift, "use a positive shift (Bernini's head uses 2.0)")
        for name in ("text_dropout", "visual_dropout", "full_mask_prob"):
            v = getattr(self, name)
            if not _is_real(v) or not 0 <= v <= 1:
                raise InputError(name, v, "use a probability in [0, 1]")
        if not (_is_real(self.mask_ratio_min) and _is_real(self.mask_ratio_max)
                and 0 < self.mask_ratio_min <= self.mask_ratio_max <= 1):
            raise InputError("mask_ratio_min", (self.mask_ratio_min, self.mask_ratio_max),
                             "use 0 < mask_ratio_min <= mask_ratio_max <= 1")
        if not (_is_real(self.head_sigma_min) and _is_real(self.head_sigma_max)
                and 0 <= self.head_sigma_min < self.head_sigma_max <= 1):
            raise InputError("head_sigma_min", (self.head_sigma_min, self.head_sigma_max),
                             "use 0 <= head_sigma_min < head_sigma_max <= 1")
        if self.imgcond_without_sources not in ("cond", "uncond"):
            raise InputError("imgcond_without_sources", self.imgcond_without_sources, "use 'cond' (spec b.4) or 'uncond'")
        if self.imgcond_drop not in ("text", "visuals"):
            raise InputError("imgcond_drop", self.imgcond_drop, "use 'visuals' (the release) or 'text' (the builtin planner)")
        if self.cfg_rule not in flow_head.CFG_RULES:
            raise InputError("cfg_rule", self.cfg_rule, f"use one of {flow_head.CFG_RULES}")
        if self.user_order not in USER_ORDERS:
            raise InputError("user_order", self.user_order, f"use one of {USER_ORDERS}")
        if self.head not in HEADS:
            raise InputError("head", self.head, "use 'flow' (the spec's continuous head) or 'codebook' (discrete plan)")
        if not _is_int(self.codebook_size) or self.codebook_size < 2:
            raise InputError("codebook_size", self.codebook_size, "use an integer >= 2 (e.g. 512)")
        if self.reveal not in (None, "random", "confidence"):
            raise InputError("reveal", self.reveal, "use 'random', 'confidence' or None (the head's own)")
        if self.head == "flow" and self.reveal == "confidence":
            raise InputError("reveal", self.reveal, "the flow head has no per-token confidence; use 'random' "
                                                    "or head='codebook'")
        if not _is_real(self.choice_temperature) or self.choice_temperature < 0:
            raise InputError("choice_temperature", self.choice_temperature, "use a finite number >= 0 (MaskGIT: 4.5)")
        if not _is_int(self.local_context) or self.local_context < 0 or (self.local_context and self.local_context % 2 == 0):
            raise InputError("local_context", self.local_context, "use 0 (off) or an odd kernel size such as 3")
        self.attribute_classes = tuple(self.attribute_classes)
        if not all(_is_int(k) and k >= 2 for k in self.attribute_classes):
            raise InputError("attribute_classes", self.attribute_classes, "use label-group sizes >= 2, e.g. (10, 8), or () for off")
        if not _is_real(self.attribute_weight) or self.attribute_weight < 0:
            raise InputError("attribute_weight", self.attribute_weight, "use a finite number >= 0")
        if not _is_real(self.regression_weight) or self.regression_weight < 0:
            raise InputError("regression_weight", self.regression_weight, "use a finite number >= 0 (0 = off)")
        if self.regression_weight > 0 and self.head != "flow":
            raise InputError("regression_weight", self.regression_weight, "the token regression needs head='flow' "
                                                                          "(a codebook head's targets are codes)")
        if not isinstance(self.position_mask_tokens, bool):
            raise InputError("position_mask_tokens", self.position_mask_tokens, "use True or False")
        cells = self.plan_grid[0] * self.plan_grid[1] * self.plan_grid[2]
        if self.position_mask_tokens and self.num_mask_tokens < cells:
            raise InputError("num_mask_tokens", self.num_mask_tokens, f"position_mask_tokens needs a row per target position: "
                                                                      f"use at least {cells} for plan_grid {self.plan_grid}")
        if self.keep_source is not None and (not _is_real(self.keep_source) or not 0 < self.keep_source <= 1):
            raise InputError("keep_source", self.keep_source, "use a probability in (0, 1], or None to regenerate every token")

    @property
    def reveal_mode(self) -> str:
        """``reveal`` resolved: "random" for the flow head, "confidence" for the codebook head unless set."""
        if self.reveal is not None:
            return self.reveal
        return "confidence" if self.head == "codebook" else "random"


@dataclass(eq=False)
class PlanRequest:
    """What to plan: the instruction (text, or ``prompt_embeds`` ``(L, text_embed_dim)``), optional negative
    prompt, source visuals in ViT token space, the task (picks the system prompt) and, optionally, a given
    chain of thought (training data, or forced at inference)."""

    prompt: str | None = None
    prompt_embeds: torch.Tensor | None = None
    negative_prompt: str | None = None
    negative_prompt_embeds: torch.Tensor | None = None
    sources: Sequence[VisualTokens] = ()
    task: str = "t2v"
    system_prompt: str | None = None
    cot_text: str | None = None

    def __post_init__(self):
        if self.prompt is None and self.prompt_embeds is None:
            raise InputError("prompt", None, "pass the instruction as text (prompt) or as prompt_embeds")
        if self.prompt is not None and self.prompt_embeds is not None:
            raise InputError("prompt_embeds", tuple(self.prompt_embeds.shape), "pass prompt or prompt_embeds, not both")
        for name in ("prompt", "negative_prompt", "system_prompt", "cot_text"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise InputError(name, v, "pass a string")
        for name in ("prompt_embeds", "negative_prompt_embeds"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, torch.Tensor) or v.ndim != 2 or v.shape[0] < 1
                                  or not v.is_floating_point()):
                raise InputError(name, getattr(v, "shape", v), "pass a float tensor (L, dim) with L >= 1")
        if isinstance(self.sources, VisualTokens):
            self.sources = [self.sources]
        self.sources = list(self.sources)
        for s in self.sources:
            if not isinstance(s, VisualTokens):
                raise InputError("sources", type(s).__name__, "pass VisualTokens (see backbone.encode_visual)")
        if self.system_prompt is None and self.task not in SYSTEM_PROMPTS:
            raise InputError("task", self.task, f"use one of {sorted(SYSTEM_PROMPTS)} or pass system_prompt")


@dataclass(eq=False)
class PlanExample:
    """One training example: the request and the target's ViT tokens ``(T', h, w, token_dim)``.

    ``target_mask`` ``(T', h, w)`` bool, True = masked (predicted and scored); None draws it from the
    mask-ratio range. Text / source dropout for CFG is drawn per example unless ``dropout=False``.
    ``token_classes`` ``(T', h, w, G)`` long: each token's label in each of the config's ``attribute_classes``
    groups, -100 where it has none (e.g. a background token); only used when that option is on.
    """

    request: PlanRequest
    target: torch.Tensor
    target_mask: torch.Tensor | None = None
    dropout: bool = True
    token_classes: torch.Tensor | None = None


@dataclass
class PlannerLoss:
    """``loss = plan + cot_weight * cot + attribute_weight * attributes + regression_weight * regression``;
    ``per_token`` holds the loss of each masked target token (the flow loss, or the cross-entropy with
    ``head="codebook"``)."""

    loss: torch.Tensor
    plan: torch.Tensor
    cot: torch.Tensor | None
    num_masked: int
    per_token: torch.Tensor
    attributes: torch.Tensor | None = None
    regression: torch.Tensor | None = None


@dataclass
class PlanOutput:
    """``tokens`` ``(T', h, w, token_dim)``; ``order`` the flattened positions in the order they were written;
    ``reveal_counts`` tokens per step; ``cot_text`` the chain of thought (None when off); ``contexts``:
    (with_target, without_target, uncond), each ``(1, n, context_dim)``, the renderer contexts of spec b.4
    (None without ``for_gen``); ``codes`` ``(T', h, w)`` the chosen code of every token (codebook head only)."""

    tokens: torch.Tensor
    order: torch.Tensor
    reveal_counts: list[int]
    cot_text: str | None = None
    contexts: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    codes: torch.Tensor | None = None


StepCallback = Callable[[int, dict[str, Any]], None]


def _generator(generator: object) -> torch.Generator | None:
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if _is_int(generator):
        return torch.Generator().manual_seed(int(generator))
    raise InputError("generator", generator, "pass a torch.Generator, an integer seed or None")


class SemanticPlanner(nn.Module):
    """The Bernini planner around a pluggable backbone (see the module docstring)."""

    def __init__(self, config: SemanticPlannerConfig | None = None, backbone: PlannerBackbone | None = None):
        super().__init__()
        if config is not None and not isinstance(config, SemanticPlannerConfig):
            raise InputError("config", type(config).__name__, "pass a SemanticPlannerConfig")
        if backbone is None:
            from planners.semantic.backbones import TinyPlannerBackbone

            backbone = TinyPlannerBackbone()
        if not isinstance(backbone, nn.Module) or not isinstance(backbone, PlannerBackbone):
            raise InputError("backbone", type(backbone).__name__, "pass a PlannerBackbone module (builtin or hf)")
        self.config = c = config or SemanticPlannerConfig()
        self.backbone = backbone
        h = backbone.hidden_size
        self.vit_in = nn.Identity() if c.token_dim == h else nn.Linear(c.token_dim, h)  # [PROPOSED] when widths differ
        self.text_proj = nn.Linear(c.text_embed_dim, h) if c.text_embed_dim else None
        self.mask_tokens = nn.Parameter(torch.randn(1, c.num_mask_tokens, h) * 0.02)
        self.for_vit = nn.Sequential(nn.Linear(h, h), nn.GELU(), nn.Linear(h, h), nn.RMSNorm(h, eps=1e-6), nn.Linear(h, h))
        self.local = LocalContext(h, c.local_context) if c.local_context else None
        self.attribute_head = nn.Linear(h, sum(c.attribute_classes)) if c.attribute_classes else None
        self.regression_head = nn.Linear(h, c.token_dim) if c.regression_weight > 0 else None
        if c.head == "codebook":
            self.head = codebook_lib.CodebookHead(c.token_dim, h, c.codebook_size, c.head_width, c.head_depth)
        else:
            self.head = flow_head.SimpleMLPAdaLN(c.token_dim, h, c.head_width, c.head_depth)
        self.for_gen = None
        if c.context_dim:
            d = c.context_dim
            self.for_gen = nn.Sequential(nn.Linear(h, d), nn.GELU(), nn.RMSNorm(d, eps=1e-6), nn.Linear(d, d))

    # ---- sequences ---------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self.mask_tokens.device

    def _text_rows(self, ids: list[int]) -> torch.Tensor:
        return self.backbone.embed_tokens(torch.tensor(ids, dtype=torch.long, device=self.device))

    def _prompt_rows(self, text: str | None, embeds: torch.Tensor | None, name: str) -> torch.Tensor | None:
        if text is not None:
            ids = self.backbone.encode_text(text)
            return self._text_rows(ids) if ids else None
        if embeds is None:
            return None
        want = self.config.text_embed_dim or self.backbone.hidden_size
        if embeds.shape[-1] != want:
            raise InputError(name, tuple(embeds.shape), f"rows must be {want}-d (text_embed_dim or the backbone width)")
        x = embeds.to(self.device, self.mask_tokens.dtype)
        return self.text_proj(x) if self.text_proj is not None else x

    def _source_rows(self, source: VisualTokens) -> torch.Tensor:
        if source.tokens.shape[-1] != self.config.token_dim:
            raise InputError("sources", repr(source), f"tokens must be token_dim = {self.config.token_dim} wide")
        return self.vit_in(source.tokens.reshape(-1, source.tokens.shape[-1]).to(self.device, self.mask_tokens.dtype))

    def _build(self, request: PlanRequest, grid: tuple[int, int, int], *, text: bool = True, visuals: bool = True,
               cot_ids: list[int] | None = None, cot_loss: bool = False,
               target_rows: torch.Tensor | None = None, user_order: str | None = None) -> dict[str, torch.Tensor]:
        """One stream's sequence (spec b.2). ``text=False`` drops the instruction and chain of thought (the
        negative prompt stands in if given); ``visuals=False`` drops the sources. ``target_rows`` None:
        the prefix up to the chain of thought so far (for decoding it)."""
        sp = self.backbone.special_ids
        seq = PlannerSequence()
        system = request.system_prompt if request.system_prompt is not None else SYSTEM_PROMPTS[request.task]
        seq.add_text(self._text_rows([sp["im_start"]] + self.backbone.encode_text("system\n" + system)))
        dtype = seq.embeds[0].dtype
        seq.add_text(self._text_rows([sp["im_start"]] + self.backbone.encode_text("user\n")))
        if text:
            instr = self._prompt_rows(request.prompt, request.prompt_embeds, "prompt_embeds")
        else:
            instr = self._prompt_rows(request.negative_prompt, request.negative_prompt_embeds, "negative_prompt_embeds")
        order = user_order or self.config.user_order
        if instr is not None and order == "prompt_first":
            seq.add_text(instr.to(dtype))
        if visuals:
            t_step = self.config.video_t_step
            # the release's turn lists videos, then images, then the prompt (build_conversation)
            sources = request.sources if order == "prompt_first" else (
                [s for s in request.sources if s.kind == "video"] + [s for s in request.sources if s.kind == "image"])
            for source in sources:
                seq.add_text(self._text_rows([sp["vision_start"]]))
                seq.add_visual(self._source_rows(source).to(dtype), source.grid, TokenType.INPUT,
                               t_step if source.kind == "video" else 0)
                seq.add_text(self._text_rows([sp["vision_end"]]))
        if instr is not None and order == "sources_first":
            seq.add_text(instr.to(dtype))
        seq.add_text(self._text_rows([sp["im_start"]] + self.backbone.encode_text("assistant\n")))
        cot = list(cot_ids or []) if text else []
        if cot:
            seq.add_text(self._text_rows(cot), ids=cot, loss=cot_loss)
        if target_rows is None:
            return seq.tensors()
        seq.add_text(self._text_rows([sp["vision_start"]]), ids=[sp["vision_start"]], loss=cot_loss and bool(cot))
        seq.add_visual(target_rows.to(dtype), grid, TokenType.TARGET, self.config.video_t_step)
        seq.add_text(self._text_rows([sp["vision_end"]]))
        return seq.tensors()

    def _forward(self, items: list[dict[str, torch.Tensor]]) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
        batch = pad_batch(items)
        mask = additive_mask(block_attention_mask(batch["token_type"], batch["segment_ids"]), batch["embeds"].dtype)
        states = self.backbone(batch["embeds"], mask, batch["position_ids"])
        return batch, states

    def _conditions(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.for_vit(hidden.to(self.mask_tokens.dtype))

    def _aligned_source(self, request: PlanRequest, grid: tuple[int, int, int]) -> torch.Tensor | None:
        """The rows of the request's source video when it has the target's grid (an edit), else None."""
        src = [s for s in request.sources if s.kind == "video"]
        return self._source_rows(src[0]) if src and src[0].grid == tuple(grid) else None

    def _stream_locals(self, rows: torch.Tensor, grid: tuple[int, int, int], source: torch.Tensor | None,
                       visuals: list[bool], positions: torch.Tensor | None = None) -> list[torch.Tensor | float]:
        """Each stream's local-context term (0 when the planner has none) at ``positions`` (all when None),
        from the target ``rows`` now; only a stream that keeps the visuals sees the aligned ``source``."""
        if self.local is None:
            return [0.0] * len(visuals)
        rows = rows.to(self.mask_tokens.dtype)
        pick = (lambda t: t) if positions is None else (lambda t: t[positions])
        seen = pick(self.local(rows, grid, source)) if source is not None and any(visuals) else None
        blind = pick(self.local(rows, grid, None)) if source is None or not all(visuals) else None
        return [seen if v and source is not None else blind for v in visuals]

    def _mask_row(self, n: int) -> torch.Tensor:
        if not self.config.position_mask_tokens:
            return self.mask_tokens[0, :1].expand(n, -1)
        if n > self.mask_tokens.shape[1]:
            raise InputError("grid", n, f"this planner's mask-token table covers {self.mask_tokens.shape[1]} target "
                                        "positions (position_mask_tokens); plan a grid with at most that many tokens")
        return self.mask_tokens[0, :n]

    # ---- the codebook head -----------------------------------------------------------------------------

    def _codebook_head(self, name: str) -> codebook_lib.CodebookHead:
        if not isinstance(self.head, codebook_lib.CodebookHead):
            raise InputError(name, self.config.head, "needs a planner built with head='codebook'")
        return self.head

    @property
    def codebook(self) -> torch.Tensor | None:
        """The codebook ``(codebook_size, token_dim)`` of the discrete head (None for the flow head)."""
        return self.head.codebook if isinstance(self.head, codebook_lib.CodebookHead) else None

    def set_codebook(self, codebook: torch.Tensor) -> None:
        """Store a fitted codebook (``codebook.fit_codebook``) in the discrete head; it is saved with the weights."""
        self._codebook_head("set_codebook").set_codebook(codebook)

    def quantize(self, tokens: torch.Tensor) -> torch.Tensor:
        """The nearest code of each token ``(..., token_dim)`` -> ``(...)`` (codebook head only)."""
        head = self._codebook_head("quantize")
        return codebook_lib.quantize(tokens.to(head.codebook.device), head.codebook)

    def masked_code_loss(self, z: torch.Tensor, codes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per-token cross-entropy ``(M,)`` of the masked rows' logits against their codes (codebook head).

        ``z`` ``(N, C)`` conditions, ``codes`` ``(N,)`` the nearest codes of the ground truth, ``mask`` ``(N,)``
        bool; only masked rows are classified, so the other rows cannot change the result."""
        head = self._codebook_head("masked_code_loss")
        if mask.dtype != torch.bool or mask.shape != codes.shape or z.shape[0] != codes.shape[0]:
            raise InputError("mask", tuple(mask.shape), f"use a bool (N,) mask for {codes.shape[0]} target rows")
        logits = head(z[mask]).float()
        return F.cross_entropy(logits, codes[mask], reduction="none")

    # ---- training ----------------------------------------------------------------------------------

    def masked_flow_loss(self, z: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
                         generator: torch.Generator | None = None) -> torch.Tensor:
        """Per-token flow-matching loss ``(M * flow_batch_mul,)`` on the masked rows only (spec b.3).

        ``z`` ``(N, C)`` conditions, ``target`` ``(N, token_dim)`` ground truth, ``mask`` ``(N,)`` bool. Only
        masked rows are noised and scored, so the other rows' targets cannot change the result.
        sigma ~ U(0, 1) shifted by ``head_shift`` (``flow.sample_sigmas``, uniform density) [DEFAULT].
        """
        if mask.dtype != torch.bool or mask.shape != target.shape[:1] or z.shape[0] != target.shape[0]:
            raise InputError("mask", tuple(mask.shape), f"use a bool (N,) mask for {target.shape[0]} target rows")
        mul = self.config.flow_batch_mul
        z_m = z[mask].repeat(mul, 1)
        y0 = target[mask].to(torch.float32).repeat(mul, 1)
        sigma = flow.sample_sigmas(y0.shape[0], generator=generator, density="uniform",
                                   shift=self.config.head_shift).to(y0.device)
        noise = flow.initial_noise(y0.shape, generator=generator, device=y0.device)
        y_t = flow.add_noise(y0, noise, sigma)
        v = self.head(y_t, flow.sigmas_to_timesteps(sigma), z_m).float()
        return ((v - flow.velocity_target(y0, noise)) ** 2).mean(-1)

    def loss(self, batch: PlanExample | Sequence[PlanExample], generator: torch.Generator | int | None = None) -> PlannerLoss:
        """``L_planner = L_plan + cot_weight * L_CE(cot)`` over a batch (spec b.3), one backbone forward.

        Per example: text dropped with ``text_dropout`` (instruction and chain of thought), sources with
        ``visual_dropout``; a mask ratio ``r ~ U[mask_ratio_min, mask_ratio_max]`` picks ``round(r N)``
        (at least 1) masked positions unless ``target_mask`` is given (all of them with ``full_mask_prob``);
        masked positions get the mask token,
        the others their ground truth (teacher forcing). ``L_plan``: mean over all masked tokens of the
        batch; ``L_CE``: mean over the chain-of-thought tokens (and the token that closes them).

        With ``head="codebook"`` [PROPOSED]: ``L_plan`` is the cross-entropy of the masked tokens' logits
        against the nearest code of their ground truth, and the given tokens enter as their code vectors
        (the quantised ground truth), as they will at inference.
        """
        g = _generator(generator)
        examples = [batch] if isinstance(batch, PlanExample) else list(batch)
        if not examples or not all(isinstance(e, PlanExample) for e in examples):
            raise InputError("batch", type(batch).__name__, "pass a PlanExample or a non-empty list of them")
        c = self.config
        discrete = c.head == "codebook"
        items, targets, masks, locals_, classes = [], [], [], [], []
        for i, ex in enumerate(examples):
            y = ex.target
            if not isinstance(y, torch.Tensor) or y.ndim != 4 or y.shape[-1] != c.token_dim or not y.is_floating_point():
                raise InputError(f"batch[{i}].target", getattr(y, "shape", y),
                                 f"pass float ViT tokens (T', h, w, {c.token_dim})")
            grid = tuple(int(n) for n in y.shape[:3])
            n = grid[0] * grid[1] * grid[2]
            y = y.reshape(n, c.token_dim).to(self.device)
            if ex.target_mask is not None:
                m = ex.target_mask
                if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or tuple(m.shape) != grid or not bool(m.any()):
                    raise InputError(f"batch[{i}].target_mask", getattr(m, "shape", m),
                                     f"pass a bool {grid} tensor with at least one True (masked) position")
                m = m.reshape(-1).to(self.device)
            else:
                r = c.mask_ratio_min + (c.mask_ratio_max - c.mask_ratio_min) * float(torch.rand((), generator=g))
                if c.full_mask_prob and float(torch.rand((), generator=g)) < c.full_mask_prob:
                    r = 1.0
                k = min(n, max(1, round(r * n)))
                m = torch.zeros(n, dtype=torch.bool)
                m[torch.randperm(n, generator=g)[:k]] = True
                m = m.to(self.device)
            drop_text = ex.dropout and float(torch.rand((), generator=g)) < c.text_dropout
            drop_vis = ex.dropout and float(torch.rand((), generator=g)) < c.visual_dropout
            if discrete:
                y = self.quantize(y)  # the codes are the targets; the given rows are their code vectors
                given = self.head.lookup(y)
            else:
                given = y
            rows = torch.where(m[:, None], self._mask_row(n), self.vit_in(given.to(self.mask_tokens.dtype)))
            req = ex.request
            cot_ids = self.backbone.encode_text(req.cot_text) if (c.cot and req.cot_text) else None
            items.append(self._build(req, grid, text=not drop_text, visuals=not drop_vis, cot_ids=cot_ids,
                                     cot_loss=True, target_rows=rows))
            targets.append(y)
            masks.append(m)
            if self.attribute_head is not None:
                classes.append(self._token_classes(ex.token_classes, grid, f"batch[{i}].token_classes"))
            source = None if drop_vis else self._aligned_source(req, grid)
            locals_.append(self._stream_locals(rows, grid, source, [True])[0])
        batch_t, states = self._forward(items)
        hidden = states[-2]
        z = torch.cat([self._conditions(hidden[b, it["target_index"]]) + loc
                       for b, (it, loc) in enumerate(zip(items, locals_))])
        target, mask = torch.cat(targets), torch.cat(masks)
        if discrete:
            per_token = self.masked_code_loss(z, target, mask)
        else:
            per_token = self.masked_flow_loss(z, target, mask, g)
        plan_loss = per_token.mean()
        labels = batch_t["labels"]
        cot_loss = None
        scored = labels[:, 1:] != -100
        if bool(scored.any()):
            logits = self.backbone.lm_logits(states[-1][:, :-1][scored])
            cot_loss = F.cross_entropy(logits.float(), labels[:, 1:][scored])
        total = plan_loss + (c.cot_weight * cot_loss if cot_loss is not None else 0.0)
        attr_loss = None
        if self.attribute_head is not None:
            attr_loss = self.attribute_loss(z, torch.cat(classes), mask)
            total = total + c.attribute_weight * attr_loss
        reg_loss = None
        if self.regression_head is not None:
            reg_loss = ((self.regression_head(z[mask]).float() - target[mask].float()) ** 2).mean()
            total = total + c.regression_weight * reg_loss
        return PlannerLoss(total, plan_loss, cot_loss, int(mask.sum()), per_token, attr_loss, reg_loss)

    def _token_classes(self, labels: torch.Tensor | None, grid: tuple[int, int, int], name: str) -> torch.Tensor:
        groups = len(self.config.attribute_classes)
        if (not isinstance(labels, torch.Tensor) or labels.dtype != torch.long or tuple(labels.shape) != (*grid, groups)):
            raise InputError(name, getattr(labels, "shape", labels),
                             f"pass a long tensor {(*grid, groups)} of labels (-100 = none): attribute_classes is on")
        return labels.reshape(-1, groups).to(self.device)

    def attribute_loss(self, z: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the attribute read-out of the masked rows' conditions ``z`` ``(N, C)`` against
        ``labels`` ``(N, G)`` (-100 = none), averaged over the labelled rows of each group, summed over groups;
        0 when no masked row carries a label [PROPOSED, see ``attribute_classes``]."""
        logits = self.attribute_head(z[mask]).float()
        wanted = labels[mask]
        total = logits.new_zeros(())
        for g, part in enumerate(logits.split(list(self.config.attribute_classes), -1)):
            if bool((wanted[:, g] != -100).any()):
                total = total + F.cross_entropy(part, wanted[:, g], ignore_index=-100)
        return total

    # ---- inference ---------------------------------------------------------------------------------

    def _decode_cot(self, request: PlanRequest, grid: tuple[int, int, int], max_tokens: int) -> list[int]:
        """Greedy chain of thought after the assistant header (b.9 [DEFAULT]); stops at ``<|vision_start|>``
        (the plan block opens) or the end-of-text token. Recomputes the prefix each token (no KV cache):
        the prefix is plain causal text, so this is what a cache would give."""
        stop = {self.backbone.special_ids["vision_start"], self.backbone.special_ids["eos"]}
        ids: list[int] = []
        for _ in range(max_tokens):
            _, states = self._forward([self._build(request, grid, cot_ids=ids)])
            nxt = int(self.backbone.lm_logits(states[-1][0, -1]).argmax())
            if nxt in stop:
                break
            ids.append(nxt)
        return ids

    def _check_plan_args(self, grid, steps, denoising_steps, txt_cfg, img_cfg, max_cot_tokens, callback):
        c = self.config
        grid = check_grid("grid", c.plan_grid if grid is None else grid)
        steps = c.planning_steps if steps is None else steps
        if not _is_int(steps) or steps < 1:
            raise InputError("steps", steps, "use a positive number of planning steps (Bernini uses 25 or 50)")
        denoising_steps = c.denoising_steps if denoising_steps is None else denoising_steps
        if not _is_int(denoising_steps) or denoising_steps < 1:
            raise InputError("denoising_steps", denoising_steps, "use a positive number of Euler steps (1, 3 or 5)")
        txt_cfg = c.txt_cfg if txt_cfg is None else txt_cfg
        img_cfg = c.img_cfg if img_cfg is None else img_cfg
        for name, v in (("txt_cfg", txt_cfg), ("img_cfg", img_cfg)):
            if not _is_real(v) or v < 0:
                raise InputError(name, v, "use a finite guidance scale >= 0 (1 = no guidance)")
        max_cot_tokens = c.max_cot_tokens if max_cot_tokens is None else max_cot_tokens
        if not _is_int(max_cot_tokens) or max_cot_tokens < 0:
            raise InputError("max_cot_tokens", max_cot_tokens, "use a non-negative integer")
        if callback is not None and not callable(callback):
            raise InputError("callback", callback, "pass a function callback(step, info) or None")
        return grid, int(steps), int(denoising_steps), float(txt_cfg), float(img_cfg), int(max_cot_tokens)

    @torch.no_grad()
    def plan(self, request: PlanRequest | str | None = None, *, prompt_embeds: torch.Tensor | None = None,
             negative_prompt: str | None = None, sources: Sequence[VisualTokens] = (), task: str = "t2v",
             grid: tuple[int, int, int] | None = None, steps: int | None = None, denoising_steps: int | None = None,
             txt_cfg: float | None = None, img_cfg: float | None = None, cot: bool | None = None,
             max_cot_tokens: int | None = None, generator: torch.Generator | int | None = None,
             callback: StepCallback | None = None, temperature: float | None = None, imgcond_drop: str | None = None,
             cfg_rule: str | None = None, user_order: str | None = None) -> PlanOutput:
        """Plan the target's ViT tokens with the MaskGIT / MAR loop (spec b.4).

        ``request``: a ``PlanRequest``, or the prompt text (then ``prompt_embeds``, ``negative_prompt``,
        ``sources`` and ``task`` fill one). ``grid`` (T', h, w) defaults to ``plan_grid``; ``steps``,
        ``denoising_steps``, ``txt_cfg``, ``img_cfg`` and ``cot`` default to the config. All randomness (the
        order, every step's noise) comes from ``generator``. ``callback(step, info)`` runs after each step
        with ``info = {"positions", "tokens", "num_steps"}`` (plus ``"codes"`` with the codebook head).

        ``head="codebook"`` [PROPOSED]: the same three-stream CFG on the logits, a code per masked position at
        ``temperature`` (0 = argmax), revealed by MaskGIT confidence (``reveal="confidence"``, with
        ``choice_temperature``) or in a random order (``reveal="random"``); ``denoising_steps`` is unused.

        ``imgcond_drop`` / ``cfg_rule`` / ``user_order`` (None: the config's) pick the image-condition
        stream, the three-stream rule and the user turn's order; ``OFFICIAL_STREAMS`` holds the release's.
        """
        c = self.config
        if isinstance(request, PlanRequest):
            if prompt_embeds is not None or negative_prompt is not None or sources:
                raise InputError("request", "PlanRequest", "pass the fields inside the PlanRequest, not beside it")
        elif request is None or isinstance(request, str):
            request = PlanRequest(prompt=request, prompt_embeds=prompt_embeds, negative_prompt=negative_prompt,
                                  sources=sources, task=task)
        else:
            raise InputError("request", type(request).__name__, "pass a PlanRequest or the prompt text")
        grid, steps, denoising_steps, txt_cfg, img_cfg, max_cot_tokens = self._check_plan_args(
            grid, steps, denoising_steps, txt_cfg, img_cfg, max_cot_tokens, callback)
        g = _generator(generator)
        temperature = c.temperature if temperature is None else temperature
        if not _is_real(temperature) or temperature < 0:
            raise InputError("temperature", temperature, "use a finite noise scale >= 0 (1 = plain sampling)")
        use_cot = c.cot if cot is None else bool(cot)
        n = grid[0] * grid[1] * grid[2]
        drop = imgcond_drop or c.imgcond_drop
        if drop not in ("text", "visuals"):
            raise InputError("imgcond_drop", drop, "use 'visuals' (the release) or 'text' (the builtin planner)")
        order = user_order or c.user_order
        if order not in USER_ORDERS:
            raise InputError("user_order", order, f"use one of {USER_ORDERS}")
        txt_cfg, img_cfg = flow_head.effective_cfg(txt_cfg, img_cfg, cfg_rule or c.cfg_rule)

        cot_ids: list[int] = []
        if use_cot:
            cot_ids = (self.backbone.encode_text(request.cot_text) if request.cot_text is not None
                       else self._decode_cot(request, grid, max_cot_tokens))
        imgcond_is_cond = not request.sources and c.imgcond_without_sources == "cond"
        need_ic, need_u = flow_head.needed_streams(txt_cfg, img_cfg, imgcond_is_cond)
        rows = self._mask_row(n)
        streams = [self._build(request, grid, cot_ids=cot_ids, target_rows=rows, user_order=order)]
        if need_ic:  # the image-condition stream: the release drops the visuals, the builtin planner the text
            keep_text = drop == "visuals"
            streams.append(self._build(request, grid, text=keep_text, visuals=not keep_text, target_rows=rows,
                                       cot_ids=cot_ids if keep_text else None, user_order=order))
        if need_u:
            streams.append(self._build(request, grid, text=False, visuals=False, target_rows=rows, user_order=order))
        batch = pad_batch(streams)
        embeds = batch["embeds"]
        mask = additive_mask(block_attention_mask(batch["token_type"], batch["segment_ids"]), embeds.dtype)
        target_index = [s["target_index"] for s in streams]
        visuals = [True] + [drop == "text"] * need_ic + [False] * need_u  # which streams keep the sources
        source = self._aligned_source(request, grid) if self.local is not None else None
        tokens = torch.zeros(n, c.token_dim, device=self.device)
        if c.head == "codebook":
            return self._plan_codes(request, grid, steps, txt_cfg, img_cfg, temperature, g, callback, use_cot, cot_ids,
                                    embeds, mask, batch["position_ids"], target_index, need_ic, need_u, tokens,
                                    source, visuals)

        def predict(step: int, positions: torch.Tensor) -> torch.Tensor:
            hidden = self.backbone(embeds, mask, batch["position_ids"])[-2]
            local = self._stream_locals(embeds[0, target_index[0]], grid, source, visuals, positions)
            z = [self._conditions(hidden[b, idx[positions]]) + local[b] for b, idx in enumerate(target_index)]
            z_ic = z[1] if need_ic else None
            z_u = z[-1] if need_u else None
            return flow_head.sample_tokens(self.head, z[0], z_ic, z_u, token_dim=c.token_dim, steps=denoising_steps,
                                           txt_scale=txt_cfg, img_scale=img_cfg, generator=g, shift=c.head_shift,
                                           sigma_min=c.head_sigma_min, sigma_max=c.head_sigma_max,
                                           extra_one_step=c.head_extra_one_step, temperature=temperature)

        def write(positions: torch.Tensor, values: torch.Tensor) -> None:
            tokens[positions] = values
            fed = self.vit_in(values.to(self.mask_tokens.dtype)).to(embeds.dtype)
            for b, idx in enumerate(target_index):
                embeds[b, idx[positions]] = fed

        def on_step(step: int, positions: torch.Tensor, values: torch.Tensor) -> None:
            if callback is not None:
                callback(step, {"positions": positions, "tokens": values, "num_steps": len(counts)})

        reveal = maskgit.reveal_order(n, g, self.device)
        counts = maskgit.reveal_counts(n, steps)
        maskgit.run_reveal_loop(reveal, steps, predict, write, on_step)

        contexts = None
        if self.for_gen is not None:
            contexts = self._contexts(request, grid, cot_ids, self.vit_in(tokens.to(self.mask_tokens.dtype)), user_order=order)
        return PlanOutput(tokens.reshape(*grid, c.token_dim), reveal, counts,
                          self.backbone.decode_text(cot_ids) if use_cot else None, contexts)

    def _plan_codes(self, request: PlanRequest, grid: tuple[int, int, int], steps: int, txt_cfg: float, img_cfg: float,
                    temperature: float, g: torch.Generator | None, callback: StepCallback | None, use_cot: bool,
                    cot_ids: list[int], embeds: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor,
                    target_index: list[torch.Tensor], need_ic: bool, need_u: bool, tokens: torch.Tensor,
                    source: torch.Tensor | None, visuals: list[bool]) -> PlanOutput:
        """``plan``'s loop for the codebook head (the streams are built): CFG on logits, codes written as vectors."""
        c = self.config
        head = self._codebook_head("head")
        if not bool(head.fitted):
            logger.warning("planning with an unfitted codebook (random placeholder codes): fit one with "
                           "planners.semantic.codebook.fit_codebook and SemanticPlanner.set_codebook")
        n = tokens.shape[0]
        codes = torch.full((n,), -1, dtype=torch.long, device=self.device)

        def predict_logits(step: int, positions: torch.Tensor) -> torch.Tensor:
            hidden = self.backbone(embeds, mask, position_ids)[-2]
            local = self._stream_locals(embeds[0, target_index[0]], grid, source, visuals, positions)
            z = torch.cat([self._conditions(hidden[b, idx[positions]]) + local[b] for b, idx in enumerate(target_index)])
            per_stream = list(head(z).float().split(len(positions)))
            l_c = per_stream.pop(0)
            l_ic = per_stream.pop(0) if need_ic else l_c  # as in flow_head.sample_tokens: a stream the sum
            l_u = per_stream.pop(0) if need_u else l_c    # does not need stands in as cond
            return flow_head.three_stream_cfg(l_c, l_ic, l_u, txt_cfg, img_cfg)

        def write(positions: torch.Tensor, chosen: torch.Tensor) -> None:
            values = head.lookup(chosen)
            codes[positions] = chosen
            tokens[positions] = values.to(tokens.dtype)
            fed = self.vit_in(values.to(self.mask_tokens.dtype)).to(embeds.dtype)
            for b, idx in enumerate(target_index):
                embeds[b, idx[positions]] = fed

        counts = maskgit.reveal_counts(n, steps)

        def on_step(step: int, positions: torch.Tensor, chosen: torch.Tensor) -> None:
            if callback is not None:
                callback(step, {"positions": positions, "tokens": head.lookup(chosen), "codes": chosen,
                                "num_steps": len(counts)})

        if c.reveal_mode == "confidence":
            given = self._kept_source(request, grid, predict_logits, write, c.keep_source)
            if given is not None:
                counts = [int(given.sum()), *maskgit.reveal_counts(n - int(given.sum()), steps)] if not bool(given.all()) else [n]
                kept = given.nonzero()[:, 0]
                if callback is not None:
                    on_step(0, kept, codes[kept])
            step_of = (lambda s: s + 1) if given is not None else (lambda s: s)
            order, _ = maskgit.run_confidence_loop(n, steps, predict_logits, write, generator=g, temperature=temperature,
                                                   choice_temperature=c.choice_temperature,
                                                   callback=lambda s, p, ch: on_step(step_of(s), p, ch), device=self.device,
                                                   given=given)
            if given is not None:
                order = torch.cat([given.nonzero()[:, 0], order])
        else:
            order = maskgit.reveal_order(n, g, self.device)
            maskgit.run_reveal_loop(order, steps, lambda s, p: maskgit.sample_codes(predict_logits(s, p), temperature, g)[0],
                                    write, on_step)
        contexts = None
        if self.for_gen is not None:
            contexts = self._contexts(request, grid, cot_ids, self.vit_in(tokens.to(self.mask_tokens.dtype)))
        return PlanOutput(tokens.reshape(*grid, c.token_dim), order, counts,
                          self.backbone.decode_text(cot_ids) if use_cot else None, contexts, codes.reshape(grid))

    def _kept_source(self, request: PlanRequest, grid: tuple[int, int, int], predict_logits, write,
                     keep: float | None) -> torch.Tensor | None:
        """``keep_source``'s first step for an edit (v2v, rv2v) whose source video has the target's grid: the positions
        (bool ``(n,)``) whose source code has probability >= ``keep`` under the logits with everything masked,
        written with that code; None when it does not apply."""
        src = [s for s in request.sources if s.kind == "video"]
        if keep is None or request.task not in ("v2v", "rv2v") or not src or src[0].grid != tuple(grid):
            return None
        n = grid[0] * grid[1] * grid[2]
        positions = torch.arange(n, device=self.device)
        codes = self.quantize(src[0].tokens.reshape(n, -1).to(self.device).float()).to(self.device)
        probs = torch.softmax(predict_logits(0, positions).float(), -1)
        given = probs.gather(-1, codes[:, None])[:, 0] >= keep
        if not given.any():
            return None
        write(positions[given], codes[given])
        return given

    def _contexts(self, request: PlanRequest, grid, cot_ids, rows,
                  user_order: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The final pass of spec b.4: ``for_gen`` on the penultimate states of cond and uncond, cut into
        (ctx_c at all positions, ctx_c at non-target positions, ctx_u at non-target positions)."""
        items = [self._build(request, grid, cot_ids=cot_ids, target_rows=rows, user_order=user_order),
                 self._build(request, grid, text=False, visuals=False, target_rows=rows, user_order=user_order)]
        _, states = self._forward(items)
        hidden = states[-2]
        out = []
        for b, it in enumerate(items):
            length = it["embeds"].shape[0]
            keep = torch.ones(length, dtype=torch.bool, device=hidden.device)
            keep[it["target_index"]] = False
            ctx = self.for_gen(hidden[b, :length].to(self.mask_tokens.dtype))
            out.append((ctx, ctx[keep]))
        return out[0][0][None], out[0][1][None], out[1][1][None]

    # ---- persistence -------------------------------------------------------------------------------

    def save_pretrained(self, directory: str | Path) -> Path:
        """``config.json`` + ``model.safetensors`` (the planner's own weights) + ``backbone/`` (the backbone's
        own format: a transformers checkpoint, or the builtin's config + safetensors)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(directory / "backbone")
        own = {k: v for k, v in self.state_dict().items() if not k.startswith("backbone.")}
        save_state_dict(own, directory / "model.safetensors")
        meta = {"model": MODEL_NAME, "format_version": FORMAT_VERSION, "backbone": self.backbone.kind,
                "config": asdict(self.config)}
        (directory / "config.json").write_text(json.dumps(meta, indent=1))
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None) -> SemanticPlanner:
        directory = Path(directory)
        try:
            meta = json.loads((directory / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise InputError("directory", str(directory), f"no readable planner config.json ({e})") from None
        if not isinstance(meta, dict) or meta.get("model") != MODEL_NAME:
            raise InputError("directory", str(directory), f"config.json is not a {MODEL_NAME} (key 'model')")
        if meta.get("format_version") != FORMAT_VERSION:
            raise InputError("format_version", meta.get("format_version"), f"this code reads version {FORMAT_VERSION}")
        kind = meta.get("backbone")
        if kind not in BACKBONES:
            raise InputError("backbone", kind, f"use one of {sorted(BACKBONES)}")
        known = {f.name for f in fields(SemanticPlannerConfig)}
        cfg = meta.get("config")
        if not isinstance(cfg, dict) or set(cfg) - known:
            raise InputError("config", sorted(set(cfg or {}) - known), "unknown planner config keys")
        config = SemanticPlannerConfig(**cfg)
        device = select_device(device) if device is not None else torch.device("cpu")
        dtype = select_dtype(dtype, device) if dtype is not None else None
        backbone = BACKBONES[kind].from_pretrained(directory / "backbone", device=device, dtype=dtype)
        planner = cls(config, backbone)
        missing, unexpected = planner.load_state_dict(load_state_dict(directory / "model.safetensors"), strict=False)
        missing = [k for k in missing if not k.startswith("backbone.")]
        if missing or unexpected:
            raise InputError("model.safetensors", {"missing": missing, "unexpected": unexpected},
                             "the weights do not match config.json")
        return planner.to(device=device, dtype=dtype).eval()


def builtin_planner(config: SemanticPlannerConfig | None = None, backbone_config: Any = None) -> SemanticPlanner:
    """A fresh builtin planner: the tiny transformer backbone under ``config``."""
    from planners.semantic.backbones import TinyPlannerBackbone

    return SemanticPlanner(config, TinyPlannerBackbone(backbone_config))


__all__ = ["PlanExample", "PlanOutput", "PlanRequest", "PlannerLoss", "SemanticPlanner", "SemanticPlannerConfig",
           "builtin_planner"]
