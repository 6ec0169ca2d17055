"""``gpuhint.redis.client`` reads back what the Redis store writes, from a real Redis."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from gpuhint.redis.client import Change, HintClient, QueueEntry, UnreadableValue
from gpuhint.redis.store import RedisStore
from gpuhint.wire.contract import ClusterLoad, PowerAction, PowerAdvisory, PriorityHint
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration


def hint(job: str, prio: float, vc: str = "a", cluster: str = "c") -> PriorityHint:
    return PriorityHint(
        job_id=job,
        cluster=cluster,
        vc=vc,
        num_gpus=2,
        submit_time=0,
        predicted_duration_s=prio / 2,
        priority=prio,
        model="m",
        model_version="1",
        created_at=0,
    )


@pytest.fixture
def pair(redis_url: str, unique_prefix: str) -> tuple[RedisStore, HintClient]:
    r = redis.Redis.from_url(redis_url)
    return RedisStore(r, RedisKeys(unique_prefix)), HintClient(r, key_prefix=unique_prefix)


def test_queue_hints_and_vcs(pair: tuple[RedisStore, HintClient]) -> None:
    store, c = pair
    for job, prio, vc in [("big", 900, "a"), ("small", 30, "a"), ("mid", 300, "a"), ("o", 5, "b")]:
        store.put_hint(hint(job, prio, vc))
    store.put_hint(hint("elsewhere", 1, "a", cluster="d"))
    store.flush()

    assert c.queue("c", "a") == [
        QueueEntry("small", 30.0),
        QueueEntry("mid", 300.0),
        QueueEntry("big", 900.0),
    ]
    assert [e.job_id for e in c.queue("c", "a", limit=2)] == ["small", "mid"]
    assert c.queue("c", "a", limit=0) == [] and c.queue("c", "nope") == []
    assert c.vcs("c") == ["a", "b"] and c.vcs("d") == ["a"] and c.vcs("none") == []
    h = c.hint("c", "mid")
    assert h is not None and h.priority == 300 and h.predicted_duration_s == 150
    assert c.hint("c", "missing") is None and c.hint("d", "mid") is None
    assert [h.job_id for h in c.pending_hints("c")] == ["small", "mid", "big", "o"]
    assert [h.job_id for h in c.pending_hints("c", vc="b")] == ["o"]

    store.remove_hint("c", "a", "small")
    store.flush()
    assert [e.job_id for e in c.queue("c", "a")] == ["mid", "big"]
    assert c.hint("c", "small") is None


def test_pending_hints_skip_expired_members(pair: tuple[RedisStore, HintClient]) -> None:
    store, c = pair
    store.put_hint(hint("kept", 10))
    store.put_hint(hint("gone", 20))
    store.flush()
    c.r.delete(c.keys.hint("c", "gone"))  # the hint key expired; the queue is swept later
    assert [h.job_id for h in c.pending_hints("c")] == ["kept"]


def test_a_hint_this_version_cannot_read_is_listed_not_raised_for_the_appliers(
    pair: tuple[RedisStore, HintClient],
) -> None:
    """A newer worker's hint (one more field) in the queue: a plain read says so; the
    appliers' read lists its key and goes on, and the SiteFactor pass gives it neutral."""
    from gpuhint.cli.slurm_hints import _ClientHints
    from gpuhint.slurm.priority import PriorityApplier, SlurmJob

    store, c = pair
    for job, prio in (("small", 60), ("mid", 1e5), ("big", 1e7), ("new", 5)):
        store.put_hint(hint(job, prio))
    store.flush()
    raw = hint("new", 5).model_dump_json()[:-1] + ',"a_later_field":1}'
    c.r.set(c.keys.hint("c", "new"), raw)
    with pytest.raises(UnreadableValue):
        c.pending_hints("c")
    bad: list[str] = []
    assert [h.job_id for h in c.pending_hints("c", unreadable=bad)] == ["small", "mid", "big"]
    assert bad == [c.keys.hint("c", "new")]

    class Slurm:
        def __init__(self) -> None:
            self.factor: dict[str, str] = {}

        def queue(self) -> list[SlurmJob]:
            return [SlurmJob(j, "PENDING") for j in ("small", "mid", "big", "new")]

        def apply(self, lines: list[str]) -> list[str]:
            for line in lines:
                ids, f = line.removeprefix("update jobid=").split(" SiteFactor=")
                self.factor.update(dict.fromkeys(ids.split(","), f))
            return []

    slurm = Slurm()
    r = PriorityApplier(slurm, _ClientHints(c), "c", wall=lambda: 0.0).run_pass()
    f = {j: int(v) for j, v in slurm.factor.items()}
    assert f["new"] == r.neutral_factor and f["small"] > f["new"] > f["big"]


