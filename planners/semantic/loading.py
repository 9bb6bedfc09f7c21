"""Loaders of Bernini's planner slots: ``load_planner`` and ``load_plan_encoder``.

    load_planner("builtin")                     # weights/builtin/layout_planner for t2v / r2v, weights/builtin/planner for v2v
    load_planner("/models/Bernini-Diffusers")   # the release's planner half (bernini/ shards + mllm/)
    load_planner("/runs/planner")               # a folder written by SemanticPlanner.save_pretrained
    load_plan_encoder("builtin")                # the builtin ViT + MiniLM (planners.semantic.encoder)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import InputError

PLANNER_DIR = Path(__file__).resolve().parents[2] / "weights" / "builtin" / "planner"
LAYOUT_PLANNER_DIR = PLANNER_DIR.parent / "layout_planner"
# the planner of each task the builtin backend ships (planners.semantic.by_task: each measured best on its task)
BUILTIN_TASKS = {"t2v": LAYOUT_PLANNER_DIR, "r2v": LAYOUT_PLANNER_DIR, "v2v": PLANNER_DIR}


def _model_of(path: Path) -> Any:
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def saved_planner(path: Path, device: Any, dtype: Any) -> Any:
    """The planner a folder's config.json names (``semantic-planner``, the builtin ``layout-planner`` or
    ``task-planners``), or None."""
    from planners.semantic.by_task import MODEL_NAME as BY_TASK, TaskPlanners
    from planners.semantic.layout_planner import MODEL_NAME as LAYOUT, LayoutPlanner
    from planners.semantic.planner import MODEL_NAME, SemanticPlanner

    model = (_model_of(path) or {}).get("model")
    if model == MODEL_NAME:
        return SemanticPlanner.from_pretrained(path, device=device, dtype=dtype)
    if model == LAYOUT:
        return LayoutPlanner.from_pretrained(path, device=device)
    if model == BY_TASK:
        return TaskPlanners.from_pretrained(path, device=device, dtype=dtype)
    return None


def shipped_planners(device: Any = None, dtype: Any = None) -> Any:
    """The shipped planners, each for the tasks ``BUILTIN_TASKS`` gives it."""
    from planners.semantic.by_task import TaskPlanners

    loaded = {}
    for folder in dict.fromkeys(BUILTIN_TASKS.values()):
        rel = folder.relative_to(PLANNER_DIR.parents[2])
        if not (folder / "model.safetensors").is_file():
            raise InputError("planner", "builtin", f"the builtin planner's weights are missing from {rel}; "
                                                   "restore them from git or train them with `make weights`")
        loaded[folder] = saved_planner(folder, device, dtype)
        if loaded[folder] is None:
            raise InputError("planner", "builtin", f"{rel}/config.json names no planner; restore it from git")
    return TaskPlanners({task: loaded[folder] for task, folder in BUILTIN_TASKS.items()})


def load_planner(spec: str | Path = "builtin", device: Any = None, dtype: Any = None, trust_remote_code: bool = False,
                 **_: Any) -> Any:
    """The planner for ``spec``: ``builtin`` (``shipped_planners``), a saved planner folder (``SemanticPlanner``, the
    builtin ``LayoutPlanner`` or ``TaskPlanners``, as its config.json names it, or one in ``planner/``), or the official
    ``Bernini-Diffusers`` / ``-v2`` folder (``bernini/`` shards + ``mllm/``, ``planners.semantic.official``)."""
    from planners.semantic.layout_planner import MODEL_NAME as LAYOUT
    from planners.semantic.planner import MODEL_NAME

    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise InputError("planner", spec, "pass 'builtin' or a planner folder")
    if str(spec) == "builtin":
        return shipped_planners(device, dtype)
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise InputError("planner", str(spec), "no such folder; pass 'builtin' or a planner folder")
    from renderers.bernini_official import is_full_layout

    if is_full_layout(path):  # the full release (Bernini-Diffusers / -v2); a missing mllm/ is named by its loader
        from planners.semantic.official import load_official_planner

        return load_official_planner(path, device=device, dtype=dtype)
    for candidate in (path, path / "planner"):
        planner = saved_planner(candidate, device, dtype)
        if planner is not None:
            return planner
    cfg = _model_of(path) or {}
    if "qwen" in str(cfg.get("model_type", "")):
        raise InputError("planner", str(spec), "a bare Qwen-VL checkpoint has no plan head (mask tokens, connectors, flow head); "
                                               "pass a Bernini planner folder, or run without one (--no-plan)")
    raise InputError("planner", str(spec), f"no {MODEL_NAME}, {LAYOUT} or task-planners config.json here or in planner/")


def load_plan_encoder(spec: str | Path = "builtin", device: Any = None, dtype: Any = None, trust_remote_code: bool = False,
                      **_: Any) -> Any:
    """The builtin planner's input encoder: ``builtin`` (the shipped ViT) or a saved encoder folder."""
    from planners.semantic.encoder import BuiltinPlanEncoder

    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise InputError("encoder", spec, "pass 'builtin' or a saved encoder folder")
    if str(spec) == "builtin":
        return BuiltinPlanEncoder.from_pretrained(None, device=device)
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise InputError("encoder", str(spec), "no such folder; pass 'builtin' or a saved encoder folder")
    return BuiltinPlanEncoder.from_pretrained(path, device=device)
