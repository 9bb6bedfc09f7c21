"""The renderer step-caching settings Bernini and AnyMotion share: one declaration, so their flags, manifests and
web settings agree (``renderers.caching`` does the caching)."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.base import setting
from renderers.caching import CACHE_MODES, from_settings


@dataclass
class RenderCacheSettings:
    cache: str = setting("none", help="renderer step caching through diffusers' hooks: first_block, mag (needs the renderer's calibrated "
                                      "ratios), taylorseer; each guidance branch cached apart (none: off, the default; docs/BENCHMARKS.md)",
                         choices=CACHE_MODES)
    cache_threshold: float | None = setting(None, help="cache first_block / mag: the change a reused step may hide (None: the mode's measured "
                                                       "default)", range=(0.0, 1.0))
    cache_interval: int | None = setting(None, help="cache taylorseer: a full forward every N steps, forecasts between (None: its default)",
                                         range=(1, 50))

    def render_cache(self):
        """What the renderer's ``generate(cache=...)`` takes (None: off)."""
        return from_settings(self.cache, self.cache_threshold, self.cache_interval)
