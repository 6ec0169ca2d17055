"""``gpuhint serve``'s loop (:class:`~gpuhint.serve.server.Server`): stops, outages."""

from __future__ import annotations

import threading
from pathlib import Path

from gpuhint.cores.job_tracker import JobTracker
from gpuhint.cores.sink import InMemoryStore, Op
from gpuhint.serve.local_log import LocalLog
from gpuhint.serve.runner import OneProcess
from gpuhint.serve.server import Server
from gpuhint.wire.contract import JobEvent


class DownStore(InMemoryStore):
    """Redis that refuses every write while ``down`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.down = threading.Event()
        self.refused = threading.Event()

    def _apply(self, ops: list[Op]) -> None:
        if self.down.is_set():
            self.refused.set()
            raise ConnectionError("Redis is down")
        super()._apply(ops)


class ListFeed:
    """A feed that hands out its events once."""

    def __init__(self, events: list[JobEvent]) -> None:
        self.tracker = JobTracker()
        self.last_poll: float | None = None
        self.events = events

    def poll(self, now: float) -> list[JobEvent]:
        out, self.events = self.events, []
        return out


def _events(n: int) -> list[JobEvent]:
    return [
        JobEvent(phase="submitted", job_id=str(i), vc="a", time=i, submit_time=i) for i in range(n)
    ]


def test_sigterm_during_a_redis_outage_stops_and_loses_nothing(tmp_path: Path) -> None:
    """A stop asked while the store is down ends the tick (it used to retry the flush
    for ever); nothing of the held batch is committed, and the next start handles it."""
    path = tmp_path / "serve.sqlite"
    store = DownStore()
    store.down.set()
    one = OneProcess(LocalLog(path), store, model="history", clock=lambda: 0.0)
    stop = threading.Event()
    server = Server(one, ListFeed(_events(5)), poll_s=0.01, stop=stop)
    runner = threading.Thread(target=server.run, daemon=True)
    runner.start()
    assert store.refused.wait(30)
    stop.set()  # SIGTERM
    runner.join(timeout=15)
    stopped = not runner.is_alive()
    store.down.clear()  # let a stuck loop finish before the test ends
    runner.join(timeout=30)
    assert stopped, "serve did not stop while Redis was down"
    assert one.log.committed() == 0
    one.log.close()

    again = InMemoryStore()
    second = OneProcess(LocalLog(path), again, model="history", clock=lambda: 0.0)
    assert second.drain() == 5
    assert [j for j, _ in again.queue("default", "a")] == [str(i) for i in range(5)]
    second.log.close()


def test_a_stop_during_a_backlog_ends_after_the_batch_in_hand(tmp_path: Path) -> None:
    """SIGTERM while a long backlog drains (after a downtime) stops after the current
    batch, committed, instead of after the whole backlog; the rest waits in the log."""
    path = tmp_path / "serve.sqlite"
    stop = threading.Event()

    def probe(step: str) -> None:
        if step == "saved":
            stop.set()  # SIGTERM arrives while the first batch is handled

    one = OneProcess(
        LocalLog(path), InMemoryStore(), model="history", batch_max=10, clock=lambda: 0.0,
        probe=probe,
    )  # fmt: skip
    server = Server(one, ListFeed(_events(100)), poll_s=0.01, stop=stop)
    server.run()
    assert one.log.committed() == 10
    one.log.close()
    store = InMemoryStore()
    second = OneProcess(LocalLog(path), store, model="history", clock=lambda: 0.0)
    assert second.drain() == 90
    assert len(store.queue("default", "a")) == 100
    second.log.close()


def test_an_idle_poll_does_not_rewrite_the_watermark_every_tick(tmp_path: Path) -> None:
    """The feed's watermark (every job the scheduler lists: ~1.4 MB for 5,000 jobs) is
    written with new events, and otherwise at most every WATERMARK_EVERY_S: an idle
    cluster polled every 10 s must not rewrite it (fsynced) 8,640 times a day."""
    from gpuhint.serve.server import WATERMARK_EVERY_S

    now = [1000.0]
    feed = ListFeed(_events(3))
    one = OneProcess(LocalLog(tmp_path / "serve.sqlite"), InMemoryStore(), model="history")
    writes: list[int] = []
    ingest = one.ingest

    def counted(events: list[JobEvent], meta: dict[str, str] | None = None) -> int:
        if meta:
            writes.append(len(events))
        return ingest(events, meta)

    one.ingest = counted  # type: ignore[method-assign]
    server = Server(one, feed, clock=lambda: now[0])
    feed.last_poll = now[0]  # the feed read the scheduler
    server.tick()
    assert writes == [3]  # with the events, in their transaction
    for _ in range(5):
        now[0] += 10.0
        feed.last_poll = now[0]
        server.tick()
    assert writes == [3]
    now[0] += WATERMARK_EVERY_S
    feed.last_poll = now[0]
    server.tick()
    assert writes == [3, 0]
    feed.events = _events(4)[3:]
    now[0] += 10.0
    server.tick()
    assert writes == [3, 0, 1]
    one.log.close()


def test_a_stop_during_a_slow_but_working_flush_lets_it_finish(tmp_path: Path) -> None:
    """Only a flush that the store refused is given up on a stop: one that is merely
    slow (a big batch) completes, and its batch is committed."""
    stop = threading.Event()

    class SlowStore(InMemoryStore):
        def _apply(self, ops: list[Op]) -> None:
            if ops:
                stop.set()  # SIGTERM while Redis takes the batch
                threading.Event().wait(0.6)
            super()._apply(ops)

    one = OneProcess(LocalLog(tmp_path / "serve.sqlite"), SlowStore(), model="history")
    server = Server(one, ListFeed(_events(5)), poll_s=0.01, stop=stop)
    server.run()
    assert one.log.committed() == 5
    one.log.close()
