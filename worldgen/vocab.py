"""The world's vocabulary: shapes, colours, sizes, and the words used to talk about them."""

from __future__ import annotations

SHAPES = ("circle", "square", "triangle", "star", "diamond", "cross", "ring", "heart")

# name -> RGB. Saturated and far apart so every colour is nameable after H.264 compression.
COLORS = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 220),
    "yellow": (240, 210, 40),
    "orange": (245, 135, 30),
    "purple": (140, 60, 190),
    "pink": (245, 120, 190),
    "cyan": (40, 200, 210),
    "white": (245, 245, 245),
    "brown": (130, 80, 40),
}
COLOR_NAMES = tuple(COLORS)

# size name -> circumradius as a fraction of the canvas' shorter side
SIZES = {"small": 0.06, "medium": 0.10, "large": 0.15}
SIZE_NAMES = tuple(SIZES)

MOTIONS = ("static", "linear", "bounce", "circular", "accelerate", "stop_and_go")

BACKGROUNDS = ("solid", "gradient", "checker", "stripes", "noise")
# dark, low-saturation background tones so every object colour stands out
BACKGROUND_TONES = ((20, 20, 28), (35, 30, 45), (25, 40, 35), (45, 40, 30), (30, 30, 30))

# Synonyms for captions. The first entry of each list is the canonical word.
COLOR_SYNONYMS = {
    "red": ["red", "crimson", "scarlet"],
    "green": ["green", "emerald", "leaf-green"],
    "blue": ["blue", "navy", "cobalt"],
    "yellow": ["yellow", "golden", "lemon"],
    "orange": ["orange", "tangerine", "amber"],
    "purple": ["purple", "violet", "plum"],
    "pink": ["pink", "rose", "magenta-pink"],
    "cyan": ["cyan", "turquoise", "aqua"],
    "white": ["white", "snow-white", "ivory"],
    "brown": ["brown", "chocolate", "chestnut"],
}
SHAPE_SYNONYMS = {
    "circle": ["circle", "disk", "ball"],
    "square": ["square", "box", "block"],
    "triangle": ["triangle", "wedge", "three-sided shape"],
    "star": ["star", "five-pointed star", "starlet"],
    "diamond": ["diamond", "rhombus", "lozenge"],
    "cross": ["cross", "plus sign", "plus"],
    "ring": ["ring", "hoop", "donut"],
    "heart": ["heart", "love heart", "heart shape"],
    "person": ["person", "stick figure", "figure"],
}
SIZE_SYNONYMS = {"small": ["small", "tiny", "little"], "medium": ["medium", "mid-sized", "moderate"], "large": ["large", "big", "huge"]}
