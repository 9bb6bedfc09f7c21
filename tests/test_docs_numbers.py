"""Docs that agree with themselves: every number in docs/BENCHMARKS.md's summary table appears in the section its row
links to, and the showcase's numbers are read from where they are measured."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"[+-]?\d[\d,]*(?:\.\d+)?")


def sections(text: str) -> dict[str, str]:
    """Each ``## `` section's body, by its GitHub anchor."""
    out = {}
    heads = list(re.finditer(r"^## (.+)$", text, re.M))
    for m, nxt in zip(heads, heads[1:] + [None]):
        anchor = re.sub(r"[^a-z0-9 _-]", "", m.group(1).lower()).replace(" ", "-")
        out[anchor] = text[m.end(): nxt.start() if nxt else len(text)]
    return out


def summary_rows(text: str) -> list[tuple[str, str, list[str]]]:
    """``(title, anchor, cells)`` of the summary table's rows."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"\| \[(.+?)\]\(#(.+?)\) \| (.+) \|$", line)
        if m:
            rows.append((m.group(1), m.group(2), [c.strip() for c in m.group(3).split(" | ")]))
    return rows


def missing_numbers(text: str) -> list[str]:
    found, body = [], sections(text)
    for title, anchor, cells in summary_rows(text):
        assert anchor in body, f"summary row {title!r} links to #{anchor}, which no section has"
        found += [f"{title}: {n} ({cell[:60]}...)" for cell in cells for n in NUMBER.findall(cell) if n.lstrip("+-") not in body[anchor]]
    return found


def test_every_summary_number_comes_from_its_section():
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    assert len(summary_rows(text)) >= 10
    assert missing_numbers(text) == []


def test_the_check_catches_a_summary_number_its_section_does_not_hold():
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    title, _, cells = summary_rows(text)[0]
    wrong = text.replace(cells[0], cells[0] + "; 987.6 things", 1)
    assert any("987.6" in m for m in missing_numbers(wrong))


def test_the_showcase_reads_the_planners_share_from_its_measurement():
    from app.demo import about
    from planners.loading import INSTANCES_DIR

    acc = json.loads((INSTANCES_DIR / "eval.json").read_text())["test"]["tracker"]["acc"]
    assert f"{acc:.0%}" in about("segment")
