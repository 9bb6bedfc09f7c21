"""Templated captions with synonyms and paraphrases, each with a structured attribute record.

``caption(world, rng)`` -> ``(text, record)``; the record lists, for every mentioned object, its
canonical attributes (shape, colour, size, motion, direction) plus the relations and events the
text states, so a model's output can be scored against structure rather than wording.
"""

from __future__ import annotations

import numpy as np

from worldgen.vocab import COLOR_SYNONYMS, SHAPE_SYNONYMS, SIZE_SYNONYMS
from worldgen.world import World

_MOVES = {
    "left": ["moves to the left", "glides left", "drifts leftwards", "slides to the left"],
    "right": ["moves to the right", "glides right", "drifts rightwards", "slides to the right"],
    "up": ["moves up", "rises", "floats upwards", "climbs"],
    "down": ["moves down", "sinks", "drops downwards", "falls"],
}
_MOTION_PHRASES = {
    "static": ["stays still", "does not move", "rests in place", "sits motionless"],
    "bounce": ["bounces around", "bounces off the walls", "ricochets around the frame"],
    "circular": ["moves in a circle", "circles around", "travels in a loop"],
    "accelerate": ["speeds up", "accelerates", "moves faster and faster"],
    "stop_and_go": ["stops and starts", "moves in fits and starts", "keeps stopping and going"],
}
_REL = {"left": ["to the left of", "left of"], "right": ["to the right of", "right of"], "above": ["above", "over"], "below": ["below", "under"]}


def pick(rng: np.random.Generator, words: list) -> str:
    return words[int(rng.integers(len(words)))]


def noun_phrase(rng: np.random.Generator, shape: str, color: str, size: str | None = None, canonical: bool = False) -> str:
    """"the crimson disk", "a big red circle", ..."""
    if canonical:
        return " ".join(w for w in (size, color, shape) if w)
    words = [pick(rng, SIZE_SYNONYMS[size])] if size and rng.random() < 0.5 else []
    words += [pick(rng, COLOR_SYNONYMS[color]), pick(rng, SHAPE_SYNONYMS[shape])]
    return " ".join(words)


def direction(world: World, obj_id: int) -> str | None:
    """Dominant direction of net displacement over the object's presence, or None if it barely moves."""
    tr = world.track
    i = [o.id for o in world.objects].index(obj_id)
    p = tr["pos"][tr["present"][:, i], i]
    if len(p) < 2:
        return None
    d = p[-1] - p[0]
    if np.abs(d).max() < 0.1 * min(world.width, world.height):
        return None
    if abs(d[0]) >= abs(d[1]):
        return "right" if d[0] > 0 else "left"
    return "down" if d[1] > 0 else "up"


def describe_motion(world: World, obj_id: int, rng: np.random.Generator) -> tuple[str, dict]:
    o = world.obj(obj_id)
    if o.person is not None:
        acts = [a for a, _, _ in o.person.actions]
        from worldgen.figures import ACTIONS

        text = "then ".join(ACTIONS[a].description + " " for a in acts[:3]).strip() or "stands still"
        return text, {"actions": acts[:3]}
    kind, d = o.motion.kind, direction(world, obj_id)
    if kind in ("linear", "accelerate") and d is not None:
        text = pick(rng, _MOVES[d]) + (" faster and faster" if kind == "accelerate" and rng.random() < 0.5 else "")
    else:
        text = pick(rng, _MOTION_PHRASES.get(kind, _MOTION_PHRASES["bounce"]))
    return text, {"motion": kind, "direction": d}


def relation(world: World, a: int, b: int, t: int = 0) -> str:
    s = {x["id"]: x for x in world.state(t)}
    dx, dy = s[a]["x"] - s[b]["x"], s[a]["y"] - s[b]["y"]
    if abs(dx) >= abs(dy):
        return "right" if dx > 0 else "left"
    return "below" if dy > 0 else "above"


def caption(world: World, rng: np.random.Generator, max_objects: int = 3) -> tuple[str, dict]:
    """A paraphrased caption of the world and its structured record."""
    objs = world.objects[:max_objects]
    parts, record = [], {"objects": [], "relations": [], "events": []}
    for k, o in enumerate(objs):
        np_ = noun_phrase(rng, o.shape, o.color, o.size if rng.random() < 0.5 else None)
        art = pick(rng, ["a", "the"]) if k == 0 else pick(rng, ["a", "another", "the"])
        mtext, mrec = describe_motion(world, o.id, rng)
        if art == "a" and np_[0] in "aeiou":
            art = "an"
        parts.append(f"{art} {np_} {mtext}")
        record["objects"].append({**o.attrs(), **mrec})
    if len(objs) >= 2 and rng.random() < 0.6:
        a, b = objs[0], objs[1]
        rel = relation(world, a.id, b.id)
        parts.append(f"at first the {noun_phrase(rng, a.shape, a.color)} is {pick(rng, _REL[rel])} the {noun_phrase(rng, b.shape, b.color)}")
        record["relations"].append({"subject": a.id, "relation": rel, "object": b.id, "frame": 0})
    ev = [e for e in world.events if e["type"] in ("collide", "hit_wall", "appear", "disappear") and e["objects"][0] in {o.id for o in objs}]
    if ev:
        e = ev[0]
        o = world.obj(e["objects"][0])
        n = noun_phrase(rng, o.shape, o.color)
        text = {
            "collide": lambda: f"the {n} {pick(rng, ['bumps into', 'collides with', 'hits'])} the {noun_phrase(rng, world.obj(e['objects'][1]).shape, world.obj(e['objects'][1]).color)}",
            "hit_wall": lambda: f"the {n} {pick(rng, ['hits', 'bounces off', 'touches'])} the {e['wall']} wall",
            "appear": lambda: f"the {n} {pick(rng, ['appears', 'shows up', 'pops into view'])}",
            "disappear": lambda: f"the {n} {pick(rng, ['disappears', 'vanishes', 'goes away'])}",
        }[e["type"]]()
        parts.append(text)
        record["events"].append(e)
    joined = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return joined[0].upper() + joined[1:] + ".", record
