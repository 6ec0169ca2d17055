"""Where hints and advisories go: the sink interface and its in-memory twin.

A store is a *sink with a lifecycle*: writes are buffered, ``flush()`` applies them
as one batch (the Redis store sends one pipeline), and every write is idempotent
(a replay of the same events leaves the same state). Stream processors call
``flush()`` before their offsets are committed, so a crash never loses a write whose
input was acknowledged.

The Redis implementation lives in ``gpuhint.redis.store``; this module has no I/O.

>>> from gpuhint.wire.contract import PriorityHint
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
import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpuhint.wire.contract import ClusterLoad, PowerAdvisory, PriorityHint, StartForecasts

log = logging.getLogger(__name__)

HINT_VC_CONFLICTS = "hint_vc_conflicts"
"""Counter of hint writes refused because the job's live hint belongs to another VC."""


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
class PutStarts:
    """A VC's expected starts (replaces the VC's previous forecast)."""

    starts: StartForecasts


@dataclass(frozen=True)
class Count:
    """Add ``n`` to the named counter (e.g. ``dead_letter``): once per write, even if the
    flush is sent again; events processed again after a crash count again."""

    name: str
    n: int = 1


@dataclass(frozen=True)
class MarkRebuilt:
    """A ``rebuilt`` change entry: ``hints`` pending hints were re-written from state."""

    hints: int
    reason: str = "redis_empty"
    """Why: ``redis_empty`` (the epoch marker was gone or replaced) or ``redis_rollback``
    (Redis came back from a snapshot older than this worker's last flush)."""


Op = PutHint | UpdateHint | RemoveHint | PutAdvisory | PutLoad | PutStarts | Count | MarkRebuilt


@dataclass(frozen=True)
class VcConflict:
    """A hint write refused: job ``job_id`` sent under ``vc``, its hint ``owner``'s."""

    cluster: str
    job_id: str
    vc: str
    owner: str


def op_target(op: Op) -> tuple[str, str, str] | None:
    """``(cluster, job_id, vc)`` of a hint write, None for any other op."""
    if isinstance(op, PutHint | UpdateHint):
        return op.hint.cluster, op.hint.job_id, op.hint.vc
    if isinstance(op, RemoveHint):
        return op.cluster, op.job_id, op.vc
    return None


@runtime_checkable
class HintStore(Protocol):
    """What the cores write to: buffered writes, then the lifecycle (flush, close)."""

    def put_hint(self, hint: PriorityHint, *, rebuilt: bool = False) -> None: ...
    def update_hint(self, hint: PriorityHint) -> None: ...
    def remove_hint(self, cluster: str, vc: str, job_id: str) -> None: ...
    def put_advisory(self, advisory: PowerAdvisory) -> None: ...
    def put_load(self, load: ClusterLoad) -> None: ...
    def put_starts(self, starts: StartForecasts) -> None: ...
    def count(self, name: str, n: int = 1) -> None: ...
    def flush(self) -> int: ...
    def close(self) -> None: ...


@runtime_checkable
class StoreReads(Protocol):
    """The read side of a store's twin (tests, the embedded demo); schedulers read Redis
    with :class:`gpuhint.redis.client.HintClient`."""

    def get_hint(self, cluster: str, job_id: str) -> PriorityHint | None: ...
    def queue(self, cluster: str, vc: str) -> list[tuple[str, float]]: ...
    def get_advisory(self, cluster: str, node: str | None = None) -> PowerAdvisory | None: ...
    def get_load(self, cluster: str) -> ClusterLoad | None: ...
    def counters(self) -> dict[str, int]: ...


class SinkError(Exception):
    """A store's flush failed (the sink is down or refused the batch): an outage, never a
    bad event. Raised by a write that flushed on its own (:attr:`BufferedStore.auto_flush`);
    the message path lets it through instead of dead-lettering the event."""


