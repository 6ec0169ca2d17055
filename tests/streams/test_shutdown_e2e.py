"""SIGTERM on the real broker: the worker saves what it holds and commits it before it
exits, so a clean stop leaves nothing to redo (a stop that dropped the held events'
state would leave the group's commits behind the log, and the next worker re-applies
them onto older state)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from kafka import KafkaConsumer, TopicPartition

from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics
from tests.streams.test_pipeline_e2e import CLUSTER, CUT, TRACE, _gpuhint, _wait, expected_state

pytestmark = pytest.mark.integration


def _commits(
    bootstrap: str, group: str, topic: str
) -> tuple[dict[int, int | None], dict[int, int]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        end = {tp.partition: int(o) for tp, o in consumer.end_offsets(tps).items()}
        return {tp.partition: consumer.committed(tp) for tp in tps}, end
    finally:
        consumer.close()


def test_sigterm_saves_and_commits_everything_handled(
    kafka_bootstrap: str, unique_prefix: str, redis_url: str, gpuhint_env, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    # saves due only after a minute: whatever is committed at the exit, the stop saved
    env = gpuhint_env(GPUHINT_CLUSTER=CLUSTER, GPUHINT_STATE_SAVE_INTERVAL_S="60")
    rep = subprocess.run(
        _gpuhint("replay", str(TRACE), "--until", CUT, "--max", "--no-progress"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rep.returncode == 0, rep.stderr[-3000:]
    keys, r = RedisKeys(unique_prefix), redis.Redis.from_url(redis_url)
    pending, _ = expected_state()
    log = tmp_path / "worker.log"
    with open(log, "ab") as fh:
        worker = subprocess.Popen(_gpuhint("worker"), env=env, stdout=fh, stderr=fh)
    try:

        def hinted() -> set[str]:
            pattern = f"{keys.root}:hint:{CLUSTER}:*"
            return {k.decode().rsplit(":", 1)[1] for k in r.scan_iter(match=pattern)}

        _wait(lambda: hinted() == pending, 180, "every pending job's hint", log)
        time.sleep(2)  # the last batch handled; its state not due for a minute
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
    committed, end = _commits(
        kafka_bootstrap, env["GPUHINT_APP_ID"], Topics(unique_prefix).job_events
    )
    assert committed == {p: (o if o else None) for p, o in end.items()}, log.read_text()[-3000:]
