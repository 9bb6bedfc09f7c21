"""What users touch: the ``atelier`` CLI, the batch runner and the web app.

Modules (moved from the table of docs/ARCHITECTURE.md):

- `cli.py`: `atelier`; pipeline verbs generated from the registry
- `video_tools.py`: probe, sample, overlay
- `runner.py`: `run_app`: the one call path of a pipeline verb from the CLI, the batch runner and the web:
  arguments split into inputs / settings / components / run options, media and output folder checked first,
  `Pipeline.build`, the seeded generator, save
- `examples.py`: the web tabs' synthetic example clips
- `score.py`: `atelier score vos|pose` and the batch verbs `score.vos` / `score.pose`
- `batch.py`: resumable manifest runner and the batch verb table; the local engine; marks what it writes and
  never touches anything else
- `batch_ray.py`: `--engine ray`: the same per-item runner in a Ray Data actor pool, the driver appending
  `status.jsonl`; `--ray-address auto` or `ray://HOST:10001` for an existing cluster, with OUT on a filesystem
  every node sees
- `web.py`: Gradio Blocks: video tools plus one generated tab per registered pipeline; `run_in_web` maps
  errors to `gr.Error` without server paths
- `world_check.py`: whether an input looks like the builtin models' synthetic world (a measured colour statistic);
  the notice every verb on the builtin models gives
- `demo.py` + `gallery.py`: `make demo` page
- `info.py`
"""