class BufferedStore(abc.ABC):
    """Buffers write operations; subclasses apply a batch in :meth:`_apply`.

    Thread-safe: a stream processor may append while another thread flushes.

    ``max_buffer``: when that many writes are buffered the store is :attr:`full`. A store
    used on its own (a replay, the lab) then flushes from the write itself
    (:attr:`auto_flush`), so memory stays bounded. A store behind the worker's sink
    (:class:`gpuhint.cores.pipeline.store_flush.Sink`) never does: a write on the event
    path must not do I/O (a sink outage there would fail the event, not pause the work);
    the batch routine flushes a full store through the sink between events, with its
    retries.
    """

    def __init__(self, max_buffer: int = 10_000) -> None:
        self._ops: list[Op] = []
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.max_buffer = max_buffer
        self.auto_flush = True
        """Flush from the write that fills the buffer (off behind a sink: only it flushes)."""
        self.ops_written = 0
        self.empty_detected = False
        """Set by a flush that found the sink had lost its data: it had to create the
        epoch marker, or the marker is not the one this store saw before (another
        worker re-created it first): ``empty_reason`` ``redis_empty``; or it lacks
        writes it acknowledged (restored from an older snapshot): ``redis_rollback``.
        The worker then rebuilds hints from state."""
        self.epoch_seen: str | None = None
        self.empty_reason = ""
        self.vc_conflicts = 0
        """Hint writes refused since start: the job's live hint belongs to another VC
        (also counted in the sink as :data:`HINT_VC_CONFLICTS`)."""

    def _refused(self, conflicts: list[VcConflict]) -> None:
        """Count a flush's refused hint writes and log them in one warning."""
        if not conflicts:
            return
        self.vc_conflicts += len(conflicts)
        shown = "; ".join(
            f"job {c.job_id!r} of cluster {c.cluster!r} sent under VC {c.vc!r} "
            f"belongs to VC {c.owner!r}"
            for c in conflicts[:3]
        )
        more = f" (and {len(conflicts) - 3} more)" if len(conflicts) > 3 else ""
        log.warning(
            "refused %d hint write(s) from another VC (counter %s): %s%s",
            len(conflicts),
            HINT_VC_CONFLICTS,
            shown,
            more,
        )

    def _saw_epoch(self, created: bool, current: str, lost_writes: bool = False) -> None:
        """Note the sink's epoch marker; ``lost_writes``: the sink no longer holds writes
        it acknowledged (restored from an older snapshot)."""
        if created or (self.epoch_seen is not None and current != self.epoch_seen):
            self.empty_detected = True
            self.empty_reason = "redis_empty"
        elif lost_writes:
            self.empty_detected = True
            self.empty_reason = "redis_rollback"
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
            full = self.auto_flush and len(self._ops) >= self.max_buffer
        if full:
            try:
                self.flush()
            except Exception as exc:  # the writes stay buffered (flush puts them back)
                raise SinkError(f"automatic flush failed: {type(exc).__name__}: {exc}") from exc

    @property
    def full(self) -> bool:
        """``max_buffer`` writes or more are buffered: time to flush."""
        with self._lock:
            return len(self._ops) >= self.max_buffer

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

    def put_starts(self, starts: StartForecasts) -> None:
        self._add(PutStarts(starts))

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

    def read_epoch(self) -> None:
        """Learn the sink's epoch marker (creating it, as a flush does) without writing
        anything: a flush with nothing buffered does not ask."""
        with self._flush_lock:
            self._apply([])

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
    """The in-process twin of the Redis store: same operations, same lifecycle.

    A job id belongs to the VC whose hint for it lives: a put, update or removal sent
    under another VC is refused and counted (:data:`HINT_VC_CONFLICTS`); a refused
    removal still drops the job from its own VC's queue. A put of the hint already
    stored (same JSON, same score) is rewritten without a ``hint`` change.
    """

    def __init__(self, max_buffer: int = 10_000, keep_changes: int = 10_000) -> None:
        super().__init__(max_buffer)
        self.hints: dict[tuple[str, str], PriorityHint] = {}
        self.queues: dict[tuple[str, str], dict[str, float]] = {}
        self.advisories: dict[tuple[str, str | None], PowerAdvisory] = {}
        self.loads: dict[str, ClusterLoad] = {}
        self.starts: dict[tuple[str, str], StartForecasts] = {}
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
        self.starts.clear()
        self.changes.clear()
        self._counters.clear()
        self.epoch = None

    def _change(self, change: Change) -> None:
        self.changes.append(change)
        if len(self.changes) > self.keep_changes * 2:
            del self.changes[: -self.keep_changes]

    def _write_hint(self, h: PriorityHint, owner: PriorityHint | None, change: str) -> None:
        """Store ``h`` in its VC's queue; announce it (``change``) only if it changes
        something, as the Redis scripts do (a replayed write is not announced again)."""
        payload = h.model_dump_json()
        queue = self.queues.setdefault((h.cluster, h.vc), {})
        same = (
            owner is not None
            and queue.get(h.job_id) == h.priority
            and owner.model_dump_json() == payload
        )
        self.hints[(h.cluster, h.job_id)] = h
        queue[h.job_id] = h.priority
        if not same:
            self._change(Change(change, h.cluster, h.job_id, payload))

    def _apply(self, ops: list[Op]) -> None:
        from gpuhint.wire import keys

        created = self.epoch is None
        if self.epoch is None:
            self.epoch = uuid.uuid4().hex
        self._saw_epoch(created, self.epoch)
        conflicts: list[VcConflict] = []
        for op in ops:
            target = op_target(op)
            owner: PriorityHint | None = None  # the job's live hint, if any
            if target is not None:
                cluster, job_id, vc = target
                owner = self.hints.get((cluster, job_id))
                if owner is not None and owner.vc != vc:
                    conflicts.append(VcConflict(cluster, job_id, vc, owner.vc))
                    self._counters[HINT_VC_CONFLICTS] = self._counters.get(HINT_VC_CONFLICTS, 0) + 1
                    if isinstance(op, RemoveHint):  # still leaves its own VC's queue
                        self.queues.get((cluster, vc), {}).pop(job_id, None)
                    continue
            if isinstance(op, PutHint):
                self._write_hint(op.hint, owner, keys.CHANGE_HINT)
            elif isinstance(op, UpdateHint):
                if owner is not None:  # a no-op once the hint is gone
                    self._write_hint(op.hint, owner, keys.CHANGE_HINT_UPDATED)
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
            elif isinstance(op, PutStarts):
                self.starts[(op.starts.cluster, op.starts.vc)] = op.starts
            elif isinstance(op, Count):
                self._counters[op.name] = self._counters.get(op.name, 0) + op.n
            elif isinstance(op, MarkRebuilt):
                self._change(Change(keys.CHANGE_REBUILT, "", op.reason, str(op.hints)))
        self._refused(conflicts)

    def get_hint(self, cluster: str, job_id: str) -> PriorityHint | None:
        return self.hints.get((cluster, job_id))

    def queue(self, cluster: str, vc: str) -> list[tuple[str, float]]:
        q = self.queues.get((cluster, vc), {})
        return sorted(q.items(), key=lambda kv: (kv[1], kv[0]))

    def get_advisory(self, cluster: str, node: str | None = None) -> PowerAdvisory | None:
        return self.advisories.get((cluster, node))

    def get_load(self, cluster: str) -> ClusterLoad | None:
        return self.loads.get(cluster)

    def get_starts(self, cluster: str, vc: str) -> StartForecasts | None:
        return self.starts.get((cluster, vc))

    def counters(self) -> dict[str, int]:
        return dict(self._counters)
