"""The user's path (benchmarks.user_path): each method benchmark's headline comes from files a user would have, run as
the CLI runs them; raw frames are only a reference."""

from pathlib import Path

import numpy as np
import pytest

from benchmarks.user_path import UserPath

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
METHOD_BENCHMARKS = ("clear", "gridprobe", "bernini", "anymotion", "humor", "latent_reasoning")


@pytest.mark.parametrize("name", METHOD_BENCHMARKS)
def test_every_method_benchmark_runs_its_headline_through_the_user_path(name):
    source = (BENCHMARKS / f"{name}.py").read_text()
    assert "from benchmarks.user_path import UserPath" in source and "user.run(" in source


def test_a_clip_becomes_the_file_a_user_has_and_runs_as_the_cli_runs_it():
    from core.video import Video
    from pipelines.clear import ClearPipeline
    from worldgen.tasks import vrs

    s = vrs.generate(2_000_000_021, vrs.Config(level=1))
    world = s.worlds["video"]
    frames = np.stack([world.render(t).rgb for t in range(world.num_frames)])
    with UserPath() as user:
        path = user.clip(frames, fps=world.fps)
        with Video(path) as v:
            assert v.info.codec == "h264" and len(v) == len(frames)
        run = user.run("segment", {"video": path, "query": s.record["query"]}, overlay=False)
        masks = run.masks()
        assert masks.shape == frames.shape[:3] and run.result()["query"] == s.record["query"]
        pipe = ClearPipeline.build(config={"overlay": False})
        pipe.set_progress_bar_config(disable=True)
        assert np.array_equal(masks, pipe(Video(path), s.record["query"]).masks)  # the same as the pipeline on the file
        root = user.root
    assert not root.exists()  # the scratch folder goes with the context
