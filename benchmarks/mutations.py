"""Mutation check of docs/FIDELITY.md: does the test a "matches" line names go red when the code it holds is wrong?

Each entry of ``MUTATIONS`` is a deliberate wrong change to the code behind one claim (old text -> new text in one
source file) and the pytest node id the doc names for that claim. The run copies the repository's tracked files
(``git ls-files``, as they are in the working tree) into a fresh temporary folder once, then per entry: runs the test
unmutated (it must pass: a red or skipped test proves nothing), applies the change in the copy, runs the test again
(red = the mutation is caught), and puts the original text back. The repository itself is never written, except
for the results under ``outputs/bench/mutations/`` (``results.md``, ``results.json``).

An entry whose old text does not occur exactly once in its file is reported as broken (the change would be
ambiguous or would not apply). Exit code 1 when any mutation is not caught (or an entry is broken / not green before).

    python -m benchmarks.mutations            # every entry
    python -m benchmarks.mutations --list     # the entries, numbered
    python -m benchmarks.mutations --only 3   # entry 3 alone
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

from core.arguments import StrictParser

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "outputs" / "bench" / "mutations"


@dataclass(frozen=True)
class Mutation:
    claim: str  # the FIDELITY.md claim, in a few words
    path: str  # source file, relative to the repository root
    old: str  # text that must occur exactly once in it
    new: str  # the deliberate wrong change
    test: str  # the node id FIDELITY.md names for the claim, expected to go red


L = "tests/test_bernini_official_layout.py::"
F = "tests/test_bernini_fidelity.py::"
H = "tests/test_humor_fidelity.py::"
G = "tests/test_gridprobe_fidelity.py::"

MUTATIONS = [
    # -- Bernini, loading
    Mutation("Bernini loading: strict also for diffusers folders (a missing tensor is an error)",
             "renderers/bernini_official.py", "    if missing or unexpected or bad:\n",
             "    if unexpected or bad:\n",  # a dropped tensor left to diffusers, which only warns and random-inits
             L + "test_a_missing_renamed_or_extra_tensor_is_an_error_naming_it[r-drop-expert]"),
    Mutation("Bernini loading: strict, the error names the official key (full layout)",
             "core/shards.py", "    missing = sorted(official_name(n) for n in shapes\n",
             "    missing = sorted(n for n in shapes\n",  # still an error, but naming our module's name, not the release's key
             L + "test_a_missing_renamed_or_extra_tensor_is_an_error_naming_it[drop-head]"),
    Mutation("Bernini loading: release detected from any part of the path (HF cache)",
             "renderers/bernini_official.py", 'return "v2" if any(_V2.search(part) for part in path.parts) else "v1"',
             'return "v2" if _V2.search(path.name) else "v1"',  # the last path part only
             L + "test_release_is_detected_from_the_folder_name_and_can_be_given"),
    # -- Bernini, numerics
    Mutation("Bernini-R APG: norm cap 50",
             "renderers/guidance.py", "    norm_threshold: float = 50.0\n", "    norm_threshold: float = 100.0\n",
             F + "test_t2v_apg_and_v2v_apg_are_x0_space_per_frame_apg"),
    Mutation("Bernini-R APG: eta 0.5",
             "renderers/guidance.py", "    eta: float = 0.5\n    momentum", "    eta: float = 0.6\n    momentum",
             F + "test_t2v_apg_and_v2v_apg_are_x0_space_per_frame_apg"),
    Mutation("Bernini-R APG: norms per frame over (C, H, W)",
             "renderers/guidance.py", "    dims = (-1, -2, -4)\n", "    dims = (-1, -2, -3, -4)\n",  # across frames too
             F + "test_t2v_apg_and_v2v_apg_are_x0_space_per_frame_apg"),
    Mutation("Bernini planner: a loaded release passes the official streams",
             "planners/semantic/planner.py", 'OFFICIAL_STREAMS = {"imgcond_drop": "visuals"',
             'OFFICIAL_STREAMS = {"imgcond_drop": "text"',
             L + "test_a_loaded_release_reaches_its_planner_with_the_official_streams"),
    Mutation("Bernini task tables: R's flow shift 3.0",
             "pipelines/bernini/tasks.py", '"t2v": _base_scales("t2v_apg", flow_shift=3.0)',
             '"t2v": _base_scales("t2v_apg", flow_shift=5.0)',  # the demo's dead flow_shift=5.0
             F + "test_task_tables_per_release"),
    # -- HUMOR
    Mutation("HUMOR reward head: position bias 3.0 * i / S",
             "planners/meme_reward.py", "heads: int = 4, position_bias_scale: float = 3.0):",
             "heads: int = 4, position_bias_scale: float = 2.0):",
             H + "test_pooling_and_head_equal_the_official_definition_on_random_hidden_states"),
    Mutation("HUMOR reward head: attention scale d^-0.5 (head width)",
             "planners/meme_reward.py", "torch.tensor(d ** -0.5,", "torch.tensor(H ** -0.5,",  # the full width
             H + "test_pooling_and_head_equal_the_official_definition_on_random_hidden_states"),
    Mutation("HUMOR decision: argmax, class 0 = first meme better",
             "planners/meme_reward.py", "return float(int(torch.argmax(ab)) == 0)",
             "return float(int(torch.argmax(ab)) == 1)",  # the classes read the wrong way round
             H + "test_the_released_layout_loads_and_scores_a_pair"),
    # -- GridProbe
    Mutation("GridProbe: letter scores pooled by log-sum-exp",
             "planners/protocol.py", "scores = torch.stack([torch.logsumexp(logp[list(ids)], dim=0)",
             "scores = torch.stack([torch.amax(logp[list(ids)], dim=0)",  # the best surface form only
             G + "test_official_letter_pooling_matches_the_definition"),
    Mutation("GridProbe: the Video-MME v1 prompt text",
             "planners/protocol.py", "Answer with the letter of the correct option (A, B, C, or D).",
             "Answer with the letter of the correct option.",  # LongVideoBench's last line
             G + "test_videomme_v1_prompt_is_the_official_text"),
    Mutation("GridProbe: probe size official_crossmodel 224 x 224 (50176 px)",
             "pipelines/gridprobe/frames.py", '"official_crossmodel": 50176}', '"official_crossmodel": 65536}',
             G + "test_official_probe_sizes"),
]


def env() -> dict[str, str]:
    # offline and one thread (the machine is shared); no .pyc written into the copy
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
            "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def copy_tracked(dst: Path) -> None:
    """The tracked files as they are now (uncommitted edits included); .venv, outputs/ and caches are untracked."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout.decode()
    for name in filter(None, names.split("\0")):
        src = ROOT / name
        if src.is_file() or src.is_symlink():  # a tracked file deleted in the work tree is skipped
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name, follow_symlinks=False)


