"""``gpuhint serve``'s path into a real Redis: the Kafka workers' Redis state, exactly.

The Kafka workers' final Redis state is held equal to the in-process pipeline's by
``tests/streams/test_determinism_e2e.py`` (one worker, two, SIGKILLs, rebalances); the
same reference, on the same events, is what the one-process path must write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from gpuhint.cores.pipeline.inprocess import InProcessPipeline
from gpuhint.lab.traces.readers import job_events, parse_time, read_trace
from gpuhint.redis.store import RedisStore
from gpuhint.serve.local_log import LocalLog
from gpuhint.serve.runner import OneProcess
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"
CLUSTER = "philly"


def _strip(raw: str | bytes) -> dict:  # type: ignore[type-arg]
    d = json.loads(raw)
    d.pop("created_at")  # a wall clock
    return d  # type: ignore[no-any-return]


def test_serve_writes_what_the_workers_write(
    tmp_path: Path, redis_url: str, unique_prefix: str
) -> None:
    cut = parse_time("2017-10-08 00:00:00")
    events = [e for e in job_events(read_trace(TRACE).jobs, cluster=CLUSTER) if e.time <= cut]
    ref = InProcessPipeline("history_mix", partitions=4)
    ref.publish(events)
    ref.run(workers=1)
    want = {job: _strip(h) for (_, job), h in ref.pending_hints().items()}
    assert len(want) > 10

    r = redis.Redis.from_url(redis_url)
    keys = RedisKeys(unique_prefix)
    store = RedisStore(r, keys)
    one = OneProcess(LocalLog(tmp_path / "serve.sqlite"), store, model="history_mix")
    half = len(events) // 2
    one.ingest(events[:half])
    one.drain()
    one.ingest(events[half:])
    one.drain()
    store.close()

    got = {}
    for k in r.scan_iter(match=f"{keys.root}:hint:{CLUSTER}:*", count=1000):
        raw = r.get(k)
        if raw:
            got[k.decode().rsplit(":", 1)[1]] = _strip(raw)
    assert set(got) == set(want)
    diff = [j for j in want if got[j] != want[j]]
    assert not diff, f"{len(diff)} hints differ, e.g. {got[diff[0]]} != {want[diff[0]]}"
    for (_, vc), q in ref.queues().items():
        rows = r.zrange(keys.queue(CLUSTER, vc), 0, -1, withscores=True)
        assert [(m.decode(), float(s)) for m, s in rows] == q
