"""DiT renderers, samplers and VAEs: the generative stack Bernini and AnyMotion share.

Modules (moved from the table of docs/ARCHITECTURE.md):

- `rope.py`: SA-3D RoPE: Wan's per-axis split plus a per-segment phase, fractional segment ids, multi-segment
  tables; segment 0 equals diffusers' `WanRotaryPosEmbed` bit for bit
- `flow.py`: rectified flow: noising, velocity target, loss on target tokens only, shifted sigma sampling per
  expert, Euler step, sampling loops on diffusers' `FlowMatchEulerDiscreteScheduler` /
  `UniPCMultistepScheduler`
- `guidance.py`: the guidance cascade of Bernini spec b.8 over base / video / image / text / plan branches,
  APG with momentum 0.0, the expert switch
- `hf_wan.py`: `WanRenderer`: diffusers' `WanTransformer3DModel` (one or two experts) + `AutoencoderKLWan`
  with `[sources | target]` packed into one sequence under SA-3D tables, batched guidance branches, tiling and
  CPU offload, the `Bernini-R-Diffusers` folder layout
- `builtin.py`: `BuiltinRenderer`: a pixel-patch DiT whose 8x8 patches sit on the builtin ViT's plan tokens,
  factorised attention, SA-3D segments for a source video and references, clean-patch prediction under
  rectified flow; an optional plan draft, an MLP from each plan token or a CNN over each plan frame's token
  grid to its pixels, fed to the target tokens and, with `draft_residual`, the base the clean-frame prediction
  corrects [PROPOSED]
- `autoencoder.py`: the builtin world's autoencoder (diffusers `AutoencoderKL`, 4x per side, 8 latent channels,
  no attention) and its normalised latents: the space a latent builtin renderer denoises in [PROPOSED]
- `meme.py`: HUMOR's meme rendering: text into a template's boxes, wrapped and auto-sized by binary search,
  white with a black outline, deterministic, any unicode the TrueType font covers (missing glyphs reported,
  never an error); `template_boxes` layouts
- `pose_guided.py`: AnyMotion's rendering of a whole clip window by window with the builtin renderer's
  pose-guided mode: `pose_channels` maps through a zero-initialised PoseGuider, `query_dim` MetaQueries beside
  the text, `source_residual` x0 = source + output
- `bernini_official.py`: the renderer half of the official Bernini-Diffusers layout (`diff_dec.transformer.`,
  `diff_dec_low.transformer_2.`, `t5_text_encoder.` from the shards), the v1 / v2 detection, export back
- `caching.py`: step caching through diffusers' hooks (first_block, mag, taylorseer): settings, their checks,
  hooks on for one `generate` call, each guidance branch in its own `cache_context`, evaluations counted
- `loading.py`: `load_renderer`: builtin, a saved builtin renderer, or a Bernini-R / Wan diffusers folder;
  `load_motion_renderer`: AnyMotion's slot, builtin = the pose-guided weights
"""
