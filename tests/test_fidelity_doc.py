"""docs/FIDELITY.md: every test it names as the proof of a "matches" line exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "FIDELITY.md"


def test_every_named_test_exists():
    text = DOC.read_text()
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", text)
    assert len(named) >= 30, "the page names the tests that hold its claims"
    for path, name in named:
        source = ROOT / path
        assert source.is_file(), path
        tests = {n.name for n in ast.walk(ast.parse(source.read_text())) if isinstance(n, ast.FunctionDef)}
        assert name in tests, f"docs/FIDELITY.md names {path}::{name}, which does not exist"


def test_every_matches_list_item_names_a_test():
    for section in re.split(r"\*\*Matches\.\*\*|\*\*Numerics: matches\.\*\*|\*\*Loading: matches\.\*\*", DOC.read_text())[1:]:
        items = re.split(r"\n(?=- )", section.split("\n\n**")[0].strip())
        for item in items:
            assert "::test_" in item, f"a 'matches' line without its test: {item[:120]}"
