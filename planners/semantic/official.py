"""The planner half of the official full-Bernini release (``ByteDance/Bernini-Diffusers``, ``-v2``).

The release keeps every trained tensor in ``bernini/model-*.safetensors`` (+ ``model.safetensors.index.json``)
under one prefix per part, and the Qwen2.5-VL assets (config, tokenizer, processor; no weights) in ``mllm/``.
The planner's parts and their names in the release [PORT T8mars/comfyui-bernini-v2-T8 ``bernini_v2/state_dict.py``,
"verified against bernini/model.safetensors.index.json"; module shapes from its ``planner_model.py``]:

    mllm.model.*, mllm.visual.*, mllm.lm_head.weight     Qwen2.5-VL in the Hugging Face checkpoint names
    connector.proj_gen.{0,2,3}.*                         -> for_gen  (Linear, GELU, RMSNorm, Linear: 3584 -> 4096)
    connector.pred_vit.{0,2,3,4}.*                       -> for_vit  (Linear, GELU, Linear, RMSNorm, Linear)
    mask_tokens  [1, 4096, 3584]                         -> mask_tokens (num_mask_tokens = 4096; the port plans
                                                            with row 0 for every target, as our default does)
    vit_decoder.net.{input_proj, time_embed.mlp.{0,2}}   -> head.{input_proj, time_embed.mlp.{0,2}}
    vit_decoder.net.cond_embed                           -> head.cond_proj
    vit_decoder.net.res_blocks.N.{in_ln, mlp.{0,2}, adaLN_modulation.1} -> head.blocks.N.{norm, mlp.{0,2}, ada.1}
    vit_decoder.net.final_layer.{norm_final, linear, adaLN_modulation.1} -> head.final.{norm, linear, ada.1}

Sizes (token width, head width / depth, context width, mask rows) are read from the tensor shapes, so a
smaller checkpoint of the same layout loads too. Loading is strict (``core.shards.load_strict``): a missing,
renamed or extra tensor is an ``InputError`` naming the release's key.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from core.errors import InputError
from core.shards import ShardedCheckpoint, empty_module, expected_tensors, load_strict

MLLM_DIR = "mllm"
MLLM_PREFIX = "mllm."
PLANNER_PREFIXES = ("connector.", "vit_decoder.", "mask_tokens")

# (release name, our name): {i} / {j} are indices, {rest} the tensor's own name (weight, bias).
_RULES = (
    ("connector.proj_gen.{i}.{rest}", "for_gen.{i}.{rest}"),
    ("connector.pred_vit.{i}.{rest}", "for_vit.{i}.{rest}"),
    ("mask_tokens", "mask_tokens"),
    ("vit_decoder.net.input_proj.{rest}", "head.input_proj.{rest}"),
    ("vit_decoder.net.time_embed.mlp.{i}.{rest}", "head.time_embed.mlp.{i}.{rest}"),
    ("vit_decoder.net.cond_embed.{rest}", "head.cond_proj.{rest}"),
    ("vit_decoder.net.res_blocks.{i}.in_ln.{rest}", "head.blocks.{i}.norm.{rest}"),
    ("vit_decoder.net.res_blocks.{i}.mlp.{j}.{rest}", "head.blocks.{i}.mlp.{j}.{rest}"),
    ("vit_decoder.net.res_blocks.{i}.adaLN_modulation.{j}.{rest}", "head.blocks.{i}.ada.{j}.{rest}"),
    ("vit_decoder.net.final_layer.norm_final.{rest}", "head.final.norm.{rest}"),
    ("vit_decoder.net.final_layer.linear.{rest}", "head.final.linear.{rest}"),
    ("vit_decoder.net.final_layer.adaLN_modulation.{j}.{rest}", "head.final.ada.{j}.{rest}"),
)


def _pattern(template: str) -> re.Pattern:
    out = re.escape(template)
    for name, rx in (("i", r"\d+"), ("j", r"\d+"), ("rest", r"[A-Za-z_][\w.]*")):
        out = out.replace(re.escape("{" + name + "}"), f"(?P<{name}>{rx})")
    return re.compile(out + "$")


_COMPILED = [(_pattern(a), b, _pattern(b), a) for a, b in _RULES]


def planner_name(official: str) -> str | None:
    """Our planner tensor name for a release key (connector / vit_decoder / mask_tokens), or None."""
    for rx, ours, _, _ in _COMPILED:
        m = rx.match(official)
        if m:
            return ours.format(**m.groupdict())
    return None


def official_planner_name(ours: str) -> str | None:
    """The release key of one of our planner tensors (not the backbone's), or None if it has no place there."""
    for _, _, rx, official in _COMPILED:
        m = rx.match(ours)
        if m:
            return official.format(**m.groupdict())
    return None


def qwen_name(official: str) -> str:
    """A release ``mllm.`` key (prefix removed; the Hugging Face checkpoint names ``model.*`` / ``visual.*``)
    as the module name of transformers' ``Qwen2_5_VLForConditionalGeneration`` (``model.language_model.*``,
    ``model.visual.*``). Names already in the module form pass through."""
    if official.startswith("visual."):
        return "model." + official
    if official.startswith("model.") and not official.startswith(("model.language_model.", "model.visual.")):
        return "model.language_model." + official[len("model."):]
    return official


def official_qwen_name(ours: str) -> str:
    """The inverse of ``qwen_name``: the checkpoint name Hugging Face (and the release) writes."""
    if ours.startswith("model.language_model."):
        return "model." + ours[len("model.language_model."):]
    if ours.startswith("model.visual."):
        return ours[len("model."):]
    return ours


def _shape(ckpt: ShardedCheckpoint, key: str) -> tuple[int, ...]:
    if key not in ckpt:
        raise InputError(str(ckpt.where), f"missing {key}", "the release's planner needs it; restore the bernini/ shards")
    return ckpt.shape(key)


def load_official_planner(root: str | Path, ckpt: ShardedCheckpoint | None = None, device: Any = None,
                          dtype: Any = None) -> Any:
    """A ``SemanticPlanner`` (Qwen2.5-VL backbone) from a full-Bernini release folder; weights streamed from
    ``bernini/``, the Qwen config / tokenizer / processor from ``mllm/``. ``dtype`` "stored" keeps each
    tensor's stored dtype. Chain of thought is off: the release was not trained to write one."""
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    from core.device import load_dtype, select_device
    from planners.semantic.backbones import HFPlannerBackbone
    from planners.semantic.planner import SemanticPlanner, SemanticPlannerConfig

    root = Path(root)
    mllm = root / MLLM_DIR
    if not (mllm / "config.json").is_file():
        raise InputError(str(root), f"no {MLLM_DIR}/config.json", "the release keeps the Qwen2.5-VL config, tokenizer "
                                                                  "and processor in mllm/; restore it")
    ckpt = ckpt or ShardedCheckpoint.open(root / "bernini")
    dev = select_device(device)
    dt = load_dtype(dtype, dev)  # None on the CPU: each tensor as stored (bf16 stays bf16)
    # the release's mllm/ is Qwen2.5-VL, which transformers holds: its folder is data, never code
    processor = AutoProcessor.from_pretrained(str(mllm), trust_remote_code=False)
    with empty_module():
        qwen = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(str(mllm), trust_remote_code=False))
    names = {qwen_name(k[len(MLLM_PREFIX):]): k for k in ckpt.keys() if k.startswith(MLLM_PREFIX)}
    load_strict(qwen, ckpt, names, f"{root / 'bernini'} (mllm.)", dtype=dt,
                official_name=lambda n: MLLM_PREFIX + official_qwen_name(n))
    backbone = HFPlannerBackbone(qwen.eval(), processor)

    h = backbone.hidden_size
    in_w = _shape(ckpt, "vit_decoder.net.input_proj.weight")
    rows = _shape(ckpt, "mask_tokens")
    gen = _shape(ckpt, "connector.proj_gen.0.weight")
    depth = len({m.group(1) for k in ckpt.keys() if (m := re.match(r"vit_decoder\.net\.res_blocks\.(\d+)\.", k))})
    if len(rows) != 3 or rows[0] != 1 or rows[2] != h:
        raise InputError(f"{ckpt.where}: mask_tokens", list(rows), f"expected [1, N, {h}] (the Qwen width)")
    config = SemanticPlannerConfig(token_dim=int(in_w[1]), context_dim=int(gen[0]), num_mask_tokens=int(rows[1]),
                                   head_width=int(in_w[0]), head_depth=depth, cot=False)
    with empty_module():
        planner = SemanticPlanner(config, backbone)
    own = {}
    for k in ckpt.keys():
        if k.startswith(PLANNER_PREFIXES):
            own[planner_name(k) or f"<no place>{k}"] = k  # an unmapped key stays in, to be reported as unexpected
    load_strict(planner, ckpt, own, f"{root / 'bernini'} (planner)", dtype=dt, only=lambda n: not n.startswith("backbone."),
                official_name=lambda n: official_planner_name(n) or n)
    from renderers.bernini_official import full_release

    planner.release = full_release(root)  # read by BerniniPipeline.release when its setting is auto
    return planner.to(device=dev).eval()


