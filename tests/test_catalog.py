"""weights/catalog.json, which `atelier info` prints, names only verbs and options that exist."""

from __future__ import annotations

import json
from pathlib import Path

from app.cli import build_parser
from app.info import collect_info, format_info
from pipelines.registry import apps

CATALOG = Path(__file__).resolve().parents[1] / "weights" / "catalog.json"


def test_every_entry_names_a_verb_and_one_of_its_options():
    catalog = json.loads(CATALOG.read_text())["pipelines"]
    parser = build_parser()
    verbs = parser._subparsers._group_actions[0].choices
    for verb, entries in catalog.items():
        assert verb in apps(), verb
        options = {s for a in verbs[verb]._actions for s in a.option_strings}
        for entry in entries:
            assert entry["flag"] in options, (verb, entry)
            assert isinstance(entry["official"], bool) and entry["id"] and entry["note"], entry


def test_info_lists_the_official_checkpoints():
    text = format_info(collect_info())
    assert "* ByteDance/Bernini-R-Diffusers" in text and "docs/FIDELITY.md" in text
