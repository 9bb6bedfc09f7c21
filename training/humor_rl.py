"""HUMOR stage 3: group RL of the SFT writer against the pairwise reward model (spec b.4, [RL-CODE]).

TRL's ``GRPOTrainer`` on the writer (the builtin causal LM on perception text, or a transformers VLM such as
Qwen2.5-VL on the image itself, asked with ``planners.meme_cot.build_prompt``): G = 8 samples per prompt, group-normalised
advantages (``scale_rewards="group"``), the k3 KL to the SFT reference as a loss term (``beta`` 0.01, published),
``loss_type="grpo"`` (each sequence's token mean, the GRPO paper's), temperature 1.0; reward = 1.0 x pairwise +
0.1 x format (``reward_weights``, published) + ``topic_weight`` x topic [PROPOSED, below]. The prompts are TRAIN
scenes' perception texts asking for K = 3 paths.

**Topics** [PROPOSED; the published prompts carry the user's request, its reward is not published]: a share
``topic_rate`` of the prompts (drawn per scene from ``seed`` and the scene's index, so a resumed or longer run asks
the same) carries a topic, one of the ``training.humor_data.topic_words`` of the scene's candidate captions (a word
some human meme of that scene uses). ``topic_reward`` is 1 when the completion's boxes (read as the pipeline reads
them) contain the topic word, singular or plural alike (``planners.meme_lm.mentions_topic``), else 0, and 0 for a
prompt without a topic. ``topic_rate`` 0 (the default, the shipped writer's recipe) leaves topics and the topic
reward out. Measured on 30 TEST scenes, 8 samples each, the topic being the first topic word of the scene's human
memes (2026-12-06): the topic word is in 5.4% of the shipped writer's readable captions asked with it and 3.3%
without (its SFT start 11.7% / 8.3%); at step 10 of topic runs (``topic_rate`` 0.5, ``topic_weight`` 0.5 or 2) 4.6% /
2.9% and 6.3% / 4.6%, while the win rate fell 4.7 [1.7, 7.6] and 3.4 [0.1, 6.7] points against the shipped writer
(paired). The 2M-parameter writer writes its boxes nearly independently of the rest of its prompt and CoT, and the
pairwise reward narrows its captions faster than a 0/1 topic reward can teach it to follow a word; the topic
reward stays for a writer that can (a VLM). The topic words of the TRAIN captions are saved with a builtin writer
(``topics`` in its marker file): the pipeline says when a user's topic is outside them.

**Distinct captions** [PROPOSED; not in the published recipe]: the pairwise reward pays two copies of one good
caption as much as two different good ones, so group RL narrows the writer's samples (measured 2026-12-06: from 5.3 to
2.9 distinct captions of 8 in 10 steps from the six-template SFT writer, where the pipeline shows 4). With
``distinct_weight`` > 0 a further reward, 1 - (copies of the caption among the other G - 1 samples) / (G - 1), makes
a repeated caption lose to an equally good new one inside its group's normalised advantages.

**The pairwise reward** (``make_rm_group_reward``): within each group of G completions for one scene, every pair
is compared by the reward model on that scene's picture and each pair's rewards are the published
s_a / (s_a + s_b); a sample's reward is the mean over its pairs. With the builtin Bradley-Terry scorer, whose
published-format reply scores a pair 10p and 10(1 - p) (``planners.meme_reward.judge_reply``), that is exactly
mean_j sigmoid(r_i - r_j), computed here from G scores instead of C(G, 2) calls. A completion without readable
boxes cannot be rendered: against a readable one it scores 0 and the other 1; two unreadable ones 0.5 each
(the published 0 / 0 rule) [PROPOSED]. ``--reward pointwise`` is the ablation the benchmark compares: each
completion's own sigmoid(r_i), no comparison. ``--human-anchors H`` adds the scene's first H human memes to every
completion's opponents (spec b.4's optional "human meme as an anchor competitor"; an unreadable completion loses to
each): the mean then also says how a sample fares against people, the quantity the benchmark's win rate measures,
rather than only against its own group [PROPOSED: the count; 0 is the published rule].

Published settings that do not fit a 2M-parameter model trained from scratch on CPU, changed and said so:
lr 1e-6 -> ``RLRecipe.lr``; 20 episodes x rollout batch 128 -> ``steps`` x ``batch``; up to 2,048 generated
tokens -> ``max_completion_length`` (the SFT traces are at most ~260 tokens).

**Data**: TRAIN scenes of all six templates (``--hold-out crowd,hide``: the generalisation study, the shipped writer's
data and every run's until 2026-12-06). A writer with the topic slot (``training.humor_sft --topic-slot``) keeps it: without topics in the
prompts (the shipped recipe) its rollouts never sample the slot; with them the slot is filled with the prompt's topic
before the rewards read the boxes, as ``BuiltinMemeWriter.write`` does.

Checkpoints every ``save_steps`` in OUT/run (the curve of preference against steps in docs/BENCHMARKS.md is
measured on them); a rerun with the same OUT resumes from the last one.

    python -m training.humor_rl --sft outputs/train/humor_sft --out DIR [--steps N] [--reward pairwise|pointwise] [--hold-out T,T]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.arguments import StrictParser
from core.atomic import write_json_atomic
from core.errors import InputError

logger = logging.getLogger(__name__)

KIND = "humor-rl"


@dataclass(frozen=True)
class RLRecipe:
    scenes: int = 3000
    # the shipped writer (2026-12-05): step 10 of a top_p 0.95 run at this constant lr from the name-slot SFT writer,
    # the last checkpoint whose K = 3 samples still held 4 distinct captions in 8 on VAL (the pipeline shows 4); the
    # mean KL never reached the trust region's delta = 0.05 in 60 steps
    steps: int = 10
    batch: int = 16  # completions per step: batch / group prompts
    group: int = 8
    lr: float = 5e-5
    beta: float = 0.01
    temperature: float = 1.0
    # nucleus mass of the rollouts (published: 1.0, every token); 0.95 matches the pipeline's sampling, where
    # the 2M-parameter writer's rare-token glitches stop breaking the K-path schema [PROPOSED]
    top_p: float = 0.95
    max_completion_length: int = 320
    reward: str = "pairwise"
    format_weight: float = 0.1
    # None: the published ten checks; K: also our path layer (K Path lines and the anchor) [PROPOSED]
    format_paths: int | None = None
    human_anchors: int = 0  # the scene's human memes added to each completion's opponents (module docstring)
    # [PROPOSED] the share of prompts with a topic and the weight of the topic reward (module docstring); 0 is the
    # shipped writer's recipe: with topics (rate 0.5-1, weight 0.5-4, batch 16 or 64) topic following did not rise
    # and the win rate fell
    topic_rate: float = 0.0
    topic_weight: float = 0.5
    # [PROPOSED] weight of the distinct reward (module docstring); 0 is the shipped writer's recipe
    distinct_weight: float = 0.0
    save_steps: int = 25
    seed: int = 0
    # templates kept out of the TRAIN prompts (the generalisation study: ("crowd", "hide")); none since 2026-12-06
    held_out: tuple[str, ...] = ()


def tiny_recipe() -> RLRecipe:
    return RLRecipe(scenes=8, steps=1, batch=4, group=4, max_completion_length=32, save_steps=1)


def _boxes_or_none(text: str) -> list[str] | None:
    from planners.meme_cot import MemeFormatError, read_boxes
    from training.group_rl import _completion_text

    try:
        return read_boxes(_completion_text(text), 2)
    except MemeFormatError:
        return None


def prompt_topic(scene: Any, rate: float, seed: int = 0) -> str | None:
    """The topic of ``scene``'s RL prompt: with probability ``rate`` one of its candidate captions' topic words, else
    None; drawn from ``(seed, scene.index)`` alone, so the same scene always gets the same topic."""
    from training.humor_data import scene_topics

    rng = np.random.default_rng([int(seed), 48, int(scene.index)])
    if rate <= 0 or rng.random() >= rate:
        return None
    words = scene_topics(scene)
    return str(words[int(rng.integers(len(words)))]) if words else None


def topic_reward(completions: Sequence[Any], topic: Sequence[str | None] | str | None = None, **kwargs: Any) -> list[float]:
    """1.0 for a completion whose boxes contain its prompt's ``topic`` (a dataset column), else 0.0; 0.0 without a
    topic and for a completion without readable boxes (module docstring)."""
    from planners.meme_lm import fill_topic_slot, mentions_topic
    from training.group_rl import _per_sample

    topics = _per_sample(topic, len(completions), "topic")
    out = []
    for c, t in zip(completions, topics):
        boxes = _boxes_or_none(c) if t else None  # a topic-slot writer's slot is the topic once filled in
        out.append(float(boxes is not None and mentions_topic(t, [fill_topic_slot(b, t) for b in boxes])))
    return out


def make_distinct_reward(group_size: int) -> Callable[..., list[float]]:
    """The distinct reward as a TRL reward function (module docstring): within each group of G completions for one
    scene, 1 - (copies of its caption among the other G - 1) / (G - 1); 0 for a completion without readable boxes.
    Captions compare as the benchmark counts them (the boxes joined, exact text)."""

    def distinct_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        if n % group_size or group_size < 2:
            raise InputError("completions", f"{n} completions", f"pass whole groups of {group_size} (at least 2)")
        out: list[float] = []
        for start in range(0, n, group_size):
            boxes = [_boxes_or_none(c) for c in completions[start:start + group_size]]
            captions = [None if b is None else " / ".join(b) for b in boxes]
            out.extend(0.0 if c is None else 1 - (captions.count(c) - 1) / (group_size - 1) for c in captions)
        return out

    return distinct_reward


def make_rm_group_reward(rm: Any, images: dict[int, np.ndarray], group_size: int, pointwise: bool = False,
                         anchors: dict[int, list[Sequence[str]]] | None = None,
                         slot_names: dict[int, list[str]] | None = None, topic_slot: bool = False) -> Callable[..., list[float]]:
    """The reward model's group reward as a TRL reward function ``fn(completions, scene, **kw)`` (see the module
    docstring); ``images[scene]`` is each scene's picture, ``scene`` a dataset column; ``anchors[scene]``, if given,
    the human memes (box texts) each completion is also compared with; ``slot_names[scene]``, for a writer that
    names objects by slot, the names its slots stand for (filled in before scoring, as the writer does); with
    ``topic_slot``, the ``topic`` column fills the topic slot the same way."""
    from planners.meme_lm import fill_topic_slot
    from planners.meme_perception import fill_name_slots
    from training.group_rl import _per_sample

    def reward(completions: Sequence[Any], scene: Sequence[int], topic: Any = None, **kwargs: Any) -> list[float]:
        n = len(completions)
        if n % group_size:
            raise InputError("completions", f"{n} completions", f"pass whole groups of {group_size}")
        topics = _per_sample(topic, n, "topic") if topic_slot else [None] * n
        out: list[float] = []
        for start in range(0, n, group_size):
            boxes = [_boxes_or_none(c) for c in completions[start:start + group_size]]
            if slot_names is not None:
                names = slot_names[int(scene[start])]
                boxes = [None if b is None else [fill_name_slots(t, names) for t in b] for b in boxes]
            if topic_slot:
                boxes = [None if b is None else [fill_topic_slot(t, topics[start + i]) for t in b] for i, b in enumerate(boxes)]
            ok = [i for i, b in enumerate(boxes) if b is not None]
            r = np.zeros(group_size)
            if ok:
                r[ok] = rm.score(images[int(scene[start])], [boxes[i] for i in ok])
            if pointwise:
                out.extend(float(1 / (1 + np.exp(-r[i]))) if boxes[i] is not None else 0.0 for i in range(group_size))
                continue
            humans = anchors.get(int(scene[start]), []) if anchors else []
            r_h = rm.score(images[int(scene[start])], list(humans)) if humans else np.zeros(0)
            for i in range(group_size):
                pair = []
                for j in range(group_size):
                    if j == i:
                        continue
                    if boxes[i] is not None and boxes[j] is not None:
                        pair.append(1 / (1 + np.exp(-(r[i] - r[j]))))
                    else:
                        pair.append(0.5 if boxes[i] is None and boxes[j] is None else float(boxes[i] is not None))
                pair.extend(1 / (1 + np.exp(-(r[i] - r_h))) if boxes[i] is not None else np.zeros(len(r_h)))
                out.append(float(np.mean(pair)) if pair else 0.5)
        return out

    reward.__name__ = "pointwise_reward" if pointwise else "pairwise_reward"
    return reward


def official_format_reward_func(completions: Sequence[Any], num_boxes: int | Sequence[int], **kwargs: Any) -> list[float]:
    """The published format reward (``planners.meme_cot.meme_format_reward(rule="official")``) as a TRL reward function."""
    from planners.meme_cot import meme_format_reward
    from training.group_rl import _completion_text, _per_sample

    boxes = _per_sample(num_boxes, len(completions), "num_boxes")
    return [meme_format_reward(_completion_text(c), b, rule="official") for c, b in zip(completions, boxes)]


def make_format_reward(num_paths: int) -> Callable[..., list[float]]:
    """The format share with our path layer checked too (``format_reward(text, num_boxes, num_paths)``: the
    published ten checks plus K Path lines and the anchor), as a TRL reward function [PROPOSED]: the published
    checks do not look at the paths, and without them RL past the trust region kept the boxes and broke the
    reasoning layer (docs/BENCHMARKS.md, "HUMOR")."""
    from planners.meme_cot import format_reward
    from training.group_rl import _completion_text, _per_sample

    def format_with_paths(completions: Sequence[Any], num_boxes: Any = 2, **kwargs: Any) -> list[float]:
        boxes = _per_sample(num_boxes, len(completions), "num_boxes")
        return [format_reward(_completion_text(c), b, num_paths) for c, b in zip(completions, boxes)]

    return format_with_paths


def grpo_config(out: Path, recipe: RLRecipe, **overrides):
    from trl import GRPOConfig

    kw = dict(output_dir=str(out / "run"), max_steps=recipe.steps, per_device_train_batch_size=recipe.batch,
              num_generations=recipe.group, learning_rate=recipe.lr, lr_scheduler_type="constant_with_warmup", warmup_steps=5,
              beta=recipe.beta, epsilon=0.2, loss_type="grpo", scale_rewards="group",
              reward_weights=[1.0, recipe.format_weight] + ([recipe.topic_weight] if recipe.topic_rate > 0 else [])
              + ([recipe.distinct_weight] if recipe.distinct_weight > 0 else []),
              temperature=recipe.temperature, top_p=recipe.top_p, max_completion_length=recipe.max_completion_length,
              logging_steps=1, save_strategy="steps", save_steps=recipe.save_steps, report_to=[], seed=recipe.seed,
              bf16=False, fp16=False, dataloader_num_workers=0, use_cpu=not torch.cuda.is_available(), disable_tqdm=True)
    return GRPOConfig(**{**kw, **overrides})


def _suppress_topic_slot(args, tokenizer, recipe: RLRecipe, topic_slot: bool):
    """Without topics in the prompts a topic-slot writer's rollouts never sample the slot (as ``write`` does)."""
    if not topic_slot or recipe.topic_rate > 0:
        return args
    from planners.meme_lm import TOPIC_SLOT

    args.generation_kwargs = {**(args.generation_kwargs or {}), "suppress_tokens": [tokenizer.convert_tokens_to_ids(TOPIC_SLOT)]}
    return args


