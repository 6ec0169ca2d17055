"""Faust's consumer with the worker's own commit offsets, and a leaner fetch loop.

**Commits.** faust-streaming commits a partition up to the end of the first run of
consecutive acknowledged offsets (``Consumer._new_offset``), and its guard against a
missing head only fires for a hole of two or more: with offset N still in flight (the
worker holds an event's acknowledgement until its VC's state is saved) and N+1.. acked,
it commits past N (faust-streaming issues #596, #606; fix proposed in PR #707). A
worker killed before N's state is saved then never sees N again. Its gap bookkeeping
(a jump in read offsets counts as acknowledged) can also commit offsets nobody
handled. :class:`CheckpointConsumer` therefore asks the worker's batch routine for
every job-event partition's commit offset
(:meth:`gpuhint.cores.pipeline.checkpoint.BatchRoutine.committable`:
the lowest offset not yet durable) instead; Faust's own logic stays for other topics.

**Fetch.** The lean loop hands a fetched message to its stream without four tasks.

faust-streaming's fetch loop (``Consumer._drain_messages``) delivers every message
through ``Service.wait_first(callback(message), suspend_flow.wait())``: four tasks, an
``asyncio.wait`` and three cancellations per message, ~30 us on this project's 2-core
machine, about a tenth of what the worker spends on a job event. Nearly always the
callback (Faust's ``Conductor.on_message``: decode, ``put_nowait`` into the stream's
queue) finishes without suspending, so :class:`LeanConsumer` runs it one step inline
and only when it does suspend (a full stream buffer, stopped flow control) falls back
to Faust's guarded wait for the rest of it. Everything else -- gaps, commits,
read offsets, stop and rebalance handling -- is Faust's loop line for line.

The override reads faust-streaming internals, so it is used only with the versions it
was checked against (:data:`CHECKED_VERSIONS`); any other version runs Faust's own loop
(logged). ``GPUHINT_WORKER_LEAN_FETCH=false`` turns it off.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterator, Mapping
from time import monotonic
from types import CoroutineType
from typing import Any

import faust
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.utils.objects import cached_property
from mode.utils.queues import FlowControlEvent

log = logging.getLogger(__name__)

__all__ = [
    "CHECKED_VERSIONS",
    "HOLD",
    "CheckpointApp",
    "CheckpointConsumer",
    "LeanApp",
    "LeanConsumer",
    "app_class",
    "finish",
    "lean_fetch_supported",
    "run_inline",
    "running_thread",
    "seek_if_assigned",
    "seek_to_redeliver",
]

HOLD = -1
"""A partition's mark (``CheckpointConsumer._sought``) while its redelivery offset is
not known yet: the lean loop drops every fetched record of it until it is sought."""

CHECKED_VERSIONS = ("0.15.2", "0.15.3")
"""faust-streaming versions whose ``Consumer._drain_messages`` this module mirrors."""


def lean_fetch_supported() -> bool:
    """Whether the installed faust-streaming is one the lean loop was checked against."""
    return faust.__version__ in CHECKED_VERSIONS


async def finish(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Any:
    """Drive a coroutine that suspended on ``waiting_on`` to its end, as a task would.

    ``waiting_on`` is what the coroutine's first step yielded: an asyncio future, or
    ``None`` for a bare yield (``asyncio.sleep(0)``). Cancelling this throws
    ``CancelledError`` into the coroutine at its await, as cancelling its task would.
    """
    try:
        while True:
            if waiting_on is None:
                await asyncio.sleep(0)
            else:
                await asyncio.wait([waiting_on])  # its result or error reaches coro below
            waiting_on = coro.send(None)
    except StopIteration as stop:
        return stop.value
    except asyncio.CancelledError:
        try:
            coro.throw(asyncio.CancelledError())
        except (asyncio.CancelledError, StopIteration):
            pass
        else:
            coro.close()
        raise


def run_inline(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Run the coroutine's first step now: ``(True, None)`` if that finished it, else
    ``(False, what it waits on)`` -- hand both to :func:`finish`. Errors propagate."""
    try:
        waiting_on = coro.send(None)
    except StopIteration:
        return True, None
    return False, waiting_on


class CheckpointConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer; a job-event partition commits what the worker says.

    ``app.gpuhint_commits`` (set by :func:`streams.app.build_app`) is a pair: the topic,
    and a function partition -> offset that is safe to commit (None: nothing yet).
    """

    commit_refresh_s = 10.0
    """A job-event partition's commit is sent again after this long even when it has not
    moved: whatever kept an earlier one from the broker, the commit catches up."""

    commit_wait_s = 10.0
    """How long a commit waits for the worker's records to be acknowledged (else it is
    deferred to the next one: ``app.gpuhint_deliveries``, :class:`streams.faust_io.Deliveries`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sought: dict[Any, int] = {}
        """tp -> the offset a seek back asked for and the fetch loop has not yet delivered
        (the lean loop drops what an earlier fetch still delivers past it)."""
        self._sent: dict[Any, tuple[int, float]] = {}
        """Job-event tp -> (the offset last committed to the broker, when)."""

    async def seek(self, partition: Any, offset: int) -> None:
        self._sought[partition] = offset
        await super().seek(partition, offset)

    async def _seek(self, partition: Any, offset: int) -> None:
        # Faust calls aiokafka's seek from this (the worker's) thread while the consumer
        # runs in its own: the fetcher's records then change under its iteration
        # (KeyError in Fetcher.fetched_records). Seek in the consumer's thread instead.
        thread = self._thread
        done = await thread.call_thread(
            seek_if_assigned, thread._ensure_consumer(), partition, offset
        )
        if not done:
            log.info("%s: not assigned now, seek to %d skipped", partition, offset)

    def hold_job_partitions(self) -> None:
        """Faust just cleared its stream queues (flow resumed): drop every record of an
        assigned job-event partition the fetch loop still holds or fetches (a fetch
        drained before a seek to the commit is delivered after it), and forget Faust's
        read offset (which such records moved past what the agent got), until
        :meth:`redeliver_from` names the partition's offset."""
        if running_thread(self) is None:
            return
        others = getattr(self.app, "gpuhint_redelivered_topics", ())  # node status, telemetry
        for tp in self.assignment():
            if self._is_job_tp(tp) or tp.topic in others:
                self._sought[tp] = HOLD
                self._read_offset[tp] = None

    def release(self, partition: Any) -> None:
        """Lift :meth:`hold_job_partitions` without a seek (nothing to deliver again)."""
        if self._sought.get(partition) == HOLD:
            del self._sought[partition]

    async def redeliver_from(self, partition: Any, offset: int) -> bool:
        """Deliver ``partition`` again from ``offset`` (in the consumer's thread): the
        fetch loop drops what it fetched before, and Faust's read offset restarts
        there. Always sought: the position says nothing of what was dropped (a seek to
        the commit after a fetch was drained puts it back). False when the partition
        is not assigned now."""
        thread = self._thread
        done = bool(
            await thread.call_thread(
                seek_to_redeliver, thread._ensure_consumer(), partition, offset, self._mark
            )
        )
        if not done:
            self.release(partition)
        return done

    def _mark(self, partition: Any, offset: int) -> None:
        self._sought[partition] = offset
        self._read_offset[partition] = offset if offset else None

    async def perform_seek(self) -> None:
        self._sought.clear()  # a rebalance: every partition restarts from its commit
        self._sent.clear()
        await super().perform_seek()

    # -- commits of the job-event topic: what the routine says, until the broker has it --
    def _is_job_tp(self, tp: Any) -> bool:
        commits = getattr(self.app, "gpuhint_commits", None)
        return commits is not None and tp.topic == commits[0]

    def _filter_tps_with_pending_acks(self, topics: Any = None) -> Iterator[Any]:
        # Faust commits only partitions with an acknowledgement at or past its own record
        # of the commit; that record is updated even by a commit that failed, so a
        # partition whose last events were handled then is never committed again.
        # Every assigned job-event partition is considered instead.
        tps = dict.fromkeys(super()._filter_tps_with_pending_acks(topics))
        for tp in self.assignment():
            if self._is_job_tp(tp) and (topics is None or tp in topics or tp.topic in topics):
                tps[tp] = None
        return iter(tps)

    def _should_commit(self, tp: Any, offset: int) -> bool:
        if not self._is_job_tp(tp):
            return bool(faust_consumer.Consumer._should_commit(self, tp, offset))
        sent = self._sent.get(tp)
        return sent is None or sent[0] != offset or monotonic() - sent[1] >= self.commit_refresh_s

    async def _commit_offsets(
        self, offsets: Mapping[Any, int], start_new_transaction: bool = True
    ) -> bool:
        # every record the worker produced must be acknowledged first (Faust's flush
        # gives up on its buffer after 0.1 s, and a refused record only logs)
        deliveries = getattr(self.app, "gpuhint_deliveries", None)
        if deliveries is not None and offsets:
            await self.app.producer.flush()
            if not await deliveries.settle(self.commit_wait_s):
                log.info("records not yet acknowledged by the broker: commit deferred")
                return False
        did = bool(await super()._commit_offsets(offsets, start_new_transaction))
        now, assigned = monotonic(), self.assignment()
        for tp, offset in offsets.items():
            if not self._is_job_tp(tp):
                continue
            if did and tp in assigned:
                self._sent[tp] = (offset, now)
            else:  # not on the broker: sent again at the next commit
                self._sent.pop(tp, None)
                log.info("commit of %s at %d not taken; sending it again", tp, offset)
        return did

    def _new_offset(self, tp: Any) -> int | None:
        commits = getattr(self.app, "gpuhint_commits", None)
        if commits is None or tp.topic != commits[0]:
            return faust_consumer.Consumer._new_offset(self, tp)
        # Faust's acknowledgement and gap bookkeeping is not what commits this topic
        self._acked[tp].clear()
        self._acked_index[tp].clear()
        gaps = self._gap.get(tp)
        if gaps:
            gaps.clear()
        offset: int | None = commits[1](tp.partition)
        return offset


