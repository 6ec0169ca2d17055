"""Replay -> Kafka -> Faust worker -> Redis: hint latency vs a raw round trip, throughput.

Starts (or finds, via GPUHINT_TEST_KAFKA_BOOTSTRAP / GPUHINT_TEST_REDIS_URL) a real
Kafka broker and Redis server, then:

1. **raw round trip**: a kafka-python producer -> consumer on a plain topic at the
   offered rate (``--rate`` msgs/s for ``--seconds``): the floor any Kafka pipeline pays.
2. **hint latency**: one real ``gpuhint worker``; ``submitted`` events at the same rate,
   time from just before ``send`` to the hint's entry in the Redis change stream (the
   entry id is Redis's millisecond clock, on this host).
   A second raw producer -> consumer round trip runs *concurrently*, one raw message
   beside each submitted event, so both see the same machine (``raw_concurrent_*``).
3. **throughput**: 1 (and then, on a fresh topic set, 2) workers start and join their
   consumer group; once the group is stable with every worker assigned, ``--lifecycles``
   full job lifecycles (submitted, started, finished; jobs over ``--vcs`` VCs) are
   produced as a backlog in a few record batches (~0.05 s), and the workers drain it;
   the clock runs from the first backlog hint to the hint of a marker job sent last on
   every VC (per-partition order: all before it is done). The group's assignment gives
   each run's bound: events / the busiest worker's events (``speedup_bound_*``; VCs
   hash unevenly over partitions, so two workers cannot always split the work in half).
   ``--join during``: one worker starts draining the backlog and the second joins then
   (a worker added to a group that lags: the drain includes its start-up and the
   rebalance; the final deal is reported, no bound). ``--join backlog``: the whole
   backlog waits in Kafka, then every worker starts at once (a group that forms over a
   backlog, as after a full restart; the deal is read at the end).
   The broker's ``group.initial.rebalance.delay.ms`` decides whether workers started
   together form the group in one round (Kafka's default, 3 s) or one after the other
   (0, the test suite's broker: the second joins a group the first already formed and
   Faust keeps the first one's partitions). A broker this benchmark starts itself uses
   ``--broker-group-delay-ms`` (default 3000); the JSON reports the value the broker has.
   Each drain also reports the cores each process used while it ran (every worker, the
   local Kafka broker and Redis found by the port they listen on, this harness) and the
   whole machine (``cpu_*``, ``machine_busy_cores_*``), and how fast each worker drained
   its own share (``members_2_workers_runs``, by the assignment at the start), so a
   run says whether placement or the machine's cores bound it
   (``speedup_bound_cpu_2_workers``: the cores / the cores one worker's drain kept busy).

    python bench/bench_pipeline.py [--rate 200] [--seconds 15] [--lifecycles 10000]
                                    [--runs 3] [--join before|during|backlog]
                                    [--broker-group-delay-ms 3000] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redis
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from gpuhint.cores.pipeline.partitioning import partition_for
from gpuhint.lab.local.cpu_meter import CpuMeter, listening_pid, usable_cores
from gpuhint.lab.local.kafka_tools import broker_config, produce_batches
from gpuhint.lab.local.kafka_tools import group_assignment as _group_assignment
from gpuhint.lab.local.services import kafka_service, redis_service
from gpuhint.wire.config import load_settings
from gpuhint.wire.contract import JobEvent, encode_message
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics, job_key
from streams.kafka_io import aiokafka_client_config, ensure_topics, kafka_client_config

CLUSTER = "bench"


def security() -> dict[str, object]:
    """Kafka client TLS/SASL options from GPUHINT_KAFKA_SECURITY_* (empty: plaintext)."""
    return kafka_client_config(load_settings())


class HintWatcher(threading.Thread):
    """Follows the change stream and records when each job's hint appeared."""

    def __init__(self, url: str, keys: RedisKeys) -> None:
        super().__init__(daemon=True)
        self.r = redis.Redis.from_url(url)
        self.keys = keys
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        last = "0-0"
        while not self.stop.is_set():
            resp = self.r.xread({self.keys.changes: last}, count=5000, block=200)
            for _, entries in resp or []:
                for eid, fields in entries:
                    last = eid.decode()
                    if fields.get(b"type") == b"hint":
                        t = int(last.split("-")[0]) / 1000.0
                        self.seen.setdefault(fields[b"job_id"].decode(), t)


