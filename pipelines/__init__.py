"""Pipelines: one module per method, all built on :class:`pipelines.base.Pipeline`."""

from pipelines.base import Pipeline, PipelineConfig, PipelineOutput

__all__ = ["Pipeline", "PipelineConfig", "PipelineOutput"]
