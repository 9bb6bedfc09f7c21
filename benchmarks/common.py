"""What every benchmark shares: a resumable row log, shards and their merge, interval tables,
Markdown tables and the accuracy-vs-compute (Pareto) plot.

A run appends the rows of each finished item to ``rows.jsonl`` in its output folder (one JSON row a
line, a whole item in one write, flushed and fsynced), beside ``run.json``, the header: the
arguments that decide what a row holds. A run started again on the same folder skips the finished
items; with different arguments it is refused, naming the differing ones (a folder never mixes two
settings). ``--start`` / ``--n`` cut a benchmark into shards, one output folder each, and ``--merge``
joins finished folders: rows deduplicated by item (the first folder that has an item wins), headers
checked to agree on the arguments that must. Results are written atomically (``core.atomic``).

    log = RowLog(out, header={"benchmark": "mine", "vlm": args.vlm})   # refuses a folder of other arguments
    for i in log.todo(range(args.start, args.start + args.n)):
        log.append([{"item": i, "method": "x", "correct": True, "tflops": 0.1}])
    rows = merge_rows([shard_a, shard_b], agree=("vlm",))
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.atomic import atomic_path, write_json_atomic, write_text_atomic
from core.errors import InputError

logger = logging.getLogger("benchmarks")

ROWS_FILE = "rows.jsonl"
HEADER_FILE = "run.json"


class ArgumentsDiffer(InputError):
    """Rows made with other arguments than this run's (resume) or than the other folders' (merge)."""


# ---------------------------------------------------------------------------------- the row log


def read_header(folder: str | os.PathLike) -> dict | None:
    """The arguments a folder's rows were made with, or None for a folder without ``run.json``."""
    path = Path(folder) / HEADER_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def read_rows(folder: str | os.PathLike, item_key: str = "item") -> list[dict]:
    """The rows of a folder's ``rows.jsonl`` (none when it has no such file).

    A torn last line (a run killed mid-write) is dropped with the complete rows of the last item
    before it, since that item may be cut short too: at worst one finished item is run again.
    """
    return _scan(Path(folder) / ROWS_FILE, item_key)[0]


def _scan(path: Path, item_key: str) -> tuple[list[dict], int]:
    """``(rows, bytes to keep)``: the rows to trust and the length of the file they end at."""
    if not path.is_file():
        return [], 0
    data = path.read_bytes()
    rows: list[dict] = []
    ends: list[int] = []  # where each kept row's line ends (after its newline)
    pos = 0
    for number, line in enumerate(data.split(b"\n")[:-1], 1):
        pos += len(line) + 1
        try:
            rows.append(json.loads(line))
            ends.append(pos)
        except json.JSONDecodeError:
            logger.warning("%s: line %d is not a JSON row (a cut write?); skipped", path, number)
    if pos == len(data):  # ends with a newline: nothing torn
        return rows, pos
    last = rows[-1][item_key] if rows else None
    while rows and rows[-1][item_key] == last:
        rows.pop()
        ends.pop()
    logger.warning("%s: the last line is torn (a cut write); it is dropped%s", path,
                   f", and item {last}'s rows before it (they may be incomplete)" if last is not None else "")
    return rows, ends[-1] if ends else 0


