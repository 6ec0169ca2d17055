"""Kafka SASL_SSL (SCRAM, PLAIN) and Redis TLS + ACL user, end to end on real servers.

The launcher starts a broker that serves clients on SASL_SSL only and a Redis that
serves TLS only with an ACL user; ``gpuhint replay`` and ``gpuhint worker`` reach them
through settings alone, and a client without credentials is refused with one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kafka import KafkaConsumer

from gpuhint.lab.local.services import LocalKafka, LocalRedis, ServiceError
from gpuhint.lab.traces.readers import job_events, read_trace
from gpuhint.wire.config import load_settings
from gpuhint.wire.contract import JobPhase
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics
from streams.kafka_io import ensure_topics, kafka_client_config, make_producer

pytestmark = pytest.mark.integration

TRACE = Path(__file__).resolve().parents[2] / "data" / "philly_excerpt.json"
LIMIT = 80


@pytest.fixture(scope="module")
def secure_kafka() -> Iterator[LocalKafka]:
    try:
        k = LocalKafka(secure=True).start()
    except ServiceError as exc:
        pytest.fail(f"secure Kafka could not be started: {exc}", pytrace=False)
    yield k
    k.stop()


@pytest.fixture(scope="module")
def secure_redis() -> Iterator[LocalRedis]:
    try:
        r = LocalRedis(password=uuid.uuid4().hex, user="gpuhint", tls=True).start()
    except ServiceError as exc:
        pytest.fail(f"TLS Redis could not be started: {exc}", pytrace=False)
    yield r
    r.stop()


def _settings(env: dict[str, str]) -> object:
    return load_settings(**{k.removeprefix("GPUHINT_").lower(): v for k, v in env.items()})


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_each_sasl_mechanism_round_trips(secure_kafka: LocalKafka, mechanism: str) -> None:
    env = dict(secure_kafka.client_env(), GPUHINT_KAFKA_SASL_MECHANISM=mechanism)
    security = kafka_client_config(_settings(env))  # type: ignore[arg-type]
    topics = Topics(f"s{uuid.uuid4().hex[:8]}")
    ensure_topics(secure_kafka.bootstrap, topics, 1, security=security)
    producer = make_producer(secure_kafka.bootstrap, security)
    producer.send(topics.job_events, key=b"k", value=mechanism.encode()).get(30)
    producer.close()
    consumer = KafkaConsumer(
        topics.job_events,
        bootstrap_servers=secure_kafka.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
        **security,
    )
    assert [m.value for m in consumer] == [mechanism.encode()]
    consumer.close()


def _replay(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuhint", "replay", str(TRACE), "--no-progress", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_clients_without_the_right_credentials_are_refused(
    secure_kafka: LocalKafka, secure_redis: LocalRedis, tmp_path: Path
) -> None:
    base = dict(os.environ, GPUHINT_KAFKA_RETRY_S="3", GPUHINT_STATE_DIR=str(tmp_path))
    plain = _replay(dict(base, GPUHINT_KAFKA_BOOTSTRAP=secure_kafka.bootstrap))
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert "0 of " in plain.stderr
    wrong = {**base, **secure_kafka.client_env(), "GPUHINT_KAFKA_SASL_PASSWORD": "not-it"}
    bad = _replay(wrong)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "not-it" not in bad.stderr and secure_kafka.password not in bad.stderr
    with pytest.raises(redis.AuthenticationError):
        url = secure_redis.url.replace(f":{secure_redis.password}@", ":nope@")
        redis.Redis.from_url(url).ping()
    with pytest.raises(redis.ConnectionError):  # TLS only: a plaintext client gets nothing
        redis.Redis(port=secure_redis.port, socket_timeout=3).ping()


def test_replay_and_worker_over_sasl_ssl_and_rediss(
    secure_kafka: LocalKafka, secure_redis: LocalRedis, tmp_path: Path
) -> None:
    prefix = f"s{uuid.uuid4().hex[:8]}"
    env = dict(
        os.environ,
        **secure_kafka.client_env(),
        GPUHINT_REDIS_URL=secure_redis.url,
        GPUHINT_TOPIC_PREFIX=prefix,
        GPUHINT_KEY_PREFIX=prefix,
        GPUHINT_APP_ID=f"{prefix}-worker",
        GPUHINT_PARTITIONS="2",
        GPUHINT_CLUSTER="philly",
        GPUHINT_STATE_DIR=str(tmp_path / "state"),
        GPUHINT_CES_ENABLED="false",
        PYTHONUNBUFFERED="1",
    )
    rep = _replay(env, "--limit", str(LIMIT))
    assert rep.returncode == 0, rep.stderr[-2000:]
    pending: dict[str, bool] = {}
    for ev in job_events(read_trace(TRACE).jobs, cluster="philly")[:LIMIT]:
        pending[ev.job_id] = ev.phase is JobPhase.SUBMITTED
    want = {j for j, p in pending.items() if p}
    assert want

    log = tmp_path / "worker.log"
    with open(log, "wb") as fh:
        worker = subprocess.Popen(
            [sys.executable, "-m", "gpuhint", "worker"], env=env, stdout=fh, stderr=fh
        )
    try:
        r = redis.Redis.from_url(secure_redis.url)
        keys = RedisKeys(prefix)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and worker.poll() is None:
            if all(r.exists(keys.hint("philly", j)) for j in want):
                break
            time.sleep(1)
        text = log.read_text(errors="replace")
        assert all(r.exists(keys.hint("philly", j)) for j in want), text[-4000:]
    finally:
        worker.terminate()
        worker.wait(60)
    text = log.read_text(errors="replace")
    for secret in (secure_kafka.password, str(secure_redis.password)):
        assert secret not in text and secret not in rep.stderr
