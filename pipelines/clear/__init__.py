"""CLEAR (specs/clear.md): training-free video reasoning segmentation. Work in progress: the
Contrastive Concept Dictionary is here; the tracker session API, proposals and the event monitor
live in ``trackers/``; the pipeline, its selection stage and its app entry come next."""

from pipelines.clear.dictionary import ConceptDictionary, TargetConcept

__all__ = ["ConceptDictionary", "TargetConcept"]
