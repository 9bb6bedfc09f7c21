"""The renderer step-caching settings Bernini and AnyMotion share: one declaration, so their flags, manifests and
web settings agree (``renderers.caching`` does the caching).

Torch-free, like every config module (``pipelines.config``): ``renderers.caching`` imports torch, so its modes are
repeated here (tests/test_cold_start.py keeps the two equal) and the module is imported only when a run asks for
its cache settings."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.config import setting

CACHE_MODES = ("none", "first_block", "mag", "taylorseer")  # = renderers.caching.CACHE_MODES


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
        from renderers.caching import from_settings

        return from_settings(self.cache, self.cache_threshold, self.cache_interval)
