"""The full Bernini release at its real sizes, random weights, one short generate per memory budget on a GPU (issue 60).

    python -m benchmarks.gpu_memory [--budgets 24,48,80] [--num-frames 17] [--height 480] [--width 832] [--steps 2]
    python -m benchmarks.gpu_memory --tiny          # the same flow on the tiny layout, the CPU as the device (a check)

For each budget, in a fresh process: the models of Bernini-Diffusers built from the release's configs
(``benchmarks.bernini_release_sizes``: Qwen2.5-VL-7B planner with the release's head widths, two Wan2.2 A14B experts,
UMT5-XXL's encoder, the Wan VAE) with random bfloat16 weights in host memory, the processor / tokenizer / scheduler of the
tiny layout (token ids are all the models need of them), placed by the memory plan for that budget
(``pipelines.bernini.placement``), then one t2v generate. Reported: the plan's strategy and estimated device peak, the
measured peak (``torch.cuda.max_memory_allocated``), seconds per rendering step, the build time. Without a CUDA GPU it says
so and exits 2 (``--tiny`` runs anyway). Host memory: about 90 GB for the real sizes (a 128 GB machine).
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


def _randomize(module, dtype):
    """Random values for every parameter a meta build left empty (built under ``core.shards.empty_module``; called
    outside it, where a new parameter is real):
    normal(0, 0.02), norms' weights 1, biases 0; the rest of ``module`` (e.g. a backbone passed in) is kept."""
    import torch

    made: dict[int, torch.nn.Parameter] = {}  # a tied weight (UMT5's embeddings) gets one value under each of its names
    for name, p in list(module.named_parameters(remove_duplicate=False)):
        if not p.is_meta:
            continue
        if id(p) not in made:
            value = torch.empty(p.shape, dtype=dtype)
            if name.endswith("bias"):
                value.zero_()
            elif "norm" in name.lower():
                value.fill_(1.0)
            else:
                value.normal_(0, 0.02)
            made[id(p)] = torch.nn.Parameter(value, requires_grad=False)
        *path, attr = name.split(".")
        setattr(module.get_submodule(".".join(path)) if path else module, attr, made[id(p)])
    return module.to(dtype)


def random_release(tiny: Path, real: bool, dtype_name: str):
    """A ``BerniniPipeline`` with the tiny layout's assets and random models, at the release's sizes when ``real``."""
    import dataclasses

    import torch
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import AutoModelForImageTextToText, UMT5Config, UMT5EncoderModel

    from benchmarks.bernini_release_sizes import RELEASE_HEADS, UMT5_XXL, WAN22_A14B_EXPERT, WAN_VAE, scale_release
    from core.shards import empty_module
    from pipelines.bernini import BerniniPipeline
    from planners.semantic.backbones import HFPlannerBackbone
    from planners.semantic.planner import SemanticPlanner
    from renderers.hf_wan import WanRenderer

    dtype = getattr(torch, dtype_name)
    tiny_pipe = BerniniPipeline.from_pretrained(tiny, device="cpu")
    if not real:
        return tiny_pipe
    sized = scale_release(tiny)  # configs only: the assets stay tiny
    from transformers import AutoConfig

    with empty_module():
        qwen = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(str(sized / "mllm"), trust_remote_code=False))
    qwen = _randomize(qwen, dtype)
    h = qwen.config.text_config.hidden_size
    cfg = dataclasses.replace(tiny_pipe.planner.config, token_dim=h, context_dim=UMT5_XXL["d_model"], **RELEASE_HEADS)
    backbone = HFPlannerBackbone(qwen, tiny_pipe.planner.backbone.processor)
    with empty_module():
        planner = SemanticPlanner(cfg, backbone)  # the heads on meta at their real widths; the backbone kept
    planner = _randomize(planner, dtype)
    experts = []
    for _ in range(2):
        with empty_module():
            expert = WanTransformer3DModel(**{k: v for k, v in WAN22_A14B_EXPERT.items() if k != "_class_name"})
        experts.append(_randomize(expert, dtype))  # outside empty_module: the new parameters must be real
    with empty_module():
        t5 = UMT5EncoderModel(UMT5Config(**UMT5_XXL))
    t5 = _randomize(t5, dtype)
    vae = AutoencoderKLWan(**WAN_VAE).eval()
    r = tiny_pipe.renderer
    renderer = WanRenderer(experts[0].eval(), vae, r.scheduler, t5.eval(), r.tokenizer, experts[1].eval(), r.config)
    renderer.release = r.release
    planner.release = tiny_pipe.planner.release
    return BerniniPipeline(tiny_pipe.config, planner=planner.eval(), renderer=renderer)


