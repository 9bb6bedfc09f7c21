"""Is an input like the synthetic world the builtin models were trained on? A cheap, measured test.

The builtin models know only worldgen's world: a few flat, saturated shapes and stick figures on
dark or grey backgrounds. Such a picture is covered almost entirely by a handful of colours; a photo
or a rendered film is not. ``colour_coverage`` is the share of pixels in the 8 most common colours
after quantising each channel to 16 levels: on 106 held-out worldgen inputs of every task, written
as H.264 and read back, it is 0.785 or more; on 43 real frames (DAVIS, Big Buck Bunny) 0.565 or less
(``python -m benchmarks.out_of_world --seeds 8``, docs/BENCHMARKS.md). Below ``THRESHOLD`` the input
is flagged ``unlike_builtin_world``. It is a flag for the user, not a gate: the run goes on.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

THRESHOLD = 0.7  # between the lowest synthetic (0.785) and the highest real (0.565) coverage measured
NOTICE = ("the builtin models know only Atelier's synthetic world (flat coloured shapes and stick figures); on other "
          "inputs their answers mean little. Load a real checkpoint for real inputs ({how})")


def colour_coverage(image: np.ndarray, top: int = 8) -> float:
    """Share of the pixels of an RGB ``uint8`` image in its ``top`` most common colours (16 levels a channel)."""
    q = (np.asarray(image).reshape(-1, 3) // 16).astype(np.int32)
    counts = np.bincount((q[:, 0] << 8) | (q[:, 1] << 4) | q[:, 2], minlength=4096)
    return float(np.sort(counts)[::-1][:top].sum() / max(counts.sum(), 1))


def sample_frames(source: str | Path | np.ndarray, n: int = 3, height: int = 128) -> list[np.ndarray]:
    """A few frames of a video, image or array, read small (seeks; never decodes the whole clip)."""
    from core.video import Video

    with Video(source, height=height) as v:
        return list(v.get_frames(v.sample_indices(min(n, len(v)))))


def unlike_builtin_world(frames: Iterable[np.ndarray]) -> dict:
    """``{"unlike_builtin_world": bool, "colour_coverage": float}`` over ``frames`` (their mean coverage)."""
    values = [colour_coverage(f) for f in frames]
    coverage = float(np.mean(values)) if values else 1.0
    return {"unlike_builtin_world": coverage < THRESHOLD, "colour_coverage": round(coverage, 3)}


def check_inputs(app, inputs: dict) -> dict | None:
    """The flag for the first video / image input of a pipeline app (None when it takes none)."""
    for i in app.inputs:
        value = inputs.get(i.name)
        if i.kind == "images" and isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if i.kind in ("video", "image", "images") and value is not None:
            return unlike_builtin_world(sample_frames(value))
    return None


def uses_builtin(app, components: dict, options: dict) -> bool:
    """Whether any model of the run is a shipped builtin one: a slot left at its builtin default or named
    'builtin', or a saved ``--pipeline`` whose index records a builtin component."""
    if options.get("pipeline"):
        from pipelines.base import INDEX_FILE, read_index

        if not (Path(options["pipeline"]).expanduser() / INDEX_FILE).is_file():
            return False  # an official release folder (Bernini-Diffusers...): real checkpoints, nothing builtin
        saved = read_index(options["pipeline"])[0]["components"]
        backends = {slot: (entry or {}).get("backend") for slot, entry in saved.items()}
        return any(components.get(slot) in (None, "builtin") and backend == "builtin" for slot, backend in backends.items())
    return any(str(components.get(slot) or app.defaults.get(slot, "")) == "builtin" for slot in app.components)


# what a slot can name that ships with Atelier: the builtin models and the classic (OpenCV, weight-free) trackers
# and proposers; anything else is a checkpoint, sized after it loads
SHIPPED = ("builtin", "classic")


def only_builtin(app, components: dict, options: dict) -> bool:
    """Whether every component of the run ships with Atelier (no ``--pipeline`` folder; each slot a builtin model or
    a classic algorithm, or left empty where it is optional)."""
    if options.get("pipeline"):
        return False
    return all(str(components.get(slot) or app.defaults.get(slot) or "builtin") in SHIPPED for slot in app.components)


def notice(app, web: bool = False) -> str:
    """The one line said on stderr (and at the top of the web tab) whenever the builtin models run."""
    if web:
        return NOTICE.format(how="start the server with `atelier serve --vlm DIR` and pick it under 'models'")
    flag = next(iter(app.components.values()), "pipeline")
    return NOTICE.format(how=f"see `atelier info` and the --{flag} option")


def unlike_message(summary: dict) -> str:
    return (f"this input looks unlike that world (colour coverage {summary['colour_coverage']}, below the threshold "
            f"{THRESHOLD}; synthetic inputs measure 0.78 or more): treat the result as meaningless")