class RowLog:
    """A folder's ``rows.jsonl`` opened for a run with ``header`` (JSON-able: the arguments that
    decide the rows, never ``--start`` / ``--n`` / ``--out``).

    Opening writes ``run.json`` on a new folder and raises ``ArgumentsDiffer`` when the folder's
    header differs from ``header``; a torn last line is cut off the file so the next append starts
    on a line of its own. ``rows`` holds the finished rows, ``done`` their items.
    """

    def __init__(self, folder: str | os.PathLike, header: Mapping[str, Any], item_key: str = "item"):
        self.folder = Path(folder)
        self.path = self.folder / ROWS_FILE
        self.item_key = item_key
        self.header = json.loads(json.dumps(header, default=_plain))  # as run.json reads back: tuples as lists
        stored = read_header(self.folder)
        if stored is not None and (diff := header_diff(stored, self.header)):
            raise ArgumentsDiffer("--out", str(self.folder), f"its rows were made with {describe(diff)}; "
                                  "run again with those arguments, or write to another --out and --merge the folders")
        self.rows, keep = _scan(self.path, item_key)
        if self.path.is_file() and keep < self.path.stat().st_size:
            with self.path.open("r+b") as f:
                f.truncate(keep)
        if stored is None:
            if self.rows:
                logger.warning("%s has rows but no %s: their arguments cannot be checked; taking this run's", self.folder, HEADER_FILE)
            write_json_atomic(self.folder / HEADER_FILE, self.header)
        self.done = {r[item_key] for r in self.rows}

    def todo(self, items: Iterable[Hashable]) -> list:
        """The items not finished yet, in order."""
        return [i for i in items if i not in self.done]

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Add one finished item's rows: one write, flushed and fsynced, so a kill loses at most this item."""
        lines = [json.dumps(r, default=_plain) for r in rows]
        with self.path.open("a") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        self.rows += [json.loads(line) for line in lines]  # as a resumed run reads them: plain Python values
        self.done |= {r[self.item_key] for r in rows}

    def select(self, items: Iterable[Hashable]) -> list[dict]:
        """The finished rows of ``items`` (a shard's range), in the order they were written."""
        wanted = set(items)
        return [r for r in self.rows if r[self.item_key] in wanted]


def _plain(o):
    return o.item() if hasattr(o, "item") else str(o)  # numpy scalars -> Python