def _load_policy(sft: str | Path, builtin: bool, trust_remote_code: bool) -> tuple[Any, Any]:
    """The writer RL starts from and its tokenizer / processor: the builtin writer (our own folder, never code), or a
    transformers VLM, whose own code runs only with the user's flag."""
    from transformers import AutoModelForImageTextToText, AutoProcessor, AutoTokenizer, LlamaForCausalLM

    from core.errors import loading_checkpoint

    if builtin:
        return LlamaForCausalLM.from_pretrained(sft, use_safetensors=True), AutoTokenizer.from_pretrained(sft, trust_remote_code=False)
    with loading_checkpoint("--sft", sft):  # the user's flag decides, never a prompt in the terminal
        model = AutoModelForImageTextToText.from_pretrained(sft, use_safetensors=True, trust_remote_code=trust_remote_code)
        return model, AutoProcessor.from_pretrained(sft, trust_remote_code=trust_remote_code)


def train_rl(out: str | Path, sft: str | Path, recipe: RLRecipe = RLRecipe(), reward_model: Any = "builtin", resume: bool = True,
             trust_remote_code: bool = False) -> dict:
    from datasets import Dataset
    from trl import GRPOTrainer

    from planners.meme_cot import build_prompt
    from planners.meme_lm import MARKER, BuiltinMemeWriter, lm_prompt, writer_uses_name_slots, writer_uses_topic_slot
    from planners.meme_perception import listed_names
    from planners.meme_reward import load_reward_model
    from training.group_rl import format_reward_func
    from training.humor_data import check_held_out, known_topics, load_scenes

    if recipe.reward not in ("pairwise", "pointwise"):
        raise InputError("reward", recipe.reward, "choose pairwise (published) or pointwise (the ablation)")
    if recipe.human_anchors < 0 or (recipe.human_anchors and recipe.reward != "pairwise"):
        raise InputError("human_anchors", recipe.human_anchors, "pass 0 (the published rule) or a positive count with the pairwise reward")
    if not 0 <= recipe.topic_rate <= 1:
        raise InputError("topic_rate", recipe.topic_rate, "pass the share of prompts with a topic, 0 to 1")
    if recipe.topic_weight < 0:
        raise InputError("topic_weight", recipe.topic_weight, "pass a non-negative weight of the topic reward")
    if recipe.distinct_weight < 0:
        raise InputError("distinct_weight", recipe.distinct_weight, "pass a non-negative weight of the distinct reward (0: off)")
    recipe = RLRecipe(**{**asdict(recipe), "held_out": check_held_out(recipe.held_out)})
    builtin = (Path(sft) / MARKER).exists()
    model, processing = _load_policy(sft, builtin, trust_remote_code)  # before anything is written: a bad --sft fails first
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "train_config.json", {"model": KIND, "recipe": asdict(recipe)})
    t0 = time.perf_counter()
    scenes = load_scenes("train", recipe.scenes, held_out=recipe.held_out)
    rm = load_reward_model(reward_model)
    images = {s.index: s.still for s in scenes}
    topics = [prompt_topic(s, recipe.topic_rate, recipe.seed) for s in scenes]
    slots = builtin and writer_uses_name_slots(sft)
    topic_slot = builtin and writer_uses_topic_slot(sft)
    if builtin:  # the builtin writer: a text-only causal LM reading the perception text
        rows = [{"prompt": lm_prompt(s.perception, t, 3), "scene": s.index, "num_boxes": 2} for s, t in zip(scenes, topics)]
    else:  # a transformers VLM (e.g. Qwen2.5-VL): the image itself, asked with build_prompt (TRL's image column)
        from PIL import Image

        def text(topic):
            return build_prompt("the meme template in the image", 2, None, topic, 3)[0].content[0].text

        rows = [{"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text(t)}]}],
                 "image": Image.fromarray(s.still), "scene": s.index, "num_boxes": 2} for s, t in zip(scenes, topics)]
    if recipe.topic_rate > 0:  # the topic reward's column (without topics the dataset is the topic-free recipe's)
        rows = [{**r, "topic": t} for r, t in zip(rows, topics)]
    ds = Dataset.from_list(rows)
    anchors = {s.index: [list(c) for c in s.candidates[: recipe.human_anchors]] for s in scenes} if recipe.human_anchors else None
    slot_names = {s.index: listed_names(s.perception) for s in scenes} if slots else None
    # the format share: a VLM policy is held to the published rule (LightRFT's compute_meme_format_reward); the
    # builtin writer to ours, whose optional path layer checks what it writes
    fmt = official_format_reward_func if not builtin else format_reward_func if recipe.format_paths is None else make_format_reward(recipe.format_paths)
    rewards = [make_rm_group_reward(rm, images, recipe.group, pointwise=recipe.reward == "pointwise", anchors=anchors, slot_names=slot_names,
                                    topic_slot=topic_slot and recipe.topic_rate > 0), fmt]
    if recipe.topic_rate > 0:
        rewards.append(topic_reward)
    if recipe.distinct_weight > 0:
        rewards.append(make_distinct_reward(recipe.group))
    args = _suppress_topic_slot(grpo_config(out, recipe), processing, recipe, topic_slot)
    trainer = GRPOTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=ds, processing_class=processing)
    ckpts = sorted((out / "run").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1])) if resume else []
    trainer.train(resume_from_checkpoint=str(ckpts[-1]) if ckpts else None)
    logs = [h for h in trainer.state.log_history if "reward" in h]
    facts = {"kind": KIND, "recipe": asdict(recipe), "sft": str(sft), "steps": trainer.state.global_step,
             "train_minutes": round((time.perf_counter() - t0) / 60, 2),
             "curve": [{k: h.get(k) for k in ("step", "reward", "reward_std", "kl", "completions/mean_length")
                        if k in h} | {f: h[f] for f in h if f.startswith("rewards/")} for h in logs]}
    if builtin:
        BuiltinMemeWriter(trainer.model.cpu(), processing, name_slots=slots, topics=known_topics(scenes), topic_slot=topic_slot).save_pretrained(
            out, {"stage": "rl", "reward": recipe.reward, "steps": facts["steps"], "held_out": list(recipe.held_out)})
    else:
        trainer.save_model(str(out))
        processing.save_pretrained(out)
    write_json_atomic(out / "train_summary.json", facts)
    return facts