CHILD = r"""
import json, sys, time, dataclasses, torch
from pathlib import Path
from benchmarks.gpu_memory import random_release
tiny, real, budget, frames, height, width, steps = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3], *map(int, sys.argv[4:8])
t0 = time.perf_counter()
pipe = random_release(tiny, real, "bfloat16" if real else "float32")
built = time.perf_counter() - t0
device = "cuda" if torch.cuda.is_available() else "cpu"
pipe.to("cpu")
pipe.renderer._offload_device = torch.device(device)  # where the plan places the models
pipe.config = dataclasses.replace(pipe.config, max_memory=budget, placement="auto" if device == "cuda" else "model-offload",
                                  num_frames=frames, height=height, width=width, steps=steps, planning_steps=2, denoising_steps=1)
pipe.set_progress_bar_config(disable=True)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
t1 = time.perf_counter()
out = pipe("a red fox runs through the snow", generator=0)
seconds = time.perf_counter() - t1
plan = out.config.get("memory_plan") or {}
print(json.dumps({"budget": budget, "strategy": plan.get("strategy"), "estimated_peak": plan.get("peak_bytes"),
                  "measured_peak": torch.cuda.max_memory_allocated() if device == "cuda" else None,
                  "render_seconds": out.seconds["render"], "plan_seconds": out.seconds["plan"], "steps": steps,
                  "seconds_per_step": out.seconds["render"] / steps, "build_seconds": built, "device": device}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = StrictParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--budgets", default="24GB,48GB,80GB", help="comma-separated device budgets (default 24GB,48GB,80GB)")
    ap.add_argument("--num-frames", type=int, default=17)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--steps", type=int, default=2, help="rendering steps (default 2)")
    ap.add_argument("--tiny", action="store_true", help="the tiny layout on the CPU: checks the flow, measures nothing")
    ap.add_argument("--out", default="outputs/bench/gpu_memory")
    args = ap.parse_args(argv)
    import torch

    if not args.tiny and not torch.cuda.is_available():
        print("benchmarks.gpu_memory: no CUDA GPU here; it measures device memory on one (nothing was run). "
              "Use --tiny to check the flow on the CPU.", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "tests"))  # the tiny layout's builder: the release's file names and assets
    from test_bernini_official_layout import build_full_release

    rows = []
    with tempfile.TemporaryDirectory(prefix="bernini-") as tmp:
        budgets = [b.strip() for b in args.budgets.split(",") if b.strip()]
        for budget in budgets:
            print(f"budget {budget}: building the release and generating in a fresh process ...", file=sys.stderr, flush=True)
            tiny = build_full_release(Path(tmp) / f"{len(rows)}" / "Bernini-Diffusers")
            size = ["32", "32", "5"] if args.tiny else [str(args.height), str(args.width), str(args.num_frames)]
            run = subprocess.run([sys.executable, "-c", CHILD, str(tiny), "0" if args.tiny else "1", budget, size[2], size[0],
                                  size[1], str(args.steps)], cwd=ROOT, capture_output=True, text=True, timeout=3600)
            if run.returncode:
                print(f"budget {budget}: the run failed:\n{run.stderr[-3000:]}", file=sys.stderr)
                return 1
            rows.append(json.loads(run.stdout.strip().splitlines()[-1]))
    gb = 1e9
    lines = ["| budget | strategy | estimated peak | measured peak | s / step | planning s | build s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        est = f"{r['estimated_peak'] / gb:.1f} GB" if r["estimated_peak"] else "-"
        meas = f"{r['measured_peak'] / gb:.1f} GB" if r["measured_peak"] is not None else "- (CPU)"
        lines.append(f"| {r['budget']} | {r['strategy']} | {est} | {meas} | {r['seconds_per_step']:.2f} | {r['plan_seconds']:.1f} | "
                     f"{r['build_seconds']:.0f} |")
    text = "\n".join(lines)
    print(text)
    write_results(args.out, {"command": "python -m benchmarks.gpu_memory " + " ".join(argv or sys.argv[1:])}, None, rows, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
