"""SAM 3 through transformers behind the session API, plus text prompts that propose every instance.

    tracker = trackers.load_tracker("facebook/sam3")            # a sam3_video checkpoint directory
    session = tracker.init_session("clip.mp4")
    ids = session.add_text_prompt(0, "dog")                      # every dog on frame 0 becomes an object
    session.add_prompt(0, obj_id=9, box=[10, 20, 80, 90])        # points / box / mask as with SAM 2
    for out in session.propagate(): ...

Two checkpoint kinds load (config.json ``model_type``):

- ``sam3_video`` (``Sam3VideoModel`` + ``Sam3VideoProcessor``, e.g. facebook/sam3): a text-conditioned
  detector (``Sam3Model``) and a SAM 2-style tracker (``Sam3TrackerVideoModel``) that reads the
  detector's vision features through ``Sam3VideoModel.tracker_neck``. Prompts (points, box, mask)
  go to the tracker, exactly as with SAM 2 (the shared ``trackers.hf_sam2`` session: frames on
  demand, the window-bounded memory); ``add_text_prompt(frame_idx, text)`` runs the detector on
  that frame, keeps detections scoring above the checkpoint's ``score_threshold_detection``
  (``sigmoid(logit) * sigmoid(presence)``), removes duplicates with mask NMS at ``det_nms_thresh``
  [the checkpoint's values], and adds each as a mask prompt under a new object id.
- ``sam3_tracker_video`` (``Sam3TrackerVideoModel`` + ``Sam3TrackerVideoProcessor``): the tracker
  alone, with its own vision encoder; no text prompts.

``Sam3Tracker.track_concept(video, text)`` is SAM 3's own detect-and-track loop
(``Sam3VideoModel.propagate_in_video_iterator``): the detector runs on every frame, new instances
get new ids, duplicates and unmatched tracks are dropped by its heuristics; the ids it reports in
``removed_obj_ids`` are freed with the session's ``remove_object(id, strict=False)`` (the object
count otherwise only grows), and its per-frame state is kept to a window like the sessions'.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers import Sam3TrackerVideoModel, Sam3TrackerVideoProcessor, Sam3VideoModel, Sam3VideoProcessor
from transformers.models.sam3_video.modeling_sam3_video import Sam3VideoInferenceSession

from core.device import select_device, select_dtype
from core.errors import InputError
from trackers.hf_sam2 import LazyFrames, Sam2FamilySession, Sam2FamilyTracker
from trackers.protocol import TrackedFrame, open_source
from trackers.proposals import candidate, mask_nms

MAX_OBJ_ID = 255


@dataclass(frozen=True)
class Detections:
    """Instances of a concept on one frame: ``masks`` ``(N, H, W)`` bool at the frame's size,
    ``boxes`` ``(N, 4)`` xyxy pixels, ``scores`` ``(N,)``, best first."""

    masks: np.ndarray
    boxes: np.ndarray
    scores: np.ndarray


def check_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InputError("text", text, "pass a noun phrase naming the concept, e.g. 'dog'")
    return text.strip()


@dataclass
class Sam3Session(Sam2FamilySession):
    """A SAM 3 tracking session (``Sam3Tracker.init_session``): SAM 2's session plus ``add_text_prompt``."""

    _vision: tuple = field(init=False, default=(None, None), repr=False)  # (frame_idx, detector vision output)

    def _vision_embeds(self, frame_idx: int) -> Any:
        """The detector's vision output for a frame (the last one is kept for a text prompt on it)."""
        if self._vision[0] != frame_idx:
            pixels = self.pixels(frame_idx)[None].to(self.tracker.device, self.tracker.dtype)
            self._vision = (frame_idx, self.tracker.model.detector_model.get_vision_features(pixel_values=pixels))
        return self._vision[1]

    def _prepare_features(self, frame_idx: int) -> None:
        """The tracker of a ``sam3_video`` checkpoint has no vision encoder: give it the detector's
        features through the tracker neck, in the cache where transformers looks first."""
        if not self.tracker.has_detector or self.state.cache.get_vision_features(frame_idx) is not None:
            return
        feats, pos = self.tracker.model.get_vision_features_for_tracker(self._vision_embeds(frame_idx))
        self.state.cache.cache_vision_features(frame_idx, {"vision_feats": feats, "vision_pos_embeds": pos})

    def add_text_prompt(self, frame_idx: int, text: str) -> list[int]:
        """Propose every instance of ``text`` on ``frame_idx`` (see the module docstring) and track each
        as a new object; returns their ids (ascending; empty when nothing scores above threshold)."""
        frame_idx = self.check_frame(frame_idx)
        text = check_text(text)
        self.tracker.require_detector()
        with torch.inference_mode():
            found = self.tracker.detect_embeds(self._vision_embeds(frame_idx), text, self.frame_size)
        taken = set(self.obj_ids)
        free = [i for i in range(1, MAX_OBJ_ID + 1) if i not in taken]
        if len(found.masks) > len(free):
            raise InputError("text", text, f"{len(found.masks)} instances but only {len(free)} free object ids; "
                             "remove_object() some first")
        prompts = [self.make_prompt(frame_idx, obj, None, None, None, m) for obj, m in zip(free, found.masks)]
        if not prompts:
            return []
        for p in prompts:
            self.prompts.setdefault(frame_idx, {})[p.obj_id] = p
        self.remember(self._apply_prompts(frame_idx, prompts))
        return [p.obj_id for p in prompts]


