"""SAM 2 through transformers (``Sam2VideoModel`` + ``Sam2VideoProcessor``) behind the session API.

    tracker = Sam2Tracker.from_pretrained("facebook/sam2.1-hiera-tiny")    # or trackers.load_tracker(DIR)
    session = tracker.init_session("clip.mp4", window=16)
    session.add_prompt(0, obj_id=1, points=[[210, 350]], labels=[1])
    for out in session.propagate():                                          # TrackedFrame per frame
        ...

Frames stream from the video on demand: the transformers inference session is a subclass
(``LazyInferenceSession``) whose ``get_frame`` reads one frame from the ``FrameSource`` and
preprocesses it, so no preprocessed video is ever held (``init_video_session(video=...)`` would hold
all of it; transformers' streaming mode keeps every streamed frame in ``processed_frames``).

Memory is bounded: transformers never prunes ``output_dict_per_obj[obj]["non_cond_frame_outputs"]``
nor ``frames_tracked_per_obj`` (the long-video RAM growth of sam2 #196 / #264), so after every
frame the session keeps only the ``window`` most recent non-conditioning outputs behind the
current frame in the tracking direction (exactly what SAM 2 reads next: ``num_maskmem - 1`` = 6
memory frames and ``max_object_pointers_in_encoder - 1`` = 15 object pointers for SAM 2.1, so the
default ``window=16`` changes nothing; a smaller window trades accuracy for memory). The vision
feature cache holds one frame. Prompted frames are conditioning frames and stay for the session.

A prompt always makes its frame a conditioning frame for its object: transformers stores a prompt
on an already tracked frame as an ordinary output (which the window would evict), so the wrapper
forgets that frame's tracked output for the object before prompting. ``remove_object`` rebuilds
the transformers session from the remaining prompts (``Sam2VideoInferenceSession`` has no
``remove_object``); ``reset`` is its ``reset_inference_session``.

``Sam2FamilyTracker`` / ``Sam2FamilySession`` are shared with SAM 3's tracker (``trackers.hf_sam3``),
whose transformers classes are SAM 2's code with another vision encoder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Sam2VideoModel, Sam2VideoProcessor
from transformers.models.sam2_video.modeling_sam2_video import Sam2VideoInferenceSession

from core.device import select_device, select_dtype
from core.errors import InputError
from trackers.protocol import Prompt, SessionBase, TrackedFrame


class LazyFrames:
    """Mixin for transformers' SAM inference sessions: frames come from a callback, never stored.

    ``pixels(frame_idx)`` returns one preprocessed frame ``(3, S, S)``; it is called only when the
    model needs a frame's vision features that are not cached, and nothing of it is kept.
    ``num_frames`` is the video's length (transformers reads it to bound object pointers).
    """

    def __init__(self, pixels: Callable[[int], torch.Tensor], num_frames: int, **kwargs: Any):
        super().__init__(video=None, **kwargs)
        self._pixels, self._num_frames = pixels, int(num_frames)

    @property
    def num_frames(self) -> int:
        return self._num_frames

    def get_frame(self, frame_idx: int) -> torch.Tensor:
        return self._pixels(frame_idx).to(self.inference_device, dtype=self.dtype)


class LazyInferenceSession(LazyFrames, Sam2VideoInferenceSession):
    """transformers' SAM 2 inference session over a frame source, with the pruning that bounds it."""

    def prune(self, frame_idx: int, reverse: bool, window: int) -> None:
        """Keep, per object, only the ``window`` non-conditioning outputs (and tracked-frame marks) at
        or behind ``frame_idx`` in the tracking direction; the rest is never read again by SAM 2."""
        sign = -1 if reverse else 1
        for obj_idx, outputs in self.output_dict_per_obj.items():
            for store in (outputs["non_cond_frame_outputs"], self.frames_tracked_per_obj[obj_idx]):
                for f in [f for f in store if not 0 <= (frame_idx - f) * sign < window]:
                    del store[f]

    def held_frames(self) -> dict[str, int]:
        """What the session holds now, for memory checks: the largest per-object count of
        non-conditioning outputs and of tracked-frame marks, cached vision features, stored frames."""
        per_obj = list(self.output_dict_per_obj.values())
        return {
            "non_cond_frame_outputs": max((len(o["non_cond_frame_outputs"]) for o in per_obj), default=0),
            "frames_tracked": max((len(t) for t in self.frames_tracked_per_obj.values()), default=0),
            "vision_features": len(self.cache._vision_features),
            "processed_frames": len(self.processed_frames or {}),
        }


