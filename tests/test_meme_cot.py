"""HUMOR's meme CoT text layer (specs/humor.md [RL-CODE] output schema and format reward, b.2 hierarchy, d-8)."""

import random

import numpy as np
import pytest

from core.errors import InputError
from planners.meme_cot import (
    SECTIONS,
    MemeCoT,
    MemeFormatError,
    ReasoningPath,
    boxes_from_caption,
    build_prompt,
    format_checks,
    format_instructions,
    format_reward,
    parse_meme_cot,
    render_cot,
)
from planners.protocol import ImagePart, TextPart, check_messages


def cot_one_box():
    """The bare published schema: no path layer."""
    return MemeCoT(description="A cat stares, pupils wide.", usage_scenarios="Shock at sudden news.",
                   text_analysis="One line, deadpan.", step1="Work topic: the cat is the employee.",
                   step2="Shorten to a single time stamp.", text_on_meme=["Friday 5:55 PM"])


def cot_two_boxes():
    paths = [ReasoningPath("office", "late requests -> 'just one more thing'"),
             ReasoningPath("gym", "trainer's 'one more rep' -> it means 20"),
             ReasoningPath("school", "pop quiz -> the cat is the student")]
    return MemeCoT(description="An orange cat, dilated pupils, radial background.",
                   usage_scenarios="Unexpected shock followed by an exaggerated reaction.",
                   text_analysis="Setup on top, payoff at the bottom.", paths=paths, anchor=1,
                   step1="The topic is fitness; the puffed fur mirrors a gym-goer's panic.",
                   step2="Setup: the trainer's phrase. Payoff: numeric exaggeration.",
                   text_on_meme=["When your trainer says 'one more rep'", "It actually means 20"])


def cot_four_boxes():
    paths = [ReasoningPath("remote work (video calls)", "camera on -> panic\nmute button -> relief"),
             ReasoningPath("cooking", "recipe steps escalate")]
    return MemeCoT(description="Four panels, the same face growing brighter.\n\nEach panel brighter than the last.",
                   usage_scenarios="Escalation from plain to absurdly 'enlightened'.", text_analysis="",
                   paths=paths, anchor=0, specific_analysis="The user asked about meetings.",
                   step1="Meetings escalate naturally.\nEach step is more absurd.", step2="",
                   text_on_meme=["Email", "Call", "Video call", "Meeting that could have been an email"])


CASES = [cot_one_box, cot_two_boxes, cot_four_boxes]


@pytest.mark.parametrize("make", CASES)
def test_round_trip(make):
    cot = make()
    text = render_cot(cot)
    back = parse_meme_cot(text, cot.num_boxes)
    assert back == cot and back.raw == text
    assert render_cot(back) == text
    assert format_reward(text, cot.num_boxes) == 1.0
    assert format_reward(text, cot.num_boxes, partial=False) == 1.0
    if cot.paths:
        assert parse_meme_cot(text, cot.num_boxes, num_paths=len(cot.paths)) == cot
        assert format_reward(text, cot.num_boxes, num_paths=len(cot.paths)) == 1.0
    for header in SECTIONS.values():
        assert header in text


def test_render_writes_the_schema():
    text = render_cot(cot_two_boxes())
    lines = text.splitlines()
    assert lines[0] == "[Comprehensive Description Section]"
    assert "Path 2 (gym): trainer's 'one more rep' -> it means 20" in lines
    assert any(line.startswith("Step 1: Anchor on Path 2 (gym): ") for line in lines)
    assert lines[-3:] == ["Text on the Meme:", "box1: When your trainer says 'one more rep'", "box2: It actually means 20"]


def test_fields_and_aliases():
    cot = parse_meme_cot(render_cot(cot_two_boxes()), 2)
    assert cot.intent == cot.usage_scenarios
    assert cot.anchored_path == ReasoningPath("gym", "trainer's 'one more rep' -> it means 20")
    assert cot.anchor_reason == cot.step1 and cot.captions == cot.text_on_meme
    assert cot.to_dict()["paths"][1] == {"context": "gym", "text": "trainer's 'one more rep' -> it means 20"}
    one = parse_meme_cot(render_cot(cot_one_box()), 1)
    assert one.paths == [] and one.anchor is None and one.anchored_path is None


MESSY = """Sure! Here is my analysis.

## **[Comprehensive Description Section]**
The image shows the *classic* shocked cat.


**[usage scenarios section]**
Reaction memes; group chats.

Some extra prose the model added between sections.

### [TEXT ANALYSIS SECTION]:
Wordplay and contrast.
**Path 1 (office):** late requests
  and the boss.
- path 2 [gym]: one more rep

**[Specific Analysis with User Input]**
**Step 1:** Anchored on Path 2 - the topic is fitness.
**Step 2: Numeric exaggeration**

**Text on the Meme**:
**box1:** "When your trainer says one more rep"
BOX 2: **It actually means 20**

Hope you enjoy this meme!
"""


