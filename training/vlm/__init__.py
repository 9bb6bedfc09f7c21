"""Train the built-in VLM on worldgen: long-video multiple-choice QA, per-frame presence, captions.

    python -m training.vlm --out DIR        (or: atelier train vlm --out DIR)

One module per role:

- ``data``: the examples, drawn fresh every step (no files): ``longqa`` questions shown uniform
  samples plus evidence, GridProbe row/column probes or uniform samples, with the answer *those
  frames* determine as the target (one-hot when they determine it, uniform when not), so the model
  is confident exactly when it has seen the evidence, which is what GridProbe's probes read; dense
  grounding and per-frame presence targets; captions of single-object clips; a curriculum of frames
  per item growing over the first half.
- ``objective``: ``VLMObjective``, the losses over those items.
- ``warm_starts``: the object-level attribute detector (fitted, then frozen) and the motion path,
  fitted before the main loop.
- ``evaluation``: ``evaluate_vlm`` on test-split seeds (accuracy with all evidence present, per kind;
  calibration on probes that contain vs miss the evidence; captions), the card and its target summary.
- ``train``: ``VLMTrainConfig`` (the recipe, saved as ``train_config.json``), ``train_vlm`` and ``main``.
"""

from training.vlm.data import (CAPTION_FRAMES, CAPTION_PROMPT, DIRECTION_WORDS, MOTION_PHRASES, MOTION_WORDS, VLMDataConfig, caption_example,
                               caption_motion, caption_vocab, caption_world, choose_frames, frame_pool, frame_times, grounding_targets,
                               make_items, presence_labels, qa_example, render, trajectory_examples, visible_objects)
from training.vlm.evaluation import (TARGETS, calibration_gaps, evaluate_vlm, evidence_all_frames, greedy_caption, scores, target_summary,
                                     write_card)
from training.vlm.objective import VLMObjective
from training.vlm.train import VLMTrainConfig, main, train_vlm
from training.vlm.warm_starts import attribute_phrases, patch_attribute_labels, warm_start_attributes, warm_start_motion

__all__ = [
    "CAPTION_FRAMES", "CAPTION_PROMPT", "DIRECTION_WORDS", "MOTION_PHRASES", "MOTION_WORDS", "TARGETS", "VLMDataConfig", "VLMObjective",
    "VLMTrainConfig", "attribute_phrases", "calibration_gaps", "caption_example", "caption_motion", "caption_vocab", "caption_world",
    "choose_frames", "evaluate_vlm", "evidence_all_frames", "frame_pool", "frame_times", "greedy_caption", "grounding_targets", "main",
    "make_items", "patch_attribute_labels", "presence_labels", "qa_example", "render", "scores", "target_summary", "train_vlm",
    "trajectory_examples", "visible_objects", "warm_start_attributes", "warm_start_motion", "write_card",
]
