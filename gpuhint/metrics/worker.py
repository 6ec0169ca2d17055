"""The worker's metrics, read at scrape time from the objects that already count.

Sources (nothing on the event path is changed): the hint engine's ``EngineStats``, the
worker's ``WorkerStats`` (dead letters by reason), the CES engine's ``CesStats``, the
:class:`~gpuhint.metrics.store.MeteredRedisStore` counters, and Faust's own monitor and
consumer (messages in by topic, send errors, committed offsets, high watermarks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from gpuhint.metrics.reasons import REASON_CLASSES, reason_class
from gpuhint.metrics.server import MetricsServer
from gpuhint.metrics.state import RedisStateCollector
from gpuhint.metrics.store import MeteredRedisStore
from gpuhint.redis.client import HintClient

log = logging.getLogger(__name__)


class KafkaErrorLog(logging.Handler):
    """Counts ERROR records of the Kafka client's loggers (``aiokafka``, ``kafka``)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1

    def attach(self) -> KafkaErrorLog:
        for name in ("aiokafka", "kafka"):
            logging.getLogger(name).addHandler(self)
        return self


def _ces_jobs(jobs: Any) -> Iterator[Metric]:
    """The job-aware CES engine's decisions and, per cluster it holds, its node states."""
    st = jobs.stats
    yield _counter(
        "gpuhint_ces_jobs_decisions",
        "Job-aware CES decisions that changed a node's power state.",
        st.decisions,
    )
    n = CounterMetricFamily(
        "gpuhint_ces_jobs_nodes_changed",
        "Nodes the job-aware CES decided to power down or wake.",
        labels=["action"],
    )
    n.add_metric(["power_down"], float(st.nodes_powered_down))
    n.add_metric(["wake"], float(st.nodes_woken))
    yield n
    g = GaugeMetricFamily(
        "gpuhint_ces_jobs_nodes",
        "Nodes of each cluster this worker holds, by power state as the job-aware CES "
        "sees it (off, booting, on).",
        labels=["cluster", "state"],
    )
    w = GaugeMetricFamily(
        "gpuhint_ces_jobs_waiting",
        "Jobs waiting in the job-aware CES queue of each cluster this worker holds.",
        labels=["cluster"],
    )
    for cluster, c in sorted(list(jobs.clusters.items())):  # a copy: the worker mutates it
        for state, count in c.node_counts().items():
            g.add_metric([cluster, state], float(count))
        w.add_metric([cluster], float(len(c.queue)))
    yield g
    yield w


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class WorkerCollector(Collector):
    """Every worker metric of docs/metrics.md; ``worker`` is what ``build_app`` returned."""

    def __init__(
        self, worker: Any, store: MeteredRedisStore, kafka_errors: KafkaErrorLog | None = None
    ) -> None:
        self.worker = worker
        self.store = store
        self.kafka_errors = kafka_errors

    def collect(self) -> Iterator[Metric]:
        yield from self._engine()
        yield from self._dead_letters()
        yield from self._ces()
        yield from self._store()
        yield from self._kafka()

    def _engine(self) -> Iterator[Metric]:
        s = self.worker.engine.stats
        ev = CounterMetricFamily(
            "gpuhint_job_events",
            "Job events applied by the hint engine, by phase.",
            labels=["phase"],
        )
        for phase in ("submitted", "started", "finished"):
            ev.add_metric([phase], float(getattr(s, phase)))
        yield ev
        yield _counter("gpuhint_hints_written", "Priority hints written (new).", s.hints_written)
        yield _counter(
            "gpuhint_hints_removed",
            "Hint removals (one per started or finished job; idempotent in Redis).",
            s.hints_removed,
        )
        yield _counter(
            "gpuhint_model_learned", "Finished jobs the duration model learned from.", s.learned
        )
        yield _counter(
            "gpuhint_events_redelivered",
            "Job events seen again (offset already applied): no state change, writes re-emitted.",
            s.redelivered,
        )
        yield _counter(
            "gpuhint_rosters",
            "Job roster parts applied (a scheduler agent's unfinished jobs of one VC): "
            "flat while agents run means rosters are off or not arriving.",
            s.rosters,
        )
        yield _counter(
            "gpuhint_jobs_retired",
            "Jobs retired as finished (UNKNOWN): two scheduler-agent rosters in a row left "
            "them out (their end was never announced).",
            s.retired,
        )
        yield _counter(
            "gpuhint_roster_agent_switchbacks",
            "Job rosters whose scheduler agent took a VC back from another agent: two agents "
            "publish under one cluster name (their rosters retire no job there).",
            s.roster_switchbacks,
        )
        yield _counter(
            "gpuhint_events_duplicate",
            "Resent job events (a phase their job already went through): not re-applied.",
            s.duplicates,
        )
        r = self.worker.routine.stats
        yield _counter(
            "gpuhint_offset_gaps",
            "Skipped job-event offsets found (delivered past an offset never handled): "
            "the partition was sought back to it.",
            r.gaps,
        )
        yield _counter(
            "gpuhint_events_discarded_while_seeking",
            "Job events dropped while their partition was sought back past a gap "
            "(they come again).",
            r.discarded,
        )
        yield _counter(
            "gpuhint_events_delivered_again",
            "Job events delivered again within one assignment (after a seek back): skipped.",
            r.seen,
        )
        yield _counter(
            "gpuhint_partitions_sought_after_flow_resumed",
            "Job-event partitions delivered again from the worker's next offset because "
            "Faust cleared its queues when flow resumed (each rebalance, the start).",
            r.flow_reseeks,
        )
        err = SummaryMetricFamily(
            "gpuhint_prediction_abs_log_error",
            "|log(predicted duration) - log(actual)| of each scored finished job; "
            "rate(_sum)/rate(_count) is the recent mean error.",
            count_value=s.scored,
            sum_value=s.abs_log_error_sum,
        )
        yield err

    def _dead_letters(self) -> Iterator[Metric]:
        ws = self.worker.stats
        dl = CounterMetricFamily(
            "gpuhint_dead_letters",
            "Messages sent to the dead-letter topic, by reason class.",
            labels=["reason"],
        )
        by_class: dict[str, int] = dict.fromkeys(REASON_CLASSES, 0)  # all, from 0: rate() works
        for reason, n in dict(ws.reasons).items():
            cls = reason_class(reason)
            by_class[cls] = by_class.get(cls, 0) + n
        for cls, n in sorted(by_class.items()):
            dl.add_metric([cls], float(n))
        yield dl
        yield _counter(
            "gpuhint_events_processed", "Job events processed without error.", ws.processed
        )

    def _ces(self) -> Iterator[Metric]:
        ces = getattr(self.worker.app, "gpuhint_ces", None)
        engine = getattr(ces, "engine", None)
        if engine is None:
            return
        s = engine.stats
        yield _counter(
            "gpuhint_ces_slots", "CES slots decided (one per cluster per slot).", s.slots
        )
        yield _counter(
            "gpuhint_ces_shortfall_slots",
            "Slots in which more nodes were used than powered on.",
            s.shortfall_slots,
        )
        ch = CounterMetricFamily(
            "gpuhint_ces_power_changes",
            "Slots whose decision changed the powered-on count, by action.",
            labels=["action"],
        )
        ch.add_metric(["power_down"], float(s.power_downs))
        ch.add_metric(["wake"], float(s.wakes))
        yield ch
        jobs = getattr(ces, "jobs", None)
        if jobs is not None:
            yield from _ces_jobs(jobs)

    def _store(self) -> Iterator[Metric]:
        st = self.store
        with st.lock:
            writes = dict(st.writes)
            advisories = dict(st.advisories)
            energy = dict(st.energy_saved_kwh)
            batches, errors, failing = st.batches, st.redis_errors, st.failing_since
        w = CounterMetricFamily(
            "gpuhint_redis_writes", "Write operations applied to Redis, by kind.", labels=["op"]
        )
        ops = "hint hint_rebuild hint_update hint_remove advice load starts counter rebuilt"
        for op in ops.split():
            w.add_metric([op], float(writes.get(op, 0)))
        yield w
        yield _counter(
            "gpuhint_hints_updated",
            "Re-rankings of waiting jobs written to Redis (hint_updated; a no-op for a job "
            "that started meanwhile).",
            writes.get("hint_update", 0),
        )
        a = CounterMetricFamily(
            "gpuhint_advisories",
            "Power advisories written, by action and scope (cluster summary or one node).",
            labels=["action", "scope"],
        )
        for action in ("power_down", "keep", "wake"):  # every series from 0: rate() works
            for scope in ("cluster", "node"):
                a.add_metric([action, scope], float(advisories.get((action, scope), 0)))
        yield a
        e = CounterMetricFamily(
            "gpuhint_ces_energy_saved_kwh",
            "Estimated energy saved by powered-off nodes: nodes off x GPUHINT_CES_WATTS_PER_NODE "
            "x slot, summed over the cluster loads written.",
            labels=["cluster"],
        )
        for cluster, kwh in sorted(energy.items()):
            e.add_metric([cluster], kwh)
        yield e
        yield _counter("gpuhint_redis_flushes", "Batches written to Redis.", batches)
        sink = getattr(self.worker, "sink", None)
        if sink is not None:
            yield _counter(
                "gpuhint_redis_rebuilds",
                "Times Redis came back empty and the pending hints were re-written from state.",
                sink.rebuilds,
            )
        yield _counter("gpuhint_redis_errors", "Batches that failed with a Redis error.", errors)
        yield GaugeMetricFamily(
            "gpuhint_redis_pending_writes", "Writes buffered, not yet in Redis.", value=st.pending
        )
        yield GaugeMetricFamily(
            "gpuhint_redis_failing_seconds",
            "How long Redis writes have been failing (0 when the last one worked).",
            value=0.0 if failing is None else time.time() - failing,
        )

    def _kafka(self) -> Iterator[Metric]:
        app = self.worker.app
        monitor = getattr(app, "_monitor", None)
        if monitor is not None:
            m = CounterMetricFamily(
                "gpuhint_kafka_messages_in",
                "Messages read from Kafka, by topic.",
                labels=["topic"],
            )
            for topic, n in sorted(dict(monitor.messages_received_by_topic).items()):
                m.add_metric([topic], float(n))
            yield m
        errors = CounterMetricFamily(
            "gpuhint_kafka_errors",
            "Kafka errors: failed sends (Faust) and errors logged by the Kafka client.",
            labels=["op"],
        )
        errors.add_metric(["send"], float(getattr(monitor, "send_errors", 0)))
        if self.kafka_errors is not None:
            errors.add_metric(["client"], float(self.kafka_errors.count))
        yield errors
        lag = GaugeMetricFamily(
            "gpuhint_kafka_consumer_lag",
            "Messages behind an input partition's end: high watermark - committed offset.",
            labels=["topic", "partition"],
        )
        assigned = GaugeMetricFamily(
            "gpuhint_kafka_assigned_partitions", "Partitions assigned to this worker."
        )
        for tp, value in sorted(consumer_lag(app).items()):
            lag.add_metric([tp[0], str(tp[1])], float(value))
        assigned.add_metric([], float(len(_assignment(app))))
        yield lag
        yield assigned
        view = getattr(app, "gpuhint_load", None)  # streams.faust_assignor.LoadView
        yield _counter(
            "gpuhint_partition_deals_by_load",
            "Assignments this worker handed out by load, as the group leader.",
            float(getattr(view, "deals", 0)),
        )
        yield _counter(
            "gpuhint_rebalances_for_load",
            "Rebalances this worker asked the group for, for load alone, as the leader.",
            float(getattr(view, "probes", 0)),
        )
        ok, _ = worker_health(self.worker, self.store)
        yield GaugeMetricFamily(
            "gpuhint_worker_ready", "1 when /healthz says ready (consuming).", value=float(ok)
        )


