"""Which synthetic item each method shows off, its ground truth, and whether the method is right on it.

**The rule** (one place, used by ``atelier demo``'s gallery and by the web tabs' example rows): a verb's
showcase item ``i`` is item ``i`` of the held-out TEST split of that verb's worldgen task, world seed
``split_seed("test", 0, i)``, drawn with the config ``CONFIGS`` gives for ``i`` (levels cycle 1, 2, 3 with
``i``; Bernini's items are the same draw its benchmark makes, ``training.bernini_data.world_sample(task,
"test", 0, i)``, which adds the task's seed offset). The gallery shows ``i = 0``; the web tab's example table
lists ``i = 0, 1, 2``. Nothing here is chosen by looking at outputs: a different item is a different rule,
changed here and nowhere else.

**The verdict** is computed, with each method's own check against the item's record:

- ``ask`` (GridProbe), ``reason`` (latent reasoning): the chosen option is the record's answer;
- ``segment`` (CLEAR): mean IoU (J) of the masks with the true target's masks is at least 0.5;
- ``generate`` / ``edit`` (Bernini): the generation judge (``scorers.generation.judge_against``) reads every
  object of the truth's caption record with its colour, shape, size and direction;
- ``motion`` (AnyMotion): the planned action is the target action and the planned skeleton puts at least half
  of the joints the edit moves within 0.1 torso lengths of the target's (moving-joint PCK@0.1 >= 0.5);
- ``meme`` (HUMOR): the best-ranked meme beats at least half of the scene's human memes under the world's hidden
  preference (``scorers.preference.win_rate``).

``python -m app.showcase`` runs every gallery item (``i = 0``) and writes ``app/showcase_verdicts.json``, which
the web tabs read to say beside the example whether the builtin models get it right (running the models at
server start would cost minutes); ``tests/test_showcase.py`` recomputes each verdict and checks the file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from core.arguments import StrictParser

VERBS = ("ask", "segment", "generate", "edit", "motion", "meme", "reason")
# the methods whose quality issue is open: their showcase may be wrong, and must then say so
OPEN_QUALITY_ISSUES = {"generate": 51, "edit": 51}
WEB_ROWS = 3  # the web tab's example table: items 0, 1, 2
VERDICTS_FILE = Path(__file__).with_name("showcase_verdicts.json")
_LONGQA_KINDS = ("needle", "counting", "order")


def seed(i: int = 0) -> int:
    """The world seed of showcase item ``i``: item ``i`` of the TEST split for base seed 0."""
    from worldgen.tasks.base import split_seed

    return split_seed("test", 0, i)


def level(i: int) -> int:
    return 1 + i % 3


@dataclass
class Verdict:
    """Whether the method is right on its item: ``answer`` what it gave, ``truth`` the record's, ``measure``
    the check's number in words."""

    right: bool
    answer: str
    truth: str
    measure: str = ""

    def words(self) -> str:
        how = f" ({self.measure})" if self.measure else ""
        return f"{'right' if self.right else 'wrong'}: the model answered {self.answer}, the truth is {self.truth}{how}."


@dataclass
class Item:
    """Showcase item ``index`` of ``verb``: the pipeline's ``inputs`` (media written into a folder), the ground
    truth in words (and as pictures, ``truth_images``), the worldgen ``record`` and ``check(output, summary)``."""

    verb: str
    index: int
    inputs: dict
    truth: str
    record: dict
    check: Callable[[Any, dict], Verdict]
    truth_images: list[str] = field(default_factory=list)
    about: str = ""  # what the item is, in a few words (the task, its level)


def _clip(world, path: Path, annotations: bool = False) -> str:
    from core.video import write_video

    if not path.exists():
        write_video(path, (world.render(t, annotations=annotations).rgb for t in range(world.num_frames)), fps=world.fps)
    return str(path)


def _image(array: np.ndarray, path: Path) -> str:
    from PIL import Image

    if not path.exists():
        Image.fromarray(np.asarray(array, np.uint8)).save(path)
    return str(path)


def _strip(frames: np.ndarray, path: Path, n: int = 4, scale: int = 2) -> str:
    """``n`` evenly spaced frames side by side, enlarged ``scale`` times (a truth picture)."""
    idx = np.linspace(0, len(frames) - 1, n).round().astype(int)
    row = np.concatenate([np.asarray(frames[k], np.uint8) for k in idx], axis=1)
    return _image(row.repeat(scale, 0).repeat(scale, 1), path)