@dataclass
class Sam2FamilySession(SessionBase):
    """A tracking session of a SAM 2-family tracker (``Sam2Tracker.init_session``)."""

    tracker: Any = None
    state: LazyInferenceSession = field(init=False, repr=False)

    def __post_init__(self):
        super().__post_init__()
        if self.tracker is None:
            raise InputError("tracker", None, "create sessions with tracker.init_session(video)")
        self.state = self._new_state()

    # ---- transformers state
    def _new_state(self) -> LazyInferenceSession:
        t = self.tracker
        h, w = self.frame_size
        return LazyInferenceSession(self.pixels, self.num_frames, video_height=h, video_width=w,
                                    inference_device=t.device, inference_state_device=t.device,
                                    video_storage_device=t.device, dtype=t.dtype)

    def pixels(self, frame_idx: int) -> torch.Tensor:
        """Frame ``frame_idx`` preprocessed for the model: ``(3, S, S)`` float on the CPU."""
        return self.tracker.preprocess(self.frames([frame_idx])[0])

    def _prepare_features(self, frame_idx: int) -> None:
        """Hook for trackers whose tracking model has no vision encoder of its own (SAM 3)."""

    def _run(self, frame_idx: int, reverse: bool = False) -> TrackedFrame:
        with torch.inference_mode():
            self._prepare_features(frame_idx)
            out = self.tracker.tracking_model(inference_session=self.state, frame_idx=frame_idx, reverse=reverse)
            return self._tracked(frame_idx, out.object_ids, out.pred_masks, out.object_score_logits)

    def _tracked(self, frame_idx: int, obj_ids: list[int], low_res: torch.Tensor, score_logits: torch.Tensor) -> TrackedFrame:
        """Low-resolution mask logits ``(N, 1, h, w)`` -> a ``TrackedFrame`` at the video's size, objects ascending."""
        masks = self.tracker.prompt_processor.post_process_masks([low_res.float()], original_sizes=[list(self.frame_size)],
                                                                  binarize=True)[0][:, 0]
        scores = torch.sigmoid(score_logits.float().reshape(-1))
        order = np.argsort(obj_ids, kind="stable")
        return TrackedFrame(frame_idx, [int(obj_ids[i]) for i in order], masks.cpu().numpy()[order],
                            scores.cpu().numpy().astype(np.float32)[order])

    def _add_inputs(self, prompt: Prompt) -> None:
        """Hand one validated prompt to the transformers session (no model call)."""
        st, f = self.state, prompt.frame_idx
        obj_idx = st.obj_id_to_idx(prompt.obj_id)
        # a prompted frame is a conditioning frame: forget what tracking wrote there for this object
        st.frames_tracked_per_obj[obj_idx].pop(f, None)
        st.output_dict_per_obj[obj_idx]["non_cond_frame_outputs"].pop(f, None)
        proc = self.tracker.prompt_processor
        if prompt.mask is not None:
            proc.add_inputs_to_inference_session(st, f, prompt.obj_id, input_masks=prompt.mask)
            return
        points = [[prompt.points.tolist()]] if prompt.points is not None else None
        labels = [[prompt.labels.tolist()]] if prompt.labels is not None else None
        boxes = [[prompt.box.tolist()]] if prompt.box is not None else None
        proc.add_inputs_to_inference_session(st, f, prompt.obj_id, input_points=points, input_labels=labels,
                                             input_boxes=boxes, original_size=self.frame_size)

    def _apply_prompts(self, frame_idx: int, prompts: list[Prompt]) -> TrackedFrame:
        """Add several prompts on one frame and run the model once on it."""
        for prompt in prompts:
            self._add_inputs(prompt)
        self.state.obj_with_new_inputs = [p.obj_id for p in prompts]
        return self._run(frame_idx)

    def _rebuild(self) -> None:
        """A fresh transformers session holding the prompts the wrapper remembers."""
        self.state = self._new_state()
        for f in sorted(self.prompts):
            self._apply_prompts(f, list(self.prompts[f].values()))

    # ---- SessionBase hooks
    def make_prompt(self, frame_idx: Any, obj_id: Any, points: Any, labels: Any, box: Any, mask: Any) -> Prompt:
        if mask is not None and (points is not None or box is not None):
            raise InputError("mask", "with points/box", "SAM 2 takes a mask alone, or points and/or a box")
        return super().make_prompt(frame_idx, obj_id, points, labels, box, mask)

    def _apply_prompt(self, prompt: Prompt) -> TrackedFrame:
        return self._apply_prompts(prompt.frame_idx, [prompt])

    def _track(self, frame_idx: int, reverse: bool) -> TrackedFrame:
        out = self._run(frame_idx, reverse)
        self.state.prune(frame_idx, reverse, self.window)  # tracking moved on: drop what SAM 2 no longer reads
        return out

    def _forget(self, obj_id: int | None) -> None:
        if obj_id is None:
            self.state.reset_inference_session()
        else:
            self._rebuild()


