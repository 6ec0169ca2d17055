"""A running ``gpuhint worker`` (real Kafka + Redis, subprocess) is scraped over HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer

from gpuhint.lab.local.metrics_docs import undocumented
from gpuhint.lab.local.prometheus import LocalPrometheus
from gpuhint.lab.local.scrape import get, samples, total, value, wait_ready
from gpuhint.lab.local.services import ServiceError, free_port
from gpuhint.lab.traces.readers import job_events, parse_time, read_trace
from gpuhint.metrics.applier import ApplierMetrics
from gpuhint.metrics.dashboard import PANELS, VARIABLES, expand
from gpuhint.redis.client import HintClient
from gpuhint.wire.contract import JobEvent, JobPhase, NodeStatus, encode_message
from gpuhint.wire.topics import Topics, job_key, node_key
from streams.kafka_io import ensure_topics

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "philly_excerpt.json"
CUT = "2017-10-08 00:00:00"
CLUSTER = "philly"
SLOT_S = 2


@pytest.fixture
def worker(gpuhint_env, tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:  # type: ignore[no-untyped-def]
    port = free_port()
    env = gpuhint_env(
        GPUHINT_CLUSTER=CLUSTER,
        GPUHINT_CES_SLOT_S=str(SLOT_S),
        GPUHINT_CES_POLICY="series",  # one cluster advisory per slot (checked below)
        GPUHINT_METRICS_PORT=str(port),
        GPUHINT_METRICS_HOST="127.0.0.1",
    )
    log = tmp_path / "worker.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuhint", "worker"], env=env, stdout=fh, stderr=fh
        )
    try:
        yield f"http://127.0.0.1:{port}", env, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait(check, timeout: float, what: str, log: Path):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            ok, last = check()
        except OSError as exc:  # a scrape cut short on a loaded machine: try again
            ok, last = False, f"{type(exc).__name__}: {exc}"
        if ok:
            return last
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-4000:]
    pytest.fail(f"timed out waiting for {what}; last: {last}\nworker log:\n{tail}")


@pytest.fixture
def agent_port(tmp_path: Path) -> Iterator[int]:
    """A fake-NVML agent (dry run) serving DCGM metrics, for the dashboard's GPU panels."""
    port = free_port()
    env = dict(os.environ, GPUHINT_METRICS_HOST="127.0.0.1")
    args = ["agent", "--nvml", "fake", "--node", "gpu-1", "--interval", "0.5", "--dry-run"]
    with open(tmp_path / "agent.log", "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuhint", *args, "--metrics-port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=fh,
        )  # fmt: skip
    yield port
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


# panels no process of this test feeds: no applier runs
NO_DATA_HERE: set[str] = set()


