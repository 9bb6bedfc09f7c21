"""What every built-in model's training run shares: its recipe file, where it may write, its card's notes.

A run writes one folder: ``config.json`` + ``model.safetensors`` (the model), ``train_config.json``
(the recipe: a dataclass, written when the run starts and read back when it resumes), ``eval.json``,
``card.md`` and ``run/`` (checkpoints and history). The shipped weights in ``weights/builtin/<model>``
are such folders; a run writes there only when the caller names that folder.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import asdict, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from core.arguments import StrictParser
from core.atomic import write_json_atomic
from core.errors import AtelierError, InputError

logger = logging.getLogger(__name__)

SHIPPED = Path(__file__).resolve().parents[1] / "weights" / "builtin"
# the "model" tag of config.json / train_config.json (a transformers config.json has none and is not read)
KINDS = {"vit": "builtin-vit", "vlm": "builtin-vlm", "humor-sft": "humor-sft", "humor-rm": "builtin-meme-rm", "humor-rl": "humor-rl",
         "gelvr-sft": "builtin-latent-reasoner", "gelvr-rl": "builtin-latent-reasoner"}  # one model class, two stages
# the shipped folder of each model under weights/builtin/ (its name when not listed)
SHIPPED_NAMES = {"humor-sft": "meme_writer_sft", "humor-rm": "meme_rm", "humor-rl": "meme_writer",
                 "gelvr-sft": "latent_reasoner_sft", "gelvr-rl": "latent_reasoner"}
TRAIN_CONFIG = "train_config.json"
DESIGN_NOTES = "## Design notes and measurements"

# Measured on 2 CPU cores, idle and shared with other jobs: each card's "Training time" note says how.
# Shown by `atelier train --help` and `python -m training.MODEL --help`.
TRAINING_TIME = {
    "vit": ("about 1.6 s/step, ~21 min for the default 800 steps on 2 idle cores (measured: 20.9 min); on 2 cores",
            "shared with other jobs 2.3 s/step (~31 min) at load average 1.4-1.7, 7.8 s/step (~1.7 h) at 1.6-3.8"),
    "vlm": ("about 1.5 s/step, ~39 min for the default 1400 steps on 2 idle cores, warm starts and evaluation",
            "included (measured: 37.3 + 2.0 min); on 2 shared cores 2.1 s/step (~50 min) at load average 1.1-1.4.",
            "Without native bfloat16 (an AVX2-only CPU) the ViT runs in float32: bf16 emulation measured 6.6 s/step"),
    "humor-sft": ("about 2 s/step on 2 threads for the current traces (measured: 300 steps in 8.4 min), 4.8 s/step on one",
                  "shared core for the longer first-stage traces"),
    "humor-rm": ("1.6 min of frozen-encoder features, then about 1.6 s/step on one shared core (measured: 500 steps in",
                 "13.5 min)"),
    "humor-rl": ("measured 6-16 s/step on one core with a second RL run beside it (G = 8 completions of ~230 tokens",
                 "generated, then scored, per step)"),
    "gelvr-sft": ("frozen image features for 6,000 TRAIN items on first use, cached in outputs/gelvr (measured: 26 min on one core beside other jobs),",
                  "then 5.2 s/step on one core with a second run beside it (measured: 300 steps in 26 min; direct: 2.6 s/step)"),
    "gelvr-rl": ("measured 21 s/step on one core beside another run (16 prompts x G = 8 rollouts, 2 PPO epochs):",
                 "30 steps in 11 min"),
}


def training_time_help() -> str:
    """The ``atelier train --help`` paragraph on how long training takes, and how to check a machine."""
    lines = ["training time (measured; each card's \"Training time\" note):"]
    for model, text in TRAINING_TIME.items():
        lines += [f"  {model}: {text[0]}", *(f"       {t}" for t in text[1:])]
    lines += ["  A busy machine is that much slower (a user saw the ViT at ~9 s/step: 2 h for 800 steps); it is",
              "  not stuck. Check yours first: --steps 20 logs sec_per_step (vlm adds warm starts and evaluation)."]
    return "\n".join(lines)


R = TypeVar("R")


def default_out(model: str) -> Path:
    """Where ``atelier train MODEL`` writes unless told otherwise: ``outputs/train/MODEL``."""
    return Path("outputs") / "train" / model


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (as a user would type it)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _tags(directory: Path) -> set[str]:
    """The model tags of the saved model and recipe in ``directory`` ("?" for an unreadable file)."""
    tags = set()
    for name in ("config.json", TRAIN_CONFIG):
        path = directory / name
        if path.is_file():
            try:
                raw = json.loads(path.read_text())
                if name == TRAIN_CONFIG or "model" in raw:
                    tags.add(str(raw.get("model")))
            except (OSError, ValueError, AttributeError):
                tags.add("?")
    return tags


def check_out_dir(out: str | Path, model: str, explicit: bool = True) -> Path:
    """The folder a ``model`` ("vit" or "vlm") training run may write, or an ``InputError`` saying why not.

    Allowed: a new or empty folder, or one that holds an earlier run or the saved weights of this model
    (resumed, then overwritten). Refused: a file; a folder holding anything else (another model,
    unrelated files); the shipped weights ``weights/builtin/<model>`` unless ``explicit`` (the caller
    named that folder itself rather than getting it as a default).
    """
    if model not in KINDS:
        raise InputError("model", model, f"choose one of {sorted(KINDS)}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError("--out", str(out), f"that is a file; pass a folder for the run (new, empty, or an earlier `atelier train {model}` run)")
    shipped = {(SHIPPED / SHIPPED_NAMES.get(m, m)).resolve(): m for m in KINDS}
    owner = shipped.get(out.resolve())
    if owner == model:
        if not explicit:
            raise InputError("--out", str(out), f"that folder holds the shipped {model} weights; to overwrite them, pass --out "
                                                f"{_shown(SHIPPED / SHIPPED_NAMES.get(model, model))} yourself")
        return out
    if owner is not None:
        raise InputError("--out", str(out), f"that folder holds the shipped {owner} weights, not a {model} run; pick another --out")
    if out.is_dir() and any(out.iterdir()):
        tags = _tags(out)
        if tags != {KINDS[model]}:
            found = f"a saved {' / '.join(sorted(tags))} model" if tags else f"{sum(1 for _ in out.iterdir())} entries and no saved model"
            raise InputError("--out", str(out), f"it holds {found}, not an earlier `atelier train {model}` run; pass a new or empty folder")
    return out


def check_vit_dir(vit: str | Path) -> Path:
    """A folder holding a saved built-in ViT (what ``atelier train vit`` writes), or an ``InputError``."""
    vit = Path(vit)
    if not (vit / "model.safetensors").is_file() or KINDS["vit"] not in _tags(vit):
        raise InputError("--vit", str(vit), "no built-in ViT there (config.json naming builtin-vit and model.safetensors): pass a folder "
                                            "written by `atelier train vit --out DIR`, or leave --vit out for the shipped weights/builtin/vit")
    return vit


def parse_entry_point(model: str, see: str, steps: int, argv, extra: Callable[[argparse.ArgumentParser], Any] | None = None):
    """``python -m training.MODEL``'s command line (--out, --steps, --no-resume, and what ``extra`` adds),
    logging to stderr: returns (the arguments, the checked output folder)."""
    name = {"vit": "ViT", "vlm": "VLM"}[model]
    ap = StrictParser(prog=f"python -m training.{model}", description=f"Train the built-in {name} (see {see}); {' '.join(TRAINING_TIME[model])}")
    ap.add_argument("--out", help=f"output folder (default {default_out(model)}; the shipped weights only when named)")
    ap.add_argument("--steps", type=int, help=f"optimisation steps (default {steps}, or the resumed run's)")
    ap.add_argument("--no-resume", action="store_true")
    if extra is not None:
        extra(ap)
    args = ap.parse_args(argv)
    if getattr(args, "steps", None) is not None and args.steps < 1:  # 0 steps would save untrained weights as trained
        ap.error(f"invalid --steps={args.steps}: train for at least 1 step")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return args, check_out_dir(args.out or default_out(model), model, explicit=args.out is not None)


# ---------------------------------------------------------------------------- the recipe file


def from_dict(cls: type[R], data: dict, source: str = "") -> R:
    """Rebuild dataclass ``cls`` from ``asdict`` output: nested dataclasses (also ``X | None``) and tuples
    come back as such; a field missing from ``data`` (added since) keeps its default."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    if unknown := sorted(set(data) - names):
        raise InputError(source or cls.__name__, unknown, f"{cls.__name__} has no such fields; the file was written by a different version")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        hint = hints[name]
        options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        nested = [t for t in options if is_dataclass(t)]
        if nested and isinstance(value, dict):
            value = from_dict(nested[0], value, source)
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def save_recipe(recipe: Any, out_dir: str | Path, model: str, provenance: str) -> Path:
    """``out_dir/train_config.json``: the recipe's fields, tagged with the model and where they came from."""
    path = Path(out_dir) / TRAIN_CONFIG
    write_json_atomic(path, {"model": KINDS[model], "recipe": type(recipe).__name__, "provenance": provenance, **asdict(recipe)})
    return path


