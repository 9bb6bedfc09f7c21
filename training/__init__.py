"""Training loops of the built-in models.

Modules (moved from the table of docs/ARCHITECTURE.md):

- `loop.py`: `Trainer`: AdamW, warmup + cosine, clipping, EMA, periodic eval, safetensors checkpoints, exact
  resume, accelerate
- `common.py`: what a run writes where: `check_out_dir` (new/empty folder or an earlier run of the same model;
  the shipped weights only when named), `check_vit_dir`, the recipe file `train_config.json` (save, load,
  resume), the cards' carried-over design notes
- `vit.py`: `ViTTrainConfig` recipe; CLIP-style ViT training against frozen MiniLM, multi-positive InfoNCE,
  zero-shot/retrieval eval, card
- `vlm/`: VLM training on longqa: `data.py` examples with evidence-aware, dense grounding and per-frame
  targets, captions, trajectories; `objective.py` the losses (answer, grounding, sufficiency, count and
  numerals, aux, captions, motion); `warm_starts.py` the attribute detector (per-patch labels from instance
  maps, then frozen) and the motion path; `evaluation.py` eval, calibration, card; `train.py` `VLMTrainConfig`
  recipe, `train_vlm`, `python -m training.vlm`
- `instances.py`: CLEAR's builtin instance reasoner on train-split vrs tracks, degraded like a tracker's; eval
  and card
- `codec.py`: the user's path as augmentation: frames through H.264 yuv420p, stills through JPEG, read back
  with the CLI's loader
- `autoencoder.py`: the builtin world's autoencoder on the Bernini pools' frames, a share through the codec;
  the issue's gate (VAL PSNR and the classic judge on reconstructions), card
- `bernini_data.py`: cached worldgen t2v / edit / ref2v pools with builtin-ViT plan targets
- `renderer.py`: the builtin renderer on ground-truth plans, judged by the classic judge; or fine-tuned from a
  saved one with `--init`, other noise levels, the plan draft and `--draft-only`, its first stage
- `planner.py`: the builtin semantic planner on the same pools' plan targets, or fine-tuned from a saved one
  with `--init` (its EMA or, `--init-raw`, its last raw weights); the backbone's M-RoPE layout; the optional
  attribute and token-regression read-outs of the head conditions; token agreement eval, card
- `group_rl.py`: HUMOR's GRPO math: group-normalised advantages, the k3 KL, the clipped surrogate (TRL's
  `loss_type="grpo"` averaging), `grpo_loss`, reward = pairwise + 0.1 x format, the centred reward-model loss
  (equal to TRL's `RewardTrainer`), TRL-style reward functions
- `motion_data.py`: cached worldgen motion_edit quadruplets with person masks; held-out fine classes;
  paraphrased instructions
- `skeleton_planner.py`: the builtin SCoT planner: jittered source skeletons, paraphrases, keep instructions;
  PCK eval by seen / held-out class, card
- `motion_renderer.py`: the pose-guided renderer on ground-truth skeletons, graded by `scorers.motion`
- `humor_data.py`: worldgen meme scenes with their perception text, two held-out templates, SFT traces traced
  back from the scenes' popular human memes: multi-path, single-path, direct
- `humor_sft.py`: the builtin writer from scratch, or any causal LM, through TRL's `SFTTrainer`; objects named
  by slot
- `humor_rm.py`: the builtin reward model on the noisy within-scene votes with the centred BT loss, plus
  hallucinated negatives (real vs invented object names); accuracy against the noise-free preference by seen /
  held-out template
- `humor_rl.py`: TRL's `GRPOTrainer` on the builtin writer or a VLM: the reward model's group pairwise reward
  (or the pointwise ablation) + 0.1 x format, beta 0.01, checkpoints
- `gelvr_data.py`: worldgen `spatial` items with cached frozen image-token features (cells or objects, each
  kind its own cache, in chunks of 1,000 items that `python -m training.gelvr_data --shard i/n` fills from
  several processes; `object_attribute_targets`, each object token's worldgen shape, size and colour); slot
  targets from the evidence on any token layout: the `chain` of the search (anchor, relation region, target,
  its centre), `roi` tokens on the anchor-to-target path, or Mirage's chunk means
- `gelvr_sft.py`: GeLVR SFT on any latent core: CE on `<start>` and the answer plus pointwise, Gram and cross
  terms; variants direct / pointwise / gram / full / cka / rkd; slots teacher-forced, free-running or both;
  `train_object_attributes`, the attribute head's supervised fit before SFT; accuracy by level and size, the
  pointing rate
- `gepo.py`: GePO's objective: group advantages, the accuracy band, decoupled clipped surrogates for tokens
  and slots, k3 text KL, closed-form vMF KL, R_geo; the Gaussian and replay baselines
- `gelvr_rl.py`: GePO's loop: hybrid rollouts, band filtering, PPO epochs against the frozen SFT reference,
  checkpoints and exact resume)
"""
