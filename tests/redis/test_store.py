"""The Redis store on a real Redis server: same behaviour as its in-memory twin."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import redis

from gpuhint.cores.sink import HintStore, InMemoryStore
from gpuhint.redis.client import HintClient
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


class ReadableRedisStore(RedisStore):
    """The store under test, read back through :class:`HintClient`, the one Redis reader
    (the product's store only writes), so it answers like its in-memory twin."""

    def __init__(self, r: redis.Redis, keys: RedisKeys, **kwargs: Any) -> None:
        super().__init__(r, keys, **kwargs)
        self.reader = HintClient(r, key_prefix=keys.prefix)

    def get_hint(self, cluster: str, job_id: str) -> PriorityHint | None:
        return self.reader.hint(cluster, job_id)

    def queue(self, cluster: str, vc: str) -> list[tuple[str, float]]:
        return [(e.job_id, e.priority) for e in self.reader.queue(cluster, vc)]

    def get_advisory(self, cluster: str, node: str | None = None) -> PowerAdvisory | None:
        if node is None:
            return self.reader.cluster_advice(cluster)
        return self.reader.node_advice(cluster, node)

    def get_load(self, cluster: str) -> ClusterLoad | None:
        return self.reader.load(cluster)

    def counters(self) -> dict[str, int]:
        return self.reader.stats()


@pytest.fixture
def store(redis_url: str, unique_prefix: str) -> ReadableRedisStore:
    r = redis.Redis.from_url(redis_url)
    return ReadableRedisStore(r, RedisKeys(unique_prefix), hint_ttl_s=60)


def scenario(s: HintStore) -> None:
    for j, p in [("big", 100), ("small", 1), ("mid", 10), ("other", 7)]:
        s.put_hint(hint(j, p, vc="b" if j == "other" else "a"))
    s.remove_hint("default", "a", "mid")
    s.remove_hint("default", "a", "ghost")
    s.put_advisory(PowerAdvisory(time=1, action=PowerAction.KEEP, reason="r"))
    s.put_advisory(PowerAdvisory(time=1, node="n1", action=PowerAction.POWER_DOWN, reason="idle"))
    s.put_load(ClusterLoad(time=1, total_nodes=4, active_nodes=3, used_nodes=2))
    s.count("dead_letter", 2)
    s.flush()


def test_redis_store_matches_its_in_memory_twin(store: ReadableRedisStore) -> None:
    twin = InMemoryStore()
    for s in (store, twin):
        scenario(s)
        assert s.queue("default", "a") == [("small", 1.0), ("big", 100.0)]
        assert s.queue("default", "b") == [("other", 7.0)]
        assert s.get_hint("default", "small") == hint("small", 1)
        assert s.get_hint("default", "mid") is None
        assert s.get_advisory("default").action is PowerAction.KEEP  # type: ignore[union-attr]
        assert s.get_advisory("default", "n1").action is PowerAction.POWER_DOWN  # type: ignore[union-attr]
        assert s.get_load("default").used_nodes == 2  # type: ignore[union-attr]
        assert s.counters() == {"dead_letter": 2}


def test_change_stream_and_ttls(store: ReadableRedisStore) -> None:
    scenario(store)
    entries = store.r.xrange(store.k.changes)
    types = [fields[b"type"].decode() for _, fields in entries]
    # 4 hints, 1 real removal (the ghost is not announced), 2 advisories, 1 load
    assert types.count("hint") == 4 and types.count("hint_removed") == 1
    assert types.count("advice") == 2 and types.count("load") == 1
    assert 0 < store.r.ttl(store.k.hint("default", "small")) <= 60
    assert store.r.ttl(store.k.queue("default", "a")) > 0


def test_replay_writes_the_same_state(store: ReadableRedisStore) -> None:
    scenario(store)
    before = {
        k: store.r.dump(k)
        for k in store.r.scan_iter(f"{store.k.root}:*")
        if b"changes" not in k and b"stats" not in k and b":writer:" not in k
    }
    scenario(store)
    after = {
        k: store.r.dump(k)
        for k in store.r.scan_iter(f"{store.k.root}:*")
        if b"changes" not in k and b"stats" not in k and b":writer:" not in k
    }
    assert before == after


def test_sweep_drops_queue_entries_whose_hint_expired(store: ReadableRedisStore) -> None:
    store.put_hint(hint("short", 1))
    store.put_hint(hint("long", 2))
    store.flush()
    store.r.pexpire(store.k.hint("default", "short"), 1)
    time.sleep(0.05)
    assert store.sweep_stale() == 1
    assert store.queue("default", "a") == [("long", 2.0)]


def test_epoch_marker_tells_each_worker_that_redis_lost_its_data(
    redis_url: str, unique_prefix: str
) -> None:
    keys = RedisKeys(unique_prefix)
    a, b = (ReadableRedisStore(redis.Redis.from_url(redis_url), keys) for _ in range(2))
    for s in (a, b):
        s.count("x")
        s.flush()
    assert a.take_empty() and a.empty_reason == "redis_empty"  # a fresh Redis
    assert not b.take_empty()  # b found a's marker
    a.count("x")
    a.flush()
    assert not a.take_empty()
    r = redis.Redis.from_url(redis_url)
    for k in r.scan_iter(match=f"{keys.root}:*"):
        r.delete(k)  # Redis restarted empty
    for s in (a, b):  # a re-creates the marker first; b sees it is not the one it knew
        s.count("x")
        s.flush()
        assert s.take_empty() and s.empty_reason == "redis_empty"
    a.mark_rebuilt(3)
    a.flush()
    last = r.xrevrange(keys.changes, count=1)[0][1]
    assert last == {b"type": b"rebuilt", b"hints": b"3", b"reason": b"redis_empty"}


def test_read_epoch_learns_the_marker_without_writing(redis_url: str, unique_prefix: str) -> None:
    """A process whose first flush has nothing to write still learns Redis's epoch (the
    sink then rebuilds what it owns: it cannot know what happened since its state was
    saved), and a fresh Redis gets its marker from it."""
    keys = RedisKeys(unique_prefix)
    a, b = (ReadableRedisStore(redis.Redis.from_url(redis_url), keys) for _ in range(2))
    a.read_epoch()
    assert a.take_empty() and a.epoch_seen is not None  # a fresh Redis: a made the marker
    b.read_epoch()
    assert not b.take_empty() and b.epoch_seen == a.epoch_seen
    assert b.counters() == {} and b.queue("default", "a") == []  # nothing else written


def test_a_write_behind_a_sink_never_reaches_redis(redis_url: str, unique_prefix: str) -> None:
    from gpuhint.cores.pipeline.store_flush import Sink

    s = ReadableRedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix), max_buffer=2)
    Sink(s, lambda: 0)
    for i in range(5):
        s.put_hint(hint(f"j{i}", i))
    assert s.pending == 5 and s.queue("default", "a") == []  # held for the sink's flush
    assert s.flush() == 5 and len(s.queue("default", "a")) == 5


