"""One process for one cluster: events into the local log, the worker's batch routine out.

:class:`OneProcess` runs exactly the worker's message path and checkpoint order
(:class:`~gpuhint.cores.pipeline.checkpoint.BatchRoutine`: admit, handle, flush, hold,
save, commit) over a :class:`~gpuhint.serve.local_log.LocalLog` instead of Kafka, with
any :class:`~gpuhint.cores.sink.BufferedStore` (Redis in ``gpuhint serve``, the
in-memory twin in tests). Events are appended to the log *before* they are handled, and
the feed's watermark is committed with the offsets, so a crash at any point loses no
event and learns none twice.

>>> from gpuhint.cores.sink import InMemoryStore
>>> from gpuhint.serve.local_log import LocalLog
>>> from gpuhint.wire.contract import JobEvent
>>> store = InMemoryStore()
>>> p = OneProcess(LocalLog(":memory:"), store, model="history", clock=lambda: 0.0)
>>> p.ingest([JobEvent(phase="submitted", job_id="1", vc="a", time=0, submit_time=0)])
1
>>> p.drain()
1
>>> store.queue("default", "a")
[('1', 3600.0)]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, MutableMapping
from functools import partial

from gpuhint.cores.pipeline.checkpoint import BatchRoutine, Sink
from gpuhint.cores.pipeline.cluster_load import ClusterLoadProcessor
from gpuhint.cores.pipeline.handler import Message, MessageHandler, Outcome
from gpuhint.cores.pipeline.state_table import (
    DEFAULT_MAX_LIVE,
    DEFAULT_MAX_RECORD_BYTES,
    TableStates,
)
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import BufferedStore
from gpuhint.serve.local_log import LocalLog
from gpuhint.wire.contract import JobEvent, NodeStatus, encode_message
from gpuhint.wire.topics import Topics, job_key, node_key
from models.base import DurationModel
from models.registry import DEFAULT_MODEL, make_model
from models.wait_bound import DEFAULT_WAIT_BOUND

log = logging.getLogger(__name__)

PARTITION = 0
"""The local log has one partition: one process owns every VC of its cluster."""

STOP_CHECK_S = 0.2
"""How often a flush held by a store outage looks at :attr:`OneProcess.stop`."""


class Stopped(Exception):
    """A stop was asked while a flush waited for the store: the batch in hand was left
    uncommitted (the next start handles it again) and this process must not go on."""


class LocalEdge:
    """The batch routine's edge over the local log: reads move ``position``, commits are
    the routine's own (:meth:`OneProcess.commit`), dead letters are kept in the log."""

    def __init__(self, log_: LocalLog, handler: MessageHandler) -> None:
        self.log = log_
        self.handler = handler
        self.position = log_.committed()
        self.forwarded = 0

    def message(self, event: Message) -> Message:
        return event

    def hold(self, event: Message) -> None:
        pass

    def ack(self, event: Message) -> None:
        pass

    async def emit(self, outcome: Outcome) -> None:
        self.apply(outcome)

    def apply(self, outcome: Outcome) -> None:
        """Keep a dead letter; hand what the message path forwards to the CES side at once
        (one process: no telemetry topic in between)."""
        if outcome.dead_letter is not None:
            self.log.dead_letter(-1, outcome.dead_letter)
            log.warning("dead letter: %s", outcome.reason)
        for fwd in outcome.forwards:
            self.forwarded += 1
            self.apply(self.handler.handle(Message(fwd.topic, PARTITION, -1, fwd.key, fwd.value)))

    async def committed(self, partition: int) -> int | None:
        return self.log.committed()

    async def first_offset(self, partition: int, at: int) -> int | None:
        return self.log.first_offset(at)

    async def seek(self, partition: int, offset: int) -> None:
        self.position = offset


