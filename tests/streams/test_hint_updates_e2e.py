"""Hint updates on the real services: a waiting job's hint moves after a sibling finishes.

The real ``gpuhint worker`` reads job events from a real Kafka broker and writes hints to
a real Redis; when a job of a burst finishes, the worker re-ranks its waiting siblings:
a new score in the VC's sorted set and a ``hint_updated`` entry on the change stream.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kafka import KafkaProducer

from gpuhint.wire.contract import JobEvent, encode_message
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics, job_key
from streams.kafka_io import ensure_topics

pytestmark = pytest.mark.integration

CLUSTER = "loop"


@pytest.fixture
def worker(gpuhint_env, tmp_path: Path) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    env = gpuhint_env(GPUHINT_CLUSTER=CLUSTER, GPUHINT_MODEL="history_mix")
    log = tmp_path / "worker.log"
    with open(log, "ab") as fh:
        p = subprocess.Popen(
            [sys.executable, "-m", "gpuhint", "worker"], env=env, stdout=fh, stderr=fh
        )
    yield log
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def _wait(predicate, timeout: float, what: str, log: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\nworker log:\n{tail}")


def sweep(base: dict[str, object]) -> list[JobEvent]:
    """Three jobs of one burst, submitted a minute apart; the first starts at once."""
    evs = [
        JobEvent(phase="submitted", job_id=f"s{i}", time=60.0 * i, submit_time=60.0 * i, **base)
        for i in range(3)
    ]
    evs.append(
        JobEvent(phase="started", job_id="s0", time=1.0, submit_time=0.0, start_time=1.0, **base)
    )
    return evs


def finished(base: dict[str, object], duration: float) -> JobEvent:
    return JobEvent(
        phase="finished",
        job_id="s0",
        time=1.0 + duration,
        submit_time=0.0,
        start_time=1.0,
        duration_s=duration,
        **base,
    )


def test_a_waiting_jobs_hint_moves_after_its_sibling_finishes(
    kafka_bootstrap: str, redis_url: str, unique_prefix: str, worker: Path
) -> None:
    topics, keys = Topics(unique_prefix), RedisKeys(unique_prefix)
    ensure_topics(kafka_bootstrap, topics, partitions=4)  # GPUHINT_PARTITIONS default
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    base: dict[str, object] = {"cluster": CLUSTER, "vc": "vcA", "user": "alice", "num_gpus": 4}

    def send(ev: JobEvent) -> None:
        producer.send(topics.job_events, key=job_key(ev.cluster, ev.vc), value=encode_message(ev))

    for ev in sweep(base):
        send(ev)
    producer.flush(30)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    qkey = keys.queue(CLUSTER, "vcA")
    _wait(lambda: r.zcard(qkey) == 2, 120, "the two waiting siblings in the queue", worker)
    before = dict(r.zrange(qkey, 0, -1, withscores=True))
    assert set(before) == {"s1", "s2"}

    send(finished(base, 50_000.0))  # the sibling ran for 14 hours: the others are long too
    producer.flush(30)
    producer.close()

    def moved() -> bool:
        return r.zscore(qkey, "s1") not in (None, before["s1"])

    _wait(moved, 120, "the waiting sibling's score to move", worker)
    after = dict(r.zrange(qkey, 0, -1, withscores=True))
    assert after["s1"] > before["s1"] and after["s2"] > before["s2"]
    hint = json.loads(r.get(keys.hint(CLUSTER, "s1")))
    assert hint["priority"] == pytest.approx(after["s1"])
    assert hint["reasons"][0]["feature"] == "updated:expected_s"
    entries = [f for _, f in r.xrange(keys.changes) if f["type"] == "hint_updated"]
    assert {e["job_id"] for e in entries} == {"s1", "s2"}
    assert all(e["cluster"] == CLUSTER and e["vc"] == "vcA" for e in entries)
    assert float(next(e for e in entries if e["job_id"] == "s1")["priority"]) == pytest.approx(
        after["s1"]
    )
