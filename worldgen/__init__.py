"""The procedural world and its task generators.

Modules (moved from the table of docs/ARCHITECTURE.md):

- `vocab.py`: shapes, colours, sizes, words
- `motion.py`: closed-form motion programs
- `figures.py`: COCO-17 stick figures, 33 named actions
- `raster.py`: supersampled coverage, z-order compositing, the mask rule
- `world.py`: `World`: objects, event log, `render(t)` of any frame alone
- `scene.py`: `sample_world(seed, cfg)`
- `captions.py`: paraphrased captions + attribute records
- `tasks/`: t2v, edit, ref2v, motion_edit, vrs, longqa, meme, spatial; each a `Config` and `generate(seed,
  cfg)`; `base.py` holds the split seed offsets
- `export.py`: mp4, DAVIS tree, COCO keypoints, JSONL
- `datasets.py`: streaming `IterableDataset` per task
- `preview.py`
- `cli.py`: `atelier worldgen`
"""