def test_advice_and_load(pair: tuple[RedisStore, HintClient]) -> None:
    store, c = pair
    assert c.cluster_advice("c") is None and c.load("c") is None
    store.put_advisory(
        PowerAdvisory(
            cluster="c", time=1, action=PowerAction.POWER_DOWN, count=1, nodes=("n3",), reason="r"
        )
    )
    store.put_advisory(
        PowerAdvisory(cluster="c", node="n3", time=1, action=PowerAction.POWER_DOWN, reason="r")
    )
    store.put_load(ClusterLoad(cluster="c", time=1, total_nodes=4, active_nodes=3, used_nodes=2))
    store.flush()
    adv = c.cluster_advice("c")
    assert adv is not None and adv.nodes == ("n3",) and adv.node is None
    node = c.node_advice("c", "n3")
    assert node is not None and node.action is PowerAction.POWER_DOWN
    assert c.node_advice("c", "n1") is None
    load = c.load("c")
    assert load is not None and load.used_nodes == 2


def test_unreadable_value_names_the_key(pair: tuple[RedisStore, HintClient]) -> None:
    _, c = pair
    key = c.keys.hint("c", "j")
    c.r.set(key, '{"schema_version": 2}')
    with pytest.raises(UnreadableValue, match=key):
        c.hint("c", "j")


def test_changes_resume_and_block(pair: tuple[RedisStore, HintClient]) -> None:
    store, c = pair
    assert c.last_change_id() == "0-0" and c.first_change_id() == "0-0"
    assert list(c.changes()) == []
    for i in range(5):
        store.put_hint(hint(f"j{i}", i + 1))
    store.remove_hint("c", "a", "j0")
    store.flush()

    everything = list(c.changes(count=2))  # several reads of 2
    assert [ch.type for ch in everything] == ["hint"] * 5 + ["hint_removed"]
    assert all(isinstance(ch, Change) and ch.cluster == "c" for ch in everything)
    assert everything[0].fields["job_id"] == "j0" and everything[0].fields["vc"] == "a"
    assert c.last_change_id() == everything[-1].id
    assert c.first_change_id() == everything[0].id
    resumed = list(c.changes(after=everything[2].id))
    assert resumed == everything[3:]

    # block_ms: a change written while waiting arrives; then a quiet wait ends the iterator
    last = c.last_change_id()

    def later() -> None:
        time.sleep(0.3)
        store.put_load(
            ClusterLoad(cluster="c", time=2, total_nodes=1, active_nodes=1, used_nodes=0)
        )
        store.flush()

    t = threading.Thread(target=later)
    t.start()
    t0 = time.monotonic()
    got = list(c.changes(after=last, block_ms=1500))
    t.join()
    assert [ch.type for ch in got] == ["load"]
    assert 1.5 <= time.monotonic() - t0 < 10  # waited once more, found nothing, stopped

    with pytest.raises(ValueError):
        list(c.changes(count=0))


def test_from_url(redis_url: str, unique_prefix: str) -> None:
    with HintClient.from_url(redis_url, key_prefix=unique_prefix) as c:
        assert c.queue("c", "a") == [] and c.keys.prefix == unique_prefix
    with pytest.raises(ValueError):
        HintClient.from_url("http://nope")


def test_docs_lua_example_reads_the_queue_head(pair: tuple[RedisStore, HintClient]) -> None:
    """The Lua example of docs/redis-keys.md returns job, priority and hint, in order."""
    store, c = pair
    text = (Path(__file__).resolve().parents[2] / "docs" / "redis-keys.md").read_text()
    lua = text.split("```lua\n", 1)[1].split("```", 1)[0]
    for job, prio in [("big", 900), ("small", 30), ("mid", 300)]:
        store.put_hint(hint(job, prio))
    store.flush()
    c.r.delete(c.keys.hint("c", "mid"))  # an expired hint comes back as false (None)
    rows = c.r.eval(lua, 1, c.keys.queue("c", "a"), c.keys.hint("c", ""), 2)
    assert [(r[0], float(r[1])) for r in rows] == [(b"small", 30.0), (b"mid", 300.0)]
    assert PriorityHint.model_validate_json(rows[0][2]).job_id == "small"
    assert rows[1][2] is None  # the hint of "mid" expired: a nil in the reply


