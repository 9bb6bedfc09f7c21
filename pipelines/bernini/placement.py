"""A loaded hf Bernini pipeline placed by its memory plan (``core.memory_plan``), with accelerate's and diffusers' tools.

    plan = plan_pipeline(pipe, budget=parse_memory("24GB"), num_frames=81, height=480, width=832, segments=2)
    place(pipe, plan.strategy, torch.device("cuda"))

What each strategy does (the hooks are the libraries', none of ours):

- ``all-on-device``: every model moved to the device.
- ``active-expert``: the planner, UMT5 and the VAE moved to the device; the two DiT experts under accelerate's
  ``cpu_offload_with_hook``, chained, so that onloading one expert offloads the other (the renderer's switch).
- ``model-offload``: every renderer model under ``cpu_offload_with_hook`` (diffusers' ``enable_model_cpu_offload``
  does the same); the planner moved to the device for its stage and back when the plan is made (its backbone calls the
  Qwen model's submodules, not its forward, so a forward hook would never fire).
- ``fp8-dit``: as model offload, the experts' weights stored in float8 e4m3 and cast to bfloat16 per
  layer as it runs (diffusers' ``enable_layerwise_casting``).
- ``stream-dit`` / ``stream-all``: diffusers' ``apply_group_offloading`` at leaf level
  (each layer onloaded as it runs; with a CUDA stream, the next one prefetched) on the experts, and for
  ``stream-all`` on UMT5 too. Leaf level, not block level: the renderer calls the DiT's blocks from its own packed
  forward, so only the layers' own forwards are sure to fire. The planner is never streamed: its inputs follow its
  parameters' device, which streaming leaves on the CPU.

The VAE decodes in tiles from model offload on.
"""

from __future__ import annotations

from typing import Any

import torch

from core.memory_plan import STRATEGIES, Part, Plan, plan_dit
from core.shards import module_part


def _planner_modules(planner: Any) -> dict[str, torch.nn.Module]:
    """The planner's Qwen model apart from the rest of the planner (its heads), when it has one."""
    model = getattr(getattr(planner, "backbone", None), "model", None)
    if isinstance(model, torch.nn.Module):
        return {"planner (Qwen2.5-VL)": model}
    return {"planner": planner} if isinstance(planner, torch.nn.Module) else {}


def pipeline_parts(pipe: Any) -> list[Part]:
    """The loaded models of an hf Bernini pipeline, as ``Part`` s (counted from the modules; nothing moves)."""
    r = pipe.renderer
    parts = []
    if pipe.planner is not None:
        parts += [module_part(name, "planner", m, next(m.parameters()).dtype) for name, m in _planner_modules(pipe.planner).items()]
    if r.text_encoder is not None:
        parts.append(module_part("text encoder (UMT5)", "text_encoder", r.text_encoder, r.text_encoder.dtype))
    for name in ("transformer", "transformer_2"):
        m = getattr(r, name)
        if m is not None:
            parts.append(module_part(f"{name} (Wan DiT)", "dit", m, m.dtype))
    parts.append(module_part("vae", "vae", r.vae, r.vae.dtype))
    return parts


def plan_pipeline(pipe: Any, budget: int, *, num_frames: int, height: int, width: int, segments: int,
                  strategy: str | None = None) -> Plan:
    return plan_dit(pipeline_parts(pipe), budget, pipe.renderer.transformer.config, num_frames=num_frames, height=height,
                    width=width, segments=segments, strategy=strategy)


def _stream(module: torch.nn.Module, device: torch.device) -> None:
    from diffusers.hooks import apply_group_offloading

    module.to("cpu")
    apply_group_offloading(module, onload_device=device, offload_device=torch.device("cpu"), offload_type="leaf_level",
                           use_stream=device.type == "cuda")


def place(pipe: Any, strategy: str, device: torch.device) -> None:
    """Put ``pipe``'s models where ``strategy`` says (see the module docstring); ``device`` may be the CPU (tests)."""
    from accelerate import cpu_offload_with_hook

    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    r = pipe.renderer
    r.disable_model_cpu_offload()
    experts = {n: getattr(r, n) for n in ("transformer", "transformer_2") if getattr(r, n) is not None}
    pipe._planner_stage = None
    if strategy == "all-on-device":
        pipe.to(device)
        return
    if STRATEGIES.index(strategy) >= STRATEGIES.index("model-offload"):
        r.enable_tiling()
    if strategy == "active-expert":
        for m in [pipe.planner, r.text_encoder, r.vae]:
            if m is not None:
                m.to(device)
        hooks, previous = {}, None
        for name, m in experts.items():
            m.to("cpu")
            hooks[name] = previous = cpu_offload_with_hook(m, device, prev_module_hook=previous)[1]
        r._offload, r._offload_device = hooks, device
        return
    if strategy == "fp8-dit":
        for m in experts.values():
            m.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=m.dtype)  # bf16 on a GPU
    streamed = strategy in ("stream-dit", "stream-all")
    hooks = {}
    for name, m in {"text_encoder": r.text_encoder, **experts, "vae": r.vae}.items():
        if m is None:
            continue
        if (streamed and name in experts) or (strategy == "stream-all" and name == "text_encoder"):
            _stream(m, device)
            continue
        m.to("cpu")
        hooks[name] = cpu_offload_with_hook(m, device)[1]
    r._offload, r._offload_device = hooks, device
    if pipe.planner is not None:
        pipe.planner.to("cpu")
        pipe._planner_stage = device


def planning_starts(pipe: Any) -> None:
    """Move the planner to the device for its stage (model offload and after)."""
    if getattr(pipe, "_planner_stage", None) is not None:
        pipe.planner.to(pipe._planner_stage)


def planning_done(pipe: Any) -> None:
    """Move the planner off the device once its plan is made: the renderer's models need the room."""
    if getattr(pipe, "_planner_stage", None) is not None:
        pipe.planner.to("cpu")


__all__ = ["pipeline_parts", "place", "plan_pipeline", "planning_done", "planning_starts"]
