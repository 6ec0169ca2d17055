"""Dead-letter records: what a message was, where it came from, and why it was rejected.

A record always fits ``max_bytes`` (keep it under the broker's ``max.message.bytes``):
the original bytes are kept whole (``value_b64``, and ``value`` when they are UTF-8)
when they fit, else ``value_b64`` holds a prefix and ``truncated`` is true. The
original's ``value_length`` and ``value_sha256`` are always there.

>>> import json
>>> rec = json.loads(dead_letter_record("not JSON", "t", 0, 5, b"k", b"\\xff", now=1.0))
>>> rec["reason"], rec["offset"], rec["value_b64"], rec["truncated"]
('not JSON', 5, '/w==', False)
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

DEAD_LETTER_VERSION = 2
DEFAULT_MAX_BYTES = 900_000
"""Below Kafka's default ``max.message.bytes`` (1 MiB) with room for the record batch."""
_MAX_REASON = 1000
_MAX_KEY = 1000


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _dump(rec: dict[str, Any]) -> bytes:
    return json.dumps(rec, separators=(",", ":")).encode()


def dead_letter_record(
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    now: float | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> bytes:
    """JSON for the dead-letter topic, at most ``max_bytes`` long."""
    key_text = _text(key)
    rec: dict[str, Any] = {
        "dead_letter_version": DEAD_LETTER_VERSION,
        "reason": reason[:_MAX_REASON],
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": key_text[:_MAX_KEY] if key_text is not None else None,
        "value": None,
        "value_b64": None,
        "value_length": len(value) if value is not None else None,
        "value_sha256": hashlib.sha256(value).hexdigest() if value is not None else None,
        "truncated": False,
        "time": time.time() if now is None else now,
    }
    if value is None:
        return _dump(rec)
    whole = dict(rec, value=_text(value), value_b64=base64.b64encode(value).decode())
    out = _dump(whole)
    if len(out) <= max_bytes:
        return out
    rec["truncated"] = True
    room = max_bytes - len(_dump(rec)) - 2  # the quotes of the base64 string
    keep = max(0, room // 4 * 3)
    rec["value_b64"] = base64.b64encode(value[:keep]).decode()
    out = _dump(rec)
    if len(out) > max_bytes:  # a max_bytes below the fixed fields: say so, keep only those
        raise ValueError(f"max_bytes {max_bytes} is too small for a dead-letter record")
    return out
