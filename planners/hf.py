"""transformers VLMs (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, SmolVLM / Idefics3) behind ``VisionLanguageModel``.

One ``_chat_inputs`` builds every model input from structured messages (the old ``(frames, prompt)``
pair is one ``user_turn``), so answer scoring, generation, continuation scores and token counting all
see exactly the prompt layout the chat template produces. Families differ in four places only,
each handled by asking the processor or model what it accepts rather than by a family switch:
SmolVLM / Idefics3 want images nested per sample, Idefics3 has no video processor (frames go in
as images), Qwen video processors take ``cap_pixels_per_frame``, and ``get_image_features``
takes whatever its image processor returns.
"""

from __future__ import annotations

import inspect
from numbers import Integral
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from core.device import select_device, select_dtype
from core.errors import InputError
from core.flops import TransformerDims, transformer_flops
from planners.protocol import (ContinuationScore, ForwardOutput, ImagePart, Message, TextPart, check_continuations,
                               check_frames, check_letter_pooling, check_messages, check_options, generation_seed,
                               letter_token_ids, posterior_from_logits, user_turn)

# [DEFAULT] frame size (H, W) for ``flops`` / ``count_tokens`` when the caller gives none: a 360p 16:9 frame.
DEFAULT_FRAME_SIZE = (360, 640)
# Overrides that make ``generate`` sample exactly softmax(logits / temperature) cut to top_p: a checkpoint's
# own generation defaults (top-k, a repetition penalty, ...) would make what was sampled disagree with
# what ``score`` measures, and greedy decoding differ from the argmax.
PLAIN_DECODING = dict(num_beams=1, repetition_penalty=1.0, no_repeat_ngram_size=0, return_dict_in_generate=False)
PLAIN_SAMPLING = dict(top_k=0, min_p=0.0, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0)
# The frame rate transformers' Qwen3-VL / SmolVLM processors assume for a video given without one
# (processing_qwen3_vl.py replace_video_token). GridProbe's official code never gives one: qwen-vl-utils'
# process_vision_info returns no metadata for a frame list and its fps=2.0 is only a sampling kwarg,
# unused with do_sample_frames=False. tests/test_gridprobe_fidelity.py checks this against the processor.
UNDECLARED_VIDEO_FPS = 24.0
# qwen-vl-utils pads a frame list to a multiple of this by repeating the last frame (FRAME_FACTOR).
QWEN_FRAME_FACTOR = 2


