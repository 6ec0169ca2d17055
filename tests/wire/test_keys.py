"""The Redis key schema in code (gpuhint/wire/keys.py) and in docs/redis-keys.md agree."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from gpuhint.wire.keys import RedisKeys

DOC = Path(__file__).resolve().parents[2] / "docs" / "redis-keys.md"


def _code_keys() -> set[str]:
    """Each key family RedisKeys makes, placeholders kept: ``{p}:v1:hint:{cluster}:{job_id}``."""
    k = RedisKeys("{p}")
    out = set()
    for name, member in inspect.getmembers(RedisKeys):
        if name.startswith("_") or name == "root":
            continue
        if isinstance(member, property):
            out.add(getattr(k, name))
        elif callable(member):
            params = list(inspect.signature(member).parameters)[1:]
            out.add(member(k, *(f"{{{p}}}" for p in params)))
    return out


def test_every_key_the_code_makes_is_in_the_docs_table() -> None:
    documented = set(re.findall(r"^\| `(\{p\}:v1:[^`]+)` \|", DOC.read_text(), re.MULTILINE))
    assert _code_keys() - documented == set()
    assert documented - _code_keys() == set()


def test_the_rebuilt_change_entry_fields_are_the_ones_written() -> None:
    """gpuhint/redis/store.py writes ``type``, ``hints`` and ``reason`` for a rebuild
    (tests/redis/test_store.py); a reader who filters on a documented field must find it."""
    row = next(r for r in DOC.read_text().splitlines() if r.startswith("| `rebuilt` |"))
    fields = set(re.findall(r"`([a-z_]+)`", row.split("|")[2]))
    assert fields == {"hints", "reason", "redis_empty", "redis_rollback"}
