"""Partition placement by load (pure) and the assignor's re-deal of a Faust assignment."""

from __future__ import annotations

import pytest

from gpuhint.cores.pipeline.partitioning import partition_for
from gpuhint.cores.pipeline.placement import PartitionLoad, RebalanceProbe, balance_by_load, busiest
from streams.faust_assignor import LoadView, deal_by_load

# 16 VCs named as bench_pipeline names them, on 8 partitions: 3, 0, 2, 0, 1, 3, 3, 4
BENCH = [0] * 8
for v in range(16):
    BENCH[partition_for(f"bench/vc{v}".encode(), 8)] += 1


def test_the_skew_this_fixes() -> None:
    assert BENCH == [3, 0, 2, 0, 1, 3, 3, 4]
    load = dict(enumerate(map(float, BENCH)))
    sticky = {"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}}  # Faust after a late join: 5 vs 11
    dealt = balance_by_load(sticky, load, 8)
    assert dealt is not None and busiest(dealt, load) == 8  # 16 / 2: a perfect split
    assert set().union(*dealt.values()) == set(range(8))
    assert not dealt["a"] & dealt["b"]


def test_no_deal_without_a_worthwhile_gain() -> None:
    even = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}
    assert balance_by_load({"a": {0, 1}, "b": {2, 3}}, even, 4) is None
    # 10% better is the floor: 11 -> 10 is 9%, kept as it is
    assert balance_by_load({"a": {0, 1}, "b": {2}}, {0: 6.0, 1: 5.0, 2: 9.0}, 3) is None
    assert balance_by_load({"a": {0, 1, 2, 3}}, even, 4) is None  # one worker
    assert balance_by_load({"a": {0}, "b": {1}}, {}, 2) is None  # no load known
    assert balance_by_load({"a": {0}, "b": {1}}, {0: 0.0, 1: 0.0}, 2) is None


