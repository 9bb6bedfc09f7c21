"""Latent visual reasoning (GeLVR + GePO): answer after K latent slots that look at the image (specs/gelvr.md)."""

from pipelines.latent_reasoning.pipeline import LatentReasoningConfig, LatentReasoningOutput, LatentReasoningPipeline

__all__ = ["LatentReasoningPipeline", "LatentReasoningConfig", "LatentReasoningOutput"]
