"""HUMOR's training data from worldgen ``meme`` scenes: scenes with their perception, SFT traces traced back from
the scenes' human captions, and the noisy within-template pairs the reward model learns from.

    scenes = load_scenes("train", 2000)            # MemeScene: still, perception text, candidates, noisy pairs
    prompt, completion = sft_example(scenes[0], num_paths=3, rng=np.random.default_rng(0))

**Splits.** TRAIN uses all six templates by default. ``held_out`` (``scene_indices``, ``load_scenes``; the trainers'
``--hold-out``) keeps templates out of TRAIN for the generalisation study (a TRAIN index whose template is held out is
skipped and the next taken), so VAL / TEST scenes of those templates measure generalisation to templates never
seen: ``HELD_OUT_TEMPLATES`` (``crowd``, ``hide``) is the study's pair, held out of every training run until
2026-12-06 (the shipped models' data; ``make weights`` pins it), and what the benchmark still reports apart. A study
should not cripple a model users get: the writer that never trained on them describes them as other templates and
splices two trained templates' notes on ``crowd`` scenes (docs/humor.md). ``scores`` (worldgen's hidden preference) are kept on the scene only
for the scorers; no training code here reads them.

**Trace-back** (spec b.2; the procedure is [PROPOSED], the paper's was never published). Worldgen's candidates
are the scene's human memes and its pairwise labels (10% flipped) the human votes. The ground-truth caption of
a trace is drawn from the upper half of the scene's candidates by Borda count over those noisy votes (the
popular memes: a real corpus keeps those) [PROPOSED]; its reasoning path is written from what it does (whether
it names the picture's objects, how the punchline turns the setup), and the other K - 1 paths are other candidates of the same
scene (the alternative contexts), in shuffled order; Step 1 anchors on the ground truth's path. The texts are
our templates (no teacher VLM here), kept short: a 2M-parameter writer copies object names from its prompt
reliably only a few times per answer (measured: with the perception repeated in the description and the
names in every path, a 400-step run plateaued at loss 0.27 and wrote 12-75% readable samples) [PROPOSED]. With ``topic_rate``, a content word of the ground truth becomes
the user's topic, so the model learns to follow one; with ``topic_slot`` [PROPOSED] the completion writes that word as
the slot ``<topic>`` (``planners.meme_lm.TOPIC_SLOT``) in the captions, ``User input:`` and Step 1, and the writer fills
it with the user's topic verbatim: a 2M-parameter model does not copy a word from its prompt reliably (it wrote the
topic in 5-12% of its captions), but it learns to emit one token when a topic is asked. ``num_paths=1`` writes the single-path ablation, 0 the
direct caption (only ``Text on the Meme:``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.atomic import atomic_path
from core.errors import InputError
from planners.meme_cot import MemeCoT, ReasoningPath, render_cot
from planners.meme_lm import TOPIC_SLOT, lm_prompt, to_topic_slot
from planners.meme_perception import listed_names, to_name_slots
from worldgen.tasks import meme
from worldgen.tasks.base import split_seed
from worldgen.vocab import COLOR_NAMES, SHAPES

logger = logging.getLogger(__name__)

DEFAULT_CACHE = Path("outputs") / "humor_data"
TEMPLATES = tuple(sorted(meme.TEMPLATES))
# [PROPOSED] the generalisation study's two templates: held out of TRAIN only when asked (``held_out``; the trainers'
# ``--hold-out crowd,hide``), reported apart by the benchmark
HELD_OUT_TEMPLATES = ("crowd", "hide")
NUM_BOXES = 2  # every worldgen template captions as (top, bottom)

# [PROPOSED] the template-level notes the traces quote (b.2 (i)); the intent word is worldgen's
SCENE_NOTES = {
    "chase": "one thing runs after another",
    "ignore": "one thing turns away from another towards a third",
    "collide": "two things rush into each other",
    "hide": "a small thing hides behind a big one",
    "crowd": "one thing is surrounded by many others",
    "fall": "one thing drops down",
}
USAGE_NOTES = {
    "pursuit": "Pursuit: something you cannot escape, deadlines, duties, cravings; the chased or the chaser speaks.",
    "distraction": "Distraction: choosing the tempting thing over the right one; loyalty that lasts a second.",
    "conflict": "Conflict: two forces or opinions meeting head on; plans against reality.",
    "avoidance": "Avoidance: dodging people, questions and bills; the shy one at a party.",
    "overwhelm": "Overwhelm: too much at once; one against many; feeling alone in a crowd.",
    "failure": "Failure: confidence before the fall; expectations against results.",
}
_STOP = {"the", "a", "an", "me", "my", "you", "and", "of", "to", "for", "at", "in", "on", "with", "who", "when", "is", "it",
         "no", "not", "one", "still", "every", "they", "them", "their", "just", "also", "all", "going", "down", "this", "that",
         "we", "need", "talk", "after", "over", "about", "two", "ten", "any", "everyone", "else", "something", "reason"}


@dataclass
class MemeScene:
    """One worldgen meme scene. ``candidates``: its human captions as ``(top, bottom)``; ``pairs``: noisy votes
    ``(i, j, 1 if i preferred)``; ``perception``: what the builtin VLM reads from the still; ``names``: the role
    names used in the captions. ``scores`` / ``scene_words``: the hidden preference's inputs, for scorers only."""

    split: str
    index: int
    seed: int
    template: str
    intent: str
    still: np.ndarray
    candidates: list[tuple[str, str]]
    pairs: list[tuple[int, int, int]]
    perception: str
    names: dict[str, str]
    scores: list[float] = field(repr=False)
    scene_words: set[str] = field(repr=False)

    @property
    def held_out(self) -> bool:
        """Whether the scene uses one of the study's templates (``HELD_OUT_TEMPLATES``), held out of TRAIN only when a
        run asks for it."""
        return self.template in HELD_OUT_TEMPLATES


