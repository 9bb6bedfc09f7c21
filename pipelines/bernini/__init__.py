"""Bernini: video generation and editing through a semantic plan in ViT space (``BerniniPipeline``)."""

from pipelines.bernini.pipeline import BerniniConfig, BerniniOutput, BerniniPipeline

__all__ = ["BerniniConfig", "BerniniOutput", "BerniniPipeline"]
