"""Media types and IO: the one place frames, masks, keypoints and files are read, checked and written.

Modules (moved from the table of docs/ARCHITECTURE.md):

- `video.py`: `Video`: files via PyAV or decord, frame folders, images, arrays; packet-indexed keyframe
  seeking; `windows()` streaming; `write_video` H.264 yuv420p; `read_still`: one picture from an array, an
  image or a clip's middle frame
- `masks.py`: DAVIS palette PNG, COCO RLE via pycocotools, id maps <-> boolean stacks, boxes
- `keypoints.py`: COCO-17; MediaPipe-33 and OpenPose-18 converters; COCO JSON; the SCoT text format
  `keypoints_to_text` / `parse_skeleton_text`, 0-1000 bins per keyframe
- `skeleton.py`: AnyMotion b.5's skeleton conditioning, deterministic, no model: `render_limbs`,
  OpenPose-style colour-per-limb maps via OpenPose-18 with the neck, a limb only when both ends are drawn;
  `render_heatmaps`, per-joint Gaussians `(T, 17, H, W)`, zero for an undrawn joint; `pose_maps`, the
  20-channel per-frame map a pose-guided renderer reads
- `overlay.py`: masks, boxes, skeletons, captions, contact sheets
- `device.py`: cuda -> mps -> cpu, dtype, seeding
- `flops.py`: analytic transformer FLOPs, spec GridProbe B.8; measured counter
- `weights_io.py`: safetensors; `weights_only=True` otherwise
- `atomic.py`: temp file + rename
- `frames.py`: the `FrameSource` protocol and the one `resize_frames`
- `memory.py`: a request bounded by the memory it needs, before allocating
- `paths.py`: output folders and files checked writable before any compute (an unnamed probe file); the folders
  a failed or stopped run made, removed while empty
- `outputs.py`: outputs we own: the `.atelier-output.json` marker of every output folder, the pre-run check of
  the names a run claims, staging then a checked move, so a file atelier did not write is never replaced
  without `--overwrite`, and no run writes over its own inputs (`protecting`); a dead run's staging folder
  loses only the files its marker lists
- `values.py`: the one strict parser of booleans, types and finite numbers from manifests, forms and
  `pipeline.json`
- `images.py`: the one checked image opener: PIL's pixel limit as a clean error
- `shards.py`: sharded safetensors read one tensor at a time (index + shards), strict fills naming any missing,
  unexpected or misshapen key, and the HF sharded layout written back
- `threads.py`: torch's thread count for a run: 1 for small models (measured faster), `--threads` /
  `$ATELIER_THREADS` over it
- `errors.py`: typed errors naming the input (a rejected value quoted up to 200 characters); a library's
  refusal to run a checkpoint's code as the one `--trust-remote-code` message
- `jsontext.py`: JSON from a user's file with nesting, integer length and non-finite numbers bounded
- `arguments.py`: `StrictParser`, every command line's parser: options only by their full names
"""
