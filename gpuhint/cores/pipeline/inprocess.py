"""An in-process pipeline for whole-pipeline tests: partitioned log, workers, crashes.

Each worker runs the worker's own batch routine
(:class:`gpuhint.cores.pipeline.checkpoint.BatchRoutine`:
admit, handle, flush, hold, save on a cadence, commit what is durable) over an in-memory
partitioned log (records placed by Kafka's partitioner), a shared "changelog" table,
committed offsets and a shared Redis twin: only the edge differs (:class:`LogEdge`), as
bytewax's testing source and sink run under the same ``run_main``. A crash can be
injected after any step of a batch (``probe``); a restarted (or another) worker resumes
from the committed offsets and the saved state. ``save_every`` batches is the state
save cadence (1: every batch), so a crash can fall while acknowledgements are held.

>>> from gpuhint.wire.contract import JobEvent
>>> p = InProcessPipeline("history", partitions=2)
>>> p.publish([JobEvent(phase="submitted", job_id="1", vc="a", time=0, submit_time=0)])
>>> p.run(workers=1)
1
>>> sorted(p.redis.hints)
[('default', '1')]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from gpuhint.cores.pipeline.checkpoint import BatchRoutine, Sink
from gpuhint.cores.pipeline.cluster_load import ClusterLoadProcessor
from gpuhint.cores.pipeline.handler import Message, MessageHandler, Outcome
from gpuhint.cores.pipeline.partitioning import partition_for
from gpuhint.cores.pipeline.state_table import TableStates
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore, Op
from gpuhint.wire.contract import JobEvent, encode_message
from gpuhint.wire.topics import Topics, job_key
from models.base import DurationModel
from models.registry import make_model

CrashPoint = Literal["after_handle", "after_flush", "after_save"]
"""Where in a batch a worker dies: before its writes are flushed, after the flush but
before its state is saved, or after saving state but before committing offsets."""


class Crash(Exception):
    """Raised inside a worker at an injected crash point."""


class _ForwardingStore(InMemoryStore):
    """A worker's write buffer in front of the shared Redis twin (lost on a crash)."""

    def __init__(self, target: InMemoryStore) -> None:
        super().__init__(max_buffer=10**9)
        self.target = target

    def _apply(self, ops: list[Op]) -> None:
        created = self.target.epoch is None
        self.target._apply(ops)
        self.target.take_empty()
        assert self.target.epoch is not None
        self._saw_epoch(created, self.target.epoch)


_STEP = {"after_handle": "handled", "after_flush": "flushed", "after_save": "saved"}


@dataclass
class _Worker:
    name: str
    handler: MessageHandler
    states: TableStates
    store: _ForwardingStore
    routine: BatchRoutine[Message]
    sink: Sink
    partitions: set[int] = field(default_factory=set)
    position: dict[int, int] = field(default_factory=dict)
    """partition -> the next offset this worker reads."""
    crash_at: str | None = None
    """The routine step after which this worker dies (its probe raises :class:`Crash`)."""

    def probe(self, step: str) -> None:
        if step == self.crash_at:
            raise Crash(self.name)


class LogEdge:
    """The batch routine's edge over the in-memory log: reads move ``position``,
    acknowledgements need nothing (commits come from the routine), seeks move back."""

    def __init__(self, pipeline: InProcessPipeline, worker: _Worker | None = None) -> None:
        self.pipeline = pipeline
        self.worker = worker

    def message(self, event: Message) -> Message:
        return event

    def hold(self, event: Message) -> None:
        pass

    def ack(self, event: Message) -> None:
        pass

    async def emit(self, outcome: Outcome) -> None:
        if outcome.dead_letter is not None:
            self.pipeline.dead_letters.append(outcome.dead_letter)
        for fwd in outcome.forwards:  # the CES side, at once (one telemetry partition)
            assert self.worker is not None
            log = self.pipeline.telemetry
            msg = Message(fwd.topic, 0, len(log), fwd.key, fwd.value)
            log.append(msg)
            self.worker.handler.handle(msg)

    async def committed(self, partition: int) -> int | None:
        return self.pipeline.committed[partition]

    async def first_offset(self, partition: int, at: int) -> int | None:
        return at if at < len(self.pipeline.log[partition]) else None

    async def seek(self, partition: int, offset: int) -> None:
        assert self.worker is not None
        self.worker.position[partition] = offset


