"""AnyMotion: skeleton chain-of-thought motion editing (specs/anymotion.md)."""

from pipelines.anymotion.pipeline import AnyMotionConfig, AnyMotionOutput, AnyMotionPipeline

__all__ = ["AnyMotionConfig", "AnyMotionOutput", "AnyMotionPipeline"]
