"""Dead-letter records: what a message was, where it came from, and why it was rejected.

A record always fits ``max_bytes`` (keep it under the broker's ``max.message.bytes``):
the original bytes are kept whole (``value_b64``, and ``value`` when they are UTF-8
and that text copy fits too) when they fit, else ``value_b64`` holds a prefix and
``truncated`` is true. The original's ``value_length`` and ``value_sha256`` are always
there. The key likewise:
``key_b64`` holds its bytes (``key`` its text when it is UTF-8, else null),
``key_length`` its length, and ``key_truncated`` says ``key_b64`` (and ``key``) kept
only a prefix. The reason and the key are cut to fit too (shortest ``max_bytes``
allowed, 4096: a long key and a long reason still leave room for a prefix of the
value), so building a record never fails: a poison message is dead-lettered, not retried
for ever.

>>> import json
>>> rec = json.loads(dead_letter_record("not JSON", "t", 0, 5, b"k", b"\\xff", now=1.0))
>>> rec["reason"], rec["offset"], rec["value_b64"], rec["truncated"]
('not JSON', 5, '/w==', False)
>>> rec["key"], rec["key_b64"], rec["key_truncated"]
('k', 'aw==', False)
>>> json.loads(dead_letter_record("r", "t", 0, 5, b"\\xff", None, now=1.0))["key_b64"]
'/w=='
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

DEAD_LETTER_VERSION = 3
"""3: ``key_b64``, ``key_length`` and ``key_truncated`` added."""
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


def _b64_len(n: int) -> int:
    return 4 * ((n + 2) // 3)


def _key_fields(key: bytes | None, limit: int) -> dict[str, Any]:
    """The key's fields, its bytes cut to ``limit``."""
    if key is None:
        return {"key": None, "key_b64": None, "key_length": None, "key_truncated": False}
    kept = key[:limit]
    utf8 = _text(key) is not None
    return {
        "key": kept.decode("utf-8", errors="ignore") if utf8 else None,  # a cut char dropped
        "key_b64": base64.b64encode(kept).decode(),
        "key_length": len(key),
        "key_truncated": len(kept) < len(key),
    }


def _with_value(rec: dict[str, Any], value: bytes, max_bytes: int) -> bytes | None:
    """``rec`` with the value whole when it fits (its text copy too, when that fits),
    else a prefix that fits (None: the other fields alone do not fit)."""
    b64 = base64.b64encode(value).decode()
    for text in (_text(value), None):
        out = _dump(dict(rec, value=text, value_b64=b64))
        if len(out) <= max_bytes:
            return out
    rec = dict(rec, truncated=True)
    room = max_bytes - len(_dump(rec)) - 2  # the quotes of the base64 string
    if room < 0:
        return None
    rec["value_b64"] = base64.b64encode(value[: room // 4 * 3]).decode()
    return _dump(rec)


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
    """JSON for the dead-letter topic, at most ``max_bytes`` long.

    The reason and the key are cut (halved, down to nothing) until the record's other
    fields leave a quarter of ``max_bytes`` (or the whole value, if less) to the value.
    Raises ValueError only for a ``max_bytes`` below the fixed fields (a few hundred
    bytes; the setting's minimum is 4096)."""
    where = {"topic": topic, "partition": partition, "offset": offset}
    fixed: dict[str, Any] = {
        "value": None,
        "value_b64": None,
        "value_length": len(value) if value is not None else None,
        "value_sha256": hashlib.sha256(value).hexdigest() if value is not None else None,
        "truncated": False,
        "time": time.time() if now is None else now,
    }
    reserve = 0 if value is None else min(_b64_len(len(value)) + 2, max_bytes // 4)
    reason_max, key_max = _MAX_REASON, _MAX_KEY
    while True:
        rec = {
            "dead_letter_version": DEAD_LETTER_VERSION,
            "reason": reason[:reason_max],
            **where,
            **_key_fields(key, key_max),
            **fixed,
        }
        last = reason_max == 0 and key_max == 0
        if len(_dump(rec)) <= max_bytes - (0 if last else reserve):
            out = _dump(rec) if value is None else _with_value(rec, value, max_bytes)
            if out is not None:
                return out
        if last:  # a max_bytes below the fixed fields: say so
            raise ValueError(f"max_bytes {max_bytes} is too small for a dead-letter record")
        reason_max //= 2
        key_max //= 2