class Sam3Tracker(Sam2FamilyTracker):
    """SAM 3 video tracker: transformers ``Sam3VideoModel`` + ``Sam3VideoProcessor`` (text prompts), or
    ``Sam3TrackerVideoModel`` + ``Sam3TrackerVideoProcessor`` (tracker only)."""

    model_types = ("sam3_video", "sam3_tracker_video")
    session_class = Sam3Session
    family = "SAM 3 video (model_type sam3_video, e.g. facebook/sam3, or sam3_tracker_video)"
    CLASSES = {"sam3_video": (Sam3VideoModel, Sam3VideoProcessor),
               "sam3_tracker_video": (Sam3TrackerVideoModel, Sam3TrackerVideoProcessor)}

    def __init__(self, model: Any, processor: Any):
        super().__init__(model, processor)
        self.has_detector = isinstance(model, Sam3VideoModel)
        # Sam3VideoProcessor has no prompt inputs: SAM 3's tracker processor over the same image/video processors
        self._prompt_processor = (Sam3TrackerVideoProcessor(image_processor=processor.image_processor,
                                                            video_processor=processor.video_processor,
                                                            target_size=processor.target_size)
                                  if self.has_detector else processor)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None) -> Sam3Tracker:
        """Load a ``sam3_video`` or ``sam3_tracker_video`` checkpoint directory (``device``/``dtype`` as SAM 2's)."""
        model_class, processor_class = cls.CLASSES[cls.check_checkpoint(directory)]
        dev = select_device(device)
        model = model_class.from_pretrained(str(directory), dtype=select_dtype(dtype, dev))
        return cls(model.to(dev), processor_class.from_pretrained(str(directory)))

    @property
    def tracking_model(self) -> Any:
        return self.model.tracker_model if self.has_detector else self.model

    @property
    def prompt_processor(self) -> Any:
        return self._prompt_processor

    def require_detector(self) -> None:
        if not self.has_detector:
            raise InputError("text", "a text prompt", "this checkpoint is SAM 3's tracker alone (sam3_tracker_video); "
                             "text prompts need a sam3_video checkpoint such as facebook/sam3")

    # ---- concept detection
    def detect(self, frame: np.ndarray, text: str) -> Detections:
        """Every instance of ``text`` in one RGB uint8 ``(H, W, 3)`` frame (threshold and NMS as
        ``add_text_prompt``)."""
        self.require_detector()
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise InputError("frame", f"array {frame.shape} {frame.dtype}", "pass one RGB uint8 (H, W, 3) frame")
        with torch.inference_mode():
            pixels = self.preprocess(frame)[None].to(self.device, self.dtype)
            vision = self.model.detector_model.get_vision_features(pixel_values=pixels)
            return self.detect_embeds(vision, check_text(text), frame.shape[:2])

    def detect_embeds(self, vision: Any, text: str, size: tuple[int, int]) -> Detections:
        """``detect`` from the detector's vision output of a frame of ``size`` = (H, W)."""
        cfg = self.model.config
        tokens = self.processor.tokenizer(text, return_tensors="pt", padding="max_length", max_length=32)
        out = self.model.detector_model(vision_embeds=vision, input_ids=tokens.input_ids.to(self.device),
                                        attention_mask=tokens.attention_mask.to(self.device))
        probs = (out.pred_logits.float().sigmoid() * out.presence_logits.float().sigmoid())[0]
        keep = torch.nonzero(probs > cfg.score_threshold_detection).flatten()
        keep = keep[torch.argsort(probs[keep], descending=True)]
        h, w = size
        masks = F.interpolate(out.pred_masks[0, keep][:, None].float(), size=(h, w), mode="bilinear", align_corners=False)[:, 0] > 0
        boxes = out.pred_boxes[0, keep].float() * torch.tensor([w, h, w, h], device=probs.device)
        masks, boxes, scores = masks.cpu().numpy(), boxes.cpu().numpy(), probs[keep].cpu().numpy()
        found = [candidate(m, s, i) for i, (m, s) in enumerate(zip(masks, scores)) if m.any()]
        if cfg.det_nms_thresh > 0:
            found = mask_nms(found, min(1.0, cfg.det_nms_thresh))
        kept = [c.id for c in found]
        return Detections(masks[kept].reshape(-1, h, w), boxes[kept].reshape(-1, 4).astype(np.float32),
                          scores[kept].astype(np.float32))

    # ---- SAM 3's own detect-and-track loop
    def track_concept(self, video: Any, text: str, *, start_frame: int = 0, max_frames: int | None = None,
                      window: int = 16) -> Iterator[TrackedFrame]:
        """Detect and track every instance of ``text`` through ``video`` with ``Sam3VideoModel``'s own
        loop (module docstring); yields a ``TrackedFrame`` per frame whose ``obj_ids`` are the
        instances visible there. Outputs come ``hotstart_delay`` frames late (its heuristics look ahead)."""
        self.require_detector()
        return ConceptTracking(self, video, check_text(text), window).run(start_frame, max_frames)


