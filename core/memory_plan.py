"""Where a pipeline's models go for a memory budget, decided from configs before any weight is read.

    parts = [Part("planner", params=8.29e9, bytes=16.6e9, ...), ...]      # sizes from configs (meta tensors)
    plan = plan_memory(parts, budget=parse_memory("24GB"), activations=2.1e9)
    print(plan)                                                          # the strategy, each part's place, the peak

A ``Part`` is one model that runs in one ``stage`` of a call (the planner, the text encoder, a DiT expert, the VAE).
Strategies, fastest first; the first whose estimated device peak fits the budget is the plan:

1. ``all-on-device``: every part resident. Peak = all parts + the DiT's activations.
2. ``active-expert``: every part resident except DiT experts, of which only the one running is (Wan 2.2's two
   experts: the other is moved off at the switch). Peak = non-expert parts + the largest expert + activations.
3. ``model-offload``: each part on the device only while its stage runs (accelerate's ``cpu_offload_with_hook``, as
   diffusers' ``enable_model_cpu_offload``). Peak = the larger of the largest other part and an expert + activations.
4. ``fp8-dit``: as 3, with the DiT experts' linear weights stored in float8 (e4m3) and computed in
   bfloat16 (diffusers' ``enable_layerwise_casting``): half their bytes.
5. ``stream-dit``: as 3, the DiT experts group-offloaded layer by layer (diffusers' ``apply_group_offloading`` at
   leaf level, the next layer prefetched on a CUDA stream); counted as an expert's non-block weights and two blocks,
   an upper bound on what leaf-level streaming holds.
6. ``stream-all``: as 5, UMT5 streamed too (a planner is moved whole: its inputs follow its parameters).

The VAE decodes in tiles (``enable_tiling``) from strategy 3 on. The activation estimate is [PROPOSED]: a rule of
thumb from the DiT's token count (``dit_activation_bytes``), to be checked against a GPU by
``benchmarks/gpu_memory.py``; the plan says so in its notes.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace

from core.errors import InputError

UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "K": 10**3, "M": 10**6, "G": 10**9,
         "T": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
STRATEGIES = ("all-on-device", "active-expert", "model-offload", "fp8-dit",
              "stream-dit", "stream-all")


def parse_memory(text: str | int | float, name: str = "max_memory") -> int:
    """Bytes from ``"24GB"`` / ``"24 GiB"`` / ``"80G"`` / a number of bytes; an ``InputError`` naming ``name`` otherwise."""
    if isinstance(text, bool):
        raise InputError(name, text, "pass a size such as 24GB or 80GiB")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        unit = match.group(2).upper() if match else None
        if match is None or unit not in UNITS:
            raise InputError(name, text, "pass a size such as 24GB, 48GB or 80GiB (units: B, MB, GB, TB, MiB, GiB)")
        value = float(match.group(1)) * UNITS[unit]
    if not 2**20 <= value <= 2**50:
        raise InputError(name, text, "pass a size between 1 MiB and 1 PiB")
    return int(value)


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


@dataclass(frozen=True)
class Part:
    """One model of a pipeline. ``bytes`` at the dtype it runs in; ``fp8_bytes`` with its linear weights stored in
    float8; ``blocks`` repeated blocks of ``block_bytes`` each (0: none), ``rest_bytes`` what is not in a block."""

    name: str
    role: str  # "planner", "text_encoder", "dit", "vae", "heads"
    params: int
    bytes: int
    dtype: str
    fp8_bytes: int = 0
    blocks: int = 0
    block_bytes: int = 0

    @property
    def rest_bytes(self) -> int:
        return self.bytes - self.blocks * self.block_bytes


@dataclass
class Plan:
    """A placement: ``strategy``, each part's ``places`` entry, the estimated device ``peak`` (bytes) for ``budget``."""

    budget: int
    strategy: str
    peak: int
    activations: int
    places: dict[str, str]
    parts: list[Part] = field(repr=False)
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(p.bytes for p in self.parts)

    def to_dict(self) -> dict:
        return {"budget_bytes": self.budget, "strategy": self.strategy, "peak_bytes": self.peak,
                "activation_bytes": self.activations, "total_bytes": self.total, "places": dict(self.places),
                "parts": [asdict(p) for p in self.parts], "notes": list(self.notes)}

    def __str__(self) -> str:
        lines = [f"memory plan for {gb(self.budget)}: {self.strategy}; estimated device peak {gb(self.peak)} "
                 f"(with the DiT's activations, {gb(self.activations)}); all models {gb(self.total)}"]
        width = max(len(p.name) for p in self.parts)
        for p in self.parts:
            lines.append(f"  {p.name:{width}s}  {p.params / 1e9:7.3f}B params  {gb(p.bytes):>9s} {p.dtype:9s}  {self.places[p.name]}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _peak(parts: list[Part], strategy: str, activations: int) -> tuple[int, dict[str, str]]:
    """The device peak under ``strategy`` (the worst stage: the DiT's, with ``activations``, or another part's while it
    runs alone), and where each part goes."""
    experts = [p for p in parts if p.role == "dit"]
    others = [p for p in parts if p.role != "dit"]
    if strategy == "all-on-device":
        return sum(p.bytes for p in parts) + activations, {p.name: "on the device" for p in parts}
    if strategy == "active-expert":
        places = {p.name: "on the device" for p in others}
        places.update({p.name: "on the device while it denoises (the other expert off)" for p in experts})
        return sum(p.bytes for p in others) + max((p.bytes for p in experts), default=0) + activations, places
    offload = "on the device only while it runs (model offload)"
    streamed = "streamed block by block (group offload, next block prefetched)"
    if strategy == "model-offload":
        dit, places = [p.bytes for p in experts], {p.name: offload for p in parts}
    elif strategy == "fp8-dit":
        dit, places = [p.fp8_bytes or p.bytes for p in experts], {p.name: offload for p in others}
        places.update({p.name: "fp8 weights, bf16 compute; on the device only while it runs" for p in experts})
    elif strategy in ("stream-dit", "stream-all"):
        dit, places = [p.rest_bytes + 2 * p.block_bytes for p in experts], {p.name: offload for p in others}
        places.update({p.name: streamed for p in experts})
        if strategy == "stream-all":
            text = [p for p in others if p.role == "text_encoder" and p.blocks]
            places.update({p.name: streamed for p in text})
            others = [replace(p, bytes=p.rest_bytes + 2 * p.block_bytes) if p in text else p for p in others]
    else:
        raise InputError("strategy", strategy, f"choose one of {STRATEGIES}")
    return max([p.bytes for p in others] + [d + activations for d in dit] + [0]), places


def plan_memory(parts: list[Part], budget: int, activations: int, strategy: str | None = None) -> Plan:
    """The fastest strategy whose estimated peak fits ``budget`` (or ``strategy``, forced); an ``InputError`` naming
    the budget and the least it needs when none fits."""
    if not parts:
        raise InputError("parts", [], "a plan needs at least one model")
    tried = STRATEGIES if strategy is None else (strategy,)
    best = None
    for name in tried:
        peak, places = _peak(parts, name, activations)
        if best is None or peak < best[1]:
            best = (name, peak)
        if peak <= budget or strategy is not None:
            notes = ["activations are a rule-of-thumb estimate [PROPOSED], to be checked on a GPU (benchmarks/gpu_memory.py)"]
            if STRATEGIES.index(name) >= STRATEGIES.index("model-offload") and any(p.role == "vae" for p in parts):
                notes.append("the VAE decodes in tiles (enable_tiling)")
            if peak > budget:
                notes.append(f"over the budget by {gb(peak - budget)}")
            return Plan(budget, name, peak, activations, places, list(parts), notes)
    raise InputError("max_memory", gb(budget), f"no placement fits: the least this needs is about {gb(best[1])} "
                                               f"({best[0]}); raise --max-memory or use fewer frames or a smaller size")


def dit_activation_bytes(tokens: int, dim: int, ffn: int, itemsize: int = 2, margin: float = 1.5) -> int:
    """[PROPOSED] The DiT's working set for one forward at ``tokens`` tokens: the residual stream, q/k/v/out and the FFN's
    hidden layer live at once (attention through SDPA keeps no tokens x tokens matrix), times a ``margin``."""
    return int(tokens * (5 * dim + ffn) * itemsize * margin)


def plan_dit(parts: list[Part], budget: int, dit_config, *, num_frames: int, height: int, width: int, segments: int,
             strategy: str | None = None) -> Plan:
    """``plan_memory`` for a Wan-DiT pipeline: the activations of ``segments`` clips of ``num_frames`` at ``height`` x
    ``width`` side by side in context (an edit: the clip and its source), Wan's 4x8x8 VAE and the DiT's patches, from
    the DiT's config (a mapping: ``num_attention_heads``, ``attention_head_dim``, ``patch_size``, ``ffn_dim``)."""
    dim = int(dit_config.get("num_attention_heads", 40)) * int(dit_config.get("attention_head_dim", 128))
    pt, ph, pw = dit_config.get("patch_size", (1, 2, 2))
    tokens = segments * (((num_frames - 1) // 4 + 1) // pt) * (height // 8 // ph) * (width // 8 // pw)
    plan = plan_memory(parts, budget, dit_activation_bytes(tokens, dim, int(dit_config.get("ffn_dim", 4 * dim))), strategy)
    plan.notes.insert(0, f"activations for {segments} clip(s) of {num_frames} frames at {width}x{height} in context: {tokens} DiT tokens")
    return plan


__all__ = ["Part", "Plan", "STRATEGIES", "dit_activation_bytes", "gb", "parse_memory", "plan_dit", "plan_memory"]
