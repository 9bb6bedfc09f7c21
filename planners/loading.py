"""One rule for turning a user's model spec into a ``VisionLanguageModel``.

``"builtin"`` is the shipped builtin VLM; a directory saved by the builtin VLM (its config.json
says ``"model": "builtin-vlm"``, e.g. from ``atelier train vlm --out DIR``) loads as one; any other
directory or an HF cache id is a transformers checkpoint. The CLI, batch runs, the web app, the
benchmarks and ``Pipeline.from_pretrained`` overrides all use this function.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from core.errors import REMOTE_CODE_HINT, AtelierError, InputError, refused_remote_code

BUILTIN = "builtin"
INSTANCES_DIR = Path(__file__).resolve().parents[1] / "weights" / "builtin" / "instances"


class BuiltinUnavailableError(AtelierError):
    """The builtin VLM (code or weights) is not installed."""


def load_vlm(spec: str = BUILTIN, device: str | None = None, dtype: str | None = None, trust_remote_code: bool = False) -> Any:
    """A ``VisionLanguageModel`` for ``spec``: ``"builtin"``, a builtin VLM folder, or a transformers
    checkpoint directory / HF cache id (loaded offline unless the environment allows the hub)."""
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise InputError("vlm", spec, "pass 'builtin' or a checkpoint directory / HF cache id")
    spec = str(spec).strip()
    if spec == BUILTIN:
        return _load_builtin(None, device, dtype)
    path = Path(spec).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError("vlm", spec, "is a file; pass a checkpoint directory (with config.json), 'builtin' or an HF cache id")
    if path.is_dir():
        kind = _saved_kind(path)
        if kind == "builtin-vlm":
            return _load_builtin(path, device, dtype)
        if kind is None:
            raise InputError("vlm", spec, "this folder has no config.json: pass a transformers checkpoint directory, "
                                          "a builtin VLM folder (atelier train vlm --out DIR) or 'builtin'")
        if kind != "transformers":
            raise InputError("vlm", spec, f"this folder holds a {kind!r}, not a vision-language model")
    elif spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise InputError("vlm", spec, "no such directory; pass 'builtin', an existing checkpoint directory or an HF cache id such as Qwen/Qwen3-VL-2B-Instruct")
    return _load_hf(spec, device, dtype, trust_remote_code)


def _saved_kind(directory: Path) -> str | None:
    """``builtin-vlm`` / another builtin kind / ``transformers`` / None (no readable config.json)."""
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if "model" in config and isinstance(config["model"], str):
        return config["model"]
    return "transformers" if "model_type" in config or "architectures" in config else None


def _load_builtin(path: Path | None, device: str | None, dtype: str | None) -> Any:
    try:
        builtin = importlib.import_module("planners.builtin")

        vlm = builtin.load_builtin_vlm(device=device) if path is None else builtin.BuiltinVisionLanguageModel.from_pretrained(path, device=device)
    except (ImportError, AttributeError, OSError, AtelierError) as e:
        if path is not None:  # the user's folder, not the shipped weights: name it, and no `make weights` advice
            raise InputError("vlm", str(path), f"a builtin VLM folder that does not load ({type(e).__name__}: {e}); "
                                               "pass a folder written by `atelier train vlm`") from None
        raise BuiltinUnavailableError(
            f"the builtin VLM is not available ({type(e).__name__}: {e}); pass --vlm PATH (a transformers VLM "
            "checkpoint directory or HF cache id, e.g. Qwen/Qwen3-VL-2B-Instruct) or run `make weights`") from None
    if dtype is not None and hasattr(vlm, "to"):
        vlm.to(dtype=dtype)
    return vlm


def _load_hf(spec: str, device: str | None, dtype: str | None, trust_remote_code: bool) -> Any:
    from planners.hf import HFVisionLanguageModel

    try:
        return HFVisionLanguageModel.from_pretrained(spec, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
    except AtelierError:
        raise
    except (OSError, ValueError, KeyError) as e:
        if refused_remote_code(e):  # refused, not broken: say how to allow it
            raise InputError("vlm", spec, REMOTE_CODE_HINT) from None
        # transformers says "offline mode" / "not a local folder" / "unrecognized model" in an OSError or ValueError
        raise InputError("vlm", spec, f"cannot load it as a transformers VLM ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                                      "pass a downloaded checkpoint directory, or download it first (the hub is offline here)") from None


def load_selector(spec: str = BUILTIN, device: str | None = None, dtype: str | None = None, trust_remote_code: bool = False) -> Any:
    """CLEAR's instance selector for ``spec``: ``"builtin"`` (the shipped builtin instance reasoner),
    a saved instance-reasoner folder, or any VLM spec ``load_vlm`` takes, wrapped in the
    causal-counterfactual selector (set-of-marks choice checked by keep-only / removal renders)."""
    path = Path(str(spec)).expanduser()
    if spec == BUILTIN or (path.is_dir() and _saved_kind(path) == "builtin-instance-reasoner"):
        try:
            from planners.builtin.instances import BuiltinInstanceReasoner

            return BuiltinInstanceReasoner.from_pretrained(INSTANCES_DIR if spec == BUILTIN else path, device=device)
        except (ImportError, OSError, AtelierError) as e:
            if spec != BUILTIN:
                raise InputError("vlm", str(spec), f"a builtin instance-reasoner folder that does not load ({type(e).__name__}: {e})") from None
            raise BuiltinUnavailableError(f"the builtin instance reasoner is not available ({type(e).__name__}: {e}); "
                                          "pass --vlm PATH (a transformers VLM checkpoint) or train it: python -m training.instances") from None
    from planners.counterfactual import CounterfactualSelector

    if path.is_dir() and (path / CounterfactualSelector.SETTINGS_FILE).is_file():
        return CounterfactualSelector.from_pretrained(path, device, dtype, trust_remote_code)
    return CounterfactualSelector(load_vlm(spec, device, dtype, trust_remote_code))
