"""SAM 2 through Meta's ``sam2`` package (``SAM2VideoPredictor``) behind the session API.

    tracker = Sam2PackageTracker.from_pretrained(DIR)          # or trackers.load_tracker(DIR)
    session = tracker.init_session("clip.mp4", window=16)
    session.add_prompt(0, obj_id=1, box=[40, 60, 200, 220])
    for out in session.propagate():                              # TrackedFrame per frame
        ...

An optional backend (``pip install 'atelier[sam2]'``; the package's CUDA extension is not needed,
install with ``SAM2_BUILD_CUDA=0``). This module imports without ``sam2``; loading a checkpoint
without it raises ``MissingDependencyError`` naming the extra.

**Checkpoint directories.** Either of:

- ``sam2_package.json`` (what ``save_pretrained`` writes)::

      {"format": "sam2-package", "format_version": 1,
       "config": "config.yaml",         # a YAML file in the folder, or a config of the package
                                        # ("configs/sam2.1/sam2.1_hiera_t.yaml")
       "checkpoint": "model.pt",        # {"model": state_dict}, Meta's format; torch.load(weights_only=True)
       "overrides": [],                 # hydra overrides applied to the config ("++model.x=y")
       "postprocessing": true}          # build_sam2_video_predictor's post-processing settings

  ``save_pretrained`` stores the resolved config (post-processing included, so ``false``);
- a folder holding one of Meta's released checkpoints under its released name (e.g.
  ``sam2.1_hiera_tiny.pt``) and no transformers ``config.json``: the package config of that name is used.

A tracker folder is data, never code: hydra calls whatever a config's ``_target_`` names, so before
anything is instantiated every ``_target_`` (in the YAML and in the overrides) must be one of the
model classes the package's own configs build (``MODULES``, an exact allow-list: a prefix such as
``sam2.`` would admit ``sam2.build_sam.torch.load``), the model itself is always
``sam2.sam2_video_predictor.SAM2VideoPredictor``, and no other hydra key (``_args_``, ``_partial_``,
...) nor a left-over interpolation may appear.

**Frames stream from the video.** ``SAM2VideoPredictor.init_state`` decodes and preprocesses the
whole video into one tensor (about 12 MB per frame at 1024 px); the session builds the same
inference state itself with ``LazyImages`` in place of that tensor: a frame is read from the
``FrameSource`` and preprocessed (the package's own resize and normalisation) only when SAM 2 needs
its image features and they are not in the package's one-frame feature cache.

**Memory is bounded.** The package never prunes ``output_dict_per_obj[obj]["non_cond_frame_outputs"]``
nor ``frames_tracked_per_obj`` (sam2 #196 / #264). After every tracked frame the session keeps only
the ``window`` most recent non-conditioning outputs behind the current frame in the tracking
direction. SAM 2.1 reads ``num_maskmem - 1`` = 6 memory frames and ``max_obj_ptrs_in_encoder - 1`` =
15 object pointers (``Sam2PackageTracker.frames_read``), so the default ``window=16`` changes
nothing; a smaller window trades accuracy for memory. Prompted frames are conditioning frames and
stay for the session.

**Prompts.** A prompt always makes its frame an *initial* conditioning frame for its object, as in
``trackers.hf_sam2``: the object's earlier outputs on that frame are forgotten first, so a prompt's
result depends on the prompt and the frame only, never on how much of the past is still held (the
package would otherwise treat a prompt on a tracked frame as a correction read against memory the
window may have evicted). ``add_prompt`` runs SAM 2 on the prompted object only, as the package
does; the other objects show their stored output on that frame, or an empty mask with score 0 when
they have none. A mask prompt goes alone; points and a box may be combined.

**Post-processing without the CUDA extension.** The package fills small holes in its masks
(``fill_hole_area=8``) with a CUDA kernel and skips that step, warning on every frame, without it.
The predictor here keeps ``fill_hole_area=0`` and the session fills the same holes (8-connected
background components of at most ``fill_hole_area`` low-resolution pixels get the score 0.1) with
OpenCV on every stored output, where the package would have, so results are the same with or
without the extension.

**A package bug, worked around.** Outside autocast (float32, the CPU) the package fails with
"mat1 and mat2 must have the same dtype" when a frame's memory holds no object pointer (tracking
backwards from a frame with no tracked neighbour): its bfloat16 memory features then reach a
float32 layer. A forward pre-hook on this predictor's ``memory_attention`` casts the memory to the
features' dtype, the promotion ``torch.cat`` performs whenever a pointer is present.

**dtype.** The package runs float32 weights under ``torch.autocast`` (its README's bfloat16 recipe);
casting the weights breaks its float32 image input. ``to(dtype=...)`` therefore sets the autocast
dtype of the sessions; the weights stay float32.
"""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from PIL import Image

