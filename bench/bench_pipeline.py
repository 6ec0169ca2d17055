"""Replay -> Kafka -> Faust worker -> Redis: hint latency vs a raw round trip, throughput.

Starts (or finds, via GPUHINT_TEST_KAFKA_BOOTSTRAP / GPUHINT_TEST_REDIS_URL) a real
Kafka broker and Redis server, then:

1. **raw round trip**: a kafka-python producer -> consumer on a plain topic at the
   offered rate (``--rate`` msgs/s for ``--seconds``): the floor any Kafka pipeline pays.
2. **hint latency**: one real ``gpuhint worker``; ``submitted`` events at the same rate,
   time from just before ``send`` to the hint's entry in the Redis change stream (the
   entry id is Redis's millisecond clock, on this host).
3. **throughput**: ``--lifecycles`` full job lifecycles (submitted, started, finished;
   jobs over ``--vcs`` VCs) are produced as a backlog, then 1 (and then, on a fresh
   topic set, 2) workers drain it; the clock runs from the first hint to the hint of a
   marker job sent last on every VC (per-partition order: all before it is done).

    python bench/bench_pipeline.py [--rate 200] [--seconds 15] [--lifecycles 10000]
                                    [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
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

import redis
from kafka import KafkaConsumer, KafkaProducer

from gpuhint.config import load_settings
from gpuhint.contract import JobEvent, encode_message
from gpuhint.kafka_io import ensure_topics, kafka_client_config
from gpuhint.keys import RedisKeys
from gpuhint.testing.services import kafka_service, redis_service
from gpuhint.topics import Topics, job_key

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
        self.first: float | None = None
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
                        if self.first is None:
                            self.first = t
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


def wait_for(watcher: HintWatcher, ids: list[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(j in watcher.seen for j in ids):
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


def raw_roundtrip(bootstrap: str, prefix: str, rate: float, seconds: float) -> list[float]:
    """Producer -> consumer latencies (ms) on a plain topic at the offered rate."""
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"{prefix}.raw"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **security())
    admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])
    admin.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"{prefix}-raw",
        auto_offset_reset="latest",
        **security(),
    )
    consumer.subscribe([topic])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, **security())
    producer.send(topic, b"warm").get(30)
    while not consumer.assignment():
        consumer.poll(200)
    got: dict[int, float] = {}
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            for recs in consumer.poll(100).values():
                now = time.time()
                for rec in recs:
                    if rec.value != b"warm":
                        got[int(rec.value)] = now

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    n = int(rate * seconds)
    sent: dict[int, float] = {}
    for i in paced(n, rate):
        sent[i] = time.time()
        producer.send(topic, key=str(i % 8).encode(), value=str(i).encode())
        if i % 50 == 0:
            producer.flush()
    producer.flush()
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    th.join(5)
    producer.close()
    consumer.close()
    return [(got[i] - sent[i]) * 1000 for i in sent if i in got]


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


def throughput(
    bootstrap: str, url: str, model: str, tmp: Path, n_workers: int, lifecycles: int, vcs: int
) -> float:
    env, topics, keys = setup(bootstrap, url, model, tmp)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=1 << 18, **security()
    )
    t = time.time()
    evs = [e for i in range(lifecycles) for e in lifecycle(i, "thr", vcs, t)]
    markers = [
        JobEvent(
            phase="submitted",
            job_id=f"mark-{v}",
            cluster=CLUSTER,
            vc=f"vc{v}",
            time=t + 5,
            submit_time=t + 5,
        )
        for v in range(vcs)
    ]
    send_all(producer, topics, [*evs, *markers])
    producer.close()
    watcher = HintWatcher(url, keys)
    watcher.start()
    ws = [Worker(env, tmp / f"{topics.prefix}-w{k}.log") for k in range(n_workers)]
    try:
        ok = wait_for(watcher, [m.job_id for m in markers], 900)
    finally:
        watcher.stop.set()
        for w in ws:
            w.stop()
    if not ok or watcher.first is None:
        return float("nan")
    last = max(watcher.seen[m.job_id] for m in markers)
    return (len(evs) + len(markers)) / (last - watcher.first)


def hint_latency(
    bootstrap: str,
    url: str,
    model: str,
    tmp: Path,
    rate: float,
    seconds: float,
    settle_s: float = 3.0,
) -> list[float]:
    env, topics, keys = setup(bootstrap, url, model, tmp)
    watcher = HintWatcher(url, keys)
    watcher.start()
    w = Worker(env, tmp / f"{topics.prefix}.log")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, **security())
    try:
        t = time.time()
        warm = [lifecycle(i, "warm", 8, t)[0] for i in range(200)]
        send_all(producer, topics, warm)
        if not wait_for(watcher, [e.job_id for e in warm], 120):
            raise SystemExit("worker did not come up")
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
            if i % 50 == 0:
                producer.flush()
        producer.flush()
        wait_for(watcher, list(sent), 120)
        return [(watcher.seen[j] - s) * 1000 for j, s in sent.items() if j in watcher.seen]
    finally:
        watcher.stop.set()
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
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="gpuhint-bench-"))
    with kafka_service() as (bootstrap, how_k), redis_service() as (url, how_r):
        raw = raw_roundtrip(bootstrap, f"raw{uuid.uuid4().hex[:6]}", args.rate, args.seconds)
        lat = hint_latency(bootstrap, url, args.model, tmp, args.rate, args.seconds, args.settle)
        ones: list[float] = []
        twos: list[float] = []
        for _ in range(args.runs):  # alternated, so that a load change hits both alike
            ones.append(throughput(bootstrap, url, args.model, tmp, 1, args.lifecycles, args.vcs))
            twos.append(throughput(bootstrap, url, args.model, tmp, 2, args.lifecycles, args.vcs))
        one, two = statistics.median(ones), statistics.median(twos)
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
        "lifecycles": args.lifecycles,
        "vcs": args.vcs,
        "events_per_s_1_worker": one,
        "events_per_s_2_workers": two,
        "runs": args.runs,
        "events_per_s_1_worker_runs": ones,
        "events_per_s_2_workers_runs": twos,
        "load_average": list(os.getloadavg()),
        "speedup_2_workers": two / one if one == one and one > 0 else None,
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