def test_update_hint_moves_a_waiting_job_and_announces_it(
    store: ReadableRedisStore, redis_url: str, unique_prefix: str
) -> None:
    twin = InMemoryStore()
    for s in (store, twin):
        s.put_hint(hint("a1", 100))
        s.put_hint(hint("a2", 50))
        s.flush()
        s.update_hint(hint("a1", 10))  # a sibling finished: a1 is short after all
        s.update_hint(hint("gone", 1))  # started meanwhile: nothing to move
        s.flush()
        assert s.queue("default", "a") == [("a1", 10.0), ("a2", 50.0)]
        assert s.get_hint("default", "a1") == hint("a1", 10)
        assert s.get_hint("default", "gone") is None
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    entries = r.xrange(RedisKeys(unique_prefix).changes)
    updated = [f for _, f in entries if f["type"] == "hint_updated"]
    assert updated == [
        {
            "type": "hint_updated",
            "cluster": "default",
            "vc": "a",
            "job_id": "a1",
            "priority": "10.0",
        }
    ]
    assert [c.type for c in twin.changes] == ["hint", "hint", "hint_updated"]


def test_scripts_lost_by_redis_are_loaded_again_and_the_batch_applied(
    store: ReadableRedisStore,
) -> None:
    store.put_hint(hint("a1", 5))
    store.put_hint(hint("a2", 6))
    store.flush()  # loads the scripts once
    store.r.script_flush()  # as a Redis restart does: EVALSHA now answers NOSCRIPT
    store.remove_hint("default", "a", "a1")
    store.update_hint(hint("a2", 1))
    store.put_hint(hint("a3", 3))
    assert store.flush() == 3
    assert store.queue("default", "a") == [("a2", 1.0), ("a3", 3.0)]
    assert store.get_hint("default", "a1") is None
    assert store.r.script_exists(store._remove.sha, store._update.sha) == [True, True]


# -- a job id belongs to the VC that first hinted it while its hint lives ---------------


def _types(s: HintStore) -> list[tuple[str, str]]:
    """The change stream as (type, job_id), of either store."""
    if isinstance(s, InMemoryStore):
        return [(c.type, c.key) for c in s.changes if c.type.startswith("hint")]
    entries = s.r.xrange(s.k.changes)  # type: ignore[attr-defined]
    return [
        (f[b"type"].decode(), f[b"job_id"].decode())
        for _, f in entries
        if f[b"type"].startswith(b"hint")
    ]


