"""Where the applier reads hints: :class:`gpuhint.client.HintClient`, through a narrow protocol.

The applier needs one call, the hints of every queued job of a cluster
(``pending_hints``). :func:`hint_reader` returns the project's hint client; until that
module exists, a minimal reader of the same Redis keys (docs/redis-keys.md) stands in.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from gpuhint.contract import PriorityHint
from gpuhint.keys import RedisKeys


class HintReader(Protocol):
    def pending_hints(self, cluster: str, vc: str | None = None) -> list[PriorityHint]: ...


class MemoryHints:
    """The in-memory twin: hints by job id."""

    def __init__(self, hints: dict[str, PriorityHint] | None = None) -> None:
        self.hints = dict(hints or {})

    def pending_hints(self, cluster: str, vc: str | None = None) -> list[PriorityHint]:
        return [
            h for h in self.hints.values() if h.cluster == cluster and (vc is None or h.vc == vc)
        ]


class _RedisHints:
    """Stand-in for ``gpuhint.client.HintClient.pending_hints`` (same keys, same answer)."""

    def __init__(self, client: Any, key_prefix: str = "gpuhint") -> None:
        self.r = client
        self.k = RedisKeys(key_prefix)

    def pending_hints(self, cluster: str, vc: str | None = None) -> list[PriorityHint]:
        if vc is not None:
            qkeys = [self.k.queue(cluster, vc)]
        else:
            qkeys = list(self.r.scan_iter(match=self.k.queue(cluster, "*"), count=1000))
        job_ids: list[str] = []
        for q in qkeys:
            job_ids.extend(
                m.decode() if isinstance(m, bytes) else m for m in self.r.zrange(q, 0, -1)
            )
        out = []
        for i in range(0, len(job_ids), 1000):
            chunk = job_ids[i : i + 1000]
            for raw in self.r.mget([self.k.hint(cluster, j) for j in chunk]):
                if raw:
                    out.append(PriorityHint.model_validate_json(raw))
        return out


def hint_reader(redis_url: str, key_prefix: str) -> HintReader:
    """The project's hint client on ``redis_url`` (or the stand-in until it exists)."""
    try:
        mod = importlib.import_module("gpuhint.client")
    except ImportError:
        mod = None
    if mod is not None and hasattr(mod, "HintClient"):
        reader: HintReader = mod.HintClient.from_url(redis_url, key_prefix=key_prefix)
        return reader
    import redis

    return _RedisHints(
        redis.Redis.from_url(redis_url, socket_timeout=10, health_check_interval=30), key_prefix
    )
