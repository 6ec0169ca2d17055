"""An in-process pipeline for whole-pipeline tests: partitioned log, workers, crashes.

The same pieces the Faust worker wires together -- :class:`~streams.handler.MessageHandler`,
:class:`~gpuhint.core.HintEngine`, :class:`~streams.state_table.TableStates` -- run over
an in-memory partitioned log (records placed by Kafka's partitioner), a shared
"changelog" table, committed offsets and a shared Redis twin. Each worker buffers its
writes and, per batch, flushes them, saves its dirty VC states and then commits the
batch's offsets, exactly as :mod:`streams.app` does. A crash can be injected between
any two of those steps; a restarted (or another) worker resumes from the committed
offsets and the saved state, in the spirit of bytewax's testing source and sink.

>>> from gpuhint.contract import JobEvent
>>> p = InProcessPipeline("history", partitions=2)
>>> p.publish([JobEvent(phase="submitted", job_id="1", vc="a", time=0, submit_time=0)])
>>> p.run(workers=1)
1
>>> sorted(p.redis.hints)
[('default', '1')]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from gpuhint.contract import JobEvent, encode_message
from gpuhint.core import HintEngine
from gpuhint.store import InMemoryStore, Op
from gpuhint.topics import Topics, job_key
from models.base import DurationModel
from models.registry import make_model
from streams.handler import Message, MessageHandler
from streams.partitioning import partition_for
from streams.state_table import TableStates

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


@dataclass
class _Worker:
    name: str
    handler: MessageHandler
    states: TableStates
    store: _ForwardingStore
    partitions: set[int] = field(default_factory=set)


class InProcessPipeline:
    """A partitioned job-event log, the saved state and Redis, shared by any workers."""

    def __init__(
        self,
        model: str | Callable[[], DurationModel] = "history",
        partitions: int = 4,
        batch_max: int = 50,
        topics: Topics | None = None,
    ) -> None:
        self.model_factory = partial(make_model, model) if isinstance(model, str) else model
        self.n_partitions = partitions
        self.batch_max = batch_max
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
        return _Worker(name, MessageHandler(engine, self.topics), states, store, partitions)

    def _batch(self, w: _Worker, p: int, crash: CrashPoint | None) -> int:
        start = self.committed[p]
        batch = self.log[p][start : start + self.batch_max]
        for msg in batch:
            out = w.handler.job_event(msg)
            if out.dead_letter is not None:
                self.dead_letters.append(out.dead_letter)
        if crash == "after_handle":
            raise Crash(w.name)
        w.store.flush()
        if w.store.take_empty():
            self.rebuilds += 1
            keys = [
                k
                for k in w.states.backing
                if partition_for(k.encode(), self.n_partitions) in w.partitions
            ]
            w.store.mark_rebuilt(w.handler.engine.rebuild(keys))
            w.store.flush()
        if crash == "after_flush":
            raise Crash(w.name)
        w.states.save_dirty()
        if crash == "after_save":
            raise Crash(w.name)
        self.committed[p] = start + len(batch)
        return len(batch)

    def run(
        self,
        workers: int = 1,
        max_batches: int | None = None,
        crash: CrashPoint | None = None,
        after_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Run ``workers`` fresh workers (partitions split round-robin) over the log:
                batches in turn from every partition, until the log is drained or ``max_batches``
                batches ran; then a worker dies at ``crash`` (its buffer and live state lost,
                nothing committed for that batch). ``after_batch(n)`` runs after the n-th
        batch (e.g. to wipe Redis mid-run). Return the events committed in this run."""
        ws = [self._worker(f"w{i}", set()) for i in range(workers)]
        for p in range(self.n_partitions):
            ws[p % workers].partitions.add(p)
        try:
            return self._run(ws, max_batches, crash, after_batch)
        finally:
            for w in ws:
                self.redelivered += w.handler.engine.stats.redelivered
                self.learned += w.handler.engine.stats.learned

    def _run(
        self,
        ws: list[_Worker],
        max_batches: int | None,
        crash: CrashPoint | None,
        after_batch: Callable[[int], None] | None,
    ) -> int:
        done = 0
        batches = 0
        while True:
            progressed = False
            for w in ws:
                for p in sorted(w.partitions):
                    if self.committed[p] >= len(self.log[p]):
                        continue
                    last = max_batches is not None and batches + 1 >= max_batches
                    try:
                        done += self._batch(w, p, crash if last else None)
                    except Crash:
                        return done
                    batches += 1
                    progressed = True
                    if after_batch is not None:
                        after_batch(batches)
                    if max_batches is not None and batches >= max_batches:
                        return done
            if not progressed:
                return done

    def pending_hints(self) -> dict[tuple[str, str], str]:
        """Every hint in the Redis twin, as JSON (what a final-state comparison reads)."""
        return {k: h.model_dump_json() for k, h in sorted(self.redis.hints.items())}

    def queues(self) -> dict[tuple[str, str], list[tuple[str, float]]]:
        return {k: self.redis.queue(*k) for k in sorted(self.redis.queues) if self.redis.queues[k]}
