"""Scratch: does faust-streaming's ``processing_guarantee="exactly_once"`` work here?

A minimal Faust app (one agent: count per key in a table, forward every event to a sink
topic) runs as a real ``faust worker`` subprocess against a real Kafka broker (the local
KRaft launcher of ``gpuhint.lab.local.services`` unless ``--bootstrap`` is given), once per
guarantee. For each run it reports:

* ``committed``: whether the consumer group committed the source offsets up to the end;
* ``sink_committed`` / ``sink_all``: sink records seen by a ``read_committed`` and a
  ``read_uncommitted`` consumer (transactions that commit make the first equal N);
* ``duplicates_committed``: source sequence numbers that appear more than once in the
  committed sink after a SIGKILL of the worker mid-stream and a restart (exactly once
  means 0);
* ``events_per_s``: sink records per second of record time, first to last, without the
  crash (throughput of the guarantee);
* ``errors``: ERROR / Traceback lines of the worker logs.

    python bench/exactly_once.py --events 20000 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PARTITIONS = 4


def worker_main(bootstrap: str, app_id: str, src: str, sink: str, guarantee: str) -> None:
    """The Faust app under test (run in a subprocess)."""
    import faust

    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        processing_guarantee=guarantee,
        topic_partitions=PARTITIONS,
        topic_replication_factor=1,
        web_enabled=False,
        datadir=f"/tmp/{app_id}-data",
        broker_commit_every=1000,
        broker_commit_interval=1.0,
    )
    source = app.topic(src, key_type=bytes, value_type=bytes, value_serializer="raw")
    out = app.topic(sink, key_type=bytes, value_type=bytes, value_serializer="raw")
    counts = app.Table("counts", default=int, partitions=PARTITIONS, key_type=str, value_type=int)

    @app.agent(source)
    async def forward(stream: Any) -> None:
        async for key, value in stream.items():
            counts[key.decode()] += 1
            await out.send(key=key, value=value)

    sys.argv = [sys.argv[0], "worker", "-l", "warn", "--without-web"]
    app.main()


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from gpuhint.lab.local.services import LocalKafka

    with LocalKafka() as kafka:
        kafka.start()
        yield kafka.bootstrap


def create_topics(bootstrap: str, *names: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names])
    admin.close()


def produce(bootstrap: str, topic: str, n: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(n):
        producer.send(topic, key=f"k{i % 64}".encode(), value=str(i).encode())
    producer.flush()
    producer.close()


def read_sink(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, int]]:
    """(sequence number, record timestamp ms) of every sink record."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    found = [(int(r.value), r.timestamp) for r in consumer]
    consumer.close()
    return found


def committed_offsets(bootstrap: str, group: str, topic: str) -> int:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    except KafkaError:  # the group's coordinator is not there yet
        offsets = {}
    finally:
        admin.close()
    return sum(max(meta.offset, 0) for tp, meta in offsets.items() if tp.topic == topic)


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, __file__, "--role", "worker", *args],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_one(bootstrap: str, guarantee: str, n: int, crash: bool, timeout: float) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    app_id, src, sink = f"eos-{tag}", f"eos-src-{tag}", f"eos-sink-{tag}"
    create_topics(bootstrap, src, sink)
    produce(bootstrap, src, n)
    log = Path(f"/tmp/{app_id}.log")
    args = ["--bootstrap", bootstrap, "--app-id", app_id, "--src", src, "--sink", sink]
    args += ["--guarantee", guarantee]
    started = time.monotonic()
    proc = spawn(args, log)
    restarts = 0
    result: dict[str, Any] = {"guarantee": guarantee, "events": n, "crash": crash, "log": str(log)}
    try:
        deadline = started + timeout
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if proc.poll() is not None and not (crash and restarts == 1):
                result["exit_code"] = proc.returncode
                break
            done = committed_offsets(bootstrap, app_id, src)
            if crash and restarts == 0 and done >= n // 3:
                stop(proc, signal.SIGKILL)  # mid-stream, between commits
                restarts = 1
                proc = spawn(args, log)
                continue
            if done >= n:
                break
        result["seconds"] = round(time.monotonic() - started, 2)
        result["committed"] = committed_offsets(bootstrap, app_id, src) >= n
    finally:
        stop(proc)
    committed = read_sink(bootstrap, sink, "read_committed")
    everything = read_sink(bootstrap, sink, "read_uncommitted")
    seqs = Counter(s for s, _ in committed)
    result.update(
        sink_committed=len(committed),
        sink_all=len(everything),
        missing_committed=n - len(seqs),
        duplicates_committed=sum(c - 1 for c in seqs.values()),
    )
    if committed and not crash:
        stamps = sorted(t for _, t in committed)
        span = max((stamps[-1] - stamps[0]) / 1000.0, 1e-3)
        result["events_per_s"] = round(len(committed) / span, 1)
    lines = log.read_text(errors="replace").splitlines()
    result["errors"] = [ln[:240] for ln in lines if "ERROR" in ln or "Traceback" in ln][:8]
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=["bench", "worker"], default="bench")
    ap.add_argument("--bootstrap")
    ap.add_argument("--app-id")
    ap.add_argument("--src")
    ap.add_argument("--sink")
    ap.add_argument("--guarantee", default="at_least_once")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.role == "worker":
        worker_main(a.bootstrap, a.app_id, a.src, a.sink, a.guarantee)
        return 0
    runs = []
    with broker(a.bootstrap) as bootstrap:
        for guarantee in ("at_least_once", "exactly_once"):
            for crash in (False, True):
                runs.append(run_one(bootstrap, guarantee, a.events, crash, a.timeout))
                if not a.json:
                    print(json.dumps(runs[-1]), flush=True)
    report = {"load_average": os.getloadavg(), "runs": runs}
    print(json.dumps(report, indent=2) if a.json else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
