"""Expected starts through a real Redis: the worker's store writes, HintClient reads."""

from __future__ import annotations

import pytest
import redis

from gpuhint.redis.client import HintClient
from gpuhint.redis.store import RedisStore
from gpuhint.wire.contract import ExpectedStart, StartForecasts
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration


def test_a_vcs_forecast_round_trips_and_expires(redis_url: str, unique_prefix: str) -> None:
    r = redis.Redis.from_url(redis_url)
    store = RedisStore(r, RedisKeys(unique_prefix), hint_ttl_s=120)
    client = HintClient(r, key_prefix=unique_prefix)
    assert client.starts("c", "a") is None
    f = StartForecasts(
        cluster="c", vc="a", time=100.0,
        jobs=(ExpectedStart(job_id="j1", expected=160.0, low=130.0, high=400.0),),
    )  # fmt: skip
    store.put_starts(f)
    store.flush()
    assert client.starts("c", "a") == f
    assert 0 < r.ttl(RedisKeys(unique_prefix).starts("c", "a")) <= 120
    later = f.model_copy(update={"time": 200.0, "jobs": ()})
    store.put_starts(later)
    store.flush()
    assert client.starts("c", "a") == later  # a VC's forecast replaces the last one


def test_job_starts_merges_every_vc_of_a_cluster(redis_url: str, unique_prefix: str) -> None:
    from gpuhint.wire.contract import PriorityHint

    r = redis.Redis.from_url(redis_url)
    store = RedisStore(r, RedisKeys(unique_prefix), hint_ttl_s=120)
    client = HintClient(r, key_prefix=unique_prefix)
    for vc, job in (("a", "j1"), ("b", "j2"), ("c", "j3")):  # job_starts walks the queues
        store.put_hint(
            PriorityHint(job_id=job, cluster="c", vc=vc, num_gpus=1, submit_time=0.0,
                         predicted_duration_s=60.0, priority=60.0, model="m",
                         model_version="1", created_at=1.0)
        )  # fmt: skip
    for vc, job, t in (("a", "j1", 100.0), ("b", "j2", 200.0)):
        store.put_starts(
            StartForecasts(cluster="c", vc=vc, time=t, jobs=(
                ExpectedStart(job_id=job, expected=t + 60, low=t + 30, high=t + 90),
            ))
        )  # fmt: skip
    store.flush()
    assert client.job_starts("c") == {
        "j1": (160.0, 130.0, 190.0, 100.0),
        "j2": (260.0, 230.0, 290.0, 200.0),
    }  # VC c has no forecast: its job is simply absent
    assert client.job_starts("other") == {}
