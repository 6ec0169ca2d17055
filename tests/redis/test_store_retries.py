"""The Redis store's writes applied again (lost scripts, replays) stay exactly once, and
its keys keep their TTLs: on a real Redis server."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

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
    entries: Any = s.r.xrange(s.k.changes)
    return Counter(f[b"type"].decode() for _, f in entries)


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


def lose_next_reply(monkeypatch: pytest.MonkeyPatch, s: RedisStore) -> None:
    """The next pipeline runs on Redis but its reply is lost (a timeout, a dropped
    connection after Redis executed it): ``execute()`` raises as redis-py then does."""
    real = s.r.pipeline
    armed = [True]

    def pipeline(transaction: bool = True) -> Any:
        pipe = real(transaction=transaction)
        run = pipe.execute

        def execute(raise_on_error: bool = True) -> list[Any]:
            out = run(raise_on_error=raise_on_error)
            if armed[0]:
                armed[0] = False
                raise redis.ConnectionError("Connection closed by server.")
            return out

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe

    monkeypatch.setattr(s.r, "pipeline", pipeline)


def test_a_batch_sent_again_after_a_lost_reply_is_applied_once(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis ran the batch but its reply was lost: the retry (the sink's, or redis-py's
    own) sends it again. No counter counts twice, no change is announced twice."""
    store.put_hint(hint("x", 10, vc="a"))
    store.flush()
    store.take_empty()  # a fresh Redis
    lose_next_reply(monkeypatch, store)
    store.count("dead_letter")
    store.put_advisory(PowerAdvisory(time=1, action=PowerAction.KEEP, reason="r"))
    store.put_load(ClusterLoad(time=1, total_nodes=4, active_nodes=3, used_nodes=2))
    store.put_hint(hint("x", 1, vc="b"))  # x is a's: refused and counted
    store.put_hint(hint("y", 2))
    store.mark_rebuilt(0)
    with pytest.raises(redis.ConnectionError):
        store.flush()
    assert store.pending == 6  # held for the retry
    assert store.flush() == 6
    assert not store.take_empty()  # nothing acknowledged was lost: no rebuild
    assert store.r.hgetall(store.k.stats) == {b"dead_letter": b"1", b"hint_vc_conflicts": b"1"}
    assert change_types(store) == Counter({"hint": 2, "advice": 1, "load": 1, "rebuilt": 1})
    store.count("dead_letter")  # later writes still count
    store.put_advisory(PowerAdvisory(time=2, action=PowerAction.KEEP, reason="r"))
    store.flush()
    assert store.r.hget(store.k.stats, "dead_letter") == b"2"
    assert change_types(store)["advice"] == 2


def restore(s: RedisStore, snapshot: dict[Any, tuple[Any, int]]) -> None:
    """Put the store's keys back as they were in ``snapshot`` (Redis restarted from an
    older RDB/AOF: the marker is there, the writes made since are not)."""
    for k in s.r.scan_iter(match=f"{s.k.root}:*"):
        s.r.delete(k)
    for k, (dump, ttl) in snapshot.items():
        s.r.restore(k, max(ttl, 0), dump)


def snapshot(s: RedisStore) -> dict[Any, tuple[Any, int]]:
    return {k: (s.r.dump(k), s.r.pttl(k)) for k in s.r.scan_iter(match=f"{s.k.root}:*")}


def test_redis_restored_from_an_older_snapshot_is_detected(store: RedisStore) -> None:
    """Redis came back from an RDB/AOF older than the last flush: the epoch marker is
    the one the worker knew, but its last hints are gone. The flush tells it (reason
    ``redis_rollback``) so the sink rewrites them from state."""
    from gpuhint.cores.pipeline.store_flush import Sink

    store.put_hint(hint("old", 1))
    store.flush()
    store.take_empty()
    old = snapshot(store)
    store.put_hint(hint("new", 2))
    store.flush()
    assert not store.take_empty()
    restore(store, old)
    rebuilt: list[int] = []

    def rebuild() -> int:
        rebuilt.append(1)
        store.put_hint(hint("old", 1), rebuilt=True)
        store.put_hint(hint("new", 2), rebuilt=True)
        return 2

    sink = Sink(store, rebuild)
    sink.epochs[0] = store.epoch_seen  # this process has written everything under it
    store.count("x")
    asyncio.run(sink.flush())
    assert rebuilt == [1] and sink.rebuilds == 1
    assert store.r.zrange(store.k.queue("default", "a"), 0, -1) == [b"old", b"new"]
    last: Any = store.r.xrevrange(store.k.changes, count=1)
    assert last[0][1] == {b"type": b"rebuilt", b"hints": b"2", b"reason": b"redis_rollback"}
    store.count("x")
    asyncio.run(sink.flush())
    assert rebuilt == [1]  # nothing lost since


def test_a_snapshot_newer_than_the_last_flush_is_no_rollback(store: RedisStore) -> None:
    """A restart from a snapshot that holds everything the worker wrote loses nothing:
    no rebuild."""
    store.put_hint(hint("a1", 1))
    store.flush()
    store.take_empty()
    restore(store, snapshot(store))
    store.put_hint(hint("a2", 2))
    store.flush()
    assert not store.take_empty()


def test_a_write_that_failed_mid_batch_is_applied_when_the_batch_is_sent_again(
    store: RedisStore,
) -> None:
    """Redis pipelines are not transactions: one write of a batch can fail (OOM, a key of
    the wrong type) while the writes after it are applied. When the batch is sent again
    the failed write must be applied and the others not twice; a watermark of the
    highest write applied would skip the failed one for good."""
    store.r.set(store.k.stats, "not a hash")  # the counter's write fails (WRONGTYPE)
    store.count("dead_letter")
    store.put_advisory(PowerAdvisory(time=1, action=PowerAction.KEEP, reason="r"))
    store.put_hint(hint("x", 10, vc="a"))
    store.put_hint(hint("x", 1, vc="b"))  # x is a's: refused, counted (fails too)
    store.put_load(ClusterLoad(time=1, total_nodes=4, active_nodes=3, used_nodes=2))
    with pytest.raises(redis.ResponseError):
        store.flush()
    assert change_types(store) == Counter({"advice": 1, "hint": 1, "load": 1})
    store.r.delete(store.k.stats)  # the cause is gone
    assert store.flush() == 5
    assert store.r.hgetall(store.k.stats) == {b"dead_letter": b"1", b"hint_vc_conflicts": b"1"}
    assert change_types(store) == Counter({"advice": 1, "hint": 1, "load": 1})
    store.count("dead_letter")  # the next batch counts as usual
    store.flush()
    assert store.r.hget(store.k.stats, "dead_letter") == b"2"


def test_a_hint_whose_change_entry_failed_is_announced_when_the_batch_is_sent_again(
    store: RedisStore,
) -> None:
    """A hint script whose XADD fails (the change stream's key of another type) must not
    leave the hint written but unannounced: sent again it would be a re-emit, never
    announced. Lua does not roll back the writes before the error."""
    store.put_hint(hint("u", 5))
    store.flush()
    store.r.set(store.k.changes, "not a stream")
    store.put_hint(hint("n", 1))
    store.update_hint(hint("u", 2))
    store.remove_hint("default", "a", "u")
    with pytest.raises(redis.ResponseError):
        store.flush()
    store.r.delete(store.k.changes)  # the cause is gone
    assert store.flush() == 3
    assert change_types(store) == Counter({"hint": 1, "hint_updated": 1, "hint_removed": 1})
