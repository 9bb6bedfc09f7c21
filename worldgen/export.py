"""Exporters: H.264 mp4, DAVIS folders (JPEGImages + palette Annotations), COCO keypoint JSON, JSONL.

Clips are rendered once and streamed: the mp4 encoder pulls frames from a generator that also
writes each frame's masks, so memory stays bounded for long clips.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from core.atomic import atomic_path, write_json_atomic
from core.keypoints import COCO17_NAMES, COCO17_SKELETON
from core.masks import write_palette_png
from core.video import write_video
from worldgen.tasks.base import Sample
from worldgen.world import World


def write_clip(world: World, path: str | Path, masks_dir: str | Path | None = None, target_id: int | None = None,
               target_dir: str | Path | None = None, jpeg_dir: str | Path | None = None) -> Path:
    """Write ``world`` as mp4; optionally its id maps (DAVIS palette PNGs), a target-only mask folder
    (target = 1) and JPEG frames, all from one rendering pass."""

    def frames():
        for f in world.frames():
            name = f"{f.index:05d}"
            if masks_dir is not None:
                write_palette_png(Path(masks_dir) / f"{name}.png", f.ids)
            if target_dir is not None:
                write_palette_png(Path(target_dir) / f"{name}.png", (f.ids == target_id).astype(np.uint8))
            if jpeg_dir is not None:
                _write_jpeg(Path(jpeg_dir) / f"{name}.jpg", f.rgb)
            yield f.rgb

    return write_video(path, frames(), fps=world.fps)


def _write_jpeg(path: Path, rgb: np.ndarray) -> None:
    from PIL import Image

    with atomic_path(path) as tmp:
        Image.fromarray(rgb).save(tmp, format="JPEG", quality=95)


def write_davis(world: World, root: str | Path, name: str) -> Path:
    """A DAVIS-style sequence: ``root/JPEGImages/480p/name/*.jpg`` and ``root/Annotations/480p/name/*.png``.

    (The "480p" level mirrors DAVIS' layout; frames keep the world's own size.)
    """
    root = Path(root)

    for f in world.frames():
        _write_jpeg(root / "JPEGImages" / "480p" / name / f"{f.index:05d}.jpg", f.rgb)
        write_palette_png(root / "Annotations" / "480p" / name / f"{f.index:05d}.png", f.ids)
    return root


def coco_keypoints(world: World, file_name: str = "{:05d}.jpg", stride: int = 1) -> dict:
    """COCO keypoint JSON (images, annotations, categories) for every person in every ``stride``-th frame."""
    images, anns = [], []
    people = [o.id for o in world.objects if o.person is not None]
    for t in range(0, world.num_frames, stride):
        f = world.render(t)
        images.append({"id": t + 1, "file_name": file_name.format(t), "width": world.width, "height": world.height})
        for pid in people:
            if pid not in f.keypoints:
                continue
            kp = f.keypoints[pid]
            x0, y0, x1, y1 = f.boxes.get(pid, (0, 0, 0, 0))
            anns.append({
                "id": len(anns) + 1, "image_id": t + 1, "category_id": 1, "track_id": pid, "iscrowd": 0,
                "keypoints": [round(float(v), 3) for v in kp.reshape(-1)], "num_keypoints": int((kp[:, 2] > 0).sum()),
                "bbox": [x0, y0, x1 - x0, y1 - y0], "area": int((f.ids == pid).sum()),
            })  # fmt: skip
    cat = {"id": 1, "name": "person", "supercategory": "person", "keypoints": list(COCO17_NAMES), "skeleton": [[a + 1, b + 1] for a, b in COCO17_SKELETON]}
    return {"images": images, "annotations": anns, "categories": [cat]}


def export_sample(sample: Sample, out_dir: str | Path, stem: str, masks: bool = False) -> dict:
    """Write a sample's media under ``out_dir`` (names start with ``stem``); return its record with ``files``."""
    out_dir = Path(out_dir)
    files = {}
    for name, world in sample.worlds.items():
        target = sample.record.get("target_id") if name == "video" else None
        mdir = out_dir / f"{stem}_{name}_masks" if (masks or target is not None) else None
        tdir = out_dir / f"{stem}_{name}_target" if target is not None else None
        write_clip(world, out_dir / f"{stem}_{name}.mp4", mdir, target, tdir)
        files[name] = f"{stem}_{name}.mp4"
        if mdir is not None:
            files[f"{name}_masks"] = mdir.name
        if tdir is not None:
            files[f"{name}_target_masks"] = tdir.name
        if any(o.person is not None for o in world.objects):
            write_json_atomic(out_dir / f"{stem}_{name}_keypoints.json", coco_keypoints(world))
            files[f"{name}_keypoints"] = f"{stem}_{name}_keypoints.json"
    for name, img in sample.images.items():
        from PIL import Image

        with atomic_path(out_dir / f"{stem}_{name}.png") as tmp:
            Image.fromarray(img).save(tmp, format="PNG")
        files[name] = f"{stem}_{name}.png"
    return {**sample.record, "files": files}


def jsonl_line(record: dict) -> str:
    """One deterministic JSONL line (sorted keys, numpy values converted)."""
    return json.dumps(record, sort_keys=True, default=_default) + "\n"


def _default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"cannot serialise {type(x).__name__}")