def load_recipe(cls: type[R], out_dir: str | Path) -> R | None:
    """The recipe saved in ``out_dir/train_config.json``, or None when there is none."""
    path = Path(out_dir) / TRAIN_CONFIG
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    for key in ("recipe", "provenance", "kind"):
        data.pop(key, None)
    if isinstance(data.get("model"), str):  # the model's name; a recipe's own ``model`` field is its config
        data.pop("model")
    return from_dict(cls, data, str(path))


def run_recipe(cls: type[R], out_dir: str | Path, recipe: R | None, resume: bool, **overrides) -> R:
    """This run's recipe: ``recipe`` if given, else (resuming) the one saved in ``out_dir``, else the
    defaults; then every override that is not None (e.g. ``steps`` from the command line), then the
    fields left to the recipe's own rules (``resolved()``). A resumed run whose recipe changes says so."""
    saved = load_recipe(cls, out_dir) if resume else None
    run = replace(recipe or saved or cls(), **{k: v for k, v in overrides.items() if v is not None}).resolved()
    if saved is not None and run != saved:
        changed = [f"{f.name}: {getattr(saved, f.name)!r} -> {getattr(run, f.name)!r}" for f in fields(cls) if getattr(saved, f.name) != getattr(run, f.name)]
        logger.warning("%s: resuming with a changed recipe (%s)", out_dir, "; ".join(changed))
    return run


