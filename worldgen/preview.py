"""``--preview``: DIR/preview/index.html, a gallery of a few samples with annotations drawn on top.

Each clip becomes a PNG contact sheet of 8 frames with masks (core.overlay.draw_masks), boxes,
skeletons and the item's caption/query/question; stills are shown with their question.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from core.atomic import atomic_path, write_text_atomic
from core.frames import resize_frame
from core.overlay import add_caption_band, contact_sheet, draw_boxes, draw_masks, draw_skeleton

_TEXT_KEYS = ("caption", "instruction", "prompt", "query", "question")


def annotated_frames(world, n: int = 8, scale: int = 4) -> np.ndarray:
    """``n`` evenly spaced frames, upscaled ``scale`` x, with masks, boxes and skeletons."""
    out = []
    for t in ((np.arange(n) + 0.5) * world.num_frames / n).astype(int):
        f = world.render(int(t))
        big = lambda a: resize_frame(a, (a.shape[0] * scale, a.shape[1] * scale), "nearest")  # noqa: E731
        img = draw_masks(big(f.rgb), big(f.ids), alpha=0.35)
        if f.boxes:
            img = draw_boxes(img, [[v * scale for v in b] for b in f.boxes.values()], [str(k) for k in f.boxes])
        for kp in f.keypoints.values():
            k = kp.copy()
            k[:, :2] *= scale
            img = draw_skeleton(img, k, min_visibility=2.0, radius=1)
        out.append(img)
    return np.stack(out)


def write_preview(folder: str | Path, task: str, samples: list) -> Path:
    from PIL import Image

    folder = Path(folder)
    rows = []
    for i, s in enumerate(samples):
        text = next((str(s.record[k]) for k in _TEXT_KEYS if k in s.record), "")
        if "candidates" in s.record:  # meme: the scene's template and its best-scored caption
            best = s.record["candidates"][int(np.argmax(s.record["scores"]))]
            text = f"{s.record['template']} ({s.record['intent']}); best: {best['top']} / {best['bottom']}"
        cells = []
        for name, world in s.worlds.items():
            sheet = contact_sheet(annotated_frames(world), columns=8)
            sheet = add_caption_band(sheet, f"{name}: {text}"[:160])
            path = folder / f"{task}_{i}_{name}.png"
            with atomic_path(path) as tmp:
                Image.fromarray(sheet).save(tmp, format="PNG")
            cells.append(f'<figure><img src="{path.name}"><figcaption>{html.escape(name)}</figcaption></figure>')
        for name, img in s.images.items():
            path = folder / f"{task}_{i}_{name}.png"
            with atomic_path(path) as tmp:
                Image.fromarray(img).save(tmp, format="PNG")
            cells.append(f'<figure><img src="{path.name}" width="256"><figcaption>{html.escape(name)}</figcaption></figure>')
        extra = {k: s.record[k] for k in ("options", "answer", "target_id", "edit", "template") if k in s.record}
        rows.append(f"<section><h3>seed {s.seed}</h3><p>{html.escape(text)}</p><pre>{html.escape(str(extra))}</pre>{''.join(cells)}</section>")
    page = f"<!doctype html><meta charset=utf-8><title>worldgen {task}</title><style>img{{image-rendering:pixelated;max-width:100%}}</style><h1>worldgen: {task}</h1>{''.join(rows)}"
    return write_text_atomic(folder / "index.html", page)
