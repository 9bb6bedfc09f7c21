"""Example inputs for the web tabs: synthetic clips the built-in models know, made on first use.

The app (not the pipelines) owns these because they come from ``worldgen``, which pipelines never
see. Clips are written once per process into a temporary folder, removed when the process exits.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="atelier-examples-"))
    atexit.register(shutil.rmtree, folder, True)  # the server's examples go with its process, not later
    return folder


@functools.lru_cache(maxsize=1)
def gridprobe_examples() -> list[list]:
    """Three held-out long-video questions (needle, counting, order), each with its 1,000-frame clip."""
    from core.video import write_video
    from worldgen.tasks import longqa
    from worldgen.tasks.base import split_seed

    rows = []
    for i, kind in enumerate(("needle", "counting", "order")):
        sample = longqa.generate(split_seed("test", 7, i), longqa.Config(level=1, kind=kind))
        world, rec = sample.worlds["video"], sample.record
        clip = _folder() / f"longqa_{kind}.mp4"
        if not clip.exists():
            write_video(clip, (world.render(t, annotations=False).rgb for t in range(world.num_frames)), fps=world.fps)
        rows.append([str(clip), rec["question"], "\n".join(rec["options"])])
    return rows


@functools.lru_cache(maxsize=1)
def clear_examples() -> list[list]:
    """Three held-out video reasoning segmentation clips (levels 1-3) with their queries."""
    from core.video import write_video
    from worldgen.tasks import vrs
    from worldgen.tasks.base import split_seed

    rows = []
    for level in (1, 2, 3):
        sample = vrs.generate(split_seed("test", 11, level), vrs.Config(level=level))
        world = sample.worlds["video"]
        clip = _folder() / f"vrs_level{level}.mp4"
        if not clip.exists():
            write_video(clip, (world.render(t).rgb for t in range(world.num_frames)), fps=world.fps)
        rows.append([str(clip), sample.record["query"]])
    return rows


@functools.lru_cache(maxsize=1)
def generate_examples() -> list[list]:
    """Prompts the built-in Bernini models know (t2v), and one r2v prompt with its reference images;
    rows are (prompt, first-frame image, reference images)."""
    from PIL import Image

    from worldgen.tasks import ref2v
    from worldgen.tasks.base import split_seed

    rows = [[p, None, None] for p in ("a red star bouncing to the left", "a large blue square moves to the right",
                                      "a small yellow circle falls down on a grey background")]
    sample = ref2v.generate(split_seed("test", 13, 0), ref2v.Config(level=1, size=64, num_frames=16))
    refs = []
    for name, image in sample.images.items():
        path = _folder() / f"ref2v_{name}.png"
        if not path.exists():
            Image.fromarray(image).save(path)
        refs.append(str(path))
    return rows + [[sample.record["prompt"], None, refs]]


@functools.lru_cache(maxsize=1)
def edit_examples() -> list[list]:
    """Three held-out worldgen edits (a recolour, a reshape, a motion change, ...) at the built-in size."""
    from core.video import write_video
    from worldgen.tasks import edit
    from worldgen.tasks.base import split_seed

    rows = []
    for level in (1, 2, 3):
        sample = edit.generate(split_seed("test", 17, level), edit.Config(level=level, size=64, num_frames=16))
        world = sample.worlds["source"]
        clip = _folder() / f"edit_level{level}.mp4"
        if not clip.exists():
            write_video(clip, (world.render(t, annotations=False).rgb for t in range(world.num_frames)), fps=world.fps)
        rows.append([str(clip), sample.record["instruction"], None])
    return rows


@functools.lru_cache(maxsize=1)
def motion_examples() -> list[list]:
    """Held-out worldgen motion edits: a stick figure doing one action, an instruction for another."""
    from core.video import write_video
    from worldgen.tasks import motion_edit
    from worldgen.tasks.base import split_seed

    rows = []
    for level, wording in ((1, "Make the person raise both arms instead."), (2, None), (3, "Have them squat.")):
        sample = motion_edit.generate(split_seed("test", 29, level), motion_edit.Config(level=level))
        world = sample.worlds["source"]
        clip = _folder() / f"motion_level{level}.mp4"
        if not clip.exists():
            write_video(clip, (world.render(t, annotations=False).rgb for t in range(world.num_frames)), fps=world.fps)
        rows.append([str(clip), wording or sample.record["instruction"]])
    return rows


@functools.lru_cache(maxsize=1)
def meme_examples() -> list[list]:
    """Held-out worldgen meme scenes as template images (64x64 stills): two seen templates, one held out, one with a topic."""
    from PIL import Image

    from worldgen.tasks import meme
    from worldgen.tasks.base import split_seed

    rows, wanted = [], [("chase", None), ("fall", "mondays"), ("hide", None)]
    for template, topic in wanted:
        i = 0
        while True:  # the first TEST scene of this template (cheap: a still per try)
            sample = meme.generate(split_seed("test", 31, i))
            if sample.record["template"] == template:
                break
            i += 1
        path = _folder() / f"meme_{template}.png"
        if not path.exists():
            Image.fromarray(sample.images["still"]).save(path)
        rows.append([str(path), topic or ""])
    return rows


@functools.lru_cache(maxsize=1)
def latent_reasoning_examples() -> list[list]:
    """Three held-out worldgen ``spatial`` scenes (levels 1-3: 12-48 small shapes at 512x512) with their questions."""
    from PIL import Image

    from worldgen.tasks import spatial
    from worldgen.tasks.base import split_seed

    rows = []
    for level in (1, 2, 3):
        sample = spatial.generate(split_seed("test", 11, level), spatial.Config(level=level))
        path = _folder() / f"spatial_level{level}.png"
        if not path.exists():
            Image.fromarray(sample.images["image"]).save(path)
        rows.append([str(path), sample.record["question"], "\n".join(sample.record["options"])])
    return rows


EXAMPLES: dict[str, Callable[[], list[list]]] = {"ask": gridprobe_examples, "segment": clear_examples,
                                                 "generate": generate_examples, "edit": edit_examples, "motion": motion_examples,
                                                 "meme": meme_examples, "reason": latent_reasoning_examples}
