"""Partitions dealt by load (streams/faust_assignor.py), on real services.

* A worker joins a group that lags. Sixteen VCs hash onto 8 partitions as 3, 0, 2, 0, 1,
  3, 3, 4. One worker drains a backlog of them; a second joins. Faust's sticky deal would
  keep partitions 0-3 on the first worker and give 4-7 (11 of the 16 VCs) to the second;
  the leader deals them by each partition's sampled load instead, and the group runs the
  deal it logged.
* A group formed before the events: two workers share the partitions by count, then a
  backlog lands on one worker's partitions only. No one joins or leaves, so only the
  leader's probe can start a rebalance: it asks, and the group runs its deal by load.
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

from gpuhint.cores.pipeline.partitioning import partition_for
from gpuhint.lab.local.kafka_tools import group_assignment, produce_batches
from gpuhint.lab.local.services import stop_processes
from gpuhint.wire.contract import JobEvent, encode_message
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import Topics, job_key
from streams.kafka_io import ensure_topics

pytestmark = pytest.mark.integration

PARTITIONS = 8
VCS = 16


def _backlog(lifecycles: int, vcs: list[str] | None = None) -> dict[int, list[tuple[bytes, bytes]]]:
    names = vcs or [f"vc{v}" for v in range(VCS)]
    by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
    t = time.time()
    for i in range(lifecycles):
        base = dict(job_id=f"j{i}", cluster="bench", vc=names[i % len(names)], user=f"u{i % 7}")
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
def two_workers(  # type: ignore[no-untyped-def]
    gpuhint_env, tmp_path: Path, kafka_bootstrap: str, unique_prefix: str
) -> Iterator:  # type: ignore[type-arg]
    """``start`` (one more worker), its env, the workers' log, and the topics (made)."""
    topics = Topics(unique_prefix)
    ensure_topics(kafka_bootstrap, topics, partitions=PARTITIONS)
    env = gpuhint_env(
        GPUHINT_PARTITIONS=str(PARTITIONS),
        GPUHINT_CES_ENABLED="false",
        GPUHINT_WORKER_REBALANCE_MIN_EVENTS="5000",
        GPUHINT_WORKER_REBALANCE_COOLDOWN_S="3",
    )
    log = tmp_path / "workers.log"
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        with open(log, "ab") as fh:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "gpuhint", "worker"], env=env, stdout=fh, stderr=fh
                )
            )

    yield start, env, log, topics
    stop_processes(procs)


def _wait_for_two(bootstrap: str, group: str, topic: str, log: Path) -> list[list[int]]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = group_assignment(bootstrap, group, topic)
        if got is not None and len(got) == 2 and all(got):
            return got
        time.sleep(0.2)
    raise AssertionError(log.read_text(errors="replace")[-3000:])


def _deals_by_load(text: str) -> list[tuple[int, int, list[list[int]]]]:
    """Each deal by load a leader logged: busiest worker before, after, the deal."""
    deals = []
    for before, after, members in re.findall(
        r"dealt by load: busiest worker (\d+) -> (\d+) \((.*)\)", text
    ):
        parts = sorted(
            sorted(int(p) for p in re.findall(r"\d+", part.split(":", 1)[1]))
            for part in members.split("; ")
        )
        deals.append((int(before), int(after), parts))
    return deals


def test_a_joining_worker_gets_partitions_dealt_by_load(
    two_workers,  # type: ignore[no-untyped-def]
    kafka_bootstrap: str,
    redis_url: str,
    unique_prefix: str,
) -> None:
    start, env, log, topics = two_workers
    produce_batches(kafka_bootstrap, topics.job_events, _backlog(30_000))  # 90,000 events
    r = redis.Redis.from_url(redis_url)
    changes = RedisKeys(unique_prefix).changes
    start()
    deadline = time.monotonic() + 120
    while r.xlen(changes) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.xlen(changes) > 0, log.read_text(errors="replace")[-3000:]
    time.sleep(2.5)  # the first worker samples its partitions' load every second
    start()
    group = env["GPUHINT_APP_ID"]
    got = _wait_for_two(kafka_bootstrap, group, topics.job_events, log)
    text = log.read_text(errors="replace")
    deals = _deals_by_load(text)
    assert deals, f"no deal by load in the log; group: {got}\n{text[-3000:]}"
    before, after, logged = deals[-1]
    assert after < before
    assert got == logged  # the group runs the deal the leader made
    assert got != [[0, 1, 2, 3], [4, 5, 6, 7]]  # not Faust's sticky split


def test_a_group_formed_before_the_events_is_re_dealt_when_they_come(
    two_workers,  # type: ignore[no-untyped-def]
    kafka_bootstrap: str,
) -> None:
    start, env, log, topics = two_workers
    start()
    start()
    group = env["GPUHINT_APP_ID"]
    first = _wait_for_two(kafka_bootstrap, group, topics.job_events, log)
    time.sleep(3)  # the group settles (a second join round would deal by count again)
    first = _wait_for_two(kafka_bootstrap, group, topics.job_events, log)
    # two VCs on each of the first worker's partitions, none on the other's
    loaded = first[0]
    names = [f"vc{v}" for v in range(1000)]
    vcs = [
        n
        for p in loaded
        for n in [n for n in names if partition_for(job_key("bench", n), PARTITIONS) == p][:2]
    ]
    produce_batches(kafka_bootstrap, topics.job_events, _backlog(20_000, vcs))  # 60,000
    deadline = time.monotonic() + 60
    text = ""
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        asked = text.find("asking the group to rebalance for load")
        if asked >= 0 and "dealt by load" in text[asked:]:
            break
        time.sleep(0.2)
    asked = text.find("asking the group to rebalance for load")
    assert asked >= 0, f"no rebalance asked for; group: {first}\n{text[-3000:]}"
    deals = _deals_by_load(text[asked:])
    assert deals, text[-3000:]
    before, after, logged = deals[0]
    assert after <= before * 0.8
    got = _wait_for_two(kafka_bootstrap, group, topics.job_events, log)
    assert got == logged  # the group runs the leader's deal by load
    assert all(set(m) & set(loaded) for m in got)  # both workers now drain the backlog
    # the deal evened the load out: past the cool-down (3 s) the leader does not ask again
    time.sleep(6)
    again = log.read_text(errors="replace")
    assert again.count("asking the group to rebalance for load") == 1, again[-3000:]
