"""The Faust worker: thin module-level agents around
:class:`gpuhint.cores.pipeline.handler.MessageHandler`.

Every message goes through the pure handler (the same one ``gpuhint demo`` and the
tests call); this module only moves bytes between Kafka, the handler and the sinks.

State (see docs/architecture.md):

* ``vc-state``: one :class:`gpuhint.cores.qssf.VcState` per (cluster, VC) -- that VC's own
  duration model, its waiting jobs and its offset watermark -- as a compressed pickle
  in a changelog-backed table co-partitioned with the job-event topic (events are keyed
  ``cluster/vc``), so a VC's state moves with its partition;
* ``ces-state``: one checkpoint per cluster, co-partitioned with cluster telemetry.

Delivery: the job-event agent runs the batch routine of :mod:`gpuhint.cores.pipeline.checkpoint`
(admit in offset order, handle, flush to Redis with retries, hold each event's
acknowledgement until its VC's state is saved, save on a cadence, release) on batches
of what the stream has ready (:func:`streams.batching.take_ready`); the edge is
:class:`streams.faust_io.FaustEdge`. Every job-event partition commits what the routine
says is durable (:class:`streams.faust_consumer.CheckpointConsumer`), never Faust's own
choice (which can pass an offset still held: faust-streaming #596/#606). A crash
redelivers uncommitted events: those whose state was saved change nothing (the offset
watermark in each VcState), the others are re-applied to the older saved state; their
Redis writes are re-emitted (idempotent). Redis coming back empty is detected by a
marker key; the worker then rewrites every pending hint from the VcStates it owns and
adds a ``rebuilt`` entry to the change stream; a process's first flush, and partitions
newly assigned to it, rebuild its VCs' hints too (another worker may have re-created the
marker meanwhile: :mod:`gpuhint.cores.pipeline.store_flush`). The cluster-load agent
flushes the shared store under the job-event routine's batch lock
(:meth:`~gpuhint.cores.pipeline.checkpoint.BatchRoutine.flush`).

Partitions: when a worker joins or leaves, the leader deals the job-event partitions
by their load (lag + recent rate, sampled from the broker) rather than by count when
that evens the busiest worker's share by 10% or more (:mod:`streams.faust_assignor`).

Agent concurrency is 1: with more, faust-streaming can commit past an in-flight
message and lose it on restart (faust-streaming issue #606).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

import faust

from gpuhint.cores.pipeline.cadence import SaveCadence
from gpuhint.cores.pipeline.checkpoint import BatchRoutine, Sink
from gpuhint.cores.pipeline.cluster_load import (
    ClusterLoadProcessor,
    processor_from_settings,
)
from gpuhint.cores.pipeline.gc_policy import HeapFreezer
from gpuhint.cores.pipeline.handler import Message, MessageHandler, WorkerStats
from gpuhint.cores.pipeline.partitioning import partition_for
from gpuhint.cores.pipeline.placement import RebalanceProbe
from gpuhint.cores.pipeline.state_table import TableStates, owner_key
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import BufferedStore, HintStore
from gpuhint.wire.config import Settings
from models.registry import make_model
from streams.batching import take_ready
from streams.faust_assignor import LoadSampler, LoadView
from streams.faust_consumer import running_thread
from streams.faust_io import Channels, FaustEdge, log_start, make_faust_app, redelivery_start

log = logging.getLogger(__name__)

__all__ = ["Sink", "Worker", "WorkerStats", "build_app"]


@dataclass
class Worker:
    app: faust.App
    stats: WorkerStats
    engine: HintEngine
    handler: MessageHandler
    states: TableStates
    sink: Sink
    routine: BatchRoutine[Any]
    """The batch routine the job-event agent runs (:mod:`gpuhint.cores.pipeline.checkpoint`)."""

    @property
    def cadence(self) -> SaveCadence[Any]:
        return self.routine.cadence

    async def save_state(self) -> None:
        """Save the held VC state now and acknowledge its events (what the cadence does)."""
        await self.routine.save_all()


def _message(event: Any) -> Message:
    m = event.message
    return Message(m.topic, m.partition, m.offset, event.key, event.value)


def _ces_processor(
    settings: Settings, store: HintStore, ch: Channels, partition_of: dict[str, int]
) -> ClusterLoadProcessor:
    return processor_from_settings(
        settings,
        store,
        checkpoints=ch.ces_table,
        on_save=lambda k, blob: ch.ces_table.put(k, blob, partition_of[owner_key(k)]),
        on_delete=lambda k: ch.ces_table.delete(k, partition_of[owner_key(k)]),
    )


def _vc_states(settings: Settings, ch: Channels, partition_of: dict[str, int]) -> TableStates:
    """VC states over the ``vc-state`` table; each record (a part of a split one too)
    goes to its VC's partition."""
    return TableStates(
        ch.vc_table,
        on_save=lambda k, blob: ch.vc_table.put(k, blob, partition_of[TableStates.owner_key(k)]),
        on_delete=lambda k: ch.vc_table.delete(k, partition_of[TableStates.owner_key(k)]),
        max_record_bytes=settings.state_max_record_bytes,
        max_live=settings.state_max_live_vcs,
    )