def _name(o: dict) -> str:
    """An object of a caption record or of the judge's reading, in words."""
    text = " ".join(str(o[k]) for k in ("size", "color", "shape") if o.get(k))
    if o.get("direction"):
        return text + f" moving {o['direction']}"
    if o.get("motion"):  # a record's motion with no direction of travel ("static", "accelerate", ...)
        return text + f" ({o['motion']}, no direction of travel)"
    return text


# ------------------------------------------------------------------------------------------- the items


def _ask(i: int, folder: Path) -> Item:
    from worldgen.tasks import longqa

    s = longqa.generate(seed(i), longqa.Config(level=1, kind=_LONGQA_KINDS[i % len(_LONGQA_KINDS)]))
    rec, world = s.record, s.worlds["video"]
    clip = _clip(world, folder / f"longqa_{i}.mp4")
    ev = longqa.evidence_frames(rec)
    mid = ev[len(ev) // 2] if ev else world.num_frames // 2
    truth_png = _image(world.render(mid, annotations=False).rgb.repeat(3, 0).repeat(3, 1), folder / f"longqa_{i}_truth.png")

    def check(out, s: dict) -> Verdict:
        return Verdict(s["answer_text"] == rec["answer"], f"\"{s['answer_text']}\" (p = {s['posterior'][s['answer']]:.2f})",
                       f"\"{rec['answer']}\"")

    return Item("ask", i, {"video": clip, "question": rec["question"], "options": rec["options"]},
                f"\"{rec['answer']}\" (the evidence is on screen in frames {ev[0]}-{ev[-1]} of {rec['num_frames']})" if ev
                else f"\"{rec['answer']}\"", rec, check, [truth_png], f"held-out longqa {rec['kind']} question, level 1")


def _segment(i: int, folder: Path) -> Item:
    from worldgen.tasks import vrs

    s = vrs.generate(seed(i), vrs.Config(level=level(i)))
    rec, world = s.record, s.worlds["video"]
    renders = [world.render(t) for t in range(world.num_frames)]
    clip = _clip(world, folder / f"vrs_{i}.mp4", annotations=True)
    ids = np.stack([r.ids for r in renders])
    truth = ids == rec["target_id"]
    target = world.obj(rec["target_id"])
    target_name = f"the {target.color} {target.shape} (object {rec['target_id']})"
    on = [t for t in range(len(truth)) if truth[t].any()]
    t_mid = on[len(on) // 2] if on else 0
    shown = renders[t_mid].rgb.copy()
    shown[~truth[t_mid]] = (shown[~truth[t_mid]] * 0.3).astype(np.uint8)  # the true target, the rest dimmed
    truth_png = _image(shown.repeat(4, 0).repeat(4, 1), folder / f"vrs_{i}_truth.png")

    def check(out, s: dict) -> Verdict:
        from benchmarks.clear import j_and_f, owners

        pred = np.asarray(out.masks) > 0
        j, _ = j_and_f(pred, truth)
        owner = [o for o in owners(pred, ids) if o is not None]
        if out.no_match or not owner:
            answer = "no object"
        else:
            most = max(set(owner), key=owner.count)
            o = world.obj(most)
            answer = f"the {o.color} {o.shape} (object {most})"
        return Verdict(bool(j >= 0.5), answer, target_name, f"J = {j:.2f} with the true masks; right needs J >= 0.5")

    return Item("segment", i, {"video": clip, "query": rec["query"]}, target_name, rec, check, [truth_png],
                f"held-out vrs clip, level {rec['level']}")


def _bernini_check(attributes: dict) -> Callable[[Any, dict], Verdict]:
    def check(out, s: dict) -> Verdict:
        from scorers.generation import judge_against

        res = judge_against(np.asarray(out.video), attributes)
        seen = res["judgement"]["objects"]  # the detection matched to each truth object, in the truth's order
        answer = "; ".join(_name(seen[o["detected"]]) if o["detected"] is not None else "nothing" for o in res["objects"])
        acc = ", ".join(f"{k} {v:.0%}" for k, v in res["accuracy"].items() if v is not None)
        return Verdict(bool(res["all_correct"]), f"a clip the judge reads as: {answer}",
                       "; ".join(_name(o) for o in attributes["objects"]), f"judge: {acc}")

    return check


def _generate(i: int, folder: Path) -> Item:
    from training.bernini_data import make_item

    it = make_item(("t2v", "test", 0, i, _bernini_cfg()))
    truth_png = _strip(it["frames"], folder / f"t2v_{i}_truth.png")
    return Item("generate", i, {"prompt": it["text"]}, "a clip of: " + "; ".join(_name(o) for o in it["attributes"]["objects"]), it,
                _bernini_check(it["attributes"]), [truth_png], f"held-out t2v prompt, level {it['level']}")


def _edit(i: int, folder: Path) -> Item:
    from core.video import write_video
    from training.bernini_data import make_item

    it = make_item(("v2v", "test", 0, i, _bernini_cfg()))
    clip = folder / f"edit_{i}.mp4"
    if not clip.exists():
        write_video(clip, it["source"], fps=12)
    truth_png = _strip(it["frames"], folder / f"edit_{i}_truth.png")
    return Item("edit", i, {"video": str(clip), "instruction": it["text"]}, "the edited clip holds: " + "; ".join(_name(o) for o in it["attributes"]["objects"]),
                it, _bernini_check(it["attributes"]), [truth_png], f"held-out v2v edit, level {it['level']}")


def r2v_item(i: int, folder: Path) -> Item:
    """Bernini's reference-guided item ``i`` (``generate`` with ``references``): the web tab's last example row."""
    from training.bernini_data import make_item

    folder.mkdir(parents=True, exist_ok=True)
    it = make_item(("r2v", "test", 0, i, _bernini_cfg()))
    refs = [_image(r, folder / f"r2v_{i}_ref{k + 1}.png") for k, r in enumerate(it["refs"])]
    truth_png = _strip(it["frames"], folder / f"r2v_{i}_truth.png")
    return Item("generate", i, {"prompt": it["text"], "references": refs}, "a clip of: " + "; ".join(_name(o) for o in it["attributes"]["objects"]),
                it, _bernini_check(it["attributes"]), [truth_png], f"held-out r2v prompt, level {it['level']}")


def _bernini_cfg():
    from training.bernini_data import DataConfig

    return DataConfig()


def _motion(i: int, folder: Path) -> Item:
    from worldgen.tasks import motion_edit

    s = motion_edit.generate(seed(i), motion_edit.Config(level=level(i)))
    rec, src, tgt = s.record, s.worlds["source"], s.worlds["target"]
    clip = _clip(src, folder / f"motion_{i}.mp4")
    target_frames = np.stack([tgt.render(t, annotations=False).rgb for t in range(tgt.num_frames)])
    truth_png = _strip(target_frames, folder / f"motion_{i}_truth.png")
    target_kp = np.asarray(rec["target_keypoints"], np.float32)
    source_kp = np.stack([src.render(t).keypoints[1] for t in range(src.num_frames)]).astype(np.float32)
    truth = f"\"{rec['target_action'].replace('_', ' ')}\" (from \"{rec['source_action'].replace('_', ' ')}\")"

    def check(out, s: dict) -> Verdict:
        from scorers.motion import pose_accuracy

        planned = out.target_keypoints
        moving = pose_accuracy(planned, target_kp, source_kp).get("moving_pck@0.1") if planned is not None else None
        ok = out.fine_class == rec["target_action"] and moving is not None and moving >= 0.5
        measure = ("no skeleton planned" if planned is None else
                   f"moving joints within 0.1 torso of the target's: {moving:.0%}" if moving is not None else "no joint moves")
        return Verdict(bool(ok), f"\"{out.fine_class.replace('_', ' ')}\" (p = {out.confidence:.2f})", truth,
                       measure + "; right needs the target action and at least 50%")

    return Item("motion", i, {"video": clip, "instruction": rec["instruction"]}, truth, rec, check, [truth_png],
                f"held-out motion edit, level {rec['level']}")


def _meme(i: int, folder: Path) -> Item:
    from training.humor_data import make_scene

    scene = make_scene("test", i, perception="-")
    image = _image(scene.still, folder / f"meme_{i}.png")
    best_human = scene.candidates[int(np.argmax(scene.scores))]
    truth = (f"the template \"{scene.template}\" ({scene.intent}); the scene's best human meme: "
             f"\"{best_human[0]} / {best_human[1]}\"")

    def check(out, s: dict) -> Verdict:
        from scorers.preference import win_rate

        if not out.captions:
            return Verdict(False, "no meme", truth)
        best = out.captions[0]
        win = win_rate(best, scene.candidates, scene.scene_words)
        text = " / ".join(best) if not isinstance(best, dict) else f"{best['top']} / {best['bottom']}"
        return Verdict(bool(win >= 0.5), f"\"{text}\"", truth,
                       f"it beats {win:.0%} of the scene's {len(scene.candidates)} human memes under the hidden preference; right needs 50%")

    return Item("meme", i, {"image": image}, truth, {"template": scene.template, "intent": scene.intent, "index": i}, check, [],
                f"held-out meme scene, template \"{scene.template}\"")


def _reason(i: int, folder: Path) -> Item:
    from PIL import Image, ImageDraw

    from worldgen.tasks import spatial

    s = spatial.generate(seed(i), spatial.Config(level=level(i)))
    rec = s.record
    image = _image(s.images["image"], folder / f"spatial_{i}.png")
    boxed = Image.fromarray(s.images["image"]).copy()
    ImageDraw.Draw(boxed).rectangle(rec["evidence_box"], outline=(255, 0, 255), width=3)
    truth_png = _image(np.asarray(boxed), folder / f"spatial_{i}_truth.png")

    def check(out, s: dict) -> Verdict:
        return Verdict(s["answer"] == rec["answer"], f"\"{s['answer']}\" (p = {s['posterior'][s['answer']]:.2f})", f"\"{rec['answer']}\"")

    return Item("reason", i, {"image": image, "question": rec["question"], "options": rec["options"]},
                f"\"{rec['answer']}\"", rec, check, [truth_png],
                f"held-out spatial scene, level {rec['level']}: {len(rec['objects'])} shapes at 512x512")


CONFIGS: dict[str, Callable[[int, Path], Item]] = {"ask": _ask, "segment": _segment, "generate": _generate, "edit": _edit,
                                                  "motion": _motion, "meme": _meme, "reason": _reason}


def item(verb: str, i: int = 0, folder: str | Path | None = None) -> Item:
    """Showcase item ``i`` of ``verb`` by the rule, its media written into ``folder`` (a temporary one if None)."""
    import tempfile

    folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="atelier-showcase-"))
    folder.mkdir(parents=True, exist_ok=True)
    return CONFIGS[verb](i, folder)