class OneProcess:
    """The hint path (and, with ``ces``, the CES side) of one cluster in one process,
    durable on local disk.

    ``ces(store, checkpoints)`` builds the CES side (the worker's
    :func:`~gpuhint.cores.pipeline.cluster_load.make_processor`); its checkpoints live in
    the local log and are committed with the offsets.

    ``save_interval_s`` is the state-save cadence (0: every batch, as the tests use);
    ``probe(step)`` is the routine's crash hook (tests raise there to kill the process).
    ``stop`` (SIGTERM): :meth:`drain` ends after the batch in hand, committed, when it
    is set; a flush retried while the store is down gives up and raises
    :class:`Stopped`, so a stop is held up neither by a backlog nor by an outage.
    """

    def __init__(
        self,
        log_: LocalLog,
        store: BufferedStore,
        *,
        model: str | Callable[[], DurationModel] = DEFAULT_MODEL,
        topics: Topics | None = None,
        batch_max: int = 500,
        save_interval_s: float = 0.0,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        max_live: int = DEFAULT_MAX_LIVE,
        clock: Callable[[], float] | None = None,
        probe: Callable[[str], None] | None = None,
        wait_bound: float = DEFAULT_WAIT_BOUND,
        ces: Callable[[BufferedStore, MutableMapping[str, bytes]], ClusterLoadProcessor]
        | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.log = log_
        self.stop = stop
        self.store = store
        self.batch_max = batch_max
        factory = partial(make_model, model) if isinstance(model, str) else model
        self.states = TableStates(log_.states, max_record_bytes=max_record_bytes, max_live=max_live)
        self.engine = HintEngine(
            factory, store, states=self.states, clock=clock or time.time, wait_bound=wait_bound
        )
        self.topics = topics or Topics()
        self.ces = ces(store, log_.ces_states) if ces is not None else None
        self.handler = MessageHandler(self.engine, self.topics, ces=self.ces)
        self.edge = LocalEdge(log_, self.handler)
        self.sink = Sink(store, lambda: self.engine.rebuild(list(self.states)))
        self.routine: BatchRoutine[Message] = BatchRoutine(
            self.handler,
            self.states,
            self.edge,
            flush=self._flush,
            save_interval_s=save_interval_s,
            probe=probe,
        )

    async def _flush(self) -> None:
        """The sink's flush (retried while the store is down), given up when
        :attr:`stop` is set while the store refuses it (a slow flush that works ends)."""
        failures = self.sink.failures
        task = asyncio.ensure_future(self.sink.flush())
        while not (await asyncio.wait({task}, timeout=STOP_CHECK_S))[0]:
            refused = self.sink.failures > failures
            if refused and self.stop is not None and self.stop.is_set():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                raise Stopped(f"{self.store.pending} store writes not flushed")
        task.result()

    def ingest(self, events: Iterable[JobEvent], meta: dict[str, str] | None = None) -> int:
        """Append events to the log with ``meta`` (the feed's watermark), durable
        together when this returns; how many."""
        records = [(job_key(e.cluster, e.vc), encode_message(e)) for e in events]
        return self.ingest_raw(records, meta)

    def ingest_raw(
        self, records: Iterable[tuple[bytes | None, bytes]], meta: dict[str, str] | None = None
    ) -> int:
        first, end = self.log.append(records, meta)
        return end - first

    def drain(self) -> int:
        """Handle everything in the log (up to a stop), save all state, commit and drop
        the committed events from the log; the events handled."""
        return asyncio.run(self._drain())

    async def _drain(self) -> int:
        handled = 0
        while True:
            batch = self.log.read(self.edge.position, self.batch_max)
            if not batch:
                break
            self.edge.position = batch[-1].offset + 1
            await self.routine.run_batch(batch)
            await self.routine.save(self.routine.cadence.due_keys())
            self.commit()
            handled += len(batch)
            if self.stop is not None and self.stop.is_set():
                break  # a stop (SIGTERM) during a backlog: the rest waits in the log
        await self.routine.save_all()
        self.commit()
        if handled:  # the log is a buffer: what the commit covers is never read again
            self.log.compact(self.log.committed())
        return handled

    def observe_nodes(self, statuses: Iterable[NodeStatus]) -> int:
        """Node status (e.g. from ``sinfo``) into the CES side, its advice flushed to the
        store and its checkpoint committed; how many (0 without CES)."""
        if self.ces is None:
            return 0
        n = 0
        for ns in statuses:
            key = node_key(ns.cluster, ns.node)
            msg = Message(self.topics.node_status, PARTITION, -1, key, encode_message(ns))
            self.edge.apply(self.handler.handle(msg))
            n += 1
        asyncio.run(self.routine.flush())
        self.commit()
        return n

    def commit(self) -> None:
        """Commit the routine's durable offset with the state saved so far (and the CES
        checkpoints, in the same transaction)."""
        if self.ces is not None:
            self.ces.checkpoint_dirty()
        offset = self.routine.committable(PARTITION)
        if offset is None:
            offset = self.log.committed()
        self.log.commit(max(offset, self.log.committed()))
