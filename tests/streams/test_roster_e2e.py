"""On real services: a job whose end never comes is retired by two rosters, through
Kafka, the Faust worker and Redis (the worker's own message path); a second agent's
rosters in between stop that."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from kafka import KafkaProducer

from gpuhint.wire.contract import JobEvent, JobRoster, encode_message
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics, job_key
from streams.kafka_io import ensure_topics
from tests.streams.test_pipeline_e2e import _wait

pytestmark = pytest.mark.integration

CLUSTER, VC = "c", "v"


def test_two_rosters_without_a_job_retire_it_in_redis(
    kafka_bootstrap: str, redis_url: str, unique_prefix: str, gpuhint_env, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    topics, keys = Topics(unique_prefix), RedisKeys(unique_prefix)
    env = gpuhint_env(GPUHINT_CLUSTER=CLUSTER, GPUHINT_MODEL="history")
    ensure_topics(kafka_bootstrap, topics, int(env.get("GPUHINT_PARTITIONS", "4")))
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    key = job_key(CLUSTER, VC)
    now = time.time()

    def send(msg: JobEvent | JobRoster) -> None:
        producer.send(topics.job_events, key=key, value=encode_message(msg)).get(30)

    for i in range(3):
        t = now - 600 + i
        send(JobEvent(phase="submitted", job_id=f"j{i}", cluster=CLUSTER, vc=VC, user="u",
                      num_gpus=1, time=t, submit_time=t))  # fmt: skip
    log = tmp_path / "worker.log"
    with open(log, "ab") as fh:
        worker = subprocess.Popen(
            [sys.executable, "-m", "gpuhint", "worker"], env=env, stdout=fh, stderr=fh
        )
    try:
        r = redis.Redis.from_url(redis_url)

        def queue() -> set[str]:
            return {m.decode() for m in r.zrange(keys.queue(CLUSTER, VC), 0, -1)}

        _wait(lambda: queue() == {"j0", "j1", "j2"}, 180, "three hints", log)
        # the agent's rosters list only j1: j0 and j2 ended unannounced
        send(JobRoster(cluster=CLUSTER, vc=VC, epoch=now - 60, job_ids=("j1",), agent="A"))
        send(JobRoster(cluster=CLUSTER, vc=VC, epoch=now, job_ids=("j1",), agent="A"))
        _wait(lambda: queue() == {"j1"}, 120, "j0 and j2 retired", log)
        assert r.get(keys.hint(CLUSTER, "j0")) is None and r.get(keys.hint(CLUSTER, "j1"))
        # a second agent under the same cluster name: A's rosters that leave j1 out
        # (it is B's, say) count no miss while B's come between them; the worker warns
        send(JobRoster(cluster=CLUSTER, vc=VC, epoch=now + 1, agent="B"))
        send(JobRoster(cluster=CLUSTER, vc=VC, epoch=now + 2, agent="A"))
        send(JobRoster(cluster=CLUSTER, vc=VC, epoch=now + 3, agent="A"))
        _wait(lambda: "rosters alternate" in log.read_text(errors="replace"), 120, "warn", log)
        time.sleep(2.0)  # A's last roster is applied in the same batch, or just after
        assert queue() == {"j1"}
        assert int(r.hget(keys.stats, "dead_letter") or 0) == 0
    finally:
        producer.close()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
    assert "v: 2 job(s) retired, left out of 2 rosters" in log.read_text(errors="replace")
