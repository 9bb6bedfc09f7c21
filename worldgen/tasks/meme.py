"""meme: template scenes with intent labels, >= 8 caption candidates, and a hidden preference.

Templates: chase ("A chases B"), ignore ("A ignores B for C"), collide ("A crashes into B"),
hide ("A hides behind B"), crowd ("A is surrounded by Bs"), fall ("A falls down"). Each caption is a
(top, bottom) pair built from template-specific and generic pools with the scene's object names.

**Hidden preference function** (documented here, kept out of the record except its outputs)::

    score = 1.0 * grounding + 0.8 * incongruity + 0.6 * brevity
    grounding   = fraction of the scene's object words (colours, shapes) that the caption mentions, capped at 1
    incongruity = 1 - Jaccard(top words, bottom words)   (setup and punchline should differ)
    brevity     = max(0, 1 - max(0, n_words - 8) / 12)

Pairwise labels compare every pair of candidates; each label is flipped with probability
``Config.label_noise`` (default 0.1), drawn from the item's own seed.

JSONL schema::

    {"task": "meme", "seed": int, "level": int, "template": str, "intent": str,
     "roles": {"A": id, "B": id, "C"?: id}, "candidates": [{"top": str, "bottom": str}] (>= 8),
     "scores": [float], "pairs": [[i, j, label]] (label 1 if i preferred over j, noisy),
     "world": {...}, "files": {"video": "....mp4", "still": "....png"}}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgen.motion import Motion
from worldgen.scene import SceneConfig, sample_background
from worldgen.tasks.base import Sample
from worldgen.vocab import COLOR_NAMES, SHAPES
from worldgen.world import Obj, World

TEMPLATES = {
    "chase": ("pursuit", [("when you see {B}", "{A}: not today"), ("{B} leaving the party early", "{A} who still owes them money"), ("me running from responsibilities", "responsibilities: {A}"), ("{A} at 3 am", "the last slice of pizza"), ("nobody:", "{A} chasing {B} for no reason"), ("deadlines", "me, a {A}")]),
    "ignore": ("distraction", [("{A} ignoring {B}", "for {C}"), ("my plans", "{C}"), ("{B}: we need to talk", "{A}: looking at {C}"), ("loyalty", "{A} who just saw {C}"), ("{A} choosing {C} over {B}", "every single time"), ("the diet", "the cake")]),
    "collide": ("conflict", [("{A} and {B}", "meeting at full speed"), ("two opinions", "one comment section"), ("me", "the door I thought was open"), ("monday", "my motivation"), ("{A}: moves", "{B}: also moves"), ("when plans", "meet reality")]),
    "hide": ("avoidance", [("{A} hiding behind {B}", "when the boss walks in"), ("me at family dinners", "when they ask about my job"), ("{B}: protective", "{A}: invisible"), ("introverts", "at any party"), ("hide and seek champion", "{A}"), ("bills", "me behind {B}")]),
    "crowd": ("overwhelm", [("{A} surrounded by {B}s", "send help"), ("one question", "ten follow-ups"), ("me", "my open browser tabs"), ("{A} in a crowd of {B}s", "still feeling alone"), ("first day", "everyone already knows each other"), ("the new guy", "everyone else")]),
    "fall": ("failure", [("{A} confidently walking", "{A} two seconds later"), ("my grades", "gravity"), ("expectations", "reality"), ("me trying to be productive", "{A} falling"), ("plans for the weekend", "sunday night"), ("{A}", "going down")]),
}
GENERIC = [("when the code works", "and you don't know why"), ("me", "also me"), ("this is fine", "everything is fine"), ("expectation", "reality")]
W_GROUND, W_INCONG, W_BREV = 1.0, 0.8, 0.6


@dataclass
class Config:
    size: int = 64
    num_frames: int = 24
    fps: float = 12.0
    level: int = 2  # more objects and more generic (ungrounded) candidates at higher levels
    label_noise: float = 0.1
    num_candidates: int = 8


def with_articles(text: str) -> str:
    """"a" before a vowel made "an" ("me, a {A}" with an orange star: "me, an orange star")."""
    import re

    return re.sub(r"\b([Aa]) (?=[aeiouAEIOU])", lambda m: m.group(1) + "n ", text)


def preference(caption: dict, scene_words: set) -> float:
    """The hidden preference score of one (top, bottom) caption."""
    top, bottom = caption["top"].lower().split(), caption["bottom"].lower().split()
    words = set(top) | set(bottom)
    ground = min(1.0, len(words & scene_words) / max(1, min(len(scene_words), 2)))
    jac = len(set(top) & set(bottom)) / max(1, len(set(top) | set(bottom)))
    brev = max(0.0, 1 - max(0, len(top) + len(bottom) - 8) / 12)
    return round(W_GROUND * ground + W_INCONG * (1 - jac) + W_BREV * brev, 6)


def _scene(rng, template: str, cfg: Config) -> tuple[World, dict]:
    s, T = cfg.size, cfg.num_frames
    shapes, colors = rng.choice(SHAPES, 3, replace=False), rng.choice(COLOR_NAMES, 3, replace=False)
    mk = lambda i, m, size="medium", z=0: Obj(i + 1, str(shapes[i]), str(colors[i]), size, z, m)  # noqa: E731
    v = s / 80
    if template == "chase":
        objs = [mk(0, Motion("linear", (0.2 * s, 0.5 * s), (v, 0))), mk(1, Motion("linear", (0.45 * s, 0.5 * s), (v, 0)))]
    elif template == "ignore":
        objs = [mk(0, Motion("linear", (0.5 * s, 0.5 * s), (v * 0.8, 0))), mk(1, Motion("static", (0.2 * s, 0.5 * s))), mk(2, Motion("static", (0.85 * s, 0.5 * s)))]
    elif template == "collide":
        objs = [mk(0, Motion("linear", (0.2 * s, 0.5 * s), (v * 0.9, 0))), mk(1, Motion("linear", (0.8 * s, 0.5 * s), (-v * 0.9, 0)))]
    elif template == "hide":
        objs = [mk(0, Motion("linear", (0.3 * s, 0.5 * s), (v * 0.6, 0)), "small", 0), mk(1, Motion("static", (0.6 * s, 0.5 * s)), "large", 1)]
    elif template == "crowd":
        objs = [mk(0, Motion("static", (0.5 * s, 0.5 * s)))]
        for k in range(6):
            a = 2 * np.pi * k / 6
            objs.append(Obj(k + 2, str(shapes[1]), str(colors[1]), "small", k + 1, Motion("circular", (0.5 * s, 0.5 * s), radius=0.3 * s, omega=0.05, phase=a)))
    else:  # fall
        objs = [mk(0, Motion("accelerate", (0.5 * s, 0.2 * s), (0, 0), (0, 2 * 0.55 * s / T**2)))]
    roles = {"A": 1, "B": 2} if len(objs) > 1 else {"A": 1}
    if template == "ignore":
        roles["C"] = 3
    sc = SceneConfig(s, s, T, cfg.fps)
    return World(s, s, T, cfg.fps, objs, sample_background(rng, sc)), roles


def generate(seed: int, cfg: Config | None = None) -> Sample:
    cfg = cfg or Config()
    rng = np.random.default_rng([int(seed), 5])
    template = sorted(TEMPLATES)[int(rng.integers(len(TEMPLATES)))]
    intent, pool = TEMPLATES[template]
    world, roles = _scene(rng, template, cfg)
    names = {r: f"{world.obj(i).color} {world.obj(i).shape}" for r, i in roles.items()}
    names.setdefault("B", "everyone")
    names.setdefault("C", "something else")
    n_generic = {1: 2, 2: 3, 3: 4}[cfg.level]
    raw = pool + GENERIC[:n_generic]
    cands = [{"top": with_articles(t.format(**names)), "bottom": with_articles(b.format(**names))} for t, b in raw][: max(cfg.num_candidates, 8)]
    order = rng.permutation(len(cands))
    cands = [cands[i] for i in order]
    words = {w for i in roles.values() for w in (world.obj(i).color, world.obj(i).shape)}
    scores = [preference(c, words) for c in cands]
    pairs = []
    for i in range(len(cands)):
        for j in range(i + 1, len(cands)):
            if scores[i] == scores[j]:
                continue
            label = int(scores[i] > scores[j])
            if rng.random() < cfg.label_noise:
                label = 1 - label
            pairs.append([i, j, label])
    record = {"task": "meme", "seed": int(seed), "level": cfg.level, "template": template, "intent": intent, "roles": roles,
              "candidates": cands, "scores": scores, "pairs": pairs, "label_noise": cfg.label_noise, "world": world.spec()}
    still = world.render(world.num_frames // 2).rgb
    return Sample("meme", seed, record, worlds={"video": world}, images={"still": still})