from core.atomic import atomic_path, write_json_atomic, write_text_atomic
from core.device import select_device, select_dtype
from core.errors import InputError, MissingDependencyError
from trackers.protocol import Prompt, SessionBase, TrackedFrame

INDEX = "sam2_package.json"
FORMAT, FORMAT_VERSION = "sam2-package", 1
PREDICTOR = "sam2.sam2_video_predictor.SAM2VideoPredictor"
BASE_MODEL = "sam2.modeling.sam2_base.SAM2Base"  # what the package configs name; the predictor replaces it
# what sam2.build_sam.build_sam2_video_predictor adds to a config (apply_postprocessing=True)
POSTPROCESSING = (
    "++model.sam_mask_decoder_extra_args.dynamic_multimask_via_stability=true",
    "++model.sam_mask_decoder_extra_args.dynamic_multimask_stability_delta=0.05",
    "++model.sam_mask_decoder_extra_args.dynamic_multimask_stability_thresh=0.98",
    "++model.binarize_mask_from_pts_for_mem_enc=true",
    "++model.fill_hole_area=8",
)
# Meta's released checkpoint files -> the package config they go with
RELEASED = {
    "sam2_hiera_tiny.pt": "configs/sam2/sam2_hiera_t.yaml",
    "sam2_hiera_small.pt": "configs/sam2/sam2_hiera_s.yaml",
    "sam2_hiera_base_plus.pt": "configs/sam2/sam2_hiera_b+.yaml",
    "sam2_hiera_large.pt": "configs/sam2/sam2_hiera_l.yaml",
    "sam2.1_hiera_tiny.pt": "configs/sam2.1/sam2.1_hiera_t.yaml",
    "sam2.1_hiera_small.pt": "configs/sam2.1/sam2.1_hiera_s.yaml",
    "sam2.1_hiera_base_plus.pt": "configs/sam2.1/sam2.1_hiera_b+.yaml",
    "sam2.1_hiera_large.pt": "configs/sam2.1/sam2.1_hiera_l.yaml",
}
# Every _target_ the package's model configs (configs/sam2*/*.yaml, sam2_hiera_*.yaml) use below
# ``model``: the only classes a folder's config may build. Exact names, never prefixes.
MODULES = frozenset({
    "sam2.modeling.backbones.image_encoder.ImageEncoder",
    "sam2.modeling.backbones.image_encoder.FpnNeck",
    "sam2.modeling.backbones.hieradet.Hiera",
    "sam2.modeling.position_encoding.PositionEmbeddingSine",
    "sam2.modeling.memory_attention.MemoryAttention",
    "sam2.modeling.memory_attention.MemoryAttentionLayer",
    "sam2.modeling.sam.transformer.RoPEAttention",
    "sam2.modeling.memory_encoder.MemoryEncoder",
    "sam2.modeling.memory_encoder.MaskDownSampler",
    "sam2.modeling.memory_encoder.Fuser",
    "sam2.modeling.memory_encoder.CXBlock",
})
IMG_MEAN, IMG_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # the package's load_video_frames
NO_OBJ_SCORE = -1024.0  # sam2.modeling.sam2_base.NO_OBJ_SCORE: "no output for this object here"


def _sam2() -> Any:
    """The ``sam2`` package, its hydra config module initialised (importing it does that)."""
    try:
        import sam2
        from hydra.core.global_hydra import GlobalHydra
    except ImportError:
        raise MissingDependencyError("sam2", "sam2", "run SAM 2 through Meta's sam2 package") from None
    if not GlobalHydra.instance().is_initialized():  # someone cleared it after sam2 was imported
        from hydra import initialize_config_module

        initialize_config_module("sam2", version_base="1.2")
    return sam2


# ---- checkpoint directories

def is_package_checkpoint(directory: str | Path) -> bool:
    """True for a folder this backend loads: ``sam2_package.json``, or a released checkpoint file
    without a transformers ``config.json`` (that folder is transformers' SAM 2)."""
    path = Path(directory)
    if (path / INDEX).is_file():
        return True
    return not (path / "config.json").exists() and any((path / name).is_file() for name in RELEASED)


