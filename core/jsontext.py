"""JSON from a user's file, bounded: ``json.loads`` that refuses what would fail later as an internal error.

The standard parser nests by recursion (200,000 ``[`` exhaust the stack: ``RecursionError``), converts a
5,000-digit integer only to fail (``ValueError: Exceeds the limit``), and hands a 400-digit integer or ``1e999``
(``inf``) to code that then overflows converting it. Here every such document is a ``json.JSONDecodeError``,
which each reader already reports with the file and line it came from.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64  # a config or a manifest line is a few levels deep
MAX_DIGITS = 30  # every count, size and seed here fits (2**64 has 20 digits)


def loads(text: str, finite: bool = True) -> Any:
    """``json.loads(text)`` with nesting, integer length and (``finite``) non-finite numbers bounded (module docstring).
    ``finite=False`` lets ``NaN``, ``Infinity`` and ``1e999`` through for a reader that refuses them by the key they
    stand under (a manifest: a NaN setting fails that item alone, named)."""
    depth = max_depth(text) if text.count("[") + text.count("{") > MAX_DEPTH else 0  # the scan only where it could matter
    if depth > MAX_DEPTH:
        raise json.JSONDecodeError(f"nested {depth} levels deep (at most {MAX_DEPTH})", text, 0)

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_DIGITS:
            raise json.JSONDecodeError(f"a number of {len(digits.lstrip('-'))} digits (at most {MAX_DIGITS})", text, 0)
        return int(digits)

    def real(digits: str) -> float:
        value = float(digits)
        if finite and not math.isfinite(value):
            raise json.JSONDecodeError(f"the number {digits[:40]} is out of range", text, 0)
        return value

    def constant(name: str) -> float:
        raise json.JSONDecodeError(f"{name} is not a number JSON allows", text, 0)

    if not finite:
        return json.loads(text, parse_int=integer, parse_float=real)
    return json.loads(text, parse_int=integer, parse_float=real, parse_constant=constant)


def max_depth(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` outside strings (a linear scan, no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest
