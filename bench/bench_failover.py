"""Failover: time until hints flow again after a worker dies (real Kafka, Redis, workers).

A feeder submits a new job to each of ``--vcs`` VCs every ``--interval`` seconds (JSON
job events on the real broker, keyed ``cluster/vc``, spread over the partitions). Real
``gpuhint worker`` processes turn them into hints in Redis. Scenarios:

* ``cold``: one worker started on an empty group: start-up to the first hint (Ready);
* ``restart``: one worker, SIGKILLed, a new one started at once (a supervisor restart);
* ``survivor``: two workers, one SIGKILLed: the survivor takes its partitions over once
  the group session times out (``GPUHINT_WORKER_SESSION_TIMEOUT_S``);
* ``sigterm``: two workers, one stopped with SIGTERM (it leaves the group at once).

For the kill scenarios the figure is the **gap**: from the kill until every VC has a hint
for a job submitted after the kill (``all_vcs_s``), and the median over VCs. Jobs only
ever submit (they wait), so every hint stays until the end.

    python bench/bench_failover.py --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from kafka import KafkaProducer

from gpuhint.lab.local.services import stop_processes
from gpuhint.wire.config import Settings
from gpuhint.wire.contract import JobEvent, JobPhase, encode_message
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics, job_key
from streams.kafka_io import ensure_topics

CLUSTER = "failover"
PARTITIONS = 4


@contextlib.contextmanager
def services(bootstrap: str | None, redis_url: str | None) -> Iterator[tuple[str, str]]:
    from gpuhint.lab.local.services import kafka_and_redis

    with contextlib.ExitStack() as stack:
        yield kafka_and_redis(stack, bootstrap, redis_url)


class Feeder(threading.Thread):
    """Submits one job per VC every ``interval`` s; remembers when each was sent."""

    def __init__(self, bootstrap: str, topics: Topics, vcs: list[str], interval: float) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        self.topics, self.vcs, self.interval = topics, vcs, interval
        self.sent: list[tuple[float, str, str]] = []  # (monotonic, vc, job id)
        self.stopped = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            for vc in self.vcs:
                n += 1
                job = f"{vc}-{n}"
                now = time.time()
                ev = JobEvent(
                    phase=JobPhase.SUBMITTED,
                    job_id=job,
                    cluster=CLUSTER,
                    vc=vc,
                    user=f"u{n % 5}",
                    num_gpus=1 + n % 4,
                    time=now,
                    submit_time=now,
                )
                self.producer.send(
                    self.topics.job_events, key=job_key(CLUSTER, vc), value=encode_message(ev)
                )
                with self.lock:
                    self.sent.append((time.monotonic(), vc, job))
            self.producer.flush(10)
            self.stopped.wait(self.interval)
        self.producer.close()

    def after(self, t: float) -> list[tuple[float, str, str]]:
        with self.lock:
            return [s for s in self.sent if s[0] >= t]


def first_hint_per_vc(
    r: redis.Redis, keys: RedisKeys, feeder: Feeder, since: float, vcs: list[str], timeout: float
) -> dict[str, float]:
    """Seconds from ``since`` until each VC has a hint of a job sent after ``since``."""
    got: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(got) < len(vcs) and time.monotonic() < deadline:
        for _, vc, job in feeder.after(since):
            if vc not in got and r.exists(keys.hint(CLUSTER, job)):
                got[vc] = round(time.monotonic() - since, 2)
        time.sleep(0.05)
    return got


def spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuhint", "worker"], env=env, stdout=fh, stderr=fh
        )


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    stop_processes(procs)


def scenario(name: str, bootstrap: str, redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"f{uuid.uuid4().hex[:8]}"
    topics, keys = Topics(prefix), RedisKeys(prefix)
    ensure_topics(bootstrap, topics, partitions=PARTITIONS)
    vcs = [f"vc{i}" for i in range(args.vcs)]
    log = Path(f"/tmp/failover-{prefix}.log")
    env = dict(
        os.environ,
        GPUHINT_KAFKA_BOOTSTRAP=bootstrap,
        GPUHINT_REDIS_URL=redis_url,
        GPUHINT_TOPIC_PREFIX=prefix,
        GPUHINT_KEY_PREFIX=prefix,
        GPUHINT_APP_ID=f"{prefix}-worker",
        GPUHINT_PARTITIONS=str(PARTITIONS),
        GPUHINT_STATE_DIR=f"/tmp/failover-{prefix}-state",
        PYTHONUNBUFFERED="1",
    )
    r = redis.Redis.from_url(redis_url)
    feeder = Feeder(bootstrap, topics, vcs, args.interval)
    procs: list[subprocess.Popen[bytes]] = []
    out: dict[str, Any] = {"scenario": name, "vcs": args.vcs, "log": str(log)}
    try:
        feeder.start()
        t0 = time.monotonic()
        procs.append(spawn(env, log))
        ready = first_hint_per_vc(r, keys, feeder, t0, vcs, args.timeout)
        out["start_to_all_vcs_s"] = max(ready.values()) if len(ready) == len(vcs) else None
        out["start_to_first_hint_s"] = min(ready.values()) if ready else None
        if name == "cold":
            return out
        if name in ("survivor", "sigterm"):
            second = log.with_suffix(".2.log")
            procs.append(spawn(env, second))
            deadline = time.monotonic() + args.timeout
            while "Worker]: Ready" not in second.read_text(errors="replace"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the second worker never got Ready: {second}")
                time.sleep(0.1)
            # the rebalance that gave it partitions is over once every VC is hinted again
            check = time.monotonic()
            steady = first_hint_per_vc(r, keys, feeder, check, vcs, args.timeout)
            out["second_worker_ready_s"] = round(check - t0, 2)
            out["rebalance_all_vcs_s"] = max(steady.values()) if len(steady) == len(vcs) else None
        time.sleep(args.settle)
        victim = procs[-1] if name in ("survivor", "sigterm") else procs[0]
        killed = time.monotonic()
        victim.send_signal(signal.SIGTERM if name == "sigterm" else signal.SIGKILL)
        if name == "restart":
            procs.append(spawn(env, log))
        gap = first_hint_per_vc(r, keys, feeder, killed, vcs, args.timeout)
        out["recovered_vcs"] = len(gap)
        out["all_vcs_s"] = max(gap.values()) if len(gap) == len(vcs) else None
        out["median_vc_s"] = statistics.median(gap.values()) if gap else None
        return out
    finally:
        feeder.stopped.set()
        feeder.join(15)
        stop_all(procs)
        r.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="a running broker (default: start the local one)")
    ap.add_argument("--redis-url", help="a running Redis (default: start the local one)")
    ap.add_argument("--scenarios", default="cold,restart,survivor,sigterm")
    ap.add_argument("--vcs", type=int, default=8)
    ap.add_argument("--interval", type=float, default=0.25, help="s between submit rounds")
    ap.add_argument("--settle", type=float, default=8.0, help="s of steady state before a kill")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    results = []
    default_timeout = f"{Settings.model_fields['worker_session_timeout_s'].default:g} (default)"
    with services(a.bootstrap, a.redis_url) as (bootstrap, redis_url):
        for name in a.scenarios.split(","):
            results.append(scenario(name, bootstrap, redis_url, a))
            if not a.json:
                print(json.dumps(results[-1]), flush=True)
    report = {
        "load_average": os.getloadavg(),
        "session_timeout_s": os.environ.get("GPUHINT_WORKER_SESSION_TIMEOUT_S", default_timeout),
        "results": results,
    }
    if a.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
