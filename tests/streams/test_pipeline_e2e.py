"""End to end on real services: replay -> Kafka -> Faust worker -> Redis, plus dead letters.

Runs the real CLI commands as a user would (``gpuhint replay``, ``gpuhint worker``)
against the real broker and Redis from the session fixtures.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import redis
from kafka import KafkaConsumer, KafkaProducer

from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.lab.traces.readers import job_events, parse_time, read_trace
from gpuhint.wire.contract import JobEvent, JobPhase, encode_message
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics, job_key
from models.registry import make_model
from streams.kafka_io import ensure_topics

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "philly_excerpt.json"
CUT = "2017-10-08 00:00:00"
CLUSTER = "philly"


def _gpuhint(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuhint", *args]


def expected_state() -> tuple[set[str], set[str]]:
    """(jobs pending at the cut, jobs started or finished by then), from the trace itself."""
    cut = parse_time(CUT)
    pending: dict[str, bool] = {}
    for ev in job_events(read_trace(TRACE).jobs, cluster=CLUSTER):
        if ev.time > cut:
            break
        pending[ev.job_id] = ev.phase is JobPhase.SUBMITTED
    return {j for j, p in pending.items() if p}, {j for j, p in pending.items() if not p}


@pytest.fixture(params=["history_mix"])
def model_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def worker_proc(
    gpuhint_env,
    tmp_path: Path,
    model_name: str,  # type: ignore[no-untyped-def]
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str], Path]]:
    env = gpuhint_env(GPUHINT_CLUSTER=CLUSTER, GPUHINT_MODEL=model_name)
    log = tmp_path / "worker.log"
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        with open(log, "ab") as fh:
            p = subprocess.Popen(_gpuhint("worker"), env=env, stdout=fh, stderr=fh)
        procs.append(p)
        return p

    yield start, env, log  # type: ignore[misc]
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def _bad_messages(topic: str) -> list[tuple[bytes, bytes, str]]:
    good = JobEvent(phase="submitted", job_id="x1", cluster=CLUSTER, vc="v", time=0, submit_time=0)
    wrong_version = json.loads(encode_message(good))
    wrong_version["schema_version"] = 99
    missing = json.loads(encode_message(good))
    del missing["job_id"]
    key = job_key(CLUSTER, "v")
    return [
        (key, b"\xff\xfenot json", "not JSON"),
        (key, json.dumps(wrong_version).encode(), "unsupported schema_version"),
        (key, json.dumps(missing).encode(), "job_id"),
        (b"wrong/key", encode_message(good), "key"),
    ]


def _wait(predicate, timeout: float, what: str, log: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\nworker log:\n{tail}")


def test_replay_worker_redis_end_to_end(
    kafka_bootstrap: str, redis_url: str, unique_prefix: str, worker_proc, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    start_worker, env, log = worker_proc
    topics, keys = Topics(unique_prefix), RedisKeys(unique_prefix)
    pending, done = expected_state()
    assert len(pending) > 10 and len(done) > 100  # the excerpt really exercises both

    # 1. replay the real trace excerpt up to the cut, with the real CLI
    rep = subprocess.run(
        _gpuhint("replay", str(TRACE), "--until", CUT, "--max", "--no-progress"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rep.returncode == 0, rep.stderr[-3000:]

    # 2. plant bad messages among them
    bad = _bad_messages(topics.job_events)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    for key, value, _ in bad:
        producer.send(topics.job_events, key=key, value=value)
    producer.flush(30)
    producer.close()

    # 3. run the real worker until Redis holds exactly the pending set
    start_worker()
    r = redis.Redis.from_url(redis_url)

    def hinted() -> set[str]:
        out = set()
        for k in r.scan_iter(match=f"{keys.root}:hint:{CLUSTER}:*", count=1000):
            out.add(k.decode().rsplit(":", 1)[1])
        return out

    def settled() -> bool:
        dlq = int(r.hget(keys.stats, "dead_letter") or 0)
        return hinted() == pending and dlq >= len(bad)

    _wait(settled, 180, "hints for every pending job and the dead letters", log)

    # every pending job has a hint and a place in its VC's queue; no started/finished one has
    assert hinted() == pending
    assert not (hinted() & done)
    queued = set()
    for qk in r.scan_iter(match=f"{keys.root}:queue:{CLUSTER}:*"):
        rows = r.zrange(qk, 0, -1, withscores=True)
        assert all(score >= 0 for _, score in rows)
        queued |= {m.decode() for m, _ in rows}
    assert queued == pending
    hint = json.loads(r.get(keys.hint(CLUSTER, next(iter(pending)))))
    assert hint["schema_version"] == 1 and hint["priority"] > 0
    assert hint["duration_p10_s"] <= hint["duration_p90_s"]
    assert r.ttl(keys.hint(CLUSTER, next(iter(pending)))) > 0  # stale keys expire
    assert r.xlen(keys.changes) > 0

    # 4. the planted bad messages reached the dead-letter topic, each with its reason
    consumer = KafkaConsumer(
        topics.dead_letter,
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        group_id=None,
    )
    records = [json.loads(m.value) for m in consumer]
    consumer.close()
    assert len(records) == len(bad)
    reasons = sorted(rec["reason"] for rec in records)
    for _, _, expected in bad:
        assert any(expected in reason for reason in reasons), (expected, reasons)
    assert all(rec["topic"] == topics.job_events and rec["value_b64"] for rec in records)
    assert int(r.hget(keys.stats, "dead_letter")) == len(bad)


@pytest.mark.parametrize("model_name", ["history", "history_mix"], indirect=True)
def test_worker_restart_keeps_model_state(
    kafka_bootstrap: str,
    redis_url: str,
    unique_prefix: str,
    worker_proc,
    tmp_path: Path,
    model_name: str,
) -> None:  # type: ignore[no-untyped-def]
    """A restarted worker continues from its state instead of relearning from zero.

    Every model keeps its state per VC in the changelog-backed ``vc-state`` table, so
    the restarted worker's prediction must equal that of one process that saw every event.
    """
    start_worker, _env, log = worker_proc
    topics, keys = Topics(unique_prefix), RedisKeys(unique_prefix)
    ensure_topics(kafka_bootstrap, topics, partitions=4)  # as every gpuhint producer does
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")

    def send(ev: JobEvent) -> None:
        producer.send(topics.job_events, key=job_key(ev.cluster, ev.vc), value=encode_message(ev))

    base = dict(cluster=CLUSTER, vc="vcA", user="alice", num_gpus=2)
    before: list[JobEvent] = []
    for i, dur in enumerate([100.0, 300.0]):  # alice's history: mean 200 s
        jid = f"h{i}"
        before.append(JobEvent(phase="submitted", job_id=jid, time=i, submit_time=i, **base))
        before.append(
            JobEvent(
                phase="finished", job_id=jid, time=i + 1, submit_time=i, duration_s=dur, **base
            )
        )
    before.append(JobEvent(phase="submitted", job_id="probe1", time=10, submit_time=10, **base))
    after = JobEvent(phase="submitted", job_id="probe2", time=20, submit_time=20, **base)
    # what one uninterrupted process predicts for both probes
    reference = HintEngine(partial(make_model, model_name), InMemoryStore())
    expected = {}
    for ev in [*before, after]:
        h = reference.on_job_event(ev)
        if h is not None:
            expected[h.job_id] = h.predicted_duration_s
    for ev in before:
        send(ev)
    producer.flush(30)

    r = redis.Redis.from_url(redis_url)
    p = start_worker()
    _wait(lambda: r.exists(keys.hint(CLUSTER, "probe1")), 120, "first probe hint", log)
    first = json.loads(r.get(keys.hint(CLUSTER, "probe1")))
    assert first["predicted_duration_s"] == pytest.approx(expected["probe1"])
    assert first["model"] == model_name
    if model_name == "history":
        assert expected["probe1"] == 200.0  # alice's mean
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 0, log.read_text(errors="replace")[-3000:]

    # after a restart the worker must predict as if it had never stopped
    send(after)
    producer.flush(30)
    producer.close()
    start_worker()
    _wait(lambda: r.exists(keys.hint(CLUSTER, "probe2")), 120, "second probe hint", log)
    hint = json.loads(r.get(keys.hint(CLUSTER, "probe2")))
    assert hint["predicted_duration_s"] == pytest.approx(expected["probe2"])
    fresh = HintEngine(partial(make_model, model_name), InMemoryStore()).on_job_event(after)
    assert fresh is not None and fresh.predicted_duration_s != pytest.approx(expected["probe2"])


def test_hard_kill_mid_stream_loses_nothing(
    kafka_bootstrap: str, redis_url: str, unique_prefix: str, worker_proc, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the worker as soon as its first writes land; a new one must finish the job.

    Offsets are committed only after the store has flushed, and writes are idempotent, so
    whatever the kill interrupted is redone and Redis ends in exactly the right state.
    """
    start_worker, env, log = worker_proc
    keys = RedisKeys(unique_prefix)
    pending, done = expected_state()
    rep = subprocess.run(
        _gpuhint("replay", str(TRACE), "--until", CUT, "--max", "--no-progress"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rep.returncode == 0, rep.stderr[-3000:]
    r = redis.Redis.from_url(redis_url)
    first = start_worker()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not r.xlen(keys.changes):
        time.sleep(0.02)
    first.kill()  # SIGKILL: no flush, no commit, no goodbye
    first.wait(30)
    start_worker()

    def hinted() -> set[str]:
        return {
            k.decode().rsplit(":", 1)[1]
            for k in r.scan_iter(match=f"{keys.root}:hint:{CLUSTER}:*", count=1000)
        }

    _wait(lambda: hinted() == pending, 180, "the restarted worker to finish", log)
    time.sleep(2)  # nothing stale trickles in afterwards
    assert hinted() == pending and not (hinted() & done)
