"""The worker's Faust edge: the app, its topics and changelog tables, and the batch
routine's :class:`~gpuhint.cores.pipeline.checkpoint.Edge` over Faust events (acknowledgements held,
the group's commits read, seeks)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import faust
import mode
from faust.types import TP

from gpuhint.cores.pipeline.handler import Message, Outcome
from gpuhint.wire.config import Settings
from streams.faust_assignor import assignor_class
from streams.faust_consumer import app_class, running_thread
from streams.kafka_io import faust_credentials, kafka_client_config

log = logging.getLogger(__name__)

__all__ = [
    "TABLES",
    "ChangelogTable",
    "Channels",
    "Deliveries",
    "FaustEdge",
    "changelog_topics",
    "committed_offset",
    "faust_broker_url",
    "log_start",
    "make_faust_app",
    "redelivery_start",
]


def _exit_unacknowledged(what: str, exc: BaseException | None) -> None:
    log.critical(
        "%s not acknowledged (%s); exiting before its offset is committed",
        what,
        "cancelled" if exc is None else f"{type(exc).__name__}: {exc}",
    )
    os._exit(70)


class Deliveries:
    """Every record the worker produces that a commit depends on (VC and CES state
    records, dead letters, forwards), until the broker acknowledged it.

    The worker's consumer settles them before each commit
    (:meth:`streams.faust_consumer.CheckpointConsumer._commit_offsets`): Faust's
    producer flush gives up on its buffer after 0.1 s (a ``send_soon`` record may still
    be queued), and a record the broker refuses only logs a warning there. A refused or
    cancelled record calls ``on_failure`` (by default: a ``CRITICAL`` line, exit 70), and
    no commit is taken after it: its source offsets are redelivered, never skipped."""

    def __init__(
        self, on_failure: Callable[[str, BaseException | None], None] | None = None
    ) -> None:
        self.on_failure = on_failure or _exit_unacknowledged
        self.pending: set[asyncio.Future[Any]] = set()
        self.failed = 0

    def track(self, fut: Any, what: str) -> None:
        if not isinstance(fut, asyncio.Future):
            return  # a stand-in producer's (an agent test): nothing to wait for
        self.pending.add(fut)
        fut.add_done_callback(partial(self._done, what))

    def _done(self, what: str, fut: asyncio.Future[Any]) -> None:
        self.pending.discard(fut)
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            self.failed += 1
            self.on_failure(what, exc)

    async def settle(self, timeout: float) -> bool:
        """Whether every record produced so far is acknowledged (waiting up to
        ``timeout``) and none was refused."""
        waiting = [f for f in self.pending if not f.done()]
        if waiting:
            await asyncio.wait(waiting, timeout=timeout)
            await asyncio.sleep(0)  # their done callbacks run first
        return self.failed == 0 and not any(not f.done() for f in waiting)


TABLES = ("vc-state", "ces-state")
"""The worker's changelog-backed tables (VC states, CES checkpoints)."""


def changelog_topics(settings: Settings) -> tuple[str, ...]:
    """The tables' changelog topics, as Faust names them: their partition counts must be
    the job-event topic's (a VC's state is restored with its partition)."""
    return tuple(f"{settings.app_id}-{name}-changelog" for name in TABLES)


def faust_broker_url(bootstrap: str) -> str:
    """``h1:9092,h2:9092`` -> ``kafka://h1:9092;kafka://h2:9092`` (Faust's broker form)."""
    hosts = [h.strip() for h in bootstrap.split(",") if h.strip()]
    return ";".join(h if "://" in h else f"kafka://{h}" for h in hosts)


class ChangelogTable(MutableMapping[str, bytes]):
    """A Faust table of bytes written on an explicit partition (outside stream context).

    Faust derives a changelog record's partition from the *current* event, which is
    wrong inside a batch; the worker knows each key's partition and passes it (a part
    of a split VC record goes to its VC's partition: ``TableStates.owner_key``).
    """

    def __init__(self, table: Any, deliveries: Deliveries | None = None) -> None:
        self.table = table
        self.deliveries = deliveries or Deliveries()

    def __getitem__(self, key: str) -> bytes:
        v = self.table.get(key)
        if v is None:
            raise KeyError(key)
        return bytes(v)

    def __setitem__(self, key: str, value: bytes) -> None:
        raise TypeError("write with put(key, value, partition)")

    def __delitem__(self, key: str) -> None:
        raise TypeError("delete with delete(key, partition)")

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.table.keys()))

    def __len__(self) -> int:
        return len(self.table)

    def put(self, key: str, value: bytes, partition: int) -> None:
        self.table.data[key] = value
        self.deliveries.track(self.table.send_changelog(partition, key, value), "changelog record")

    def delete(self, key: str, partition: int) -> None:
        """Drop ``key`` here and write its tombstone (a None value: compaction removes
        the key, and Faust's recovery of a None value pops it from the store)."""
        self.table.data.pop(key, None)
        sent = self.table.send_changelog(partition, key, None, value_serializer="raw")
        self.deliveries.track(sent, "changelog record")


