"""AnyMotion: skeleton chain-of-thought motion editing (specs/anymotion.md)."""


from pipelines import lazy_exports

# imported on first use: this package's config and app stay free of torch
__getattr__, __all__ = lazy_exports("pipelines.anymotion", {
    "AnyMotionConfig": "pipelines.anymotion.config",
    "AnyMotionOutput": "pipelines.anymotion.pipeline",
    "AnyMotionPipeline": "pipelines.anymotion.pipeline",
})