def _template_of(world_seed: int) -> str:
    # meme.generate draws its template first from rng([seed, 5]); reading it without rendering keeps skipping cheap
    rng = np.random.default_rng([int(world_seed), 5])
    return TEMPLATES[int(rng.integers(len(TEMPLATES)))]


def check_held_out(held_out) -> tuple[str, ...]:
    """``held_out`` as a sorted tuple of template names (None or empty: none), each checked."""
    names = tuple(sorted({str(t) for t in held_out or ()}))
    bad = [t for t in names if t not in TEMPLATES]
    if bad:
        raise InputError("held_out", ",".join(bad), f"name templates among {', '.join(TEMPLATES)} (or none)")
    if len(names) == len(TEMPLATES):
        raise InputError("held_out", ",".join(names), "leave at least one template to train on")
    return names


def scene_indices(split: str, count: int, seed: int = 0, held_out=()) -> list[int]:
    """The first ``count`` indices of ``split``; TRAIN skips the templates in ``held_out`` (default: none)."""
    if count < 0:
        raise InputError("count", count, "pass a non-negative number of scenes")
    skip = check_held_out(held_out)
    if split != "train" or not skip:
        return list(range(count))
    out, i = [], 0
    while len(out) < count:
        if _template_of(split_seed(split, seed, i)) not in skip:
            out.append(i)
        i += 1
    return out


def make_scene(split: str, index: int, seed: int = 0, perception: str | None = None, vlm=None) -> MemeScene:
    """Scene ``index`` of ``split``; ``perception`` given (cached) or read with ``vlm`` (the builtin VLM)."""
    smp = meme.generate(split_seed(split, seed, index))
    r = smp.record
    world = smp.worlds["video"]
    names = {role: f"{world.obj(i).color} {world.obj(i).shape}" for role, i in r["roles"].items()}
    words = {w for i in r["roles"].values() for w in (world.obj(i).color, world.obj(i).shape)}
    still = smp.images["still"]
    if perception is None:
        from planners.builtin import load_builtin_vlm
        from planners.meme_perception import perceive

        perception = perceive(vlm or load_builtin_vlm(), still).text
    return MemeScene(split, index, smp.seed, r["template"], r["intent"], still, [(c["top"], c["bottom"]) for c in r["candidates"]],
                     [tuple(p) for p in r["pairs"]], perception, names, list(r["scores"]), words)


def load_scenes(split: str, count: int, seed: int = 0, cache_dir: str | Path = DEFAULT_CACHE, held_out=()) -> list[MemeScene]:
    """``count`` scenes of ``split`` (TRAIN without the templates in ``held_out``), their perception texts cached in
    ``cache_dir`` (JSON, keyed by split, seed and index: reading 60 stills takes about a second)."""
    cache = Path(cache_dir) / f"perception_{split}_seed{seed}.json"
    known: dict[str, str] = json.loads(cache.read_text()) if cache.exists() else {}
    idx = scene_indices(split, count, seed, held_out)
    todo = [i for i in idx if str(i) not in known]
    vlm = None
    if todo:
        from planners.builtin import load_builtin_vlm

        vlm = load_builtin_vlm()
    scenes = [make_scene(split, i, seed, known.get(str(i)), vlm) for i in idx]
    if todo:
        known.update({str(s.index): s.perception for s in scenes})
        cache.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cache) as tmp:
            Path(tmp).write_text(json.dumps(known, sort_keys=True))
    return scenes


