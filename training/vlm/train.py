"""The VLM's training recipe and entry point: warm starts, the main loop, evaluation, weights and card."""

from __future__ import annotations

import copy
import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from planners.builtin.text import MiniLM
from planners.builtin.vit import BuiltinViT
from planners.builtin.vlm import BuiltinVLMModel, VLMConfig
from training.common import SHIPPED, check_out_dir, check_vit_dir, parse_entry_point, run_recipe, save_recipe, sec_per_step
from training.loop import Trainer, TrainConfig
from training.vlm.data import VLMDataConfig, caption_vocab, make_items
from training.vlm.evaluation import evaluate_vlm, write_card
from training.vlm.objective import VLMObjective
from training.vlm.warm_starts import warm_start_attributes, warm_start_motion
from worldgen.vocab import COLOR_NAMES

logger = logging.getLogger(__name__)


@dataclass
class VLMTrainConfig:
    """The VLM's training recipe, saved as ``train_config.json`` beside its weights and read back on resume.

    ``None`` fields follow a rule of the steps (``resolved()``); the saved file holds the values used."""

    steps: int = 1400
    seed: int = 0
    vit: str | None = None  # the frozen ViT's folder; None: the shipped weights/builtin/vit
    lr: float = 7e-4
    warmup: int | None = None  # None: min(150, steps // 10 + 1)
    weight_decay: float = 0.05
    ckpt_every: int = 50
    eval_every: int | None = None  # monitoring evaluations (20 per kind, 20 probes, 30 captions); None: only the final one
    fast_vit: bool = True  # the frozen ViT under bfloat16 autocast in training where bf16 is native (evaluation: float32)
    # the objective's mix
    aux_weight: float = 0.5
    caption_weight: float = 1.0
    ground_weight: float = 1.0
    sufficiency_weight: float = 1.0
    count_weight: float = 0.2
    # the warm starts (``training.vlm.warm_starts``)
    attribute_worlds: int = 400
    attribute_frames: int = 8
    attribute_steps: int = 4000
    motion_clips: int = 300
    motion_steps: int = 600
    motion_trajectories: int = 4000
    data: VLMDataConfig | None = None  # None: the defaults, with the frames-per-item curriculum over half the steps
    # vit, vocab and count_words are filled in from the ViT and worldgen's vocabulary when the run starts
    architecture: VLMConfig = field(default_factory=VLMConfig)

    def resolved(self) -> VLMTrainConfig:
        return replace(self, warmup=min(150, self.steps // 10 + 1) if self.warmup is None else self.warmup,
                       data=self.data or VLMDataConfig(curriculum_steps=self.steps // 2))


def native_bf16() -> bool:
    """Whether training computes bfloat16 natively: CUDA with bf16, or a CPU with AVX512-BF16 or AMX.
    Elsewhere (e.g. an AVX2-only CPU) bf16 autocast is emulated, far slower than float32 (card: "Training time")."""
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check) or not any(checks)  # a torch that cannot tell: keep the recipe


def train_vlm(out_dir: str | Path, vit_dir: str | Path | None = None, steps: int | None = None, resume: bool = True,
              recipe: VLMTrainConfig | None = None, progress: bool = True) -> dict:
    """Train from scratch (or resume) and write weights, ``train_config.json``, ``eval.json`` and ``card.md``
    to ``out_dir``. The recipe: ``recipe``, else (resuming) the one saved in ``out_dir``, else the
    defaults; ``vit_dir`` and ``steps`` override it."""
    out_dir = check_out_dir(out_dir, "vlm")
    r = run_recipe(VLMTrainConfig, out_dir, recipe, resume, vit=None if vit_dir is None else str(vit_dir), steps=steps)
    vit_path = check_vit_dir(r.vit or SHIPPED / "vit")
    if r.fast_vit and not native_bf16():
        logger.warning("no native bfloat16 on this CPU (AVX512-BF16 or AMX): the ViT runs in float32 instead of the recipe's bf16 "
                       "autocast (fast_vit), which would make each step ~3x slower here; train_config.json records fast_vit false")
        r = replace(r, fast_vit=False)
    t0 = time.time()
    torch.manual_seed(r.seed)
    vit = BuiltinViT.from_pretrained(vit_path)
    cfg = copy.deepcopy(r.architecture)
    cfg.vit, cfg.vocab, cfg.count_words = vit.config, caption_vocab(), list(COLOR_NAMES)
    r = replace(r, architecture=cfg)
    save_recipe(r, out_dir, "vlm", "recorded by training/vlm/train.py when the run started")
    model = BuiltinVLMModel(cfg)
    model.vit.load_state_dict(vit.state_dict())
    model.vit.requires_grad_(False)
    text = MiniLM()
    model.count_words.copy_(text.encode(cfg.count_words))
    weights = {k: getattr(r, k) for k in ("aux_weight", "caption_weight", "ground_weight", "sufficiency_weight", "count_weight")}
    objective = VLMObjective(text, cfg.vocab, **weights, fast_vit=r.fast_vit)
    eval_objective = VLMObjective(text, cfg.vocab, **weights)
    tcfg = TrainConfig(steps=r.steps, lr=r.lr, warmup=r.warmup, weight_decay=r.weight_decay, eval_every=r.eval_every or r.steps + 1,
                       eval_at_end=False, ckpt_every=r.ckpt_every, seed=r.seed)
    monitor = lambda m: evaluate_vlm(m, eval_objective, n_per_kind=20, n_probe=20, n_probe_half=0, n_caption=30)  # noqa: E731
    trainer = Trainer(model, objective, tcfg, out_dir / "run", evaluate=monitor, progress=progress)
    warm_s = None
    if not (resume and trainer.load_checkpoint()):
        w0 = time.time()
        warm_start_attributes(model, text, r.seed, worlds=r.attribute_worlds, frames=r.attribute_frames, steps=r.attribute_steps)
        warm_start_motion(model, r.seed, clips=r.motion_clips, steps=r.motion_steps, trajectories=r.motion_trajectories)
        warm_s = time.time() - w0

    def batches():
        while True:
            yield make_items(trainer.step + r.seed * 10**6, r.data)

    trainer.fit(batches())
    train_s = time.time() - t0
    final = trainer.eval_model()
    metrics = evaluate_vlm(final, eval_objective)
    final.save_pretrained(out_dir, metadata={"steps": r.steps})
    (out_dir / "eval.json").write_text(json.dumps(metrics, indent=2))
    write_card(out_dir, final, metrics, r.steps, r.data, train_s, time.time() - t0 - train_s, warm_s, sec_per_step(trainer.history), r.lr)
    return metrics


def main(argv=None) -> int:
    vit = lambda ap: ap.add_argument("--vit", help="trained ViT folder (default: the resumed run's, else the shipped weights/builtin/vit)")  # noqa: E731
    args, out = parse_entry_point("vlm", "training/vlm/", VLMTrainConfig.steps, argv, vit)
    print(json.dumps(train_vlm(out, args.vit, args.steps, resume=not args.no_resume), indent=2))
    return 0
