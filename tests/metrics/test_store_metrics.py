"""The metered Redis store counts writes on a real Redis and failures on a dead one."""

from __future__ import annotations

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

from gpuhint.lab.local.scrape import samples, value
from gpuhint.lab.local.services import free_port
from gpuhint.metrics.state import RedisStateCollector
from gpuhint.metrics.store import MeteredRedisStore
from gpuhint.redis.client import HintClient
from gpuhint.wire.contract import ClusterLoad, PowerAction, PowerAdvisory, PriorityHint
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration


def _hint(job: str, vc: str) -> PriorityHint:
    return PriorityHint(
        job_id=job, cluster="c", vc=vc, num_gpus=1, submit_time=0,
        predicted_duration_s=10, priority=10, model="m", model_version="1", created_at=0,
    )  # fmt: skip


def test_counts_writes_energy_and_state(redis_url: str, unique_prefix: str) -> None:
    r = redis.Redis.from_url(redis_url)
    store = MeteredRedisStore(r, RedisKeys(unique_prefix), watts_per_node=500, slot_s=720)
    for job, vc in [("a", "v1"), ("b", "v1"), ("c", "v2")]:
        store.put_hint(_hint(job, vc))
    store.remove_hint("c", "v1", "a")
    store.update_hint(_hint("b", "v1"))  # a waiting job re-ranked
    store.put_hint(_hint("c", "v2"), rebuilt=True)  # re-written from state: counted apart
    store.put_advisory(
        PowerAdvisory(
            cluster="c", time=0, action=PowerAction.POWER_DOWN, count=2, nodes=("n3", "n4"),
            reason="idle", forecast_nodes=1.5, forecast_upper_nodes=2.0, est_energy_saved_kwh=0.7,
        )
    )  # fmt: skip
    store.put_advisory(
        PowerAdvisory(cluster="c", node="n3", time=0, action=PowerAction.POWER_DOWN, reason="i")
    )
    # 4 nodes, 2 powered on: 2 off for one 720 s slot at 500 W = 0.2 kWh
    store.put_load(ClusterLoad(cluster="c", time=0, total_nodes=4, active_nodes=2, used_nodes=1))
    store.flush()
    assert dict(store.writes) == {
        "hint": 3,
        "hint_rebuild": 1,
        "hint_update": 1,
        "hint_remove": 1,
        "advice": 2,
        "load": 1,
    }
    assert store.advisories[("power_down", "cluster")] == 1
    assert store.advisories[("power_down", "node")] == 1
    assert store.energy_saved_kwh == {"c": pytest.approx(0.2)}
    assert store.redis_errors == 0 and store.failing_since is None

    reg = CollectorRegistry()
    reg.register(RedisStateCollector(HintClient(r, key_prefix=unique_prefix), cache_s=0))
    got = samples(generate_latest(reg).decode())
    assert value(got, "gpuhint_redis_up") == 1
    assert value(got, "gpuhint_queue_length", cluster="c", vc="v1") == 1
    assert value(got, "gpuhint_queue_length", cluster="c", vc="v2") == 1
    assert value(got, "gpuhint_cluster_nodes", cluster="c", state="off") == 2
    assert value(got, "gpuhint_power_advice_nodes", cluster="c", action="power_down") == 2
    assert value(got, "gpuhint_power_forecast_nodes", cluster="c", bound="upper") == 2
    assert value(got, "gpuhint_power_advice_energy_saved_kwh", cluster="c") == 0.7


def test_redis_down_is_counted_and_writes_kept() -> None:
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.5)
    store = MeteredRedisStore(dead)
    store.put_hint(_hint("a", "v"))
    with pytest.raises(redis.ConnectionError):
        store.flush()
    assert store.redis_errors == 1 and store.failing_since is not None
    assert "ConnectionError" in store.last_error
    assert store.pending == 1 and not store.writes  # kept for the retry, not counted
    reg = CollectorRegistry()
    reg.register(RedisStateCollector(HintClient(dead), cache_s=0))
    assert value(samples(generate_latest(reg).decode()), "gpuhint_redis_up") == 0


def test_start_forecasts_are_not_counted_as_counters(redis_url: str, unique_prefix: str) -> None:
    """``op="counter"`` is the stats hash (dead letters...); a VC's expected starts are
    their own kind of write, and both are exported."""
    from gpuhint.metrics.worker import WorkerCollector
    from gpuhint.wire.contract import StartForecasts

    store = MeteredRedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    store.put_starts(StartForecasts(cluster="c", vc="v", time=0))
    store.count("dead_letter")
    store.flush()
    assert dict(store.writes) == {"starts": 1, "counter": 1}
    writes = next(
        m for m in WorkerCollector(None, store)._store() if m.name == "gpuhint_redis_writes"
    )
    by_op = {s.labels["op"]: s.value for s in writes.samples}
    assert by_op["starts"] == 1 and by_op["counter"] == 1


def test_one_unreadable_value_is_not_redis_down(redis_url: str, unique_prefix: str) -> None:
    """A load or advice another schema version wrote (one cluster) leaves that cluster's
    figures out; Redis is up and every other gauge is still there."""
    r = redis.Redis.from_url(redis_url)
    keys = RedisKeys(unique_prefix)
    store = MeteredRedisStore(r, keys)
    store.put_hint(_hint("a", "v1"))
    store.put_load(ClusterLoad(cluster="c", time=0, total_nodes=4, active_nodes=2, used_nodes=1))
    store.flush()
    r.set(keys.load("old"), b'{"schema_version": 99}')
    r.set(keys.cluster_advice("c"), b"not json")
    reg = CollectorRegistry()
    reg.register(RedisStateCollector(HintClient(r, key_prefix=unique_prefix), cache_s=0))
    got = samples(generate_latest(reg).decode())
    assert value(got, "gpuhint_redis_up") == 1
    assert value(got, "gpuhint_queue_length", cluster="c", vc="v1") == 1
    assert value(got, "gpuhint_cluster_nodes", cluster="c", state="off") == 2