def read_layout(directory: str | Path) -> dict:
    """The checkpoint folder's layout as ``{"config", "checkpoint", "overrides", "postprocessing"}``,
    checked; ``config`` is a path for a YAML in the folder, else a package config name."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise InputError("tracker", str(directory), "no such directory; pass a sam2 package checkpoint folder")
    index = path / INDEX
    if not index.is_file():
        released = [name for name in RELEASED if (path / name).is_file()]
        if len(released) != 1:
            found = "several released checkpoints" if released else "no sam2_package.json and no released checkpoint"
            raise InputError("tracker", str(directory), f"{found}; write a {INDEX} naming the config and checkpoint")
        return {"config": RELEASED[released[0]], "checkpoint": path / released[0], "overrides": [], "postprocessing": True}
    try:
        layout = json.loads(index.read_text())
    except (OSError, ValueError) as e:
        raise InputError(str(index), "unreadable", f"{e}; re-save the tracker") from None
    if not isinstance(layout, dict) or layout.get("format") != FORMAT:
        raise InputError(f"{index} format", layout.get("format") if isinstance(layout, dict) else layout, f"expected {FORMAT!r}")
    if layout.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{index} format_version", layout.get("format_version"), f"this version reads {FORMAT_VERSION}")
    unknown = sorted(set(layout) - {"format", "format_version", "config", "checkpoint", "overrides", "postprocessing"})
    if unknown:
        raise InputError(f"{index}", unknown, "unknown keys; the layout has config, checkpoint, overrides, postprocessing")
    config, checkpoint = layout.get("config"), layout.get("checkpoint")
    if not isinstance(config, str) or not config:
        raise InputError(f"{index} config", config, "name a YAML file in the folder or a sam2 package config")
    if not isinstance(checkpoint, str) or not (path / checkpoint).is_file() or Path(checkpoint).is_absolute():
        raise InputError(f"{index} checkpoint", checkpoint, "name the .pt file in this folder")
    overrides = layout.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        raise InputError(f"{index} overrides", overrides, "a list of hydra overrides such as '++model.image_size=512'")
    check_overrides(overrides, f"{index} overrides")  # named by the file they came from
    post = layout.get("postprocessing", True)
    if not isinstance(post, bool):
        raise InputError(f"{index} postprocessing", post, "true or false")
    local = path / config
    return {"config": local if local.is_file() else config, "checkpoint": path / checkpoint, "overrides": overrides,
            "postprocessing": post}


def compose_config(config: str | Path, overrides: Sequence[str] = (), postprocessing: bool = True) -> Any:
    """The resolved OmegaConf config of a video predictor: a package config (composed by hydra, as
    ``build_sam2_video_predictor`` does; the overrides come last so they win) or a YAML file (the
    overrides merged as a dot-list). Refuses anything that would make hydra call more than the
    package's model classes (``check_targets``), before anything is instantiated."""
    _sam2()
    import yaml
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    check_overrides(overrides, "overrides")
    settings = [f"++model._target_={PREDICTOR}", *(POSTPROCESSING if postprocessing else ()), *overrides]
    if isinstance(config, Path):
        try:
            cfg = OmegaConf.load(config)
            top = cfg.get("model") if isinstance(cfg, DictConfig) else None
            target = top.get("_target_") if isinstance(top, DictConfig) else None
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([s.lstrip("+") for s in settings]))
        except (OSError, yaml.YAMLError, OmegaConfBaseException, ValueError) as e:
            raise InputError("config", str(config), f"not a readable sam2 config: {e}") from None
        if target not in (None, PREDICTOR, BASE_MODEL):  # the merge replaced it: refuse it rather than hide it
            raise InputError(f"{config} model._target_", target, "a tracker folder builds the sam2 video predictor only")
    else:
        from hydra import compose
        from hydra.errors import HydraException

        try:
            cfg = compose(config_name=config, overrides=list(settings))
        except (HydraException, OmegaConfBaseException, ValueError) as e:
            raise InputError("config", config, f"{e}; name one under sam2/configs (e.g. configs/sam2.1/sam2.1_hiera_t.yaml)") from None
    try:  # a resolver may fail or return what a config cannot hold (oc.decode of a mapping into a string)
        OmegaConf.resolve(cfg)
        model = OmegaConf.to_container(cfg.model) if "model" in cfg else None
    except (OmegaConfBaseException, ValueError) as e:
        raise InputError("config", str(config), f"cannot resolve it: {e}") from None
    if not isinstance(model, dict):
        raise InputError("config", str(config), "it has no 'model' section")
    check_targets(model, str(config))
    return cfg


