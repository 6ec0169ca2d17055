"""The agent against a real Kafka broker: fake NVML + a Slurm snapshot -> topics -> decode."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from agents.fake_nvml import FakeNvml
from agents.node_agent import NodeAgent
from agents.publisher import BufferedPublisher, KafkaTransport
from gpuhint.cores.job_tracker import JobTracker, SchedulerFeed
from gpuhint.slurm.jobs import parse_slurm
from gpuhint.wire.contract import (
    GpuSample,
    JobEvent,
    JobPhase,
    JobRoster,
    NodeStatus,
    decode_message,
)
from gpuhint.wire.topics import Topics
from streams.kafka_io import ensure_topics

DATA = Path(__file__).resolve().parents[1] / "data"
TICKS = 3


@pytest.mark.integration
def test_agent_publishes_decodable_telemetry_and_job_events(
    kafka_bootstrap: str, unique_prefix: str
) -> None:
    from kafka import KafkaConsumer

    topics = Topics(unique_prefix)
    transport = KafkaTransport(
        kafka_bootstrap, on_connect=lambda: ensure_topics(kafka_bootstrap, topics, 2)
    )
    feed = SchedulerFeed(
        "slurm", str(DATA / "slurm" / "squeue_1.json"), parse_slurm, JobTracker(cluster="venus")
    )
    agent = NodeAgent(
        nvml=FakeNvml("gpu-lost"),
        publisher=BufferedPublisher(transport),
        cluster="venus",
        node="gpu01",
        topics=topics,
        interval_s=0.2,
        feeds=[feed],
    )
    agent.run(threading.Event(), max_ticks=TICKS)
    assert agent.close(flush_timeout_s=30) == 0
    n_rosters = len(feed.tracker.roster()) * agent.rosters_sent  # one part per VC here
    assert agent.rosters_sent == 1  # the first tick's: the next is 300 s later
    assert agent.publisher.sent == TICKS * 8 + 7 + n_rosters and agent.publisher.dropped == 0

    consumer = KafkaConsumer(
        topics.gpu_samples,
        topics.node_status,
        topics.job_events,
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=1000,
    )
    got: dict[str, list] = {topics.gpu_samples: [], topics.node_status: [], topics.job_events: []}
    keys: set[bytes] = set()
    deadline, want = time.monotonic() + 60, TICKS * 8 + 7 + n_rosters
    try:
        while time.monotonic() < deadline and sum(map(len, got.values())) < want:
            for rec in consumer:
                got[rec.topic].append(decode_message(rec.value))
                if rec.topic != topics.job_events:
                    keys.add(rec.key)
    finally:
        consumer.close()
    samples, statuses, jobs = (
        got[topics.gpu_samples],
        got[topics.node_status],
        got[topics.job_events],
    )
    assert len(samples) == TICKS * 7 and all(isinstance(s, GpuSample) for s in samples)
    assert {s.gpu_index for s in samples} == {0, 1, 3, 4, 5, 6, 7}  # GPU 2 is lost
    assert len(statuses) == TICKS and all(isinstance(s, NodeStatus) for s in statuses)
    assert all(not s.healthy and s.num_gpus == 8 for s in statuses)
    assert statuses[-1].running_jobs == ("1002",)
    events = [j for j in jobs if isinstance(j, JobEvent)]
    rosters = [r for r in jobs if isinstance(r, JobRoster)]
    assert len(events) == 7 and len(rosters) == n_rosters > 0
    ended = {e.job_id for e in events if e.phase is JobPhase.FINISHED}
    listed = {j for r in rosters for j in r.job_ids}
    assert listed == {e.job_id for e in events} - ended and listed  # the unfinished jobs
    assert keys == {b"venus/gpu01"}
