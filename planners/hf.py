"""transformers VLMs (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, SmolVLM / Idefics3) behind ``VisionLanguageModel``.

One ``_inputs`` builds every model input, so answer scoring, generation and token counting all
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
from planners.protocol import check_frames, check_options, letter_token_ids, posterior_from_logits

# [DEFAULT] frame size (H, W) for ``flops`` / ``count_tokens`` when the caller gives none: a 360p 16:9 frame.
DEFAULT_FRAME_SIZE = (360, 640)


class HFVisionLanguageModel:
    """A transformers image-text-to-text checkpoint as a ``VisionLanguageModel``.

    ``video_fps`` [DEFAULT 1.0] is the frame rate the frames of a video are declared to have: the
    protocol passes pre-sampled frames without timestamps, and Qwen3-VL / SmolVLM write per-frame
    timestamps into the prompt (without it transformers assumes 24 fps and warns).
    """

    backend = "hf"

    def __init__(self, model: Any, processor: Any, *, video_fps: float = 1.0, trust_remote_code: bool = False):
        if video_fps <= 0:
            raise InputError("video_fps", video_fps, "pass a positive frame rate")
        self.model, self.processor = model.eval(), processor
        self.video_fps = float(video_fps)
        self.trust_remote_code = trust_remote_code  # what the checkpoint was loaded with, for audits
        self._letter_ids: dict[str, list[list[int]]] = {}
        self._token_counts: dict[tuple, int] = {}
        self._dims = TransformerDims.from_config(model.config)

    # ---- loading / saving ----------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str | torch.device | None = None,
                        dtype: str | torch.dtype | None = None, trust_remote_code: bool = False,
                        video_fps: float = 1.0) -> "HFVisionLanguageModel":
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
        return cls(model.to(device), processor, video_fps=video_fps, trust_remote_code=trust_remote_code)

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

    # ---- inputs ----------------------------------------------------------------------------------

    def _processor_inputs(self, frames: np.ndarray, prompt: str) -> Any:
        """Chat-template text plus pixels, as the processor returns them (CPU tensors)."""
        if not isinstance(prompt, str):
            raise InputError("prompt", prompt, "pass the question text as a string")
        frames = check_frames(frames)
        n = len(frames)
        video_processor = getattr(self.processor, "video_processor", None)
        kind = "image" if n == 1 or video_processor is None else "video"
        # a processor without video support (Idefics3) gets the frames as n images, in order
        media = [{"type": kind}] * (1 if kind == "video" else n)
        messages = [{"role": "user", "content": media + [{"type": "text", "text": prompt}]}]
        text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        if kind == "image":
            # nested per sample: SmolVLM / Idefics3 require it, the Qwen processors accept it
            images = [[Image.fromarray(f) for f in frames]]
            return self.processor(text=[text], images=images, return_tensors="pt")
        extra: dict[str, Any] = {}
        if hasattr(video_processor, "cap_pixels_per_frame"):
            extra["cap_pixels_per_frame"] = True  # the qwen-vl-utils resolution rule the reference used
        metadata = {"total_num_frames": n, "fps": self.video_fps, "frames_indices": list(range(n)),
                    "duration": n / self.video_fps, "height": frames.shape[1], "width": frames.shape[2]}
        return self.processor(text=[text], videos=[frames], video_metadata=[metadata], do_sample_frames=False,
                              return_tensors="pt", **extra)

    def _inputs(self, frames: np.ndarray, prompt: str) -> dict[str, torch.Tensor]:
        """Every processor output (``mm_token_type_ids`` included: transformers 5 needs it for M-RoPE) on the model's device."""
        batch = self._processor_inputs(frames, prompt)
        out = {}
        for key, value in batch.items():
            if isinstance(value, torch.Tensor):
                value = value.to(self.device, dtype=self.dtype if key.startswith("pixel_values") else None)
            out[key] = value
        return out

    # ---- the protocol ------------------------------------------------------------------------------

    @torch.no_grad()
    def option_posterior(self, frames: np.ndarray, prompt: str, options: Sequence[str], relative_times: Sequence[float] | None = None) -> np.ndarray:
        """One forward (no generation, no KV cache); option log-probs from the last position (spec B.2).
        ``relative_times`` is not used: the frames go in as the reference passes them, without timestamps."""
        letters = "".join(check_options(options))
        inputs = self._inputs(frames, prompt)
        logits = self.model(**inputs, use_cache=False, logits_to_keep=1).logits[0, -1]
        if letters not in self._letter_ids:
            self._letter_ids[letters] = letter_token_ids(self.processor.tokenizer, letters)
        return posterior_from_logits(logits, self._letter_ids[letters])

    @torch.no_grad()
    def generate(self, frames: np.ndarray, prompt: str, max_new_tokens: int = 32) -> str:
        """Greedy decoding; returns only the new text, stripped."""
        if not isinstance(max_new_tokens, Integral) or max_new_tokens < 1:
            raise InputError("max_new_tokens", max_new_tokens, "pass a positive integer")
        inputs = self._inputs(frames, prompt)
        out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
        new = out[0, inputs["input_ids"].shape[1]:]
        return self.processor.tokenizer.decode(new, skip_special_tokens=True).strip()

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
