"""What a meme template shows, as text: the builtin VLM's per-patch attribute detector read out into objects.

HUMOR's builtin generator is a text-only causal LM (``planners.meme_lm``), so it sees the picture through this
perception text (issue 18: "perception from the builtin VLM as text"); an hf VLM generator sees the image itself.

The read-out [PROPOSED]: the frozen builtin ViT's 8x8 patch grid of the still at 64x64, the VLM's
``patch_attributes`` (P(object), P(colour), P(shape) per patch); patches with P(object) >= ``threshold`` are
grouped by their most likely colour (worldgen objects of one colour share a shape), each group becoming one entry:
its majority shape, how many separate blobs (4-connected patch components), a size word from patches per blob
and a position word from the centroid. Measured on the first 60 TEST-split worldgen meme stills (119
objects): 97.5% of the objects' colours are read and 89.9% of their shapes; an object hidden behind another
is not (what ``hide`` is about).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from core.errors import InputError
from core.frames import resize_frames

SIZE = 64
# [PROPOSED] P(object) above which a patch counts as showing an object
THRESHOLD = 0.5
_NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
# [PROPOSED] a name slot: "<o2>" stands for the second object the perception text lists ("colour shape")
_SLOT = re.compile(r"<o(\d)>")


@dataclass(frozen=True)
class SeenObject:
    """One perceived object group: ``color`` and ``shape`` words, ``count`` blobs, ``size`` (small / medium /
    large), ``where`` (e.g. "left", "top right", "centre")."""

    color: str
    shape: str
    count: int
    size: str
    where: str

    def phrase(self) -> str:
        n = _NUMBERS.get(self.count, str(self.count)) if self.count > 1 else "a"
        noun = (self.shape + ("es" if self.shape.endswith(("s", "x")) else "s")) if self.count > 1 else self.shape
        return f"{n} {self.size} {self.color} {noun} {'around the' if self.where == 'centre' and self.count > 2 else 'at the'} {self.where}"


@dataclass(frozen=True)
class Perception:
    """The objects read from a still, biggest first, and their description (``text``)."""

    objects: tuple[SeenObject, ...]

    @property
    def text(self) -> str:
        if not self.objects:
            return "nothing recognisable"
        return "; ".join(o.phrase() for o in self.objects)

    @property
    def words(self) -> set[str]:
        """The colour and shape words perceived."""
        return {w for o in self.objects for w in (o.color, o.shape)}


def _where(cy: float, cx: float) -> str:
    col = "left" if cx < 0.36 else "right" if cx > 0.64 else ""
    row = "top" if cy < 0.36 else "bottom" if cy > 0.64 else ""
    return " ".join(w for w in (row, col) if w) or "centre"


def _blobs(cells: np.ndarray) -> int:
    """4-connected components of a boolean grid."""
    seen, n = np.zeros_like(cells), 0
    for start in zip(*np.nonzero(cells)):
        if seen[start]:
            continue
        n += 1
        stack = [start]
        while stack:
            y, x = stack.pop()
            if not (0 <= y < cells.shape[0] and 0 <= x < cells.shape[1]) or seen[y, x] or not cells[y, x]:
                continue
            seen[y, x] = True
            stack += [(y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)]
    return n


@torch.no_grad()
def perceive(vlm, image: np.ndarray, threshold: float = THRESHOLD) -> Perception:
    """The objects of an RGB uint8 ``(H, W, 3)`` image, read by the builtin VLM ``vlm``
    (``planners.builtin.BuiltinVisionLanguageModel``); the image is resized to 64x64 first."""
    from planners.builtin.vlm import frames_to_tensor
    from worldgen.vocab import COLOR_NAMES, SHAPES

    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
        raise InputError("image", getattr(image, "shape", type(image).__name__), "pass an RGB uint8 (H, W, 3) array")
    small = resize_frames(image[None], (SIZE, SIZE))
    model = vlm.model
    patches, _ = model.vision(frames_to_tensor(small, vlm.device))
    g = patches.shape[1]
    attr = model.patch_attributes(patches)[0].float().cpu().numpy()  # (g*g, 1 + colours + shapes)
    nc = len(COLOR_NAMES)
    present = attr[:, 0] >= threshold
    colour, shape = attr[:, 1: 1 + nc].argmax(-1), attr[:, 1 + nc:].argmax(-1)
    objects = []
    for c in np.unique(colour[present]):
        cells = (present & (colour == c)).reshape(g, g)
        count = max(1, _blobs(cells))
        ys, xs = np.nonzero(cells)
        shapes = shape[cells.reshape(-1)]
        per = cells.sum() / count
        size = "small" if per <= 1.5 else "medium" if per <= 4.5 else "large"
        objects.append((int(cells.sum()), SeenObject(COLOR_NAMES[int(c)], SHAPES[int(np.bincount(shapes).argmax())], count, size,
                                                     _where((ys.mean() + 0.5) / g, (xs.mean() + 0.5) / g))))
    objects.sort(key=lambda t: (-t[0], t[1].color))
    return Perception(tuple(o for _, o in objects))


def listed_names(perception_text: str) -> list[str]:
    """"colour shape" of each object a perception text (``Perception.text``) lists, in its order."""
    from worldgen.vocab import COLOR_NAMES, SHAPES

    names = []
    for part in perception_text.split("; "):
        words = part.split()
        for i, w in enumerate(words[:-1]):
            if w in COLOR_NAMES:
                noun = words[i + 1]
                shape = next((s for s in SHAPES if noun in (s, s + "s", s + "es")), None)
                if shape:
                    names.append(f"{w} {shape}")
                break
    return names


def to_name_slots(text: str, names: list[str]) -> str:
    """``text`` with each listed name written as its slot (``<o1>``, ``<o2>``, ...): what the builtin writer learns
    to write [PROPOSED, delexicalisation as in slot-based language generation], so that a 2M-parameter model names
    the objects by pointing at the perception text instead of spelling them from memory."""
    for k, name in sorted(enumerate(names[:9], 1), key=lambda t: -len(t[1])):
        text = re.sub(rf"\b{re.escape(name)}", f"<o{k}>", text)
    return text


def fill_name_slots(text: str, names: list[str]) -> str:
    """``text`` with each slot ``<ok>`` replaced by the k-th listed name, its article agreeing with the name ("a <o1>"
    -> "an orange star"); a slot past the list stays as written (``has_markup`` then rejects the caption)."""

    def name(k: str) -> str | None:
        return names[int(k) - 1] if 0 < int(k) <= len(names) else None

    def article(m: re.Match) -> str:
        filled = name(m.group(3))
        if filled is None:
            return m.group(0)
        a = "an" if filled[:1].lower() in "aeiou" else "a"
        return f"{a.capitalize() if m.group(1)[0].isupper() else a} {m.group(2)}"

    text = re.sub(r"\b(an?|An?) (<o(\d)>)", article, text)
    return _SLOT.sub(lambda m: name(m.group(1)) or m.group(0), text)


_MARKUP = re.compile(r"<\s*o(?:\d|[A-Za-z])|<\s*/?\s*topic\b")


def has_markup(text: str) -> bool:
    """Whether a caption still holds the builtin writer's slot markup (``<o3>`` with no third object, or a slot it
    began and left unfinished, ``<oWrite``): a caption drawn on a meme never shows one."""
    return bool(_MARKUP.search(text))
