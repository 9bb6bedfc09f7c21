"""Latency of every verb, cold and warm, on its showcase input and on the real Big Buck Bunny clip (issue 50).

    python -m benchmarks.latency [--out outputs/bench/latency] [--verbs ask,segment,...] [--no-real]
    python -m benchmarks.latency --threads-check [--verbs ...]

- **cold**: a fresh process runs ``atelier VERB ... -o DIR`` (imports, model loading and the run): wall, CPU
  (user + system) and peak RSS of that process;
- **warm**: one process runs the verb twice through ``app.runner.run_app`` (what ``atelier batch`` and the web
  demo do); the second call's wall and CPU, and the process's peak RSS after both;
- **model share**: the pipeline's own ``seconds["total"]`` (or the sum of its stages) over the warm call's wall;
- **baseline**: a fresh process that only runs ``import torch`` (its wall and peak RSS), measured in the same run,
  so "RSS above bare torch" compares like with like.

Every run uses one thread (``--threads 1``, what the builtin models default to). Results go to OUT/results.md and
OUT/rows.json; docs/BENCHMARKS.md quotes them with this command.

``--threads-check`` (issue 50's threads acceptance) instead runs each verb cold on its showcase input while another
process keeps both cores busy (a torch matmul loop on two threads): at Atelier's default (no ``--threads``, no
``OMP_NUM_THREADS``, no ``ATELIER_THREADS``) and with ``OMP_NUM_THREADS=1``, in pairs, ``--repeats`` pairs, each
pair's order flipped from the last (ABBA), after one uncounted run (the first run of a verb also fills the page
cache, which made the default look slower); the median of the pairs' ratios says whether the default is slower
(pairs cancel a load that drifts during the run, which a ratio of medians does not). Results: OUT/threads.md and
OUT/threads.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.arguments import StrictParser

REPO = Path(__file__).resolve().parents[1]
REAL_CLIP = REPO.parent / "shared" / "data" / "bigbuckbunny_clip" / "bigbuckbunny.mp4"
VERBS = ("ask", "segment", "generate", "edit", "motion", "meme", "reason")


def real_inputs(verb: str, folder: Path) -> dict | None:
    """The real clip's inputs for ``verb`` (docs/BENCHMARKS.md, "Real clips through every verb")."""
    if not REAL_CLIP.is_file():
        return None
    v = str(REAL_CLIP)
    if verb in ("generate", "meme", "reason"):
        from core.video import Video
        from PIL import Image

        frame = folder / "bbb_middle.png"
        if not frame.exists():
            video = Video(v)
            Image.fromarray(video.get_frames([len(video) // 2])[0]).save(frame)
        v_img = str(frame)
    return {
        "ask": {"video": v, "question": "What animal?", "options": ["dog", "rabbit", "bird"]},
        "segment": {"video": v, "query": "the rabbit"},
        "generate": {"prompt": "the rabbit runs", "image": v_img} if verb == "generate" else None,
        "edit": {"video": v, "instruction": "make the rabbit blue"},
        "motion": {"video": v, "instruction": "make the person raise the left arm"},
        "meme": {"image": v_img} if verb == "meme" else None,
        "reason": {"image": v_img, "question": "What colour is the bird?", "options": ["red", "blue", "green", "white"]} if verb == "reason" else None,
    }[verb]


def argv_of(app, inputs: dict, threads: bool = True) -> list[str]:
    argv = [app.verb]
    for i in app.inputs:
        if i.name not in inputs:
            continue
        value = inputs[i.name]
        if i.flag is None and i.kind not in ("texts", "images"):
            argv.append(str(value))
        else:
            argv += [f"--{i.name}", *([str(v) for v in value] if isinstance(value, list) else [str(value)])]
    return argv + ["--no-progress"] + (["--threads", "1"] if threads else [])


def _child(code: str, env: dict) -> dict:
    """Run ``code`` in a fresh interpreter: its wall, CPU and peak RSS (the child's own rusage)."""
    # the child reports its own peak RSS at exit (RUSAGE_CHILDREN's is the largest child's so far, not this one's)
    hook = ("import atexit, resource, sys\natexit.register(lambda: print('PEAKRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
            "file=sys.stderr))\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", hook + code], capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    peak = [int(x.split()[1]) for x in out.stderr.splitlines() if x.startswith("PEAKRSS ")]
    err = "\n".join(x for x in out.stderr.splitlines() if not x.startswith("PEAKRSS "))
    return {"wall": wall, "cpu": cpu, "rss_mb": peak[-1] / 1024 if peak else float("nan"), "rc": out.returncode,
            "stdout": out.stdout[-2000:], "stderr": err[-2000:]}


WARM = """
import json, resource, time
from app.runner import run_app
from pipelines.registry import get_app
app, inputs = get_app({verb!r}), json.loads({inputs!r})
args = {{**inputs, "progress": False, "threads": 1}}
rows = []
for k in range(2):
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        out, summary = run_app(app, args)
        ok = True
    except Exception as e:
        out, summary, ok = None, {{"error": str(e)}}, False
    s = summary.get("seconds") or {{}}
    model = s.get("total", sum(v for v in s.values() if isinstance(v, (int, float))))
    rows.append({{"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "model": model, "ok": ok}})
print("ROWS", json.dumps({{"calls": rows, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def measure(verb: str, inputs: dict, env: dict, tmp: Path) -> dict:
    from pipelines.registry import get_app

    app = get_app(verb)
    argv = argv_of(app, inputs) + ["-o", str(tmp / f"{verb}_{len(os.listdir(tmp))}")]
    cold = _child(f"import sys\nfrom app.cli import main\nsys.exit(main({argv!r}))", env)
    warm_run = _child(WARM.format(verb=verb, inputs=json.dumps(inputs)), env)
    line = next((x for x in warm_run["stdout"].splitlines() if x.startswith("ROWS ")), None)
    warm = json.loads(line[5:]) if line else {"calls": [], "rss_mb": warm_run["rss_mb"], "error": warm_run["stderr"][-500:]}
    second = warm["calls"][1] if len(warm["calls"]) > 1 else {}
    return {"verb": verb, "cold_wall": cold["wall"], "cold_cpu": cold["cpu"], "cold_rss_mb": cold["rss_mb"], "cold_rc": cold["rc"],
            "warm_wall": second.get("wall"), "warm_cpu": second.get("cpu"), "warm_rss_mb": warm["rss_mb"],
            "model_share": (second["model"] / second["wall"]) if second.get("wall") else None, "warm_ok": second.get("ok"),
            "cold_error": cold["stderr"].strip().splitlines()[-1] if cold["rc"] and cold["stderr"].strip() else ""}


BUSY = """
import torch
torch.set_num_threads(2)
a = torch.randn(1024, 1024)
while True:
    a = torch.tanh(a @ a)
"""


def median_ci(ratios: list[float], draws: int = 4000) -> list[float]:
    """A bootstrap 95% interval of the median ratio (resampling the pairs; seeded, so a saved run's interval is
    recomputed exactly from its ``pair_ratios``)."""
    import numpy as np

    logs = np.log(np.asarray(ratios, float))
    rng = np.random.default_rng(0)
    medians = [np.exp(np.median(rng.choice(logs, len(logs)))) for _ in range(draws)]
    return [float(v) for v in np.percentile(medians, [2.5, 97.5])]


def threads_check(verbs: list[str], env: dict, out: Path, repeats: int) -> str:
    """Each verb cold at the default threads and at OMP_NUM_THREADS=1 while a busy process holds both cores."""
    import numpy as np

    from app.showcase import item
    from pipelines.registry import get_app

    default_env = {k: v for k, v in env.items() if k not in ("OMP_NUM_THREADS", "ATELIER_THREADS", "MKL_NUM_THREADS")}
    one_env = {**default_env, "OMP_NUM_THREADS": "1"}
    busy = subprocess.Popen([sys.executable, "-c", BUSY], env=default_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        time.sleep(3)  # the busy loop is running before the first measurement
        with tempfile.TemporaryDirectory() as tmp_dir:
            tmp = Path(tmp_dir)
            for verb in verbs:
                argv = argv_of(get_app(verb), item(verb, 0, out / "inputs").inputs, threads=False)
                walls = {"default": [], "omp1": []}
                # one run first, not counted: the first run of a verb also reads its files into the page cache
                _child(f"import sys\nfrom app.cli import main\nsys.exit(main({argv + ['-o', str(tmp / f'{verb}_warm')]!r}))", one_env)
                for k in range(repeats):
                    arms = (("default", default_env), ("omp1", one_env))
                    for name, e in arms if k % 2 == 0 else arms[::-1]:
                        run = _child(f"import sys\nfrom app.cli import main\nsys.exit(main({argv + ['-o', str(tmp / f'{verb}_{name}_{k}')]!r}))", e)
                        walls[name].append(run["wall"] if run["rc"] == 0 else float("nan"))
                pair_ratios = [a / b for a, b in zip(walls["default"], walls["omp1"])]
                row = {"verb": verb, **{f"{n}_walls": w for n, w in walls.items()}, "pair_ratios": pair_ratios,
                       "ratio": float(np.median(pair_ratios)), "ratio_ci": median_ci(pair_ratios)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        busy.kill()
        busy.wait()
    (out / "threads.json").write_text(json.dumps(rows, indent=1))
    lines = ["| verb | default: cold wall s (median) | OMP_NUM_THREADS=1: cold wall s (median) | default / one thread (median of pairs) "
             "| bootstrap 95% | pairs' range |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['verb']} | {np.median(r['default_walls']):.1f} | {np.median(r['omp1_walls']):.1f} | {r['ratio']:.2f} | "
              f"{r['ratio_ci'][0]:.2f}-{r['ratio_ci'][1]:.2f} | {min(r['pair_ratios']):.2f}-{max(r['pair_ratios']):.2f} |" for r in rows]
    text = "\n".join(lines) + "\n"
    (out / "threads.md").write_text(text)
    return text


def table(rows: list[dict], baseline: dict) -> str:
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)
    head = ("| verb | input | cold wall s | cold CPU s | cold peak RSS MB (above bare torch) | warm wall s | warm CPU s | "
            "warm peak RSS MB | model share of warm wall | exit |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        above = r["cold_rss_mb"] - baseline["rss_mb"]
        lines.append(f"| {r['verb']} | {r['input']} | {f(r['cold_wall'], '.1f')} | {f(r['cold_cpu'], '.1f')} | "
                     f"{r['cold_rss_mb']:.0f} ({above:+.0f}) | {f(r['warm_wall'], '.2f')} | {f(r['warm_cpu'], '.2f')} | "
                     f"{f(r['warm_rss_mb'], '.0f')} | {f(r['model_share'], '.0%')} | {r['cold_rc']}{' ' + r['cold_error'][:80] if r['cold_error'] else ''} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = StrictParser(prog="python -m benchmarks.latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="outputs/bench/latency")
    ap.add_argument("--verbs", default=",".join(VERBS))
    ap.add_argument("--no-real", action="store_true", help="skip the real clip")
    ap.add_argument("--threads-check", action="store_true", help="instead: each verb cold at its default threads against "
                    "OMP_NUM_THREADS=1, with another process busy on both cores (module docstring)")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each setting in --threads-check (default 2)")
    args = ap.parse_args(argv)
    from app.showcase import item

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    if args.threads_check:
        if args.repeats < 1:
            ap.error(f"--repeats {args.repeats}: run each setting at least once")
        print(threads_check(args.verbs.split(","), env, out, args.repeats))
        return 0
    baseline = _child("import torch", env)
    help_run = _child("import sys\nfrom app.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass", env)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for verb in args.verbs.split(","):
            showcase = item(verb, 0, out / "inputs").inputs
            cases = [("showcase item 0", showcase)]
            real = None if args.no_real else real_inputs(verb, out / "inputs")
            if real:
                cases.append(("Big Buck Bunny 720p", real))
            for name, inputs in cases:
                row = {**measure(verb, inputs, env, tmp), "input": name}
                rows.append(row)
                print(json.dumps(row), flush=True)
    text = (f"bare `import torch`: {baseline['wall']:.1f} s wall, {baseline['rss_mb']:.0f} MB peak RSS; "
            f"`atelier --help`: {help_run['wall']:.2f} s wall, {help_run['rss_mb']:.0f} MB\n\n" + table(rows, baseline) + "\n")
    (out / "results.md").write_text(text)
    (out / "rows.json").write_text(json.dumps({"baseline": baseline, "help": help_run, "rows": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
