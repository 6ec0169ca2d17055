"""Redis back empty: every owned VC's pending hints are rebuilt, by every process, once,
and never from a VC state a batch is changing."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from gpuhint.cores.pipeline.checkpoint import BatchRoutine, ListEdge, Sink
from gpuhint.cores.pipeline.handler import Message, MessageHandler
from gpuhint.cores.pipeline.inprocess import InProcessPipeline
from gpuhint.cores.pipeline.state_table import TableStates
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, PriorityHint, encode_message
from models.history import HistoryEstimator


class Hooked(InMemoryStore):
    """The Redis twin; once armed, the first rebuilt put waits (up to 5 s) until the test
    lets it go: a thread switch inside ``engine.rebuild``'s walk of the VC states."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = threading.Event()
        self.go = threading.Event()
        self.armed = False

    def put_hint(self, hint: PriorityHint, *, rebuilt: bool = False) -> None:
        if rebuilt and self.armed:
            self.armed = False
            self.reading.set()
            self.go.wait(5)
        super().put_hint(hint, rebuilt=rebuilt)


def _job(offset: int, phase: str, job: str) -> Message:
    kw = {"start_time": 5} if phase == "started" else {}
    ev = JobEvent(phase=phase, job_id=job, vc="a", num_gpus=1, time=5, submit_time=0, **kw)
    return Message("gpuhint.job-events", 0, offset, b"default/a", encode_message(ev))


def test_another_agents_flush_never_rebuilds_while_a_batch_runs() -> None:
    """The worker's cluster-load agent flushes the shared store; when that flush finds
    Redis empty, its rebuild (in a thread) must not walk the VC states while the job
    agent's next batch changes them: a hint rebuilt from a stale read would bring a
    started job's hint back (or the walk fails: the dict changed size)."""
    store = Hooked()
    states = TableStates({})
    engine = HintEngine(HistoryEstimator, store, states=states)
    sink = Sink(store, lambda: engine.rebuild(list(states)))
    routine: BatchRoutine[Message] = BatchRoutine(
        MessageHandler(engine), states, ListEdge(committed={0: 0}), sink.flush, 0
    )

    async def main() -> None:
        await routine.run_batch([_job(0, "submitted", "j1"), _job(1, "submitted", "j2")])
        store.armed = True
        store.wipe()  # Redis restarted empty
        store.count("ces")  # the cluster-load agent has a write to flush
        ces_flush = asyncio.ensure_future(routine.flush())  # its flush, as the agent calls it
        assert await asyncio.to_thread(store.reading.wait, 5)  # its rebuild is under way
        batch = asyncio.ensure_future(routine.run_batch([_job(2, "started", "j1")]))
        await asyncio.sleep(0.2)  # time for the batch to run, were it let in
        store.go.set()
        await asyncio.gather(ces_flush, batch)

    asyncio.run(main())
    assert "j1" not in states["default/a"].pending  # the state says: started
    assert sorted(j for _, j in store.hints) == ["j2"]  # as a run without the wipe


def _sub(job: str, vc: str, t: float) -> JobEvent:
    return JobEvent(phase="submitted", job_id=job, vc=vc, num_gpus=1, time=t, submit_time=t)


def _wiped_then_run(workers: int) -> list[str]:
    p = InProcessPipeline("history", partitions=2)
    # d on partition 0; b and c on partition 1
    p.publish([_sub("d1", "d", 0), _sub("b1", "b", 1), _sub("c1", "c", 2)])
    p.run(workers=2)
    assert sorted(j for _, j in p.redis.hints) == ["b1", "c1", "d1"]
    p.redis.wipe()  # Redis restarted empty while the workers were down
    p.publish([_sub("d2", "d", 3), _sub("b2", "b", 4)])  # new events on both partitions
    p.run(workers=workers)  # fresh worker processes
    return sorted(j for _, j in p.redis.hints)


def test_workers_started_after_redis_came_back_empty_rebuild_every_vc() -> None:
    """Only the first of two fresh workers finds the marker missing; the second starts
    after it was re-created. Both rebuild their VCs: the answer of one worker."""
    want = ["b1", "b2", "c1", "d1", "d2"]
    assert _wiped_then_run(1) == want
    assert _wiped_then_run(2) == want


def test_a_flush_rebuilds_partitions_not_written_under_the_current_epoch() -> None:
    store = InMemoryStore()
    store.epoch = "made-by-another-process"  # Redis is not new; this process wrote nothing
    owned: set[int] = {1}
    calls: list[set[int]] = []

    def rebuild() -> int:
        calls.append(set(owned))
        return 0

    sink = Sink(store, rebuild, lambda: owned)
    asyncio.run(sink.flush())  # a first flush, nothing buffered: the marker is read
    assert store.epoch_seen == "made-by-another-process"
    assert calls == [{1}] and (sink.rebuilds, sink.catch_ups) == (0, 1)
    assert [c.type for c in store.changes] == []  # nothing lost: no `rebuilt` change
    asyncio.run(sink.flush())
    assert calls == [{1}]  # written under this epoch: nothing to do
    owned.add(3)  # partition 3 assigned (its owner may have died before rebuilding it)
    asyncio.run(sink.flush())
    assert calls == [{1}, {1, 3}] and sink.catch_ups == 2
    owned.discard(3)
    asyncio.run(sink.flush())
    owned.add(3)  # back, same epoch: its other owner kept it in this Redis
    asyncio.run(sink.flush())
    assert len(calls) == 2
    store.wipe()  # Redis back empty: rebuilt and announced
    store.count("y")
    asyncio.run(sink.flush())
    assert len(calls) == 3 and sink.rebuilds == 1
    assert store.changes[-1].type == "rebuilt" and store.changes[-1].key == "redis_empty"


def test_a_first_start_into_an_empty_redis_is_not_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A new Redis with no state waiting is what every first start sees: said at INFO.
    Redis losing hints that were waiting is the alarm, at WARNING."""
    store = InMemoryStore()
    pending = [0]
    sink = Sink(store, lambda: pending[0], lambda: {0})
    with caplog.at_level(logging.INFO, logger="gpuhint.cores.pipeline.store_flush"):
        store.count("x")
        asyncio.run(sink.flush())  # the very first write finds no marker
        assert sink.rebuilds == 1
        assert [r.levelno for r in caplog.records] == [logging.INFO]
        caplog.clear()
        store.wipe()  # later Redis loses the hints of 3 waiting jobs
        pending[0] = 3
        store.count("y")
        asyncio.run(sink.flush())
        assert [r.levelno for r in caplog.records] == [logging.WARNING]
        assert "re-wrote 3 pending hints" in caplog.records[0].getMessage()
