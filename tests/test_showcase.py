"""Each method's showcase item (the rule in app/showcase.py: the first held-out TEST item) runs through the code
path the demo gallery uses, and is right; for a method whose quality issue is open (CLEAR 49, Bernini 51) or whose
item turns out wrong, the gallery section and the web tab's example say so in words. The item is the rule's, never
another one picked to pass."""

import re

import pytest

from app import showcase
from app.demo import showcase_section
from app.gallery import Gallery

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_rule_draws_the_first_test_item():
    from worldgen.tasks.base import split_seed

    assert showcase.seed(0) == split_seed("test", 0, 0)
    for verb in ("ask", "segment", "motion", "reason"):  # worldgen records carry their world seed
        assert showcase.item(verb, 0).record["seed"] == split_seed("test", 0, 0)
    from training.bernini_data import world_sample

    assert showcase.item("generate", 0).record["world_seed"] == world_sample("t2v", "test", 0, 0).seed
    assert showcase.item("meme", 0).record["index"] == 0


def test_the_web_examples_follow_the_rule_and_show_the_truth():
    from app.examples import EXAMPLES
    from pipelines.registry import get_app

    for verb, rows in EXAMPLES.items():
        rows = rows()
        assert len(rows) >= showcase.WEB_ROWS
        for i, row in enumerate(rows[: showcase.WEB_ROWS]):
            assert len(row) == len(get_app(verb).inputs) + 1, verb  # the inputs, then the truth column
            it = showcase.item(verb, i)
            assert row[-1].startswith(f"truth: {it.truth}"), (verb, row[-1])
            text_inputs = [v for v in it.inputs.values() if isinstance(v, str) and not v.startswith("/")]
            assert all(v in row for v in text_inputs), (verb, i)  # the rule's item, not another


def test_the_stored_verdicts_cover_every_showcase():
    stored = showcase.stored_verdicts()
    assert set(stored) == set(showcase.VERBS)
    assert all(v["index"] == 0 and v["seed"] == showcase.seed(0) for v in stored.values())


@pytest.mark.parametrize("verb", showcase.VERBS)
def test_showcase_item(verb, tmp_path):
    section, verdict = showcase_section(verb, tmp_path)
    assert section.truth and section.truth_images is not None and section.verdict.startswith(("right:", "wrong:"))
    # the web tab reads the verdict computed by `python -m app.showcase`: it must be this one
    stored = showcase.stored_verdicts()[verb]["verdict"]
    assert stored["right"] == verdict.right and re.sub(r"p = [\d.]+", "", stored["answer"]) == re.sub(r"p = [\d.]+", "", verdict.answer), \
        f"app/showcase_verdicts.json is stale for {verb}: rerun `python -m app.showcase`"
    page = Gallery(tmp_path / "page")
    page.add(section)
    html = page.write().read_text()
    assert "<b>truth:</b>" in html
    if verb not in showcase.OPEN_QUALITY_ISSUES:
        assert verdict.right, verdict.words()
        assert section.verdict.startswith("right:") and "<b>right:</b>" in html
        return
    if verdict.right:  # the open issue's method got its item right: nothing to warn about, but say it
        assert "<b>right:</b>" in html
        return
    from app.examples import EXAMPLES

    issue = showcase.OPEN_QUALITY_ISSUES[verb]
    assert section.verdict.startswith("wrong: the model answered") and f"issue {issue}" in section.verdict
    assert "<b>wrong:</b>" in html and f"issue {issue}" in html
    cell = EXAMPLES[verb]()[0][-1]
    assert "builtin models wrong: the model answered" in cell and f"issue {issue}" in cell, cell