class InProcessPipeline:
    """A partitioned job-event log, the saved state and Redis, shared by any workers."""

    def __init__(
        self,
        model: str | Callable[[], DurationModel] = "history",
        partitions: int = 4,
        batch_max: int = 50,
        topics: Topics | None = None,
        save_every: int = 1,
        ces: Callable[[InMemoryStore], ClusterLoadProcessor] | None = None,
    ) -> None:
        """``ces``: builds each worker's CES side over its store (None: no CES); the
        forwarded telemetry is applied as it is produced, in ``telemetry``."""
        self.ces_factory = ces
        self.telemetry: list[Message] = []
        self.ces: list[ClusterLoadProcessor] = []
        self.model_factory = partial(make_model, model) if isinstance(model, str) else model
        self.n_partitions = partitions
        self.batch_max = batch_max
        self.save_every = save_every
        self.topics = topics or Topics()
        self.log: list[list[Message]] = [[] for _ in range(partitions)]
        self.committed = [0] * partitions
        self.table: dict[str, bytes] = {}
        self.redis = InMemoryStore()
        self.dead_letters: list[bytes] = []
        self.rebuilds = 0
        self.redelivered = 0
        """Events the workers found at or below their VC's watermark (re-emitted only)."""
        self.learned = 0
        self.gaps = 0
        self._batches = 0.0  # the routine's clock: one tick per batch run

    # -- source --------------------------------------------------------------------------
    def publish_raw(self, key: bytes, value: bytes) -> None:
        p = partition_for(key, self.n_partitions)
        self.log[p].append(Message(self.topics.job_events, p, len(self.log[p]), key, value))

    def publish(self, events: Iterable[JobEvent]) -> None:
        for ev in events:
            self.publish_raw(job_key(ev.cluster, ev.vc), encode_message(ev))

    # -- workers -------------------------------------------------------------------------
    def _worker(self, name: str, partitions: set[int]) -> _Worker:
        store = _ForwardingStore(self.redis)
        states = TableStates(self.table)
        engine = HintEngine(self.model_factory, store, states=states, clock=lambda: 0.0)
        ces = self.ces_factory(store) if self.ces_factory is not None else None
        if ces is not None:
            self.ces.append(ces)
        handler = MessageHandler(engine, self.topics, ces=ces)
        edge = LogEdge(self)

        def owned() -> list[str]:
            return [
                k for k in states if partition_for(k.encode(), self.n_partitions) in w.partitions
            ]

        sink = Sink(store, lambda: engine.rebuild(owned()), lambda: w.partitions)
        routine: BatchRoutine[Message] = BatchRoutine(
            handler,
            states,
            edge,
            flush=sink.flush,
            save_interval_s=0 if self.save_every <= 1 else float(self.save_every),
            clock=lambda: self._batches,
            probe=lambda step: w.probe(step),
        )
        w = _Worker(name, handler, states, store, routine, sink, set(partitions))
        edge.worker = w
        return w

    async def _batch(self, w: _Worker, p: int) -> int:
        start = w.position.setdefault(p, self.committed[p])
        batch = self.log[p][start : start + self.batch_max]
        w.position[p] = start + len(batch)
        await w.routine.run_batch(batch)
        self._batches += 1
        await w.routine.save(w.routine.cadence.due_keys())
        if w.crash_at is not None:  # its step did not come in this batch: killed before the commit
            raise Crash(w.name)
        self._commit(w)
        return len(batch)

    def _commit(self, w: _Worker) -> None:
        """What Faust's commit does with the routine's offsets."""
        for p in w.partitions:
            offset = w.routine.committable(p)
            if offset is not None and offset > self.committed[p]:
                self.committed[p] = offset

    def run(
        self,
        workers: int = 1,
        max_batches: int | None = None,
        crash: CrashPoint | None = None,
        after_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Run ``workers`` fresh workers (partitions split round-robin) over the log:
        batches in turn from every partition, until the log is drained or ``max_batches``
        batches ran; then a worker dies at ``crash`` (its buffer, live state and held
        acknowledgements lost) or, without one, stops cleanly (saves and commits, as a
        worker does on SIGTERM). ``after_batch(n)`` runs after the n-th batch (e.g. to
        wipe Redis mid-run). Return the events committed in this run."""
        ws = [self._worker(f"w{i}", set()) for i in range(workers)]
        for p in range(self.n_partitions):
            ws[p % workers].partitions.add(p)
        before = sum(self.committed)
        try:
            asyncio.run(self._run(ws, max_batches, crash, after_batch))
        finally:
            for w in ws:
                self.redelivered += w.handler.engine.stats.redelivered
                self.learned += w.handler.engine.stats.learned
                self.rebuilds += w.sink.rebuilds
                self.gaps += w.routine.stats.gaps
        return sum(self.committed) - before

    async def _run(
        self,
        ws: list[_Worker],
        max_batches: int | None,
        crash: CrashPoint | None,
        after_batch: Callable[[int], None] | None,
    ) -> None:
        batches = 0
        while True:
            progressed = False
            for w in ws:
                for p in sorted(w.partitions):
                    if w.position.get(p, self.committed[p]) >= len(self.log[p]):
                        continue
                    last = max_batches is not None and batches + 1 >= max_batches
                    if last and crash is not None:
                        w.crash_at = _STEP[crash]
                    try:
                        await self._batch(w, p)
                    except Crash:
                        return
                    batches += 1
                    progressed = True
                    if after_batch is not None:
                        after_batch(batches)
                    if max_batches is not None and batches >= max_batches:
                        await self._stop(ws)
                        return
            if not progressed:
                await self._stop(ws)
                return

    async def _stop(self, ws: list[_Worker]) -> None:
        """A clean stop: every held state saved, then committed."""
        for w in ws:
            await w.routine.save_all()
            self._commit(w)

    def pending_hints(self) -> dict[tuple[str, str], str]:
        """Every hint in the Redis twin, as JSON (what a final-state comparison reads)."""
        return {k: h.model_dump_json() for k, h in sorted(self.redis.hints.items())}

    def queues(self) -> dict[tuple[str, str], list[tuple[str, float]]]:
        return {k: self.redis.queue(*k) for k in sorted(self.redis.queues) if self.redis.queues[k]}
