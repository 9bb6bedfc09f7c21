"""Every pipeline the way a diffusers user writes it: ``XPipeline.build()`` with no arguments loads the CLI's
default models, a keyword naming a config field (or diffusers' alias) overrides it for that call only, and
``callback_on_step_end`` may take diffusers' four arguments ``(pipe, step, timestep, callback_kwargs)``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.errors import InputError
from pipelines.registry import apps

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def clip():
    from worldgen.tasks import vrs

    world = vrs.generate(2 * 10**9, vrs.Config()).worlds["video"]
    return np.stack([world.render(t, annotations=False).rgb for t in range(16)])


@pytest.fixture(scope="module")
def figure():
    from worldgen.tasks import motion_edit

    world = motion_edit.generate(2 * 10**9, motion_edit.Config()).worlds["source"]
    return np.stack([world.render(t, annotations=False).rgb for t in range(world.num_frames)])


@pytest.fixture(scope="module")
def still():
    from worldgen.tasks import spatial

    return next(iter(spatial.generate(2 * 10**9, spatial.Config()).images.values()))


def calls(clip, figure, still):
    """verb -> (positional inputs, keyword inputs, per-call settings), small enough to run in seconds."""
    return {
        "ask": ((clip, "What colour is the square?", ["red", "blue", "green"]), {}, {"grid": 2}),
        "segment": ((clip, "the object that moves"), {}, {"anchor_samples": 2, "overlay": False}),
        "generate": (("a red star bouncing to the left",), {}, {"num_inference_steps": 1, "num_frames": 2, "planning_steps": 1}),
        "edit": (("make the square blue",), {"video": clip[:4]}, {"num_inference_steps": 1, "num_frames": 2, "planning_steps": 1}),
        "motion": ((figure, "make the person raise the left arm"), {}, {"num_inference_steps": 1, "num_frames": 4}),
        "meme": ((still, "mondays"), {}, {"num_memes": 1, "max_rounds": 1}),
        "reason": ((still, "What colour is the large star?", ["red", "blue", "green"]), {}, {"num_slots": 1}),
    }


@pytest.mark.parametrize("verb", sorted(apps()))
def test_a_diffusers_style_script_runs(verb, clip, figure, still):
    app = apps()[verb]
    pipe = app.pipeline_class.build()  # no arguments: the CLI's default models
    pipe.set_progress_bar_config(disable=True)
    before = dataclasses.asdict(pipe.config)
    seen = []

    def on_step_end(pipe_, step, timestep, callback_kwargs):  # diffusers' four-argument form
        seen.append((step, timestep, isinstance(callback_kwargs, dict)))
        return callback_kwargs

    args, kwargs, settings = calls(clip, figure, still)[verb]
    out = pipe(*args, **kwargs, **settings, generator=0, callback_on_step_end=on_step_end)
    assert out is not None
    assert seen and all(ok for _, _, ok in seen), seen
    assert dataclasses.asdict(pipe.config) == before  # per-call settings last one call
    used = out.config or {}
    for key, value in settings.items():
        name = pipe.call_aliases.get(key, key)
        if name in used:
            assert used[name] == value, (name, used[name], value)


def test_per_call_settings_are_checked_like_the_config():
    pipe = apps()["ask"].pipeline_class.build()
    with pytest.raises(InputError, match="grid"):
        pipe(np.zeros((8, 32, 32, 3), np.uint8), "q?", ["a", "b"], grid=10_000)
    with pytest.raises(TypeError):
        pipe(np.zeros((8, 32, 32, 3), np.uint8), "q?", ["a", "b"], no_such_setting=1)


@pytest.mark.parametrize("verb", ["generate", "motion"])
def test_a_callback_hands_back_the_latents_it_names(verb, clip, figure, still):
    """diffusers' ``callback_on_step_end_tensor_inputs``: the callback reads the named tensors and what it returns
    goes on in the loop (here: zeroed latents after every step give another clip than the untouched run)."""
    pipe = apps()[verb].pipeline_class.build()
    pipe.set_progress_bar_config(disable=True)
    args, kwargs, settings = calls(clip, figure, still)[verb]
    settings = {**settings, "num_inference_steps": 2}
    plain = np.asarray(pipe(*args, **kwargs, **settings, generator=0).video)
    seen = []

    def zero_latents(pipe_, step, timestep, callback_kwargs):
        if "latents" not in callback_kwargs:  # a stage without latents (Bernini's planning steps)
            return callback_kwargs
        seen.append(callback_kwargs["latents"].shape)
        return {"latents": callback_kwargs["latents"] * 0}

    changed = np.asarray(pipe(*args, **kwargs, **settings, generator=0, callback_on_step_end=zero_latents,
                              callback_on_step_end_tensor_inputs=["latents"]).video)
    assert seen
    assert not np.array_equal(plain, changed)
    # without naming the tensor, what the callback returns is not taken back
    ignored = np.asarray(pipe(*args, **kwargs, **settings, generator=0, callback_on_step_end=zero_latents).video)
    assert np.array_equal(plain, ignored)


def test_tensor_inputs_a_pipeline_cannot_hand_over_are_named():
    pipe = apps()["ask"].pipeline_class.build()
    with pytest.raises(InputError, match="latents"):
        pipe(np.zeros((8, 32, 32, 3), np.uint8), "q?", ["a", "b"], callback_on_step_end_tensor_inputs=["latents"])
    gen = apps()["generate"].pipeline_class.build()
    with pytest.raises(InputError, match="prompt_embeds"):
        gen("a red star", callback_on_step_end_tensor_inputs=["prompt_embeds"])
    with pytest.raises(InputError, match="list of names"):
        gen("a red star", callback_on_step_end_tensor_inputs="latents")
