"""The worker's Faust agents, one at a time, with ``agent.test_context()``: no broker.

Each test builds the real app (:func:`streams.app.build_app`) around an in-memory store
and a recording producer (what the agents would send to Kafka), then puts records
into one agent's test channel. What is checked is the edge itself: the agent hands
each record to the message path, flushes the store, holds acknowledgements until the
VC state is saved, produces dead letters, forwards and changelog records.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gpuhint.cores.pipeline.state_table import decode_state
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.config import load_settings
from gpuhint.wire.contract import JobEvent, JobPhase, NodeStatus, decode_message, encode_message
from gpuhint.wire.topics import cluster_key, job_key, node_key
from streams.app import Worker, build_app


class RecordingProducer:
    """Stands in for Faust's Kafka producer: keeps every record the app sends."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, int | None]] = []

    async def maybe_start(self) -> None:
        return None

    def _record(self, topic: str, key: Any, value: Any, partition: int | None) -> Any:
        self.records.append((topic, key, value, partition))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def send(
        self, topic: str, key: Any, value: Any, partition: int | None = None, **_: Any
    ) -> Any:
        return self._record(topic, key, value, partition)

    def send_soon(self, fut: Any) -> None:
        m = fut.message
        topic = m.channel.get_topic_name()
        key = m.key if isinstance(m.key, bytes | None) else json.dumps(m.key).encode()
        self._record(topic, key, m.value, m.partition)

    def key_partition(self, topic: str, key: bytes) -> Any:
        return None

    def sent_to(self, suffix: str) -> list[tuple[str, bytes | None, bytes | None, int | None]]:
        return [r for r in self.records if r[0].endswith(suffix)]


def _job(phase: str = "submitted", job_id: str = "j1", **kw: Any) -> JobEvent:
    base: dict[str, Any] = dict(cluster="c", vc="v", num_gpus=2, time=0.0, submit_time=0.0)
    base.update(kw)
    return JobEvent(phase=phase, job_id=job_id, **base)  # type: ignore[arg-type]


Built = tuple[Worker, InMemoryStore, RecordingProducer]


def _build(tmp_path: Path) -> Built:
    """The real app; call inside the test's event loop (Faust binds to it)."""
    settings = load_settings(
        topic_prefix="agents",
        app_id="agents-test",
        state_dir=str(tmp_path),
        model="history",
        state_save_interval_s=60.0,  # the most allowed: saved when the test says so
    )
    store = InMemoryStore()
    store.epoch = store.epoch_seen = "known"  # Redis is not new: no rebuild pass
    w = build_app(settings, store)
    producer = RecordingProducer()
    w.app.producer = producer
    return w, store, producer