# ---- votes -----------------------------------------------------------------------------------------


def borda_votes(scene: MemeScene) -> np.ndarray:
    """Wins per candidate over the scene's noisy pairwise votes."""
    wins = np.zeros(len(scene.candidates))
    for i, j, label in scene.pairs:
        wins[i if label else j] += 1
    return wins


def popular(scene: MemeScene) -> list[int]:
    """The upper half of the candidates by noisy Borda count (ties broken by index), best first."""
    wins = borda_votes(scene)
    order = sorted(range(len(wins)), key=lambda i: (-wins[i], i))
    return order[: max(1, len(order) // 2)]


def hallucinated(caption: tuple[str, str], names: dict[str, str], rng: np.random.Generator) -> tuple[str, str] | None:
    """``caption`` with every object name of the scene it mentions replaced by an object the picture does not show
    (a colour and a shape that no named object has; one replacement per name), or None when it names none.

    [PROPOSED] hallucination-injected negatives for the reward model, as POVID (Zhou et al., 2024) builds
    dispreferred answers by injecting hallucinated objects: the human votes never set a right name against a wrong
    one (every human meme names the picture's objects correctly), so a model trained on them alone cannot tell the
    writer's invented names from real ones (measured: 48.4% of 2,234 VAL pairs, chance). The label (the real caption is
    preferred) comes from this construction, not from worldgen's hidden preference."""
    text = " ||| ".join(caption)
    named = [n for n in names.values() if n in text]
    if not named:
        return None
    colours = {n.split()[0] for n in names.values()}
    shapes = {n.split()[-1] for n in names.values()}
    other_colours = [c for c in COLOR_NAMES if c not in colours]
    other_shapes = [s for s in SHAPES if s not in shapes]
    fakes = [f"{c} {s}" for c in other_colours for s in other_shapes]
    for n, k in zip(sorted(named, key=len, reverse=True), rng.choice(len(fakes), len(named), replace=False)):
        text = text.replace(n, fakes[k])  # a different invented object for each real one
    top, bottom = text.split(" ||| ")
    return top, bottom


# ---- trace-back ------------------------------------------------------------------------------------


def _mentions(caption: tuple[str, str], names: dict[str, str]) -> list[str]:
    text = " ".join(caption).lower()
    return [n for n in dict.fromkeys(names.values()) if n in text]


def _context(caption: tuple[str, str], names: dict[str, str]) -> str:
    if _mentions(caption, names):
        return "the objects in the picture"
    if (caption[0], caption[1]) in set(meme.GENERIC):
        return "a classic meme format"
    return "everyday life"


def _path_text(caption: tuple[str, str], names: dict[str, str]) -> str:
    how = "name them" if _mentions(caption, names) else "a relatable moment"
    return f'{how} -> "{caption[0]}" / "{caption[1]}"'


def _why(caption: tuple[str, str], names: dict[str, str], topic: str | None) -> str:
    top, bottom = caption[0].lower().split(), caption[1].lower().split()
    reasons = []
    if topic:
        reasons.append(f"it is about {topic}")
    if _mentions(caption, names):
        reasons.append("it names what the picture shows")
    if not set(top) & set(bottom):
        reasons.append("the punchline turns the setup")
    if len(top) + len(bottom) <= 8:
        reasons.append("it is short")
    return ", ".join(reasons) or "it fits the template"


def topic_words(caption: tuple[str, str], names: dict[str, str]) -> list[str]:
    """Content words of a caption that could be a user's topic (not the scene's object words)."""
    scene = {w for n in names.values() for w in n.split()}
    words = [w.strip(":,.!?'\"").lower() for w in " ".join(caption).split()]
    return [w for w in dict.fromkeys(words) if len(w) > 2 and w not in _STOP and w not in scene and w.isalpha()]


def scene_topics(scene: MemeScene) -> list[str]:
    """Every ``topic_words`` of the scene's candidate captions, in caption order, once each."""
    return list(dict.fromkeys(w for c in scene.candidates for w in topic_words(c, scene.names)))


def known_topics(scenes: list[MemeScene]) -> list[str]:
    """The topic words a writer trained on ``scenes`` has seen (``topic_words`` over their candidate captions), most
    common first (ties alphabetical), so a notice's first few examples are the words it saw most."""
    counts: dict[str, int] = {}
    for s in scenes:
        for w in scene_topics(s):
            counts[w] = counts.get(w, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w))


def trace(scene: MemeScene, gt: int, others: list[int], num_paths: int = 3, topic: str | None = None,
          rng: np.random.Generator | None = None, topic_slot: bool = False) -> str:
    """The SFT target: the meme CoT whose anchored path leads to candidate ``gt`` (``others``: the other paths'
    candidates), in the schema of ``planners.meme_cot`` (``num_paths`` 0: only the boxes). With ``topic_slot`` the
    topic word is written ``<topic>`` wherever the trace carries it (captions, ``User input:``, Step 1) [PROPOSED]."""

    def say(caption: tuple[str, str]) -> tuple[str, str]:  # a caption as the trace writes it
        if not (topic and topic_slot):
            return caption
        return to_topic_slot(caption[0], topic), to_topic_slot(caption[1], topic)

    caption = say(scene.candidates[gt])
    boxes = f"Text on the Meme:\nbox1: {caption[0]}\nbox2: {caption[1]}\n"
    if num_paths == 0:
        return boxes
    rng = rng or np.random.default_rng(0)
    chosen = [gt] + list(others[: num_paths - 1])
    order = list(rng.permutation(len(chosen)))
    paths = [chosen[k] for k in order]
    anchor = paths.index(gt)
    said = TOPIC_SLOT if topic and topic_slot else topic
    cot = MemeCoT(
        description=f"A {scene.template} scene: {SCENE_NOTES[scene.template]}.",
        usage_scenarios=USAGE_NOTES[scene.intent],
        text_analysis="Box 1 sets up, box 2 turns it.",
        paths=[ReasoningPath(_context(scene.candidates[k], scene.names), _path_text(say(scene.candidates[k]), scene.names)) for k in paths],
        specific_analysis=f"User input: {said}." if topic else "No user input: the funniest angle wins.",
        anchor=anchor,
        step1=_why(scene.candidates[gt], scene.names, said),
        step2="the setup in box 1, the punchline in box 2",
        text_on_meme=[caption[0], caption[1]],
    )
    return render_cot(cot)


def sft_example(scene: MemeScene, num_paths: int = 3, rng: np.random.Generator | None = None,
                topic_rate: float = 0.25, name_slots: bool = False, topic_slot: bool = False) -> tuple[str, str]:
    """One (prompt, completion) pair traced back from ``scene`` (see the module docstring); with ``name_slots`` the
    completion names the perceived objects by slot (``planners.meme_perception.to_name_slots``), with ``topic_slot``
    it writes the topic (asked in a share ``topic_rate`` of the prompts, verbatim) as ``<topic>`` [PROPOSED]."""
    rng = rng or np.random.default_rng(0)
    gt = int(rng.choice(popular(scene)))
    topic = None
    if rng.random() < topic_rate:
        words = topic_words(scene.candidates[gt], scene.names)
        topic = str(rng.choice(words)) if words else None
    rest = [i for i in range(len(scene.candidates)) if i != gt and scene.candidates[i] != scene.candidates[gt]]
    others = [int(i) for i in rng.permutation(rest)]
    completion = trace(scene, gt, others, num_paths, topic, rng, topic_slot)
    if name_slots:
        completion = to_name_slots(completion, listed_names(scene.perception))
    return lm_prompt(scene.perception, topic, num_paths), completion


def sft_corpus(scenes: list[MemeScene], per_scene: int = 2, path_counts: tuple[int, ...] = (3, 1, 0),
               seed: int = 0, name_slots: bool = False, topic_slot: bool = False, topic_rate: float = 0.25) -> list[dict]:
    """``per_scene`` traces per scene and path count, as TRL prompt-completion rows
    (``{"prompt", "completion", "num_paths", "scene"}``); ``name_slots``, ``topic_slot``, ``topic_rate``: see
    ``sft_example``."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in scenes:
        for k in path_counts:
            for _ in range(per_scene):
                p, c = sft_example(s, k, rng, topic_rate, name_slots=name_slots, topic_slot=topic_slot)
                rows.append({"prompt": p, "completion": c, "num_paths": k, "scene": s.index})
    return rows
