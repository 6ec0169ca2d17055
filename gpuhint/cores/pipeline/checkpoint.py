"""The worker's one batch routine and its checkpoint order. Pure: no Faust, no Kafka.

Every driver runs this routine: the Faust worker (:mod:`streams.app`), the in-process
pipeline of the whole-pipeline tests (:mod:`gpuhint.cores.pipeline.inprocess`). What differs is
only the
:class:`Edge` that delivers events, acknowledges them and seeks.

The order, per batch and per save (quix-streams names it ``Checkpoint.commit()``):

1. **admit** each event: its partition's offsets must follow one another
   (:class:`PartitionProgress`). An offset below the next expected one was handled
   already in this assignment (skipped); one above it is a *gap*: the log is asked
   whether the offsets in between exist (:meth:`Edge.first_offset`); if they do, the
   events were skipped on the way (a fetch or recovery race), so the partition is
   sought back to the first missing offset, said in the log and counted
   (:attr:`BatchRoutine.gaps`), and its events are discarded until that offset comes
   again. A partition never moves past an offset it has not handled. The first event
   of a partition is checked against the group's commit, or, for a partition never
   committed, the log's first offset; while the commit cannot be read the partition is
   *held* (its events discarded, sought back, asked again): a first delivery is never
   trusted as the start.
2. **handle** each admitted event (:class:`~gpuhint.cores.pipeline.handler.MessageHandler`);
   writing to the store never flushes it (no I/O on the event path); a store that
   reaches ``max_buffer`` buffered writes is flushed between two events through the
   sink, with its retries;
3. **flush** the store's buffered writes (retried while the sink is down: consumption
   pauses, nothing is dropped; :class:`~gpuhint.cores.pipeline.store_flush.Sink`, which
   also rebuilds the owned VCs' hints when Redis does not hold them). Another agent that
   shares the store flushes it with :meth:`BatchRoutine.flush`, under the batch lock;
4. **hold** each event's acknowledgement under the VC whose state it changed
   (:class:`~gpuhint.cores.pipeline.state_table.SaveCadence`); dead-lettered events change no state
   and are released at once;
5. **save** a VC's state (its changelog record) when its cadence is due, then
   **release** its held events; when more VCs hold unsaved changes than half the
   live-state bound (``TableStates.max_live``), the oldest are saved at once before the
   next batch (backpressure: an unsaved state cannot be evicted, so a backlog that
   touches 100,000 VCs would otherwise keep them all in memory);
6. **commit**: a partition's committable offset (:meth:`BatchRoutine.committable`) is
   its lowest offset still held or in a batch, else the next expected offset. The edge
   commits that, and only that, after its producer is flushed (Faust flushes it before
   every commit).

A crash anywhere redelivers from the last commit: events whose VC state was saved are
recognized by the VC's offset watermark (re-emitted, not re-applied), the rest are
applied again to the saved state.

>>> import asyncio
>>> from gpuhint.wire.contract import JobEvent, encode_message
>>> from gpuhint.cores.qssf import HintEngine
>>> from gpuhint.cores.sink import InMemoryStore
>>> from models.history import HistoryEstimator
>>> from gpuhint.cores.pipeline.handler import Message, MessageHandler
>>> from gpuhint.cores.pipeline.state_table import TableStates
>>> states = TableStates({})
>>> store = InMemoryStore()
>>> handler = MessageHandler(HintEngine(HistoryEstimator, store, states=states))
>>> ev = JobEvent(phase="submitted", job_id="7", vc="a", num_gpus=1, time=0, submit_time=0)
>>> msgs = [Message("gpuhint.job-events", 0, o, b"default/a", encode_message(ev))
...         for o in (5, 6)]
>>> edge = ListEdge(committed={0: 5})
>>> routine = BatchRoutine(handler, states, edge, flush=store.flush, save_interval_s=0)
>>> asyncio.run(routine.run_batch(msgs))
>>> routine.committable(0), edge.acked == msgs
(7, True)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar

from gpuhint.cores.pipeline.cadence import SaveCadence
from gpuhint.cores.pipeline.handler import Message, MessageHandler, Outcome
from gpuhint.cores.pipeline.list_edge import ListEdge
from gpuhint.cores.pipeline.state_table import TableStates
from gpuhint.cores.pipeline.store_flush import Sink
from gpuhint.cores.sink import BufferedStore

log = logging.getLogger(__name__)

E = TypeVar("E")
E_contra = TypeVar("E_contra", contravariant=True)

__all__ = [
    "Admission",
    "BatchRoutine",
    "Edge",
    "ListEdge",
    "PartitionProgress",
    "RoutineStats",
    "Sink",
]


class Admission(Enum):
    """What the routine does with one delivered event."""

    APPLY = "apply"
    """The next offset of its partition: handle it."""
    SEEN = "seen"
    """Below the next expected offset: handled already in this assignment."""
    DISCARD = "discard"
    """Delivered while its partition is sought back past a gap, or held (its start not
    read yet): it comes again."""


class Edge(Protocol[E_contra]):
    """What the routine needs of the system that delivers its events."""

    def message(self, event: E_contra) -> Message:
        """The consumed record of ``event``."""
        ...

    def hold(self, event: E_contra) -> None:
        """Keep ``event`` unacknowledged past its batch (until :meth:`ack`)."""
        ...

    def ack(self, event: E_contra) -> None:
        """Release ``event``: its effects are durable, or it has none."""
        ...

    async def emit(self, outcome: Outcome) -> None:
        """Produce what the handler asked for (a dead letter, forwards)."""
        ...

    async def committed(self, partition: int) -> int | None:
        """The group's committed offset of ``partition`` (None: never committed; the
        routine then starts at the log's first offset). Raises when it cannot be read
        (the routine holds the partition and asks again)."""
        ...

    async def first_offset(self, partition: int, at: int) -> int | None:
        """The first offset at or after ``at`` that the log of ``partition`` holds
        (None: none yet)."""
        ...

    async def seek(self, partition: int, offset: int) -> None:
        """Deliver ``partition`` again from ``offset``."""
        ...


@dataclass
class PartitionProgress:
    """Which offsets of one partition are handled, still open, and safe to commit.

    ``next_offset`` is the next offset expected (None until the start is known);
    ``open`` the handled offsets whose effects are not yet durable, in offset order
    (a dict keeps insertion order, and offsets are admitted in order);
    ``seeking`` the offset a seek back waits for.

    >>> p = PartitionProgress(next_offset=10)
    >>> p.open_offset(10); p.open_offset(11); p.next_offset = 12
    >>> p.close(11); p.committable()
    10
    >>> p.close(10); p.committable()
    12
    """

    next_offset: int | None = None
    open: dict[int, None] = field(default_factory=dict)
    seeking: int | None = None
    sought_at: float = 0.0
    """When the last seek back was asked (the routine's clock)."""
    start_known: bool = True
    """False while the partition is held: its start (the group's commit) could not be
    read; ``seeking`` is then the offset that asks again."""
    failed_at: float = 0.0
    """When the start was last asked for and not read (the routine's clock)."""

    def open_offset(self, offset: int) -> None:
        self.open[offset] = None

    def close(self, offset: int) -> None:
        self.open.pop(offset, None)

    def committable(self) -> int | None:
        """The lowest open offset, else the next expected one."""
        for offset in self.open:
            return offset
        return self.next_offset


@dataclass
class RoutineStats:
    """What the routine saw besides handling (the worker exports these)."""

    gaps: int = 0
    """Skipped offsets found and sought back to."""
    holes: int = 0
    """Offsets the log itself lacks (transaction markers, compaction): passed over."""
    seen: int = 0
    """Events delivered again within one assignment (skipped)."""
    discarded: int = 0
    """Events dropped while their partition was sought back (they come again)."""
    held: int = 0
    """Times a partition's start could not be read and it was held (sought back)."""
    flow_reseeks: int = 0
    """Partitions sought to :meth:`BatchRoutine.redelivery_offset` because the driver
    dropped the events it had queued (the worker: Faust, each time flow resumes)."""


HOLD_RETRY_S = 1.0
"""A held partition asks for its start again at most this often."""


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


class BatchRoutine(Generic[E]):
    """The one checkpoint order (module docstring) over any :class:`Edge`.

    ``flush`` writes the store's buffered writes (awaited if it returns an awaitable:
    the worker's retries while Redis is down). ``save_interval_s`` is the cadence of VC
    state saves (0: every batch). ``probe(step)`` is called after ``"handled"``,
    ``"flushed"`` and ``"saved"``: the in-process pipeline raises there to crash a
    worker at that point; the worker passes nothing.
    """

    def __init__(
        self,
        handler: MessageHandler,
        states: TableStates,
        edge: Edge[E],
        flush: Callable[[], Any],
        save_interval_s: float,
        clock: Callable[[], float] | None = None,
        probe: Callable[[str], None] | None = None,
        offload: Callable[..., Awaitable[Any]] = _in_thread,
        partition_of: dict[str, int] | None = None,
    ) -> None:
        self.handler = handler
        self.states = states
        self.edge = edge
        self._flush = flush
        self.probe = probe or (lambda step: None)
        self.offload = offload
        self.clock = clock or time.monotonic
        self.cadence: SaveCadence[E] = SaveCadence(self._release, save_interval_s, self.clock)
        self.partitions: dict[int, PartitionProgress] = {}
        self.partition_of: dict[str, int] = {} if partition_of is None else partition_of
        """VC state key -> its partition (where the VC's changelog record goes)."""
        self.stats = RoutineStats()
        self.batch_lock = asyncio.Lock()
        """Handle + flush of a batch, or one VC's snapshot: never both at once."""
        self.save_lock = asyncio.Lock()
        """One save at a time: a VC's records go out in order."""
        self.generation = 0
        """Bumped by :meth:`forget`: a save begun before it is dropped."""
        self._reseeked: dict[int, int] = {}  # partition -> offset last sought again

    # -- offsets ---------------------------------------------------------------------------
    def committable(self, partition: int) -> int | None:
        """The offset the edge may commit for ``partition`` (None: nothing handled)."""
        p = self.partitions.get(partition)
        return None if p is None else p.committable()

    async def _start(self, msg: Message) -> PartitionProgress | None:
        """The progress of ``msg``'s partition, its start read on first sight: the
        group's commit, else (never committed) the log's first offset, so the gap guard
        holds from the first event. A commit (or log start) that cannot be read *holds*
        the partition: its events are discarded and it is sought back to this one, which
        asks again when it comes (at most every :data:`HOLD_RETRY_S`); None meanwhile."""
        p = self.partitions.get(msg.partition)
        if p is not None and p.start_known:
            return p
        now = self.clock()
        if p is not None and (msg.offset != p.seeking or now - p.failed_at < HOLD_RETRY_S):
            return None  # held: only the offset sought back asks again, paced
        try:
            start = await self.edge.committed(msg.partition)
            if start is None:
                start = await self.edge.first_offset(msg.partition, 0)
        except Exception as exc:  # broker busy: trust nothing, hold the partition
            self.stats.held += 1
            log.warning(
                "partition %d: committed offset not read (%s: %s); held, offset %d comes again",
                msg.partition,
                type(exc).__name__,
                exc,
                msg.offset,
            )
            self.partitions[msg.partition] = PartitionProgress(
                start_known=False, seeking=msg.offset, sought_at=now, failed_at=now
            )
            await self.edge.seek(msg.partition, msg.offset)
            return None
        p = self.partitions[msg.partition] = PartitionProgress(next_offset=start)
        return p

    async def _admit(self, msg: Message) -> Admission:
        p = await self._start(msg)
        if p is None:
            self.stats.discarded += 1
            return Admission.DISCARD
        off = msg.offset
        if p.seeking is not None:
            if off != p.seeking:
                self.stats.discarded += 1
                return Admission.DISCARD
            p.seeking = None
            log.info("partition %d: offset %d delivered again; resuming", msg.partition, off)
        expected = p.next_offset
        if expected is None or off == expected:
            p.next_offset = off + 1
            return Admission.APPLY
        if off < expected:
            self.stats.seen += 1
            return Admission.SEEN
        first = await self.edge.first_offset(msg.partition, expected)
        if first is None or first >= off:  # the log has nothing in between
            self.stats.holes += 1
            log.info(
                "partition %d: offsets %d..%d are not in the log", msg.partition, expected, off - 1
            )
            p.next_offset = off + 1
            return Admission.APPLY
        self.stats.gaps += 1
        log.warning(
            "partition %d: offset %d delivered after %d; offsets %d..%d were skipped on the "
            "way: seeking back to %d (nothing past it is applied until it comes)",
            msg.partition,
            off,
            expected - 1,
            first,
            off - 1,
            first,
        )
        p.seeking = first
        p.sought_at = self.clock()
        await self.edge.seek(msg.partition, first)
        self.stats.discarded += 1
        return Admission.DISCARD

    async def redelivery_offset(self, partition: int) -> int | None:
        """Where ``partition`` must be delivered from again when the driver dropped the
        events it had queued but not yet handed over (Faust clears its stream queues
        each time flow resumes): the offset a seek back waits for, else the next
        expected one, else the group's commit, else the log's first (None: the log is
        empty). An event delivered twice is skipped (:attr:`Admission.SEEN`); one never
        delivered again would leave its partition stalled behind it."""
        p = self.partitions.get(partition)
        if p is not None:
            offset = p.seeking if p.seeking is not None else p.next_offset
            if offset is not None:
                return offset
        committed = await self.edge.committed(partition)
        if committed is not None:
            return committed
        return await self.edge.first_offset(partition, 0)

    async def reseek_stalled(self, after_s: float = 2.0) -> int:
        """Seek again every partition whose seek back is unanswered for ``after_s`` (a
        fetch under way then can deliver past it, and the consumer drop the re-read
        offsets as old); return how many. Unanswered again, the first offset the log
        holds is sought (retention may have deleted the one sought: it never comes)."""
        now, n = self.clock(), 0
        for partition, p in list(self.partitions.items()):
            if (target := p.seeking) is None or now - p.sought_at < after_s:
                continue
            p.sought_at, first = now, None
            if self._reseeked.get(partition) == target:
                with contextlib.suppress(Exception):  # the broker busy: the same again
                    first = await self.edge.first_offset(partition, target)
                if p.seeking != target or self.partitions.get(partition) is not p:
                    continue  # delivered or forgotten meanwhile
            if first is not None and first > target:
                log.warning("partition %d: offset %d is gone from the log; seeking to %d",
                            partition, target, first)  # fmt: skip
                p.seeking = target = first
            else:
                log.info("partition %d: offset %d not delivered yet; seeking again",
                         partition, target)  # fmt: skip
            self._reseeked[partition] = target
            await self.edge.seek(partition, target)
            n += 1
        return n

    # -- the batch -------------------------------------------------------------------------
    async def run_batch(self, batch: Sequence[E]) -> None:
        """Admit, handle, flush and hold one batch; save at once when the interval is 0."""
        async with self.batch_lock:
            by_key: dict[str | None, list[E]] = {}
            passed: list[E] = []
            for event in batch:
                self.edge.hold(event)
                msg = self.edge.message(event)
                if await self._admit(msg) is not Admission.APPLY:
                    passed.append(event)
                    continue
                self.partitions[msg.partition].open_offset(msg.offset)
                outcome = self.handler.job_event(msg)
                if outcome.state_key is not None:
                    self.partition_of[outcome.state_key] = msg.partition
                by_key.setdefault(outcome.state_key, []).append(event)
                await self.edge.emit(outcome)
                if self._store_full():  # memory bound: flush between events, retried
                    await self._flush_store()
            self.probe("handled")
            await self._flush_store()
            self.probe("flushed")
            for key, events in by_key.items():
                if key is None:  # dead-lettered: no state to save
                    for event in events:
                        self._release(event)
                else:
                    self.cadence.hold(events, key)
            for event in passed:
                self.edge.ack(event)
        if self.cadence.interval_s == 0:
            await self.save(self.cadence.keys())
            return
        over = len(self.cadence.keys()) - self.states.max_live // 2
        if over > 0:  # backpressure: unsaved (dirty) states cannot be evicted
            await self.save(self.cadence.keys()[:over])

    def _store_full(self) -> bool:
        store = self.handler.engine.store
        return isinstance(store, BufferedStore) and store.full

    async def _flush_store(self) -> None:
        done = self._flush()
        if done is not None and hasattr(done, "__await__"):
            await done

    async def flush(self) -> None:
        """Flush the store under the batch lock: what another agent sharing the store
        calls (the worker's cluster-load agent), so the flush's rebuild never walks a VC
        state while a batch changes it."""
        async with self.batch_lock:
            await self._flush_store()

    def _release(self, event: E) -> None:
        msg = self.edge.message(event)
        p = self.partitions.get(msg.partition)
        if p is not None:
            p.close(msg.offset)
        self.edge.ack(event)

    # -- saves -----------------------------------------------------------------------------
    async def save(self, keys: Sequence[str]) -> None:
        """Save these VCs one at a time, then release each one's held events.

        A VC is pickled under ``batch_lock`` (nothing mutates it meanwhile) and its held
        events taken with it; the snapshot is compressed off the lock (zlib releases
        the GIL). The record is written before the taken events are released; events
        handled meanwhile stay held for the VC's next save."""
        async with self.save_lock:
            for key in keys:
                async with self.batch_lock:
                    gen = self.generation
                    pickled = await self.offload(self.states.pickle_dirty, (key,))
                    taken = self.cadence.take(key)
                encoded = await self.offload(self.states.seal_all, pickled)
                if gen != self.generation:  # forgotten meanwhile: the taken come again
                    return
                self.states.store_encoded(encoded)
                self.cadence.ack(taken)
            if keys:
                self.probe("saved")

    async def tick(self, tick_s: float, urgent: bool = False) -> None:
        """What the worker's timer runs every ``tick_s``, whether events come or not: ask
        again for seeks not answered (:meth:`reseek_stalled`), then save the VCs whose
        cadence is due, a few a tick (every VC with held events when ``urgent``: a
        rebalance or a stop). So held events are released, and the commit moves, after
        the last event too."""
        await self.reseek_stalled()
        if not self.cadence.held:
            return
        if urgent:
            await self.save_all()
        else:
            await self.save_due(tick_s)

    async def save_all(self) -> None:
        """Save every VC with held events now (a rebalance or a stop)."""
        await self.save(self.cadence.keys())

    async def save_due(self, tick_s: float) -> None:
        """Save the VCs whose cadence is due, a few a tick (:meth:`SaveCadence.paced_due_keys`)."""
        await self.save(self.cadence.paced_due_keys(tick_s))

    def forget(self) -> int:
        """Partitions were revoked (or the worker stops): drop live state, held events
        and offsets (held events are never acknowledged: they come again). Returns how
        many events were held."""
        self.generation += 1
        held = self.cadence.drop()
        self.states.forget()
        self.partitions.clear()
        return held
