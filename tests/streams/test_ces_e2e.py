"""End to end on real services: node agents (fake NVML) -> Kafka -> worker -> Redis load."""

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
from kafka import KafkaConsumer, KafkaProducer

from gpuhint.lab.local.services import stop_processes
from gpuhint.wire.contract import ClusterLoad, PowerAdvisory
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics, node_key
from streams.kafka_io import ensure_topics

pytestmark = pytest.mark.integration

CLUSTER = "gpufarm"
SLOT_S = 2  # short CES slots so the test sees several close in seconds


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    running: list[subprocess.Popen[bytes]] = []
    yield running
    stop_processes(running)


def test_agents_to_cluster_load_in_redis(
    kafka_bootstrap: str,
    redis_url: str,
    unique_prefix: str,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
    gpuhint_env,  # type: ignore[no-untyped-def]
) -> None:
    env = gpuhint_env(GPUHINT_CLUSTER=CLUSTER, GPUHINT_CES_SLOT_S=str(SLOT_S))
    topics, keys = Topics(unique_prefix), RedisKeys(unique_prefix)
    ensure_topics(kafka_bootstrap, topics, partitions=4)
    log = tmp_path / "procs.log"

    def spawn(*args: str) -> subprocess.Popen[bytes]:
        with open(log, "ab") as fh:
            p = subprocess.Popen(
                [sys.executable, "-m", "gpuhint", *args], env=env, stdout=fh, stderr=fh
            )
        procs.append(p)
        return p

    # a bad node-status message must reach the dead-letter topic, not stop anything
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    producer.send(topics.node_status, key=node_key(CLUSTER, "bad"), value=b'{"kind":"node_status"}')
    producer.flush(30)
    producer.close()

    spawn("worker")
    # three GPU hosts: one fully busy, one half busy, one idle (8 fake GPUs each)
    for node, scenario in [("n-busy", "busy"), ("n-steady", "steady"), ("n-idle", "idle")]:
        spawn(
            "agent", "--nvml", "fake", "--scenario", scenario, "--node", node, "--interval", "0.5"
        )

    r = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 180
    load = advice = None
    while time.monotonic() < deadline:
        raw_load, raw_adv = r.get(keys.load(CLUSTER)), r.get(keys.cluster_advice(CLUSTER))
        if raw_load and raw_adv:
            load = ClusterLoad.model_validate_json(raw_load)
            advice = PowerAdvisory.model_validate_json(raw_adv)
            # the first slots may close before every agent's first report is in (the
            # slot clock follows the newest report): wait for the settled picture
            if load.total_nodes == 3 and load.busy_gpus == 8 + 4 and load.idle_nodes:
                break
        time.sleep(0.5)
    else:
        pytest.fail(
            f"no settled cluster load for 3 nodes in Redis (last: {load})\n"
            + log.read_text(errors="replace")[-4000:]
        )
    assert load is not None and advice is not None
    assert (load.total_nodes, load.used_nodes) == (3, 2)  # busy and steady run work
    assert load.total_gpus == 24 and load.busy_gpus == 8 + 4
    assert load.idle_nodes == ("n-idle",)
    assert advice.cluster == CLUSTER and advice.reason
    assert advice.total_nodes == 3 and advice.used_nodes == 2
    types = {f[b"type"] for _, f in r.xrange(keys.changes)}
    assert {b"load", b"advice"} <= types  # a scheduler can follow the change stream

    consumer = KafkaConsumer(
        topics.dead_letter,
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        group_id=None,
    )
    records = [json.loads(m.value) for m in consumer]
    consumer.close()
    assert len(records) == 1 and records[0]["topic"] == topics.node_status
    assert "schema_version" in records[0]["reason"]

    # every agent stops cleanly on SIGTERM, flushing what it holds
    for p in procs[1:]:
        p.send_signal(signal.SIGTERM)
    for p in procs[1:]:
        assert p.wait(30) == 0