def test_a_vc_cannot_clobber_another_vcs_hint(
    store: ReadableRedisStore, caplog: pytest.LogCaptureFixture
) -> None:
    twin = InMemoryStore()
    for s in (store, twin):
        s.put_hint(hint("x", 10, vc="a"))
        s.put_hint(hint("y", 20, vc="a"))
        s.flush()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            s.remove_hint("default", "b", "x")  # a started x sent under VC b
            s.put_hint(hint("x", 1, vc="b"))  # a submitted x under VC b
            s.update_hint(hint("x", 2, vc="b"))
            s.flush()
        assert s.get_hint("default", "x") == hint("x", 10, vc="a")
        assert s.queue("default", "a") == [("x", 10.0), ("y", 20.0)]
        assert s.queue("default", "b") == []
        assert s.counters() == {"hint_vc_conflicts": 3}
        warned = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1  # once per flush
        assert "3" in warned[0].getMessage() and "'x'" in warned[0].getMessage()
        assert "VC 'b'" in warned[0].getMessage() and "VC 'a'" in warned[0].getMessage()
        # the owner's own writes still apply; once its hint is gone, x is anyone's
        s.update_hint(hint("x", 5, vc="a"))
        s.remove_hint("default", "a", "y")
        s.flush()
        assert s.queue("default", "a") == [("x", 5.0)]
        s.remove_hint("default", "a", "x")
        s.put_hint(hint("x", 3, vc="b"))
        s.flush()
        assert s.queue("default", "a") == [] and s.queue("default", "b") == [("x", 3.0)]
        assert s.counters() == {"hint_vc_conflicts": 3}
    assert (
        _types(store)
        == _types(twin)
        == [
            ("hint", "x"),
            ("hint", "y"),
            ("hint_updated", "x"),
            ("hint_removed", "y"),
            ("hint_removed", "x"),
            ("hint", "x"),
        ]
    )


def test_a_refused_removal_still_clears_the_events_own_queue(store: ReadableRedisStore) -> None:
    twin = InMemoryStore()
    for s in (store, twin):
        s.put_hint(hint("x", 10, vc="b"))
        s.flush()
        s.remove_hint("default", "b", "x")
        s.put_hint(hint("x", 4, vc="a"))  # x now belongs to a
        s.flush()
        if isinstance(s, RedisStore):  # a stale member of b's queue (as after a crash)
            s.r.zadd(s.k.queue("default", "b"), {"x": 10})
        else:
            s.queues[("default", "b")]["x"] = 10
        s.remove_hint("default", "b", "x")
        s.flush()
        assert s.queue("default", "b") == [] and s.queue("default", "a") == [("x", 4.0)]
        assert s.counters() == {"hint_vc_conflicts": 1}


def test_an_identical_hint_is_rewritten_without_a_new_change(store: ReadableRedisStore) -> None:
    twin = InMemoryStore()
    for s in (store, twin):
        s.put_hint(hint("x", 10))
        s.flush()
        s.put_hint(hint("x", 10))  # a re-emit of an already-applied event
        s.flush()
        assert _types(s) == [("hint", "x")]
        s.put_hint(hint("x", 12))  # a new hint is announced
        s.flush()
        assert _types(s) == [("hint", "x"), ("hint", "x")]
        assert s.queue("default", "a") == [("x", 12.0)]
    # the TTL is still refreshed by the silent rewrite
    store.r.expire(store.k.hint("default", "x"), 5)
    store.put_hint(hint("x", 12))
    store.flush()
    assert store.r.ttl(store.k.hint("default", "x")) > 5
    # a queue member lost meanwhile (swept) is written back and announced
    for s in (store, twin):
        if isinstance(s, RedisStore):
            s.r.zrem(s.k.queue("default", "a"), "x")
        else:
            del s.queues[("default", "a")]["x"]
        s.put_hint(hint("x", 12))
        s.flush()
        assert s.queue("default", "a") == [("x", 12.0)]
        assert len(_types(s)) == 3


def test_rebuild_after_redis_came_back_empty_still_writes(store: ReadableRedisStore) -> None:
    twin = InMemoryStore()
    for s in (store, twin):
        s.put_hint(hint("x", 10))
        s.flush()
        if isinstance(s, RedisStore):
            for k in s.r.scan_iter(match=f"{s.k.root}:*"):
                s.r.delete(k)
        else:
            s.wipe()
        s.put_hint(hint("x", 10), rebuilt=True)
        s.flush()
        assert s.take_empty()
        assert s.queue("default", "a") == [("x", 10.0)]
        assert s.get_hint("default", "x") == hint("x", 10)
        assert _types(s) == [("hint", "x")]
