"""CLI = Python: on the same file at the same seed, ``atelier <verb>`` and the pipeline called on ``Video(file)`` (or the
image path) write the same files. Everything but the wall times in result.json must match byte for byte: the videos
(write_video gives the same bytes for the same frames), masks, pictures and the JSON results."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from core.video import Video, write_video

TIMES = {"seconds", "threads", "files"}  # what two runs of one computation may differ in


def _world_clip(world, path: Path) -> str:
    return str(write_video(path, np.stack([world.render(t, annotations=False).rgb for t in range(world.num_frames)]), fps=world.fps))


def _item(verb: str, tmp: Path):
    """``(CLI arguments, pipeline class, call(pipe) -> output)`` on a held-out worldgen item written as a user's file."""
    from worldgen.tasks import edit, meme, motion_edit, spatial, vrs

    if verb == "segment":
        s = vrs.generate(2_000_000_011, vrs.Config(level=2))
        f = _world_clip(s.worlds["video"], tmp / "clip.mp4")
        from pipelines.clear import ClearPipeline
        return [f, s.record["query"]], ClearPipeline, lambda p: p(Video(f), s.record["query"], generator=0)
    if verb == "ask":
        s = vrs.generate(2_000_000_012, vrs.Config(level=1))
        f = _world_clip(s.worlds["video"], tmp / "clip.mp4")
        q, opts = "What colour is the square?", ["red", "green", "blue", "yellow"]
        from pipelines.gridprobe import GridProbePipeline
        return [f, "-q", q, "--options", *opts], GridProbePipeline, lambda p: p(Video(f), q, opts, generator=0)
    if verb == "motion":
        s = motion_edit.generate(2_000_000_013, motion_edit.Config())
        f = _world_clip(s.worlds["source"], tmp / "clip.mp4")
        from pipelines.anymotion import AnyMotionPipeline
        return [f, s.record["instruction"]], AnyMotionPipeline, lambda p: p(Video(f), s.record["instruction"], generator=0)
    if verb == "edit":
        s = edit.generate(2_000_000_014, edit.Config())
        f = _world_clip(s.worlds["source"], tmp / "clip.mp4")
        from pipelines.bernini import BerniniPipeline
        return [f, s.record["instruction"]], BerniniPipeline, lambda p: p(s.record["instruction"], video=Video(f), generator=0)
    if verb == "generate":  # no file in: the same prompt, the same seed
        from pipelines.bernini import BerniniPipeline
        prompt = "a red star bouncing to the left"
        return [prompt], BerniniPipeline, lambda p: p(prompt, generator=0)
    if verb == "meme":
        s = meme.generate(2_000_000_015, meme.Config())
        f = str(tmp / "template.png")
        Image.fromarray(s.images["still"]).save(f)
        from pipelines.humor import HumorPipeline
        return [f], HumorPipeline, lambda p: p(f, None, generator=0)
    if verb == "reason":
        s = spatial.generate(2_000_000_016, spatial.Config())
        f = str(tmp / "image.png")
        Image.fromarray(s.images["image"]).save(f)
        q, opts = s.record["question"], s.record["options"]
        from pipelines.latent_reasoning import LatentReasoningPipeline
        return [f, "-q", q, "--options", *opts], LatentReasoningPipeline, lambda p: p(f, q, opts, generator=0)
    raise AssertionError(verb)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(".atelier")}


def _without_times(data):
    if isinstance(data, dict):
        return {k: _without_times(v) for k, v in data.items() if k not in TIMES}
    if isinstance(data, list):
        return [_without_times(v) for v in data]
    if isinstance(data, str):  # a reasoning line may say how long a step took
        return re.sub(r"\d+(\.\d+)? m?s\b", "<time>", data)
    return data


@pytest.mark.parametrize("verb", ["segment", "ask", "motion", "generate", "edit", "meme", "reason"])
def test_the_cli_on_a_file_writes_what_the_pipeline_on_the_same_file_writes(verb, tmp_path, capsys):
    args, cls, call = _item(verb, tmp_path)
    assert main([verb, *args, "--seed", "0", "-o", str(tmp_path / "cli")]) == 0, capsys.readouterr().err
    from pipelines.registry import get_app

    pipe = cls.build(defaults=get_app(verb).defaults)  # the verb's default models, as the CLI loads them
    pipe.set_progress_bar_config(disable=True)
    call(pipe).save(tmp_path / "python")
    cli, python = _files(tmp_path / "cli"), _files(tmp_path / "python")
    assert sorted(cli) == sorted(python)
    for name in cli:
        if name.endswith(".json"):
            a, b = (_without_times(json.loads(d[name])) for d in (cli, python))
            assert a == b, name
        else:
            assert cli[name] == python[name], name