class FaustEdge:
    """The batch routine's :class:`gpuhint.cores.pipeline.checkpoint.Edge` over Faust events."""

    def __init__(
        self,
        app: faust.App,
        topic: str,
        emit: Callable[[Outcome], Awaitable[None]],
        settings: Settings,
    ) -> None:
        self.app = app
        self.topic = topic
        self._emit = emit
        self.settings = settings

    def message(self, event: Any) -> Message:
        m = event.message
        return Message(m.topic, m.partition, m.offset, event.key, event.value)

    def hold(self, event: Any) -> None:
        event.message.incref()  # the batching's own ack no longer releases it

    def ack(self, event: Any) -> None:
        if event.ack():
            m = event.message
            self.app.sensors.on_message_out(m.tp, m.offset, m)

    async def emit(self, outcome: Outcome) -> None:
        await self._emit(outcome)

    async def committed(self, partition: int) -> int | None:
        """The group's commit for ``partition``, asked of the broker (Faust's own record
        of it may predate this assignment); None when the group never committed it.
        Raises when it cannot be read (the routine holds the partition and asks again:
        the first event delivered is never trusted as the start)."""
        return await committed_offset(self.app, TP(self.topic, partition))

    async def first_offset(self, partition: int, at: int) -> int | None:
        """The first record at or after ``at`` in the log (a short-lived consumer; None
        without a running consumer: an agent test, no broker to ask)."""
        if running_thread(self.app.consumer) is None:
            return None
        return await asyncio.to_thread(_first_offset, self.settings, self.topic, partition, at)

    async def seek(self, partition: int, offset: int) -> None:
        await self.app.consumer.seek(TP(self.topic, partition), offset)


async def committed_offset(app: faust.App, tp: TP) -> int | None:
    """The worker group's commit of ``tp``, asked of the broker in the consumer's thread
    (None: never committed, or no running consumer). Raises when it cannot be read."""
    thread = running_thread(app.consumer)
    if thread is None:
        return None  # no running consumer (an agent test): take what comes

    async def read() -> int | None:
        consumer = thread._ensure_consumer()
        got = await asyncio.wait_for(consumer._coordinator.fetch_committed_offsets([tp]), 10)
        meta = got.get(tp)
        return None if meta is None or meta.offset < 0 else int(meta.offset)

    offset: int | None = await thread.call_thread(read)
    return offset


async def redelivery_start(app: faust.App, tp: TP) -> int | None:
    """Where a partition whose queued events Faust dropped is delivered again from when
    no batch routine tracks it (node status, cluster telemetry): the group's commit,
    else the log's first offset (None: the log is empty). Asked in the consumer's
    thread, bounded (never the short-lived consumer's polls: job partitions wait)."""
    offset = await committed_offset(app, tp)
    if offset is not None:
        return offset
    thread = running_thread(app.consumer)
    if thread is None:
        return None

    async def log_start() -> int | None:
        consumer = thread._ensure_consumer()
        begin = await asyncio.wait_for(consumer.beginning_offsets([tp]), 10)
        end = await asyncio.wait_for(consumer.end_offsets([tp]), 10)
        first, last = begin.get(tp), end.get(tp)
        return None if first is None or last is None or last <= first else int(first)

    start: int | None = await thread.call_thread(log_start)
    return start


async def log_start(app: faust.App, tp: TP) -> int | None:
    """The first offset the log of ``tp`` holds now, asked in the consumer's thread
    (None: no running consumer). Raises when it cannot be read."""
    thread = running_thread(app.consumer)
    if thread is None:
        return None

    async def read() -> int | None:
        got = await asyncio.wait_for(thread._ensure_consumer().beginning_offsets([tp]), 10)
        start = got.get(tp)
        return None if start is None else int(start)

    start: int | None = await thread.call_thread(read)
    return start