def lifecycle(i: int, tag: str, vcs: int, t: float) -> list[JobEvent]:
    base = dict(
        job_id=f"{tag}-{i}",
        cluster=CLUSTER,
        vc=f"vc{i % vcs}",
        user=f"u{i % 97}",
        num_gpus=2 ** (i % 4),
        submit_time=t,
    )
    dur = 60.0 + (i * 37) % 3600
    return [
        JobEvent(phase="submitted", time=t, **base),  # type: ignore[arg-type]
        JobEvent(phase="started", time=t + 1, **base),  # type: ignore[arg-type]
        JobEvent(phase="finished", time=t + 1 + dur, duration_s=dur, **base),  # type: ignore[arg-type]
    ]


def wait_for(watcher: HintWatcher, ids: list[str] | None, timeout: float) -> bool:
    """Wait until every job of ``ids`` has a hint (None: any job)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(j in watcher.seen for j in ids) if ids is not None else watcher.seen:
            return True
        time.sleep(0.02)
    return False


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=1000, method="inclusive")[int(q * 1000) - 1]


def paced(n: int, rate: float) -> Iterator[int]:
    t0 = time.monotonic()
    for i in range(n):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield i


def consume_raw(
    bootstrap: str, topic: str, group: str, ready: Any, stop: Any, expected: Any, out: Any
) -> None:
    """The raw probe's consumer, in a process of its own (no GIL shared with the
    benchmark's producer and watcher threads): sends back ``{i: received at}`` once it
    has ``expected`` messages (-1: not known yet) or ``stop`` is set."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **security()
    )
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.poll(200)
    ready.set()
    got: dict[int, float] = {}
    while not stop.is_set() and not 0 <= expected.value <= len(got):
        for recs in consumer.poll(100).values():
            now = time.time()
            for rec in recs:
                if rec.value != b"warm":
                    got[int(rec.value)] = now
    consumer.close()
    out.send(got)


