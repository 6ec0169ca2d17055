"""``gpuhint replay`` through a real broker outage: it gives up on time, ``--resume`` finishes.

The broker is this test's own (it is killed and restarted on the same port and data).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from gpuhint.lab.local.services import LocalKafka, ServiceError, free_port, kill_process
from gpuhint.lab.traces.readers import job_events, read_trace

pytestmark = pytest.mark.integration

TRACE = Path(__file__).resolve().parents[2] / "data" / "philly_excerpt.json"


def test_replay_stops_after_its_retry_budget_and_resume_completes_it(tmp_path: Path) -> None:
    events = job_events(read_trace(TRACE).jobs, cluster="philly")
    span = events[-1].time - events[0].time
    kafka = LocalKafka(port=free_port(), workdir=tmp_path / "kafka")
    try:
        kafka.start()
    except ServiceError as exc:
        pytest.fail(f"Kafka could not be started: {exc}", pytrace=False)
    prefix = f"r{uuid.uuid4().hex[:8]}"
    env = dict(
        os.environ,
        GPUHINT_KAFKA_BOOTSTRAP=kafka.bootstrap,
        GPUHINT_TOPIC_PREFIX=prefix,
        GPUHINT_PARTITIONS="2",
        GPUHINT_CLUSTER="philly",
        GPUHINT_STATE_DIR=str(tmp_path / "state"),
        GPUHINT_KAFKA_RETRY_S="6",
    )
    cmd = [sys.executable, "-m", "gpuhint", "replay", str(TRACE), "--no-progress"]
    try:
        first = subprocess.Popen(
            [*cmd, "--speed", str(span / 30)],  # about 30 s of replay
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(8)
        kill_process(kafka)  # mid-replay
        _, err = first.communicate(timeout=120)
        assert first.returncode == 2, err[-2000:]
        assert "--resume" in err and "Traceback" not in err
        assert err.count("WARNING") <= 4  # rate-limited, not a line per retry
        state = json.loads(next((tmp_path / "state" / "replay").glob("*.json")).read_text())
        assert 0 < state["acked"] < len(events)

        kafka.start()
        second = subprocess.run(
            [*cmd, "--max", "--resume"], env=env, capture_output=True, text=True, timeout=180
        )
        assert second.returncode == 0, second.stderr[-2000:]
        assert f"resuming after {state['acked']:,}" in second.stderr

        consumer = KafkaConsumer(
            f"{prefix}.job-events",
            bootstrap_servers=kafka.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=5000,
        )
        got = [json.loads(m.value) for m in consumer]
        consumer.close()
        seen = {(m["job_id"], m["phase"]) for m in got}
        assert seen == {(e.job_id, e.phase.value) for e in events}  # nothing lost
        assert len(got) - len(seen) <= 500  # at least once: at most one batch sent twice
    finally:
        kafka.stop()
