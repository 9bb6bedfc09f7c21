"""CLEAR (specs/clear.md): training-free video reasoning segmentation. In progress: ``pipeline``
(anchor, proposals, candidate tracks, selection, fast propagation with the event monitor, slow
re-anchoring through the concept dictionary) and ``dictionary`` are here; the app entry, the builtin
planner and the benchmark come next."""


from pipelines import lazy_exports

# imported on first use: this package's config and app stay free of torch
__getattr__, __all__ = lazy_exports("pipelines.clear", {
    "ConceptDictionary": "pipelines.clear.dictionary",
    "TargetConcept": "pipelines.clear.dictionary",
    "ClearPipeline": "pipelines.clear.pipeline",
    "ClearConfig": "pipelines.clear.config",
    "ClearOutput": "pipelines.clear.pipeline",
    "InstanceSelector": "pipelines.clear.config",
})
