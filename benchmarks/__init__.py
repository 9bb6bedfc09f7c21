"""Side-by-side measurements; their results and commands are in docs/BENCHMARKS.md.

Modules (moved from the table of docs/ARCHITECTURE.md):

- `common.py`: what every method's benchmark shares: the resumable `rows.jsonl` row log with its `run.json`
  header (a resume with other arguments is refused), `--start`/`--n` shards and their `--merge`, Wilson and
  paired-bootstrap table cells, Markdown tables, the PIL Pareto plot, all written atomically
- `video_io.py`
- `worldgen.py`
- `builtin.py`: built-in VLM frames/s
- `vlm_perception.py`: what the built-in VLM recognises at probe resolutions, by object size
- `gridprobe.py`: GridProbe vs baselines on test-split longqa: accuracy with CIs, TFLOPs, per kind / level,
  M_eff vs difficulty, Pareto PNG; on `common.py`
- `trackers.py`: a tracker's frames/s, RSS over a 5,000-frame stream, vrs J and presence, proposal recall,
  DAVIS J&F beside OSVOS
- `clear.py`: CLEAR and its ablations on test-split vrs: J&F, identity switches in tracking order, the
  switches the monitor flags, recovery, slow calls
- `out_of_world.py`: how well `app.world_check` tells worldgen inputs from the shared real frames
- `judge.py`: the classic judge's accuracy on worldgen renders
- `pose_reader.py`: the classic stick-figure pose reader's PCK against worldgen keypoints
- `bernini.py`: Bernini and its ablations (no plan, the ground-truth plan, the source copied) on test-split
  t2v / v2v / r2v, graded by the classic judge
- `planner_settings.py`: the Bernini planner's inference settings against plan-token cosine, paired against
  its saved config; with `--draft`, the judge's reading of each plan decoded by a renderer's plan draft
- `anymotion.py`: AnyMotion vs direct editing, the oracle skeleton and the copied source on test-split
  motion_edit, planner-only accuracy; by seen / held-out class, category and level
- `humor.py`: HUMOR's writers (direct, single path, multi-path SFT, group RL with the pairwise or a pointwise
  reward) on test-split meme scenes by seen / held-out template: validity, win rate, the reward model's #1,
  diversity; the reward model's pairwise accuracy; preference against RL steps
- `latent_reasoning.py`: direct, pointwise-only, + Gram, full GeLVR SFT, GePO, the Gaussian policy and
  text-only RL on test-split `spatial`: accuracy by level and size, pointing rate, paired differences, R_geo
  and clip fractions, accuracy and R_geo over RL steps)
"""