HYDRA_WORD = re.compile(r"(?<![A-Za-z0-9_])_[A-Za-z]+_(?![A-Za-z0-9_])")


def _hydra_key(key: Any) -> bool:
    """``_target_``, ``_args_``, ``_partial_``, ``_recursive_``, ``_convert_``: keys hydra acts on."""
    return isinstance(key, str) and len(key) > 2 and key.startswith("_") and key.endswith("_")


def check_target(target: Any, key: str, where: str) -> None:
    """``model._target_`` must be the video predictor; every other ``_target_`` one of ``MODULES``."""
    allowed = {PREDICTOR} if key == "model._target_" else MODULES
    if target not in allowed:
        raise InputError(f"{where} {key}", target, f"a tracker folder may only build the sam2 package's model classes "
                                                   f"({'the video predictor' if key == 'model._target_' else 'the modules of its configs'}); "
                                                   "use a config written by save_pretrained or one under sam2/configs")


def check_targets(node: Any, where: str, key: str = "model") -> None:
    """Walk the resolved ``model`` section (dicts and lists): every ``_target_`` on the allow-list,
    no other hydra key (``_args_`` could feed a callable, ``_partial_`` / ``_recursive_`` /
    ``_convert_`` change what it returns), and no string still holding ``${`` (an escaped
    interpolation becomes live again once resolved, and could resolve to a ``_target_``)."""
    if isinstance(node, dict):
        for name, value in node.items():
            here = f"{key}.{name}"
            if name == "_target_":
                check_target(value, here, where)
            elif _hydra_key(name):
                raise InputError(f"{where} {here}", value, "hydra keys other than _target_ are refused in a tracker folder; remove it")
            check_targets(value, where, here)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            check_targets(value, where, f"{key}[{i}]")
    elif isinstance(node, str) and "${" in node:
        raise InputError(f"{where} {key}", node, "interpolations are refused in a tracker folder's config; write the value")


def check_overrides(overrides: Sequence[str], where: str) -> None:
    """Each override changes ``model.*`` only, sets a ``_target_`` to an allowed class only, and
    holds no other hydra key, interpolation or mapping that could carry one (checked again on the
    composed config; this names the override itself)."""
    for override in overrides:
        if not isinstance(override, str) or "=" not in override:
            raise InputError(where, override, "a hydra override such as '++model.image_size=512'")
        key, _, value = override.lstrip("+~").partition("=")
        key, value = key.strip(), value.strip()
        if not key.startswith("model."):
            raise InputError(f"{where} {key}", value, "overrides may change the model only ('++model.<key>=<value>')")
        if key.endswith("._target_"):
            check_target(value, key, where)
        elif any(_hydra_key(part) for part in key.split(".")):
            raise InputError(f"{where} {key}", value, "hydra keys other than _target_ are refused in a tracker folder")
        elif "${" in value or HYDRA_WORD.search(value):  # e.g. '{_target_: ...}' as a mapping value
            raise InputError(f"{where} {key}", value, "override values may not carry hydra keys or interpolations; write plain values")


def _instantiate(cfg: Any, where: str) -> Any:
    """The video predictor of a checked config (``compose_config``); arguments its classes do not take
    are a bad config, not a traceback."""
    from hydra.errors import HydraException
    from hydra.utils import instantiate

    try:
        return instantiate(cfg.model, _recursive_=True)
    except (HydraException, TypeError, ValueError, RuntimeError, AssertionError) as e:
        detail = " ".join(str(e).split())[:300]
        raise InputError("config", where, f"does not build a SAM 2 video predictor ({detail}); "
                                          "use a config written by save_pretrained or one under sam2/configs") from None


