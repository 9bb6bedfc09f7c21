"""Metrics matching the official evaluators.

Modules (moved from the table of docs/ARCHITECTURE.md):

- `videoqa.py`: MCQ accuracy overall / per group with Wilson or bootstrap 95% intervals, mean compute; NExT-QA
  grouping of the official `eval_mc.py`, reproducing HGA's published 49.74
- `vos.py`: J, F, J&F with Mean / Recall / Decay as the official DAVIS-2017 evaluation computes them,
  semi-supervised or unsupervised with Hungarian matching, from DAVIS PNG folders, folders of sequences or
  SA-V masklet JSON; reproduces the official per-frame values on `davis16_val_mini`; `atelier score vos`,
  batch verb `score.vos`
- `pose.py`: COCO-17 pose accuracy: OKS as pycocotools' `computeOks` computes it and keypoint AP/AR through
  pycocotools' `COCOeval` itself, reproducing `expected_pycocotools.json` on `coco_val2017_kpts_mini`; PCK@t
  of the box diagonal or torso length; MPJPE in pixels and box-normalised; `pose_report` pairs persons of two
  COCO files by id or greedily by OKS; `atelier score pose`, batch verb `score.pose`
- `generation.py`: the classic judge of worldgen clips: per-object colour / shape / size / direction against a
  caption record, Hungarian-matched; temporal consistency; PSNR / SSIM outside an edit mask; text alignment in
  the builtin ViT/MiniLM space
- `motion.py`: AnyMotion's grades of an edited clip: PCK of the re-detected pose on all and on moving joints,
  identity kept (colour and limb proportions), background PSNR / SSIM outside the person masks
- `preference.py`: HUMOR's grades by worldgen's hidden preference, the stand-in for human judges: a caption's
  preference and win rate against a reference set, a reward model's pairwise accuracy, distinct-n, one scene's
  samples graded for validity, quality and diversity
- `mcq.py`: image-MCQ accuracy from generated text with VLMEvalKit's `can_infer` letter and text rules,
  overall and per category: V*Bench / HR-Bench style)
"""