def official_planner_tensors(planner: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of a Qwen-backbone ``SemanticPlanner`` under its release key (``mllm.``, ``connector.``,
    ``vit_decoder.``, ``mask_tokens``); a part the release has no place for is an ``InputError``."""
    from planners.semantic.backbones import HFPlannerBackbone

    if not isinstance(getattr(planner, "backbone", None), HFPlannerBackbone):
        raise InputError("planner", type(getattr(planner, "backbone", planner)).__name__,
                         "only a Qwen2.5-VL planner has an official layout (the builtin one is ours alone)")
    if planner.config.head != "flow":
        raise InputError("planner.head", planner.config.head, "the release has the flow head only")
    qwen = planner.backbone.model
    _, tied = expected_tensors(qwen)
    skip = {n for g in tied for n in g[1:]}  # one copy of a tied tensor, as Hugging Face saves it
    for name, t in qwen.state_dict().items():
        if name not in skip:
            yield MLLM_PREFIX + official_qwen_name(name), t
    for name, t in planner.state_dict().items():
        if name.startswith("backbone."):
            continue
        official = official_planner_name(name)
        if official is None:
            raise InputError("planner", name, "the release has no place for this part (a [PROPOSED] option of ours); "
                                              "keep our pipeline.json layout for this planner")
        yield official, t


def write_mllm_assets(planner: Any, folder: str | Path) -> Path:
    """``mllm/`` as the release has it: the Qwen config, tokenizer and processor files, no weights."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    qwen = planner.backbone.model
    qwen.config.save_pretrained(folder)
    if getattr(qwen, "generation_config", None) is not None:
        qwen.generation_config.save_pretrained(folder)
    planner.backbone.processor.save_pretrained(folder)
    return folder
