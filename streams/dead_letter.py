"""Dead-letter records: what a message was, where it came from, and why it was rejected.

>>> import json
>>> rec = json.loads(dead_letter_record("not JSON", "t", 0, 5, b"k", b"\\xff", now=1.0))
>>> rec["reason"], rec["offset"], rec["value_b64"]
('not JSON', 5, '/w==')
"""

from __future__ import annotations

import base64
import json
import time

DEAD_LETTER_VERSION = 1


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def dead_letter_record(
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    now: float | None = None,
) -> bytes:
    """JSON for the dead-letter topic. The original bytes are kept whole (base64)."""
    return json.dumps(
        {
            "dead_letter_version": DEAD_LETTER_VERSION,
            "reason": reason,
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "key": _text(key),
            "value": _text(value),
            "value_b64": base64.b64encode(value).decode() if value is not None else None,
            "time": time.time() if now is None else now,
        }
    ).encode()
