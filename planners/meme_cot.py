"""HUMOR's hierarchical multi-path meme CoT as text: the prompt that asks for it, the parser, the format reward
and the writer of SFT targets (specs/humor.md, "Update (2026-12): the group-RL code is public [RL-CODE]" and
b.2). No model here: sampling and training build on these functions.

**The output schema.** The published schema (RL-CODE: what the format reward checks) has five sections, a
``Step 1:`` / ``Step 2:`` pair and one ``boxN: text`` line per text box of the template. b.2's hierarchy
(template-level intent, then several reasoning paths under different contexts, then anchoring on the best path
and the caption) is laid onto it, the path and anchor lines being ours [PROPOSED]::

    [Comprehensive Description Section]
    <what the template shows>                             b.2 (i): template-level analysis
    [Usage Scenarios Section]
    <situations and emotions the template encodes>        b.2 (i): template-level intent
    [Text Analysis Section]
    <how text on this template turns funny>
    Path 1 (<context>): <reasoning -> candidate idea>     b.2 (ii): K paths   [PROPOSED] line format
    Path 2 (<context>): ...
    [Specific Analysis with User Input]
    Step 1: Anchor on Path <k> (<context>): <why>         b.2 (iii): anchor   [PROPOSED] "Anchor on Path k"
    Step 2: <the chosen idea sharpened into the boxes' wording>
    Text on the Meme:
    box1: <text>                                          b.2 (iii): caption, one line per box
    box2: <text>

``build_prompt`` asks for it, ``parse_meme_cot`` reads it into a ``MemeCoT``, ``render_cot`` writes one back
(``parse_meme_cot(render_cot(c), len(c.text_on_meme)) == c``), ``format_reward`` scores it.

**Parsing** is tolerant where the layout is noise: whitespace, blank lines, markdown bold and headers
(``**Step 1:**``, ``## [Usage Scenarios Section]``, ``**Text on the Meme**:``), case, prose between sections
(it belongs to the section above it) and after the box lines (ignored). It is strict where the reward is:
every section header present at the start of a line, ``Step 1:`` then ``Step 2:`` inside
``[Specific Analysis with User Input]``, and under ``Text on the Meme:`` exactly ``num_boxes`` non-empty
``boxN:`` lines numbered 1..N in order. The path layer is optional (a text in the bare published schema parses,
with no paths), but when present it must be whole: ``Path 1..K`` each with a ``(context)`` and text, and Step 1
anchoring on one of them; ``num_paths=K`` requires it with exactly K paths. A text that fails raises
``MemeFormatError`` (an ``InputError``) listing every failed check in ``.missing``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from numbers import Integral
from typing import Any

import numpy as np

from core.errors import InputError
from planners.protocol import ImagePart, Message, TextPart

# the published section headers, in schema order (specs/humor.md [RL-CODE])
SECTIONS = {
    "description": "[Comprehensive Description Section]",
    "usage_scenarios": "[Usage Scenarios Section]",
    "text_analysis": "[Text Analysis Section]",
    "specific_analysis": "[Specific Analysis with User Input]",
    "text_on_meme": "Text on the Meme:",
}
# [PROPOSED] b.2 [DEFAULT] K = 3 reasoning paths
DEFAULT_NUM_PATHS = 3
# [PROPOSED] how much of an unparsable text an error shows
EXCERPT_CHARS = 60

# ---- line patterns ---------------------------------------------------------------------------------
# a line may start with blockquote marks, a markdown header, a list bullet, then bold/italic marks
_LEAD = r"^[ \t]*(?:>[ \t]*)*(?:#{1,6}[ \t]*)?(?:[-+\u2022][ \t]+|\*[ \t]+)?(?P<md>[*_]{0,3})[ \t]*"
_MD = r"(?:[*_]{1,3})?"
_NAMES = {
    "description": r"comprehensive[ \t]+description[ \t]+section",
    "usage_scenarios": r"usage[ \t]+scenarios?[ \t]+section",
    "text_analysis": r"text[ \t]+analysis[ \t]+section",
    "specific_analysis": r"specific[ \t]+analysis[ \t]+with[ \t]+(?:the[ \t]+)?user[ \t]+input",
    "text_on_meme": r"text[ \t]+on[ \t]+the[ \t]+meme",
}
_HEADER = {key: re.compile(_LEAD + r"(?P<open>\[)?[ \t]*" + name + r"\b[ \t]*(?P<close>\])?[ \t]*" + _MD
                           + r"[ \t]*(?P<colon>:)?[ \t]*(?P<rest>.*)$", re.IGNORECASE) for key, name in _NAMES.items()}
_STEP = {k: re.compile(_LEAD + rf"step[ \t]*{k}(?!\d)[ \t]*{_MD}[ \t]*:[ \t]*(?P<rest>.*)$", re.IGNORECASE) for k in (1, 2)}
_BOX = re.compile(_LEAD + r"box[ \t]*(?P<n>\d+)[ \t]*" + _MD + r"[ \t]*:[ \t]*(?P<rest>.*)$", re.IGNORECASE)
# a path's context: in parentheses (which may nest one level) or brackets
_CTX = r"\((?P<ctx>[^()\n]*(?:\([^()\n]*\)[^()\n]*)*)\)"
_PATH = re.compile(_LEAD + r"path[ \t]*(?P<n>\d+)[ \t]*" + _MD + r"[ \t]*(?:" + _CTX + r"|\[(?P<ctx2>[^\]\n]*)\])?[ \t]*"
                   + _MD + r"[ \t]*[:\-\u2013\u2014][ \t]*(?P<rest>.*)$", re.IGNORECASE)
_ANCHOR = re.compile(r"^[\W_]*anchor(?:ed|ing)?(?:[ \t]+(?:on|to))?[ \t]*:?[ \t]*" + _MD + r"[ \t]*path[ \t]*(?P<n>\d+)[ \t]*"
                     + _MD + r"[ \t]*(?:" + _CTX + r")?[ \t]*" + _MD + r"[ \t]*[:\-\u2013\u2014.,]?[ \t]*(?P<rest>.*)$",
                     re.IGNORECASE | re.DOTALL)
_QUOTES = [('"', '"'), ("\u201c", "\u201d"), ("**", "**"), ("__", "__")]


def _rest(m: re.Match) -> str:
    """A matched line's text after its label, without the bold marks that wrapped the whole line."""
    rest, md = m.group("rest").strip(), m.group("md")
    if md:
        if rest.startswith(md):
            rest = rest[len(md):]
        elif rest.endswith(md):
            rest = rest[: -len(md)]
    return rest.strip()