def running_thread(consumer: Any) -> Any | None:
    """The consumer's thread (where aiokafka calls must run) once it has started, else
    None (not started yet, or no thread: an agent test)."""
    thread = getattr(consumer, "_thread", None)
    started = getattr(thread, "_started", None)
    return thread if started is not None and started.is_set() else None


async def seek_if_assigned(consumer: Any, tp: Any, offset: int) -> bool:
    """Seek ``tp`` of an aiokafka consumer to ``offset`` if it is assigned now (run in the
    consumer's thread); False when it is not (a rebalance took it: its new owner starts
    from the commit)."""
    if tp not in consumer.assignment():
        return False
    consumer.seek(tp, offset)
    return True


async def seek_to_redeliver(
    consumer: Any, tp: Any, offset: int, mark: Callable[[Any, int], None]
) -> bool:
    """Seek ``tp`` of an aiokafka consumer to ``offset`` if it is assigned (run in the
    consumer's thread); ``mark(tp, offset)`` first, so the fetch loop drops what an
    earlier fetch still delivers until ``offset`` comes. False when not assigned."""
    if tp not in consumer.assignment():
        return False
    mark(tp, offset)
    consumer.seek(tp, offset)
    return True


class ResumeNotifyingFlowControl(FlowControlEvent):
    """Faust's flow control, which clears every stream queue each time flow resumes,
    calling ``on_resume`` after each clear: events fetched and queued for an agent
    are gone, and the consumer's position is past them."""

    def __init__(self, *, on_resume: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_resume = on_resume

    def resume(self) -> None:
        super().resume()
        self._on_resume()


class CheckpointApp(faust.App):
    """A Faust app whose consumer is :attr:`consumer_class` (:class:`CheckpointConsumer`).

    Each time Faust resumes flow (during and after every rebalance, at start) it clears
    the stream queues. Faust relies on its seek to the committed offsets, but (1) a
    partition with no commit yet is not sought, so what was queued was lost and the
    partition stalled behind it; (2) after its recovery Faust resumes the partitions,
    then seeks them to the commit, then clears the queues: a fetch drained meanwhile
    (before the seek) is queued after it and cleared, and its records moved Faust's
    read offset past them, so the fetch again from the commit skipped them as read
    (the gaps of issue 21: a whole fetch, ~3,300 records, per partition). So on each
    resume every assigned job-event partition is held at once (the fetch loop drops
    its records, Faust's read offset is forgotten), and ``app.gpuhint_redeliver`` (set
    by :func:`streams.app.build_app`) then seeks each to what the worker has not
    handled."""

    consumer_class: type[faust_aiokafka.Consumer] = CheckpointConsumer

    @cached_property
    def flow_control(self) -> FlowControlEvent:
        return ResumeNotifyingFlowControl(loop=self.loop, on_resume=self._flow_resumed)

    def _flow_resumed(self) -> None:
        redeliver = getattr(self, "gpuhint_redeliver", None)
        if redeliver is None:
            return
        hold = getattr(getattr(self, "_consumer", None), "hold_job_partitions", None)
        if hold is not None:
            hold()  # now, before the fetch loop queues more of what it fetched
        pending: set[asyncio.Future[Any]] = self.__dict__.setdefault("_gpuhint_redeliveries", set())
        for earlier in pending:  # its offsets may be stale: this one seeks every partition
            earlier.cancel()
        task = asyncio.ensure_future(redeliver())
        pending.add(task)  # a reference until done (the loop keeps only a weak one)
        task.add_done_callback(pending.discard)

    def _new_consumer(self) -> Any:
        transport = self.transport
        return self.consumer_class(
            transport,
            callback=self.topics.on_message,
            on_partitions_revoked=self._on_partitions_revoked,
            on_partitions_assigned=self._on_partitions_assigned,
            beacon=self.beacon,
            loop=transport.loop,
        )


class LeanConsumer(CheckpointConsumer):
    """faust-streaming's aiokafka consumer with an inline fast path for delivery.

    Also, a message of a partition whose stream buffer is over its high mark (Faust
    then pauses that partition's fetch, ``on_buffer_full``) waits until the buffer has
    drained to its low mark (``on_buffer_drop``) before it is delivered, instead of
    each message waiting for one free slot in a full buffer (the slow path, per
    message) -- bounded by :attr:`drain_wait_s` in case no drop comes."""

    drain_wait_s = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._buffer_dropped = asyncio.Event()

    def on_buffer_drop(self, tp: Any) -> None:
        super().on_buffer_drop(tp)
        self._buffer_dropped.set()

    async def _wait_for_buffer_drop(self) -> None:
        self._buffer_dropped.clear()
        await self.wait_first(
            self._buffer_dropped.wait(), self.suspend_flow.wait(), timeout=self.drain_wait_s
        )

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - e2e
        # Faust's loop (faust/transport/consumer.py, Consumer._drain_messages), split in
        # parts, with one change (:meth:`_deliver`) and the seek-back filter.
        try:
            await self._fetch_until_stopped(fetcher)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            self.diag.unset_flag(faust_consumer.CONSUMER_FETCHING)

    async def _fetch_until_stopped(self, fetcher: Any) -> None:  # pragma: no cover - e2e
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        fetching = faust_consumer.CONSUMER_FETCHING
        yield_every = 100
        num_since_yield = 0
        while not (consumer_should_stop() or fetcher_should_stop()):
            self.diag.set_flag(fetching)
            ait = self.getmany(timeout=1.0)
            await self.sleep(0)
            if self.should_stop:
                continue
            async for tp, message in ait:
                num_since_yield += 1
                if num_since_yield > yield_every:
                    await asyncio.sleep(0)
                    num_since_yield = 0
                if not self._fetched_before_seek(tp, message.offset):
                    await self._take(tp, message)
            self.diag.unset_flag(fetching)

    def _fetched_before_seek(self, tp: Any, offset: int) -> bool:
        """A message fetched before a seek back to ``_sought[tp]`` (or while the
        partition is on :data:`HOLD`): it comes again after it (the seek's own offset
        clears the mark)."""
        sought = self._sought.get(tp)
        if sought is None:
            return False
        if offset != sought:
            return True
        del self._sought[tp]
        return False

    async def _take(self, tp: Any, message: Any) -> None:  # pragma: no cover - e2e
        """One fetched message, as Faust's loop takes it: skip what was read, note a gap
        in an acked topic, commit every ``commit_every`` acks, deliver, mark it read."""
        offset = message.offset
        r_offset = self._read_offset[tp]
        if r_offset is not None and offset < r_offset:
            return
        gap = offset - (r_offset or 0)
        if gap > 1 and r_offset and self.app.topics.acks_enabled_for(message.topic):
            await self._add_gap(tp, r_offset + 1, offset)
        if self._commit_every is not None and self._n_acked >= self._commit_every:
            self._n_acked = 0
            await self.commit()
        if await self._deliver(tp, message):
            self._read_offset[tp] = offset

    async def _deliver(self, tp: Any, message: Any) -> bool:
        """The change: Faust awaits ``wait_first(callback(message), suspend_flow.wait())``
        for every message. Here a message of a paused partition first waits for its
        buffer to drain, a stopped flow drops the message as that wait would, and the
        callback runs inline unless it suspends.

        A message that waited (its buffer full, a commit) is checked against the seek
        marks again: flow may have resumed meanwhile (the queues cleared, the partition
        held: :meth:`CheckpointConsumer.hold_job_partitions`), and the clear itself
        ends the wait. Delivered then, it would reach the agent ahead of the events
        cleared before it (issue 21's gaps). Such a message is dropped, and Faust's
        read offset not moved (False): it comes again after the seek."""
        flow_suspended = self.suspend_flow.is_set
        # (read each time: a consumer restart rebinds the set)
        if tp in self._buffered_partitions and not flow_suspended():
            await self._wait_for_buffer_drop()
        if flow_suspended():
            return True
        if tp in self._sought and self._fetched_before_seek(tp, message.offset):
            return False
        coro = self.callback(message)
        if type(coro) is not CoroutineType:  # not Faust's own
            await self.wait_first(coro, self.suspend_flow.wait())
            return True
        done, waiting_on = run_inline(coro)
        if not done:
            await self.wait_first(finish(coro, waiting_on), self.suspend_flow.wait())
        return True


class LeanApp(CheckpointApp):
    """A Faust app whose consumer is :class:`LeanConsumer`."""

    consumer_class = LeanConsumer


def app_class(lean_fetch: bool) -> type[faust.App]:
    """:class:`LeanApp` when asked for and the installed Faust was checked, else
    :class:`CheckpointApp` (Faust's fetch loop, the worker's commits)."""
    if not lean_fetch:
        return CheckpointApp
    if not lean_fetch_supported():
        log.warning(
            "faust-streaming %s is not one the lean fetch loop was checked against (%s): "
            "using Faust's own",
            faust.__version__,
            ", ".join(CHECKED_VERSIONS),
        )
        return CheckpointApp
    return LeanApp
