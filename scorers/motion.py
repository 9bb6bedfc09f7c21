"""AnyMotion's Human Motion-Bench style grades of one edited clip (spec b.7), on the synthetic world.

    g = grade_motion_edit(output, source, target_keypoints, person_mask, reader=ClassicPoseReader())
    g["pck@0.1"], g["identity_kept"], g["background_psnr"]

- **pose accuracy of the output**: its pose re-detected by a pose reader (the builtin stick-figure
  reader by default), PCK@0.05 / 0.1 / 0.2 against the target skeleton (``scorers.pose.pck``, box
  diagonal), every labelled joint of every frame, and on the joints that move in the edit only;
- **identity preservation** [PROPOSED thresholds]: the figure's colour (``trackers.pose.figure_colour``
  of the output within ``colour_tolerance`` RGB of the source's) and its proportions (median length of
  each arm and leg segment and of the torso over the re-detected frames, each within
  ``proportion_tolerance`` of the reference's); kept when both hold. The reference is the same reader's
  reading of the ground-truth target (``reference_kp``), so the reader's own error on bent or
  foreshortened limbs cancels and the true answer always passes. Where that reading is itself off the
  world's target skeleton by more than the tolerance, the clip's proportions cannot be measured and
  identity is not judged (``identity_kept`` None, ``identity_measurable`` False), whatever the output.
  (Judged against the world's source skeleton instead, 10 of 85 unchanged source clips failed on the
  reader's misreadings: docs/BENCHMARKS.md, AnyMotion);
- **background preservation**: PSNR and SSIM against the ground-truth target outside ``person_mask``, where
  the edit may change pixels: the union of the source and target person masks, grown by their anti-aliased
  edges (``training.motion_data.MotionPool.edit_region``; ``scorers.generation.edit_preservation``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scorers.generation import edit_preservation
from scorers.pose import pck

THRESHOLDS = (0.05, 0.1, 0.2)
SEGMENTS = {"upper arms": ((5, 7), (6, 8)), "forearms": ((7, 9), (8, 10)), "thighs": ((11, 13), (12, 14)), "shins": ((13, 15), (14, 16))}
PSNR_CAP = 60.0


def segment_lengths(kp: np.ndarray) -> dict[str, float]:
    """Median length (pixels) of each limb segment pair and of the torso over frames where both ends are labelled."""
    out = {}
    for name, pairs in SEGMENTS.items():
        vals = [np.linalg.norm(kp[t, a, :2] - kp[t, b, :2]) for t in range(len(kp)) for a, b in pairs if kp[t, a, 2] > 0 and kp[t, b, 2] > 0]
        out[name] = float(np.median(vals)) if vals else float("nan")
    ok = (kp[:, [5, 6, 11, 12], 2] > 0).all(1)
    torso = np.linalg.norm(kp[ok][:, [5, 6], :2].mean(1) - kp[ok][:, [11, 12], :2].mean(1), axis=1)
    out["torso"] = float(np.median(torso)) if len(torso) else float("nan")
    return out


def moving_mask(source_kp: np.ndarray, target_kp: np.ndarray, threshold: float = 0.25) -> np.ndarray:
    """``(T, 17)``: joints more than ``threshold`` torso lengths from where the source has them."""
    torso = segment_lengths(source_kp)["torso"]
    if not np.isfinite(torso) or torso <= 0:
        return np.zeros(source_kp.shape[:2], bool)
    d = np.linalg.norm(target_kp[..., :2] - source_kp[..., :2], axis=-1) / torso
    return (d > threshold) & (source_kp[..., 2] > 0) & (target_kp[..., 2] > 0)


def _pck(pred: np.ndarray, gt: np.ndarray) -> dict[str, float | None]:
    res = pck(pred, gt, THRESHOLDS)
    return {f"pck@{t:g}": (None if res.keypoints == 0 else round(float(v), 4)) for t, v in res.values.items()}


def pose_accuracy(pred_kp: np.ndarray, target_kp: np.ndarray, source_kp: np.ndarray) -> dict:
    """PCK of ``pred_kp`` against ``target_kp`` on every labelled joint, and on the joints the edit moves."""
    out = _pck(pred_kp, target_kp)
    moving = moving_mask(source_kp, target_kp)
    gt = target_kp.copy()
    gt[..., 2] = np.where(moving, gt[..., 2], 0)
    out.update({f"moving_{k}": v for k, v in _pck(pred_kp, gt).items()})
    return out


def proportions_match(kp: np.ndarray, reference_kp: np.ndarray, tolerance: float = 0.2) -> tuple[bool, dict[str, float]]:
    """Whether every limb segment and the torso of ``kp`` is within ``tolerance`` of ``reference_kp``'s
    (median lengths over frames; a segment either cannot measure fails), with the ratios."""
    la, lb = segment_lengths(kp), segment_lengths(reference_kp)
    ratios = {k: la[k] / lb[k] for k in la if np.isfinite(la[k]) and np.isfinite(lb[k]) and lb[k] > 0}
    return len(ratios) == len(la) and all(abs(r - 1) <= tolerance for r in ratios.values()), ratios


def identity(output: np.ndarray, source: np.ndarray, output_kp: np.ndarray, reference_kp: np.ndarray, *,
             colour_tolerance: float = 40.0, proportion_tolerance: float = 0.2) -> dict[str, Any]:
    """Whether the output's figure keeps the source figure's colour and the proportions of ``reference_kp``
    (see the module docstring)."""
    from trackers.pose import figure_colour

    c_out, c_src = figure_colour(output), figure_colour(source)
    colour_dist = None if c_out is None or c_src is None else float(np.linalg.norm(c_out - c_src))
    props_ok, ratios = proportions_match(output_kp, reference_kp, proportion_tolerance)
    colour_ok = colour_dist is not None and colour_dist <= colour_tolerance
    return {"identity_kept": bool(colour_ok and props_ok), "colour_kept": bool(colour_ok), "proportions_kept": bool(props_ok),
            "colour_distance": None if colour_dist is None else round(colour_dist, 2), "proportion_ratios": {k: round(v, 3) for k, v in ratios.items()}}


def background(output: np.ndarray, target: np.ndarray, person_mask: np.ndarray) -> dict[str, float]:
    """PSNR (capped at 60 dB) and SSIM outside the union of the person masks, against the ground-truth target."""
    res = edit_preservation(target, output, person_mask)
    return {"background_psnr": round(min(float(res["psnr"]), PSNR_CAP), 3), "background_ssim": round(float(res["ssim"]), 4)}


def grade_motion_edit(output: np.ndarray, source: np.ndarray, target: np.ndarray, target_kp: np.ndarray, source_kp: np.ndarray,
                      person_mask: np.ndarray, reader: Any = None, output_kp: np.ndarray | None = None,
                      reference_kp: np.ndarray | None = None) -> dict:
    """Every grade of one edited clip: pose accuracy of the re-detected output, identity and background.

    ``output_kp``: the output's pose if already read (else ``reader.read(output)``, the classic reader by default).
    ``reference_kp``: the proportions identity is judged against; by default the reader's reading of
    ``target`` when the output's pose is read here, else ``target_kp`` (pass it to read the target once
    for several outputs).
    """
    if output_kp is None:
        if reader is None:
            from trackers.pose import ClassicPoseReader

            reader = ClassicPoseReader()
        output_kp = reader.read(output)
        if reference_kp is None:
            reference_kp = reader.read(target)
    elif reference_kp is None:
        reference_kp = target_kp
    found = bool((output_kp[..., 2] > 0).any())
    g = {"person_found": found, **pose_accuracy(output_kp, target_kp, source_kp)}
    # the proportions are measurable only where the reader reads the true target's right: elsewhere
    # (a reader that loses the figure, or halves its torso) identity is not judged (None), for every method alike
    measurable = reference_kp is target_kp or proportions_match(reference_kp, target_kp)[0]
    if not measurable:
        g.update(identity_kept=None, identity_measurable=False)
    elif not found:
        g.update(identity_kept=False, identity_measurable=True)
    else:
        g.update(identity(output, source, output_kp, reference_kp), identity_measurable=True)
    g.update(background(output, target, person_mask))
    return g
