"""A worker joins a group that lags: the partitions are dealt by load (real services).

Sixteen VCs hash onto 8 partitions as 3, 0, 2, 0, 1, 3, 3, 4. One worker drains a
backlog of them; a second joins. Faust's sticky deal would keep partitions 0-3 on the
first worker and give 4-7 (11 of the 16 VCs) to the second; the leader deals them by
each partition's sampled load instead (streams/faust_assignor.py), and the group runs
the deal it logged.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from gpuhint.contract import JobEvent, encode_message
from gpuhint.kafka_io import ensure_topics
from gpuhint.keys import RedisKeys
from gpuhint.testing.kafka_tools import group_assignment, produce_batches
from gpuhint.testing.services import stop_processes
from gpuhint.topics import Topics, job_key
from streams.partitioning import partition_for

pytestmark = pytest.mark.integration

PARTITIONS = 8
VCS = 16


def _backlog(lifecycles: int) -> dict[int, list[tuple[bytes, bytes]]]:
    by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
    t = time.time()
    for i in range(lifecycles):
        base = dict(job_id=f"j{i}", cluster="bench", vc=f"vc{i % VCS}", user=f"u{i % 7}")
        evs = [
            JobEvent(phase="submitted", time=t, num_gpus=1, submit_time=t, **base),  # type: ignore[arg-type]
            JobEvent(phase="started", time=t + 1, num_gpus=1, submit_time=t, **base),  # type: ignore[arg-type]
            JobEvent(
                phase="finished",  # type: ignore[arg-type]
                time=t + 61,
                num_gpus=1,
                submit_time=t,
                duration_s=60.0 + i % 50,
                **base,
            ),
        ]
        for ev in evs:
            key = job_key(ev.cluster, ev.vc)
            by_partition.setdefault(partition_for(key, PARTITIONS), []).append(
                (key, encode_message(ev))
            )
    return by_partition


@pytest.fixture
def two_workers(gpuhint_env, tmp_path: Path) -> Iterator:  # type: ignore[no-untyped-def,type-arg]
    env = gpuhint_env(GPUHINT_PARTITIONS=str(PARTITIONS), GPUHINT_CES_ENABLED="false")
    log = tmp_path / "workers.log"
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        with open(log, "ab") as fh:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "gpuhint", "worker"], env=env, stdout=fh, stderr=fh
                )
            )

    yield start, env, log
    stop_processes(procs)


def test_a_joining_worker_gets_partitions_dealt_by_load(
    two_workers,  # type: ignore[no-untyped-def]
    kafka_bootstrap: str,
    redis_url: str,
    unique_prefix: str,
) -> None:
    start, env, log = two_workers
    topics = Topics(unique_prefix)
    ensure_topics(kafka_bootstrap, topics, partitions=PARTITIONS)
    produce_batches(kafka_bootstrap, topics.job_events, _backlog(30_000))  # 90,000 events
    r = redis.Redis.from_url(redis_url)
    changes = RedisKeys(unique_prefix).changes
    start()
    deadline = time.monotonic() + 120
    while r.xlen(changes) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.xlen(changes) > 0, log.read_text(errors="replace")[-3000:]
    time.sleep(2.5)  # the first worker samples its partitions' load every 2 s
    start()
    group = env["GPUHINT_APP_ID"]
    got = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = group_assignment(kafka_bootstrap, group, topics.job_events)
        if got is not None and len(got) == 2 and all(got):
            break
        time.sleep(0.2)
    text = log.read_text(errors="replace")
    assert got is not None and len(got) == 2, text[-3000:]
    dealt = re.findall(r"dealt by load: busiest worker (\d+) -> (\d+) \((.*)\)", text)
    assert dealt, f"no deal by load in the log; group: {got}\n{text[-3000:]}"
    before, after, members = dealt[-1]
    assert int(after) < int(before)
    logged = sorted(
        sorted(int(p) for p in re.findall(r"\d+", part.split(":", 1)[1]))
        for part in members.split("; ")
    )
    assert got == logged  # the group runs the deal the leader made
    assert got != [[0, 1, 2, 3], [4, 5, 6, 7]]  # not Faust's sticky split