async def _settle(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("the agent did not get there in time")
        await asyncio.sleep(0.01)


def _run(tmp_path: Path, scenario: Callable[[Built], Awaitable[None]]) -> None:
    async def main() -> None:
        await scenario(_build(tmp_path))

    asyncio.run(main())


def test_job_agent_writes_hints_and_holds_acks_until_the_state_is_saved(tmp_path: Path) -> None:
    async def scenario(built: Built) -> None:
        w, store, producer = built
        async with w.app.agents["job-events"].test_context() as agent:
            await agent.put(encode_message(_job()), key=job_key("c", "v"))
            await agent.put(encode_message(_job(job_id="j2", num_gpus=8)), key=job_key("c", "v"))
            await _settle(lambda: w.cadence.held == 2)
            assert [j for j, _ in store.queue("c", "v")] == ["j1", "j2"]  # flushed, then held
            assert store.pending == 0
            assert not producer.sent_to("vc-state-changelog")  # not saved yet: nothing acked

            await w.save_state()
            assert w.cadence.held == 0
            (rec,) = producer.sent_to("vc-state-changelog")
            assert rec[1] == json.dumps("c/v").encode()
            st = decode_state(rec[2] or b"")
            assert set(st.pending) == {"j1", "j2"} and st.applied_offset == 1

    _run(tmp_path, scenario)


def test_job_agent_dead_letters_bad_records_with_the_reason(tmp_path: Path) -> None:
    async def scenario(built: Built) -> None:
        w, store, producer = built
        async with w.app.agents["job-events"].test_context() as agent:
            await agent.put(b"{not json", key=job_key("c", "v"))
            await agent.put(encode_message(_job()), key=b"c/elsewhere")
            await agent.put(encode_message(_job(job_id="ok")), key=job_key("c", "v"))
            await _settle(lambda: w.handler.stats.processed == 1 and w.cadence.held == 1)
            await asyncio.sleep(0.2)
            assert w.cadence.held == 1  # dead letters hold no state: acked at once
        dead = [json.loads(r[2] or b"") for r in producer.sent_to("dead-letter")]
        assert [d["reason"][:8] for d in dead] == ["not JSON", "key b'c/"]
        assert "per-VC state must stay on one partition" in dead[1]["reason"]
        assert [d["offset"] for d in dead] == [0, 1]
        assert w.handler.stats.dead_letter == 2 and w.handler.stats.processed == 1
        assert [j for j, _ in store.queue("c", "v")] == ["ok"]
        assert store.counters()["dead_letter"] == 2

    _run(tmp_path, scenario)


def test_job_agent_forwards_placements_and_removes_started_hints(tmp_path: Path) -> None:
    async def scenario(built: Built) -> None:
        w, store, producer = built
        started = _job("started", time=5.0, start_time=5.0, nodes=("n1",))
        async with w.app.agents["job-events"].test_context() as agent:
            await agent.put(encode_message(_job()), key=job_key("c", "v"))
            await agent.put(encode_message(started), key=job_key("c", "v"))
            await _settle(lambda: w.cadence.held == 2)
        assert store.queue("c", "v") == [] and store.get_hint("c", "j1") is None
        fw = [(r[1], decode_message(r[2] or b"")) for r in producer.sent_to("cluster-telemetry")]
        # the default CES policy (jobs) sees every job event and the submit hint, in order
        assert [(k, m.kind, getattr(m, "phase", None)) for k, m in fw] == [
            (cluster_key("c"), "job", JobPhase.SUBMITTED),
            (cluster_key("c"), "priority_hint", None),
            (cluster_key("c"), "job", JobPhase.STARTED),
        ]
        assert fw[2][1] == started

    _run(tmp_path, scenario)


def test_node_status_agent_rekeys_by_cluster_and_dead_letters_the_rest(tmp_path: Path) -> None:
    async def scenario(built: Built) -> None:
        w, _, producer = built
        ns = encode_message(NodeStatus(cluster="c", node="n1", time=0, num_gpus=8))
        async with w.app.agents["node-status"].test_context() as agent:
            await agent.put(ns, key=node_key("c", "n1"))
            await agent.put(encode_message(_job()), key=node_key("c", "n1"))
            await _settle(lambda: len(producer.records) == 2)
        (fw,) = producer.sent_to("cluster-telemetry")
        assert (fw[1], fw[2]) == (cluster_key("c"), ns)
        (dead,) = producer.sent_to("dead-letter")
        assert "expected kind 'node_status'" in json.loads(dead[2] or b"")["reason"]

    _run(tmp_path, scenario)


def test_cluster_load_agent_feeds_ces_and_checkpoints_the_cluster(tmp_path: Path) -> None:
    async def scenario(built: Built) -> None:
        w, store, producer = built
        async with w.app.agents["cluster-load"].test_context() as agent:
            for t in (0.0, 700.0):  # two 600 s slots: the first closes
                for node, busy in (("n1", 8), ("n2", 0)):
                    st = NodeStatus(cluster="c", node=node, time=t, num_gpus=8, busy_gpus=busy)
                    await agent.put(encode_message(st), key=cluster_key("c"))
            await _settle(lambda: bool(producer.sent_to("ces-state-changelog")))
            await _settle(lambda: store.get_load("c") is not None)
        load = store.get_load("c")
        assert load is not None and load.total_nodes == 2 and load.used_nodes == 1

    _run(tmp_path, scenario)


def test_cluster_load_agent_flushes_under_the_job_routines_batch_lock(tmp_path: Path) -> None:
    """The cluster-load agent's flush can find Redis empty and rebuild hints from the VC
    states: it waits for the job-event batch under way (its lock), never walks a state
    that batch is changing. A record keyed by another cluster is dead-lettered."""

    async def scenario(built: Built) -> None:
        w, store, producer = built
        ns = NodeStatus(cluster="c", node="n1", time=0.0, num_gpus=8)
        async with w.app.agents["cluster-load"].test_context() as agent:
            async with w.routine.batch_lock:  # a job-event batch under way
                await agent.put(encode_message(ns), key=b"elsewhere")
                await _settle(lambda: bool(producer.sent_to("dead-letter")))
                await asyncio.sleep(0.3)
                assert store.pending == 1  # its dead-letter count: not flushed meanwhile
            await _settle(lambda: store.pending == 0)
        assert store.counters()["dead_letter"] == 1
        (dead,) = producer.sent_to("dead-letter")
        assert "is not the record's cluster b'c'" in json.loads(dead[2] or b"")["reason"]

    _run(tmp_path, scenario)
