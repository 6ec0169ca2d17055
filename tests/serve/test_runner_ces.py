"""``gpuhint serve``'s CES side: the worker's advice, and its checkpoint survives a restart.

The reference is the in-process pipeline with the same CES side (the worker's message
path: job events and submit hints forwarded to CES, node status from the nodes)."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path

import pytest

from gpuhint.cores.pipeline.cluster_load import ClusterLoadProcessor, make_processor
from gpuhint.cores.pipeline.inprocess import InProcessPipeline
from gpuhint.cores.sink import BufferedStore, InMemoryStore
from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.serve.local_log import LocalLog
from gpuhint.serve.runner import OneProcess
from gpuhint.wire.contract import JobEvent, NodeStatus, PowerAction

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"
MODEL = "history_mix"
NODES = 12


@pytest.fixture(scope="module")
def events() -> list[JobEvent]:
    evs = job_events(read_trace(TRACE).jobs, cluster="philly")
    return evs[: int(len(evs) * 0.6)]


def _nodes(t: float) -> list[NodeStatus]:
    return [
        NodeStatus(cluster="philly", node=f"n{i:02d}", time=t, num_gpus=8) for i in range(NODES)
    ]


def _ces(store: BufferedStore, table: MutableMapping[str, bytes]) -> ClusterLoadProcessor:
    return make_processor(store, policy="jobs", checkpoints=table)


def _advice(store: InMemoryStore) -> dict[tuple[str, str | None], str]:
    return {k: a.model_dump_json() for k, a in sorted(store.advisories.items(), key=str)}


@pytest.fixture(scope="module")
def reference(events: list[JobEvent]) -> InMemoryStore:
    t0 = events[0].time

    def ces(store: BufferedStore) -> ClusterLoadProcessor:
        proc = _ces(store, {})
        for ns in _nodes(t0):
            proc.on_message(ns)
        return proc

    p = InProcessPipeline(MODEL, partitions=1, batch_max=40, ces=ces)
    p.publish(events)
    p.run(workers=1)
    return p.redis


def _serve(path: str, store: InMemoryStore) -> OneProcess:
    return OneProcess(LocalLog(path), store, model=MODEL, batch_max=40, clock=lambda: 0.0, ces=_ces)


def test_serve_advises_as_the_worker(events: list[JobEvent], reference: InMemoryStore) -> None:
    store = InMemoryStore()
    p = _serve(":memory:", store)
    assert p.observe_nodes(_nodes(events[0].time)) == NODES
    p.ingest(events)
    p.drain()
    got = _advice(store)
    assert got == _advice(reference)
    assert any(a.action is PowerAction.POWER_DOWN for a in store.advisories.values()), got


def test_a_restart_continues_from_the_committed_ces_checkpoint(
    events: list[JobEvent], tmp_path: Path
) -> None:
    whole = InMemoryStore()
    p = _serve(":memory:", whole)
    p.observe_nodes(_nodes(events[0].time))
    p.ingest(events)
    p.drain()

    path = str(tmp_path / "serve.sqlite")
    store = InMemoryStore()
    first = _serve(path, store)
    first.observe_nodes(_nodes(events[0].time))
    half = len(events) // 2
    first.ingest(events[:half])
    first.drain()
    first.log.close()
    second = _serve(path, store)  # a new process: VC states and CES checkpoint from disk
    second.ingest(events[half:])
    second.drain()
    assert _advice(store) == _advice(whole)
