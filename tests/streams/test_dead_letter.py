from __future__ import annotations

import base64
import json

from streams.dead_letter import dead_letter_record


def test_record_keeps_the_original_bytes_and_the_reason() -> None:
    raw = b"\x00\xffbinary"
    rec = json.loads(dead_letter_record("not JSON: x", "t", 3, 42, b"k", raw, now=5.0))
    assert rec == {
        "dead_letter_version": 1,
        "reason": "not JSON: x",
        "topic": "t",
        "partition": 3,
        "offset": 42,
        "key": "k",
        "value": None,  # not UTF-8: only the base64 copy
        "value_b64": base64.b64encode(raw).decode(),
        "time": 5.0,
    }
    text = json.loads(dead_letter_record("r", "t", 0, 0, None, b'{"a": 1}', now=0))
    assert text["value"] == '{"a": 1}' and text["key"] is None