def test_merged_queue_reads_spread_sub_vcs_as_one(pair: tuple[RedisStore, HintClient]) -> None:
    """``replay --spread-vcs`` sub-VCs ``<vc>~k`` merge back into one queue by priority."""
    store, c = pair
    for job, prio, vc in [
        ("a1", 50, "default~0"),
        ("b1", 10, "default~3"),
        ("a2", 70, "default~0"),
    ]:
        store.put_hint(hint(job, prio, vc))
    store.put_hint(hint("plain", 30, "default"))
    store.put_hint(hint("other", 1, "defaultx"))  # another VC whose name only starts alike
    store.flush()
    assert [e.job_id for e in c.merged_queue("c", "default")] == ["b1", "plain", "a1", "a2"]
    assert c.merged_queue("c", "default", limit=2) == [
        QueueEntry("b1", 10.0),
        QueueEntry("plain", 30.0),
    ]
    assert c.merged_queue("c", "default", limit=0) == [] and c.merged_queue("c", "none") == []
    assert c.queue("c", "default~0") == [QueueEntry("a1", 50.0), QueueEntry("a2", 70.0)]


def test_a_blocked_read_waits_less_than_the_socket_timeout(
    redis_url: str, unique_prefix: str
) -> None:
    """A client with a short socket timeout still follows the stream: each blocked read
    is shorter than the timeout, so a quiet wait ends the iterator instead of raising."""
    with HintClient.from_url(redis_url, key_prefix=unique_prefix, socket_timeout=2.0) as c:
        t0 = time.monotonic()
        assert list(c.changes(block_ms=2500)) == []
        assert 2.5 <= time.monotonic() - t0 < 15


def test_stats_skip_a_field_that_is_not_a_counter(pair: tuple[RedisStore, HintClient]) -> None:
    """A newer worker's stats field that is not an integer counter is left out, not fatal."""
    store, c = pair
    store.count("dead_letter", 3)
    store.flush()
    c.r.hset(c.keys.stats, mapping={"last_rebuild": "2026-12-07T12:00Z", "rate": "0.5"})
    assert c.stats() == {"dead_letter": 3}


def test_following_from_dollar_misses_nothing_between_two_reads(
    redis_url: str, unique_prefix: str
) -> None:
    """``after="$"`` (only what comes next) is taken once, at the start: a change written
    between two of the iterator's reads is still yielded, not lost to a new ``$``."""
    with HintClient.from_url(redis_url, key_prefix=unique_prefix) as c:
        c.r.xadd(c.keys.changes, {"type": "load", "cluster": "old"})
        read = c.r.xread
        calls = 0

        def xread(*args: object, **kwargs: object) -> object:
            nonlocal calls
            got = read(*args, **kwargs)  # type: ignore[arg-type]
            calls += 1
            if calls == 1:  # the first read found nothing new: a change comes now
                c.r.xadd(c.keys.changes, {"type": "load", "cluster": "new"})
            return got

        c.r.xread = xread  # type: ignore[method-assign]
        got = list(c.changes(after="$", block_ms=1000))
        assert [ch.cluster for ch in got] == ["new"]


def test_pending_hints_skip_a_member_left_in_another_vcs_queue(
    pair: tuple[RedisStore, HintClient],
) -> None:
    """x was VC b's, its hint expired, then VC a hinted x: the member left in b's queue
    (the sweep keeps it, x has a hint) must not list a's hint twice, once under b."""
    store, c = pair
    store.put_hint(hint("x", 10, vc="a"))
    store.put_hint(hint("y", 20, vc="b"))
    store.flush()
    c.r.zadd(c.keys.queue("c", "b"), {"x": 99})  # the stale member
    assert [(h.job_id, h.vc) for h in c.pending_hints("c")] == [("x", "a"), ("y", "b")]
    assert [h.job_id for h in c.pending_hints("c", vc="b")] == ["y"]


def test_hints_reads_many_in_order_with_gaps_and_junk(pair: tuple[RedisStore, HintClient]) -> None:
    store, c = pair
    store.put_hint(hint("j1", 10))
    store.flush()
    c.r.set(c.keys.hint("c", "junk"), "{}")
    got = c.hints("c", ["none", "j1", "junk"])
    assert got[0] is None and isinstance(got[1], PriorityHint) and got[1].job_id == "j1"
    assert isinstance(got[2], UnreadableValue) and got[2].key == c.keys.hint("c", "junk")