def build_app(settings: Settings, store: HintStore) -> Worker:
    """Build the Faust app (agents, tables, timers) around a store: wiring only."""
    if not isinstance(store, BufferedStore):  # the worker flushes in batches, detects wipes
        raise TypeError(f"the worker needs a BufferedStore, got {type(store).__name__}")
    app = make_faust_app(settings)
    ch = Channels.of(app, settings)
    vc_partition: dict[str, int] = {}
    ces_partition: dict[str, int] = {}
    states = _vc_states(settings, ch, vc_partition)
    engine = HintEngine(
        partial(make_model, settings.model),
        store,
        states=states,
        wait_bound=settings.qssf_wait_bound,
    )
    ces = _ces_processor(settings, store, ch, ces_partition)
    handler = MessageHandler(
        engine,
        settings.topics,
        ces if settings.ces_enabled else None,
        limits=settings.limits,
        dead_letter_max_bytes=settings.dead_letter_max_bytes,
    )

    def owned() -> set[int]:
        """The job-event partitions this worker holds now (none before its consumer runs)."""
        if running_thread(app.consumer) is None:
            return set()
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == ch.job_topic}

    def owned_vcs() -> list[str]:
        """VC keys on the job-event partitions this worker holds now (the table also
        keeps revoked partitions' last state, which another worker may have moved on)."""
        mine = owned()
        return [k for k in list(states) if partition_for(k.encode(), settings.partitions) in mine]

    # a flush rebuilds the owned VCs' hints when Redis came back empty, at this process's
    # first flush, and when partitions new to it were assigned (store_flush.Sink)
    sink = Sink(store, lambda: engine.rebuild(owned_vcs()), owned)
    routine: BatchRoutine[Any] = BatchRoutine(
        handler,
        states,
        FaustEdge(app, ch.job_topic, ch.emit, settings),
        flush=sink.flush,
        save_interval_s=settings.state_save_interval_s,
        partition_of=vc_partition,
    )
    # every job-event partition commits what the routine says is durable
    app.gpuhint_commits = (ch.job_topic, routine.committable)  # type: ignore[attr-defined]
    app.gpuhint_ces = ces  # type: ignore[attr-defined]
    app.gpuhint_redeliver = partial(_redeliver_dropped, app, ch.job_topic, routine)  # type: ignore[attr-defined]
    if settings.ces_enabled:  # what the other agents read is delivered again too
        app.gpuhint_redelivered_topics = frozenset(  # type: ignore[attr-defined]
            (settings.topics.node_status, settings.topics.cluster_telemetry)
        )

    def forget_state(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        # a rebalance: re-read each VC's and cluster's newest state from the tables.
        # Faust waited for every event to be acked first (the save task saw the
        # rebalance and saved); whatever is still held now (a stop) had its state
        # dropped: it must never be acknowledged, it is redelivered.
        held = routine.forget()
        if held:
            log.warning("rebalance: %d events with unsaved state will be redelivered", held)
        ces.forget()

    app.on_partitions_revoked.connect(forget_state)
    _job_agent(app, settings, ch, routine)
    load_view = _load_sampler(app, settings, ch)
    _housekeeping(app, settings, store)
    if settings.ces_enabled:
        _ces_agents(app, settings, ch, handler, routine, ces, ces_partition)
    worker = Worker(app, handler.stats, engine, handler, states, sink, routine)
    app.timer(interval=60.0, name="report")(partial(_report, worker, load_view))
    return worker


async def _redeliver_dropped(app: faust.App, job_topic: str, routine: BatchRoutine[Any]) -> None:
    """Faust resumed flow and cleared its stream queues (the consumer holds the
    partitions the agents read meanwhile): deliver each assigned job-event partition
    again from where the routine must be delivered from
    (:meth:`BatchRoutine.redelivery_offset`), and each node-status and cluster-telemetry
    partition from the group's commit (what Faust's own seek skips: a partition never
    committed, a fetch queued after the seek; their commits then stalled behind the
    dropped offsets, or passed one)."""
    consumer: Any = app.consumer
    if running_thread(consumer) is None:
        return  # no consumer running yet: nothing was fetched
    others: frozenset[str] = getattr(app, "gpuhint_redelivered_topics", frozenset())
    # the job partitions first: the batch routine's are what hints wait on
    assigned = sorted(consumer.assignment(), key=lambda tp: (tp.topic != job_topic, tp))
    tps = [tp for tp in assigned if tp.topic in others | {job_topic}]
    for i, tp in enumerate(tps):
        if not await _redeliver_partition(app, consumer, tp, job_topic, routine):
            for rest in tps[i + 1 :]:  # a rebalance under way: its own seek follows
                consumer.release(rest)
            return


REDELIVERY_RETRY_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Pauses between tries to read where a held partition is delivered again from (the
broker slow to answer): a held partition delivers nothing meanwhile, never skips."""


async def _redeliver_partition(
    app: faust.App, consumer: Any, tp: Any, job_topic: str, routine: BatchRoutine[Any]
) -> bool:
    """Seek one held partition back (see :func:`_redeliver_dropped`); False when a
    rebalance or a stop took over (the partition is released: the rebalance seeks it).
    A failure to read the offset otherwise is retried, the partition held: releasing
    it without a seek would skip the events Faust dropped (their commit passed)."""
    tries = 0
    while True:
        try:
            if tp.topic == job_topic:
                offset = await routine.redelivery_offset(tp.partition)
            else:
                offset = await redelivery_start(app, tp)
            start = None if offset is None else await log_start(app, tp)
            if offset is not None and start is not None and start > offset:
                # retention deleted it: aiokafka resets the seek to the log's start, and
                # the fetch loop's mark would wait for an offset that never comes
                log.warning("%s: offsets %d..%d are gone from the log", tp, offset, start - 1)
                offset = start
            if offset is None:
                consumer.release(tp)
            elif await consumer.redeliver_from(tp, offset):
                routine.stats.flow_reseeks += 1
                log.info(
                    "%s: flow resumed (queued events dropped); delivered again from offset %d",
                    f"partition {tp.partition}" if tp.topic == job_topic else str(tp),
                    offset,
                )
            return True
        except Exception as exc:
            if app.rebalancing or app.should_stop or tp not in consumer.assignment():
                consumer.release(tp)
                log.warning("re-delivery after flow resumed not sought (%r)", exc)
                return False
            pause = REDELIVERY_RETRY_S[min(tries, len(REDELIVERY_RETRY_S) - 1)]
            tries += 1
            log.warning(
                "%s: where to deliver again from not read (%r); held, retrying in %.1f s",
                tp,
                exc,
                pause,
            )
            await asyncio.sleep(pause)


def _job_agent(
    app: faust.App, settings: Settings, ch: Channels, routine: BatchRoutine[Any]
) -> None:
    """The job-event agent (the batch routine) and its state-save task."""

    @app.agent(ch.job, concurrency=1, name="job-events")
    async def process_job_events(stream: Any) -> None:
        async for batch in take_ready(stream, settings.batch_max, settings.batch_within_s):
            await routine.run_batch(batch)

    tick_s = max(0.01, min(0.05, settings.state_save_interval_s / 20))

    @app.task
    async def save_state_on_cadence() -> None:
        """Save each VC's held state when due, and everything at once when a rebalance
        starts or the worker stops: Faust waits for every event to be acked before it
        revokes partitions or stops the consumer. (A task, not a timer: a timer ends
        when the app stops, before that wait.)"""
        while True:
            await asyncio.sleep(tick_s)
            # paced: a few VCs a tick, batches run between (no burst of encodes)
            await routine.tick(tick_s, urgent=app.rebalancing or app.should_stop)


def _load_sampler(app: faust.App, settings: Settings, ch: Channels) -> LoadView:
    """What the assignor reads should this worker lead a rebalance (the load of every
    job-event partition, sampled every second), and the probe that asks for one."""
    load_view = LoadView(job_topic=ch.job_topic)
    app.gpuhint_load = load_view  # type: ignore[attr-defined]
    if settings.worker_assign_by_load:
        probe = RebalanceProbe(
            min_gain=settings.worker_rebalance_min_gain,
            min_events=settings.worker_rebalance_min_events,
            cooldown_s=settings.worker_rebalance_cooldown_s,
        )
        sampler = LoadSampler(
            app,
            load_view,
            partitions=settings.partitions,
            probe=probe if settings.worker_rebalance_for_load else None,
        )
        app.timer(interval=1.0, name="sample_partition_load")(sampler.tick)
    return load_view


def _housekeeping(app: faust.App, settings: Settings, store: HintStore) -> None:
    """Heap freezing (short GC pauses) and the sweep of stale queue entries."""
    freezer = HeapFreezer(settings.gc_freeze_interval_s, settings.gc_full_interval_s)

    @app.task
    async def keep_gc_pauses_short() -> None:
        """Freeze the heap on a cadence (:mod:`gpuhint.cores.pipeline.gc_policy`): full collections
        then
        walk only what is new, instead of pausing the loop for the whole state."""
        if settings.gc_freeze_interval_s <= 0:
            return
        while True:
            freezer.tick()
            await asyncio.sleep(min(settings.gc_freeze_interval_s, 1.0))

    sweep = getattr(store, "sweep_stale", None)
    if sweep is not None:

        @app.timer(interval=300.0)
        async def sweep_stale_queue_entries() -> None:
            await asyncio.to_thread(sweep)


def _ces_agents(
    app: faust.App,
    settings: Settings,
    ch: Channels,
    handler: MessageHandler,
    routine: BatchRoutine[Any],
    ces: ClusterLoadProcessor,
    ces_partition: dict[str, int],
) -> None:
    """Node status re-keyed by cluster, and the cluster-load agent (CES). The agent
    flushes the shared store through the job-event routine, under its batch lock: a
    flush that rebuilds hints never walks a VC state while a batch changes it."""

    @app.agent(ch.node_status, concurrency=1, name="node-status")
    async def route_node_status(stream: Any) -> None:
        """Validate node status and re-key it by cluster for the CES agent.

        One event at a time (no batch): the order in which nodes' reports from
        several partitions interleave onto the cluster's topic is what the CES
        tracker's slot clock sees, so keep it close to arrival order."""
        async for event in stream.events():
            await ch.emit(handler.node_status(_message(event)))

    @app.agent(ch.telemetry, concurrency=1, name="cluster-load")
    async def process_cluster_load(stream: Any) -> None:
        async for batch in stream.take_events(settings.batch_max, within=settings.batch_within_s):
            for event in batch:
                msg = _message(event)
                if msg.key is not None:
                    ces_partition[msg.key.decode(errors="replace")] = msg.partition
                await ch.emit(handler.telemetry(msg))
            await routine.flush()
            ces.checkpoint_dirty()


async def _report(worker: Worker, load_view: LoadView) -> None:
    """The worker's one-minute summary line."""
    s, w, states = worker.engine.stats, worker.handler.stats, worker.states
    r = worker.routine.stats
    log.info(
        "events %d (dead-letter %d, redelivered %d, duplicates %d), hints written %d "
        "removed %d, learned %d, MAE(log) %s, state records %d (%d bytes) in %d saves, "
        "offset gaps sought back %d, partition deals by load %d, rebalances asked for "
        "load %d",
        w.processed,
        w.dead_letter,
        s.redelivered,
        s.duplicates,
        s.hints_written,
        s.hints_removed,
        s.learned,
        f"{s.mae_log:.3f}" if s.mae_log is not None else "n/a",
        states.saves,
        states.bytes_saved,
        worker.routine.cadence.saves,
        r.gaps,
        load_view.deals,
        load_view.probes,
    )