class LazyConceptSession(LazyFrames, Sam3VideoInferenceSession):
    """transformers' SAM 3 video session over a frame source (frames preprocessed on demand)."""


class ConceptTracking:
    """One ``track_concept`` run: the lazy SAM 3 session and the pruning that bounds its memory."""

    def __init__(self, tracker: Sam3Tracker, video: Any, text: str, window: int):
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise InputError("window", window, "keep at least 1 past frame (an integer)")
        self.tracker, self.source, self.window = tracker, open_source(video), window
        n = len(self.source)
        if n < 1:
            raise InputError("video", f"{n} frames", "the video has no frames; pass a clip with at least one")
        h, w = np.asarray(self.source.get_frames([0])).shape[1:3]
        dev = tracker.device
        self.state = LazyConceptSession(lambda f: tracker.preprocess(np.asarray(self.source.get_frames([f]))[0]), n,
                                        video_height=h, video_width=w, inference_device=dev, inference_state_device=dev,
                                        video_storage_device=dev, dtype=tracker.dtype)
        tracker.processor.add_text_prompt(self.state, text)

    def run(self, start_frame: int, max_frames: int | None) -> Iterator[TrackedFrame]:
        n = self.state.num_frames
        if isinstance(start_frame, bool) or not isinstance(start_frame, (int, np.integer)) or not 0 <= start_frame < n:
            raise InputError("start_frame", start_frame, f"the video has {n} frames: use 0..{n - 1}")
        if max_frames is not None and (isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1):
            raise InputError("max_frames", max_frames, "pass a positive number of frames, or None for all")
        model = self.tracker.model
        with torch.inference_mode():
            # transformers counts the frames after the start; the session API counts the frames visited
            for out in model.propagate_in_video_iterator(self.state, start_frame_idx=int(start_frame),
                                                          max_frame_num_to_track=None if max_frames is None else max_frames - 1):
                for obj in out.removed_obj_ids or ():
                    self.state.remove_object(obj, strict=False)
                # outputs come hotstart_delay frames late: prune behind the newest frame the model ran on
                self.prune(max(self.state.suppressed_obj_ids, default=out.frame_idx))
                yield self.tracked(out)

    def tracked(self, out: Any) -> TrackedFrame:
        res = self.tracker.processor.postprocess_outputs(self.state, out)
        ids = [int(i) for i in res["object_ids"].tolist()]
        masks = res["masks"].cpu().numpy().astype(bool)
        return TrackedFrame(int(out.frame_idx), ids, masks.reshape(len(ids), *masks.shape[-2:]),
                            res["scores"].float().cpu().numpy().astype(np.float32).reshape(len(ids)))

    def prune(self, frame_idx: int) -> None:
        """Drop per-frame state ``window`` (at least the hotstart delay + 1) or more frames behind
        ``frame_idx``: tracker outputs that are not conditioning frames, tracked-frame marks,
        frame-wise scores, suppression sets and the hotstart heuristics' frame lists."""
        st, keep = self.state, max(self.window, self.tracker.model.hotstart_delay + 1)
        old = lambda f: abs(frame_idx - f) >= keep  # noqa: E731
        for obj_idx, outputs in st.output_dict_per_obj.items():
            for store in (outputs["non_cond_frame_outputs"], st.frames_tracked_per_obj[obj_idx]):
                for f in [f for f in store if old(f)]:
                    del store[f]
        for store in (st.obj_id_to_tracker_score_frame_wise, st.suppressed_obj_ids):
            for f in [f for f in store if old(f)]:
                del store[f]
        # frame lists of the hotstart heuristics: only frames within the hotstart delay decide anything
        for store in (st.unmatched_frame_inds, st.overlap_pair_to_frame_inds):
            for key in list(store):
                store[key] = [f for f in store[key] if not old(f)]
                if not store[key]:
                    del store[key]

    def held_frames(self) -> dict[str, int]:
        st = self.state
        return {
            "non_cond_frame_outputs": max((len(o["non_cond_frame_outputs"]) for o in st.output_dict_per_obj.values()), default=0),
            "tracker_scores": len(st.obj_id_to_tracker_score_frame_wise),
            "suppressed": len(st.suppressed_obj_ids),
            "hotstart_frames": max((len(v) for s in (st.unmatched_frame_inds, st.overlap_pair_to_frame_inds)
                                    for v in s.values()), default=0),
            "vision_features": len(st.cache._vision_features),
            "processed_frames": len(st.processed_frames or {}),
        }


__all__ = ["Sam3Tracker", "Sam3Session", "Detections", "ConceptTracking"]
