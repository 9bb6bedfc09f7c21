"""Built-in model cost: VLM inference throughput (frames/s) and weight sizes.

Measures ``option_posterior`` (the pass GridProbe runs) on 12-frame probes at 32x32 and on 144-frame
full passes at 64x64, plus the ViT alone, in one run. Uses the shipped weights if present, else a
randomly initialised model of the same architecture (speed does not depend on the weights).

    python -m benchmarks.builtin [--out outputs/bench/builtin.json] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from core.arguments import StrictParser
from planners.builtin import WEIGHTS_DIR, BuiltinVisionLanguageModel
from planners.builtin.vlm import BuiltinVLMModel, VLMConfig
from planners.protocol import format_mcq_prompt


def load() -> tuple[BuiltinVisionLanguageModel, str]:
    if (WEIGHTS_DIR / "vlm" / "model.safetensors").is_file():
        return BuiltinVisionLanguageModel.from_pretrained(WEIGHTS_DIR / "vlm"), "shipped weights"
    torch.manual_seed(0)
    return BuiltinVisionLanguageModel(BuiltinVLMModel(VLMConfig(vocab=["<pad>", "<bos>", "<eos>"]))), "random weights (same architecture)"


def best(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = StrictParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="outputs/bench/builtin.json")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    vlm, which = load()
    rng = np.random.default_rng(0)
    opts = ["red", "green", "blue", "white"]
    prompt = format_mcq_prompt("Which colour never appears?", opts)
    rows = {}
    for name, t, size in (("probe 12 x 32x32", 12, 32), ("focus 16 x 64x64", 16, 64), ("full 144 x 64x64", 144, 64), ("full 144 x 32x32", 144, 32)):
        frames = rng.integers(0, 255, (t, size, size, 3), dtype=np.uint8)
        # new frames every time (the ViT-output cache emptied), and frames seen before (GridProbe's
        # focused and baseline passes re-show pool frames the probes already encoded)
        sec = best(lambda: (vlm._vision_cache.clear(), vlm.option_posterior(frames, prompt, opts)), args.repeats)
        cached = best(lambda: vlm.option_posterior(frames, prompt, opts), args.repeats)
        vit = best(lambda: vlm.encode_images(frames), args.repeats)
        rows[name] = {"frames": t, "seconds": round(sec, 4), "frames_per_s": round(t / sec, 1), "vit_share": round(vit / sec, 3),
                      "frames_per_s_cached": round(t / cached, 1),
                      "lm_tflops": round(vlm.flops(t, prompt, (size, size)) / 1e12, 6)}
    sizes = {p.parent.name: round(p.stat().st_size / 2**20, 2) for p in WEIGHTS_DIR.glob("*/model.safetensors")}
    result = {"weights": which, "threads": torch.get_num_threads(), "passes": rows, "weight_mb": sizes,
              "command": "python -m benchmarks.builtin " + " ".join(sys.argv[1:])}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"built-in VLM ({which}, {result['threads']} threads)\n")
    print("| pass | frames/s (new frames) | seconds | ViT share of time | frames/s (frames seen before) | LM TFLOPs |\n|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['frames_per_s']} | {r['seconds']} | {r['vit_share']} | {r['frames_per_s_cached']} | {r['lm_tflops']} |")
    print(f"\nweights (MB): {sizes}\nwrote {out}")


if __name__ == "__main__":
    main()
