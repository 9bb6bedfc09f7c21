"""A small, readable training loop: AdamW, warmup + cosine schedule, gradient clipping, optional EMA,
periodic evaluation, safetensors checkpoints and resume. Deterministic given a seed; sized for a
2-core CPU and GPU-ready through accelerate (device placement, mixed precision).

A model plugs in with two callables:
  ``loss_fn(model, batch) -> (loss, logs)`` and ``evaluate(model) -> dict of metrics``.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.atomic import write_json_atomic
from core.errors import AtelierError, InputError
from core.weights_io import load_state_dict, save_state_dict

logger = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    steps: int = 1000
    lr: float = 1e-3
    min_lr_ratio: float = 0.05  # cosine decays to lr * min_lr_ratio
    warmup: int = 100
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    ema: float | None = None  # e.g. 0.999; the EMA weights are what gets evaluated and saved
    eval_every: int = 500
    eval_at_end: bool = True  # False when the caller runs its own, fuller, final evaluation
    ckpt_every: int = 250
    log_every: int = 25
    seed: int = 0
    threads: int | None = None  # CPU threads for torch (None: torch's default)
    mixed_precision: str = "no"  # accelerate: "no", "bf16", "fp16"


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    # no decay on biases, norms, embeddings-like 1-D params (the usual AdamW recipe)
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Trainer:
    """Runs ``cfg.steps`` optimisation steps over ``batches``, checkpointing into ``out_dir``.

    Checkpoints: ``out_dir/checkpoint/`` holds ``model.safetensors`` (+ ``ema.safetensors``) and
    ``state.pt`` (optimizer, step, RNG; loaded with ``weights_only=True``). ``resume=True`` picks up
    from there with identical results to an uninterrupted run.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Callable[[nn.Module, Any], tuple[torch.Tensor, dict]],
        cfg: TrainConfig,
        out_dir: str | Path,
        evaluate: Callable[[nn.Module], dict] | None = None,
        progress: bool = True,
    ):
        from accelerate import Accelerator

        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        self.cfg, self.loss_fn, self.evaluate, self.progress = cfg, loss_fn, evaluate, progress
        self.out_dir = Path(out_dir)
        self.accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=not torch.cuda.is_available())
        self.opt = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98))
        self.model, self.opt = self.accelerator.prepare(model, self.opt)
        self.ema = copy.deepcopy(self.accelerator.unwrap_model(self.model)).eval().requires_grad_(False) if cfg.ema else None
        self.step = 0
        self.history: list[dict] = []

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    def eval_model(self) -> nn.Module:
        """The weights to evaluate and ship: the EMA copy if enabled."""
        return self.ema if self.ema is not None else self.accelerator.unwrap_model(self.model)

    # ---- checkpoints
    def save_checkpoint(self) -> Path:
        ck = self.out_dir / "checkpoint"
        ck.mkdir(parents=True, exist_ok=True)
        save_state_dict(self.accelerator.unwrap_model(self.model).state_dict(), ck / "model.safetensors")
        if self.ema is not None:
            save_state_dict(self.ema.state_dict(), ck / "ema.safetensors")
        state = {"step": self.step, "optimizer": self.opt.state_dict(), "torch_rng": torch.get_rng_state(), "history": json.dumps(self.history)}
        tmp = ck / ".state.pt.tmp"
        torch.save(state, tmp)
        tmp.replace(ck / "state.pt")
        return ck

    def load_checkpoint(self) -> bool:
        ck = self.out_dir / "checkpoint"
        if not (ck / "state.pt").is_file():
            return False
        try:  # a folder the user copied weights or a foreign state.pt into: refuse it, never a traceback
            # tensors and plain containers only (weights_only): a pickle's code never runs
            state = torch.load(ck / "state.pt", weights_only=True)
            if not isinstance(state, dict) or not {"step", "optimizer", "torch_rng", "history"} <= set(state):
                raise ValueError("state.pt is not a training state (step, optimizer, torch_rng, history)")
            self.accelerator.unwrap_model(self.model).load_state_dict(load_state_dict(ck / "model.safetensors"))
            if self.ema is not None and (ck / "ema.safetensors").is_file():
                self.ema.load_state_dict(load_state_dict(ck / "ema.safetensors"))
            self.opt.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng"])
            self.step = int(state["step"])
            self.history = json.loads(state["history"])
        except (AtelierError, pickle.UnpicklingError, RuntimeError, ValueError, KeyError, TypeError, EOFError, OSError) as e:
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise InputError("--out", str(ck), f"this checkpoint was not written by this training run ({type(e).__name__}: {first}); "
                                               "pass --no-resume to start over in it, or another --out") from None
        logger.info("resumed from %s at step %d", ck, self.step)
        return True

    # ---- the loop
    def fit(self, batches: Iterator, until: int | None = None) -> list[dict]:
        """Train until ``cfg.steps`` (or stop early at step ``until``, e.g. to fit a time slot).

        ``batches`` must be positioned for the current step on resume (data streams here are
        seeded per step, so callers build them from ``self.step``)."""
        from tqdm.auto import tqdm

        cfg = self.cfg
        bar = tqdm(total=cfg.steps, initial=self.step, desc="train", disable=not self.progress)
        t0, seen = time.perf_counter(), 0
        self.model.train()
        stop = min(cfg.steps, until or cfg.steps)
        while self.step < stop:
            batch = next(batches)
            for g in self.opt.param_groups:
                g["lr"] = lr_at(self.step, cfg)
            with self.accelerator.autocast():
                loss, logs = self.loss_fn(self.model, batch)
            self.opt.zero_grad(set_to_none=True)
            self.accelerator.backward(loss)
            gnorm = self.accelerator.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
            self.opt.step()
            if self.ema is not None:
                with torch.no_grad():
                    for pe, pm in zip(self.ema.parameters(), self.accelerator.unwrap_model(self.model).parameters()):
                        pe.lerp_(pm.detach(), 1 - cfg.ema)
            self.step += 1
            seen += 1
            bar.update(1)
            if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                rec = {"step": self.step, "loss": round(float(loss.detach()), 5), "lr": lr_at(self.step - 1, cfg), "grad_norm": round(float(gnorm), 4),
                       "sec_per_step": round((time.perf_counter() - t0) / seen, 4), **{k: round(float(v), 5) for k, v in logs.items()}}
                self.history.append(rec)
                bar.set_postfix(loss=rec["loss"])
                logger.info("%s", rec)
            last = self.step == cfg.steps
            if self.evaluate is not None and ((self.step % cfg.eval_every == 0 and not last) or (last and cfg.eval_at_end)):
                self.model.eval()
                metrics = self.evaluate(self.eval_model())
                self.model.train()
                self.history.append({"step": self.step, "eval": metrics})
                logger.info("eval at step %d: %s", self.step, metrics)
            if self.step % cfg.ckpt_every == 0 or self.step in (cfg.steps, stop):
                self.save_checkpoint()
        bar.close()
        write_json_atomic(self.out_dir / "history.json", {"config": asdict(cfg), "history": self.history})
        return self.history
