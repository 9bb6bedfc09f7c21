"""Glue between the benchmark scorers and the CLI / batch runner: ``atelier score vos|pose`` and ``score.vos|pose``.

The computation lives in ``scorers``; this module only resolves arguments and shapes the output.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from scorers.pose import PCK_THRESHOLDS, PoseReport, pose_report
from scorers.vos import BOUND_TH, VOSResult, evaluate


def vos(pred: str | Path, gt: str | Path, unsupervised: bool = False, bound_th: float = BOUND_TH) -> VOSResult:
    """J, F and J&F of predicted masks against ground truth (DAVIS-2017 semi-supervised protocol by default)."""
    from core.values import check_finite, parse_bool

    unsupervised = parse_bool("unsupervised", unsupervised)  # a manifest's "false" is truthy
    check_finite("bound_th", bound_th)
    return evaluate(pred, gt, protocol="unsupervised" if unsupervised else "semi-supervised", bound_th=bound_th)


def pose(pred: str | Path, gt: str | Path, thresholds: Sequence[float] = PCK_THRESHOLDS, normalise: str = "bbox") -> PoseReport:
    """COCO keypoint AP/AR (pycocotools), OKS, PCK and MPJPE of predicted keypoints against a COCO GT file."""
    return pose_report(pred, gt, thresholds=thresholds, normalise=normalise)