def header_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{key: (old value, new value)}`` for every key whose values differ (a missing key reads as None)."""
    return {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}


def describe(diff: Mapping[str, tuple[Any, Any]]) -> str:
    """``--probe-scales 0.5 (now 1,0.5), --seed 0 (now 1)``: each key as its CLI flag."""
    return ", ".join(f"{_flag(k)} {_cli_value(a)} (now {_cli_value(b)})" for k, (a, b) in diff.items())


def _flag(key: str) -> str:
    return key if key == "benchmark" else "--" + key.replace("_", "-")


def _cli_value(v: Any) -> str:
    return ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v) if isinstance(v, list) else str(v)


# ---------------------------------------------------------------------------------- shards and merge


def merge_rows(folders: Sequence[str | os.PathLike], agree: Sequence[str] = (), item_key: str = "item",
               row_key: Callable[[dict], Hashable] | None = None) -> list[dict]:
    """The rows of finished shard folders, in folder order, each deduplicated by ``row_key`` (default:
    the item): a key an earlier folder already gave is dropped. ``agree`` names the header keys the
    folders must share (folders without ``run.json`` are not checked); otherwise ``ArgumentsDiffer``.
    """
    key = row_key or (lambda r: r[item_key])
    check_headers_agree(folders, agree)
    rows, seen = [], set()
    for folder in folders:
        new = [r for r in read_rows(folder, item_key) if key(r) not in seen]
        seen |= {key(r) for r in new}
        rows += new
    return rows


def check_headers_agree(folders: Sequence[str | os.PathLike], agree: Sequence[str]) -> None:
    headers = [(Path(f), h) for f in folders if (h := read_header(f)) is not None]
    for k in agree:
        values = defaultdict(list)
        for folder, h in headers:
            values[json.dumps(h.get(k))].append(str(folder))
        if len(values) > 1:
            seen = "; ".join(f"{_flag(k)} {_cli_value(json.loads(v))} in {', '.join(fs)}" for v, fs in values.items())
            raise ArgumentsDiffer("--merge", " ".join(map(str, folders)),
                                  f"the folders were run with different {_flag(k)} ({seen}); merge runs of one setting")


def merge_header(folders: Sequence[str | os.PathLike]) -> dict:
    """The first header among the folders (``{}`` when none has one)."""
    return next((h for f in folders if (h := read_header(f)) is not None), {})


def add_shard_arguments(ap: argparse.ArgumentParser, n: int, noun: str = "questions", compare: str = "runs") -> None:
    """``--n``, ``--start``, ``--merge DIR...`` and ``--items START:STOP`` (a filter of ``--merge``; its
    help says it keeps the same items to compare ``compare``)."""
    ap.add_argument("--n", type=int, default=n, help=f"number of test {noun} (default {n})")
    ap.add_argument("--start", type=int, default=0, help=f"index of the first {noun[:-1]} (to shard a run over processes)")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="DIR", help="summarise the rows of these finished runs into --out")
    ap.add_argument("--items", type=item_range, metavar="START:STOP",
                    help=f"with --merge: keep only {noun} START <= i < STOP (e.g. 0:200 to compare {compare} on the same {noun})")


def item_range(text: str) -> tuple[int, int]:
    """``"0:200"`` -> ``(0, 200)``, for ``--items``."""
    try:
        start, stop = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid --items {text!r}: write START:STOP, e.g. 0:200") from None
    if not 0 <= start < stop:
        raise argparse.ArgumentTypeError(f"invalid --items {text!r}: need 0 <= START < STOP, e.g. 0:200")
    return start, stop


def in_range(rows: Iterable[dict], items: tuple[int, int] | None, item_key: str = "item") -> list[dict]:
    """The rows with ``START <= item < STOP`` (all of them when ``items`` is None)."""
    return [r for r in rows if items is None or items[0] <= r[item_key] < items[1]]


def comma_floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def comma_ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """``python -m <module> <arguments>``: the command behind a result, for its header."""
    return f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:])


# ---------------------------------------------------------------------------------- statistics


def group_rows(rows: Iterable[dict], key: Callable[[dict], Hashable]) -> dict[Hashable, list[dict]]:
    """Rows by ``key(row)``, groups in order of first appearance, rows in order within each."""
    groups: dict[Hashable, list[dict]] = defaultdict(list)
    for r in rows:
        groups[key(r)].append(r)
    return dict(groups)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 2000, seed: int = 0) -> dict:
    """Mean of ``a - b`` over paired items with a paired percentile-bootstrap 95% interval (items
    resampled together, seeded): ``{"n", "diff", "low", "high"}``.

    The draws are ``scorers.videoqa.bootstrap_interval``'s; the quantiles are taken at exactly
    0.025 / 0.975 (that function's ``(1 - level) / 2`` is 0.025000000000000022).
    """
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if d.size == 0:
        return {"n": 0, "diff": float("nan"), "low": float("nan"), "high": float("nan")}
    boot = np.random.default_rng(seed).choice(d, (n_boot, d.size)).mean(1)
    return {"n": int(d.size), "diff": float(d.mean()), "low": float(np.quantile(boot, 0.025)),
            "high": float(np.quantile(boot, 0.975))}


def spearman(x, y) -> float:
    """Spearman rank correlation with average ranks for ties; NaN when either side is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(np.corrcoef(_ranks(x), _ranks(y))[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=np.float64)
    for value in np.unique(v):  # ties share their mean rank
        tied = v == value
        ranks[tied] = ranks[tied].mean()
    return ranks


# ---------------------------------------------------------------------------------- tables and files


def accuracy_cell(acc: Mapping[str, float]) -> str:
    """An accuracy with its interval (``scorers.videoqa.Accuracy.to_dict()``) as ``54.0 [44, 64]`` (%)."""
    return f"{100 * acc['value']:.1f} [{100 * acc['low']:.0f}, {100 * acc['high']:.0f}]"


def paired_cell(diff: Mapping[str, float], scale: float = 100.0) -> str:
    """A ``paired_bootstrap`` result as ``+3.0 [-1.0, +7.0]`` (percentage points by default)."""
    return f"{scale * diff['diff']:+.1f} [{scale * diff['low']:+.1f}, {scale * diff['high']:+.1f}]"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a Markdown table (cells as given, ``str()`` of anything else)."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(map(str, r)) + " |" for r in rows]


def write_results(out: str | os.PathLike, meta: Mapping, summary: Any, rows: Sequence[dict], markdown: str) -> tuple[Path, Path]:
    """``results.json`` (``meta``, ``summary``, every row) and ``results.md``, each written atomically."""
    out = Path(out)
    js = write_text_atomic(out / "results.json", json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1, default=str))
    return js, write_text_atomic(out / "results.md", markdown)


# ---------------------------------------------------------------------------------- the Pareto plot


def pareto_plot(points: Sequence[Mapping[str, Any]], path: str | os.PathLike, colours: Mapping[str, tuple[int, int, int]],
                size: tuple[int, int] = (1000, 640), x_label: str = "mean TFLOPs per question (log)",
                more_panels: Sequence[tuple[Sequence[Mapping[str, Any]], str]] = ()) -> Path:
    """Accuracy against compute (log x), the Pareto front drawn as a grey line, written atomically as PNG.

    Each point is ``{"x": compute > 0, "y": accuracy in [0, 1], "group": key of colours, "tag": text
    beside it}``, written beside the points on the front and any alone in its group; the legend lists ``colours``.
    ``more_panels``: further ``(points, x_label)`` panels drawn
    side by side at the same size (say, the same methods against wall time). Drawn with PIL: matplotlib
    is not a dependency of Atelier.
    """
    from PIL import Image

    panels = [_pareto_panel(points, colours, size, x_label)] + [_pareto_panel(p, colours, size, x) for p, x in more_panels]
    img = Image.new("RGB", (size[0] * len(panels), size[1]), "white")
    for i, panel in enumerate(panels):
        img.paste(panel, (i * size[0], 0))
    return _save_png(img, path)


def _pareto_panel(points, colours, size, x_label):
    from PIL import Image, ImageDraw

    pts = [p for p in points if p["x"] > 0]
    W, H = size
    left, right, top, bottom = 80, 220, 40, 60
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    if not pts:
        d.text((W // 2 - 60, H // 2), "no data", fill="black")
        return img
    xs = np.log10([p["x"] for p in pts])
    ys = np.array([100 * p["y"] for p in pts])
    x0 = float(np.floor(xs.min()))
    x1 = max(float(np.ceil(xs.max())), x0 + 1)
    y0, y1 = max(0.0, float(np.floor(ys.min() / 20) * 20 - 20)), 100.0  # the points' band, in steps of 20

    def px(x, y):
        return (left + (x - x0) / (x1 - x0) * (W - left - right), top + (y1 - y) / (y1 - y0) * (H - top - bottom))

    d.rectangle([left, top, W - right, H - bottom], outline="black")
    for e in range(int(x0), int(x1) + 1):
        x, _ = px(e, y0)
        d.line([x, H - bottom, x, H - bottom + 5], fill="black")
        d.text((x - 14, H - bottom + 8), f"1e{e}", fill="black")
    for y in range(int(y0), 101, 20):
        _, yy = px(x0, y)
        d.line([left - 5, yy, left, yy], fill="black")
        d.line([left, yy, W - right, yy], fill=(230, 230, 230))
        d.text((left - 32, yy - 6), f"{y}%", fill="black")
    d.text(((W - right + left) // 2 - 90, H - 25), x_label, fill="black")
    d.text((8, top - 28), f"accuracy vs {x_label.split(' per ')[0].replace('mean ', '')} (Pareto front in grey)", fill="black")
    front = pareto_front(list(zip(xs, ys)))
    if len(front) > 1:
        d.line([px(x, y) for x, y in front], fill=(150, 150, 150), width=2)
    on_front = set(front)
    groups = [p["group"] for p in pts]
    placed: list[tuple[float, float, float, float]] = []
    for p, x, y in zip(pts, xs, ys):
        cx, cy = px(x, y)
        colour = colours.get(p["group"], (0, 0, 0))
        d.ellipse([cx - 5, cy - 5, cx + 5, cy + 5], fill=colour, outline="black")
        if (x, y) in on_front or groups.count(p["group"]) == 1:  # the rest unlabelled: a sweep's tags would overlap
            box = d.textbbox((cx + 7, cy - 6), p["tag"])
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):  # no label over another
                d.text((cx + 7, cy - 6), p["tag"], fill=colour)
                placed.append(box)
    for i, (name, colour) in enumerate(colours.items()):
        y = top + 10 + 20 * i
        d.ellipse([W - right + 15, y, W - right + 25, y + 10], fill=colour, outline="black")
        d.text((W - right + 32, y - 1), name, fill="black")
    return img


def _save_png(img, path: str | os.PathLike) -> Path:
    with atomic_path(path) as tmp:
        img.save(tmp)
    return Path(path)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both cost (lower) and accuracy (higher), by increasing cost."""
    front, best = [], -np.inf
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if y > best:
            front.append((x, y))
            best = y
    return front
