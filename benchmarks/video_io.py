"""Video decode benchmark: core.Video against raw PyAV and raw decord on the same files.

Measures, side by side in one run:
  1. sequential decode of every frame (real 720p H.264 clip, and a 1,000-frame 256x256 clip);
  2. 16-frame uniform sampling from a 1,000-frame and a 10,000-frame 256x256 clip (seeking);
  3. RSS growth while streaming the 10,000-frame clip through ``Video.windows`` (in a fresh process).
Reports ratios (core / fastest raw reader; 10k / 1k sampling time), not absolute speed claims.

    python -m benchmarks.video_io [--out outputs/bench/video_io.json] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from core.arguments import StrictParser
from core.video import Video, write_video

REPO = Path(__file__).resolve().parents[1]
REAL_CLIP = REPO.parent / "shared" / "data" / "bigbuckbunny_clip" / "bigbuckbunny.mp4"


def synthetic_clip(path: Path, num_frames: int, size: int = 256) -> Path:
    """Moving discs over textured noise (so the encoder has real work), streamed to disk."""
    if path.is_file() and Video(path).info.num_frames == num_frames:
        return path
    rng = np.random.default_rng(0)
    texture = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
    yy, xx = np.mgrid[:size, :size]

    def frames():
        for t in range(num_frames):
            f = np.roll(texture, t % size, axis=1).copy()
            for k, col in enumerate(((230, 40, 40), (40, 200, 60), (50, 80, 240))):
                cx = (size / 2 + size / 3 * np.cos(0.02 * t * (k + 1) + k)) % size
                cy = (size / 2 + size / 3 * np.sin(0.03 * t + 2 * k)) % size
                f[(xx - cx) ** 2 + (yy - cy) ** 2 < (12 + 4 * k) ** 2] = col
            yield f

    return write_video(path, frames(), fps=30)


# ---- the readers under test: each returns the number of frames it produced


def raw_pyav_sequential(path: Path) -> int:
    import av

    n = 0
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        for frame in c.decode(s):
            frame.to_ndarray(format="rgb24")
            n += 1
    return n


def raw_pyav_sample(path: Path, k: int = 16) -> int:
    """The usual raw recipe: count frames from metadata, seek by timestamp, decode to the target."""
    import av

    with av.open(str(path)) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        total = s.frames
        step = 1 / (s.average_rate * s.time_base)  # pts per frame
        out = []
        for i in ((np.arange(k) + 0.5) * total / k).astype(int):
            target = int(round(i * step)) + (s.start_time or 0)
            c.seek(target, stream=s, backward=True)
            for frame in c.decode(s):
                if frame.pts >= target:
                    out.append(frame.to_ndarray(format="rgb24"))
                    break
    return len(out)


def raw_decord_sequential(path: Path) -> int:
    import decord

    vr = decord.VideoReader(str(path), ctx=decord.cpu(0))
    n = 0
    for s in range(0, len(vr), 32):
        n += len(vr.get_batch(list(range(s, min(s + 32, len(vr))))).asnumpy())
    return n


def raw_decord_sample(path: Path, k: int = 16) -> int:
    import decord

    vr = decord.VideoReader(str(path), ctx=decord.cpu(0))
    idx = ((np.arange(k) + 0.5) * len(vr) / k).astype(int)
    return len(vr.get_batch(list(idx)).asnumpy())


def core_sequential(path: Path, backend: str) -> int:
    with Video(path, backend=backend) as v:
        return sum(1 for _ in v)


def core_sample(path: Path, backend: str, k: int = 16) -> int:
    with Video(path, backend=backend) as v:
        return len(v.sample(k))


def best_time(fn, *args, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times)


def rss_while_streaming(path: Path, backend: str) -> dict:
    """Run the stream in a fresh process so import-time memory is not counted as growth."""
    code = f"""
import json, psutil
from core.video import Video
p = psutil.Process()
v = Video({str(path)!r}, backend={backend!r})
base = peak = p.memory_info().rss
n = 0
for _, chunk in v.windows(64):
    n += len(chunk)
    peak = max(peak, p.memory_info().rss)
print(json.dumps({{"frames": n, "base_mb": base / 2**20, "peak_mb": peak / 2**20}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    res = json.loads(out.strip().splitlines()[-1])
    res["growth_mb"] = res["peak_mb"] - res["base_mb"]
    return res


def main() -> None:
    ap = StrictParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="outputs/bench/video_io.json")
    ap.add_argument("--cache", default="outputs/bench/clips", help="where the synthetic clips are written once")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    try:
        import decord  # noqa: F401

        have_decord = True
    except ImportError:
        have_decord = False
    cache = Path(args.cache)
    clips = {"real_720p_132f": REAL_CLIP, "synthetic_256_1k": synthetic_clip(cache / "synth_1k.mp4", 1_000),
             "synthetic_256_10k": synthetic_clip(cache / "synth_10k.mp4", 10_000)}
    if not REAL_CLIP.is_file():
        del clips["real_720p_132f"]
    backends = ["pyav"] + (["decord"] if have_decord else [])
    results: dict = {"sequential": {}, "sample16": {}, "rss": {}}
    r = args.repeats
    for name in [c for c in clips if c != "synthetic_256_10k"]:
        row = {"raw_pyav": best_time(raw_pyav_sequential, clips[name], repeats=r)}
        if have_decord:
            row["raw_decord"] = best_time(raw_decord_sequential, clips[name], repeats=r)
        for b in backends:
            row[f"core_{b}"] = best_time(core_sequential, clips[name], b, repeats=r)
        results["sequential"][name] = row
    for name in clips:
        row = {"raw_pyav": best_time(raw_pyav_sample, clips[name], repeats=r)}
        if have_decord:
            row["raw_decord"] = best_time(raw_decord_sample, clips[name], repeats=r)
        for b in backends:
            row[f"core_{b}"] = best_time(core_sample, clips[name], b, repeats=r)
        results["sample16"][name] = row
    for b in backends:
        results["rss"][f"core_{b}"] = rss_while_streaming(clips["synthetic_256_10k"], b)

    lines = ["| task | clip | raw PyAV s | raw decord s | core pyav s | core decord s | core (auto) / fastest raw |", "|---|---|---|---|---|---|---|"]
    for task, rows in (("sequential", results["sequential"]), ("16-frame sample", results["sample16"])):
        for clip, row in rows.items():
            fastest = min(v for k, v in row.items() if k.startswith("raw_"))
            row["auto_over_fastest_raw"] = row["core_pyav"] / fastest
            cells = [f"{row.get(k, float('nan')):.4f}" for k in ("raw_pyav", "raw_decord", "core_pyav", "core_decord")]
            lines.append(f"| {task} | {clip} | " + " | ".join(cells) + f" | {row['auto_over_fastest_raw']:.3f} |")
    s = results["sample16"]
    results["sample_10k_over_1k"] = {b: s["synthetic_256_10k"][f"core_{b}"] / s["synthetic_256_1k"][f"core_{b}"] for b in backends}
    lines.append("")
    lines.append("16-frame sampling, 10,000-frame clip time / 1,000-frame clip time: "
                 + ", ".join(f"core {b} {v:.2f}x" for b, v in results["sample_10k_over_1k"].items()))
    lines.append("RSS growth streaming 10,000 frames at 256x256 (a full decode would need "
                 f"{10_000 * 256 * 256 * 3 / 2**20:.0f} MB): "
                 + ", ".join(f"core {b} {v['growth_mb']:.1f} MB" for b, v in results["rss"].items()))
    results["command"] = "python -m benchmarks.video_io " + " ".join(sys.argv[1:])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print("\n".join(lines))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
