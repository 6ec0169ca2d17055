"""Where hints and advisories go: the sink interface and its in-memory twin.

A store is a *sink with a lifecycle*: writes are buffered, ``flush()`` applies them
as one batch (the Redis store sends one pipeline), and every write is idempotent
(a replay of the same events leaves the same state). Stream processors call
``flush()`` before their offsets are committed, so a crash never loses a write whose
input was acknowledged.

The Redis implementation lives in ``streams.redis_store``; this module has no I/O.

>>> from gpuhint.contract import PriorityHint
>>> store = InMemoryStore()
>>> store.put_hint(PriorityHint(job_id="j1", vc="a", num_gpus=2, submit_time=0,
...     predicted_duration_s=60, priority=120, model="m", model_version="1", created_at=0))
>>> store.flush()
1
>>> store.queue("default", "a")
[('j1', 120.0)]
"""

from __future__ import annotations

import abc
import threading
import uuid
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpuhint.contract import ClusterLoad, PowerAdvisory, PriorityHint


@dataclass(frozen=True)
class PutHint:
    hint: PriorityHint
    rebuilt: bool = False
    """Re-written from state after the sink came back empty (not a new event's hint)."""


@dataclass(frozen=True)
class UpdateHint:
    """A waiting job's hint with a new priority: applied only if the hint still exists."""

    hint: PriorityHint


@dataclass(frozen=True)
class RemoveHint:
    cluster: str
    vc: str
    job_id: str


@dataclass(frozen=True)
class PutAdvisory:
    advisory: PowerAdvisory


@dataclass(frozen=True)
class PutLoad:
    load: ClusterLoad


@dataclass(frozen=True)
class Count:
    """Add ``n`` to the named counter (e.g. ``dead_letter``): at-least-once, not idempotent."""

    name: str
    n: int = 1


@dataclass(frozen=True)
class MarkRebuilt:
    """A ``rebuilt`` change entry: ``hints`` pending hints were re-written from state."""

    hints: int
    reason: str = "redis_empty"
    """Why: ``redis_empty`` (the epoch marker was gone or replaced)."""


Op = PutHint | UpdateHint | RemoveHint | PutAdvisory | PutLoad | Count | MarkRebuilt


@runtime_checkable
class HintStore(Protocol):
    """What the core needs from a store (write side) and what readers use (read side)."""

    def put_hint(self, hint: PriorityHint, *, rebuilt: bool = False) -> None: ...
    def update_hint(self, hint: PriorityHint) -> None: ...
    def remove_hint(self, cluster: str, vc: str, job_id: str) -> None: ...
    def put_advisory(self, advisory: PowerAdvisory) -> None: ...
    def put_load(self, load: ClusterLoad) -> None: ...
    def count(self, name: str, n: int = 1) -> None: ...
    def flush(self) -> int: ...
    def close(self) -> None: ...

    def get_hint(self, cluster: str, job_id: str) -> PriorityHint | None: ...
    def queue(self, cluster: str, vc: str) -> list[tuple[str, float]]: ...
    def get_advisory(self, cluster: str, node: str | None = None) -> PowerAdvisory | None: ...
    def get_load(self, cluster: str) -> ClusterLoad | None: ...
    def counters(self) -> dict[str, int]: ...


class BufferedStore(abc.ABC):
    """Buffers write operations; subclasses apply a batch in :meth:`_apply`.

    Thread-safe: a stream processor may append while another thread flushes.
    ``max_buffer`` triggers an automatic flush so memory stays bounded.
    """

    def __init__(self, max_buffer: int = 10_000) -> None:
        self._ops: list[Op] = []
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.max_buffer = max_buffer
        self.ops_written = 0
        self.empty_detected = False
        """Set by a flush that found the sink had lost its data: it had to create the
        epoch marker, or the marker is not the one this store saw before (another
        worker re-created it first); the worker then rebuilds hints from state."""
        self.epoch_seen: str | None = None
        self.empty_reason = ""

    def _saw_epoch(self, created: bool, current: str) -> None:
        if created or (self.epoch_seen is not None and current != self.epoch_seen):
            self.empty_detected = True
            self.empty_reason = "redis_empty"
        self.epoch_seen = current

    def take_empty(self) -> bool:
        """Whether a flush found the sink empty since the last call (and reset it)."""
        found, self.empty_detected = self.empty_detected, False
        return found

    def mark_rebuilt(self, hints: int) -> None:
        self._add(MarkRebuilt(hints, self.empty_reason or "redis_empty"))

    def _add(self, op: Op) -> None:
        with self._lock:
            self._ops.append(op)
            full = len(self._ops) >= self.max_buffer
        if full:
            self.flush()

    def put_hint(self, hint: PriorityHint, *, rebuilt: bool = False) -> None:
        """Write a waiting job's hint; ``rebuilt``: re-written from state after the sink
        came back empty (same write, counted apart)."""
        self._add(PutHint(hint, rebuilt))

    def update_hint(self, hint: PriorityHint) -> None:
        """Re-rank a waiting job (a ``hint_updated`` change); a no-op once it is gone."""
        self._add(UpdateHint(hint))

    def remove_hint(self, cluster: str, vc: str, job_id: str) -> None:
        self._add(RemoveHint(cluster, vc, job_id))

    def put_advisory(self, advisory: PowerAdvisory) -> None:
        self._add(PutAdvisory(advisory))

    def put_load(self, load: ClusterLoad) -> None:
        self._add(PutLoad(load))

    def count(self, name: str, n: int = 1) -> None:
        self._add(Count(name, n))

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._ops)

    def flush(self) -> int:
        """Apply buffered writes as one batch; return how many were written."""
        with self._flush_lock:
            with self._lock:
                ops, self._ops = self._ops, []
            if not ops:
                return 0
            try:
                self._apply(ops)
            except BaseException:
                with self._lock:  # put them back in front: nothing is lost
                    self._ops[:0] = ops
                raise
            self.ops_written += len(ops)
            return len(ops)

    def close(self) -> None:
        self.flush()

    @abc.abstractmethod
    def _apply(self, ops: list[Op]) -> None: ...


