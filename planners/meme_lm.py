"""HUMOR's meme writers: given a template image (and a topic), sample several meme CoTs in the schema of
``planners.meme_cot``.

- ``BuiltinMemeWriter``: a small transformers ``LlamaForCausalLM`` with a byte-level BPE tokenizer, trained here
  from scratch (``training/humor_sft.py``), reading the picture as the builtin VLM's perception text
  (``planners.meme_perception``). Being a plain transformers causal LM, TRL's ``SFTTrainer`` and ``GRPOTrainer``
  train it as they train any checkpoint.
- ``VLMMemeWriter``: any ``VisionLanguageModel`` (e.g. Qwen2.5-VL through ``planners.hf``) asked with
  ``planners.meme_cot.build_prompt`` and sampled through the protocol's seeded ``generate``.

Both take ``write(image, topic, num_paths, n, generator) -> list[str]``; the same generator state gives the same
texts. ``load_meme_writer("builtin" | folder)`` picks one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from core.errors import InputError, MediaError
from planners.protocol import generation_seed

WEIGHTS = Path(__file__).resolve().parents[1] / "weights" / "builtin" / "meme_writer"
MARKER = "atelier_meme_writer.json"
# [PROPOSED] the longest CoT the builtin model writes: its SFT traces are at most ~260 tokens
MAX_NEW_TOKENS = 360
MAX_TOPIC_CHARS = 200
# [PROPOSED] the topic slot: a writer trained with it (``training.humor_sft --topic-slot``) writes this one token where
# the user's topic goes, and ``BuiltinMemeWriter.write`` puts the topic in verbatim (delexicalisation, as the name slots)
TOPIC_SLOT = "<topic>"


@runtime_checkable
class MemeWriter(Protocol):
    """Samples meme CoT texts for a template image."""

    def write(self, image: np.ndarray, topic: str | None = None, num_paths: int = 3, n: int = 4, *, num_boxes: int = 2,
              temperature: float = 1.0, top_p: float = 1.0, generator: Any = None) -> list[str]: ...


@dataclass(frozen=True)
class MemeLMConfig:
    """The builtin writer's architecture [PROPOSED: sized for minutes of CPU training]."""

    vocab_size: int = 2048
    hidden_size: int = 192
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 576
    max_position_embeddings: int = 1024


def train_tokenizer(texts: list[str], vocab_size: int = MemeLMConfig.vocab_size):
    """A byte-level BPE tokenizer trained on ``texts`` (any unicode encodes; unseen words split into bytes),
    as a transformers ``PreTrainedTokenizerFast`` with ``<|endoftext|>`` (BOS/EOS) and ``<pad>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<pad>")


def new_meme_lm(tokenizer, config: MemeLMConfig = MemeLMConfig(), seed: int = 0):
    """A freshly initialised ``LlamaForCausalLM`` for ``tokenizer``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(**{**asdict(config), "vocab_size": len(tokenizer)}, num_key_value_heads=config.num_attention_heads,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                      tie_word_embeddings=True)
    return LlamaForCausalLM(cfg)


def to_topic_slot(text: str, word: str) -> str:
    """``text`` with every whole-word occurrence of ``word`` (any case) written as ``TOPIC_SLOT`` [PROPOSED]."""
    import re

    return re.sub(rf"(?<![\w-]){re.escape(word)}(?![\w-])", TOPIC_SLOT, text, flags=re.IGNORECASE) if word else text


def fill_topic_slot(text: str, topic: str | None) -> str:
    """``text`` with each ``TOPIC_SLOT`` replaced by ``topic`` (verbatim); without a topic the text stays as written."""
    return text.replace(TOPIC_SLOT, topic) if topic else text


def add_topic_slot(tokenizer, model=None) -> int:
    """Add ``TOPIC_SLOT`` to ``tokenizer`` as one token (an added, non-special token, so decoding keeps it) and
    grow ``model``'s embeddings to match (the new row starts at the mean of the others); returns its id. A
    tokenizer that has it already is left as it is."""
    if TOPIC_SLOT not in tokenizer.get_vocab():
        tokenizer.add_tokens([TOPIC_SLOT])
    if model is not None and model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    return tokenizer.convert_tokens_to_ids(TOPIC_SLOT)


def check_topic(topic: Any) -> str | None:
    if topic is None:
        return None
    if not isinstance(topic, str) or not topic.strip():
        raise InputError("topic", topic, "pass the meme's topic as a non-empty string, e.g. 'mondays', or leave it out")
    if len(topic) > MAX_TOPIC_CHARS:
        raise InputError("topic", f"{len(topic)} characters", f"use at most {MAX_TOPIC_CHARS} characters")
    return " ".join(topic.split())


