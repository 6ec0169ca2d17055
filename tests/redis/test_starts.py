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
