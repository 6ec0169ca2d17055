"""Topic lifecycle on the real broker: nothing auto-created; a mismatch stops the worker first."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaTimeoutError

from gpuhint.wire.topics import Topics
from streams.kafka_io import topic_partitions

pytestmark = pytest.mark.integration


def test_the_broker_never_auto_creates_a_topic(kafka_bootstrap: str, unique_prefix: str) -> None:
    topic = f"{unique_prefix}.nobody-made-me"
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_block_ms=3000)
    with pytest.raises(KafkaTimeoutError):
        producer.send(topic, b"x").get(10)
    producer.close(timeout=1)
    assert topic_partitions(kafka_bootstrap, topic) is None


def test_a_partition_mismatch_stops_the_worker_before_it_consumes(
    kafka_bootstrap: str, unique_prefix: str, gpuhint_env
) -> None:  # type: ignore[no-untyped-def]
    topics = Topics(unique_prefix)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topics.job_events, num_partitions=3, replication_factor=1)])
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhint", "worker"],
        env=gpuhint_env(),  # GPUHINT_PARTITIONS=4
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    assert len(lines) == 1 and topics.job_events in lines[0] and "3 partitions" in lines[0]
    assert "Traceback" not in proc.stderr and time.monotonic() - t0 < 60
    group = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=f"{unique_prefix}-worker")
    tps = [TopicPartition(topics.job_events, p) for p in range(3)]
    assert all(group.committed(tp) is None for tp in tps)  # nothing was consumed
    group.close()
    # the other topics were created with the configured partitions, not the broker's default
    assert topic_partitions(kafka_bootstrap, topics.dead_letter) == 4
    admin.close()
