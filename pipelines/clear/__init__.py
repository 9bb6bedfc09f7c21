"""CLEAR (specs/clear.md): training-free video reasoning segmentation. In progress: ``pipeline``
(anchor, proposals, candidate tracks, selection, fast propagation with the event monitor, slow
re-anchoring through the concept dictionary) and ``dictionary`` are here; the app entry, the builtin
planner and the benchmark come next."""

from pipelines.clear.dictionary import ConceptDictionary, TargetConcept
from pipelines.clear.pipeline import ClearConfig, ClearOutput, ClearPipeline, InstanceSelector

__all__ = ["ConceptDictionary", "TargetConcept", "ClearPipeline", "ClearConfig", "ClearOutput", "InstanceSelector"]
