"""Each applier's last pass, kept in Redis for ``gpuhint status`` (docs/redis-keys.md).

After every pass an applier writes ``{prefix}:v1:applier:{cluster}:{name}``: one JSON
object with when (``at``, UNIX seconds), whether it worked (``ok``), what it did
(``result``: the pass's own summary) or why not (``error``), how often it runs
(``interval_s``) and where (``host``, ``pid``). Dry runs write nothing. Writing is best
effort: Redis down is the pass's own problem, reported by the pass. The record has no
TTL: an applier that stopped stays "stopped" in ``gpuhint status`` however long ago
(an expired record would read as "no applier", and a healthy exit); one retired for
good is forgotten by deleting its key.

>>> from gpuhint.wire.keys import RedisKeys
>>> class R(dict):  # a stand-in for redis.Redis: get and set
...     def set(self, key, value, ex=None): self[key] = value
>>> r = R()
>>> record_pass(r, RedisKeys(), "prod", "slurm-priorities", ok=True,
...             result={"updated": 3}, interval_s=30, now=1000.0)
True
>>> read_passes(r, RedisKeys(), "prod")["slurm-priorities"]["result"]
{'updated': 3}
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any

from gpuhint.wire.keys import RedisKeys

log = logging.getLogger(__name__)

APPLIERS = ("slurm-priorities", "slurm-power", "kueue")


def record_pass(
    r: Any,
    keys: RedisKeys,
    cluster: str,
    applier: str,
    ok: bool,
    interval_s: float,
    result: dict[str, Any] | None = None,
    error: str | None = None,
    now: float | None = None,
) -> bool:
    """Write the pass's record; False (logged at debug) when Redis refuses."""
    doc = {
        "applier": applier,
        "cluster": cluster,
        "at": time.time() if now is None else now,
        "ok": ok,
        "interval_s": interval_s,
        "result": result or {},
        "error": error,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    try:
        text = json.dumps(doc, sort_keys=True, default=str)
        r.set(keys.applier(cluster, applier), text)  # no TTL (one key per applier)
    except Exception as exc:  # redis.RedisError and the like: best effort
        log.debug("cannot record the %s pass: %s", applier, exc)
        return False
    return True


def record_result(
    r: Any,
    keys: RedisKeys,
    cluster: str,
    applier: str,
    interval_s: float,
    result: Any = None,
    exc: BaseException | None = None,
    dry_run: bool = False,
) -> bool:
    """:func:`record_pass` for a pass's result (its ``as_dict()``) or the exception it
    failed with; a dry run records nothing (returns False)."""
    if dry_run:
        return False
    return record_pass(
        r,
        keys,
        cluster,
        applier,
        ok=exc is None,
        interval_s=interval_s,
        result=dict(result.as_dict()) if result is not None else None,
        error=" ".join(f"{type(exc).__name__}: {exc}".split())[:300] if exc else None,
    )


def read_passes(r: Any, keys: RedisKeys, cluster: str) -> dict[str, dict[str, Any]]:
    """The last pass of each applier of ``cluster`` that wrote one (unreadable: skipped)."""
    out: dict[str, dict[str, Any]] = {}
    for name in APPLIERS:
        raw = r.get(keys.applier(cluster, name))
        if raw is None:
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out[name] = doc
    return out
