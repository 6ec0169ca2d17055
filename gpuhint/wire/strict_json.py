"""Strict JSON for the wire contract: one-line reasons, no NaN, no duplicate keys, bounded
nesting checked before parsing, and a count of the keys a validated message had.

>>> parse_strict(b'{"a": 1}')
{'a': 1}
>>> parse_strict(b'{"a": 1, "a": 2}')
Traceback (most recent call last):
...
gpuhint.wire.strict_json.InvalidMessage: duplicate key 'a' (a key may appear once)
"""

from __future__ import annotations

import json
import re
import typing
from typing import Any

from pydantic import BaseModel


class InvalidMessage(ValueError):
    """A message that cannot be decoded; ``reason`` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


def check_depth(raw: bytes, max_depth: int) -> None:
    """Reject JSON nested deeper than ``max_depth`` without parsing it."""
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return  # the common case: cannot be deeper
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub(b'""', raw)):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                raise InvalidMessage(f"JSON nested deeper than {max_depth} levels")
        else:
            depth -= 1


def parse_strict(data: bytes) -> Any:
    """``json.loads`` that refuses NaN/Infinity and duplicate keys (at any depth)."""
    try:
        return json.loads(data, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidMessage(f"not JSON: {exc}") from None


def _no_constant(name: str) -> None:
    raise InvalidMessage(f"not JSON: {name} is not a number")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidMessage(f"duplicate key {short(key)} (a key may appear once)")
            seen.add(key)
    return obj


_PART_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {}


def _part_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``cls`` that hold nested :class:`_Part` objects (cached)."""
    names = _PART_FIELDS.get(cls)
    if names is None:

        def holds_part(tp: Any) -> bool:
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                return True
            return any(holds_part(arg) for arg in typing.get_args(tp))

        names = tuple(n for n, f in cls.model_fields.items() if holds_part(f.annotation))
        _PART_FIELDS[cls] = names
    return names


def count_keys(model: BaseModel) -> int:
    """How many distinct keys the JSON that validated into ``model`` had, nesting included."""
    n = len(model.model_fields_set)
    for name in _part_fields(type(model)):
        value = getattr(model, name)
        for part in value if isinstance(value, tuple) else (value,):
            if isinstance(part, BaseModel):
                n += count_keys(part)
    return n


def json_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a float"
    return {str: "a string", type(None): "null", list: "an array", dict: "an object"}.get(
        type(value), type(value).__name__
    )


def short(value: object, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."
