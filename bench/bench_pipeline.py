"""Replay -> Kafka -> Faust worker -> Redis: end-to-end hint latency and throughput.

Starts (or finds, via GPUHINT_TEST_KAFKA_BOOTSTRAP / GPUHINT_TEST_REDIS_URL) a real
Kafka broker and Redis server, runs one real ``gpuhint worker`` process, then:

1. **latency**: produces ``submitted`` job events at a fixed offered rate (``--rate``
   events/s for ``--seconds``) and measures, per job, the time from just before the
   producer's ``send`` to the hint's entry in the Redis change stream (the entry id is
   Redis's own millisecond clock, on this same host). Reports p50 / p90 / p99 / max.
2. **throughput**: produces ``--burst`` events as fast as possible and measures the
   time until the last hint is visible (events/s through the whole pipeline).

    python bench/bench_pipeline.py [--rate 200] [--seconds 20] [--burst 20000]
"""

from __future__ import annotations

import argparse
import contextlib
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
from datetime import date
from pathlib import Path

import redis
from kafka import KafkaProducer

from gpuhint.config import load_settings
from gpuhint.contract import JobEvent, encode_message
from gpuhint.kafka_io import ensure_topics, kafka_client_config
from gpuhint.keys import RedisKeys
from gpuhint.testing.services import kafka_service, redis_service
from gpuhint.topics import Topics, job_key

CLUSTER = "bench"
VCS = [f"vc{i}" for i in range(8)]


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
                        ms = int(last.split("-")[0])
                        self.seen.setdefault(fields[b"job_id"].decode(), ms / 1000.0)


def event(i: int, tag: str) -> JobEvent:
    return JobEvent(
        phase="submitted",
        job_id=f"{tag}-{i}",
        cluster=CLUSTER,
        vc=VCS[i % len(VCS)],
        user=f"u{i % 50}",
        num_gpus=2 ** (i % 4),
        time=time.time(),
        submit_time=time.time(),
    )


def wait_for(watcher: HintWatcher, ids: list[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(j in watcher.seen for j in ids):
            return True
        time.sleep(0.05)
    return False


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=1000, method="inclusive")[int(q * 1000) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rate", type=float, default=200.0, help="offered events/s")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--burst", type=int, default=20_000)
    ap.add_argument("--model", default="history_mix")
    args = ap.parse_args()

    with kafka_service() as (bootstrap, how_k), redis_service() as (url, how_r):
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        topics, keys = Topics(prefix), RedisKeys(prefix)
        security = kafka_client_config(load_settings())  # GPUHINT_KAFKA_SECURITY_* etc.
        ensure_topics(bootstrap, topics, partitions=4, security=security)
        tmp = Path(tempfile.mkdtemp(prefix="gpuhint-bench-"))
        env = dict(
            os.environ,
            GPUHINT_KAFKA_BOOTSTRAP=bootstrap,
            GPUHINT_REDIS_URL=url,
            GPUHINT_TOPIC_PREFIX=prefix,
            GPUHINT_KEY_PREFIX=prefix,
            GPUHINT_APP_ID=f"{prefix}-worker",
            GPUHINT_PARTITIONS="4",
            GPUHINT_STATE_DIR=str(tmp / "state"),
            GPUHINT_MODEL=args.model,
        )
        log = open(tmp / "worker.log", "wb")  # noqa: SIM115
        worker = subprocess.Popen(
            [sys.executable, "-m", "gpuhint", "worker"], env=env, stdout=log, stderr=log
        )
        watcher = HintWatcher(url, keys)
        watcher.start()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, **security)

        def send(ev: JobEvent) -> float:
            t = time.time()
            producer.send(
                topics.job_events, key=job_key(ev.cluster, ev.vc), value=encode_message(ev)
            )
            return t

        try:
            warm = [event(i, "warm") for i in range(200)]
            for ev in warm:
                send(ev)
            producer.flush()
            if not wait_for(watcher, [e.job_id for e in warm], 120):
                print("worker did not come up; log:", (tmp / "worker.log").read_text()[-3000:])
                return 1

            # 1. latency at a fixed offered rate
            n = int(args.rate * args.seconds)
            sent: dict[str, float] = {}
            t0 = time.monotonic()
            for i in range(n):
                due = t0 + i / args.rate
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                ev = event(i, "lat")
                sent[ev.job_id] = send(ev)
                if i % 50 == 0:
                    producer.flush()
            producer.flush()
            achieved = n / (time.monotonic() - t0)
            ok = wait_for(watcher, list(sent), 120)
            lat = [watcher.seen[j] - t for j, t in sent.items() if j in watcher.seen]

            # 2. throughput: a burst as fast as possible
            burst = [event(i, "burst") for i in range(args.burst)]
            tb = time.time()
            for ev in burst:
                send(ev)
            producer.flush()
            ok_b = wait_for(watcher, [e.job_id for e in burst], 600)
            last = max(watcher.seen.get(e.job_id, float("nan")) for e in burst)
            thr = args.burst / (last - tb) if ok_b else float("nan")
        finally:
            watcher.stop.set()
            producer.close()
            worker.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(30)
            log.close()

    print(
        f"pipeline benchmark, {platform.machine()} {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {date.today()}; kafka: {how_k}; redis: {how_r}; "
        f"model {args.model}"
    )
    print(
        f"latency: offered {args.rate:.0f} ev/s for {args.seconds:.0f} s "
        f"(achieved {achieved:.0f} ev/s), {len(lat)}/{n} hints seen{'' if ok else ' (TIMEOUT)'}"
    )
    ms = [x * 1000 for x in lat]
    print(
        f"  p50 {pct(ms, 0.5):.1f} ms  p90 {pct(ms, 0.9):.1f} ms  p99 {pct(ms, 0.99):.1f} ms  "
        f"max {max(ms):.1f} ms"
    )
    print(
        f"throughput: {args.burst:,} events produced at full speed -> last hint after "
        f"{args.burst / thr if thr == thr else float('nan'):.1f} s: {thr:,.0f} events/s end to end"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
