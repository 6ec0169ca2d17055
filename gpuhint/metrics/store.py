"""A Redis store that counts what it writes and when Redis fails (read at scrape time).

Counting happens in :meth:`_apply`, i.e. in the flush, once per batch: the event path
is untouched.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import redis

from gpuhint.cores.sink import (
    Count,
    Op,
    PutAdvisory,
    PutHint,
    PutLoad,
    PutStarts,
    RemoveHint,
    UpdateHint,
)
from gpuhint.redis.store import RedisStore


class MeteredRedisStore(RedisStore):
    """:class:`~gpuhint.redis.store.RedisStore` plus counters for ``/metrics``.

    ``watts_per_node`` and ``slot_s`` turn each cluster load written (one per CES slot)
    into an estimate of the energy its powered-off nodes saved in that slot.
    """

    def __init__(
        self, *args: Any, watts_per_node: float = 700.0, slot_s: float = 600.0, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.watts_per_node = watts_per_node
        self.slot_s = slot_s
        self.lock = threading.Lock()
        self.writes: Counter[str] = Counter()
        self.advisories: Counter[tuple[str, str]] = Counter()  # (action, scope)
        self.energy_saved_kwh: dict[str, float] = {}  # by cluster
        self.batches = 0
        self.redis_errors = 0
        self.failing_since: float | None = None
        self.last_error: str = ""

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> MeteredRedisStore:
        store = super().from_url(url, **kwargs)
        assert isinstance(store, MeteredRedisStore)
        return store

    def _apply(self, ops: list[Op]) -> None:
        try:
            super()._apply(ops)
        except redis.RedisError as exc:
            with self.lock:
                self.redis_errors += 1
                if self.failing_since is None:
                    self.failing_since = time.time()
                self.last_error = f"{type(exc).__name__}: {exc}"
            raise
        with self.lock:
            self.batches += 1
            self.failing_since = None
            for op in ops:
                if isinstance(op, PutHint):
                    self.writes["hint_rebuild" if op.rebuilt else "hint"] += 1
                elif isinstance(op, UpdateHint):
                    self.writes["hint_update"] += 1
                elif isinstance(op, RemoveHint):
                    self.writes["hint_remove"] += 1
                elif isinstance(op, PutAdvisory):
                    self.writes["advice"] += 1
                    scope = "cluster" if op.advisory.node is None else "node"
                    self.advisories[(op.advisory.action.value, scope)] += 1
                elif isinstance(op, PutLoad):
                    self.writes["load"] += 1
                    ld = op.load
                    off = max(0, ld.total_nodes - ld.active_nodes)
                    kwh = off * self.watts_per_node * self.slot_s / 3.6e6
                    self.energy_saved_kwh[ld.cluster] = (
                        self.energy_saved_kwh.get(ld.cluster, 0.0) + kwh
                    )
                elif isinstance(op, PutStarts):
                    self.writes["starts"] += 1
                elif isinstance(op, Count):
                    self.writes["counter"] += 1
                else:  # MarkRebuilt: one change entry
                    self.writes["rebuilt"] += 1