# ---------------------------------------------------------------------------- cards


def design_notes(out_dir: str | Path, model: str) -> str:
    """The card's "Design notes and measurements" section, carried over from the card already in
    ``out_dir`` or else from the shipped one: the notes describe the design, not one run."""
    for card in (Path(out_dir) / "card.md", SHIPPED / model / "card.md"):
        text = card.read_text() if card.is_file() else ""
        if DESIGN_NOTES in text:
            return text[text.index(DESIGN_NOTES) :].rstrip() + "\n"
    return ""


def sec_per_step(history: list[dict]) -> float | None:
    """The loop's mean seconds per step, from the Trainer's last log record (None before any)."""
    rates = [h["sec_per_step"] for h in history if "sec_per_step" in h]
    return rates[-1] if rates else None


def training_parser(prog: str, description: str, default_out: str) -> "argparse.ArgumentParser":
    """The options every ``python -m training.X`` script shares: --out, --steps, --pool, --batch,
    --tiny, --no-resume, --eval-only (a script adds its own)."""
    import argparse

    ap = StrictParser(prog=prog, description=description)
    ap.add_argument("--out", default=default_out)
    ap.add_argument("--steps", type=int, help="total optimisation steps (the cosine schedule's length)")
    ap.add_argument("--pool", type=int, help="TRAIN items generated for the run")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--tiny", action="store_true", help="a tiny model and pool (smoke tests)")
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument("--eval-only", action="store_true", help="re-run the final evaluation of the model saved in --out")
    return ap


# ---------------------------------------------------------------------------- scripts on a recipe (Bernini's)