def _header(line: str) -> tuple[str, str] | None:
    """``(section key, text after the header)`` when ``line`` is a section header, else None."""
    for key, pattern in _HEADER.items():
        m = pattern.match(line)
        if m and (m.group("open") or m.group("close") or m.group("colon") or not _rest(m)):
            return key, _rest(m)
    return None


def _structural(line: str) -> bool:
    """Whether ``line`` would be read as part of the schema (a header, step, box or path line)."""
    return bool(_header(line) or _STEP[1].match(line) or _STEP[2].match(line) or _BOX.match(line) or _PATH.match(line))


def _block(lines: Sequence[str]) -> str:
    """Lines as one text: trailing spaces of each line and blank lines around it dropped."""
    return "\n".join(line.rstrip() for line in lines).strip()


def _unquote(text: str) -> str:
    text = text.strip()
    for a, b in _QUOTES:
        if len(text) > len(a) + len(b) - 1 and text.startswith(a) and text.endswith(b):
            return text[len(a): -len(b)].strip()
    return text


def _excerpt(text: str, n: int = EXCERPT_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= n else flat[: n - 1] + "\u2026"


# ---- the typed result ------------------------------------------------------------------------------


@dataclass
class ReasoningPath:
    """One of b.2's reasoning paths: the ``context`` (angle, situation) it explores and its ``text``
    (reasoning leading to a candidate punchline idea). Written ``Path k (context): text`` [PROPOSED]."""

    context: str
    text: str

    def __post_init__(self):
        for name in ("context", "text"):
            if not isinstance(getattr(self, name), str):
                raise InputError(f"ReasoningPath.{name}", getattr(self, name), "pass a string")


@dataclass(kw_only=True)
class MemeCoT:
    """A parsed hierarchical meme CoT, one field per part of the published schema (in its order).

    - ``description``: ``[Comprehensive Description Section]``, the template-level analysis of what it shows;
    - ``usage_scenarios``: ``[Usage Scenarios Section]``, the template-level intent (b.2 (i)): situations and
      emotions the template conventionally expresses (``intent`` is an alias);
    - ``text_analysis``: ``[Text Analysis Section]``, its prose before the path lines;
    - ``paths``: the ``Path k (context): ...`` lines of that section, b.2 (ii) [PROPOSED place and format];
    - ``specific_analysis``: ``[Specific Analysis with User Input]``, prose before ``Step 1:`` (usually empty);
    - ``anchor``: 0-based index into ``paths`` of the anchored path, b.2 (iii), written
      ``Step 1: Anchor on Path k (context): ...`` [PROPOSED]; None without a path layer;
    - ``step1``: ``Step 1:``'s text after the anchor: why that path fits the input (``anchor_reason``);
    - ``step2``: ``Step 2:``'s text, the chosen idea sharpened into the final wording;
    - ``text_on_meme``: ``Text on the Meme:``, one text per box in box order (``captions`` is an alias);
    - ``raw``: the text it was parsed from ("" when built by hand; not compared by ``==``).
    """

    description: str = ""
    usage_scenarios: str = ""
    text_analysis: str = ""
    paths: list[ReasoningPath] = field(default_factory=list)
    specific_analysis: str = ""
    anchor: int | None = None
    step1: str = ""
    step2: str = ""
    text_on_meme: list[str]
    raw: str = field(default="", compare=False, repr=False)

    def __post_init__(self):
        for name in ("description", "usage_scenarios", "text_analysis", "specific_analysis", "step1", "step2", "raw"):
            if not isinstance(getattr(self, name), str):
                raise InputError(f"MemeCoT.{name}", getattr(self, name), "pass a string")
        if isinstance(self.text_on_meme, str) or not isinstance(self.text_on_meme, Sequence) \
                or not all(isinstance(t, str) for t in self.text_on_meme):
            raise InputError("MemeCoT.text_on_meme", self.text_on_meme, "pass a list of box texts, one string per box")
        self.text_on_meme = list(self.text_on_meme)
        if isinstance(self.paths, (str, ReasoningPath)) or not isinstance(self.paths, Sequence) \
                or not all(isinstance(p, ReasoningPath) for p in self.paths):
            raise InputError("MemeCoT.paths", self.paths, "pass a list of ReasoningPath")
        self.paths = list(self.paths)
        if self.anchor is not None and (isinstance(self.anchor, bool) or not isinstance(self.anchor, Integral)
                                        or not 0 <= self.anchor < len(self.paths)):
            raise InputError("MemeCoT.anchor", self.anchor, f"pass an index into paths (0..{len(self.paths) - 1}) or None")

    @property
    def intent(self) -> str:
        """The template-level intent (b.2 (i)): the ``[Usage Scenarios Section]``."""
        return self.usage_scenarios

    @property
    def anchor_reason(self) -> str:
        """Why the anchored path was chosen: ``Step 1:``'s text."""
        return self.step1

    @property
    def anchored_path(self) -> ReasoningPath | None:
        return None if self.anchor is None else self.paths[self.anchor]

    @property
    def captions(self) -> list[str]:
        """The box texts, box1 first."""
        return list(self.text_on_meme)

    @property
    def num_boxes(self) -> int:
        return len(self.text_on_meme)

    def to_dict(self) -> dict:
        return asdict(self)


class MemeFormatError(InputError):
    """A text that is not in the meme CoT schema. ``missing``: every failed check, as readable items."""

    def __init__(self, text: str, missing: Sequence[str], expected: str):
        self.missing = list(missing)
        super().__init__("meme_cot", _excerpt(text), f"missing or malformed: {'; '.join(self.missing)}. Expected: {expected}")


# ---- reading ---------------------------------------------------------------------------------------


def _check_count(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise InputError(name, value, f"pass an integer >= {minimum}")
    return int(value)


def expected_format(num_boxes: int, num_paths: int | None = None) -> str:
    """The schema in one line, for error messages."""
    paths = "" if num_paths is None else f" containing Path 1..Path {num_paths} (context): lines"
    anchor = "" if num_paths is None else " (Step 1: Anchor on Path k ...)"
    boxes = " / ".join(f"box{i}:" for i in range(1, num_boxes + 1))
    return (f"{SECTIONS['description']} / {SECTIONS['usage_scenarios']} / {SECTIONS['text_analysis']}{paths} / "
            f"{SECTIONS['specific_analysis']} with Step 1:{anchor} then Step 2: / {SECTIONS['text_on_meme']} with "
            f"exactly {num_boxes} non-empty line(s) {boxes}, each header at the start of a line")


@dataclass
class _Reading:
    """Everything read from a text, and each check's verdict (name -> None if it passed, else the problem)."""

    checks: dict[str, str | None]
    cot: dict


def _read(text: str, num_boxes: int, num_paths: int | None) -> _Reading:
    lines = text.splitlines()
    starts: dict[str, tuple[int, str]] = {}
    for i, line in enumerate(lines):
        h = _header(line)
        if h is None:
            continue
        key, rest = h
        # the first header of each section starts it; "Text on the Meme:" is the schema's last part, so its last
        # header counts (a model that mentions it in its reasoning still has its boxes read) [PROPOSED]
        if key not in starts or key == "text_on_meme":
            starts[key] = (i, rest)
    bounds = sorted(i for i, _ in starts.values())

    def body(key: str) -> list[str] | None:
        if key not in starts:
            return None
        i, rest = starts[key]
        end = next((b for b in bounds if b > i), len(lines))
        return ([rest] if rest else []) + lines[i + 1: end]

    checks: dict[str, str | None] = {key: None if key in starts else header for key, header in SECTIONS.items()}
    cot: dict[str, Any] = {key: _block(body(key) or []) for key in ("description", "usage_scenarios")}

    # [Text Analysis Section]: prose, then the path lines (each with its continuation lines)
    prose: list[str] = []
    raw_paths: list[tuple[int, str, list[str]]] = []
    for line in body("text_analysis") or []:
        m = _PATH.match(line)
        if m:
            raw_paths.append((int(m.group("n")), (m.group("ctx") or m.group("ctx2") or "").strip(), [_rest(m)]))
        elif raw_paths:
            raw_paths[-1][2].append(line)
        else:
            prose.append(line)
    cot["text_analysis"] = _block(prose)
    cot["paths"] = [ReasoningPath(ctx, _block(t)) for _, ctx, t in raw_paths]

    # [Specific Analysis with User Input]: Step 1 then Step 2 (anywhere in the text if the section is missing,
    # as the published check reads them)
    spec = body("specific_analysis")
    where = spec if spec is not None else lines
    i1 = next((i for i, line in enumerate(where) if _STEP[1].match(line)), None)
    i2 = None if i1 is None else next((i for i in range(i1 + 1, len(where)) if _STEP[2].match(where[i])), None)
    inside = f" inside {SECTIONS['specific_analysis']}" if spec is not None else ""
    checks["step1"] = None if i1 is not None else f"Step 1:{inside}"
    has_step2 = any(_STEP[2].match(line) for line in where)
    if i2 is not None or (i1 is None and has_step2):  # with no Step 1, Step 2 is checked on its own (as published)
        checks["step2"] = None
    elif has_step2:
        checks["step2"] = "Step 2: after Step 1:"
    else:
        checks["step2"] = f"Step 2:{inside}"
    cot["specific_analysis"] = _block(where[:i1]) if spec is not None and i1 is not None else _block(spec or [])
    step1 = _block([_rest(_STEP[1].match(where[i1]))] + where[i1 + 1: i2 if i2 is not None else len(where)]) if i1 is not None else ""
    cot["step2"] = _block([_rest(_STEP[2].match(where[i2]))] + where[i2 + 1:]) if i2 is not None else ""
    m = _ANCHOR.match(step1)
    cot["anchor"], cot["step1"] = (int(m.group("n")), m.group("rest").strip()) if m else (None, step1)

    # Text on the Meme: the box lines; other lines (prose after the boxes) are ignored
    boxes = [(int(m.group("n")), _unquote(_rest(m))) for m in map(_BOX.match, body("text_on_meme") or []) if m]
    cot["text_on_meme"] = [t for _, t in boxes]
    numbers = [n for n, _ in boxes]
    found = ", ".join(f"box{n}" for n in numbers)
    checks["boxes"] = None if boxes else f"box lines (box1: ...) under {SECTIONS['text_on_meme']}"
    empty = [f"box{n}" for n, t in boxes if not t]
    checks["boxes_nonempty"] = None if boxes and not empty else (f"text for {', '.join(empty)} (empty)" if empty else "non-empty box texts")
    if numbers == list(range(1, num_boxes + 1)):
        checks["box_count"] = None
    elif len(numbers) != num_boxes:
        checks["box_count"] = f"exactly {num_boxes} box line(s) box1..box{num_boxes} (found {len(numbers)}{': ' + found if found else ''})"
    else:
        checks["box_count"] = f"box lines numbered box1..box{num_boxes} in order (found {found})"

    # the path layer [PROPOSED]: whole when present (paths numbered 1..K with contexts and text, Step 1 anchoring
    # on one of them), required with exactly num_paths paths when num_paths is given
    path_problems = []
    k = len(raw_paths)
    if num_paths is not None and k != num_paths:
        path_problems.append(f"exactly {num_paths} Path lines in {SECTIONS['text_analysis']} (found {k})")
    if [n for n, _, _ in raw_paths] != list(range(1, k + 1)):
        path_problems.append(f"Path lines numbered Path 1..Path {k} in order (found {', '.join(str(n) for n, _, _ in raw_paths)})")
    for n, ctx, t in raw_paths:
        if not ctx:
            path_problems.append(f"a (context) for Path {n}")
        if not _block(t):
            path_problems.append(f"text for Path {n}")
    anchor_problem = None
    if cot["anchor"] is None:
        if num_paths is not None or k:
            anchor_problem = "Step 1: Anchor on Path k ... (which path the caption follows)"
    elif not 1 <= cot["anchor"] <= k:
        anchor_problem = f"an anchor on an existing path (Step 1 anchors on Path {cot['anchor']}, there are {k} paths)"
    checks["paths"] = "; ".join(path_problems) or None
    checks["anchor"] = anchor_problem
    if cot["anchor"] is not None:
        cot["anchor"] -= 1
    return _Reading(checks, cot)


PUBLISHED_CHECKS = ("description", "usage_scenarios", "text_analysis", "specific_analysis", "text_on_meme",
                    "step1", "step2", "boxes", "boxes_nonempty", "box_count")


def format_checks(text: str, num_boxes: int, num_paths: int | None = None) -> dict[str, bool]:
    """Each check of the schema and whether ``text`` passes it.

    The published ten (specs/humor.md [RL-CODE]; the names of ``PUBLISHED_CHECKS``): the five section headers,
    ``Step 1:``, ``Step 2:`` after it, box lines present, all non-empty, exactly ``num_boxes`` of them. Ours
    [PROPOSED]: the box lines must also be numbered box1..boxN in order (part of ``box_count``), and with
    ``num_paths`` two more, ``paths`` (exactly ``num_paths`` Path lines, numbered, each with a context and text)
    and ``anchor`` (Step 1 anchors on one of them)."""
    if not isinstance(text, str):
        raise InputError("text", type(text).__name__, "pass the model's answer as a string")
    num_boxes = _check_count(num_boxes, "num_boxes")
    num_paths = None if num_paths is None else _check_count(num_paths, "num_paths")
    checks = _read(text, num_boxes, num_paths).checks
    names = PUBLISHED_CHECKS + (("paths", "anchor") if num_paths is not None else ())
    return {name: checks[name] is None for name in names}


def parse_meme_cot(text: str, num_boxes: int, num_paths: int | None = None) -> MemeCoT:
    """Read a meme CoT in the schema of this module's docstring into a ``MemeCoT``.

    ``num_boxes``: the template's text boxes; exactly that many ``boxN:`` lines, numbered 1..N, are required.
    ``num_paths``: None [PROPOSED] accepts the bare published schema (no paths) and a whole path layer of any
    size; K requires exactly K paths and an anchor. Raises ``MemeFormatError`` (an ``InputError``) naming every
    failed check; see the module docstring for what is tolerated."""
    if not isinstance(text, str):
        raise InputError("text", type(text).__name__, "pass the model's answer as a string")
    num_boxes = _check_count(num_boxes, "num_boxes")
    num_paths = None if num_paths is None else _check_count(num_paths, "num_paths")
    reading = _read(text, num_boxes, num_paths)
    checks = dict(reading.checks)
    if checks["boxes"] is not None:  # no box lines at all: say so once
        checks["boxes_nonempty"] = checks["box_count"] = None
    missing = [problem for problem in checks.values() if problem is not None]
    if missing:
        raise MemeFormatError(text, missing, expected_format(num_boxes, num_paths))
    return MemeCoT(**reading.cot, raw=text)


def read_boxes(text: str, num_boxes: int) -> list[str]:
    """Only the ``Text on the Meme:`` box lines of ``text`` (a direct caption with no CoT, or any CoT): exactly
    ``num_boxes`` non-empty ``boxN:`` lines numbered 1..N; ``MemeFormatError`` naming what is wrong otherwise."""
    if not isinstance(text, str):
        raise InputError("text", type(text).__name__, "pass the model's answer as a string")
    num_boxes = _check_count(num_boxes, "num_boxes")
    reading = _read(text, num_boxes, None)
    keys = ("text_on_meme", "boxes") if reading.checks["boxes"] else ("text_on_meme", "boxes", "boxes_nonempty", "box_count")
    missing = [reading.checks[k] for k in keys if reading.checks[k] is not None]
    if missing:
        boxes = " / ".join(f"box{i}:" for i in range(1, num_boxes + 1))
        raise MemeFormatError(text, missing, f"{SECTIONS['text_on_meme']} then exactly {num_boxes} non-empty line(s) {boxes}")
    return list(reading.cot["text_on_meme"])


def format_reward(text: str, num_boxes: int, num_paths: int | None = None, partial: bool = True) -> float:
    """Our format reward of a generated text (rule ``"ours"`` of ``meme_format_reward``), in [0, 1].

    Not the published rule (that is ``official_format_reward``, the default of ``meme_format_reward``). Ours checks
    the same ten things more strictly [PROPOSED]: headers only at the start of a line (markdown and missing brackets
    tolerated), Step 1 then Step 2 inside ``[Specific Analysis with User Input]``, ``boxN:`` lines required (no
    bare-line fallback) and numbered 1..N in order under the last ``Text on the Meme`` header, and always ten checks.
    It scores the clean outputs the same as the published rule and differs on imperfect ones
    (../shared/reference/fidelity_audit.md 2.4). The builtin writer's RL recipe trained on it.

    ``partial=True``: the fraction of ``format_checks`` passed, ten checks with ``num_paths=None``.
    ``partial=False``: 1.0 when every check passes, else 0.0 [PROPOSED]. 1.0 means every check passed; with
    ``num_paths`` given that is exactly when ``parse_meme_cot(text, num_boxes, num_paths)`` succeeds; with None the
    path layer is not scored (it is ours, not published), while the parser still rejects a malformed one."""
    if not isinstance(partial, bool):
        raise InputError("partial", partial, "pass True (fraction of checks passed) or False (all or nothing)")
    checks = format_checks(text, num_boxes, num_paths)
    passed = sum(checks.values())
    if not partial:
        return float(passed == len(checks))
    return passed / len(checks)


# ---- the published format reward (LightRFT examples/godsmeme/meme_utils.py) --------------------------

FORMAT_RULES = ("official", "ours")
DEFAULT_FORMAT_RULE = "official"

# the five required patterns, searched anywhere in the answer, case-insensitive (the brackets and the colon count)
_OFFICIAL_SECTIONS = [re.compile(re.escape(h), re.IGNORECASE) for h in SECTIONS.values()]
_OFFICIAL_STEP = {k: re.compile(rf"^\s*Step\s*{k}\s*:", re.IGNORECASE | re.MULTILINE) for k in (1, 2)}
_OFFICIAL_TEXT_ON_MEME = re.compile(r"Text on the Meme:\s*(.*)$", re.IGNORECASE | re.DOTALL)
# a box label at a line start, its payload running (across lines) to the next box label or the end
_OFFICIAL_BOX = re.compile(r"^\s*box\s*(\d+)\s*:\s*(.*?)(?=^\s*box\s*\d+\s*:|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL)


def assistant_response(text: str) -> str:
    """The answer part of a decoded prompt + answer, as the published code cuts it: after the last
    ``<|im_start|>assistant``, else after the last ``assistant\\n``, stripped."""
    if "<|im_start|>assistant" in text:
        return text.split("<|im_start|>assistant")[-1].strip()
    if "assistant\n" in text:
        return text.split("assistant\n")[-1].strip()
    return text.strip()


def official_box_texts(text: str) -> list[str]:
    """The box texts as the published ``extract_box_texts`` reads them: the text after the FIRST ``Text on the
    Meme:``; its ``boxN:`` payloads (stripped, surrounding double quotes dropped, empty ones skipped);
    if none, every non-empty line of that section, stripped of quotes. [] without the header."""
    m = _OFFICIAL_TEXT_ON_MEME.search(assistant_response(text))
    section = m.group(1).strip() if m else ""
    if not section:
        return []
    boxes = [t for t in (b.group(2).strip().strip('"').strip() for b in _OFFICIAL_BOX.finditer(section)) if t]
    if boxes:
        return boxes
    return [t for t in (line.strip().strip('"').strip() for line in section.splitlines()) if t]


def official_format_reward(text: str, expected_boxes: int | None = None) -> float:
    """The published format reward (``compute_meme_format_reward``), in [0, 1]: the share of passed checks among
    the five section patterns searched anywhere in the answer, ``Step 1:`` and ``Step 2:`` each at some line start
    (any order, any section), box texts found (``official_box_texts``), all of them non-empty, and, only when
    ``expected_boxes`` is a positive count, exactly that many: 9 checks, or 10 with a count."""
    if not isinstance(text, str):
        raise InputError("text", type(text).__name__, "pass the model's answer as a string")
    if expected_boxes is not None and (isinstance(expected_boxes, bool) or not isinstance(expected_boxes, Integral)):
        raise InputError("expected_boxes", expected_boxes, "pass the template's box count, or None when unknown")
    answer = assistant_response(text)
    passed = sum(bool(p.search(answer)) for p in _OFFICIAL_SECTIONS)
    passed += sum(bool(_OFFICIAL_STEP[k].search(answer)) for k in (1, 2))
    boxes = official_box_texts(answer)
    passed += bool(boxes) + bool(boxes and all(b.strip() for b in boxes))
    checks = len(_OFFICIAL_SECTIONS) + 4
    if expected_boxes is not None and expected_boxes > 0:
        checks += 1
        passed += len(boxes) == expected_boxes
    return passed / checks


def meme_format_reward(text: str, num_boxes: int | None = None, rule: str = DEFAULT_FORMAT_RULE,
                       num_paths: int | None = None) -> float:
    """The format reward under a named rule: ``"official"`` (default; ``official_format_reward(text, num_boxes)``,
    ``num_boxes`` None when the template's count is unknown) or ``"ours"`` (``format_reward(text, num_boxes,
    num_paths)``, which needs ``num_boxes``). ``num_paths`` is ours only (the path layer is not published)."""
    if rule == "official":
        if num_paths is not None:
            raise InputError("num_paths", num_paths, "the published rule does not score reasoning paths; use rule='ours'")
        return official_format_reward(text, num_boxes)
    if rule == "ours":
        if num_boxes is None:
            raise InputError("num_boxes", None, "our rule checks the box count: pass the template's number of boxes")
        return format_reward(text, num_boxes, num_paths)
    raise InputError("rule", rule, f"choose one of {FORMAT_RULES}")


# ---- writing ---------------------------------------------------------------------------------------


def _check_field(name: str, text: str) -> None:
    if text != text.strip():
        raise InputError(name, _excerpt(text), "strip leading and trailing whitespace (the parser does)")
    for line in text.splitlines():
        if _structural(line):
            raise InputError(name, _excerpt(line), "a line of this text would be read as a section header, Step, box or "
                                                   "Path line; reword it")


def render_cot(cot: MemeCoT) -> str:
    """``cot`` written in the exact schema (the SFT target format), so that
    ``parse_meme_cot(render_cot(cot), cot.num_boxes) == cot``. Raises ``InputError`` for a CoT that would not
    survive the round trip: no boxes, an empty or multi-line box, a path without a context, a field holding a
    line that reads as part of the schema."""
    if not isinstance(cot, MemeCoT):
        raise InputError("cot", type(cot).__name__, "pass a planners.meme_cot.MemeCoT")
    if not cot.text_on_meme:
        raise InputError("cot.text_on_meme", cot.text_on_meme, "give at least one box text")
    for i, box in enumerate(cot.text_on_meme):
        if not box.strip() or "\n" in box or "\r" in box or _unquote(box) != box:
            raise InputError(f"cot.text_on_meme[{i}]", box, "each box text is one non-empty line, without surrounding "
                                                            "whitespace or quotes")
    if cot.paths and cot.anchor is None:
        raise InputError("cot.anchor", None, "a CoT with reasoning paths anchors on one of them: set anchor")
    for i, p in enumerate(cot.paths):
        if not p.context.strip() or p.context != p.context.strip() or not re.fullmatch(_CTX, f"({p.context})"):
            raise InputError(f"cot.paths[{i}].context", p.context, "a short one-line label without surrounding spaces, "
                                                                   "its parentheses balanced and nested at most once")
        if not p.text.strip():
            raise InputError(f"cot.paths[{i}].text", p.text, "give the path's reasoning")
        _check_field(f"cot.paths[{i}].text", p.text)
    for name in ("description", "usage_scenarios", "text_analysis", "specific_analysis", "step1", "step2"):
        _check_field(f"cot.{name}", getattr(cot, name))
    if cot.anchor is None and _ANCHOR.match(cot.step1):
        raise InputError("cot.step1", _excerpt(cot.step1), "without an anchor, Step 1 may not start with 'Anchor on Path k'")

    def section(header: str, *parts: str) -> list[str]:
        return [header] + [p for p in parts if p]

    ta = [cot.text_analysis] + [f"Path {i + 1} ({p.context}): {p.text}" for i, p in enumerate(cot.paths)]
    anchor = "" if cot.anchor is None else f"Anchor on Path {cot.anchor + 1} ({cot.paths[cot.anchor].context}):"
    step1 = " ".join(s for s in (anchor, cot.step1) if s)
    out = [
        section(SECTIONS["description"], cot.description),
        section(SECTIONS["usage_scenarios"], cot.usage_scenarios),
        section(SECTIONS["text_analysis"], *ta),
        section(SECTIONS["specific_analysis"], cot.specific_analysis, f"Step 1: {step1}".rstrip(), f"Step 2: {cot.step2}".rstrip()),
        section(SECTIONS["text_on_meme"], *(f"box{i + 1}: {t}" for i, t in enumerate(cot.text_on_meme))),
    ]
    text = "\n\n".join("\n".join(s) for s in out) + "\n"
    back = parse_meme_cot(text, cot.num_boxes, len(cot.paths) or None)
    for f in fields(MemeCoT):
        if f.compare and getattr(back, f.name) != getattr(cot, f.name):
            raise InputError(f"cot.{f.name}", _excerpt(str(getattr(cot, f.name))), "this text does not survive the schema "
                             f"(it reads back as {_excerpt(str(getattr(back, f.name)))!r}); reword it")
    return text


def anchored_caption(cot: MemeCoT) -> list[str] | None:
    """The caption the anchored path quotes (``-> "box 1" / "box 2"``, one quoted text per box, as the traces write
    it), or None when nothing is anchored or the path quotes another number of texts."""
    path = cot.anchored_path
    if path is None:
        return None
    quoted = [" ".join(q.split()) for q in re.findall(r'"([^"\n]*)"', path.text)]
    return quoted if len(quoted) == cot.num_boxes and all(quoted) else None


def anchor_boxes(text: str, num_boxes: int) -> str:
    """``text`` with its boxes replaced by the anchored path's quoted caption (``anchored_caption``): "anchored
    boxes" [PROPOSED], so the meme says what the chain of thought chose. The boxes are the last thing a CoT writes,
    so this equals forcing them at decoding once ``Text on the Meme:`` is written. A text that does not parse, has no
    anchor, or whose anchored path quotes no caption is returned as it is."""
    try:
        cot = parse_meme_cot(text, num_boxes)
    except MemeFormatError:
        return text
    caption = anchored_caption(cot)
    at = text.rfind(SECTIONS["text_on_meme"])
    if caption is None or at < 0 or caption == list(cot.text_on_meme):
        return text
    head = text[: at + len(SECTIONS["text_on_meme"])]
    return head + "\n" + "".join(f"box{i + 1}: {t}\n" for i, t in enumerate(caption))


def boxes_from_caption(caption: Any) -> list[str]:
    """A caption as box texts, box1 first: worldgen's meme captions ``{"top": ..., "bottom": ...}`` (two
    boxes, top then bottom: reading order), a ``(top, bottom)`` pair, or a list of box texts."""
    if isinstance(caption, dict):
        if set(caption) >= {"top", "bottom"}:
            caption = [caption["top"], caption["bottom"]]
        else:
            raise InputError("caption", caption, "pass {'top': ..., 'bottom': ...} or a list of box texts")
    if isinstance(caption, str) or not isinstance(caption, Sequence) or not caption or not all(isinstance(t, str) for t in caption):
        raise InputError("caption", caption, "pass {'top': ..., 'bottom': ...}, a (top, bottom) pair or a list of box texts")
    return [" ".join(t.split()) for t in caption]


# ---- the prompt ------------------------------------------------------------------------------------


def format_instructions(num_boxes: int, num_paths: int | None = DEFAULT_NUM_PATHS) -> str:
    """The output format as the prompt quotes it: the published headers verbatim, placeholders in <...>."""
    num_boxes = _check_count(num_boxes, "num_boxes")
    num_paths = None if num_paths is None else _check_count(num_paths, "num_paths")
    paths = [] if num_paths is None else [f"Path {i} (<context {i}>): <reasoning under this context -> a candidate punchline idea>"
                                          for i in range(1, num_paths + 1)]
    step1 = ("Step 1: Anchor on Path <k> (<its context>): <why this path fits the user input best and is the funniest>"
             if num_paths is not None else "Step 1: <connect the user input to the template: which situation and angle to use>")
    lines = [
        SECTIONS["description"], "<what the template shows: subjects, expressions, composition, the meme format it is>", "",
        SECTIONS["usage_scenarios"], "<the template's intent: which situations and emotions it conventionally expresses>", "",
        SECTIONS["text_analysis"], "<how text on this template turns funny>", *paths, "",
        SECTIONS["specific_analysis"], step1,
        "Step 2: <sharpen the chosen idea into the final wording: setup -> punchline, one short line per box>", "",
        SECTIONS["text_on_meme"], *(f"box{i}: <text of box {i}>" for i in range(1, num_boxes + 1)),
    ]
    return "\n".join(lines)


def build_prompt(template_name: str, num_boxes: int, image: np.ndarray | ImagePart | None = None, topic: str | None = None,
                 num_paths: int | None = DEFAULT_NUM_PATHS, system: str | None = None) -> list[Message]:
    """The chat messages that ask a VLM for a meme CoT in this module's schema.

    One user turn: the template image first (an ``ImagePart``; ``image`` an RGB uint8 ``(H, W, 3)`` array or an
    ImagePart; None for a text-only prompt), then the instruction: the template's name, its box count, the user
    input (``topic``; None lets the model choose the context) and the format quoted in full
    (``format_instructions``). ``num_paths``: how many reasoning paths to explore, b.2 [DEFAULT] K = 3
    [PROPOSED]; None asks for the bare published schema. ``system``: an optional system turn [PROPOSED: none].
    The instruction's wording is ours [PROPOSED]; only the section headers, Step lines and box lines are published."""
    if not isinstance(template_name, str) or not template_name.strip():
        raise InputError("template_name", template_name, "pass the template's name, e.g. 'chase'")
    num_boxes = _check_count(num_boxes, "num_boxes")
    num_paths = None if num_paths is None else _check_count(num_paths, "num_paths")
    if topic is not None and (not isinstance(topic, str) or not topic.strip()):
        raise InputError("topic", topic, "pass the user's topic as a non-empty string, or None")
    if system is not None and (not isinstance(system, str) or not system.strip()):
        raise InputError("system", system, "pass a system prompt as a non-empty string, or None")
    s = "" if num_boxes == 1 else "es"
    explore = ("" if num_paths is None else
               f" In the [Text Analysis Section], explore {num_paths} reasoning paths under different contexts "
               f"(Path 1 to Path {num_paths}), then in Step 1 anchor on the best one and write the boxes from it.")
    shown = " shown in the image" if image is not None else ""
    listed = "box1" if num_boxes == 1 else f"box1 to box{num_boxes}"
    text = "\n".join([
        (f'Write the text of a funny meme on the template "{template_name.strip()}"{shown}. '
         f"It has {num_boxes} text box{s}, numbered in reading order (top to bottom, left to right)."),
        f"User input: {topic.strip()}" if topic is not None else "User input: none; choose the context you find funniest.",
        "First analyse the template (what it shows, what it is used to express), then the text." + explore,
        "Answer in exactly this format, with the headers written as shown:",
        "",
        format_instructions(num_boxes, num_paths),
        "",
        (f"Write exactly {num_boxes} box line{'' if num_boxes == 1 else 's'} ({listed}), "
         "each on one line and non-empty, and nothing after them."),
    ])
    content: list[Any] = []
    if image is not None:
        content.append(image if isinstance(image, ImagePart) else ImagePart(image))
    content.append(TextPart(text))
    messages = [Message("system", system)] if system is not None else []
    return messages + [Message("user", content)]


PROMPT_STYLES = ("atelier", "official")


def build_official_prompt(image: np.ndarray | ImagePart | None = None, user_request: str | None = None) -> list[Message]:
    """The published policy prompt for officially trained policies (LightRFT ``meme_dataset.py``): one user turn,
    the template image first, then the text of ``prompts/generate_meme.txt`` verbatim (its literal ``<image>``
    included, as the dataset rows carry it). ``user_request`` is appended as ``**User Input Parameters**: ...``,
    the label the official dataset code reads it back by; where the released rows place it is not in the public
    code, so this placement is [PROPOSED]. None appends nothing."""
    from planners.meme_prompts import GENERATE_MEME_PROMPT

    if user_request is not None and (not isinstance(user_request, str) or not user_request.strip()):
        raise InputError("user_request", user_request, "pass the user's request as a non-empty string, or None")
    text = GENERATE_MEME_PROMPT + (f"\n**User Input Parameters**: {user_request.strip()}" if user_request else "")
    content: list[Any] = []
    if image is not None:
        content.append(image if isinstance(image, ImagePart) else ImagePart(image))
    content.append(TextPart(text))
    return [Message("user", content)]
