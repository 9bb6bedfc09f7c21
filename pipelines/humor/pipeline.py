"""HumorPipeline: memes for a template image by hierarchical multi-path reasoning, ranked by a pairwise reward
model (specs/humor.md).

image (+ topic) -> the writer samples N meme CoTs (template intent, K reasoning paths, the anchored path, the
box texts) -> each is parsed (unparsable samples and repeats are re-drawn, twice as many as are missing, for at most ``max_rounds``
rounds) -> rendered on the
image -> the reward model compares every pair (same template, so within-group) -> ranked:

    pipe = HumorPipeline.build(components={"writer": "builtin", "reward_model": "builtin"})
    out = pipe("template.png", topic="mondays", generator=0)
    out.memes[0], out.captions[0], out.rewards[0], out.cots[0]["paths"], out.cots[0]["anchor"]

Slots: ``writer`` (``planners.meme_lm``: the builtin causal LM reading the builtin VLM's perception text, or a
transformers VLM such as Qwen2.5-VL asked with ``planners.meme_cot.build_prompt``), ``reward_model``
(``planners.meme_reward``: the builtin Bradley-Terry scorer, or the published pairwise head on a VLM).
A meme's ``reward`` is its mean pairwise preference over the others in the group (the published
s_a / (s_a + s_b) rule; 0.5 alone); ``ranking`` orders them by Borda count or Bradley-Terry strength.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.errors import InputError
from pipelines.base import Pipeline, PipelineOutput, generator_and_seed, output_field
from pipelines.humor.config import (  # noqa: F401  (the config and slots live torch-free in config.py; importable here too)
    COMPONENT_SPECS,
    MAX_MEMES,
    HumorConfig,
    RewardSlot,
    WriterSlot,
)

NUM_BOXES = 2  # worldgen's templates and the classic top / bottom layout
MAX_SIDE = 1024  # the rendered meme's longer side at most


@dataclass(repr=False)
class HumorOutput(PipelineOutput):
    """Ranked memes, best first: ``memes`` (rendered RGB uint8), ``captions`` (box texts), ``rewards`` (mean pairwise
    preference over the group), ``scores`` (the ranking's: Borda 1 - rank / n, or BT strengths), ``cots`` (per meme:
    intent, every reasoning path, the anchored one, Step 1 / Step 2, the raw text), and what was rejected. ``notice``:
    one line when the writer cannot follow the topic (the builtin writer knows only its world's words), else None."""

    topic: str | None
    message: str
    captions: list
    rewards: list
    scores: list
    cots: list
    intent: str
    num_paths: int
    rejected: list
    seed: int | None
    seconds: dict
    image: np.ndarray = output_field("image")
    memes: list = output_field("none", default_factory=list)
    notice: str | None = None

    def gallery(self, columns: int = 4) -> np.ndarray:
        from pipelines.humor.viz import gallery

        return gallery(self.memes, self.rewards, columns)

    PICTURES = ('meme_*', 'gallery')

    def pictures(self) -> dict[str, np.ndarray | None]:
        pics: dict[str, np.ndarray | None] = {f"meme_{k + 1}": m for k, m in enumerate(self.memes)}
        if self.memes:
            pics["gallery"] = self.gallery()
        return pics

    def summary(self) -> dict[str, Any]:
        return {"message": self.message, "topic": self.topic, "intent": self.intent, "num_paths": self.num_paths,
                "memes": [{"rank": k + 1, "boxes": c, "reward": round(float(r), 4), "score": round(float(s), 4),
                           "anchored_path": (cot["anchor"] + 1) if cot.get("anchor") is not None else None,
                           "paths": [f"({p['context']}) {p['text']}" for p in cot.get("paths", [])]}
                          for k, (c, r, s, cot) in enumerate(zip(self.captions, self.rewards, self.scores, self.cots))],
                "rejected": len(self.rejected), "notice": self.notice, "seed": self.seed,
                "seconds": {k: round(float(v), 3) for k, v in self.seconds.items()}, "config": self.config}

    def __str__(self) -> str:
        s = self.summary()
        best = " / ".join(s["memes"][0]["boxes"]) if s["memes"] else "-"
        return f"{s['message']}; best: {best!r} (seed {s['seed']}, {s['seconds']['total']:.1f} s)"


def display_image(image: np.ndarray, meme_size: int) -> np.ndarray:
    """The picture the text goes on: a small one enlarged (nearest, an integer factor) to ``meme_size`` on its
    shorter side, a large one shrunk to ``MAX_SIDE`` on its longer side."""
    from core.frames import resize_frames

    h, w = image.shape[:2]
    if min(h, w) < meme_size:
        k = -(-meme_size // min(h, w))
        if max(h, w) * k <= MAX_SIDE * 2:
            return resize_frames(image[None], (h * k, w * k), "nearest")[0]
    if max(h, w) > MAX_SIDE:
        s = MAX_SIDE / max(h, w)
        return resize_frames(image[None], (max(1, round(h * s)), max(1, round(w * s))))[0]
    return image


class HumorPipeline(Pipeline):
    component_specs = COMPONENT_SPECS
    config_class = HumorConfig

    def _parse(self, text: str) -> dict:
        from planners.meme_cot import parse_meme_cot, read_boxes

        k = self.config.num_paths
        if k == 0:
            return {"boxes": read_boxes(text, NUM_BOXES), "intent": "", "paths": [], "anchor": None, "step1": "", "step2": "", "raw": text}
        cot = parse_meme_cot(text, NUM_BOXES, k)
        return {"boxes": cot.text_on_meme, "intent": cot.intent, "description": cot.description,
                "paths": [dataclasses.asdict(p) for p in cot.paths], "anchor": cot.anchor, "step1": cot.step1, "step2": cot.step2,
                "raw": text}

    def _write(self, image: np.ndarray, topic: str | None, gen: torch.Generator, callback: Callable | None) -> tuple[list[dict], list[dict], int]:
        """Parsed, distinct samples (at most ``num_memes``), the rejected ones (text and why) and the rounds drawn."""
        from planners.meme_cot import MemeFormatError
        from planners.meme_perception import has_markup

        c = self.config
        kept, rejected, seen, rounds = [], [], set(), 0
        bar = self.progress_bar(total=c.num_memes, desc="write")
        try:
            for round_ in range(c.max_rounds):
                need = c.num_memes - len(kept)
                if need <= 0:
                    break
                draw = need if round_ == 0 else 2 * need  # a re-draw asks for twice what is missing [PROPOSED]
                rounds += 1
                styled = {"prompt_style": c.style} if "prompt_style" in inspect.signature(self.writer.write).parameters else {}
                if c.style != "atelier" and not styled:  # never a silent switch to our prompt
                    raise InputError("style", c.style, "this writer reads only our prompt (the builtin writer was trained on it); "
                                                       "pass --writer with a VLM checkpoint, or --style atelier")
                texts = self.writer.write(image, topic, c.num_paths, draw, num_boxes=NUM_BOXES, temperature=c.temperature,
                                          top_p=c.top_p, generator=gen, **styled)
                if c.anchored_boxes and c.num_paths:
                    from planners.meme_cot import anchor_boxes

                    texts = [anchor_boxes(t, NUM_BOXES) for t in texts]
                for text in texts:
                    try:
                        item = self._parse(text)
                    except MemeFormatError as e:
                        rejected.append({"text": text, "why": "; ".join(e.missing)})
                        continue
                    if any(has_markup(b) for b in item["boxes"]):
                        rejected.append({"text": text, "why": "a box holds the writer's own slot markup (an object the picture does not have)"})
                        continue
                    key = tuple(b.strip().lower() for b in item["boxes"])
                    if key in seen:
                        rejected.append({"text": text, "why": "repeats a caption already kept"})
                        continue
                    if len(kept) < c.num_memes:
                        seen.add(key)
                        kept.append(item)
                        bar.update(1)
                self.step_end(callback, round_, {"stage": "write", "kept": len(kept), "rejected": len(rejected)})
        finally:
            bar.close()
        return kept, rejected, rounds

    def _rank(self, image: np.ndarray, items: list[dict], topic: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(order best first, each meme's mean pairwise preference, the ranking's scores) over the group. A judge
        that reads the user's request (the published LightRFT judge) is given the topic."""
        import inspect

        from planners.meme_ranking import borda, bradley_terry

        n = len(items)
        if n == 1:
            return np.zeros(1, int), np.full(1, 0.5), np.ones(1)
        rm = self.reward_model
        P = np.zeros((n, n))
        if hasattr(rm, "score"):  # a pointwise scorer: n scores give every pair
            r = np.asarray(rm.score(image, [it["boxes"] for it in items]), dtype=np.float64)
            P = 1 / (1 + np.exp(-(r[:, None] - r[None, :])))
        else:
            asks = "user_request" in inspect.signature(rm.prefer).parameters
            extra = {"user_request": topic} if asks else {}
            for i in range(n):
                for j in range(i + 1, n):
                    P[i, j] = float(rm.prefer(image, items[i]["boxes"], items[j]["boxes"], **extra))
                    P[j, i] = 1 - P[i, j]
        np.fill_diagonal(P, 0.0)
        rewards = P.sum(1) / (n - 1)
        if self.config.ranking == "borda":
            g = borda(P)
            return g.order, rewards, g.scores
        strength = bradley_terry(P, prior=0.1)
        return np.argsort(-strength, kind="stable"), rewards, strength

    def __call__(self, image: Any, topic: str | None = None, *, generator: Any = None, callback_on_step_end: Callable | None = None,
                 output_type: str = "np") -> HumorOutput:
        """Memes for ``image`` (a path, a video path, or RGB uint8 ``(H, W, 3)``) on ``topic`` (None: the writer picks
        the angle). ``generator``: a seed or ``torch.Generator``, the only randomness (a fresh seed is drawn and
        reported when None). ``callback_on_step_end(pipe, step, info)`` runs after each writing round
        (``info["stage"] == "write"``) and after ranking (``"rank"``)."""
        from core.video import read_still
        from planners.meme_lm import check_topic
        from renderers.meme import render_meme_styled

        self._begin_call()
        t0 = time.perf_counter()
        gen, seed = generator_and_seed(generator)
        topic = check_topic(topic)
        image = read_still(image)
        # a writer that knows which topics it can follow says when this one is not among them (the builtin one)
        notice = self.writer.topic_notice(topic) if topic is not None and hasattr(self.writer, "topic_notice") else None
        t_in = time.perf_counter()
        items, rejected, rounds = self._write(image, topic, gen, callback_on_step_end)
        t_write = time.perf_counter()
        shown = display_image(image, self.config.meme_size)
        if not items:
            message = f"no readable meme in {len(rejected)} samples (the writer did not follow the format); try another seed"
            order, rewards, scores = np.zeros(0, int), np.zeros(0), np.zeros(0)
        else:
            order, rewards, scores = self._rank(image, items, topic)
            message = f"{len(items)} meme{'s' if len(items) > 1 else ''} ranked by the reward model"
            if len(items) < self.config.num_memes:
                message += f" (asked for {self.config.num_memes}: {len(rejected)} samples were unreadable or repeats)"
        self.step_end(callback_on_step_end, rounds, {"stage": "rank", "memes": len(items)})
        ranked = [items[i] for i in order]
        memes = [render_meme_styled(shown, it["boxes"], self.config.style) for it in ranked]
        t_end = time.perf_counter()
        out = HumorOutput(topic=topic, message=message, captions=[it["boxes"] for it in ranked],
                          rewards=[float(rewards[i]) for i in order], scores=[float(scores[i]) for i in order],
                          cots=[{k: v for k, v in it.items() if k != "boxes"} for it in ranked],
                          intent=ranked[0]["intent"] if ranked else "", num_paths=self.config.num_paths, rejected=rejected, seed=seed,
                          seconds={"inputs": t_in - t0, "write": t_write - t_in, "rank_render": t_end - t_write, "total": t_end - t0},
                          image=image, memes=memes, notice=notice, config={**dataclasses.asdict(self.config)})
        return out.convert(output_type)