class RawProbe:
    """A plain topic and a kafka-python consumer (own process): producer -> consumer
    latency of the messages :meth:`send` puts on it, the floor any Kafka pipeline pays."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        self.topic = f"{prefix}.raw"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **security())
        admin.create_topics([NewTopic(self.topic, num_partitions=4, replication_factor=1)])
        admin.close()
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.stop = ctx.Event(), ctx.Event()
        self.expected = ctx.Value("q", -1)
        self.results, child_end = ctx.Pipe(duplex=False)
        self.process = ctx.Process(
            target=consume_raw,
            args=(
                bootstrap,
                self.topic,
                f"{prefix}-raw",
                self.ready,
                self.stop,
                self.expected,
                child_end,
            ),
            daemon=True,
        )
        self.sent: dict[int, float] = {}

    def start(self, producer: KafkaProducer) -> None:
        self.process.start()
        if not self.ready.wait(60):
            raise SystemExit("the raw probe's consumer did not get its partitions")
        producer.send(self.topic, b"warm").get(30)

    def send(self, producer: KafkaProducer, i: int) -> None:
        self.sent[i] = time.time()
        producer.send(self.topic, key=str(i % 8).encode(), value=str(i).encode())

    def latencies(self, timeout_s: float = 60) -> list[float]:
        """Latencies (ms) of every sent message, waiting up to ``timeout_s`` for them all
        (a message that never came is left out: compare the count with :attr:`sent`)."""
        self.expected.value = len(self.sent)
        if not self.results.poll(timeout_s):
            self.stop.set()
        got: dict[int, float] = self.results.recv() if self.results.poll(30) else {}
        self.process.join(10)
        return [(got[i] - s) * 1000 for i, s in self.sent.items() if i in got]

    def close(self) -> None:
        self.stop.set()
        if self.process.is_alive():
            self.process.join(10)


def raw_roundtrip(bootstrap: str, prefix: str, rate: float, seconds: float) -> list[float]:
    """Producer -> consumer latencies (ms) on a plain topic at the offered rate."""
    probe = RawProbe(bootstrap, prefix)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, **security())
    probe.start(producer)
    for i in paced(int(rate * seconds), rate):
        probe.send(producer, i)
        if i % 50 == 0:
            producer.flush()
    producer.flush()
    producer.close()
    return probe.latencies()


class Worker:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.fh = open(log, "ab")  # noqa: SIM115
        self.p = subprocess.Popen(
            [sys.executable, "-m", "gpuhint", "worker"], env=env, stdout=self.fh, stderr=self.fh
        )

    def stop(self) -> None:
        self.p.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.p.wait(30)
        self.fh.close()


def setup(
    bootstrap: str, url: str, model: str, tmp: Path
) -> tuple[dict[str, str], Topics, RedisKeys]:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    topics, keys = Topics(prefix), RedisKeys(prefix)
    ensure_topics(bootstrap, topics, partitions=8, security=security())
    env = dict(
        os.environ,
        GPUHINT_KAFKA_BOOTSTRAP=bootstrap,
        GPUHINT_REDIS_URL=url,
        GPUHINT_TOPIC_PREFIX=prefix,
        GPUHINT_KEY_PREFIX=prefix,
        GPUHINT_APP_ID=f"{prefix}-worker",
        GPUHINT_PARTITIONS="8",
        GPUHINT_STATE_DIR=str(tmp / prefix),
        GPUHINT_MODEL=model,
        GPUHINT_CES_ENABLED="false",
    )
    return env, topics, keys


def send_all(producer: KafkaProducer, topics: Topics, evs: list[JobEvent]) -> None:
    for ev in evs:
        producer.send(topics.job_events, key=job_key(ev.cluster, ev.vc), value=encode_message(ev))
    producer.flush()


def send_batched(bootstrap: str, topic: str, partitions: int, evs: list[JobEvent]) -> None:
    """Produce ``evs`` in a few large record batches, per-partition order kept."""
    by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
    for ev in evs:
        key = job_key(ev.cluster, ev.vc)
        by_partition.setdefault(partition_for(key, partitions), []).append(
            (key, encode_message(ev))
        )
    produce_batches(bootstrap, topic, by_partition, **aiokafka_client_config(load_settings()))


def group_assignment(bootstrap: str, group: str, topic: str) -> list[list[int]] | None:
    """Each member's partitions of ``topic`` while the group is stable, else None."""
    return _group_assignment(bootstrap, group, topic, **security())