def _assignment(app: Any) -> set[Any]:
    consumer = getattr(app, "_consumer", None)
    if consumer is None:
        return set()
    try:
        return set(consumer.assignment())
    except Exception:  # not started yet, or stopping
        return set()


def consumer_lag(app: Any) -> dict[tuple[str, int], int]:
    """Lag of each assigned input partition whose high watermark and position are known.

    Faust's table changelogs and its assignor topic are left out.
    """
    consumer = getattr(app, "_consumer", None)
    monitor = getattr(app, "_monitor", None)
    out: dict[tuple[str, int], int] = {}
    if consumer is None:
        return out
    committed_by_monitor = dict(getattr(monitor, "tp_committed_offsets", None) or {})
    committed_by_consumer = dict(getattr(consumer, "_committed_offset", None) or {})
    for tp in _assignment(app):
        if tp.topic.endswith("-changelog") or "__assignor" in tp.topic:
            continue  # Faust's own topics: input topics only
        try:
            hw = consumer.highwater(tp)
        except Exception:
            hw = None
        if hw is None:
            continue
        pos = committed_by_monitor.get(tp)
        if pos is None:
            pos = committed_by_consumer.get(tp)
        if pos is None:
            pos = 0 if hw == 0 else None
        if pos is None:
            continue
        out[(tp.topic, tp.partition)] = max(0, int(hw) - int(pos))
    return out


def worker_health(worker: Any, store: MeteredRedisStore) -> tuple[bool, str]:
    """Ready when the Kafka consumer runs with partitions assigned and Redis takes writes."""
    app = worker.app
    if getattr(app, "_consumer", None) is None:
        return False, "starting: no Kafka consumer yet"
    if getattr(app, "rebalancing", False):
        return False, "rebalancing"
    if getattr(app, "in_recovery", False):
        return False, "recovering tables from their changelogs"
    tps = _assignment(app)
    if not tps:
        return False, "no partitions assigned"
    failing = store.failing_since
    if failing is not None:
        return False, f"Redis writes failing for {time.time() - failing:.0f} s: {store.last_error}"
    return True, f"consuming {len(tps)} partition(s)"


def start_worker_metrics(
    worker: Any, store: MeteredRedisStore, key_prefix: str, host: str, port: int
) -> MetricsServer:
    """Serve the worker's ``/metrics`` and ``/healthz`` on ``host:port`` (raises OSError)."""
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker, store, KafkaErrorLog().attach()))
    registry.register(RedisStateCollector(HintClient(store.r, key_prefix=key_prefix)))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return MetricsServer(
        registry, health=lambda: worker_health(worker, store), host=host, port=port
    ).start()