class Sam2FamilyTracker:
    """A transformers SAM 2-family video tracker: model + processor, and the sessions they run.

    Subclasses name their transformers classes; ``tracking_model`` is the module that takes an
    inference session and a frame index, ``prompt_processor`` the processor that turns prompts into
    session inputs and low-resolution masks into full-size ones.
    """

    backend = "hf"
    model_types: tuple[str, ...] = ()
    model_class: Any = None
    processor_class: Any = None
    session_class: Any = Sam2FamilySession
    family = ""

    def __init__(self, model: Any, processor: Any):
        self.model, self.processor = model.eval(), processor

    @property
    def tracking_model(self) -> Any:
        return self.model

    @property
    def prompt_processor(self) -> Any:
        return self.processor

    # ---- loading / saving
    @classmethod
    def check_checkpoint(cls, directory: str | Path) -> str:
        """The checkpoint's model_type, after checking it is a directory this class loads."""
        path = Path(directory).expanduser()
        try:
            model_type = json.loads((path / "config.json").read_text()).get("model_type")
        except (OSError, ValueError):
            raise InputError("tracker", str(directory), f"pass a {cls.family} checkpoint directory (with config.json)") from None
        if model_type not in cls.model_types:
            raise InputError("tracker", str(directory), f"its model_type is {model_type!r}; {cls.__name__} loads {list(cls.model_types)}")
        return model_type

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None) -> Sam2FamilyTracker:
        """Load model and processor from a checkpoint directory; ``device``/``dtype`` default to the best
        available (``core.device``: bfloat16 on CUDA, float32 on the CPU)."""
        cls.check_checkpoint(directory)
        dev = select_device(device)
        model = cls.model_class.from_pretrained(str(directory), dtype=select_dtype(dtype, dev))
        return cls(model.to(dev), cls.processor_class.from_pretrained(str(directory)))

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write model and processor so that ``from_pretrained(directory)`` restores them."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        for part in (self.model, self.processor):
            part.save_pretrained(path)
        return path

    def to(self, device: Any = None, dtype: Any = None) -> Sam2FamilyTracker:
        """Move and/or cast the model (sessions opened afterwards use the new setting)."""
        dev = None if device is None else select_device(device)
        self.model.to(device=dev, dtype=None if dtype is None else select_dtype(dtype, dev or self.device))
        return self

    device = property(lambda self: self.model.device, doc="The model's device.")
    dtype = property(lambda self: self.model.dtype, doc="The model's dtype.")

    def preprocess(self, frame: np.ndarray) -> torch.Tensor:
        """One RGB uint8 ``(H, W, 3)`` frame as the model sees it: ``(3, S, S)`` float on the CPU
        (the processor's video path, as ``init_video_session`` would preprocess it)."""
        return self.processor.video_processor(videos=[frame[None]], return_tensors="pt").pixel_values_videos[0, 0]

    def init_session(self, video: Any, *, window: int = 16) -> Sam2FamilySession:
        """A session over ``video`` (path, ``Video``, ``(T, H, W, 3)`` uint8 array or ``FrameSource``)."""
        return self.session_class(video, window, tracker=self)


class Sam2Tracker(Sam2FamilyTracker):
    """SAM 2 / 2.1 video tracker: transformers ``Sam2VideoModel`` + ``Sam2VideoProcessor``."""

    model_types = ("sam2_video",)
    model_class = Sam2VideoModel
    processor_class = Sam2VideoProcessor
    family = "SAM 2 video (model_type sam2_video, e.g. facebook/sam2.1-hiera-tiny)"


__all__ = ["Sam2Tracker", "Sam2FamilyTracker", "Sam2FamilySession", "LazyFrames", "LazyInferenceSession"]
