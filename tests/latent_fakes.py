"""Test helpers for latent reasoning: a ``SpatialSet``-shaped view of a few worldgen ``spatial`` items."""

from __future__ import annotations

import numpy as np
import torch


class SpatialItems:
    """Features from the given (tiny) model, records, MiniLM question states and option embeddings, like
    ``training.gelvr_data.SpatialSet`` but for a handful of already generated samples."""

    def __init__(self, model, text, samples):
        from training.gelvr_data import record_item

        self.features = model.features(np.stack([s.images["image"] for s in samples])).half()
        self.records = [s.record for s in samples]
        self.items = [record_item(r) for r in self.records]
        self.questions = text.tokens([it.question for it in self.items])
        self.options = torch.stack([text.encode(it.options) for it in self.items])

    def __len__(self):
        return len(self.items)
