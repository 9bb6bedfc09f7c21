"""HUMOR: meme captions by hierarchical multi-path reasoning, ranked by a template-grouped pairwise reward model (specs/humor.md)."""

from pipelines.humor.pipeline import HumorConfig, HumorOutput, HumorPipeline

__all__ = ["HumorConfig", "HumorOutput", "HumorPipeline"]
