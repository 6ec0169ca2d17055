"""The in-memory store; tests/redis/test_store.py runs the same contract on Redis."""

from __future__ import annotations

import pytest

from gpuhint.cores.sink import BufferedStore, InMemoryStore, Op
from gpuhint.wire.contract import PriorityHint


def hint(job: str, prio: float, vc: str = "a") -> PriorityHint:
    return PriorityHint(
        job_id=job,
        vc=vc,
        num_gpus=1,
        submit_time=0,
        predicted_duration_s=prio,
        priority=prio,
        model="m",
        model_version="1",
        created_at=0,
    )


def test_writes_are_invisible_until_flush() -> None:
    s = InMemoryStore()
    s.put_hint(hint("j1", 5))
    assert s.get_hint("default", "j1") is None and s.pending == 1
    assert s.flush() == 1 and s.pending == 0
    assert s.get_hint("default", "j1") == hint("j1", 5)


def test_queue_orders_by_priority_and_removal_cleans_up() -> None:
    s = InMemoryStore()
    for j, p in [("big", 100), ("small", 1), ("mid", 10)]:
        s.put_hint(hint(j, p))
    s.remove_hint("default", "a", "mid")
    s.flush()
    assert s.queue("default", "a") == [("small", 1.0), ("big", 100.0)]
    assert s.get_hint("default", "mid") is None
    kinds = [c.type for c in s.changes]
    assert kinds == ["hint", "hint", "hint", "hint_removed"]


def test_replaying_the_same_ops_gives_the_same_state() -> None:
    s = InMemoryStore()
    ops = [
        lambda: s.put_hint(hint("j1", 3)),
        lambda: s.put_hint(hint("j2", 4)),
        lambda: s.remove_hint("default", "a", "j1"),
    ]
    for op in ops:
        op()
    s.flush()
    first = (dict(s.hints), s.queue("default", "a"))
    for op in ops:
        op()
    s.flush()
    assert (dict(s.hints), s.queue("default", "a")) == first


def test_removing_an_unknown_hint_is_harmless_and_not_announced() -> None:
    s = InMemoryStore()
    s.remove_hint("default", "a", "ghost")
    s.flush()
    assert s.changes == [] and s.queue("default", "a") == []


def test_counters() -> None:
    s = InMemoryStore()
    s.count("dead_letter")
    s.count("dead_letter", 2)
    s.flush()
    assert s.counters() == {"dead_letter": 3}


class Flaky(BufferedStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail = True
        self.applied: list[Op] = []

    def _apply(self, ops: list[Op]) -> None:
        if self.fail:
            raise ConnectionError("store down")
        self.applied.extend(ops)


def test_a_failed_flush_loses_nothing() -> None:
    s = Flaky()
    s.count("a")
    with pytest.raises(ConnectionError):
        s.flush()
    s.count("b")
    assert s.pending == 2
    s.fail = False
    assert s.flush() == 2
    assert [op.name for op in s.applied] == ["a", "b"]  # type: ignore[union-attr]


def test_buffer_is_bounded_by_auto_flush() -> None:
    s = InMemoryStore(max_buffer=3)
    for i in range(7):
        s.put_hint(hint(f"j{i}", i))
    assert s.pending == 1 and len(s.hints) == 6


def test_the_twin_announces_a_replayed_update_once_as_redis_does() -> None:
    """The same update applied twice (a replay) changes nothing the second time: one
    ``hint_updated`` change, as RedisStore's script (tests/redis/test_store_retries.py)."""
    store = InMemoryStore()
    store.put_hint(hint("x", 100))
    for _ in range(2):
        store.update_hint(hint("x", 10))
        store.flush()
    assert [c.type for c in store.changes] == ["hint", "hint_updated"]
    assert store.queue("default", "a") == [("x", 10.0)]


def test_a_sink_that_lost_acknowledged_writes_is_rebuilt_as_a_rollback() -> None:
    """Redis back from an older snapshot keeps its epoch marker: the store reports the
    lost writes (``redis_rollback``) and the sink rewrites the pending hints, announced."""
    import asyncio

    from gpuhint.cores.pipeline.store_flush import Sink

    class RolledBack(InMemoryStore):
        lose = False

        def _apply(self, ops: list[Op]) -> None:
            super()._apply(ops)
            assert self.epoch is not None
            self._saw_epoch(False, self.epoch, lost_writes=self.lose)
            self.lose = False

    store = RolledBack()

    def rebuild() -> int:
        store.put_hint(hint("j1", 5), rebuilt=True)
        return 1

    sink = Sink(store, rebuild)
    store.count("x")
    asyncio.run(sink.flush())  # a fresh twin: its marker was created
    store.lose = True
    store.count("x")
    asyncio.run(sink.flush())
    assert sink.rebuilds == 2 and store.empty_reason == "redis_rollback"
    assert [c.key for c in store.changes if c.type == "rebuilt"] == [
        "redis_empty",
        "redis_rollback",
    ]
    store.count("x")
    asyncio.run(sink.flush())
    assert sink.rebuilds == 2
