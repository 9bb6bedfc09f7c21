"""Opening a user's image file with PIL under one pixel budget.

PIL refuses an image over ``2 * Image.MAX_IMAGE_PIXELS`` with ``DecompressionBombError``, which is neither an
``OSError`` nor an ``UnidentifiedImageError``, so it escaped every reader as a traceback (a 69-byte PNG header
claiming 20000 x 20000 is enough). ``open_image`` checks the size the header declares before anything is
decoded and refuses a larger image with a ``MediaError`` naming the file, its size and the limit.

The budget is PIL's own hard limit, about 13,377 x 13,377: every image PIL opened before still opens. A
downscale on read is no way around it: only JPEG decodes at a reduced size (``draft``), and PIL raises before
it returns the image, so the budget is a refusal.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import MediaError

MAX_IMAGE_PIXELS = 178_956_970  # PIL's DecompressionBombError threshold (2 x its default MAX_IMAGE_PIXELS)


def too_large(path: str | Path, pixels: int | None, size: tuple[int, int] | None = None) -> MediaError:
    """The refusal of an image over the budget (``size`` is ``(width, height)`` when known)."""
    what = f"{size[0]}x{size[1]} image ({size[0] * size[1]:,} pixels)" if size else \
        f"image of {pixels:,} pixels" if pixels else "image"
    return MediaError(path, f"the {what} is over the limit of {MAX_IMAGE_PIXELS:,} pixels (about 13,377 x 13,377)",
                      "downscale it first, e.g. to 8192 pixels on its long side")


def unreadable(path: str | Path, error: BaseException) -> MediaError:
    """The refusal of an image PIL stops reading on purpose (a text chunk that inflates past its limit: a
    decompression bomb in the metadata) or cannot parse."""
    return MediaError(path, f"not a readable image ({error})", "re-save it with an image editor, without its metadata")


@contextmanager
def open_image(path: str | Path) -> Iterator:
    """``PIL.Image.open(path)`` whose declared size fits ``MAX_IMAGE_PIXELS``, closed on exit; nothing is decoded
    here. Other failures (not an image, unreadable) raise as ``Image.open`` raises them."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            # PIL warns from half its hard limit; our own budget below replaces the warning
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(path)
    except Image.DecompressionBombError as e:  # the header alone is over PIL's limit: its message has the count
        found = re.search(r"\((\d+) pixels\)", str(e))
        raise too_large(path, int(found.group(1)) if found else None) from None
    except ValueError as e:  # PIL's own bound on a compressed text chunk ("Decompressed data too large"), or a bad header
        raise unreadable(path, e) from None
    with im:
        width, height = im.size
        if width * height > MAX_IMAGE_PIXELS:
            raise too_large(path, width * height, (width, height))
        yield im


__all__ = ["MAX_IMAGE_PIXELS", "open_image", "too_large", "unreadable"]
