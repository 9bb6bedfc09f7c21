"""``TrackerContract``: the tests every tracker backend passes (the session API of trackers/protocol.py).

A backend's test class mixes it in and provides ``make_tracker()``. The clip is a white square
moving right on black (24 frames, 64x64) with a second, grey square standing still; accuracy is the
backend's own business (a tiny random SAM 2 cannot track), the contract is the API: shapes, order,
prompts on any frame and object, errors that name the argument, bounded memory.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import AtelierError, InputError
from trackers.protocol import TrackedFrame, Tracker, TrackingSession

T, H, W = 24, 64, 64


def square_clip(n: int = T) -> tuple[np.ndarray, np.ndarray]:
    """``(frames (n, H, W, 3), masks of the moving square (n, H, W))``."""
    frames = np.zeros((n, H, W, 3), np.uint8)
    masks = np.zeros((n, H, W), bool)
    for t in range(n):
        x = 4 + (t % 40)
        masks[t, 20:36, x:x + 16] = True
        frames[t, 44:58, 6:20] = 120
    frames[masks] = 255
    return frames, masks


class TrackerContract:
    def make_tracker(self) -> Tracker:
        raise NotImplementedError

    def session(self, n: int = T, window: int = 4):
        frames, masks = square_clip(n)
        return self.make_tracker().init_session(frames, window=window), masks

    def test_is_a_tracker_with_sessions(self):
        tracker = self.make_tracker()
        assert isinstance(tracker, Tracker) and isinstance(tracker.backend, str)
        s, _ = self.session()
        assert isinstance(s, TrackingSession) and s.num_frames == T and s.frame_size == (H, W)

    def test_mask_prompt_then_forward_propagation(self):
        s, masks = self.session()
        first = s.add_prompt(0, 1, mask=masks[0])
        assert isinstance(first, TrackedFrame) and first.frame_idx == 0 and first.obj_ids == [1]
        outs = list(s.propagate())
        assert [o.frame_idx for o in outs] == list(range(T))
        for o in outs:
            assert o.obj_ids == [1] and o.masks.shape == (1, H, W) and o.masks.dtype == bool
            assert o.scores.shape == (1,) and 0 <= float(o.scores[0]) <= 1
            assert o.id_map().dtype == np.uint8 and set(np.unique(o.id_map())) <= {0, 1}

    def test_points_box_and_two_objects_on_any_frame(self):
        s, masks = self.session()
        s.add_prompt(5, 2, points=[[30, 28]], labels=[1])
        s.add_prompt(5, 1, box=[6, 44, 20, 58])
        out = list(s.propagate(start_frame=5, max_frames=6))
        assert [o.frame_idx for o in out] == list(range(5, 11)) and all(o.obj_ids == [1, 2] for o in out)
        assert all(o.masks.shape == (2, H, W) for o in out)

    def test_reverse_propagation_from_a_later_prompt(self):
        s, masks = self.session()
        s.add_prompt(T - 1, 1, mask=masks[T - 1])
        out = list(s.propagate(reverse=True))
        assert [o.frame_idx for o in out] == list(range(T - 1, -1, -1))

    def test_remove_object_and_reset(self):
        s, masks = self.session()
        s.add_prompt(0, 1, mask=masks[0])
        s.add_prompt(0, 3, points=[[10, 50]], labels=[1])
        s.remove_object(3)
        assert all(3 not in out.obj_ids for out in s.outputs.values())  # its past masks are gone too
        assert next(iter(s.propagate(max_frames=1))).obj_ids == [1]
        with pytest.raises(InputError, match="obj_id"):
            s.remove_object(9)
        s.reset()
        with pytest.raises(InputError, match="add_prompt"):
            next(iter(s.propagate()))
        s.add_prompt(2, 1, mask=masks[2])  # usable again after a reset
        assert len(list(s.propagate(max_frames=3))) == 3

    def test_bad_prompts_name_the_argument(self):
        s, masks = self.session()
        cases = [
            (dict(frame_idx=T, obj_id=1, mask=masks[0]), "frame_idx"),
            (dict(frame_idx=-1, obj_id=1, mask=masks[0]), "frame_idx"),
            (dict(frame_idx=0, obj_id=0, mask=masks[0]), "obj_id"),
            (dict(frame_idx=0, obj_id=1), "prompt"),
            (dict(frame_idx=0, obj_id=1, points=[[3, 3]]), "points"),
            (dict(frame_idx=0, obj_id=1, points=[[3, 3]], labels=[1, 0]), "labels"),
            (dict(frame_idx=0, obj_id=1, points=[[300, 3]], labels=[1]), "points"),
            (dict(frame_idx=0, obj_id=1, box=[10, 10, 5, 20]), "box"),
            (dict(frame_idx=0, obj_id=1, mask=np.zeros((8, 8), bool)), "mask"),
            (dict(frame_idx=0, obj_id=1, mask=np.zeros((H, W), bool)), "mask"),
        ]
        for kwargs, name in cases:
            frame, obj = kwargs.pop("frame_idx"), kwargs.pop("obj_id")
            with pytest.raises(InputError, match=name):
                s.add_prompt(frame, obj, **kwargs)
        s.add_prompt(0, 1, mask=masks[0])
        with pytest.raises(InputError, match="start_frame"):
            next(iter(s.propagate(start_frame=T + 3)))
        with pytest.raises(InputError, match="max_frames"):
            next(iter(s.propagate(max_frames=0)))

    def test_zero_frame_video_is_a_clear_error(self):
        with pytest.raises(AtelierError, match="no frames"):
            self.make_tracker().init_session(np.zeros((0, H, W, 3), np.uint8))

    def test_memory_is_a_bounded_window(self):
        s, masks = self.session(n=120, window=4)
        s.add_prompt(0, 1, mask=masks[0])
        for _ in s.propagate():
            assert s.memory_frames() <= 4 + 1  # the window plus the prompted frame
        self.check_backend_memory(s)

    def check_backend_memory(self, session) -> None:
        """Backends with state of their own (SAM 2's per-object outputs) assert it is pruned too."""


class CountingSource:
    """A frame source that records every request (to prove frames are read on demand)."""

    def __init__(self, frames: np.ndarray):
        self.frames, self.calls = frames, []

    def __len__(self) -> int:
        return len(self.frames)

    def get_frames(self, indices) -> np.ndarray:
        self.calls.append(list(indices))
        return self.frames[list(indices)]
