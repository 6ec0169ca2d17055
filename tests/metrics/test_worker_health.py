"""Readiness rules of the worker, on plain stand-ins for the Faust app's state."""

from __future__ import annotations

import time
from types import SimpleNamespace

import redis

from gpuhint.metrics.store import MeteredRedisStore
from gpuhint.metrics.worker import worker_health


class Consumer:
    def __init__(self, tps: set[str]) -> None:
        self.tps = tps

    def assignment(self) -> set[str]:
        return self.tps


def _worker(**app: object) -> SimpleNamespace:
    base: dict[str, object] = {"_consumer": None, "rebalancing": False, "in_recovery": False}
    base.update(app)
    return SimpleNamespace(app=SimpleNamespace(**base))


def test_ready_only_when_consuming_and_redis_takes_writes() -> None:
    store = MeteredRedisStore(redis.Redis())  # never contacted here
    assert worker_health(_worker(), store) == (False, "starting: no Kafka consumer yet")
    assert worker_health(_worker(_consumer=Consumer({"t0"}), rebalancing=True), store)[1] == (
        "rebalancing"
    )
    assert (
        "recovering"
        in worker_health(_worker(_consumer=Consumer({"t0"}), in_recovery=True), store)[1]
    )
    assert worker_health(_worker(_consumer=Consumer(set())), store) == (
        False,
        "no partitions assigned",
    )
    ok = _worker(_consumer=Consumer({"t0", "t1"}))
    assert worker_health(ok, store) == (True, "consuming 2 partition(s)")
    store.failing_since, store.last_error = time.time() - 30, "ConnectionError: refused"
    ready, why = worker_health(ok, store)
    assert not ready and why.startswith("Redis writes failing for 30 s")