@dataclass(frozen=True)
class Change:
    """One entry of the change stream (the in-memory twin of the Redis stream)."""

    type: str
    cluster: str
    key: str
    payload: str | None


class InMemoryStore(BufferedStore):
    """The in-process twin of the Redis store: same operations, same lifecycle."""

    def __init__(self, max_buffer: int = 10_000, keep_changes: int = 10_000) -> None:
        super().__init__(max_buffer)
        self.hints: dict[tuple[str, str], PriorityHint] = {}
        self.queues: dict[tuple[str, str], dict[str, float]] = {}
        self.advisories: dict[tuple[str, str | None], PowerAdvisory] = {}
        self.loads: dict[str, ClusterLoad] = {}
        self.changes: list[Change] = []
        self._counters: dict[str, int] = {}
        self.keep_changes = keep_changes
        self.epoch: str | None = None

    def wipe(self) -> None:
        """Lose every key, as a Redis restarted without persistence does (for tests)."""
        self.hints.clear()
        self.queues.clear()
        self.advisories.clear()
        self.loads.clear()
        self.changes.clear()
        self._counters.clear()
        self.epoch = None

    def _change(self, change: Change) -> None:
        self.changes.append(change)
        if len(self.changes) > self.keep_changes * 2:
            del self.changes[: -self.keep_changes]

    def _apply(self, ops: list[Op]) -> None:
        from gpuhint import keys

        created = self.epoch is None
        if self.epoch is None:
            self.epoch = uuid.uuid4().hex
        self._saw_epoch(created, self.epoch)
        for op in ops:
            if isinstance(op, PutHint):
                h = op.hint
                self.hints[(h.cluster, h.job_id)] = h
                self.queues.setdefault((h.cluster, h.vc), {})[h.job_id] = h.priority
                self._change(Change(keys.CHANGE_HINT, h.cluster, h.job_id, h.model_dump_json()))
            elif isinstance(op, UpdateHint):
                h = op.hint
                if (h.cluster, h.job_id) in self.hints:
                    self.hints[(h.cluster, h.job_id)] = h
                    self.queues.setdefault((h.cluster, h.vc), {})[h.job_id] = h.priority
                    self._change(
                        Change(keys.CHANGE_HINT_UPDATED, h.cluster, h.job_id, h.model_dump_json())
                    )
            elif isinstance(op, RemoveHint):
                existed = self.hints.pop((op.cluster, op.job_id), None)
                q = self.queues.get((op.cluster, op.vc))
                if q is not None:
                    q.pop(op.job_id, None)
                if existed is not None:
                    self._change(Change(keys.CHANGE_HINT_REMOVED, op.cluster, op.job_id, None))
            elif isinstance(op, PutAdvisory):
                a = op.advisory
                self.advisories[(a.cluster, a.node)] = a
                self._change(
                    Change(keys.CHANGE_ADVICE, a.cluster, a.node or "", a.model_dump_json())
                )
            elif isinstance(op, PutLoad):
                self.loads[op.load.cluster] = op.load
                self._change(Change(keys.CHANGE_LOAD, op.load.cluster, "", None))
            elif isinstance(op, Count):
                self._counters[op.name] = self._counters.get(op.name, 0) + op.n
            elif isinstance(op, MarkRebuilt):
                self._change(Change(keys.CHANGE_REBUILT, "", op.reason, str(op.hints)))

    def get_hint(self, cluster: str, job_id: str) -> PriorityHint | None:
        return self.hints.get((cluster, job_id))

    def queue(self, cluster: str, vc: str) -> list[tuple[str, float]]:
        q = self.queues.get((cluster, vc), {})
        return sorted(q.items(), key=lambda kv: (kv[1], kv[0]))

    def get_advisory(self, cluster: str, node: str | None = None) -> PowerAdvisory | None:
        return self.advisories.get((cluster, node))

    def get_load(self, cluster: str) -> ClusterLoad | None:
        return self.loads.get(cluster)

    def counters(self) -> dict[str, int]:
        return dict(self._counters)