def test_tolerant_parsing():
    cot = parse_meme_cot(MESSY, 2, num_paths=2)
    assert cot.description == "The image shows the *classic* shocked cat."
    assert cot.usage_scenarios == "Reaction memes; group chats.\n\nSome extra prose the model added between sections."
    assert cot.text_analysis == "Wordplay and contrast."
    assert cot.paths == [ReasoningPath("office", "late requests\n  and the boss."), ReasoningPath("gym", "one more rep")]
    assert cot.anchor == 1 and cot.step1 == "the topic is fitness."
    assert cot.step2 == "Numeric exaggeration"
    assert cot.text_on_meme == ["When your trainer says one more rep", "It actually means 20"]
    assert format_reward(MESSY, 2) == 1.0 and format_reward(MESSY, 2, num_paths=2) == 1.0
    # Windows line ends and trailing spaces change nothing
    assert parse_meme_cot(MESSY.replace("\n", "  \r\n"), 2) == cot


def test_published_layout_without_paths():
    """The layout of the published demonstration (headers, Step lines) with box lines, our own words."""
    text = ("[Comprehensive Description Section]  \nA shocked cat.\n\n[Usage Scenarios Section]  \n1. Rants\n2. Gaming\n\n"
            "[Text Analysis Section]  \nSetup then payoff.\n\n[Specific Analysis with User Input]  \n"
            "Step 1: Given [Theme: Fitness], link the fur to a gym-goer.  \nStep 2: Absurd escalation.\n\n"
            "Text on the Meme:  \nbox1: When the pre-workout kicks in\nbox2: But your willpower checks out early\n")
    cot = parse_meme_cot(text, 2)
    assert cot.paths == [] and cot.anchor is None
    assert cot.step1 == "Given [Theme: Fitness], link the fur to a gym-goer."
    assert cot.usage_scenarios == "1. Rants\n2. Gaming"
    # the demonstration's own caption (quoted lines, no boxN:) is not in the schema
    quoted = text.split("Text on the Meme:")[0] + 'Text on the Meme:\n"When the pre-workout kicks in\nBut your willpower"\n'
    with pytest.raises(MemeFormatError):
        parse_meme_cot(quoted, 2)
    assert format_reward(quoted, 2) == pytest.approx(7 / 10)


def _drop(line):
    return lambda t: "\n".join(x for x in t.splitlines() if x != line)


def _sub(old, new):
    def f(t):
        assert old in t
        return t.replace(old, new)
    return f


BASE = render_cot(cot_two_boxes())
# (defect, mutation of BASE, num_boxes, a phrase the error names, failed published checks)
DEFECTS = [
    ("missing section", _drop("[Usage Scenarios Section]"), 2, "[Usage Scenarios Section]", {"usage_scenarios"}),
    ("missing description", _drop("[Comprehensive Description Section]"), 2, "[Comprehensive Description Section]", {"description"}),
    ("missing Step 2", _sub("Step 2: ", "Then: "), 2, "Step 2:", {"step2"}),
    ("missing Step 1", _sub("Step 1: ", "First: "), 2, "Step 1:", {"step1"}),
    ("Step 2 before Step 1", lambda t: t.replace("Step 1:", "@@").replace("Step 2:", "Step 1:").replace("@@", "Step 2:"),
     2, "Step 2: after Step 1:", {"step2"}),
    ("steps outside their section", lambda t: t.replace("[Specific Analysis with User Input]\n", "").replace(
        "\n\nText on the Meme:", "\n[Specific Analysis with User Input]\n\nText on the Meme:"), 2,
     "Step 1: inside [Specific Analysis with User Input]", {"step1", "step2"}),
    ("too few boxes", lambda t: t, 3, "exactly 3 box line(s)", {"box_count"}),
    ("too many boxes", lambda t: t.rstrip("\n") + "\nbox3: and a third\n", 2, "found 3", {"box_count"}),
    ("empty box", _sub("box2: It actually means 20", "box2:   "), 2, "box2 (empty)", {"boxes_nonempty"}),
    ("boxes numbered 1, 3", _sub("box2:", "box3:"), 2, "found box1, box3", {"box_count"}),
    ("boxes out of order", lambda t: t.replace("box1:", "@@").replace("box2:", "box1:").replace("@@", "box2:"), 2,
     "in order", {"box_count"}),
    ("missing Text on the Meme", _drop("Text on the Meme:"), 2, "Text on the Meme:",
     {"text_on_meme", "boxes", "boxes_nonempty", "box_count"}),
    ("captions without box labels", lambda t: t.replace("box1: ", "").replace("box2: ", ""), 2, "box lines (box1: ...)",
     {"boxes", "boxes_nonempty", "box_count"}),
    ("header mid-sentence", _sub("[Usage Scenarios Section]", "See the [Usage Scenarios Section]"), 2,
     "[Usage Scenarios Section]", {"usage_scenarios"}),
]


