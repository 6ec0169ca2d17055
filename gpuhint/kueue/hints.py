"""Where the applier reads hints: :class:`gpuhint.redis.client.HintClient`, through a narrow
protocol.

The applier needs the hints of every queued job of a cluster (``pending_hints``) and
the cluster's load summary (``load``: its time is a sign that the worker is alive, see
:func:`last_alive`), and for the expected-start annotations ``job_starts`` (optional:
a reader without it gets none); :class:`MemoryHints` is the in-memory twin for pure
tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gpuhint.wire.contract import ClusterLoad, PriorityHint


class HintReader(Protocol):
    def pending_hints(
        self, cluster: str, vc: str | None = None, *, unreadable: list[str] | None = None
    ) -> list[PriorityHint]: ...
    def load(self, cluster: str) -> ClusterLoad | None: ...


def last_alive(hints: Iterable[PriorityHint], load: ClusterLoad | None) -> float | None:
    """The cluster's last sign of life (UNIX s): its newest hint's ``created_at`` or its
    load summary's time, whichever is later; None when it has neither.

    Not each hint's own ``created_at``: the worker rewrites a hint only when its
    priority changes, so a job waiting for hours under a healthy worker has an old one.
    """
    times = [h.created_at for h in hints]
    if load is not None:
        times.append(load.time)
    return max(times, default=None)


class MemoryHints:
    """The in-memory twin: hints by job id (and load summaries by cluster, expected
    starts by job id: ``(expected, low, high, forecast time)``)."""

    def __init__(self, hints: dict[str, PriorityHint] | None = None) -> None:
        self.hints = dict(hints or {})
        self.loads: dict[str, ClusterLoad] = {}
        self.starts: dict[str, tuple[float, float, float, float]] = {}
        self.down = False  # True: every read raises ConnectionError (Redis down)
        self.junk: list[str] = []  # keys of hints this version cannot read

    def job_starts(self, cluster: str) -> dict[str, tuple[float, float, float, float]]:
        if self.down:
            raise ConnectionError("redis is down (twin)")
        return dict(self.starts)

    def load(self, cluster: str) -> ClusterLoad | None:
        if self.down:
            raise ConnectionError("redis is down (twin)")
        return self.loads.get(cluster)

    def pending_hints(
        self, cluster: str, vc: str | None = None, *, unreadable: list[str] | None = None
    ) -> list[PriorityHint]:
        if self.down:
            raise ConnectionError("redis is down (twin)")
        if self.junk:
            if unreadable is None:
                raise ValueError(f"{self.junk[0]}: not a PriorityHint of this schema (twin)")
            unreadable.extend(self.junk)
        return [
            h for h in self.hints.values() if h.cluster == cluster and (vc is None or h.vc == vc)
        ]


def hint_reader(redis_url: str, key_prefix: str) -> HintReader:
    """The project's hint client on ``redis_url``."""
    from gpuhint.redis.client import HintClient

    return HintClient.from_url(redis_url, key_prefix=key_prefix)
