"""HUMOR: meme captions by hierarchical multi-path reasoning, ranked by a template-grouped pairwise reward model (specs/humor.md)."""


from pipelines import lazy_exports

# imported on first use: this package's config and app stay free of torch
__getattr__, __all__ = lazy_exports("pipelines.humor", {
    "HumorConfig": "pipelines.humor.config",
    "HumorOutput": "pipelines.humor.pipeline",
    "HumorPipeline": "pipelines.humor.pipeline",
})