def run(verb: str, folder: str | Path, out_dir: str | Path | None = None, i: int = 0) -> tuple[Item, Any, dict, Verdict]:
    """Run showcase item ``i`` of ``verb`` through its app (the code path of the CLI, the batch runner and the web
    tab) on the builtin models, and check it. Returns ``(item, output, summary, verdict)``."""
    from app.runner import run_app
    from pipelines.registry import get_app

    it = item(verb, i, folder)
    out, summary = run_app(get_app(verb), {**it.inputs, "seed": 0, "progress": False}, out_dir=out_dir)
    return it, out, summary, it.check(out, summary)


def stored_verdicts(path: Path = VERDICTS_FILE) -> dict:
    """The verdicts ``python -m app.showcase`` computed for the gallery items (empty if never written)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def example_truth(verb: str, it: Item) -> str:
    """The web example table's truth cell: the ground truth, and for the gallery item (``i = 0``) the builtin
    models' stored verdict, in words."""
    text = f"truth: {it.truth}"
    v = stored_verdicts().get(verb) if it.index == 0 else None
    if v:
        issue = f" (issue {OPEN_QUALITY_ISSUES[verb]})" if verb in OPEN_QUALITY_ISSUES and not v["verdict"]["right"] else ""
        text += f" | builtin models {Verdict(**v['verdict']).words()}{issue}"
    return text


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    ap = StrictParser(description="run every showcase item and write app/showcase_verdicts.json")
    ap.add_argument("--out", type=Path, default=VERDICTS_FILE)
    ap.add_argument("--verbs", nargs="*", default=list(VERBS))
    args = ap.parse_args(argv)
    verdicts = stored_verdicts(args.out)
    with tempfile.TemporaryDirectory(prefix="atelier-showcase-") as tmp:
        for verb in args.verbs:
            it, _, _, v = run(verb, Path(tmp) / verb)
            verdicts[verb] = {"index": it.index, "seed": seed(it.index), "verdict": asdict(v)}
            print(f"{verb}: {v.words()}")
    args.out.write_text(json.dumps({k: verdicts[k] for k in VERBS if k in verdicts}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
