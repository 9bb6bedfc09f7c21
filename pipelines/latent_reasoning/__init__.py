"""Latent visual reasoning (GeLVR + GePO): answer after K latent slots that look at the image (specs/gelvr.md)."""


from pipelines import lazy_exports

# imported on first use: this package's config and app stay free of torch
__getattr__, __all__ = lazy_exports("pipelines.latent_reasoning", {
    "LatentReasoningPipeline": "pipelines.latent_reasoning.pipeline",
    "LatentReasoningConfig": "pipelines.latent_reasoning.config",
    "LatentReasoningOutput": "pipelines.latent_reasoning.pipeline",
})
