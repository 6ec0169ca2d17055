from __future__ import annotations

import base64
import hashlib
import json

import pytest

from gpuhint.cores.pipeline.dead_letter import dead_letter_record


def test_record_keeps_the_original_bytes_and_the_reason() -> None:
    raw = b"\x00\xffbinary"
    rec = json.loads(dead_letter_record("not JSON: x", "t", 3, 42, b"k", raw, now=5.0))
    assert rec == {
        "dead_letter_version": 2,
        "reason": "not JSON: x",
        "topic": "t",
        "partition": 3,
        "offset": 42,
        "key": "k",
        "value": None,  # not UTF-8: only the base64 copy
        "value_b64": base64.b64encode(raw).decode(),
        "value_length": len(raw),
        "value_sha256": hashlib.sha256(raw).hexdigest(),
        "truncated": False,
        "time": 5.0,
    }
    text = json.loads(dead_letter_record("r", "t", 0, 0, None, b'{"a": 1}', now=0))
    assert text["value"] == '{"a": 1}' and text["key"] is None


@pytest.mark.parametrize("size", [1, 10_000, 999_999, 3_000_000])
@pytest.mark.parametrize("limit", [4096, 100_000, 900_000])
def test_record_always_fits_and_says_when_it_was_cut(size: int, limit: int) -> None:
    raw = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    out = dead_letter_record("too big " * 500, "t", 0, 7, b"k" * 5000, raw, max_bytes=limit)
    assert len(out) <= limit
    rec = json.loads(out)
    kept = base64.b64decode(rec["value_b64"])
    assert raw.startswith(kept)
    assert rec["value_length"] == len(raw)
    assert rec["value_sha256"] == hashlib.sha256(raw).hexdigest()
    assert rec["truncated"] == (kept != raw)
    if rec["truncated"]:  # the cut keeps nearly all the room
        assert len(out) > limit - 2000 or len(kept) == 0


def test_an_empty_value_is_recorded_as_such() -> None:
    rec = json.loads(dead_letter_record("empty message", "t", 0, 1, None, None, now=0))
    assert rec["value_b64"] is None and rec["value_length"] is None and not rec["truncated"]
