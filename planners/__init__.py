"""Vision-language models behind one protocol (``planners.protocol``), and the planners built on it.

Modules (moved from the table of docs/ARCHITECTURE.md):

- `protocol.py`: `VisionLanguageModel` on typed chat messages (`Message` of `TextPart` / `ImagePart` /
  `VideoPart` with its `relative_times` and `fps`; `user_turn(frames, prompt)` for the old pair): `generate`
  (greedy, or sampled from the caller's generator alone, several returns), `score` (teacher-forced
  log-probabilities of given continuations), `forward` (next-token logits and per-layer hidden states) and
  `module` (the trainable `nn.Module`), GridProbe's one-forward `option_posterior` (optionally told each
  frame's `relative_times`, its place in the video as a fraction: a GridProbe row is a short stretch, a column
  spans the video), `encode_images`, `flops`; `mcq_posterior`, the multiple-choice posterior of any backend
  over `score`; letter scoring over surface forms; MCQ prompts
- `hf.py`: `HFVisionLanguageModel` for Qwen2/2.5/3-VL, SmolVLM, Idefics3
- `builtin/`: the builtin backend: `text.py` frozen MiniLM sentence/token encoder (`bert.py` its BERT forward
  without transformers' import cost), `vit.py` `BuiltinViT` whose
  pooled output lives in MiniLM space, `vlm.py` `BuiltinVLMModel` (`encode` returns a typed `Encoding`, whose
  grounding and sufficiency caches the read-outs fill; 2x2-merged ViT tokens + frame embeddings +
  question/option/count-probe tokens; grounded option read-out: per-option presence timelines over the frames
  -> option scores, the timelines fed by an object-level attribute detector (per patch P(object) x P(colour) x
  P(shape) against what the text names); an evidence-sufficiency gate mixing the posterior with uniform (it
  reads the frames' time span and the read-out's evidence for its two best options); salient-object position
  per frame -> motion token; caption decoder), `__init__.py` `BuiltinVisionLanguageModel` on the protocol plus
  `encode_text`, with a ViT-output cache for frames seen again
- `counterfactual.py`: CLEAR's causal-counterfactual instance selection over the protocol: set-of-marks,
  keep-only and removal renders, forward choice, sufficiency / necessity / description checks, ambiguity and
  no-match
- `loading.py`: `load_vlm`: the one rule from a user's spec to a model
- `builtin/instances.py`: `BuiltinInstanceReasoner`: CLEAR's builtin planner, a small transformer over
  candidate tracks' frame/mask features and the query
- `skeleton_cot.py`: AnyMotion's SCoT planner: the `SkeletonPlanner` protocol and `SkeletonPlan`; the person
  frame (hip origin, torso unit); `BuiltinSkeletonPlanner`, a transformer over the instruction's MiniLM states
  and one token per frame that predicts the taxonomy labels, moving parts and the target skeleton, then
  MetaQueries that read the planned skeleton; the reasoning text written from its predictions;
  `load_skeleton_planner`
- `skeleton_cot_hf.py`: `HFSkeletonPlanner`: Qwen2.5-VL writes `<think>` and keyframe skeletons as text,
  interpolated to every frame; learned MetaQuery vectors read after the answer through the model's own
  multimodal forward, a connector to `query_dim`
- `meme_cot.py`: HUMOR's hierarchical multi-path CoT in the published output schema: five sections, `Step 1:`
  / `Step 2:`, one `boxN:` line per text box; `build_prompt`, `parse_meme_cot` into a typed `MemeCoT` (intent,
  reasoning paths, the anchored path, captions) with `MemeFormatError` naming what is missing, `format_reward`
  (the published share of checks), `render_cot` for SFT targets
- `meme_ranking.py`: HUMOR's model-free group ranking: the judge's `Image 1 score` / `Winner` reply parsed,
  the published pairwise normalisation s_a/(s_a+s_b) and its fallbacks, seeded pair sampling, the group
  pairwise reward, preference matrices, symmetrisation, Borda, Bradley-Terry by MM, Kendall tau
- `meme_perception.py`: HUMOR's picture as text for the builtin writer: the builtin VLM's per-patch object /
  colour / shape read-out grouped into objects with count, size and place; the name slots `<ok>` the builtin
  writer writes for the k-th listed object, and their filling
- `meme_lm.py`: HUMOR's writers behind `write(image, topic, num_paths, n, generator)`: `BuiltinMemeWriter`, a
  small transformers `LlamaForCausalLM` + byte-level BPE trained here on the perception text; `VLMMemeWriter`,
  any `VisionLanguageModel` asked with `build_prompt`; `load_meme_writer`
- `meme_reward.py`: HUMOR's template-grouped reward models: `BuiltinMemeRM`, a Bradley-Terry scorer over the
  builtin ViT's patch tokens and MiniLM states of the two boxes; `VLMJudgeRM`, the published judge protocol on
  any VLM; `HFPairwiseRM`, the published attention-pooling pairwise head on a VLM's last hidden states;
  `judge_reply`, `load_reward_model`
- `semantic/`: Bernini's planner: `official.py` the official release's planner keys (`mllm.`, `connector.*`, `vit_decoder.net.*`,
  `mask_tokens`) onto ours and back; `layout.py` token roles, the block attention mask and M-RoPE positions;
  `flow_head.py` the AdaLN per-token flow head and three-stream CFG; `maskgit.py` the reveal schedule, the
  random-order loop and MaskGIT's confidence loop (optionally around positions already given: an edit's kept
  source codes, `keep_source`); `codebook.py` the optional discrete head (k-means codebook of ViT tokens,
  nearest-code quantisation, the classifier); `local_context.py` the optional 3-D convolution over the target
  grid (and an edit's aligned source) added to the head's conditions [PROPOSED, off by default];
  `backbones.py` the Qwen2.5-VL adapter (`inputs_embeds`, 4-D mask, `hidden_states[-2]`) and a tiny builtin
  backbone (M-RoPE in Qwen2.5-VL's contiguous sections or Qwen3-VL's interleaved layout); `planner.py`
  `SemanticPlanner` with loss, `plan`, optional CoT; `encoder.py` the builtin planner's input encoder (sources
  as builtin-ViT tokens on the plan frames, prompts as MiniLM token states); `loading.py` `load_planner`
  (builtin, a saved planner, a Bernini-Diffusers-like folder's `planner/`) and `load_plan_encoder`
- `latent.py`: latent visual reasoning's slot recurrence for any `LatentCore` (prefix, `begin` / `extend` with
  a cache, a one-pass `run`): `rollout` (the model emits `<start>`, K slots forced, each input the previous
  position's last hidden state as a unit direction times a `slot_norm` scale, greedy or drawn by a slot policy
  such as `vmf_sampler`, `<end>` forced), `replay` (the same in one teacher-forced pass: logits and slot means
  equal the rollout's), `slot_attention`, `LatentAnswer`, `load_latent_reasoner`
- `latent_builtin.py`: `BuiltinLatentReasoner`: a transformers `LlamaModel` over the image tokens of a large
  image (a 16x16 grid of two-scale frozen builtin-ViT cell features, or one token per proposed object: the two
  scales' patch read-out under it, colour, size, footprint, position, or instead (`object_reads`) the embedded
  probabilities of its shape, size word and colour), the question's MiniLM states and the options; optionally
  (`answer_pointer`) the answer read where the last slot looks: a per-token word head mixed by that slot's
  map; `token_geometry` (each token's centre and box, padding masked out of maps and losses); answer words as
  its vocabulary; `BuiltinReasoner`, the pipeline component
- `object_proposals.py`: flat-colour object proposals of a still, no model: distance to a median-filtered
  background, connected components
- `object_attributes.py`: the reasoner's object attribute head [PROPOSED]: shape, size word and colour of each
  object token, read against the image's object count and mean area; fitted on worldgen's ground truth by
  `training.gelvr_sft`, then frozen
- `latent_hf.py`: `HFLatentReasoner`: Qwen-VL with LVR's three markers added, merged vision tokens in Qwen's
  chat layout, explicit causal mask and M-RoPE positions, letter posteriors
- `latent_geometry.py`: GeLVR's relational losses: cosine Gram, slot-to-image cross KL, pointwise, CKA, RKD;
  GePO's `geometry_regulariser` R_geo
- `vmf.py`: von Mises-Fisher: log-Bessel by the Debye expansion for large order, log-normaliser, mean
  resultant length, log-density, closed-form KLs, Wood's sampler on the caller's generator)
"""
