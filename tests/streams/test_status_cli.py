"""``gpuhint status`` on the real Kafka and Redis: down without a worker, healthy with one
that turned the replayed events into hints, degraded when an applier's pass failed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from gpuhint.redis.applier_status import record_pass
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration
TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"
CLUSTER = "philly"


def _gpuhint(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuhint", *args]


def _status(env: dict[str, str], *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = subprocess.run(
        _gpuhint("status", "--cluster", CLUSTER, "--json", "--timeout", "10", *extra),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["exit_code"] == proc.returncode
    return proc.returncode, doc


def _wait(predicate: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(1.0)
    pytest.fail(f"timed out waiting for {what}\nworker log:\n{log.read_text()[-3000:]}")


@pytest.fixture
def env(gpuhint_env: Callable[..., dict[str, str]]) -> dict[str, str]:
    return gpuhint_env(GPUHINT_CLUSTER=CLUSTER)


@pytest.fixture
def worker(env: dict[str, str], tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "worker.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(_gpuhint("worker"), env=env, stdout=fh, stderr=fh)
    yield log
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_status_says_down_before_the_worker_and_healthy_after(
    env: dict[str, str], redis_url: str, unique_prefix: str, worker: Path
) -> None:
    replay = subprocess.run(
        _gpuhint("replay", "--trace", str(TRACE), "--limit", "400", "--max", "--no-progress"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replay.returncode == 0, replay.stderr
    r = redis.Redis.from_url(redis_url)
    keys = RedisKeys(unique_prefix)
    _wait(lambda: r.xlen(keys.changes) > 0, 240, "the worker's first hints", worker)

    def settled() -> bool:
        _code, doc = _status(env)
        return doc["checks"]["worker"]["state"] == "ok" and doc["checks"]["hints"]["state"] == "ok"

    _wait(settled, 120, "a healthy worker in status", worker)
    code, doc = _status(env)
    checks = doc["checks"]
    assert checks["kafka"]["state"] == "ok" and checks["redis"]["state"] == "ok"
    assert checks["worker"]["data"]["members"] >= 1
    assert checks["worker"]["data"]["group"] == f"{unique_prefix}-worker"
    assert checks["hints"]["data"]["waiting"] >= 1
    assert checks["job events"]["data"]["topic"] == f"{unique_prefix}.job-events"
    assert CLUSTER in doc["clusters"]
    assert (code, doc["status"]) == (0, "healthy"), doc["problems"]

    # an applier's pass, as the applier records it: a failure degrades, a success heals
    args = (r, keys, CLUSTER, "slurm-priorities")
    record_pass(*args, ok=False, interval_s=30, error="scontrol: Unable to contact slurm")
    code, doc = _status(env)
    assert (code, doc["status"]) == (1, "degraded")
    assert any("slurm-priorities" in p and "Unable to contact" in p for p in doc["problems"])
    record_pass(*args, ok=True, interval_s=30, result={"updated": 12, "unchanged": 3})
    code, doc = _status(env)
    assert code == 0, doc["problems"]
    assert doc["checks"]["applier slurm-priorities"]["state"] == "ok"

    # a typo in the cluster name: degraded, with the known clusters named
    proc = subprocess.run(
        _gpuhint("status", "--cluster", "phily"), env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "known: " in proc.stdout and CLUSTER in proc.stdout


def test_status_without_a_worker_is_down(env: dict[str, str], kafka_bootstrap: str) -> None:
    from gpuhint.wire.topics import Topics
    from streams.kafka_io import ensure_topics

    ensure_topics(kafka_bootstrap, Topics(env["GPUHINT_TOPIC_PREFIX"]), 4)
    code, doc = _status(env)
    assert (code, doc["status"]) == (2, "down")
    assert doc["checks"]["kafka"]["state"] == "ok"
    assert doc["checks"]["worker"]["state"] == "fail"
    proc = subprocess.run(
        _gpuhint("status", "--cluster", CLUSTER), env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "DOWN" in proc.stdout and "no worker running" in proc.stdout


def test_status_with_redis_unreachable_is_down(env: dict[str, str]) -> None:
    code, doc = _status({**env, "GPUHINT_REDIS_URL": "redis://127.0.0.1:1/0"}, "--no-kafka")
    assert code == 2 and doc["checks"]["redis"]["state"] == "fail"
    assert "kafka" not in doc["checks"]
    # the text does not claim "no applier" when it cannot know (review, 2026-12-07)
    proc = subprocess.run(
        _gpuhint("status", "--cluster", CLUSTER, "--no-kafka", "--timeout", "10"),
        env={**env, "GPUHINT_REDIS_URL": "redis://127.0.0.1:1/0"}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert "unknown: Redis, where they record, is unreachable" in proc.stdout
    assert "no applier has recorded" not in proc.stdout
