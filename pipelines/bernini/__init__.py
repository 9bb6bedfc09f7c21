"""Bernini: video generation and editing through a semantic plan in ViT space (``BerniniPipeline``)."""


from pipelines import lazy_exports

# imported on first use: this package's config and app stay free of torch
__getattr__, __all__ = lazy_exports("pipelines.bernini", {
    "BerniniConfig": "pipelines.bernini.config",
    "BerniniOutput": "pipelines.bernini.pipeline",
    "BerniniPipeline": "pipelines.bernini.pipeline",
})