def check_run_dir(out: str | Path, kind: str, what: str) -> Path:
    """A new or empty folder, or one holding an earlier run of ``kind`` (the ``model`` tag of its config.json /
    train_config.json); an ``InputError`` otherwise. ``what`` names the run in the message ("renderer")."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError("--out", str(out), "that is a file; pass a folder for the run")
    if out.is_dir() and any(out.iterdir()):
        tags = _tags(out)
        if tags != {kind}:
            raise InputError("--out", str(out), f"it holds {sorted(tags) or 'other files'}, not an earlier {what} run; "
                                                "pass a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


def script_recipe(cls: type[R], out: Path, args: argparse.Namespace, tiny: Callable[[Path], R], kind: str, provenance: str) -> R:
    """A training script's recipe from its command line (``training_parser``'s options): ``--tiny``, else the
    resumed run's, else the defaults, with ``--pool`` / ``--batch`` / ``--steps``; saved as train_config.json."""
    resume = not args.no_resume and load_recipe(cls, out) is not None
    recipe = run_recipe(cls, out, tiny(out) if args.tiny else None, resume, pool=args.pool, batch=args.batch)
    if args.steps:
        recipe = replace(recipe, train=replace(recipe.train, steps=args.steps))
    write_json_atomic(out / TRAIN_CONFIG, {"model": kind, "recipe": cls.__name__, "provenance": provenance, **asdict(recipe)})
    return recipe


def earlier_run_facts(out: Path) -> dict:
    """``steps``, ``train_minutes`` and ``sec_per_step`` of the run saved in ``out`` (for ``--eval-only``): from its
    eval.json, else (a run stopped before its final evaluation) the step and rate of the loop's own log,
    ``run/history.json`` (the minutes are then unknown)."""
    old = json.loads((out / "eval.json").read_text()) if (out / "eval.json").is_file() else {}
    facts = {k: old.get(k) for k in ("steps", "train_minutes", "sec_per_step")}
    log = out / "run" / "history.json"
    if facts["steps"] is None and log.is_file():
        history = json.loads(log.read_text()).get("history", [])
        if history:
            facts.update(steps=history[-1].get("step"), sec_per_step=sec_per_step(history))
    return facts


def finish_run(trainer: Any, out: Path, total_steps: int, minutes: float, final_eval: Callable[[Any, dict], Any]) -> int:
    """After ``trainer.fit``: save the evaluated (EMA) model in ``out``; a run stopped early (``--stop-at``)
    writes its last VAL evaluation, a finished one runs ``final_eval(model, facts)`` (TEST, card)."""
    final = trainer.eval_model().eval()
    final.save_pretrained(out)
    facts = {"steps": trainer.step, "train_minutes": round(minutes, 2), "sec_per_step": sec_per_step(trainer.history)}
    if trainer.step < total_steps:
        logger.info("stopped at step %d of %d; resume with the same --out", trainer.step, total_steps)
        write_json_atomic(out / "eval.json", {**facts, "val": trainer.history[-1].get("eval") if trainer.history else None})
        return 0
    final_eval(final, facts)
    return 0


def run_script(main: Callable[[], int]) -> int:
    """A ``python -m training.X`` script's entry point: ``main()``, with an error Atelier raises on purpose (a bad
    flag, an --out that holds something else) printed as one line and exit status 2, not a traceback."""
    try:
        return main()
    except AtelierError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def parse_script(prog: str, description: str, default_out: str, argv=None,
                 extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """A recipe script's command line (``training_parser`` plus ``--stop-at``, and the script's own flags that
    ``extra(parser)`` adds), logging set up to stderr."""
    ap = training_parser(prog, description, default_out)
    ap.add_argument("--stop-at", type=int, help="stop at this step (checkpointed; resume later with the same --steps)")
    if extra is not None:
        extra(ap)
    args = ap.parse_args(argv)
    if getattr(args, "steps", None) is not None and args.steps < 1:  # 0 steps would save untrained weights as trained
        ap.error(f"invalid --steps={args.steps}: train for at least 1 step")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return args


def resumed_recipe(out: Path, recipe: R, resume: bool) -> R:
    """The recipe (a dataclass with ``steps``) a run continues with: when it resumes a checkpoint in ``out/run/``,
    the one saved in ``out/train_config.json`` with only ``steps`` taken from the caller, so a resumed run never
    mixes two recipes."""
    saved = Path(out) / TRAIN_CONFIG
    if not (resume and (Path(out) / "run" / "checkpoint.pt").exists() and saved.is_file()):
        return recipe
    old = type(recipe)(**json.loads(saved.read_text())["recipe"])
    if replace(old, steps=recipe.steps) != recipe:
        logger.warning("resuming %s with its saved recipe; the other settings given are ignored", out)
    return replace(old, steps=recipe.steps)

