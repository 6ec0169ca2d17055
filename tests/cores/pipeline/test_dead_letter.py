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
        "dead_letter_version": 3,
        "reason": "not JSON: x",
        "topic": "t",
        "partition": 3,
        "offset": 42,
        "key": "k",
        "key_b64": "aw==",
        "key_length": 1,
        "key_truncated": False,
        "value": None,  # not UTF-8: only the base64 copy
        "value_b64": base64.b64encode(raw).decode(),
        "value_length": len(raw),
        "value_sha256": hashlib.sha256(raw).hexdigest(),
        "truncated": False,
        "time": 5.0,
    }
    text = json.loads(dead_letter_record("r", "t", 0, 0, None, b'{"a": 1}', now=0))
    assert text["value"] == '{"a": 1}' and text["key"] is None and text["key_b64"] is None


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


def test_a_key_that_is_not_utf8_is_kept_as_base64() -> None:
    key = b"default/\xff"
    rec = json.loads(dead_letter_record("not JSON", "t", 0, 3, key, b"x", now=0))
    assert rec["key"] is None  # no text for it
    assert base64.b64decode(rec["key_b64"]) == key
    assert rec["key_length"] == len(key) and not rec["key_truncated"]


def test_a_long_key_is_cut_and_says_so() -> None:
    key = "é".encode() * 3000  # UTF-8, 6000 bytes: cut (maybe inside a character)
    rec = json.loads(dead_letter_record("r", "t", 0, 0, key, b"v", now=0))
    kept = base64.b64decode(rec["key_b64"])
    assert rec["key_truncated"] and rec["key_length"] == len(key)
    assert key.startswith(kept) and 0 < len(kept) < len(key)
    assert kept.decode(errors="ignore") == rec["key"]  # the text of the whole characters kept


@pytest.mark.parametrize("key", [b"\x01" * 1000, "\U0001f600".encode() * 250, b"\xff" * 5000])
@pytest.mark.parametrize("value", [None, b"v", bytes(range(256)) * 4000])
def test_a_long_reason_and_key_fit_the_smallest_limit_allowed(
    key: bytes, value: bytes | None
) -> None:
    """JSON escapes a control character in 6 bytes (an emoji in 12): a 1,000-byte key
    and a 1,000-character reason do not fit 4,096 bytes as they are. They are cut,
    never an error (a poison message would stop its partition for ever)."""
    reason = f"key {key!r} is not the event's cluster/vc" + " and more" * 200
    out = dead_letter_record(reason, "gpuhint.job-events", 0, 0, key, value, max_bytes=4096)
    assert len(out) <= 4096
    rec = json.loads(out)
    assert key.startswith(base64.b64decode(rec["key_b64"])) and rec["key_truncated"]
    assert reason.startswith(rec["reason"])
    if value is not None:  # the value keeps a share of the room
        kept = base64.b64decode(rec["value_b64"])
        assert value.startswith(kept) and len(kept) >= min(len(value), 700)


def test_bytes_that_fit_are_kept_whole_when_their_text_copy_does_not() -> None:
    """A 240 KB message of non-ASCII text (within the contract's 256 KiB) is ~720 KB as
    escaped JSON text plus 320 KB of base64: over the limit together, so only a prefix of
    its bytes was kept, although the base64 copy alone fits. The text copy is dropped
    first."""
    raw = json.dumps({"job_id": "é" * 120_000}, ensure_ascii=False).encode()
    out = dead_letter_record("job_id: String should have at most 256 characters", "t", 0, 1,
                             b"c/a", raw)  # fmt: skip
    assert len(out) <= 900_000
    rec = json.loads(out)
    assert base64.b64decode(rec["value_b64"]) == raw and rec["truncated"] is False
    assert rec["value"] is None  # the text copy left out (value_b64 holds the same bytes)
