"""The Faust worker: job events in, QSSF hints out, bad messages to the dead-letter topic.

The worker is a thin edge around :class:`gpuhint.core.HintEngine` (the same core the
embedded demo runs). Per-key state lives in changelog-backed Faust tables, which are
co-partitioned with the job-event topic (events are keyed by cluster/VC):

* ``duration-stats``: the history estimator's per-(VC, user, GPUs) statistics;
* ``pending-predictions``: each pending job's predicted duration, to score it at finish.

Delivery: the Redis store buffers writes; they are flushed every ``batch_within_s``
seconds, whenever ``batch_max`` writes are waiting, and always *before Faust commits
offsets* (a sensor on ``on_commit_initiated``), so an acknowledged event's writes are
in Redis before its offset is. Writes are idempotent, so a redelivery after a crash
rewrites the same state.

Agent concurrency is 1: with more, faust-streaming can commit past an in-flight
message and lose it on restart (faust-streaming issue #606).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
import mode
from faust.exceptions import PartitionsMismatch
from faust.sensors import Sensor

from gpuhint.ces_core import CesEngine, ClusterLoadTracker
from gpuhint.config import Settings
from gpuhint.contract import (
    InvalidMessage,
    JobEvent,
    JobPhase,
    NodeStatus,
    decode_job_event,
    decode_message,
)
from gpuhint.core import HintEngine
from gpuhint.kafka_io import faust_credentials
from gpuhint.store import HintStore
from gpuhint.topics import cluster_key, job_key
from models import checkpoint
from models.base import DurationModel
from models.history import HistoryEstimator
from models.power_policy import PowerPolicyConfig
from models.registry import make_model
from streams.cluster_load import ClusterLoadProcessor
from streams.dead_letter import dead_letter_record

log = logging.getLogger(__name__)


class FlushOnCommit(Sensor):
    """Flushes the store right before Faust commits consumer offsets."""

    def __init__(self, store: HintStore, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.store = store

    def on_commit_initiated(self, consumer: Any) -> Any:
        self.store.flush()
        return None


@dataclass
class WorkerStats:
    processed: int = 0
    dead_letter: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class ModelCheckpointer:
    """Saves a model's state to a versioned checkpoint file and restores it at start.

    Used for models whose state is not in Faust tables (every model but ``history``).
    Saving happens on the event loop, between events, so the model is never pickled
    while it is being updated.
    """

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path

    def load_or_new(self) -> DurationModel:
        if self.path.exists():
            try:
                model = checkpoint.load(self.path, expect_model=self.name)
                log.info("restored model %s from %s", self.name, self.path)
                return model
            except checkpoint.CheckpointError as exc:
                bad = self.path.with_suffix(self.path.suffix + ".rejected")
                self.path.replace(bad)
                log.warning("%s; moved it to %s and starting the model afresh", exc, bad)
        return make_model(self.name)

    def save(self, model: DurationModel) -> None:
        checkpoint.save(model, self.path)
        log.info("checkpointed model %s to %s", self.name, self.path)


def _dead_letter_acked(fut: Any) -> None:
    exc = None if fut.cancelled() else fut.exception()
    if fut.cancelled() or exc is not None:
        log.critical(
            "dead-letter record not acknowledged (%s); exiting before its offset is committed",
            "cancelled" if exc is None else f"{type(exc).__name__}: {exc}",
        )
        os._exit(70)


def faust_broker_url(bootstrap: str) -> str:
    """``h1:9092,h2:9092`` -> ``kafka://h1:9092;kafka://h2:9092`` (Faust's broker form)."""
    hosts = [h.strip() for h in bootstrap.split(",") if h.strip()]
    return ";".join(h if "://" in h else f"kafka://{h}" for h in hosts)