def test_partitions_without_load_stay_where_they_are() -> None:
    load = {0: 1000.0, 1: 500.0, 4: 100.0} | {p: 0.0 for p in (2, 3, 5, 6, 7)}
    dealt = balance_by_load({"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}}, load, 8)
    assert dealt == {"a": {0, 2, 3}, "b": {1, 4, 5, 6, 7}}  # only 1 moves


def test_unknown_partitions_weigh_the_mean() -> None:
    # the leader knew only the partitions it held (0-5): 6 and 7 weigh their mean, 2
    load = {0: 9.0, 1: 1.0, 2: 0.0, 3: 0.0, 4: 1.0, 5: 1.0}
    current = {"a": {0, 1, 2, 3, 4, 5}, "b": {6, 7}}  # 12 vs 4
    dealt = balance_by_load(current, load, 8)
    assert dealt == {"a": {0, 2, 3}, "b": {1, 4, 5, 6, 7}}  # 9 vs 9 (2 and 3 weigh 0)
    assert dealt == balance_by_load(dict(reversed(current.items())), load, 8)  # order-free


def test_ties_keep_a_partition_where_it_is() -> None:
    load = {0: 2.0, 1: 2.0, 2: 1.0, 3: 1.0, 4: 0.0, 5: 0.0}
    current = {"a": {0, 1, 4}, "b": {2, 3, 5}}  # 4 vs 2
    # load decides first (1 must leave a); on each tie the holder keeps it: 0, 2, 4, 5 stay
    assert balance_by_load(current, load, 6) == {"a": {0, 3, 4}, "b": {1, 2, 5}}


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_lpt_is_within_four_thirds_of_the_best(workers: int) -> None:
    load = {p: float((p * 7919) % 13) for p in range(12)}
    current = {f"w{i}": {p for p in range(12) if p % workers == i} for i in range(workers)}
    dealt = balance_by_load(current, load, 12, min_gain=0.0) or current
    lower = max(max(load.values()), sum(load.values()) / workers)
    assert busiest(dealt, load) <= lower * 4 / 3


def test_partition_load_is_lag_plus_rate() -> None:
    pl = PartitionLoad(horizon_s=10.0, half_life_s=2.0)
    pl.sample(0.0, {0: 0, 1: 50, 2: 10}, {0: None, 1: None, 2: 10})
    assert pl.weights() == {0: 0.0, 1: 50.0, 2: 0.0}  # never committed: all of it is lag
    pl.sample(2.0, {0: 40, 1: 50, 2: 10}, {0: 0, 1: 50, 2: 10})  # 20 events/s on 0
    # one half-life: the rate is half-way from 0 (a first reading may be one burst) to it
    assert pl.weights() == {0: 40.0 + 10.0 * 10, 1: 0.0, 2: 0.0}
    pl.sample(4.0, {0: 80, 1: 50, 2: 10}, {0: 80, 1: 50, 2: 10})  # 20/s again, no lag
    assert pl.rate[0] == 15.0 and pl.weights()[0] == 150.0
    pl.sample(6.0, {0: 80, 1: 50, 2: 10}, {0: 80, 1: 50, 2: 10})  # 0 stopped
    assert pl.rate[0] == 7.5  # half of the old rate is kept


def test_partition_load_is_what_the_leader_deals_by() -> None:
    """A backlog of the bench's 16 VCs: the lag follows the VCs per partition."""
    pl = PartitionLoad()
    pl.sample(0.0, {p: 1126 * n for p, n in enumerate(BENCH)}, dict.fromkeys(range(8)))
    dealt = balance_by_load({"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}}, pl.weights(), 8)
    assert dealt is not None
    assert sorted(sum(BENCH[p] for p in ps) for ps in dealt.values()) == [8, 8]


def test_deal_by_load_moves_every_co_partitioned_topic_together() -> None:
    topics = {"p.job-events": 0, "app-vc-state-changelog": 0, "p.telemetry": 0, "leader": 1}
    actives = {
        m: {t: sorted(ps) for t in topics if t != "leader"} | {"leader": [0] if m == "a" else []}
        for m, ps in (("a", {0, 1, 2, 3}), ("b", {4, 5, 6, 7}))
    }
    standbys = {m: {t: [] for t in topics} for m in actives}
    view = LoadView("p.job-events", snapshot=dict(enumerate(map(float, BENCH))))
    assert deal_by_load(actives, standbys, topics, view) and view.deals == 1
    for m in actives:
        parts = actives[m]["p.job-events"]
        assert actives[m]["app-vc-state-changelog"] == parts == actives[m]["p.telemetry"]
    assert actives["a"]["leader"] == [0] and actives["b"]["leader"] == []  # other group
    assert sorted(sum(BENCH[p] for p in actives[m]["p.job-events"]) for m in actives) == [8, 8]


def test_deal_by_load_leaves_standbys_partial_assignments_and_partial_load_to_faust() -> None:
    topics = {"j": 0, "c": 0}
    view = LoadView("j", snapshot={0: 9.0, 1: 1.0, 2: 1.0, 3: 1.0})
    actives = {"a": {"j": [0, 1], "c": [0, 1]}, "b": {"j": [2, 3], "c": [2, 3]}}
    with_standby = {"a": {"j": [], "c": [2]}, "b": {"j": [], "c": []}}
    assert not deal_by_load(actives, with_standby, topics, view)
    partial = {"a": {"j": [0, 1], "c": [0, 1]}, "b": {"j": [3], "c": [3]}}  # 2 unassigned
    assert not deal_by_load(partial, {m: {} for m in partial}, topics, view)
    # a member that does not subscribe to "c" (CES off, another build): Faust groups
    # topics by partition count, so dealing "c" to it would hand it an unsubscribed topic
    mixed = {"a": {"j": [0, 1], "c": [0, 1]}, "b": {"j": [2, 3]}}
    assert not deal_by_load(mixed, {m: {} for m in mixed}, topics, view)
    unknown = LoadView("j", snapshot={0: 9.0, 1: 1.0, 2: 1.0})  # 3's load not sampled
    assert not deal_by_load(actives, {m: {} for m in actives}, topics, unknown)
    assert actives["a"]["j"] == [0, 1]  # untouched by the refusals
    assert deal_by_load(actives, {m: {} for m in actives}, topics, view)  # all known
    assert actives["a"] == {"j": [0], "c": [0]} and actives["b"]["c"] == [1, 2, 3]


STICKY = {"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}}
BACKLOG = {p: 1000.0 * n for p, n in enumerate(BENCH)}  # 5,000 vs 11,000; 8,000 each dealt


def test_probe_asks_after_sustained_worthwhile_imbalance() -> None:
    probe = RebalanceProbe(min_gain=0.2, min_events=2000, sustain=2, cooldown_s=30)
    assert not probe.observe(0.0, STICKY, BACKLOG, 8)
    assert probe.observe(1.0, STICKY, BACKLOG, 8)
    even = {p: 1000.0 for p in range(8)}
    probe.in_generation(3)  # a rebalance not asked by it: no cool-down, a fresh streak
    assert not probe.observe(2.0, STICKY, BACKLOG, 8)
    assert not probe.observe(3.0, STICKY, even, 8)  # the load evened out: streak broken
    assert not probe.observe(4.0, STICKY, BACKLOG, 8)
    assert probe.observe(5.0, STICKY, BACKLOG, 8)


def test_probe_ignores_small_shares_small_backlogs_and_lone_workers() -> None:
    probe = RebalanceProbe(min_gain=0.2, min_events=2000, sustain=1)
    round_robin = {"a": {0, 2, 4, 6}, "b": {1, 3, 5, 7}}  # 9,000 vs 7,000: 11% to gain
    assert not probe.observe(0.0, round_robin, BACKLOG, 8)
    small = {p: v / 1000 for p, v in BACKLOG.items()}  # 11 vs 5: 27%, but 3 events
    assert not probe.observe(0.0, STICKY, small, 8)
    assert not probe.observe(0.0, {"a": set(range(8))}, BACKLOG, 8)
    assert probe.observe(0.0, STICKY, BACKLOG, 8)  # 11,000 -> 8,000


def test_probe_cools_down_only_after_a_rebalance_it_asked_for() -> None:
    probe = RebalanceProbe(min_gain=0.2, min_events=2000, sustain=1, cooldown_s=30)
    assert probe.observe(0.0, STICKY, BACKLOG, 8)
    probe.asked(0.5)
    # the deal did not even the load out (it moved meanwhile): not again at once
    assert not any(probe.observe(t, STICKY, BACKLOG, 8) for t in (1.0, 10.0, 30.0))
    assert probe.observe(30.5, STICKY, BACKLOG, 8)


def test_deal_by_load_records_the_leaders_deal_for_its_probe() -> None:
    topics = {"j": 0, "c": 0}
    actives = {"a": {"j": [0, 1], "c": [0, 1]}, "b": {"j": [2, 3], "c": [2, 3]}}
    no_load = LoadView("j")
    assert not deal_by_load(actives, {m: {} for m in actives}, topics, no_load)
    assert no_load.dealt == {"a": {0, 1}, "b": {2, 3}}  # Faust's, which a probe may redo
    view = LoadView("j", snapshot={0: 9.0, 1: 1.0, 2: 1.0, 3: 1.0})
    assert deal_by_load(actives, {m: {} for m in actives}, topics, view)
    assert view.dealt == {"a": {0}, "b": {1, 2, 3}}  # the deal it handed out
    with_standby = {"a": {"j": [], "c": [2]}, "b": {"j": [], "c": []}}
    assert not deal_by_load(actives, with_standby, topics, view)
    assert view.dealt is None  # no deal by load possible: nothing for a probe to ask


def test_the_assignor_hooks_what_faust_calls() -> None:
    """The one Faust method overridden, and the two it calls, as the checked versions
    have them; other versions get Faust's assignor."""
    import inspect

    import faust
    from faust.assignor import PartitionAssignor

    from streams.faust_assignor import LoadAwareAssignor, assignor_class
    from streams.faust_consumer import CHECKED_VERSIONS

    params = list(inspect.signature(PartitionAssignor._protocol_assignments).parameters)
    assert params == ["self", "assignments", "cl_distribution", "tp_distribution", "topic_groups"]
    perform = inspect.getsource(PartitionAssignor._perform_assignment)
    assert "self._protocol_assignments(" in perform
    assert "changelog_distribution = self._get_changelog_distribution(assignments)" in perform
    assert hasattr(PartitionAssignor, "_get_external_topic_distribution")
    from aiokafka.consumer.group_coordinator import GroupCoordinator

    assert inspect.iscoroutinefunction(GroupCoordinator.fetch_committed_offsets)  # group_offsets
    assert "_rejoin_needed_fut.set_result" in inspect.getsource(GroupCoordinator.request_rejoin)
    # the leader's assignor runs after the JoinGroup response set the new generation, so
    # the generation it records is the one the group is in once the deal is synced
    from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance

    join = inspect.getsource(CoordinatorGroupRebalance.perform_group_join)
    assert join.index("self._coordinator.generation = response.generation_id") < join.index(
        "await self._on_join_leader(response)"
    )
    assert "self.generation =" in inspect.getsource(GroupCoordinator.reset_generation)
    assert assignor_class(False) is PartitionAssignor
    want = LoadAwareAssignor if faust.__version__ in CHECKED_VERSIONS else PartitionAssignor
    assert assignor_class(True) is want


def test_request_rejoin_only_for_the_generation_this_worker_led() -> None:
    import asyncio
    from types import SimpleNamespace

    from streams.faust_assignor import group_generation, request_rejoin

    class Coordinator:
        generation = 7
        asked = 0

        def request_rejoin(self) -> None:
            self.asked += 1

    coordinator = Coordinator()

    async def call_thread(fn):  # type: ignore[no-untyped-def]
        return await fn()

    thread = SimpleNamespace(_consumer=SimpleNamespace(_coordinator=coordinator))
    thread.call_thread = call_thread
    app = SimpleNamespace(consumer=SimpleNamespace(_thread=thread))
    assert group_generation(app) == 7
    assert not asyncio.run(request_rejoin(app, 6))  # the group moved on: a follower now
    assert coordinator.asked == 0
    assert asyncio.run(request_rejoin(app, 7))
    assert coordinator.asked == 1
    thread._consumer = None  # consumer stopped
    assert group_generation(app) is None
    assert not asyncio.run(request_rejoin(app, 7))


def test_samples_right_after_a_rebalance_do_not_count() -> None:
    """A partition that just moved commits only once its new owner restored and saved:
    its lag reads stale for a few seconds, so those samples start no streak."""
    from gpuhint.cores.pipeline.placement import RebalanceProbe

    probe = RebalanceProbe(min_gain=0.2, min_events=1000, sustain=2, cooldown_s=0, settle_s=5)
    deal = {"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}}
    load = {0: 3000.0, 1: 0.0, 2: 2000.0, 3: 0.0, 4: 1000.0, 5: 3000.0, 6: 3000.0, 7: 4000.0}
    probe.in_generation(7, now=100.0)
    assert [probe.observe(t, deal, load, 8) for t in (101.0, 104.0, 105.0, 106.0)] == [
        False,
        False,
        False,
        True,
    ]