def wait_for_group(bootstrap: str, group: str, topic: str, members: int) -> list[list[int]]:
    """Wait until ``members`` workers hold all of ``topic``'s partitions between them."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            got = group_assignment(bootstrap, group, topic)
        except KafkaError:  # a broker just started has no group coordinator yet
            got = None
        if got is not None and len(got) == members and all(got):
            return got
        time.sleep(0.2)
    raise SystemExit(f"{members} worker(s) did not join group {group} within 120 s")


def service_pids(bootstrap: str, url: str) -> dict[str, list[int]]:
    """The local broker's and Redis's pids, by the port they listen on (none when they
    run elsewhere or this user cannot see them: their CPU is then not reported)."""
    found: dict[str, list[int]] = {}
    for name, port in (
        ("kafka", int(bootstrap.split(",")[0].rsplit(":", 1)[1])),
        ("redis", urlparse(url).port or 6379),
    ):
        pid = listening_pid(port)
        found[name] = [pid] if pid is not None else []
    return found


def throughput(
    bootstrap: str,
    url: str,
    model: str,
    tmp: Path,
    n_workers: int,
    lifecycles: int,
    vcs: int,
    join: str = "before",
    services: dict[str, list[int]] | None = None,
) -> dict[str, object]:
    """One drain by ``n_workers``: events/s, the group's assignment and its bound, and
    the cores each process (``services``: name -> pids, the workers, this harness) and the
    whole machine used while it ran.

    ``join="before"``: every worker joins before the backlog is produced. ``"during"``:
    one worker drains the backlog and the others join as soon as it is produced (adding
    workers to a group that lags), so the drain includes their rebalance."""
    env, topics, keys = setup(bootstrap, url, model, tmp)
    partitions = int(env["GPUHINT_PARTITIONS"])
    services = {**(services or {}), "harness": [os.getpid()]}
    t = time.time()
    # one waiting job per VC first: every worker has joined, recovered and is handling
    warm = [lifecycle(v, "warm", vcs, t)[0] for v in range(vcs)]
    evs = [e for i in range(lifecycles) for e in lifecycle(i, "thr", vcs, t)]
    markers = [
        JobEvent(
            phase="submitted",  # type: ignore[arg-type]
            job_id=f"mark-{v}",
            cluster=CLUSTER,
            vc=f"vc{v}",
            time=t + 5,
            submit_time=t + 5,
        )
        for v in range(vcs)
    ]
    watcher = HintWatcher(url, keys)
    watcher.start()
    group = env["GPUHINT_APP_ID"]
    ws: list[Worker] = []

    def meter() -> CpuMeter:
        return CpuMeter(lambda: {**services, **{f"worker{k}": [w.p.pid] for k, w in enumerate(ws)}})

    try:
        if join == "backlog":  # all of it waits in Kafka; then every worker starts at once
            send_batched(bootstrap, topics.job_events, partitions, [*warm, *evs, *markers])
            ws += [Worker(env, tmp / f"{topics.prefix}-w{k}.log") for k in range(n_workers)]
            if not wait_for(watcher, None, 120):
                raise SystemExit("the workers did not come up")
            cpu_meter = meter()  # from the first hint, as the drain's clock
            ok = wait_for(watcher, [m.job_id for m in markers], 900)
        else:
            first = n_workers if join == "before" else 1
            ws += [Worker(env, tmp / f"{topics.prefix}-w{k}.log") for k in range(first)]
            assignment = wait_for_group(bootstrap, group, topics.job_events, first)
            send_batched(bootstrap, topics.job_events, partitions, warm)
            if not wait_for(watcher, [e.job_id for e in warm], 120):
                raise SystemExit("the workers did not come up")
            cpu_meter = meter()
            send_batched(bootstrap, topics.job_events, partitions, [*evs, *markers])
            ws += [Worker(env, tmp / f"{topics.prefix}-w{k}.log") for k in range(first, n_workers)]
            ok = wait_for(watcher, [m.job_id for m in markers], 900)
        cpu = cpu_meter.stop()
        cpu["workers_cores"] = sum(v for k, v in cpu.items() if k.startswith("worker"))
        final = group_assignment(bootstrap, group, topics.job_events)
        if join == "backlog":  # the deal is known only once the group has formed
            assignment = final or []
    finally:
        watcher.stop.set()
        for w in ws:
            w.stop()
    thr = [t for j, t in watcher.seen.items() if j.startswith("thr-")]
    rate = float("nan")
    if ok and thr:
        last = max(watcher.seen[m.job_id] for m in markers)
        rate = (len(evs) + len(markers)) / (last - min(thr))
    if join == "during":  # the lone worker drained part of the backlog first: no bound
        return {
            "events_per_s": rate,
            "assignment": final,
            "speedup_bound": None,
            "rebalanced": None,
            "cpu": cpu,
        }
    per_partition = [0] * partitions
    for ev in [*evs, *markers]:
        per_partition[partition_for(job_key(ev.cluster, ev.vc), partitions)] += 1
    busiest = max((sum(per_partition[p] for p in member) for member in assignment), default=0)
    start = min(thr) if thr else float("nan")
    # how fast each worker drained its own share: only for a drain that completed under
    # the deal it started with (after a rebalance the shares are not these)
    # (a backlog drain's deal is read at its end: whether it changed on the way is unknown)
    kept = ok and final == assignment and join == "before"
    members: list[dict[str, object]] | None = [] if kept else None
    for member in assignment if members is not None else []:
        mine = [m for m in markers if partition_for(job_key(m.cluster, m.vc), partitions) in member]
        done = max((watcher.seen[m.job_id] for m in mine), default=start)
        n = sum(per_partition[p] for p in member)
        members.append(
            {
                "partitions": member,
                "events": n,
                "drain_s": done - start,
                "events_per_s": n / (done - start) if done > start else None,
            }
        )
    return {
        "events_per_s": rate,
        "assignment": assignment,
        "speedup_bound": (len(evs) + len(markers)) / busiest if busiest else None,
        "rebalanced": final != assignment if join == "before" else None,
        "members": members,
        "cpu": cpu,
    }


def hint_latency(
    bootstrap: str,
    url: str,
    model: str,
    tmp: Path,
    rate: float,
    seconds: float,
    settle_s: float = 3.0,
) -> tuple[list[float], list[float]]:
    """Submit -> hint latencies (ms) through one worker, and beside them the raw round
    trip of one plain message sent with each submitted event (same producer, same
    moment, same machine load)."""
    env, topics, keys = setup(bootstrap, url, model, tmp)
    watcher = HintWatcher(url, keys)
    watcher.start()
    w = Worker(env, tmp / f"{topics.prefix}.log")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, **security())
    probe = RawProbe(bootstrap, topics.prefix)
    try:
        t = time.time()
        warm = [lifecycle(i, "warm", 8, t)[0] for i in range(200)]
        send_all(producer, topics, warm)
        if not wait_for(watcher, [e.job_id for e in warm], 120):
            raise SystemExit("worker did not come up")
        probe.start(producer)
        # steady state: the worker's first state saves (its first changelog records:
        # ~0.1 s of fetch stalls on a fresh broker) fall before the measured window
        time.sleep(settle_s)
        n = int(rate * seconds)
        sent: dict[str, float] = {}
        for i in paced(n, rate):
            ev = lifecycle(i, "lat", 8, time.time())[0]
            sent[ev.job_id] = time.time()
            producer.send(
                topics.job_events, key=job_key(ev.cluster, ev.vc), value=encode_message(ev)
            )
            probe.send(producer, i)
            if i % 50 == 0:
                producer.flush()
        producer.flush()
        wait_for(watcher, list(sent), 120)
        raw = probe.latencies()
        return [(watcher.seen[j] - s) * 1000 for j, s in sent.items() if j in watcher.seen], raw
    finally:
        watcher.stop.set()
        probe.close()
        producer.close()
        w.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rate", type=float, default=200.0, help="offered events/s for latency")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds between the latency run's warm-up hints and its measured window "
        "(the worker's first state saves fall in it; 0: measure them too)",
    )
    ap.add_argument("--lifecycles", type=int, default=10_000, help="jobs in the backlog")
    ap.add_argument("--vcs", type=int, default=16)
    ap.add_argument("--model", default="history_mix")
    ap.add_argument(
        "--runs", type=int, default=1, help="throughput runs per worker count (median kept)"
    )
    ap.add_argument(
        "--join",
        choices=["before", "during", "backlog"],
        default="before",
        help="before: every worker joins before the backlog is produced; during: one "
        "worker starts draining it and the second joins then (a group that lags gets "
        "a worker; the drain includes that rebalance); backlog: the backlog is produced "
        "first, then every worker starts at once (the clock starts at the first hint)",
    )
    ap.add_argument(
        "--broker-group-delay-ms",
        type=int,
        default=3000,
        metavar="MS",
        help="group.initial.rebalance.delay.ms of a broker this benchmark starts itself "
        "(default: Kafka's own, 3000, with which workers started together join the "
        "group's first round; the test suite's broker uses 0). A broker given by "
        "GPUHINT_TEST_KAFKA_BOOTSTRAP keeps its own: the JSON reports the value read "
        "from the broker",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="gpuhint-bench-"))
    with (
        kafka_service(args.broker_group_delay_ms) as (bootstrap, how_k),
        redis_service() as (url, how_r),
    ):
        group_delay = broker_config(bootstrap, "group.initial.rebalance.delay.ms", **security())
        raw = raw_roundtrip(bootstrap, f"raw{uuid.uuid4().hex[:6]}", args.rate, args.seconds)
        lat, raw_beside = hint_latency(
            bootstrap, url, args.model, tmp, args.rate, args.seconds, args.settle
        )
        services = service_pids(bootstrap, url)
        ones: list[dict[str, object]] = []
        twos: list[dict[str, object]] = []
        for _ in range(args.runs):  # alternated, so that a load change hits both alike
            for n, runs in ((1, ones), (2, twos)):
                runs.append(
                    throughput(
                        bootstrap,
                        url,
                        args.model,
                        tmp,
                        n,
                        args.lifecycles,
                        args.vcs,
                        args.join,
                        services,
                    )
                )
    one_runs = [float(r["events_per_s"]) for r in ones]  # type: ignore[arg-type]
    two_runs = [float(r["events_per_s"]) for r in twos]  # type: ignore[arg-type]
    one, two = statistics.median(one_runs), statistics.median(two_runs)
    bounds = [float(r["speedup_bound"]) for r in twos if r["speedup_bound"] is not None]  # type: ignore[arg-type]
    cpu_ones = [r["cpu"] for r in ones]
    cpu_twos = [r["cpu"] for r in twos]
    busy_one = statistics.median(float(c["machine_busy_cores"]) for c in cpu_ones)  # type: ignore[index]
    busy_two = statistics.median(float(c["machine_busy_cores"]) for c in cpu_twos)  # type: ignore[index]
    out = {
        "command": " ".join(["python", "bench/bench_pipeline.py", *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kafka": how_k,
        "redis": how_r,
        "model": args.model,
        "offered_rate_per_s": args.rate,
        "latency_settle_s": args.settle,
        "raw_roundtrip_p50_ms": pct(raw, 0.5),
        "raw_roundtrip_p99_ms": pct(raw, 0.99),
        "hint_p50_ms": pct(lat, 0.5),
        "hint_p99_ms": pct(lat, 0.99),
        "hints_seen": len(lat),
        "raw_seen": len(raw),
        "raw_concurrent_seen": len(raw_beside),
        "raw_concurrent_p50_ms": pct(raw_beside, 0.5),
        "raw_concurrent_p99_ms": pct(raw_beside, 0.99),
        "hint_p99_over_raw": pct(lat, 0.99) / pct(raw, 0.99),
        "hint_p99_over_raw_concurrent": pct(lat, 0.99) / pct(raw_beside, 0.99),
        "lifecycles": args.lifecycles,
        "vcs": args.vcs,
        "join": args.join,
        "kafka_group_initial_rebalance_delay_ms": (
            int(group_delay) if group_delay is not None else None
        ),
        "events_per_s_1_worker": one,
        "events_per_s_2_workers": two,
        "runs": args.runs,
        "events_per_s_1_worker_runs": one_runs,
        "events_per_s_2_workers_runs": two_runs,
        "load_average": list(os.getloadavg()),
        "speedup_2_workers": two / one if one == one and one > 0 else None,
        "speedup_bound_2_workers": statistics.median(bounds) if bounds else None,
        "speedup_bound_2_workers_runs": bounds,
        "assignments_2_workers_runs": [r["assignment"] for r in twos],
        "members_2_workers_runs": [r.get("members") for r in twos],
        "rebalanced_during_drain": sum(r["rebalanced"] is True for r in [*ones, *twos]),
        "machine_busy_cores_1_worker": busy_one,
        "machine_busy_cores_2_workers": busy_two,
        # every process's CPU per event as with one worker: the machine's cores cap the
        # rate at cores / busy cores times the one-worker rate
        "speedup_bound_cpu_2_workers": usable_cores() / busy_one if busy_one > 0 else None,
        "cpu_1_worker_runs": cpu_ones,
        "cpu_2_workers_runs": cpu_twos,
    }
    print_result(out, args.json)
    return 0


def print_result(out: dict[str, object], as_json: bool) -> None:
    """One JSON object (``--json``), else a ``key value`` line each."""
    if as_json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k:24} {v:,.1f}" if isinstance(v, float) else f"{k:24} {v}")


if __name__ == "__main__":
    sys.exit(main())
