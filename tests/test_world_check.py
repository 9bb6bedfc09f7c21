"""The builtin models say what they know: every verb on them notes it on stderr, and an input unlike
their synthetic world is flagged in the summary (a measured colour statistic, app/world_check.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.world_check import THRESHOLD, colour_coverage, unlike_builtin_world, uses_builtin
from pipelines.registry import apps
from shared_data import BBB as BUNNY
from test_malformed_inputs import good_media, media, run_cli, to_argv, valid_args  # noqa: F401  (media is a fixture)
from worldgen.tasks import vrs

pytestmark = pytest.mark.usefixtures("one_thread")


def test_synthetic_frames_pass_and_real_frames_are_flagged():
    world = vrs.generate(2 * 10**9, vrs.Config()).worlds["video"]
    frames = [world.render(t, annotations=False).rgb for t in (0, 10, 20)]
    assert unlike_builtin_world(frames)["unlike_builtin_world"] is False
    noise = np.random.default_rng(0).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    assert colour_coverage(noise[0]) < THRESHOLD and unlike_builtin_world(noise)["unlike_builtin_world"] is True
    if BUNNY.is_file():
        from app.world_check import sample_frames

        assert unlike_builtin_world(sample_frames(BUNNY))["unlike_builtin_world"] is True


@pytest.mark.parametrize("verb", sorted(apps()))
def test_every_verb_on_the_builtin_models_says_so_once(verb, media, capsys):
    app = apps()[verb]
    code, err = run_cli(to_argv(app, valid_args(app, good_media(app, media))) + ["--json"], capsys)
    assert code == 0, err
    assert err.count("know only Atelier's synthetic world") == 1, err


def test_the_summary_carries_the_flag(media, capsys):
    app = apps()["ask"]
    args = valid_args(app, good_media(app, media))
    from app.runner import run_app

    noise = np.random.default_rng(1).integers(0, 256, (12, 64, 64, 3), dtype=np.uint8)
    _, summary = run_app(app, {**args, "video": noise})
    assert summary["builtin_models"] is True and summary["unlike_builtin_world"] is True
    json.dumps(summary, default=str)


def test_only_builtin_runs_are_noted():
    app = apps()["ask"]
    assert uses_builtin(app, {}, {})
    assert uses_builtin(app, {"selector": "builtin"}, {})
    assert not uses_builtin(app, {"selector": "/models/Qwen3-VL-2B-Instruct"}, {})


def test_a_run_that_produces_nothing_is_a_failure(media, monkeypatch, capsys):
    """meme with no meme at all (every sample unreadable) is exit 1 with the reason, not an empty success."""
    import dataclasses
    from types import SimpleNamespace

    import pipelines.registry as registry
    from app.runner import EmptyResultError, run_app

    meme = apps()["meme"]
    empty = dataclasses.replace(meme, run=lambda pipe, inputs, **kw: SimpleNamespace(memes=[], message="no readable meme in 9 samples"))
    with pytest.raises(EmptyResultError, match="no readable meme"):
        run_app(empty, valid_args(empty, good_media(empty, media)))
    monkeypatch.setattr(registry, "apps", lambda: {**apps(), "meme": empty})
    code, err = run_cli(to_argv(empty, valid_args(empty, good_media(empty, media))), capsys)
    assert code == 1 and "produced nothing: no readable meme" in err and "Traceback" not in err, err
