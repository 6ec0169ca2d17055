"""The worker waits for an unreachable broker as ``replay`` does: at most
GPUHINT_KAFKA_RETRY_S, one warning (not one per failed connection), then exit 2."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhint.cli.worker import with_kafka_retry
from streams.kafka_io import KafkaSecurityMismatch, KafkaUnavailable


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_retries_stay_within_the_budget_and_log_once(caplog: pytest.LogCaptureFixture) -> None:
    t = FakeTime()
    timeouts: list[float] = []

    def attempt(timeout_s: float) -> None:
        timeouts.append(timeout_s)
        t.now += timeout_s  # a try that waits its whole timeout
        raise KafkaUnavailable("no Kafka broker answers at b:1")

    with caplog.at_level(logging.WARNING), pytest.raises(KafkaUnavailable, match="within 25 s"):
        with_kafka_retry(attempt, "b:1", 25.0, clock=t.clock, sleep=t.sleep)
    assert t.now <= 25.0 + 1.0  # the last try is cut to what is left (at least 1 s)
    assert len(timeouts) >= 2 and all(x <= 10.0 for x in timeouts)
    assert len(caplog.records) == 1 and "retrying for up to 25 s" in caplog.text


def test_a_broker_that_comes_back_is_used(caplog: pytest.LogCaptureFixture) -> None:
    t = FakeTime()
    calls = []

    def attempt(timeout_s: float) -> None:
        calls.append(timeout_s)
        if len(calls) < 3:
            raise KafkaUnavailable("down")

    with caplog.at_level(logging.WARNING):
        with_kafka_retry(attempt, "b:1", 300.0, clock=t.clock, sleep=t.sleep)
    assert len(calls) == 3
    assert "answered after" in caplog.records[-1].getMessage()


def test_a_security_mismatch_is_not_retried() -> None:
    calls = []

    def attempt(timeout_s: float) -> None:
        calls.append(timeout_s)
        raise KafkaSecurityMismatch("wrong protocol")

    t = FakeTime()
    with pytest.raises(KafkaSecurityMismatch):
        with_kafka_retry(attempt, "b:1", 300.0, clock=t.clock, sleep=t.sleep)
    assert len(calls) == 1


def test_no_checkout_script_is_named_outside_a_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import streams.kafka_io as kafka_io

    installed = tmp_path / "site-packages" / "gpuhint" / "kafka_io.py"
    monkeypatch.setattr(kafka_io, "__file__", str(installed))
    hint = kafka_io.start_kafka_hint()
    assert "run-kafka.sh" not in hint and "docs/operations.md" in hint  # the docs instead


@pytest.mark.integration
def test_the_worker_against_no_broker_gives_up_after_its_retry_time(
    redis_url: str, tmp_path: Path
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "GPUHINT_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}",
        "GPUHINT_REDIS_URL": redis_url,
        "GPUHINT_KAFKA_RETRY_S": "3",
        "GPUHINT_STATE_DIR": str(tmp_path / "state"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhint", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"no Kafka broker answered at 127.0.0.1:{port} within 3 s" in proc.stderr
    noise = [ln for ln in proc.stderr.splitlines() if " kafka." in ln or "Bootstrap" in ln]
    assert noise == [], noise  # kafka-python's own per-connection lines are kept quiet
    assert "Traceback" not in proc.stderr