# words a topic match ignores (a topic "the exams" is about exams, not "the")
_TOPIC_STOP = frozenset("the and for with you your my our from that this what when who why how are was were its".split())
# [PROPOSED] how many of the writer's known topics an out-of-world notice names
NOTICE_EXAMPLES = 6


def singular(word: str) -> str:
    """A crude singular of an English word, for topic matching (``mondays`` -> ``monday``, ``responsibilities`` ->
    ``responsibility``; ``boss`` stays) [PROPOSED]."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def topic_terms(text: str) -> set[str]:
    """The content words of ``text`` (letters only, three or more, a few function words left out), singular."""
    import re

    return {singular(w) for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 2 and w not in _TOPIC_STOP}


def mentions_topic(topic: str | None, boxes: Any) -> bool:
    """Whether a caption (box texts, or one text) shares a word with ``topic``: case-insensitive, singular and
    plural alike (``topic_terms``). False without a topic."""
    if not topic:
        return False
    text = boxes if isinstance(boxes, str) else " ".join(boxes)
    return bool(topic_terms(topic) & topic_terms(text))


def _check_image(image: Any) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
        raise InputError("image", getattr(image, "shape", type(image).__name__), "pass an RGB uint8 (H, W, 3) image")
    return image


def _check_paths(num_paths: Any) -> int:
    if isinstance(num_paths, bool) or not isinstance(num_paths, int) or not 0 <= num_paths <= 8:
        raise InputError("num_paths", num_paths, "pass 0 (caption only), 1 (single path) or up to 8 reasoning paths")
    return num_paths


def lm_prompt(perception: str, topic: str | None = None, num_paths: int = 3, num_boxes: int = 2) -> str:
    """The builtin writer's prompt (what it was trained on, ``training/humor_data.py``) [PROPOSED]: the perception text, the user's topic, the boxes and how many
    reasoning paths to write (0: the caption only)."""
    if num_paths < 0:
        raise InputError("num_paths", num_paths, "pass 0 (caption only) or more reasoning paths")
    mode = "caption only" if num_paths == 0 else f"{num_paths} reasoning path{'s' if num_paths > 1 else ''}"
    return (f"Meme template: {perception}.\nUser input: {topic if topic else 'none'}.\n"
            f"Write {num_boxes} text boxes, {mode}.\n")


def sample_texts(model, tokenizer, prompts: list[str], n: int, seed: int | None, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = MAX_NEW_TOKENS, banned: list[int] | None = None) -> list[list[str]]:
    """``n`` sampled completions (greedy when ``seed`` is None and ``n`` is 1) per prompt, from a causal LM, seeded
    through ``fork_rng`` so only ``seed`` decides them; ``banned``: token ids never generated."""
    from planners.hf import PLAIN_DECODING, PLAIN_SAMPLING

    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True).to(model.device)
    sample = seed is not None
    with torch.no_grad(), torch.random.fork_rng(devices=[], enabled=sample):
        if sample:
            torch.random.default_generator.manual_seed(seed)
        kw = dict(PLAIN_SAMPLING, temperature=float(temperature), top_p=float(top_p)) if sample else {}
        if banned:
            kw["suppress_tokens"] = list(banned)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=sample, num_return_sequences=n,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **PLAIN_DECODING, **kw)
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return [texts[i * n:(i + 1) * n] for i in range(len(prompts))]


class BuiltinMemeWriter:
    """The builtin writer: perception text from the builtin VLM, then a small causal LM (module docstring). With
    ``name_slots`` the LM names objects by slot (``<o1>`` = the first object the perception lists) and ``write``
    fills the slots in [PROPOSED] (``planners.meme_perception.to_name_slots``). ``topics``: the topic words its
    training captions held (saved beside its weights; None when unknown): a topic sharing none of them gets a
    notice (``topic_notice``). With ``topic_slot`` [PROPOSED] the LM writes ``TOPIC_SLOT`` where the user's topic
    goes and ``write`` puts the topic in verbatim (without a topic the slot is never sampled)."""

    def __init__(self, model, tokenizer, vlm=None, name_slots: bool = False, topics: Any = None, topic_slot: bool = False):
        self.model, self.tokenizer = model.eval(), tokenizer
        self._vlm = vlm
        self.name_slots = bool(name_slots)
        self.topic_slot = bool(topic_slot) and TOPIC_SLOT in tokenizer.get_vocab()
        self.topics = None if topics is None else [str(t) for t in topics]

    @property
    def vlm(self):
        if self._vlm is None:
            from planners.builtin import load_builtin_vlm

            self._vlm = load_builtin_vlm(self.model.device)
        return self._vlm

    @property
    def device(self) -> torch.device:
        return self.model.device

    def to(self, device: Any = None, dtype: Any = None) -> BuiltinMemeWriter:
        self.model.to(**{k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None})
        if self._vlm is not None and device is not None:
            self._vlm.to(device)
        return self

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, device: str | torch.device | None = None) -> BuiltinMemeWriter:
        from transformers import AutoTokenizer, LlamaForCausalLM
        from transformers.utils import logging as hf_logging

        from core.device import select_device

        hf_logging.disable_progress_bar()  # a "Loading weights" bar per load is noise on stderr

        path = Path(path or WEIGHTS)
        if not (path / MARKER).exists():
            raise MediaError(path, "not a builtin meme writer folder", "pass a folder written by BuiltinMemeWriter.save_pretrained "
                                                                      "(e.g. `atelier train humor-sft`), or 'builtin'")
        model = LlamaForCausalLM.from_pretrained(path, use_safetensors=True).to(select_device(device))
        return cls(model, AutoTokenizer.from_pretrained(path, trust_remote_code=False), name_slots=writer_uses_name_slots(path), topics=writer_topics(path),
                   topic_slot=writer_uses_topic_slot(path))

    def save_pretrained(self, path: str | Path, metadata: dict | None = None) -> Path:
        path = Path(path)
        self.model.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
        known = {} if self.topics is None else {"topics": self.topics}
        (path / MARKER).write_text(json.dumps({"kind": "builtin_meme_writer", "perception": "builtin_vlm", "name_slots": self.name_slots,
                                               "topic_slot": self.topic_slot, **known, **(metadata or {})}, indent=1))
        return path

    def topic_notice(self, topic: str | None) -> str | None:
        """One line for a topic outside this writer's world (it shares no word with ``topics``, singular and plural
        alike), else None. A writer without the topic slot can only use its world's words, so its memes will not
        follow the topic; one with the slot puts the topic in verbatim, but the joke around it is still one of its
        world's captions (docs/humor.md, "Topics", has the measurement)."""
        topic = check_topic(topic)
        if topic is None or not self.topics:
            return None
        known = {singular(t) for t in self.topics}
        if topic_terms(topic) & known:
            return None
        long = [t for t in self.topics if len(t) >= 5] or self.topics  # spread over the list (most common first)
        examples = ", ".join(dict.fromkeys(long[i * len(long) // NOTICE_EXAMPLES] for i in range(min(NOTICE_EXAMPLES, len(long)))))
        if self.topic_slot:
            return (f"the builtin meme writer puts the topic {topic!r} into its captions as written, but knows only the "
                    f"captions of its synthetic meme world, so the joke around it is not about {topic!r} (topics it "
                    f"knows: {examples}, ...); a real writer (--writer with a VLM checkpoint) writes about any topic")
        return (f"the builtin meme writer knows only the words of its synthetic meme world, and the topic {topic!r} is not "
                f"among them, so its memes will not follow it (topics it knows: {examples}, ...); a real writer "
                f"(--writer with a VLM checkpoint) follows any topic")

    def perceive(self, image: np.ndarray) -> str:
        from planners.meme_perception import perceive

        return perceive(self.vlm, _check_image(image)).text

    def write(self, image: np.ndarray, topic: str | None = None, num_paths: int = 3, n: int = 4, *, num_boxes: int = 2,
              temperature: float = 1.0, top_p: float = 1.0, generator: Any = None, do_sample: bool = True) -> list[str]:
        from planners.meme_perception import fill_name_slots, listed_names

        seed = generation_seed(MAX_NEW_TOKENS, do_sample, temperature, top_p, n, generator)
        perception = self.perceive(image)
        topic = check_topic(topic)
        prompt = lm_prompt(perception, topic, _check_paths(num_paths), num_boxes)
        # a topic slot with no topic to fill it is never sampled
        banned = [self.tokenizer.convert_tokens_to_ids(TOPIC_SLOT)] if self.topic_slot and topic is None else None
        texts = sample_texts(self.model, self.tokenizer, [prompt], n, seed, temperature, top_p, banned=banned)[0]
        if self.name_slots:
            names = listed_names(perception)
            texts = [fill_name_slots(t, names) for t in texts]
        if self.topic_slot:
            texts = [fill_topic_slot(t, topic) for t in texts]
        return texts


def _marker(path: str | Path) -> dict:
    try:
        out = json.loads((Path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def writer_uses_topic_slot(path: str | Path) -> bool:
    """Whether the builtin writer saved in ``path`` writes the topic as ``TOPIC_SLOT`` (its marker file says so)."""
    return bool(_marker(path).get("topic_slot", False))


def writer_topics(path: str | Path) -> list[str] | None:
    """The topic words the builtin writer saved in ``path`` knows (its marker file's ``topics``), None if unsaid."""
    try:
        topics = json.loads((Path(path) / MARKER).read_text()).get("topics")
    except (OSError, ValueError):
        return None
    return [str(t) for t in topics] if isinstance(topics, list) else None


def writer_uses_name_slots(path: str | Path) -> bool:
    """Whether the builtin writer saved in ``path`` names objects by slot (its marker file says so)."""
    try:
        return bool(json.loads((Path(path) / MARKER).read_text()).get("name_slots", False))
    except (OSError, ValueError):
        return False


class VLMMemeWriter:
    """Any ``VisionLanguageModel`` as a meme writer: the prompt, then the protocol's seeded ``generate`` with ``n``
    returns. ``prompt_style``: ``"atelier"`` (``build_prompt``: image, template name, topic, K paths; ours) or
    ``"official"`` (``build_official_prompt``: LightRFT's ``generate_meme.txt`` with the topic as the user input,
    for policies trained on it, e.g. HUMOR-COT-Qwen2.5-VL; ``num_paths`` is then not asked for)."""

    def __init__(self, vlm, template_name: str = "the meme template in the image", max_new_tokens: int = 1024,
                 prompt_style: str = "atelier"):
        from planners.meme_cot import PROMPT_STYLES

        if prompt_style not in PROMPT_STYLES:
            raise InputError("prompt_style", prompt_style, f"choose one of {PROMPT_STYLES}")
        self.vlm, self.template_name, self.max_new_tokens, self.prompt_style = vlm, template_name, max_new_tokens, prompt_style

    @property
    def device(self) -> torch.device:
        return self.vlm.device

    def to(self, device: Any = None, dtype: Any = None) -> VLMMemeWriter:
        self.vlm.to(device=device, dtype=dtype)
        return self

    def save_pretrained(self, path: str | Path) -> Path:
        """The VLM's checkpoint (reloaded by ``from_pretrained(path)`` / ``load_meme_writer(path)``)."""
        return self.vlm.save_pretrained(path)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: Any = None, trust_remote_code: bool = False) -> VLMMemeWriter:
        from planners.loading import load_vlm

        return cls(load_vlm(str(path), device=device, trust_remote_code=trust_remote_code))

    def write(self, image: np.ndarray, topic: str | None = None, num_paths: int = 3, n: int = 4, *, num_boxes: int = 2,
              temperature: float = 1.0, top_p: float = 1.0, generator: Any = None, do_sample: bool = True,
              prompt_style: str | None = None) -> list[str]:
        """``prompt_style`` overrides the writer's own for this call (a pipeline's ``style`` setting)."""
        from planners.meme_cot import PROMPT_STYLES, build_official_prompt, build_prompt

        k = _check_paths(num_paths)
        style = self.prompt_style if prompt_style is None else prompt_style
        if style not in PROMPT_STYLES:
            raise InputError("prompt_style", style, f"choose one of {PROMPT_STYLES}")
        if style == "official":
            messages = build_official_prompt(_check_image(image), check_topic(topic))
        else:
            messages = build_prompt(self.template_name, num_boxes, _check_image(image), check_topic(topic), k or None)
        return self.vlm.generate(messages, max_new_tokens=self.max_new_tokens, do_sample=do_sample, temperature=temperature,
                                 top_p=top_p, num_return_sequences=n, generator=generator)


def load_meme_writer(source: Any = "builtin", device: str | torch.device | None = None, dtype: Any = None,
                     trust_remote_code: bool = False, prompt_style: str = "atelier") -> MemeWriter:
    """'builtin' (weights/builtin/meme_writer), a folder saved by ``BuiltinMemeWriter``, a transformers VLM folder
    (through ``planners.hf``), or an object with ``write`` / a ``VisionLanguageModel`` (wrapped)."""
    if not isinstance(source, (str, Path)):
        if hasattr(source, "write"):
            return source
        if hasattr(source, "generate"):
            return VLMMemeWriter(source)
        raise InputError("writer", type(source).__name__, "pass 'builtin', a model folder, or an object with write()/generate()")
    if str(source) == "builtin":
        return BuiltinMemeWriter.from_pretrained(WEIGHTS, device)
    path = Path(source)
    if (path / MARKER).exists():
        return BuiltinMemeWriter.from_pretrained(path, device)
    from planners.loading import load_vlm

    return VLMMemeWriter(load_vlm(str(path), device=device, dtype=dtype, trust_remote_code=trust_remote_code), prompt_style=prompt_style)