def load_weights(predictor: torch.nn.Module, checkpoint: Path) -> None:
    """Load Meta's ``{"model": state_dict}`` (or a bare state dict) strictly, tensors only."""
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as e:  # foreign, truncated
        raise InputError("checkpoint", str(checkpoint), f"not a loadable weights file ({type(e).__name__}: {e})") from None
    state = state.get("model", state) if isinstance(state, dict) else state
    if not isinstance(state, dict):
        raise InputError("checkpoint", str(checkpoint), "expected {'model': state_dict}")
    try:
        missing, unexpected = predictor.load_state_dict(state, strict=False)
    except RuntimeError as e:  # a tensor of another shape
        raise InputError("checkpoint", str(checkpoint), f"does not fit its config: {str(e).splitlines()[-1].strip()}") from None
    if missing or unexpected:
        raise InputError("checkpoint", str(checkpoint), f"does not fit its config: missing {sorted(missing)[:3]}, "
                                                         f"unexpected {sorted(unexpected)[:3]} (of {len(missing)}/{len(unexpected)})")


# ---- post-processing and frames

def fill_holes(mask_logits: torch.Tensor, max_area: int) -> torch.Tensor:
    """``sam2.utils.misc.fill_holes_in_mask_scores`` without its CUDA kernel: 8-connected background
    components (logits <= 0) of ``(N, 1, h, w)`` logits with at most ``max_area`` pixels get 0.1."""
    if max_area <= 0:
        return mask_logits
    background = (mask_logits <= 0).cpu().numpy().astype(np.uint8)
    holes = np.zeros(background.shape, bool)
    for i in range(background.shape[0]):
        _, labels, stats, _ = cv2.connectedComponentsWithStats(background[i, 0], connectivity=8)
        holes[i, 0] = (labels > 0) & (stats[labels, cv2.CC_STAT_AREA] <= max_area)
    if not holes.any():
        return mask_logits
    return torch.where(torch.from_numpy(holes).to(mask_logits.device), torch.tensor(0.1, dtype=mask_logits.dtype,
                                                                                      device=mask_logits.device), mask_logits)


