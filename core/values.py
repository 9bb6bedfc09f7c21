"""Strict checks of scalar values that arrive as JSON or form data (batch manifests, web forms, ``pipeline.json``).

One parser per kind, used by every interface: a string ``"false"`` never turns an option on (``bool("false")``
is True), a NaN never slips past a range check (every comparison with NaN is False), and a value of the wrong
type is refused by name before it reaches the code that would fail on it with a ``TypeError``.
"""

from __future__ import annotations

import json
import math
import numbers
import types
import typing
from typing import Any

import numpy as np

from core.errors import InputError


def parse_bool(name: str, value: Any) -> bool:
    """``value`` if it is a real boolean (JSON ``true`` / ``false``), else an ``InputError`` naming ``name``.

    Strings are refused, even ``"true"`` / ``"false"``: a manifest or index is JSON, which has booleans, and
    ``"no"``, ``"0"`` or ``"off"`` would otherwise have to be guessed at."""
    if is_bool(value):
        return bool(value)
    hint = "pass a JSON true or false, without quotes" if isinstance(value, str) else "pass true or false"
    raise InputError(name, value, hint)


def is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))  # numpy's bool is no int subclass, and an int must never be a bool


def check_finite(name: str, value: Any, span: str = "") -> None:
    """``InputError`` when a number is NaN or infinite (they pass every ``<`` / ``>`` range check)."""
    if isinstance(value, numbers.Real) and not is_bool(value) and not math.isfinite(float(value)):
        raise InputError(name, value, f"use a finite number{f' in {span}' if span else ''}")


def type_matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the annotation ``hint``: bool, int (never a bool), float (an int fits too), str,
    ``X | None`` and fixed tuples such as ``tuple[int, int]`` (a JSON list fits). Other annotations are not
    checked here (True)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(type_matches(value, a) for a in args)
    if hint is type(None) or hint is None:
        return value is None
    if hint is bool:
        return is_bool(value)
    if hint is int:
        return isinstance(value, numbers.Integral) and not is_bool(value)
    if hint is float:
        return isinstance(value, numbers.Real) and not is_bool(value)
    if hint is str:
        return isinstance(value, str)
    if hint is tuple or origin is tuple:
        if not isinstance(value, (tuple, list)):
            return False
        if not args:
            return True
        if len(args) == 2 and args[1] is Ellipsis:
            return all(type_matches(v, args[0]) for v in value)
        return len(value) == len(args) and all(type_matches(v, a) for v, a in zip(value, args))
    return True


def describe_type(hint: Any) -> str:
    """The annotation in a user's words: ``int | None`` -> ``an integer or null``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a) for a in args)
    if origin is tuple and args and args[-1] is not Ellipsis:
        if all(a is int for a in args):
            return f"a list of {len(args)} integers"
        return f"a list of {len(args)} ({', '.join(describe_type(a) for a in args)})"
    names = {type(None): "null", None: "null", bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def check_type(name: str, value: Any, hint: Any, example: Any = None) -> None:
    """``InputError`` naming ``name`` when ``value`` does not fit ``hint`` (``check_finite`` refuses NaN)."""
    if not type_matches(value, hint):
        got = {str: "a string", bool: "a boolean", int: "an integer", float: "a decimal number", list: "a list", tuple: "a list",
               dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)
        if isinstance(value, (list, tuple)):
            got = f"a list of {len(value)}"
        fix = f", e.g. {json.dumps(list(example) if isinstance(example, tuple) else example, default=str)}" if example is not None else ""
        raise InputError(name, value, f"expected {describe_type(hint)}, not {got}{fix}")


__all__ = ["parse_bool", "check_finite", "check_type", "type_matches", "describe_type", "is_bool"]


def check_text(name: str, value: Any) -> None:
    """Text (a prompt, a question, a path) must be valid Unicode: bytes that are not UTF-8 reach Python as lone
    surrogates (``'\\udcff'``, from a terminal or a JSON escape), which every tokenizer and file system call rejects
    later with an internal error. ``value`` may be a string or a list of them; anything else passes."""
    for text in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                shown = text.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")  # the bytes given
                raise InputError(name, shown[:80], "it holds bytes that are not UTF-8 text; type it again or save the file as UTF-8") from None