def check_imports_from(copy: Path) -> None:
    """The venv has atelier installed editable (pointing at ROOT): make sure the copy's code is what gets imported,
    else every mutation would go unnoticed."""
    got = subprocess.run([sys.executable, "-c", "import core; print(core.__file__)"], cwd=copy, env=env(),
                         capture_output=True, text=True, check=True).stdout.strip()
    if not Path(got).resolve().is_relative_to(copy.resolve()):
        sys.exit(f"the copy imports {got}, not its own code: the check would be meaningless")


def run_test(copy: Path, node: str) -> tuple[str, float, str]:
    """"passed", "failed" or "skipped" (a skip is no evidence either way), the seconds it took, and the first error
    line of a failure (so a reader can tell an assertion from a mutation that merely broke the import). The counts
    come from a JUnit report, not the terminal text (the project's addopts already make it quiet)."""
    report = copy.parent / "report.xml"  # beside the copy, not in it
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", f"--junitxml={report}", node],
                       cwd=copy, env=env(), capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if p.returncode:  # 1 = a test failed; also errors, or 5 = no test of that id (caught by the green-before run)
        why = next((ln[1:].strip() for ln in p.stdout.splitlines() if ln.startswith("E ")), p.stdout.strip()[-200:])
        return "failed", seconds, why
    suite = next(ET.parse(report).getroot().iter("testsuite"))
    ran, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    return ("passed" if ran and not skipped else "skipped"), seconds, ""  # a partly skipped test counts as skipped


def check(copy: Path, i: int, m: Mutation) -> dict:
    row = {"n": i, **asdict(m), "caught": False, "status": "", "seconds": 0.0, "why": ""}
    path = copy / m.path
    text = path.read_text() if path.is_file() else ""
    if text.count(m.old) != 1:
        row["status"] = f"broken: old text found {text.count(m.old)} times"
        return row
    before, _, row["why"] = run_test(copy, m.test)
    if before != "passed":
        row["status"] = f"not green before ({before})"
        return row
    path.write_text(text.replace(m.old, m.new))
    try:
        after, row["seconds"], row["why"] = run_test(copy, m.test)
    finally:
        path.write_text(text)  # restored whatever happened, so the next entry sees the original code
    row["seconds"] = round(row["seconds"], 1)
    row["caught"] = after == "failed"
    row["status"] = "caught" if row["caught"] else f"not caught ({after})"
    return row


def short(s: str) -> str:
    return " ".join(s.split()).replace("|", "\\|")


def table(rows: list[dict]) -> str:
    lines = ["| # | claim | file | the change | test | caught | seconds |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        caught = "yes" if r["caught"] else f"no: {r['status']}"
        lines.append(f"| {r['n']} | {r['claim']} | `{r['path']}` | `{short(r['old'])}` -> `{short(r['new'])}` "
                     f"| `{r['test'].split('::', 1)[1]}` | {caught} | {r['seconds']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = StrictParser(prog="python -m benchmarks.mutations", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", type=int, metavar="N", help="run entry N alone (numbers as --list shows them)")
    ap.add_argument("--list", action="store_true", help="list the entries and exit")
    args = ap.parse_args(argv)
    if args.list:
        for i, m in enumerate(MUTATIONS, 1):
            print(f"{i:2d}. {m.claim}\n    {m.path}: {m.old.strip()!r} -> {m.new.strip()!r}\n    {m.test}", flush=True)
        return 0
    chosen = list(enumerate(MUTATIONS, 1))
    if args.only is not None:
        if not 1 <= args.only <= len(MUTATIONS):
            ap.error(f"--only takes 1 to {len(MUTATIONS)}")
        chosen = [chosen[args.only - 1]]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="atelier-mutations-") as tmp:
        copy = Path(tmp) / "repo"
        copy_tracked(copy)
        check_imports_from(copy)
        rows = []
        for i, m in chosen:
            rows.append(check(copy, i, m))
            print(f"{i:2d}. {rows[-1]['status']:<12} {m.claim}", flush=True)
    total = time.perf_counter() - start
    md = table(rows) + f"\n\n{sum(r['caught'] for r in rows)} of {len(rows)} caught; total {total:.0f} s.\n"
    print("\n" + md)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.md").write_text(md)
    (OUT / "results.json").write_text(json.dumps({"rows": rows, "total_seconds": round(total, 1),
                                                  "date": time.strftime("%Y-%m-%d")}, indent=1) + "\n")
    return 0 if all(r["caught"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
