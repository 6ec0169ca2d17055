"""Each time Faust resumes flow it clears the stream queues; what was queued must come
again for every topic an agent reads, not only the job events.

Issue 21's mechanism (a partition never committed is not sought; a fetch drained before
Faust's seek to the commit is queued after it, then cleared, and moves Faust's read
offset past what it dropped) drops node-status and cluster-telemetry records too. With
no batch routine behind them, Faust's own commit then stalls behind the dropped offsets
for the life of the process (a hole of two or more), or commits past one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from faust.types import TP

from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.config import load_settings
from streams.app import build_app


class _Commit:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class _FakeAiokafka:
    """The consumer thread's aiokafka consumer: assignment, seeks, the group's commits."""

    def __init__(self, assigned: set[TP], commits: dict[TP, int]) -> None:
        self.assigned = assigned
        self.seeks: list[tuple[TP, int]] = []
        self._coordinator = self
        self.commits = commits

    def assignment(self) -> set[TP]:
        return self.assigned

    def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))

    async def fetch_committed_offsets(self, tps: list[TP]) -> dict[TP, _Commit]:
        return {tp: _Commit(self.commits[tp]) for tp in tps if tp in self.commits}

    async def beginning_offsets(self, tps: list[TP]) -> dict[TP, int]:
        return {tp: 5 for tp in tps}  # retention removed 0..4

    async def end_offsets(self, tps: list[TP]) -> dict[TP, int]:
        return {tp: 5 if tp.partition == 3 else 9 for tp in tps}  # partition 3: empty


class _ThreadOf:
    def __init__(self, fake: _FakeAiokafka) -> None:
        self.fake = fake
        self._started = asyncio.Event()
        self._started.set()

    def _ensure_consumer(self) -> _FakeAiokafka:
        return self.fake

    def assignment(self) -> set[TP]:
        return self.fake.assignment()

    async def call_thread(self, fun: Any, *args: Any) -> Any:
        return await fun(*args)


def test_node_status_and_telemetry_are_held_and_delivered_again_at_resume(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        topic_prefix="fr", app_id="flow-resume-test", state_dir=str(tmp_path), ces_enabled=True
    )
    t = settings.topics
    telemetry, status, jobs = TP(t.cluster_telemetry, 2), TP(t.node_status, 1), TP(t.job_events, 0)
    fresh, empty = TP(t.node_status, 2), TP(t.cluster_telemetry, 3)  # never committed
    fake = _FakeAiokafka(
        {telemetry, status, jobs, fresh, empty}, {telemetry: 40, status: 7, jobs: 3}
    )

    async def scenario() -> tuple[list[bool], list[bool], Any]:
        store = InMemoryStore()
        w = build_app(settings, store)
        app: Any = w.app
        consumer: Any = app.consumer
        consumer._thread = _ThreadOf(fake)
        consumer._read_offset[telemetry] = 3320  # a stale fetch delivered, then cleared
        app.flow_control.resume()  # Faust clears the queues
        stale = [consumer._fetched_before_seek(tp, 3000) for tp in (telemetry, status)]
        stale.append(consumer._fetched_before_seek(empty, 0))
        for _ in range(80):
            await asyncio.sleep(0)
        again = [consumer._fetched_before_seek(telemetry, o) for o in (39, 40, 41)]
        again.append(consumer._fetched_before_seek(empty, 0))  # released: delivered
        return stale, again, consumer._read_offset[telemetry]

    stale, again, read = asyncio.run(scenario())
    assert stale == [True, True, True]  # what the fetch loop still holds is dropped
    # the job partition first (hints wait on it); a partition never committed from
    # the log's start; an empty one is released, not sought
    assert fake.seeks[0] == (jobs, 5)  # its commit (3) is older than the log's start (5)
    assert set(fake.seeks) == {(telemetry, 40), (status, 7), (jobs, 5), (fresh, 5)}
    assert again == [True, False, False, False] and read == 40  # from the group's commit on


class _SlowCommits(_FakeAiokafka):
    """The broker does not answer the first reads of the group's commits in time."""

    def __init__(self, assigned: set[TP], commits: dict[TP, int], timeouts: int) -> None:
        super().__init__(assigned, commits)
        self.timeouts = timeouts

    async def fetch_committed_offsets(self, tps: list[TP]) -> dict[TP, _Commit]:
        if self.timeouts > 0:
            self.timeouts -= 1
            raise TimeoutError()
        return await super().fetch_committed_offsets(tps)


def test_a_slow_broker_keeps_the_partitions_held_until_their_offsets_are_read(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A commit read that times out (a loaded broker) is retried: releasing the held
    partitions without a seek would skip what Faust dropped (the commit passes it)."""
    import streams.app as app_module

    monkeypatch.setattr(app_module, "REDELIVERY_RETRY_S", (0.0,))
    settings = load_settings(
        topic_prefix="fs", app_id="flow-slow-test", state_dir=str(tmp_path), ces_enabled=True
    )
    t = settings.topics
    status, jobs = TP(t.node_status, 1), TP(t.job_events, 0)
    fake = _SlowCommits({status, jobs}, {status: 7, jobs: 3}, timeouts=3)

    async def scenario() -> tuple[bool, bool]:
        w = build_app(settings, InMemoryStore())
        app: Any = w.app
        consumer: Any = app.consumer
        consumer._thread = _ThreadOf(fake)
        app.flow_control.resume()
        for _ in range(60):
            await asyncio.sleep(0)
        return consumer._fetched_before_seek(status, 6), consumer._fetched_before_seek(status, 7)

    dropped_before, dropped_at = asyncio.run(scenario())
    assert fake.timeouts == 0
    # both sought, after the timeouts (jobs: its commit, 3, is older than the log start)
    assert set(fake.seeks) == {(status, 7), (jobs, 5)}
    assert (dropped_before, dropped_at) == (True, False)


class _Retention(_FakeAiokafka):
    """Retention deleted offsets 0..19 of every partition."""

    async def beginning_offsets(self, tps: list[TP]) -> dict[TP, int]:
        return {tp: 20 for tp in tps}

    async def end_offsets(self, tps: list[TP]) -> dict[TP, int]:
        return {tp: 30 for tp in tps}


def test_a_commit_older_than_the_log_start_is_delivered_again_from_the_log_start(
    tmp_path: Path,
) -> None:
    """The group's commits (3, 7) are older than the log's start (20: a group stopped
    for longer than the retention). aiokafka resets a seek to 3 to the log's start, so
    the fetch loop's mark waiting for offset 3 dropped every record that came: the
    partition delivered nothing and its commit stayed put for the life of the process."""
    settings = load_settings(
        topic_prefix="fret", app_id="flow-retention", state_dir=str(tmp_path), ces_enabled=True
    )
    t = settings.topics
    status, jobs = TP(t.node_status, 1), TP(t.job_events, 0)
    fake = _Retention({status, jobs}, {status: 7, jobs: 3})

    async def scenario() -> list[bool]:
        w = build_app(settings, InMemoryStore())
        app: Any = w.app
        consumer: Any = app.consumer
        consumer._thread = _ThreadOf(fake)
        app.flow_control.resume()
        for _ in range(80):
            await asyncio.sleep(0)
        return [consumer._fetched_before_seek(tp, 20) for tp in (jobs, status)]

    assert asyncio.run(scenario()) == [False, False]  # the log's first record is taken
    assert set(fake.seeks) == {(status, 20), (jobs, 20)}