def main(argv=None) -> int:
    from training.humor_sft import add_hold_out_argument

    ap = StrictParser(prog="python -m training.humor_rl", description=__doc__.splitlines()[0])
    ap.add_argument("--sft", default="outputs/train/humor_sft", help="the SFT writer folder (the policy's start and the KL reference)")
    ap.add_argument("--out", default="outputs/train/humor_rl")
    ap.add_argument("--reward-model", default="builtin")
    ap.add_argument("--reward", choices=("pairwise", "pointwise"))
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--batch", type=int, help="completions per step (whole groups of G; default 16)")
    ap.add_argument("--group", type=int, help="completions per scene, G (default 8); --batch must be a multiple")
    ap.add_argument("--top-p", type=float, help="nucleus mass of the rollouts (default 0.95 [PROPOSED]; published 1.0)")
    ap.add_argument("--format-paths", type=int, help="also check K reasoning paths in the format reward [PROPOSED]")
    ap.add_argument("--human-anchors", type=int, help="also compare each completion with the scene's first H human memes [PROPOSED]")
    ap.add_argument("--topic-rate", type=float, help="share of prompts with a topic (default 0: none, the shipped recipe) [PROPOSED]")
    ap.add_argument("--topic-weight", type=float, help="weight of the topic reward (default 0.5) [PROPOSED]")
    ap.add_argument("--distinct-weight", type=float,
                    help="weight of the distinct reward, which pays a caption less for each copy of it in its group "
                         "(default 0: off, the shipped recipe) [PROPOSED]")
    ap.add_argument("--beta", type=float, help="weight of the k3 KL to the SFT reference (default 0.01, published)")
    ap.add_argument("--save-steps", type=int, help="checkpoint every N steps (default 25), for choosing by the KL rule")
    add_hold_out_argument(ap)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args(argv)
    if args.save_steps is not None and args.save_steps < 1:
        ap.error(f"--save-steps {args.save_steps}: pass a positive number of steps")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    recipe = tiny_recipe() if args.tiny else RLRecipe()
    over = {k: v for k, v in (("steps", args.steps), ("reward", args.reward), ("lr", args.lr), ("format_paths", args.format_paths),
                                     ("top_p", args.top_p), ("batch", args.batch), ("group", args.group),
                                     ("human_anchors", args.human_anchors), ("save_steps", args.save_steps)) if v}
    over.update({k: v for k, v in (("topic_rate", args.topic_rate), ("topic_weight", args.topic_weight),
                                     ("distinct_weight", args.distinct_weight), ("held_out", args.hold_out), ("beta", args.beta))
                 if v is not None})
    recipe = RLRecipe(**{**asdict(recipe), **over})
    facts = train_rl(args.out, args.sft, recipe, args.reward_model, resume=not args.no_resume)
    print(json.dumps({k: v for k, v in facts.items() if k != "curve"}))
    return 0


if __name__ == "__main__":
    from training.common import run_script

    raise SystemExit(run_script(main))
