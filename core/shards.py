"""Sharded safetensors checkpoints: read tensors one at a time, load them strictly into a module, write shards.

    ckpt = ShardedCheckpoint.open(folder / "bernini")          # model.safetensors.index.json + shards, or one file
    ckpt.keys(), ckpt.shape("mask_tokens"), ckpt.tensor("mask_tokens")
    with empty_module():                                       # parameters on the meta device: no init cost, no RAM
        model = Model(config)
    load_strict(model, ckpt, {"ours.key": "their.key", ...}, "bernini/", official_name=...)
    write_shards(folder, "model", [(key, tensor), ...], max_shard_bytes=5 << 30)

Nothing here reads a whole checkpoint into memory: a shard is memory-mapped by ``safe_open`` and each
tensor is copied out on its own, so a 60 GB release loads with about one module's worth of RAM.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.errors import InputError

INDEX_SUFFIX = ".safetensors.index.json"
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}


class ShardedCheckpoint:
    """The tensors of one checkpoint: an ``*.safetensors.index.json`` with its shards, or ``*.safetensors`` files.

    Keys come from the index (or the files' headers); a key the index names but its shard lacks, or a shard
    the index names that is missing, is an ``InputError`` naming it.
    """

    def __init__(self, where: Path, weight_map: dict[str, Path]):
        self.where = where
        self._map = weight_map
        self._open: dict[Path, Any] = {}

    @classmethod
    def open(cls, path: str | Path, stem: str = "model") -> ShardedCheckpoint:
        """``path``: a folder (``{stem}.safetensors.index.json``, else its ``*.safetensors``), an index or a file."""
        from safetensors import safe_open

        path = Path(path)
        if path.is_dir():
            index = path / f"{stem}{INDEX_SUFFIX}"
            if not index.is_file():
                indexes = sorted(path.glob(f"*{INDEX_SUFFIX}"))
                index = indexes[0] if len(indexes) == 1 else None
            files = [index] if index is not None else sorted(path.glob("*.safetensors"))
            if not files:
                raise InputError(str(path), "no weights", f"expected {stem}{INDEX_SUFFIX} with its shards, or *.safetensors")
        elif path.is_file():
            files = [path]
        else:
            raise InputError(str(path), "missing", "restore the checkpoint's weights from the release")
        if len(files) == 1 and files[0].name.endswith(INDEX_SUFFIX):
            try:
                raw = json.loads(files[0].read_text())
            except (OSError, ValueError) as e:
                raise InputError(str(files[0]), f"unreadable ({e})", "restore the index from the release") from None
            wm = raw.get("weight_map") if isinstance(raw, dict) else None
            if not isinstance(wm, dict) or not wm or not all(isinstance(v, str) for v in wm.values()):
                raise InputError(f"{files[0]}: weight_map", type(wm).__name__, "the index must map every tensor to a shard file")
            root = files[0].parent
            for shard in sorted(set(wm.values())):
                if Path(shard).name != shard or not (root / shard).is_file():
                    raise InputError(f"{files[0]}: shard", shard, "missing from the folder; download every shard the index names")
            return cls(files[0], {k: root / v for k, v in wm.items()})
        weight_map: dict[str, Path] = {}
        for f in files:
            try:
                with safe_open(str(f), framework="pt") as h:
                    keys = list(h.keys())
            except Exception as e:  # safetensors raises its own error type
                raise InputError(str(f), f"not a safetensors file ({e})", "restore the file from the release") from None
            for k in keys:
                if k in weight_map:
                    raise InputError(str(f), k, f"this tensor is also in {weight_map[k].name}; keep one copy")
                weight_map[k] = f
        return cls(path, weight_map)

    def keys(self) -> list[str]:
        return list(self._map)

    def __contains__(self, key: str) -> bool:
        return key in self._map

    def _handle(self, key: str) -> Any:
        from safetensors import safe_open

        if key not in self._map:
            raise InputError(str(self.where), key, "no such tensor in the checkpoint")
        shard = self._map[key]
        if shard not in self._open:
            self._open[shard] = safe_open(str(shard), framework="pt")
        h = self._open[shard]
        if key not in h.keys():
            raise InputError(f"{shard.name}", key, "the index names this tensor but the shard lacks it; re-download the shard")
        return h

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._handle(key).get_slice(key).get_shape())

    def dtype(self, key: str) -> torch.dtype:
        return _DTYPES.get(self._handle(key).get_slice(key).get_dtype(), torch.float32)

    def tensor(self, key: str) -> torch.Tensor:
        return self._handle(key).get_tensor(key)

    def close(self) -> None:
        """Drop the open shard handles (their memory maps)."""
        self._open.clear()


@contextlib.contextmanager
def empty_module() -> Iterator[None]:
    """Build modules with parameters on the meta device (buffers stay real: rotary tables are computed at init)."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        yield


def expected_tensors(module: nn.Module) -> tuple[dict[str, tuple[int, ...]], list[list[str]]]:
    """``{name: shape}`` of what a checkpoint must give ``module`` (parameters and persistent buffers), and
    the groups of names that share one tensor (tied weights: one of each group is enough)."""
    tie = getattr(module, "tie_weights", None)
    if callable(tie):  # transformers ties embeddings after init, which a meta-device build skips
        tie()
    shapes = {k: tuple(v.shape) for k, v in module.state_dict(keep_vars=True).items()}
    groups: dict[int, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    return shapes, [g for g in groups.values() if len(g) > 1]


def load_strict(module: nn.Module, ckpt: ShardedCheckpoint, names: Mapping[str, str], where: str, *,
                official_name: Callable[[str], str], dtype: torch.dtype | None = None, device: Any = None,
                only: Callable[[str], bool] = lambda name: True) -> nn.Module:
    """Fill ``module`` (built under ``empty_module``) from ``ckpt``; ``names`` maps our tensor name to the
    checkpoint's. Every tensor the module needs must be given, and every given name must be the module's,
    with its shape: else an ``InputError`` naming the checkpoint keys (``official_name`` turns a missing name
    of ours into the key the checkpoint should have held). Floating tensors are cast to ``dtype`` (None:
    kept as stored) and moved to ``device`` as they are read (None: left on the CPU). ``only``: the module's names this
    checkpoint fills (others are loaded elsewhere).
    """
    shapes, tied = expected_tensors(module)
    shapes = {k: v for k, v in shapes.items() if only(k)}
    tied = [[n for n in g if only(n)] for g in tied]
    tied = [g for g in tied if len(g) > 1]
    alias = {n: g for g in tied for n in g}
    unexpected = sorted(their for ours, their in names.items() if ours not in shapes)
    given = {ours for ours in names if ours in shapes}
    missing = sorted(official_name(n) for n in shapes
                     if n not in given and not any(a in given for a in alias.get(n, ())))
    if missing or unexpected:
        parts = ([f"missing {_few(missing)}"] if missing else []) + ([f"unexpected {_few(unexpected)}"] if unexpected else [])
        raise InputError(where, "; ".join(parts), "the checkpoint does not match its config: restore the release's files "
                                                  "(a renamed or missing tensor is never filled with random values)")
    for ours in sorted(given):
        their = names[ours]
        got = ckpt.shape(their)
        if got != shapes[ours]:
            raise InputError(where, f"{their} has shape {list(got)}", f"the config wants {list(shapes[ours])}")
    done: dict[str, nn.Parameter | torch.Tensor] = {}
    for ours in sorted(given):
        t = ckpt.tensor(names[ours])  # one tensor at a time, straight to ``device``: host RAM holds one, not the model
        t = t.to(device=device, dtype=dtype if t.is_floating_point() and dtype is not None else t.dtype)
        done[ours] = _assign(module, ours, t)
    for group in tied:  # re-tie: the names left out point at the tensor that was loaded
        src = next(done[n] for n in group if n in done)
        for n in group:
            if n not in done:
                _assign(module, n, src)
    left = [n for n, p in module.named_parameters() if p.is_meta and only(n)]
    if left:  # a name neither given nor tied: cannot happen after the check above, but never run on meta tensors
        raise InputError(where, f"missing {_few([official_name(n) for n in left])}", "restore the release's files")
    return module


def _assign(module: nn.Module, name: str, value: torch.Tensor | nn.Parameter) -> nn.Parameter | torch.Tensor:
    path, _, leaf = name.rpartition(".")
    owner = module.get_submodule(path) if path else module
    if leaf in owner._parameters:
        old = owner._parameters[leaf]
        param = value if isinstance(value, nn.Parameter) else nn.Parameter(value, requires_grad=bool(old is not None and old.requires_grad))
        owner._parameters[leaf] = param
        return param
    owner._buffers[leaf] = value.data if isinstance(value, nn.Parameter) else value
    return owner._buffers[leaf]


def _few(keys: list[str], n: int = 6) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")


def write_shards(folder: str | Path, stem: str, tensors: Iterable[tuple[str, torch.Tensor]],
                 max_shard_bytes: int = 5 << 30) -> Path:
    """Write ``{stem}-0000i-of-0000n.safetensors`` + ``{stem}.safetensors.index.json`` (the Hugging Face sharded
    layout) into ``folder``; tensors are grouped in order, a new shard starting past ``max_shard_bytes``."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shards: list[list[tuple[str, torch.Tensor]]] = [[]]
    size = total = 0
    seen: set[str] = set()
    for key, t in tensors:
        if key in seen:
            raise InputError("tensors", key, "each key may be written once")
        seen.add(key)
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((key, t))
        size += nbytes
        total += nbytes
    n = len(shards)
    weight_map = {}
    for i, shard in enumerate(shards, start=1):
        name = f"{stem}-{i:05d}-of-{n:05d}.safetensors"
        save_file({k: t.detach().to("cpu").contiguous() for k, t in shard}, str(folder / name), metadata={"format": "pt"})
        weight_map.update({k: name for k, _ in shard})
    index = folder / f"{stem}{INDEX_SUFFIX}"
    index.write_text(json.dumps({"metadata": {"total_size": int(total)}, "weight_map": weight_map}, indent=2))
    return index


def module_part(name: str, role: str, module: torch.nn.Module, dtype: torch.dtype) -> "Part":
    """A memory plan's ``Part`` (``core.memory_plan``) from a module, real or built under ``empty_module``: its parameters once each (ties made), its longest
    ``ModuleList`` as the repeated blocks, its linear weights as what fp8 storage halves."""
    from core.memory_plan import Part

    expected_tensors(module)  # ties the embeddings a meta build leaves untied
    params = {id(p): p for p in module.parameters()}
    count = sum(p.numel() for p in params.values())
    itemsize = torch.empty((), dtype=dtype).element_size()
    linear = sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear))
    lists = [m for m in module.modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
    blocks = max(lists, key=len, default=None)
    block = max((sum(p.numel() for p in b.parameters()) for b in blocks), default=0) if blocks is not None else 0
    return Part(name, role, count, count * itemsize, str(dtype).removeprefix("torch."),
                fp8_bytes=linear + (count - linear) * itemsize, blocks=len(blocks) if blocks is not None else 0,
                block_bytes=block * itemsize)