def _memory_in_feature_dtype(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Forward pre-hook of ``memory_attention``: memories in the current features' dtype.

    The package stores memory features as bfloat16 and relies on ``torch.cat`` with the float32
    object pointers to promote them; a frame whose memory has no pointer (tracking backwards from a
    frame with no tracked neighbour, e.g. ``propagate_in_video(start_frame_idx=10, reverse=True)``
    after a prompt on frame 0) hands bfloat16 to a float32 ``Linear`` and fails outside autocast.
    This is the promotion ``cat`` does otherwise; under autocast it changes nothing."""
    curr = kwargs.get("curr")
    dtype = (curr[0] if isinstance(curr, (list, tuple)) else curr).dtype
    for key in ("memory", "memory_pos"):
        if isinstance(kwargs.get(key), torch.Tensor) and kwargs[key].dtype != dtype:
            kwargs[key] = kwargs[key].to(dtype)
    return args, kwargs


class LazyImages:
    """What ``init_state`` keeps as ``inference_state["images"]``, read one frame at a time.

    ``frame(i)`` returns RGB uint8 ``(H, W, 3)``; ``images[i]`` is the package's preprocessing of it
    (PIL resize to ``size`` x ``size``, as its JPEG loader does; /255; ImageNet mean and std):
    ``(3, size, size)`` float32 on the CPU, computed on each call and never kept.
    """

    def __init__(self, frame: Callable[[int], np.ndarray], num_frames: int, size: int):
        self.frame, self.num_frames, self.size = frame, int(num_frames), int(size)
        self.mean = torch.tensor(IMG_MEAN, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(IMG_STD, dtype=torch.float32)[:, None, None]

    def __len__(self) -> int:
        return self.num_frames

    def __getitem__(self, frame_idx: int) -> torch.Tensor:
        resized = np.array(Image.fromarray(self.frame(int(frame_idx))).resize((self.size, self.size)))
        image = torch.from_numpy(resized / 255.0).permute(2, 0, 1).float()
        return (image - self.mean) / self.std


# ---- the session

@dataclass
class Sam2PackageSession(SessionBase):
    """A tracking session over the package's inference state (``Sam2PackageTracker.init_session``)."""

    tracker: Any = None
    state: dict = field(init=False, repr=False)

    def __post_init__(self):
        super().__post_init__()
        if self.tracker is None:
            raise InputError("tracker", None, "create sessions with tracker.init_session(video)")
        self.state = self._new_state()

    @property
    def predictor(self) -> Any:
        return self.tracker.predictor

    def _new_state(self) -> dict:
        """``SAM2VideoPredictor.init_state``'s dictionary, with lazy images and no warm-up forward."""
        device = self.predictor.device
        h, w = self.frame_size
        images = LazyImages(lambda i: self.frames([i])[0], self.num_frames, self.predictor.image_size)
        return {
            "images": images, "num_frames": self.num_frames, "offload_video_to_cpu": False, "offload_state_to_cpu": False,
            "video_height": h, "video_width": w, "device": device, "storage_device": device,
            "point_inputs_per_obj": {}, "mask_inputs_per_obj": {}, "cached_features": {}, "constants": {},
            "obj_id_to_idx": OrderedDict(), "obj_idx_to_id": OrderedDict(), "obj_ids": [],
            "output_dict_per_obj": {}, "temp_output_dict_per_obj": {}, "frames_tracked_per_obj": {},
        }

    @contextlib.contextmanager
    def _compute(self) -> Iterator[None]:
        """Inference mode, under autocast when the tracker's dtype is not float32."""
        dtype, device = self.tracker.dtype, self.predictor.device
        autocast = torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
        with torch.inference_mode(), autocast:
            yield

    # ---- the package's per-object stores
    def _stores(self, obj_idx: int) -> tuple[dict, dict, dict]:
        st = self.state
        return st["output_dict_per_obj"][obj_idx], st["temp_output_dict_per_obj"][obj_idx], st["frames_tracked_per_obj"][obj_idx]

    def _stored_output(self, obj_idx: int, frame_idx: int) -> dict | None:
        """The object's output on a frame, looked up as the package consolidates: new, then stored."""
        outputs, temp, _ = self._stores(obj_idx)
        for store in (temp["cond_frame_outputs"], temp["non_cond_frame_outputs"], outputs["cond_frame_outputs"],
                      outputs["non_cond_frame_outputs"]):
            if frame_idx in store:
                return store[frame_idx]
        return None

    def _fill(self, out: dict) -> None:
        """The package's hole filling, on an output as it is stored (see the module docstring)."""
        out["pred_masks"] = fill_holes(out["pred_masks"], self.tracker.fill_hole_area)

    def _frame(self, frame_idx: int, outs: list[dict | None]) -> TrackedFrame:
        """Per-object outputs (in the package's object order) -> a ``TrackedFrame``, ids ascending."""
        st, p = self.state, self.predictor
        side = p.image_size // 4
        low = torch.cat([o["pred_masks"].float() if o is not None else torch.full((1, 1, side, side), NO_OBJ_SCORE)
                         .to(st["storage_device"]) for o in outs])
        logits = torch.cat([o["object_score_logits"].float().reshape(1) if o is not None else torch.full((1,), NO_OBJ_SCORE)
                            .to(st["storage_device"]) for o in outs])
        _, video_res = p._get_orig_video_res_output(st, low)
        masks = (video_res[:, 0] > 0).cpu().numpy()
        scores = torch.sigmoid(logits).cpu().numpy().astype(np.float32)
        ids = [int(st["obj_idx_to_id"][i]) for i in range(len(outs))]
        order = np.argsort(ids, kind="stable")
        return TrackedFrame(frame_idx, [ids[i] for i in order], masks[order], scores[order])

    def _preflight(self) -> None:
        """Encode new prompts into memory (the package's ``propagate_in_video_preflight``)."""
        temp = self.state["temp_output_dict_per_obj"].values()
        if any(t["cond_frame_outputs"] or t["non_cond_frame_outputs"] for t in temp):
            with self._compute():
                self.predictor.propagate_in_video_preflight(self.state)

    def prune(self, frame_idx: int, reverse: bool) -> None:
        """Keep, per object, only the ``window`` non-conditioning outputs (and tracked-frame marks) at
        or behind ``frame_idx`` in the tracking direction; the rest is never read again by SAM 2."""
        sign = -1 if reverse else 1
        for obj_idx in self.state["output_dict_per_obj"]:
            outputs, _, tracked = self._stores(obj_idx)
            for store in (outputs["non_cond_frame_outputs"], tracked):
                for f in [f for f in store if not 0 <= (frame_idx - f) * sign < self.window]:
                    del store[f]

    def held_frames(self) -> dict[str, int]:
        """What the inference state holds now, for memory checks: the largest per-object count of
        conditioning and non-conditioning outputs and tracked-frame marks, pending prompt outputs,
        cached image features, and whether the images are still lazy."""
        st = self.state
        per_obj = list(st["output_dict_per_obj"].values())
        return {
            "cond_frame_outputs": max((len(o["cond_frame_outputs"]) for o in per_obj), default=0),
            "non_cond_frame_outputs": max((len(o["non_cond_frame_outputs"]) for o in per_obj), default=0),
            "frames_tracked": max((len(t) for t in st["frames_tracked_per_obj"].values()), default=0),
            "temp_outputs": sum(len(t["cond_frame_outputs"]) + len(t["non_cond_frame_outputs"])
                                for t in st["temp_output_dict_per_obj"].values()),
            "cached_features": len(st["cached_features"]),
            "lazy_images": int(isinstance(st["images"], LazyImages)),
        }

    # ---- SessionBase hooks
    def make_prompt(self, frame_idx: Any, obj_id: Any, points: Any, labels: Any, box: Any, mask: Any) -> Prompt:
        if mask is not None and (points is not None or box is not None):
            raise InputError("mask", "with points/box", "SAM 2 takes a mask alone, or points and/or a box")
        return super().make_prompt(frame_idx, obj_id, points, labels, box, mask)

    def _apply_prompt(self, prompt: Prompt) -> TrackedFrame:
        st, p, f = self.state, self.predictor, prompt.frame_idx
        obj_idx = p._obj_id_to_idx(st, prompt.obj_id)
        outputs, temp, tracked = self._stores(obj_idx)
        for store in (outputs["cond_frame_outputs"], outputs["non_cond_frame_outputs"], temp["cond_frame_outputs"],
                      temp["non_cond_frame_outputs"], tracked):
            store.pop(f, None)  # an initial conditioning frame, from this prompt alone
        with self._compute():
            if prompt.mask is not None:
                p.add_new_mask(st, f, prompt.obj_id, torch.from_numpy(prompt.mask))
            else:
                points = None if prompt.points is None else torch.from_numpy(prompt.points)
                labels = None if prompt.labels is None else torch.from_numpy(prompt.labels.astype(np.int32))
                box = None if prompt.box is None else torch.from_numpy(prompt.box)
                p.add_new_points_or_box(st, f, prompt.obj_id, points=points, labels=labels, box=box, clear_old_points=True)
        self._fill(temp["cond_frame_outputs"][f])
        return self._frame(f, [self._stored_output(i, f) for i in range(len(st["obj_ids"]))])

    def _track(self, frame_idx: int, reverse: bool) -> TrackedFrame:
        """One step of the package's ``propagate_in_video`` loop: every object on one frame."""
        self._preflight()
        st, p = self.state, self.predictor
        outs = []
        with self._compute():
            for obj_idx in range(len(st["obj_ids"])):
                outputs, _, tracked = self._stores(obj_idx)
                out = outputs["cond_frame_outputs"].get(frame_idx)
                if out is None:
                    out, _ = p._run_single_frame_inference(
                        inference_state=st, output_dict=outputs, frame_idx=frame_idx, batch_size=1, is_init_cond_frame=False,
                        point_inputs=None, mask_inputs=None, reverse=reverse, run_mem_encoder=True)
                    self._fill(out)
                    outputs["non_cond_frame_outputs"][frame_idx] = out
                tracked[frame_idx] = {"reverse": reverse}
                outs.append(out)
        result = self._frame(frame_idx, outs)
        self.prune(frame_idx, reverse)  # tracking moved on: drop what SAM 2 no longer reads
        return result

    def _forget(self, obj_id: int | None) -> None:
        if obj_id is None:
            self.predictor.reset_state(self.state)
        else:
            self.predictor.remove_object(self.state, obj_id, strict=False, need_output=False)


# ---- the tracker

class Sam2PackageTracker:
    """A SAM 2 / 2.1 video tracker on Meta's ``sam2`` package: a ``SAM2VideoPredictor`` and its config.

    ``backend`` is ``"hf"``: the design's two kinds of weights are the shipped ``builtin`` models and
    real checkpoints loaded by directory (``hf``), and a SAM 2.1 ``.pt`` is a real checkpoint
    (Meta publishes it on the Hugging Face hub); pipelines record only ``builtin`` / ``hf`` / ``custom``.
    """

    backend = "hf"

    def __init__(self, predictor: Any, config: Any, dtype: torch.dtype = torch.float32):
        self.predictor, self.config = predictor.eval(), config
        # the session fills holes itself (module docstring): the package's step needs its CUDA kernel
        self.fill_hole_area = int(getattr(predictor, "fill_hole_area", 0) or 0)
        predictor.fill_hole_area = 0
        predictor.memory_attention.register_forward_pre_hook(_memory_in_feature_dtype, with_kwargs=True)
        self._dtype = dtype

    # ---- building and loading
    @classmethod
    def from_config(cls, config: str | Path, overrides: Sequence[str] = (), *, postprocessing: bool = True,
                    device: Any = None, dtype: Any = None) -> Sam2PackageTracker:
        """A predictor with fresh (random) weights from a package config name or a YAML path, with
        hydra overrides (how tests build a tiny SAM 2.1)."""
        cfg = compose_config(Path(config) if Path(config).suffix in (".yaml", ".yml") and Path(config).is_file() else str(config),
                             overrides, postprocessing)
        predictor = _instantiate(cfg, str(config))
        return cls._placed(predictor, cfg, device, dtype)

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None,
                        overrides: Sequence[str] = ()) -> Sam2PackageTracker:
        """Load a checkpoint folder (see the module docstring); ``device``/``dtype`` default to the
        best available (``core.device``: bfloat16 autocast on CUDA, float32 on the CPU)."""
        layout = read_layout(directory)
        cfg = compose_config(layout["config"], [*layout["overrides"], *overrides], layout["postprocessing"])
        predictor = _instantiate(cfg, str(layout["config"]))
        load_weights(predictor, layout["checkpoint"])
        return cls._placed(predictor, cfg, device, dtype)

    @classmethod
    def _placed(cls, predictor: Any, cfg: Any, device: Any, dtype: Any) -> Sam2PackageTracker:
        dev = select_device(device)
        return cls(predictor.to(dev), cfg, select_dtype(dtype, dev))

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``config.yaml`` (the resolved config), ``model.pt`` (``{"model": state_dict}``, Meta's
        format) and ``sam2_package.json``, so that ``from_pretrained(directory)`` restores the tracker."""
        from omegaconf import OmegaConf

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        config = OmegaConf.create(OmegaConf.to_container(self.config))
        config.model.fill_hole_area = self.fill_hole_area
        write_text_atomic(path / "config.yaml", OmegaConf.to_yaml(config))
        buffer = io.BytesIO()
        torch.save({"model": {k: v.detach().cpu() for k, v in self.predictor.state_dict().items()}}, buffer)
        with atomic_path(path / "model.pt") as tmp:
            tmp.write_bytes(buffer.getvalue())
        write_json_atomic(path / INDEX, {"format": FORMAT, "format_version": FORMAT_VERSION, "config": "config.yaml",
                                         "checkpoint": "model.pt", "overrides": [], "postprocessing": False})
        return path

    # ---- placement
    def to(self, device: Any = None, dtype: Any = None) -> Sam2PackageTracker:
        """Move the predictor and/or set the autocast dtype (sessions opened afterwards use it)."""
        if device is not None:
            self.predictor.to(select_device(device))
        if dtype is not None:
            self._dtype = select_dtype(dtype, self.device)
        return self

    device = property(lambda self: self.predictor.device, doc="The predictor's device.")
    dtype = property(lambda self: self._dtype, doc="The dtype sessions compute in (autocast; weights stay float32).")

    @property
    def frames_read(self) -> int:
        """How many frames behind the current one SAM 2 reads memories or object pointers from: a
        ``window`` at least this long gives exactly the package's results."""
        p = self.predictor
        memories = (p.num_maskmem - 2) * p.memory_temporal_stride_for_eval + 1 if p.num_maskmem > 1 else 0
        pointers = p.max_obj_ptrs_in_encoder - 1 if p.use_obj_ptrs_in_encoder else 0
        return max(memories, pointers)

    def init_session(self, video: Any, *, window: int = 16) -> Sam2PackageSession:
        """A session over ``video`` (path, ``Video``, ``(T, H, W, 3)`` uint8 array or ``FrameSource``)."""
        return Sam2PackageSession(video, window, tracker=self)


__all__ = [
    "INDEX",
    "LazyImages",
    "Sam2PackageSession",
    "Sam2PackageTracker",
    "compose_config",
    "fill_holes",
    "is_package_checkpoint",
    "read_layout",
]
