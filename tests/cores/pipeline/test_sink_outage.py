"""A sink outage pauses the work: no valid event is dead-lettered, none is lost.

A write on the event path never flushes the store (``max_buffer`` used to flush from the
write itself, outside the sink's retries: a Redis outage then dead-lettered a valid event
as a "processing error", its offset committed, or crashed the batch). The routine flushes
a full buffer between events through the sink, which retries until Redis is back."""

from __future__ import annotations

import asyncio

import pytest

from gpuhint.cores.pipeline.checkpoint import BatchRoutine, ListEdge, Sink
from gpuhint.cores.pipeline.handler import Message, MessageHandler
from gpuhint.cores.pipeline.state_table import TableStates
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore, Op, SinkError
from gpuhint.wire.contract import JobEvent, encode_message
from models.history import HistoryEstimator


class FlakyRedis(InMemoryStore):
    """The Redis twin; the first ``fail`` applies raise (Redis down), then it is back."""

    def __init__(self, fail: int, max_buffer: int = 10_000) -> None:
        super().__init__(max_buffer=max_buffer)
        self.fail = fail
        self.applies: list[int] = []

    def _apply(self, ops: list[Op]) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("Redis down")
        self.applies.append(len(ops))
        super()._apply(ops)


def _msg(offset: int, job: str) -> Message:
    ev = JobEvent(phase="submitted", job_id=job, vc="a", num_gpus=1, time=0, submit_time=0)
    return Message("gpuhint.job-events", 0, offset, b"default/a", encode_message(ev))


def _routine(
    store: InMemoryStore, table: dict[str, bytes], committed: int
) -> tuple[BatchRoutine[Message], ListEdge, Sink]:
    states = TableStates(table)
    handler = MessageHandler(HintEngine(HistoryEstimator, store, states=states))
    edge = ListEdge(committed={0: committed})
    sink = Sink(store, lambda: 0)
    sink.max_backoff_s = 0.05
    routine: BatchRoutine[Message] = BatchRoutine(
        handler, states, edge, flush=sink.flush, save_interval_s=0
    )
    return routine, edge, sink


def _dead(edge: ListEdge) -> list[str | None]:
    return [o.reason for o in edge.emitted if o.dead_letter is not None]


@pytest.mark.parametrize("fail", [1, 5])
def test_a_full_buffer_during_an_outage_waits_for_redis(fail: int) -> None:
    store = FlakyRedis(fail=fail, max_buffer=3)
    routine, edge, sink = _routine(store, {}, 0)
    asyncio.run(routine.run_batch([_msg(o, f"j{o}") for o in range(4)]))
    assert _dead(edge) == []  # no valid event dead-lettered
    assert sink.failures == fail  # the sink waited (retried) for Redis
    assert routine.committable(0) == 4
    assert [j for j, _ in store.queue("default", "a")] == ["j0", "j1", "j2", "j3"]
    assert store.applies[0] == 3  # flushed when full, between events, through the sink


def test_a_restart_with_redis_down_and_a_deep_vc() -> None:
    """A VC with more waiting jobs than ``max_buffer``: its first redelivered event
    re-writes every waiting hint (10,001 writes); Redis down for the first try."""
    table: dict[str, bytes] = {}
    up = InMemoryStore()
    routine, _, _ = _routine(up, table, 0)
    n = 10_001
    msgs = [_msg(o, f"j{o}") for o in range(n)]
    for i in range(0, n, 500):
        asyncio.run(routine.run_batch(msgs[i : i + 500]))
    # a crash after the save, before the commit of the last batch: restart from 10,000
    down = FlakyRedis(fail=1)
    routine2, edge2, sink2 = _routine(down, table, 10_000)
    asyncio.run(routine2.run_batch([msgs[10_000]]))
    assert _dead(edge2) == [] and sink2.failures == 1
    assert routine2.committable(0) == n
    assert len(down.queue("default", "a")) == n


def test_a_store_behind_a_sink_never_flushes_from_a_write() -> None:
    store = FlakyRedis(fail=1, max_buffer=2)
    Sink(store, lambda: 0)
    for i in range(5):
        store.count(f"c{i}")  # no I/O: nothing raises, everything is held
    assert store.full and store.pending == 5 and store.applies == []


def test_an_automatic_flush_that_fails_is_an_outage_not_a_bad_event() -> None:
    """A store used without a sink still flushes from the write that fills it; its
    failure reaches the driver as a SinkError, never a dead letter."""
    store = FlakyRedis(fail=1, max_buffer=1)
    handler = MessageHandler(HintEngine(HistoryEstimator, store))
    with pytest.raises(SinkError):
        handler.job_event(_msg(0, "j0"))
    assert handler.stats.dead_letter == 0
    assert store.pending == 1  # the hint is still buffered
