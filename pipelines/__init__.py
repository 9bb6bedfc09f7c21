"""Pipelines: one module per method, all built on :class:`pipelines.base.Pipeline`."""

from pipelines.base import Pipeline, PipelineConfig, PipelineOutput
from pipelines.gridprobe import GridProbeConfig, GridProbeOutput, GridProbePipeline

__all__ = ["Pipeline", "PipelineConfig", "PipelineOutput", "GridProbePipeline", "GridProbeConfig", "GridProbeOutput"]
