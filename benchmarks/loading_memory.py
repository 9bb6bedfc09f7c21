"""Peak host memory while a Bernini-R release loads: what loading holds beyond the models it keeps (issue 60).

    python -m benchmarks.loading_memory [--dim 1536] [--layers 30] [--ffn 8960] [--dtype bfloat16] [--out outputs/bench/loading_memory]

Writes a Bernini-R folder (two Wan experts, the Wan VAE; no text encoder: callers pass embeddings) of random weights at
the given size (the defaults: Wan 2.1 1.3B's shape, 1.42B parameters an expert) with each library's
``save_pretrained``, then loads it in a fresh process with ``BerniniPipeline.from_pretrained(folder, device="cpu")``
twice: stored in bfloat16 and asked for float32. Each process reports its peak resident memory (``ru_maxrss``), its
memory after the imports, and the bytes of the models it holds at the end. The transient, peak - (after imports +
models kept), is what loading costs beyond its result; the claim is that it stays under the largest component plus a
margin (256 MB), i.e. components are read one at a time, never the sum at once. On a GPU the models end on the device,
so the host peak is that transient alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import write_results
from core.arguments import StrictParser

ROOT = Path(__file__).resolve().parents[1]
MARGIN = 256 * 2**20

CHILD = r"""
import json, resource, sys, torch
from pipelines.bernini import BerniniPipeline
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
base = rss_kib()
pipe = BerniniPipeline.from_pretrained(sys.argv[1], device="cpu", dtype=None if sys.argv[2] == "auto" else sys.argv[2])
r = pipe.renderer
parts = {n: sum(p.numel() * p.element_size() for p in m.parameters()) for n, m in
         (("transformer", r.transformer), ("transformer_2", r.transformer_2), ("vae", r.vae)) if m is not None}
print(json.dumps({"base_kib": base, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "end_kib": rss_kib(),
                  "parts": parts, "dtype": str(r.transformer.dtype)}))
"""


def build(folder: Path, dim: int, layers: int, ffn: int, dtype: str) -> None:
    """A random Bernini-R folder, each expert built and saved on its own (the builder never holds both)."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel

    heads = dim // 128
    cfg = {"patch_size": (1, 2, 2), "num_attention_heads": heads, "attention_head_dim": 128, "in_channels": 16,
           "out_channels": 16, "text_dim": 4096, "freq_dim": 256, "ffn_dim": ffn, "num_layers": layers,
           "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads", "eps": 1e-6, "rope_max_seq_len": 1024}
    for i, name in enumerate(("transformer", "transformer_2")):
        torch.manual_seed(i)
        WanTransformer3DModel(**cfg).to(getattr(torch, dtype)).save_pretrained(folder / name)
    AutoencoderKLWan().save_pretrained(folder / "vae")
    UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0).save_pretrained(folder / "scheduler")
    (folder / "config.json").write_text(json.dumps({"model_type": "bernini_renderer", "architectures": ["BerniniRendererModel"],
                                                    "skip_transformer_1": False, "skip_transformer_2": False,
                                                    "switch_dit_boundary": 0.875, "max_sequence_length": 512, "shift": 3.0,
                                                    "use_unipc": True, "use_src_id_rotary_emb": True}))


def measure(folder: Path, dtype: str) -> dict:
    run = subprocess.run([sys.executable, "-c", CHILD, str(folder), dtype], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if run.returncode:
        raise SystemExit(f"the loading process failed:\n{run.stderr[-2000:]}")
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    kept = sum(facts["parts"].values())
    transient = facts["peak_kib"] * 1024 - (facts["base_kib"] * 1024 + kept)
    largest = max(facts["parts"].values())
    return {**facts, "asked": dtype, "models_bytes": kept, "largest_bytes": largest, "transient_bytes": transient,
            "within": transient <= largest + MARGIN}


def main(argv: list[str] | None = None) -> int:
    ap = StrictParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, default=1536, help="each expert's width (a multiple of 128; default Wan 1.3B's 1536)")
    ap.add_argument("--layers", type=int, default=30, help="each expert's blocks (default 30)")
    ap.add_argument("--ffn", type=int, default=8960, help="each expert's FFN width (default 8960)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="how the experts are stored")
    ap.add_argument("--out", default="outputs/bench/loading_memory")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bernini-r-") as tmp:
        folder = Path(tmp) / "Bernini-R-Diffusers"
        t0 = time.perf_counter()
        print(f"writing a random Bernini-R (dim {args.dim}, {args.layers} layers) to {folder} ...", file=sys.stderr, flush=True)
        build(folder, args.dim, args.layers, args.ffn, args.dtype)
        print("loading it in a fresh process, as stored and as float32 ...", file=sys.stderr, flush=True)
        built = time.perf_counter() - t0
        rows = [measure(folder, "auto"), measure(folder, "float32")]
    gib = 2**30
    lines = [f"Bernini-R of two experts (dim {args.dim}, {args.layers} layers, ffn {args.ffn}) stored in {args.dtype}, built "
             f"in {built:.0f} s; each load in a fresh process on the CPU:", "",
             "| asked dtype | loaded as | models kept | largest component | peak RSS | after imports | transient (peak - imports - models) | <= largest + 256 MB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['asked']} | {r['dtype'].removeprefix('torch.')} | {r['models_bytes'] / gib:.2f} GiB | {r['largest_bytes'] / gib:.2f} GiB | "
                     f"{r['peak_kib'] / 2**20:.2f} GiB | {r['base_kib'] / 2**20:.2f} GiB | {r['transient_bytes'] / gib:.2f} GiB | "
                     f"{'yes' if r['within'] else 'no'} |")
    text = "\n".join(lines)
    print(text)
    write_results(args.out, {"command": "python -m benchmarks.loading_memory " + " ".join(argv or sys.argv[1:])}, None, rows, text + "\n")
    return 0 if all(r["within"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