def _first_offset(settings: Settings, topic: str, partition: int, at: int) -> int | None:
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, partition)
    consumer = KafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap.split(","),
        enable_auto_commit=False,
        group_id=None,
        **kafka_client_config(settings),
    )
    try:
        consumer.assign([tp])
        # not below the log's start (retention, compaction): an offset out of range
        # would make the consumer jump to the end
        begin = consumer.beginning_offsets([tp]).get(tp)
        at = max(at, begin or 0)
        consumer.seek(tp, at)
        for _ in range(5):
            got = consumer.poll(timeout_ms=1000, max_records=1).get(tp)
            if got:
                return int(got[0].offset)
        end = consumer.end_offsets([tp]).get(tp)
        return None if end is None or end <= at else at
    finally:
        consumer.close()


def make_faust_app(settings: Settings) -> faust.App:
    """The Faust app with the worker's consumer (its own commits), memory tables and
    group settings."""
    return app_class(settings.worker_lean_fetch)(
        settings.app_id,
        broker=faust_broker_url(settings.kafka_bootstrap),
        broker_credentials=faust_credentials(settings),
        store="memory://",
        autodiscover=False,
        web_enabled=False,
        datadir=str(settings.state_dir),
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        table_standby_replicas=0,
        broker_commit_interval=1.0,
        broker_session_timeout=settings.worker_session_timeout_s,
        broker_heartbeat_interval=settings.worker_heartbeat_s,
        consumer_group_instance_id=settings.worker_instance_id,
        consumer_auto_offset_reset="earliest",
        stream_buffer_maxsize=settings.worker_stream_buffer,
        PartitionAssignor=assignor_class(settings.worker_assign_by_load),
        producer_acks=-1,
        # the largest record the settings let the worker write (a dead letter, a state
        # part) plus its batch's overhead: the producer itself never refuses one
        producer_max_request_size=max(
            1_000_000,
            settings.dead_letter_max_bytes + 65_536,
            settings.state_max_record_bytes + 65_536,
        ),
        # An agent that raises stops the worker (a supervisor restarts it from the last
        # committed offset) instead of Faust restarting that agent past the failed event.
        agent_supervisor=mode.CrashingSupervisor,
    )


@dataclass
class Channels:
    """The worker's topics (bytes in, bytes out: decoding is the handler's, so a bad
    message reaches it) and changelog-backed tables, co-partitioned."""

    job: Any
    dead_letter: Any
    node_status: Any
    telemetry: Any
    vc_table: ChangelogTable
    ces_table: ChangelogTable
    deliveries: Deliveries = field(default_factory=Deliveries)

    @classmethod
    def of(cls, app: faust.App, settings: Settings) -> Channels:
        def raw_topic(name: str) -> Any:
            return app.topic(
                name,
                key_type=bytes,
                value_type=bytes,
                key_serializer="raw",
                value_serializer="raw",
                partitions=settings.partitions,
            )

        deliveries = Deliveries()
        app.gpuhint_deliveries = deliveries  # type: ignore[attr-defined]  # commits settle it

        def table(name: str) -> ChangelogTable:
            # value_type=bytes: Faust picks the changelog's serializer from the types (the
            # schema alone leaves it json, and recovery then fails to decode the bytes)
            return ChangelogTable(
                app.Table(
                    name,
                    default=None,
                    key_type=str,
                    value_type=bytes,
                    partitions=settings.partitions,
                    schema=faust.Schema(key_serializer="json", value_serializer="raw"),
                ),
                deliveries,
            )

        t = settings.topics
        return cls(
            raw_topic(t.job_events),
            raw_topic(t.dead_letter),
            raw_topic(t.node_status),
            raw_topic(t.cluster_telemetry),
            table(TABLES[0]),
            table(TABLES[1]),
            deliveries,
        )

    @property
    def job_topic(self) -> str:
        return str(self.job.topics[0])

    async def emit(self, outcome: Outcome) -> None:
        """Produce a dead letter and forwards. Every commit waits for them to be
        acknowledged (:class:`Deliveries`); a record the broker refuses stops the worker
        first, so its offset is never committed (redelivered)."""
        if outcome.dead_letter is not None:
            fut = await self.dead_letter.send(value=outcome.dead_letter)
            self.deliveries.track(fut, "dead-letter record")
        for fw in outcome.forwards:
            fut = await self.telemetry.send(key=fw.key, value=fw.value)
            self.deliveries.track(fut, "forwarded record")
