"""The Redis store's writes applied again (lost scripts, replays) stay exactly once, and
its keys keep their TTLs: on a real Redis server."""

from __future__ import annotations

from collections import Counter

import pytest
import redis

from gpuhint.redis.store import RedisStore
from gpuhint.wire.contract import ClusterLoad, PowerAction, PowerAdvisory, PriorityHint
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration


def hint(job: str, prio: float, vc: str = "a") -> PriorityHint:
    return PriorityHint(
        job_id=job,
        vc=vc,
        num_gpus=1,
        submit_time=0,
        predicted_duration_s=prio,
        priority=prio,
        model="m",
        model_version="1",
        created_at=0,
    )


@pytest.fixture
def store(redis_url: str, unique_prefix: str) -> RedisStore:
    return RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix), hint_ttl_s=60)


def change_types(s: RedisStore) -> Counter[str]:
    return Counter(f[b"type"].decode() for _, f in s.r.xrange(s.k.changes))


def test_lost_scripts_do_not_apply_the_rest_of_the_batch_twice(store: RedisStore) -> None:
    """Redis lost its script cache (a restart, SCRIPT FLUSH): the batch's other commands
    already ran, so a counter is not counted twice nor an advice announced twice."""
    store.put_hint(hint("a1", 5))
    store.flush()  # loads the scripts
    store.r.script_flush()
    store.count("dead_letter")
    store.put_advisory(PowerAdvisory(time=1, action=PowerAction.KEEP, reason="r"))
    store.put_load(ClusterLoad(time=1, total_nodes=4, active_nodes=3, used_nodes=2))
    store.remove_hint("default", "a", "a1")
    store.update_hint(hint("a9", 1))  # gone already: no-op
    store.put_hint(hint("a2", 6))
    store.mark_rebuilt(0)
    assert store.flush() == 7
    assert store.r.hgetall(store.k.stats) == {b"dead_letter": b"1"}
    assert change_types(store) == Counter(
        {"hint": 2, "hint_removed": 1, "advice": 1, "load": 1, "rebuilt": 1}
    )
    assert store.r.zrange(store.k.queue("default", "a"), 0, -1) == [b"a2"]
    assert store.r.get(store.k.hint("default", "a1")) is None


def test_an_update_applied_twice_is_announced_once(store: RedisStore) -> None:
    """A replayed update (the same hint again) moves nothing: no second ``hint_updated``."""
    store.put_hint(hint("x", 100))
    store.flush()
    for _ in range(2):
        store.update_hint(hint("x", 10))
        store.flush()
    assert change_types(store) == Counter({"hint": 1, "hint_updated": 1})
    assert store.r.zscore(store.k.queue("default", "a"), "x") == 10.0


def test_an_update_refreshes_the_queues_ttl(store: RedisStore) -> None:
    """docs/redis-keys.md: the queue's TTL is refreshed on every write; an update that
    keeps the hint alive must keep its queue alive too (and never leave it without one)."""
    qkey = store.k.queue("default", "a")
    store.put_hint(hint("x", 100))
    store.flush()
    store.r.expire(qkey, 5)  # the last put was long ago
    store.update_hint(hint("x", 10))
    store.flush()
    assert store.r.ttl(qkey) > 5
    store.r.delete(qkey)  # the queue expired meanwhile (its hint lived on)
    store.update_hint(hint("x", 20))
    store.flush()
    assert 0 < store.r.ttl(qkey) <= 60


def test_a_client_that_decodes_responses_writes_too(redis_url: str, unique_prefix: str) -> None:
    """``RedisStore`` takes any ``redis.Redis``, also one with ``decode_responses=True``
    (the epoch marker and a refusal's owner come back as ``str``)."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    s = RedisStore(r, RedisKeys(unique_prefix))
    s.put_hint(hint("x", 10, vc="a"))
    assert s.flush() == 1 and s.take_empty()
    s.put_hint(hint("x", 1, vc="b"))  # x is a's: refused
    s.flush()
    assert s.vc_conflicts == 1 and not s.take_empty()
    assert r.zrange(s.k.queue("default", "a"), 0, -1) == ["x"]
    r.zadd(s.k.queue("default", "a"), {"stale": 1})  # its hint expired
    assert s.sweep_stale() == 1


def test_sweep_drops_a_member_whose_hint_is_another_vcs(store: RedisStore) -> None:
    """x was VC b's, its hint expired, then VC a hinted x: b's queue still lists x, and
    as x has a hint, a sweep that only asks whether the hint exists never drops it."""
    store.put_hint(hint("x", 10, vc="a"))
    store.put_hint(hint("y", 20, vc="b"))
    store.flush()
    store.r.zadd(store.k.queue("default", "b"), {"x": 99})  # the member left behind
    assert store.sweep_stale() == 1
    assert store.r.zrange(store.k.queue("default", "b"), 0, -1) == [b"y"]
    assert store.r.zrange(store.k.queue("default", "a"), 0, -1) == [b"x"]
