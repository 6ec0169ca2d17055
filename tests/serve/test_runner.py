"""``gpuhint serve``'s hint path: the worker's hints, through crashes and SIGKILLs.

The reference is the in-process pipeline, which runs the worker's batch routine over a
partitioned log (and which the end-to-end tests hold equal to the Kafka workers).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuhint.cores.pipeline.inprocess import InProcessPipeline
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.serve.local_log import LocalLog
from gpuhint.serve.runner import OneProcess
from gpuhint.wire.contract import JobEvent, PriorityHint

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"
MODEL = "history_mix"


class Crash(Exception):
    pass


@pytest.fixture(scope="module")
def events() -> list[JobEvent]:
    evs = job_events(read_trace(TRACE).jobs, cluster="philly")
    return evs[: int(len(evs) * 0.8)]  # stop mid-trace so real queues remain


@pytest.fixture(scope="module")
def reference(events: list[JobEvent]) -> InProcessPipeline:
    p = InProcessPipeline(MODEL, partitions=4, batch_max=40)
    p.publish(events)
    assert p.run(workers=1) == len(events)
    assert p.queues(), "the reference must end with queued jobs"
    return p


def hints_of(store: InMemoryStore) -> dict[tuple[str, str], str]:
    return {k: h.model_dump_json() for k, h in sorted(store.hints.items())}


def queues_of(store: InMemoryStore) -> dict[tuple[str, str], list[tuple[str, float]]]:
    return {k: store.queue(*k) for k in sorted(store.queues) if store.queue(*k)}


def one(path: Path | str, store: InMemoryStore, probe: object = None) -> OneProcess:
    return OneProcess(
        LocalLog(path), store, model=MODEL, batch_max=40, clock=lambda: 0.0, probe=probe
    )  # type: ignore[arg-type]


def test_the_hints_are_the_workers_byte_for_byte(
    events: list[JobEvent], reference: InProcessPipeline
) -> None:
    store = InMemoryStore()
    p = one(":memory:", store)
    p.ingest(events[:500])
    p.drain()
    p.ingest(events[500:])  # a second poll's events
    assert p.drain() == len(events) - 500
    assert hints_of(store) == reference.pending_hints()
    assert queues_of(store) == reference.queues()


@pytest.mark.parametrize("step", ["handled", "flushed", "saved"])
@pytest.mark.parametrize("at_batch", [1, 9])
def test_a_crash_anywhere_loses_nothing_and_learns_nothing_twice(
    tmp_path: Path,
    events: list[JobEvent],
    reference: InProcessPipeline,
    step: str,
    at_batch: int,
) -> None:
    path = tmp_path / "serve.sqlite"
    store = InMemoryStore()  # Redis: outlives the process
    seen = {"n": 0}

    def probe(s: str) -> None:
        if s == "handled":
            seen["n"] += 1
        if s == step and seen["n"] == at_batch:
            raise Crash(s)

    first = one(path, store, probe)
    first.ingest(events)
    with pytest.raises(Crash):
        first.drain()
    first.log.db.rollback()  # what the kernel does to a killed process's transaction
    first.log.close()
    second = one(path, store)
    second.drain()
    assert second.log.committed() == len(events)
    assert hints_of(store) == reference.pending_hints()
    assert queues_of(store) == reference.queues()


_RUN = """
import sys
from gpuhint.cores.sink import InMemoryStore
from gpuhint.serve.local_log import LocalLog
from gpuhint.serve.runner import OneProcess
p = OneProcess(LocalLog(sys.argv[1]), InMemoryStore(), model="history_mix", batch_max=10,
               clock=lambda: 0.0)
print("draining", flush=True)
p.drain()
"""


def test_sigkill_at_random_points_then_the_same_state(
    tmp_path: Path, events: list[JobEvent], reference: InProcessPipeline
) -> None:
    """Real processes, SIGKILLed while they drain: the saved VC states and the commit
    must give, once drained, the state of an uninterrupted run (its hints rebuilt)."""
    path = tmp_path / "serve.sqlite"
    writer = LocalLog(path)
    one(":memory:", InMemoryStore()).ingest([])  # the model imports once, outside the kills
    p = OneProcess(writer, InMemoryStore(), model=MODEL, batch_max=40, clock=lambda: 0.0)
    p.ingest(events)
    writer.close()
    mid_drain_kills = 0
    for delay in (0.05, 0.0, 0.1, 0.02, 0.15, 0.05, 0.2, 0.08):
        proc = subprocess.Popen(
            [sys.executable, "-c", _RUN, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline() == "draining\n"
        time.sleep(delay)
        killed = proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        peek = LocalLog(path)
        mid_drain_kills += killed and 0 < peek.committed() < len(events)
        peek.close()
    subprocess.run([sys.executable, "-c", _RUN, str(path)], check=True, timeout=300)
    log = LocalLog(path)
    assert log.committed() == len(events)
    assert mid_drain_kills >= 3, (
        f"{mid_drain_kills} kills fell inside the drain: use a longer trace"
    )
    store = InMemoryStore()
    final = OneProcess(log, store, model=MODEL, clock=lambda: 0.0)
    final.engine.rebuild(list(final.states))  # the hints the saved states stand for
    store.flush()
    rebuilt = {k: PriorityHint.model_validate_json(v) for k, v in hints_of(store).items()}
    expected = {
        k: PriorityHint.model_validate_json(v) for k, v in reference.pending_hints().items()
    }
    assert {k: h.priority for k, h in rebuilt.items()} == {
        k: h.priority for k, h in expected.items()
    }


def test_the_log_keeps_only_what_follows_the_commit(tmp_path: Path, events: list[JobEvent]) -> None:
    """The log is a buffer: a long-running ``serve`` must not keep every event it ever
    handled (the file would grow without bound); a restart still resumes at the commit
    and offsets never restart."""
    p = one(tmp_path / "serve.sqlite", InMemoryStore())
    p.ingest(events[:300])
    p.drain()
    p.ingest(events[300:400])
    assert p.drain() == 100
    assert p.log.committed() == 400
    assert p.log.read(0, 10) == []
    p.log.close()
    again = one(tmp_path / "serve.sqlite", InMemoryStore())
    assert again.ingest(events[400:410]) == 10 and again.log.end_offset() == 410
    assert again.drain() == 10 and again.log.committed() == 410
