"""A large input is worked at a bounded size decided up front, and the result comes back at the input's size."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InputError
from pipelines.registry import apps

pytestmark = pytest.mark.usefixtures("one_thread")


def test_segment_works_small_and_answers_at_the_inputs_size():
    from app.runner import run_app
    from worldgen.tasks import vrs

    sample = vrs.generate(2 * 10**9 + 3, vrs.Config())
    world, query = sample.worlds["video"], sample.record["query"]
    small = np.stack([world.render(t, annotations=False).rgb for t in range(world.num_frames)])
    mid = small.repeat(4, axis=1).repeat(4, axis=2)  # 256 px: at the builtin working size already
    big = small.repeat(8, axis=1).repeat(8, axis=2)  # 512 px: decoded at 256, answered at 512
    app = apps()["segment"]
    out_mid, _ = run_app(app, {"video": mid, "query": query, "progress": False})
    out_big, _ = run_app(app, {"video": big, "query": query, "progress": False})
    assert out_big.masks.shape == (len(small), 512, 512)
    assert out_big.target_id == out_mid.target_id
    assert np.array_equal(out_big.masks, out_mid.masks.repeat(2, axis=1).repeat(2, axis=2))
    full, _ = run_app(app, {"video": small, "query": query, "progress": False, "max_side": 0})  # 0: the input's own size
    assert full.masks.shape == small.shape[:3]


def test_a_request_too_large_is_refused_before_any_work_naming_the_setting(monkeypatch):
    import core.memory
    from app.runner import run_app

    monkeypatch.setattr(core.memory, "memory_budget", lambda: 2**20)
    frames = np.zeros((40, 128, 128, 3), np.uint8)
    with pytest.raises(InputError, match="max_side|--max-side"):
        run_app(apps()["segment"], {"video": frames, "query": "the red square", "progress": False})