class HFVisionLanguageModel:
    """A transformers image-text-to-text checkpoint as a ``VisionLanguageModel``.

    ``video_fps``: the frame rate a video given without one (``VideoPart.fps``) is declared to have;
    Qwen3-VL / SmolVLM write per-frame timestamps from it into the prompt. None (default): as
    GridProbe's official code passes frames (a qwen-vl-utils frame list, no video metadata), i.e. the
    rate transformers then assumes (``UNDECLARED_VIDEO_FPS``, 24) with the frames of a Qwen video
    padded to an even count by repeating the last one, as qwen-vl-utils does; for Qwen3-VL the
    timestamps are ``<t seconds>`` with t the mean of each frame pair's index / 24. A number declares
    that rate and sends the frames as they are (our earlier default was 1.0).

    ``letter_pooling`` (``option_posterior``): ``"official"`` (default; GridProbe's released code: six
    surface forms, every first token kept, log-sum-exp) or ``"distinct"`` (ours: eight forms, first
    tokens shared by several letters dropped); see ``planners.protocol.letter_token_ids``.
    """

    backend = "hf"

    def __init__(self, model: Any, processor: Any, *, video_fps: float | None = None, letter_pooling: str = "official",
                 trust_remote_code: bool = False):
        if video_fps is not None and not video_fps > 0:
            raise InputError("video_fps", video_fps, "pass a positive frame rate, or None for the official (undeclared) one")
        self.model, self.processor = model.eval(), processor
        self.video_fps = None if video_fps is None else float(video_fps)
        self.letter_pooling = check_letter_pooling(letter_pooling)
        self.trust_remote_code = trust_remote_code  # what the checkpoint was loaded with, for audits
        self._letter_ids: dict[str, list[list[int]]] = {}
        self._token_counts: dict[tuple, int] = {}
        self._dims = TransformerDims.from_config(model.config)

    # ---- loading / saving ----------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, trust_remote_code: bool = False,
                        video_fps: float | None = None, letter_pooling: str = "official") -> "HFVisionLanguageModel":
        """Load processor and model from a local directory or an HF cache id.

        ``device``/``dtype`` default to the best available (``core.device``: bfloat16 on CUDA, float32
        on the CPU). ``trust_remote_code`` stays False unless the caller opts in: a checkpoint's own
        Python code then runs on this machine.
        """
        local = Path(path)
        if (isinstance(path, Path) or local.is_absolute() or str(path).startswith(".")) and not local.is_dir():
            raise InputError("path", str(path), "pass an existing checkpoint directory or an HF cache id")
        device = select_device(device)
        dtype = select_dtype(dtype, device)
        processor = AutoProcessor.from_pretrained(str(path), trust_remote_code=trust_remote_code)
        model = AutoModelForImageTextToText.from_pretrained(str(path), dtype=dtype, trust_remote_code=trust_remote_code)
        return cls(model.to(device), processor, video_fps=video_fps, letter_pooling=letter_pooling,
                   trust_remote_code=trust_remote_code)

    def save_pretrained(self, path: str | Path) -> Path:
        """Write model and processor so that ``from_pretrained(path)`` restores them."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.processor.save_pretrained(path)
        return path

    def to(self, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> "HFVisionLanguageModel":
        """Move and/or cast the model; ``None`` leaves that setting alone."""
        device = select_device(device) if device is not None else None
        dtype = select_dtype(dtype, device or self.device) if dtype is not None else None
        self.model.to(device=device, dtype=dtype)
        return self

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def vision_patch_size(self) -> int | None:
        """The image processor's patch side (16 for Qwen3-VL, 14 for Qwen2.5-VL), None when it has none:
        what GridProbe's official code passes to qwen-vl-utils as ``image_patch_size``."""
        size = getattr(getattr(self.processor, "image_processor", None), "patch_size", None)
        return int(size) if isinstance(size, Integral) else None

    # ---- inputs ----------------------------------------------------------------------------------

    def _processor_inputs(self, frames: np.ndarray, prompt: str) -> Any:
        """Chat-template text plus pixels of the old ``(frames, prompt)`` pair (CPU tensors)."""
        return self._encode_chat([user_turn(frames, prompt)])

    def _encode_chat(self, messages: Sequence[Message]) -> Any:
        """Chat-template text plus pixels of one conversation, as the processor returns them (CPU tensors)."""
        return self._encode_chats([messages])

    def _encode_chats(self, conversations: Sequence[Sequence[Message]]) -> Any:
        """Several conversations in one processor call (one row each; see ``_encode_chat`` for one)."""
        texts, images, videos, metadata = [], [], [], []
        for messages in conversations:
            text, conv_images, conv_videos, conv_metadata = self._chat_parts(messages)
            texts.append(text)
            images.append(conv_images)
            videos += conv_videos
            metadata += conv_metadata
        kwargs: dict[str, Any] = {"images": images} if any(images) else {}
        if videos:
            kwargs.update(videos=videos, video_metadata=metadata, do_sample_frames=False)
            if hasattr(getattr(self.processor, "video_processor", None), "cap_pixels_per_frame"):
                kwargs["cap_pixels_per_frame"] = True  # the qwen-vl-utils resolution rule the reference used
        return self.processor(text=texts, return_tensors="pt", padding=len(texts) > 1, **kwargs)

    def _chat_parts(self, messages: Sequence[Message]) -> tuple[str, list, list, list]:
        """Chat-template text (with the generation prompt), then the conversation's images, videos and video
        metadata in the order the processor takes them.

        Images go in nested per sample, in order (SmolVLM / Idefics3 require it, the Qwen processors accept
        it); a one-frame video goes in as an image, and a processor without video support (Idefics3) gets a
        video's frames as images, in order. Each video is declared at its part's ``fps``, else ``video_fps``,
        else (``video_fps=None``) as the official GridProbe code leaves it (see the class docstring);
        ``relative_times`` are not written (the templates want seconds)."""
        video_processor = getattr(self.processor, "video_processor", None)
        chat, images, videos, metadata = [], [], [], []
        for message in messages:
            content = []
            for part in message.content:
                if isinstance(part, TextPart):
                    content.append({"type": "text", "text": part.text})
                elif isinstance(part, ImagePart) or len(part.frames) == 1 or video_processor is None:
                    content += [{"type": "image"}] * len(part.frames)
                    images += [Image.fromarray(f) for f in part.frames]
                else:
                    frames = part.frames
                    fps = part.fps or self.video_fps
                    if fps is None:
                        fps = UNDECLARED_VIDEO_FPS
                        if hasattr(video_processor, "temporal_patch_size") and len(frames) % QWEN_FRAME_FACTOR:
                            # qwen-vl-utils' padding; pixels are unchanged (the processor pads the same way),
                            # but the last timestamp then averages frames n-1 and n, as the official's does
                            pad = QWEN_FRAME_FACTOR - len(frames) % QWEN_FRAME_FACTOR
                            frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)])
                    n, h, w = frames.shape[:3]
                    content.append({"type": "video"})
                    videos.append(frames)
                    metadata.append({"total_num_frames": n, "fps": fps, "frames_indices": list(range(n)),
                                     "duration": n / fps, "height": h, "width": w})
            chat.append({"role": message.role, "content": content})
        text = self.processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        return text, images, videos, metadata

    def _on_device(self, batch: Any) -> dict[str, torch.Tensor]:
        """Every processor output (``mm_token_type_ids`` included: transformers 5 needs it for M-RoPE) on the model's device."""
        out = {}
        for key, value in batch.items():
            if isinstance(value, torch.Tensor):
                value = value.to(self.device, dtype=self.dtype if key.startswith("pixel_values") else None)
            out[key] = value
        return out

    def _inputs(self, frames: np.ndarray, prompt: str) -> dict[str, torch.Tensor]:
        return self._on_device(self._processor_inputs(frames, prompt))

    def _chat_inputs(self, messages: Message | Sequence[Message]) -> dict[str, torch.Tensor]:
        return self._on_device(self._encode_chat(check_messages(messages)))

    # ---- the protocol ------------------------------------------------------------------------------

    @torch.no_grad()
    def option_posterior(self, frames: np.ndarray, prompt: str, options: Sequence[str], relative_times: Sequence[float] | None = None) -> np.ndarray:
        """One forward (no generation, no KV cache); option log-probs from the last position (spec B.2).
        ``relative_times`` is not used: the frames go in as the reference passes them, without timestamps."""
        letters = "".join(check_options(options))
        inputs = self._inputs(frames, prompt)
        logits = self.model(**inputs, use_cache=False, logits_to_keep=1).logits[0, -1]
        if letters not in self._letter_ids:
            self._letter_ids[letters] = letter_token_ids(self.processor.tokenizer, letters, self.letter_pooling)
        return posterior_from_logits(logits, self._letter_ids[letters])

    @torch.no_grad()
    def option_posteriors(self, clips: Sequence[np.ndarray], prompt: str, options: Sequence[str],
                          relative_times: Sequence[Sequence[float] | None] | None = None) -> np.ndarray:
        """``option_posterior`` of each clip, ``(len(clips), len(options))``, from one batched forward. GridProbe's
        probes (equal clips, one prompt) give rows of one length: no padding, so each row is the lone forward's up
        to float rounding. Rows of different lengths would need padding, which changes what a model without
        padding-aware positions computes: those clips go one at a time instead."""
        letters = "".join(check_options(options))
        clips = [check_frames(f) for f in clips]
        if relative_times is not None and len(relative_times) != len(clips):
            raise InputError("relative_times", f"{len(relative_times)} lists for {len(clips)} clips", "pass one list of times per clip, or None")
        batch = self._encode_chats([[user_turn(f, prompt)] for f in clips])
        if "attention_mask" in batch and not bool(batch["attention_mask"].all()):
            return np.stack([self.option_posterior(f, prompt, options) for f in clips])
        logits = self.model(**self._on_device(batch), use_cache=False, logits_to_keep=1).logits[:, -1]
        if letters not in self._letter_ids:
            self._letter_ids[letters] = letter_token_ids(self.processor.tokenizer, letters, self.letter_pooling)
        return np.stack([posterior_from_logits(row, self._letter_ids[letters]) for row in logits])

    @torch.no_grad()
    def generate(self, messages: Message | Sequence[Message], max_new_tokens: int = 32, do_sample: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0, num_return_sequences: int = 1,
                 generator: torch.Generator | int | None = None) -> list[str]:
        """Answers to the last user turn (see the protocol): ``model.generate`` with ``PLAIN_DECODING`` (and ``PLAIN_SAMPLING``).

        transformers samples from the global torch RNG, so it runs inside ``fork_rng`` seeded from
        ``generator``: only the generator decides the texts, and the caller's RNG state is restored after."""
        seed = generation_seed(max_new_tokens, do_sample, temperature, top_p, num_return_sequences, generator)
        inputs = self._chat_inputs(messages)
        cuda = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda, enabled=do_sample):
            if do_sample:  # the CPU generator, and the model's GPU's (transformers samples on the model's device)
                torch.random.default_generator.manual_seed(seed)
                for device in cuda:
                    with torch.cuda.device(device):
                        torch.cuda.manual_seed(seed)
            sampling = dict(PLAIN_SAMPLING, temperature=float(temperature), top_p=float(top_p)) if do_sample else {}
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=do_sample,
                                      num_return_sequences=num_return_sequences, **PLAIN_DECODING, **sampling)
        return self.processor.tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)

    @torch.no_grad()
    def score(self, messages: Message | Sequence[Message], continuations: Sequence[str]) -> list[ContinuationScore]:
        """Teacher-forced log-probabilities of each continuation's tokens (``tokenizer.encode`` without special
        tokens, appended after the generation prompt): one forward per continuation over prompt + its tokens
        but the last, keeping only the logits that predict them. An end-of-turn token is scored only when
        the continuation spells it (e.g. ``"A<|im_end|>"``). ``generate``'s texts re-tokenise to the sampled
        tokens unless decoding was lossy (a multi-byte character cut off, a skipped special token)."""
        continuations = check_continuations(continuations)
        inputs = self._chat_inputs(messages)
        tok = self.processor.tokenizer
        scores = []
        for text in continuations:
            ids = [int(i) for i in tok.encode(text, add_special_tokens=False)]
            logp = np.zeros(0)
            if ids:
                logits = self.model(**_append_tokens(inputs, ids[:-1]), use_cache=False, logits_to_keep=len(ids)).logits[0]
                target = torch.tensor(ids, device=logits.device)[:, None]
                logp = torch.log_softmax(logits.double(), -1).gather(-1, target)[:, 0].cpu().numpy()
            scores.append(ContinuationScore([tok.decode([i]) for i in ids], ids, logp))
        return scores

    def forward(self, messages: Message | Sequence[Message], output_hidden_states: bool = True) -> ForwardOutput:
        """The language model over the messages and generation prompt: last-position logits ``(V,)`` and, if
        asked, its ``num_hidden_layers + 1`` hidden states ``(1, L, hidden_size)``. Runs under the caller's
        grad mode (no ``no_grad`` here), so a training loop can backpropagate into ``module``."""
        out = self.model(**self._chat_inputs(messages), use_cache=False, logits_to_keep=1, output_hidden_states=output_hidden_states)
        return ForwardOutput(out.logits[0, -1], tuple(out.hidden_states) if output_hidden_states else None)

    @property
    def module(self) -> torch.nn.Module:
        """The transformers model itself (vision tower, projector and language model)."""
        return self.model

    @torch.no_grad()
    def encode_images(self, frames: np.ndarray, batch_size: int = 16) -> np.ndarray:
        """Each frame encoded alone as an image: vision tower + the model's projector, mean over its tokens.

        The features live where the LM reads image tokens (``get_image_features().pooler_output``);
        for SmolVLM that mean also covers any image-splitting crops of the frame.
        """
        frames = check_frames(frames)
        if not isinstance(batch_size, Integral) or batch_size < 1:
            raise InputError("batch_size", batch_size, "pass a positive integer")
        accepted = inspect.signature(self.model.get_image_features).parameters
        rows = []
        for start in range(0, len(frames), batch_size):
            chunk = [[Image.fromarray(f)] for f in frames[start:start + batch_size]]
            pixels = self.processor.image_processor(images=chunk, return_tensors="pt")
            kwargs = {k: v.to(self.device) for k, v in pixels.items() if k in accepted}
            per_frame = self.model.get_image_features(**kwargs).pooler_output
            if len(per_frame) != len(chunk):
                raise RuntimeError(f"{type(self.model).__name__}.get_image_features returned {len(per_frame)} "
                                   f"feature sets for {len(chunk)} frames")
            rows += [f.float().mean(dim=0) for f in per_frame]
        return torch.stack(rows).cpu().numpy().astype(np.float32)

    def count_tokens(self, n_frames: int, prompt: str, frame_size: tuple[int, int] | None = None) -> int:
        """Prompt length in tokens for ``n_frames`` frames of ``frame_size`` (H, W): the processor only, no model call."""
        if not isinstance(n_frames, Integral) or n_frames < 1:
            raise InputError("n_frames", n_frames, "pass a positive number of frames")
        h, w = frame_size or DEFAULT_FRAME_SIZE
        if h < 1 or w < 1:
            raise InputError("frame_size", frame_size, "pass (height, width) in pixels")
        key = (int(n_frames), prompt, int(h), int(w))
        if key not in self._token_counts:
            dummy = np.full((int(n_frames), int(h), int(w), 3), 127, np.uint8)
            self._token_counts[key] = int(self._processor_inputs(dummy, prompt)["input_ids"].shape[1])
        return self._token_counts[key]

    def flops(self, n_frames: int, prompt: str, frame_size: tuple[int, int] | None = None) -> float:
        """Analytic LM FLOPs of one forward (spec B.8; the vision tower is not counted)."""
        return transformer_flops(self._dims, self.count_tokens(n_frames, prompt, frame_size))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.model).__name__}, device={self.device}, dtype={self.dtype})"


def _append_tokens(inputs: dict[str, Any], ids: Sequence[int]) -> dict[str, Any]:
    """``inputs`` with text tokens ``ids`` appended: every per-token tensor grows (ids, attention 1, type 0 = text)."""
    if not ids:
        return inputs
    ref = inputs["input_ids"]
    new = torch.tensor([list(ids)], dtype=ref.dtype, device=ref.device)
    out = dict(inputs)
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.shape == ref.shape:
            fill = new if key == "input_ids" else torch.full_like(new, int(key == "attention_mask"), dtype=value.dtype)
            out[key] = torch.cat([value, fill], 1)
    return out