@dataclass
class Worker:
    app: faust.App
    stats: WorkerStats
    engine: HintEngine
    checkpointer: ModelCheckpointer | None

    def save_checkpoint(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.save(self.engine.model)


def build_app(settings: Settings, store: HintStore, model: DurationModel | None = None) -> Worker:
    """Build the Faust app.

    ``model=None`` uses ``settings.model``: ``history`` keeps its state in a Faust table;
    any other model is restored from and saved to ``state_dir/model-<name>.ckpt``.
    """
    app = faust.App(
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
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        # An agent that raises stops the worker (a supervisor restarts it from the last
        # committed offset) instead of Faust restarting that agent past the failed event.
        agent_supervisor=mode.CrashingSupervisor,
    )
    topics = settings.topics
    limits = settings.limits

    def raw_topic(name: str) -> Any:
        """Bytes in, bytes out: decoding is ours, so a bad message reaches our handler."""
        return app.topic(
            name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )

    job_topic = raw_topic(topics.job_events)
    dead_letter = raw_topic(topics.dead_letter)

    def table(name: str, value_serializer: str = "json") -> Any:
        """A changelog-backed table co-partitioned with gpuhint's topics."""
        return app.Table(
            name,
            default=None,
            partitions=settings.partitions,
            schema=faust.Schema(key_serializer="json", value_serializer=value_serializer),
        )

    stats_table = table("duration-stats")
    pending_table = table("pending-predictions")

    node_topic = raw_topic(topics.node_status)
    telemetry = raw_topic(topics.cluster_telemetry)
    ces_table = table("ces-state", value_serializer="raw")
    ces = ClusterLoadProcessor(
        ClusterLoadTracker(
            slot_s=settings.ces_slot_s,
            stale_after_s=min(settings.ces_stale_after_s, settings.ces_slot_s),
        ),
        CesEngine(
            store,
            PowerPolicyConfig(
                slot_s=settings.ces_slot_s, watts_per_node=settings.ces_watts_per_node
            ),
        ),
        checkpoints=ces_table,
    )
    checkpointer: ModelCheckpointer | None = None

    def forget_cluster_state(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        ces.forget()  # a rebalance: re-read each cluster's newest checkpoint from the table

    app.on_partitions_revoked.connect(forget_cluster_state)

    if model is None:
        if settings.model == "history":
            model = HistoryEstimator(state=stats_table)
        else:
            checkpointer = ModelCheckpointer(
                settings.model, settings.state_dir / f"model-{settings.model}.ckpt"
            )
            model = checkpointer.load_or_new()
    engine = HintEngine(model, store, predictions=pending_table)
    stats = WorkerStats()
    app.sensors.add(FlushOnCommit(store))

    async def flush() -> None:
        try:
            await asyncio.to_thread(store.flush)
        except Exception as exc:  # writes stay buffered; the next flush retries them
            log.warning(
                "store flush failed (%s: %s); %d writes kept for retry",
                type(exc).__name__,
                exc,
                getattr(store, "pending", -1),
            )

    async def to_dead_letter(event: Any, reason: str) -> None:
        msg = event.message
        record = dead_letter_record(
            reason=reason,
            topic=msg.topic,
            partition=msg.partition,
            offset=msg.offset,
            key=event.key,
            value=event.value,
            max_bytes=settings.dead_letter_max_bytes,
        )
        # Faust flushes its producer before it commits offsets; a record the broker
        # refuses stops the worker there, so its offset is never committed (redelivered).
        fut = await dead_letter.send(key=event.key, value=record)
        fut.add_done_callback(_dead_letter_acked)
        store.count("dead_letter")
        stats.dead_letter += 1
        short = reason.split(":")[0]
        stats.reasons[short] = stats.reasons.get(short, 0) + 1
        log.warning("dead-lettered %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, reason)

    @app.agent(job_topic, concurrency=1, name="job-events")
    async def process_job_events(stream: Any) -> None:
        async for event in stream.events():
            try:
                if not event.value:
                    raise InvalidMessage("empty message")
                ev = decode_job_event(event.value, limits)
                want = job_key(ev.cluster, ev.vc)
                if event.key != want:
                    raise InvalidMessage(
                        f"key {event.key!r} is not the event's cluster/vc {want!r} "
                        "(per-VC state must stay on one partition)"
                    )
            except InvalidMessage as exc:
                await to_dead_letter(event, exc.reason)
                continue
            try:
                engine.on_job_event(ev)
            except PartitionsMismatch:
                raise  # misconfiguration: stop loudly rather than dead-letter every event
            except Exception as exc:  # a bug must not lose the event nor stop the worker
                log.exception("processing failed for job %s", ev.job_id)
                await to_dead_letter(event, f"processing error: {type(exc).__name__}: {exc}")
                continue
            stats.processed += 1
            if settings.ces_enabled and ev.nodes and ev.phase is not JobPhase.SUBMITTED:
                await telemetry.send(key=cluster_key(ev.cluster), value=event.value)
            if getattr(store, "pending", 0) >= settings.batch_max:
                await flush()

    if settings.ces_enabled:

        @app.agent(node_topic, concurrency=1, name="node-status")
        async def route_node_status(stream: Any) -> None:
            """Validate node status and re-key it by cluster for the CES agent."""
            async for event in stream.events():
                try:
                    if not event.value:
                        raise InvalidMessage("empty message")
                    msg = decode_message(event.value, limits)
                    if not isinstance(msg, NodeStatus):
                        raise InvalidMessage(f"expected kind 'node_status', got {msg.kind!r}")
                except InvalidMessage as exc:
                    await to_dead_letter(event, exc.reason)
                    continue
                await telemetry.send(key=cluster_key(msg.cluster), value=event.value)

        @app.agent(telemetry, concurrency=1, name="cluster-load")
        async def process_cluster_load(stream: Any) -> None:
            async for event in stream.events():
                try:
                    msg = decode_message(event.value)
                    if not isinstance(msg, NodeStatus | JobEvent):
                        raise InvalidMessage(f"unexpected kind {msg.kind!r}")
                    ces.on_message(msg)
                except PartitionsMismatch:
                    raise
                except Exception as exc:
                    log.exception("cluster-load processing failed")
                    await to_dead_letter(event, f"processing error: {type(exc).__name__}: {exc}")

    @app.timer(interval=settings.batch_within_s)
    async def periodic_flush() -> None:
        await flush()

    @app.timer(interval=60.0)
    async def report() -> None:
        s = engine.stats
        log.info(
            "events %d (dead-letter %d), hints written %d removed %d, learned %d, MAE(log) %s",
            stats.processed,
            stats.dead_letter,
            s.hints_written,
            s.hints_removed,
            s.learned,
            f"{s.mae_log:.3f}" if s.mae_log is not None else "n/a",
        )

    sweep = getattr(store, "sweep_stale", None)
    if sweep is not None:

        @app.timer(interval=300.0)
        async def sweep_stale_queue_entries() -> None:
            await asyncio.to_thread(sweep)

    if checkpointer is not None:
        ckpt = checkpointer

        @app.timer(interval=settings.checkpoint_interval_s)
        async def checkpoint_model() -> None:
            ckpt.save(engine.model)

    app.gpuhint_ces = ces  # type: ignore[attr-defined]
    return Worker(app, stats, engine, checkpointer)
