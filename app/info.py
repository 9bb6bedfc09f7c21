"""`atelier info`: versions, device, backends and the weights Atelier can find."""

from __future__ import annotations

import importlib.metadata as md
import json
import platform
from pathlib import Path

WEIGHTS_DIR = Path(__file__).resolve().parent.parent / "weights"
_PACKAGES = ("atelier", "torch", "torchvision", "transformers", "diffusers", "accelerate", "av", "decord",
             "opencv-python-headless", "pycocotools", "gradio", "sam2", "mediapipe", "xformers")  # fmt: skip


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def collect_info() -> dict:
    import torch

    from core.device import select_device
    from pipelines.registry import apps

    versions = {p: _version(p) for p in _PACKAGES}
    builtin = sorted(p.parent.name for p in (WEIGHTS_DIR / "builtin").glob("*/model.safetensors"))
    catalog_path = WEIGHTS_DIR / "catalog.json"
    catalog = json.loads(catalog_path.read_text()) if catalog_path.is_file() else {}
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "device": str(select_device()),
        "cuda": torch.cuda.is_available(),
        "threads": torch.get_num_threads(),
        "backends": {
            "video_decoders": ["pyav"] + (["decord"] if versions["decord"] else []),
            "planners": ["builtin"] + (["hf"] if versions["transformers"] else []),
            "trackers": ["opencv"] + (["sam2"] if versions["sam2"] else []),
            "web": bool(versions["gradio"]),
        },
        "builtin_weights": builtin,
        "pipelines": {a.verb: {"name": a.name, "help": a.help} for a in apps().values()},
        "catalog": catalog.get("pipelines", {}),
    }


def format_info(info: dict) -> str:
    lines = [f"atelier {info['versions']['atelier']}  python {info['python']}  ({info['platform']})",
             f"device: {info['device']}  (cuda available: {info['cuda']}, cpu threads: {info['threads']})", "versions:"]
    lines += [f"  {k:24s} {v or '-'}" for k, v in info["versions"].items()]
    lines.append("backends:")
    lines += [f"  {k:24s} {v}" for k, v in info["backends"].items()]
    lines.append("pipelines (atelier VERB --help):")
    lines += [f"  {verb:24s} {p['name']}: {p['help']}" for verb, p in info["pipelines"].items()]
    lines.append("builtin weights: " + (", ".join(info["builtin_weights"]) or "none yet (make weights)"))
    lines.append("real checkpoints each verb loads, by hub id or folder (weights/catalog.json; * = the method's official "
                 "release, run as its official code runs it: docs/FIDELITY.md):")
    for verb, entries in info["catalog"].items():
        lines += [f"  {verb:10s} {e['flag']:16s} {'*' if e.get('official') else ' '} {e['id']}" + (f"  {e['size']}" if e.get("size") else "")
                  for e in entries]
    return "\n".join(lines)


def device_free_bytes() -> int:
    """The memory a plan may use when no budget is given: the CUDA device's free memory, else the host's available."""
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.mem_get_info()[0])
    import psutil

    return int(psutil.virtual_memory().available)


def memory_plan(source: str, max_memory: str | None, *, revision: str | None = None, **size):
    """The memory plan of an official Bernini release (``atelier info --plan``): configs only, nothing loads."""
    from core.hub import resolve_model
    from core.memory_plan import parse_memory
    from pipelines.bernini.memory import plan_release

    budget = parse_memory(max_memory) if max_memory is not None else device_free_bytes()
    return plan_release(resolve_model("plan", source, revision), budget, **size)