@pytest.mark.parametrize("name, mutate, num_boxes, phrase, failed", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_defects(name, mutate, num_boxes, phrase, failed):
    text = mutate(BASE)
    with pytest.raises(MemeFormatError) as info:
        parse_meme_cot(text, num_boxes)
    err = info.value
    assert isinstance(err, InputError) and err.name == "meme_cot"
    assert any(phrase in m for m in err.missing), err.missing
    assert phrase in str(err) and "Expected:" in str(err)
    checks = format_checks(text, num_boxes)
    assert {k for k, ok in checks.items() if not ok} == failed
    assert format_reward(text, num_boxes) == pytest.approx(1 - len(failed) / 10)
    assert format_reward(text, num_boxes, partial=False) == 0.0


PATH_DEFECTS = [
    ("wrong number of paths", lambda t: t, 4, "exactly 4 Path lines"),
    ("anchor out of range", _sub("Anchor on Path 2", "Anchor on Path 5"), 3, "there are 3 paths"),
    ("no anchor", _sub("Anchor on Path 2 (gym): ", ""), 3, "Step 1: Anchor on Path k"),
    ("path without context", _sub("Path 1 (office):", "Path 1:"), 3, "(context) for Path 1"),
    ("paths misnumbered", _sub("Path 3 (school)", "Path 4 (school)"), 3, "numbered Path 1..Path 3"),
]


@pytest.mark.parametrize("name, mutate, num_paths, phrase", PATH_DEFECTS, ids=[d[0] for d in PATH_DEFECTS])
def test_path_layer_defects(name, mutate, num_paths, phrase):
    text = mutate(BASE)
    with pytest.raises(MemeFormatError) as info:
        parse_meme_cot(text, 2, num_paths=num_paths)
    assert any(phrase in m for m in info.value.missing), info.value.missing
    # the published reward does not score the path layer; with num_paths it has two more checks
    assert format_reward(text, 2) == 1.0
    assert format_reward(text, 2, num_paths=num_paths) == pytest.approx(11 / 12)
    assert format_reward(text, 2, num_paths=num_paths, partial=False) == 0.0


def test_path_layer_is_whole_or_absent():
    bare = render_cot(cot_one_box())
    assert parse_meme_cot(bare, 1).paths == []
    with pytest.raises(MemeFormatError, match="Path lines"):
        parse_meme_cot(bare, 1, num_paths=3)
    anchored = bare.replace("Step 1: ", "Step 1: Anchor on Path 1 (work): ")
    with pytest.raises(MemeFormatError, match="there are 0 paths"):
        parse_meme_cot(anchored, 1)
    unanchored = BASE.replace("Anchor on Path 2 (gym): ", "")
    with pytest.raises(MemeFormatError, match="Anchor on Path k"):
        parse_meme_cot(unanchored, 2)


def test_only_typed_errors_and_reward_agrees_with_parser():
    """Random damage to valid texts: the parser returns a MemeCoT or raises MemeFormatError, nothing else, and
    the reward is 1.0 exactly when the (path-requiring) parse succeeds."""
    rng = random.Random(0)
    texts = [render_cot(make()) for make in CASES] + [MESSY]
    for _ in range(300):
        text = rng.choice(texts)
        lines = text.splitlines()
        for _ in range(rng.randint(1, 3)):
            op, i = rng.random(), rng.randrange(len(lines))
            if op < 0.4:
                del lines[i]
            elif op < 0.7:
                lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
            else:
                lines.insert(i, rng.choice(["box9: x", "Step 2:", "Path 7 (x): y", "", "[Text Analysis Section]", "**"]))
            if not lines:
                lines = [""]
        damaged = "\n".join(lines)
        for n in (1, 2, 4):
            for k in (None, 2, 3):
                try:
                    parse_meme_cot(damaged, n, num_paths=k)
                    ok = True
                except MemeFormatError:
                    ok = False
                if k is not None:
                    assert ok == (format_reward(damaged, n, num_paths=k) == 1.0)
                elif ok:
                    assert format_reward(damaged, n) == 1.0


@pytest.mark.parametrize("text", ["", "   \n\n", "lol", "box1: hi", "Text on the Meme:\nbox1: hi", "\x00[]()**::"])
def test_garbage_raises_the_format_error(text):
    with pytest.raises(MemeFormatError) as info:
        parse_meme_cot(text, 1)
    assert info.value.missing
    assert 0.0 <= format_reward(text, 1) < 1.0


def test_bad_arguments():
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(InputError):
            parse_meme_cot(BASE, bad)
        with pytest.raises(InputError):
            format_reward(BASE, bad)
    with pytest.raises(InputError):
        parse_meme_cot(None, 2)
    with pytest.raises(InputError):
        parse_meme_cot(BASE, 2, num_paths=0)
    with pytest.raises(InputError):
        format_reward(BASE, 2, partial=1)


def test_excerpt_is_short():
    with pytest.raises(MemeFormatError) as info:
        parse_meme_cot("word " * 500, 2)
    assert len(info.value.value) <= 60


def test_render_rejects_what_would_not_round_trip():
    good = cot_two_boxes()
    bad = [
        {"text_on_meme": ["ok", ""]}, {"text_on_meme": ["two\nlines", "ok"]}, {"text_on_meme": ['"quoted"', "ok"]},
        {"text_on_meme": []}, {"anchor": None}, {"description": "intro\nStep 1: sneaky"},
        {"usage_scenarios": "[Text Analysis Section] early"}, {"step2": " padded"},
        {"paths": [ReasoningPath("a)b", "x")], "anchor": 0}, {"paths": [ReasoningPath("a\nb", "x")], "anchor": 0}, {"paths": [ReasoningPath("", "x")], "anchor": 0},
        {"paths": [ReasoningPath("ctx", "")], "anchor": 0}, {"step1": "Anchor on Path 1: x", "paths": [], "anchor": None},
    ]
    for change in bad:
        cot = MemeCoT(**{**{f: getattr(good, f) for f in ("description", "usage_scenarios", "text_analysis", "paths",
                                                         "specific_analysis", "anchor", "step1", "step2", "text_on_meme")},
                         **change})
        with pytest.raises(InputError):
            render_cot(cot)
    with pytest.raises(InputError):
        MemeCoT(text_on_meme="one string")
    with pytest.raises(InputError):
        MemeCoT(text_on_meme=["a"], paths=[ReasoningPath("c", "t")], anchor=1)
    with pytest.raises(InputError):
        render_cot("not a cot")


def test_boxes_from_caption():
    assert boxes_from_caption({"top": "when you see  the red circle", "bottom": "blue square: not today"}) == [
        "when you see the red circle", "blue square: not today"]
    assert boxes_from_caption(("me", "also me")) == ["me", "also me"]
    for bad in ("me", {"top": "x"}, [], [1, 2]):
        with pytest.raises(InputError):
            boxes_from_caption(bad)


def test_build_prompt():
    image = np.zeros((16, 24, 3), np.uint8)
    messages = build_prompt("chase", 2, image=image, topic="mondays")
    assert check_messages(messages) == messages and len(messages) == 1
    parts = messages[0].content
    assert isinstance(parts[0], ImagePart) and parts[0].image.shape == (16, 24, 3)
    assert isinstance(parts[-1], TextPart)
    text = messages[0].text
    assert format_instructions(2, 3) in text
    for header in SECTIONS.values():
        assert header in text
    assert "Step 1:" in text and "Step 2:" in text
    assert '"chase"' in text and "2 text boxes" in text and "box2:" in text and "box3:" not in text
    assert "Path 3 (" in text and "Path 4" not in text and "mondays" in text
    # the format the prompt quotes is itself in the schema (but for its placeholder anchor "Path <k>")
    checks = format_checks(format_instructions(2, 3), 2, num_paths=3)
    assert [k for k, ok in checks.items() if not ok] == ["anchor"]

    plain = build_prompt("fall", 1, num_paths=None, system="You are funny.")
    assert [m.role for m in plain] == ["system", "user"]
    assert not plain[1].visuals
    assert "1 text box," in plain[1].text and "Path 1" not in plain[1].text and "box2:" not in plain[1].text
    assert build_prompt("x", 4, image=ImagePart(image))[0].visuals[0].image.shape == (16, 24, 3)
    for kwargs in ({"template_name": ""}, {"num_boxes": 0}, {"topic": ""}, {"num_paths": 0}, {"image": np.zeros((4, 4))}):
        with pytest.raises(InputError):
            build_prompt(**{"template_name": "chase", "num_boxes": 2, **kwargs})


def test_text_on_the_meme_mentioned_earlier():
    """A reasoning line that starts like the caption header does not hide the real one (its last header counts)."""
    text = BASE.replace("Setup on top, payoff at the bottom.", "Setup on top, payoff at the bottom.\nText on the Meme: keep it short.")
    cot = parse_meme_cot(text, 2)
    assert cot.text_analysis.endswith("Text on the Meme: keep it short.")
    assert cot.text_on_meme == cot_two_boxes().text_on_meme
