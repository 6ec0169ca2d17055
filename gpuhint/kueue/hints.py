"""Where the applier reads hints: :class:`gpuhint.client.HintClient`, through a narrow protocol.

The applier needs one call, the hints of every queued job of a cluster
(``pending_hints``); :class:`MemoryHints` is the in-memory twin for pure tests.
"""

from __future__ import annotations

from typing import Protocol

from gpuhint.contract import PriorityHint


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


def hint_reader(redis_url: str, key_prefix: str) -> HintReader:
    """The project's hint client on ``redis_url``."""
    from gpuhint.client import HintClient

    return HintClient.from_url(redis_url, key_prefix=key_prefix)