@contextlib.contextmanager
def _applier_metrics() -> Iterator[str]:
    """The appliers' metrics as an applier process serves them, after one pass (no
    applier runs here: their scheduler is not part of this test)."""
    m = ApplierMetrics("slurm")
    m.action("set_site_factor", 3)
    m.refusal("held")
    m.fallback(
        fresh=True, age_s=12.0, redis_up=True, unhinted=1, faded=0, neutral=500, neutral_set=1
    )
    m.error("scheduler")
    m.pass_done(seconds=0.2, pending=4, changed=3)
    srv = m.serve("127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{srv.port}"
    finally:
        srv.stop()


@contextlib.contextmanager
def _ces_jobs_metrics() -> Iterator[str]:
    """The job-aware CES's metrics as a worker with ``GPUHINT_CES_POLICY=jobs`` serves them
    (this test's worker runs the series policy, for its advisory-per-slot check)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.registry import Collector

    from gpuhint.cores.ces_jobs import JobsCesConfig, JobsCesEngine
    from gpuhint.metrics.server import MetricsServer
    from gpuhint.metrics.worker import _ces_jobs
    from models.power_jobs import JobAwareConfig

    eng = JobsCesEngine(None, JobsCesConfig(JobAwareConfig(warmup_s=0)))
    for node in ("a", "b"):
        eng.on_message(NodeStatus(cluster=CLUSTER, node=node, time=0, num_gpus=8))
    eng.flush(CLUSTER)  # no demand: both off, one decision

    class Engine(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            return _ces_jobs(eng)

    registry = CollectorRegistry()
    registry.register(Engine())
    srv = MetricsServer(registry, host="127.0.0.1", port=0).start()
    try:
        yield f"127.0.0.1:{srv.port}"
    finally:
        srv.stop()


def test_scrape_a_running_worker(
    kafka_bootstrap: str,
    redis_url: str,
    unique_prefix: str,
    worker: tuple[str, dict[str, str], Path],
    agent_port: int,
) -> None:
    base, env, log = worker
    topics = Topics(unique_prefix)
    ensure_topics(kafka_bootstrap, topics, partitions=4)
    body = wait_ready(base, 180, log)
    assert "consuming" in body
    worker_target = base.removeprefix("http://")
    with contextlib.ExitStack() as stack:
        applier_target = stack.enter_context(_applier_metrics())
        ces_target = stack.enter_context(_ces_jobs_metrics())
        try:
            prometheus = LocalPrometheus(
                [worker_target, f"127.0.0.1:{agent_port}", applier_target, ces_target]
            ).start()
        except ServiceError as exc:
            pytest.fail(f"Prometheus could not be started: {exc}", pytrace=False)
        stack.callback(prometheus.stop)
        _check_worker(kafka_bootstrap, redis_url, unique_prefix, base, env, log, prometheus)


def _check_worker(
    kafka_bootstrap: str,
    redis_url: str,
    unique_prefix: str,
    base: str,
    env: dict[str, str],
    log: Path,
    prometheus: LocalPrometheus | None,
) -> None:
    topics = Topics(unique_prefix)

    # what the trace says the worker must count
    cut = parse_time(CUT)
    events = [ev for ev in job_events(read_trace(TRACE).jobs, cluster=CLUSTER) if ev.time <= cut]
    by_phase = {p.value: sum(1 for e in events if e.phase is p) for p in JobPhase}
    rep = subprocess.run(
        [sys.executable, "-m", "gpuhint", "replay", str(TRACE), "--until", CUT, "--max",
         "--no-progress"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr[-3000:]

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    good = JobEvent(phase="submitted", job_id="x", cluster=CLUSTER, vc="v", time=0, submit_time=0)
    wrong_version = dict(json.loads(encode_message(good)), schema_version=99)
    key = job_key(CLUSTER, "v")
    for k, v in [
        (key, b"\xffnot json"),
        (key, json.dumps(wrong_version).encode()),
        (b"wrong/key", encode_message(good)),
    ]:
        producer.send(topics.job_events, key=k, value=v)
    # three nodes' status over several CES slots: one busy, two idle -> power advice
    for t in range(0, 8 * SLOT_S):
        for node, busy in (("n1", 8), ("n2", 0), ("n3", 0)):
            st = NodeStatus(cluster="farm", node=node, time=1e9 + t, num_gpus=8, busy_gpus=busy)
            producer.send(topics.node_status, key=node_key("farm", node), value=encode_message(st))
    producer.flush(30)
    extra_slot = [8]

    def close_another_slot() -> None:
        """Node status is keyed by node, so partitions interleave in any order: a slot can
        close before a late partition's node is known. Once all of it is in, one more round
        in a later slot closes a slot that sees every node (as live agents keep doing)."""
        extra_slot[0] += 1
        for node, busy in (("n1", 8), ("n2", 0), ("n3", 0)):
            t = 1e9 + extra_slot[0] * SLOT_S
            st = NodeStatus(cluster="farm", node=node, time=t, num_gpus=8, busy_gpus=busy)
            producer.send(topics.node_status, key=node_key("farm", node), value=encode_message(st))
        producer.flush(30)

    def caught_up() -> tuple[bool, object]:
        got = samples(get(f"{base}/metrics")[1])
        done = sum(
            value(got, "gpuhint_job_events_total", phase=p)
            for p in ("submitted", "started", "finished")
        )
        lag = total(got, "gpuhint_kafka_consumer_lag", topic=topics.job_events)
        # a partition's lag is exported once its high watermark and committed offset
        # are known (after a fetch and a commit): wait for all four
        lag_parts = sum(
            1
            for name, lab in got
            if name == "gpuhint_kafka_consumer_lag" and dict(lab)["topic"] == topics.job_events
        )
        dead = total(got, "gpuhint_dead_letters_total")
        adv = total(got, "gpuhint_advisories_total")
        nodes = total(got, "gpuhint_cluster_nodes", cluster="farm", state="total")  # from Redis
        state = (done, dead, lag, adv, nodes)
        rest = done == len(events) and dead == 3 and lag == 0 and lag_parts == 4 and adv > 0
        if rest and nodes != 3 and extra_slot[0] < 30:
            close_another_slot()
        return rest and nodes == 3, state

    _wait(caught_up, 180, "every event counted, lag 0, advisories", log)
    producer.close()
    got = samples(get(f"{base}/metrics")[1])

    for phase, n in by_phase.items():
        assert value(got, "gpuhint_job_events_total", phase=phase) == n
    assert value(got, "gpuhint_hints_written_total") == by_phase["submitted"]
    assert value(got, "gpuhint_dead_letters_total", reason="not_json") == 1
    assert value(got, "gpuhint_dead_letters_total", reason="schema_version") == 1
    assert value(got, "gpuhint_dead_letters_total", reason="wrong_key") == 1
    lags = [k for k in got if k[0] == "gpuhint_kafka_consumer_lag"]
    assert {dict(lab)["topic"] for _, lab in lags} >= {topics.job_events}
    assert len([1 for _, lab in lags if dict(lab)["topic"] == topics.job_events]) == 4
    # each at least once; one Faust dropped from its queue when flow resumed (at the
    # first assignment) is fetched, and counted, again
    got_in = value(got, "gpuhint_kafka_messages_in_total", topic=topics.job_events)
    assert len(events) + 3 <= got_in <= 2 * (len(events) + 3)
    assert value(got, "gpuhint_prediction_abs_log_error_count") > 0
    assert value(got, "gpuhint_prediction_abs_log_error_sum") > 0
    assert value(got, "gpuhint_redis_errors_total") == 0
    assert value(got, "gpuhint_events_redelivered_total") == 0  # one clean run: none seen twice
    assert value(got, "gpuhint_events_duplicate_total") == 0
    assert value(got, "gpuhint_jobs_retired_total") == 0  # every end was announced
    assert value(got, "gpuhint_rosters_total") == 0  # a replay: no agent, no roster
    assert value(got, "gpuhint_offset_gaps_total") == 0  # contiguous offsets: nothing sought
    assert value(got, "gpuhint_partitions_sought_after_flow_resumed_total") >= 0
    assert value(got, "gpuhint_events_delivered_again_total") >= 0
    rebuilds = value(got, "gpuhint_redis_rebuilds_total")
    assert rebuilds <= 1  # at most the first start's marker
    # each submit's hint once; a first-start rebuild re-writes (counted apart) what the
    # first flush had just written
    assert value(got, "gpuhint_redis_writes_total", op="hint") == by_phase["submitted"]
    if rebuilds == 0:
        assert value(got, "gpuhint_redis_writes_total", op="hint_rebuild") == 0
    assert value(got, "gpuhint_worker_ready") == 1
    # one worker: never a leader with a second member to deal to
    assert value(got, "gpuhint_partition_deals_by_load_total") == 0
    assert value(got, "gpuhint_rebalances_for_load_total") == 0
    assert value(got, "gpuhint_redis_up") == 1
    # queue lengths come from Redis: the same as what a scheduler reads
    client = HintClient.from_url(redis_url, key_prefix=unique_prefix)
    for vc in client.vcs(CLUSTER):
        want = len(client.queue(CLUSTER, vc))
        assert value(got, "gpuhint_queue_length", cluster=CLUSTER, vc=vc) == want
    assert total(got, "gpuhint_queue_length", cluster=CLUSTER) > 10
    # CES: 2 of 3 nodes idle; advice and nodes by state from the latest load
    assert value(got, "gpuhint_cluster_nodes", cluster="farm", state="total") == 3
    assert value(got, "gpuhint_cluster_nodes", cluster="farm", state="used") == 1
    assert value(got, "gpuhint_ces_slots_total") > 0
    assert total(got, "gpuhint_advisories_total", scope="cluster") == value(
        got, "gpuhint_ces_slots_total"
    )
    names = {n for n, _ in got}
    assert "process_cpu_seconds_total" in names
    assert not undocumented(names), "add them to docs/metrics.md"

    # the Grafana dashboard's own queries, evaluated by a real Prometheus that scraped
    # this worker and a fake-NVML agent: every one parses, every panel that has data shows it
    assert prometheus is not None
    empty: dict[str, list[str]] = {}

    def panels_with_data() -> tuple[bool, object]:
        empty.clear()
        for panel in PANELS:
            exprs = [expand(q.promql()) for q in panel.queries]
            if not any(prometheus.query(e) for e in exprs):
                empty.setdefault(panel.title, exprs)
        return set(empty) <= NO_DATA_HERE, dict(empty)

    _wait(panels_with_data, 60, "data in every dashboard panel", log)
    # the cluster and VC variables list what the metrics carry
    for var, want in (("cluster", CLUSTER), ("vc", None)):
        v = next(x for x in VARIABLES if x.name == var)
        got_values = {r["metric"].get(v.label) for r in prometheus.query(expand(v.selector))}
        assert (want in got_values) if want else len(got_values - {None}) > 1, (var, got_values)
    # a hint was written moments ago: its age is small and not negative
    (age,) = prometheus.query(
        f'time() - max(gpuhint_newest_hint_timestamp_seconds{{cluster="{CLUSTER}"}})'
    )
    assert 0 <= float(age["value"][1]) < 3600
