"""Tests for gpuhint/cores/ces.py: the engine's advisories and the load tracker."""

from __future__ import annotations

import pickle

import pytest

from gpuhint.cores.ces import CesEngine, ClusterLoadTracker, SlotObservation
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, NodeStatus, PowerAction
from models.forecast import Forecast
from models.power_policy import PowerPolicyConfig


class FixedForecaster:
    """A forecaster that always says the peak is ``point`` (band ``upper``)."""

    horizon_slots = 18

    def __init__(self, point: float, upper: float) -> None:
        self.point, self.upper = point, upper

    def update(self, time: float, used: float, total: int) -> Forecast:
        return Forecast(time, 10800.0, self.point, self.point, self.upper, total)


def _engine(point: float, upper: float, store: InMemoryStore) -> CesEngine:
    cfg = PowerPolicyConfig(watts_per_node=500.0, history_slots=0)
    return CesEngine(store, cfg, lambda: FixedForecaster(point, upper))


def test_power_down_names_longest_idle_first_and_writes_store() -> None:
    store = InMemoryStore()
    eng = _engine(3, 4, store)
    idle = (("n5", 300.0), ("n6", 100.0), ("n7", 200.0), ("n8", 50.0), ("n9", 400.0))
    step = eng.observe(SlotObservation(time=0.0, used=3, total=10, cluster="c", idle_nodes=idle))
    d = step.decision
    assert d.action == "power_down" and d.active == 5 and d.count == 5
    store.flush()
    summary = store.get_advisory("c")
    assert summary is not None and summary.node is None
    assert summary.action is PowerAction.POWER_DOWN and summary.count == 5
    assert summary.nodes == ("n8", "n6", "n7", "n5", "n9")
    assert "500 W" in summary.reason and summary.forecast_nodes == 3
    # 5 nodes off for the 3-hour horizon at 500 W = 7.5 kWh
    assert abs((summary.est_energy_saved_kwh or 0) - 7.5) < 1e-9
    per_node = store.get_advisory("c", "n8")
    assert per_node is not None and per_node.action is PowerAction.POWER_DOWN
    load = store.get_load("c")
    assert load is not None and load.used_nodes == 3 and load.total_nodes == 10


def test_fewer_idle_names_than_count() -> None:
    eng = _engine(3, 4, InMemoryStore())
    step = eng.observe(SlotObservation(time=0.0, used=3, total=10, idle_nodes=(("a", 0.0),)))
    assert step.advisories[0].count == 5 and step.advisories[0].nodes == ("a",)
    assert len(step.advisories) == 2


def test_wake_names_off_nodes_and_follows_reported_active() -> None:
    store = InMemoryStore()
    eng = _engine(8, 9, store)
    obs = SlotObservation(time=0.0, used=7, total=12, active=7, off_nodes=("x", "y", "z", "w"))
    step = eng.observe(obs)
    assert step.decision.action == "wake" and step.decision.previous == 7
    assert step.advisories[0].nodes == ("x", "y", "z")  # to 9 + buffer 1 = 10
    assert [a.node for a in step.advisories[1:]] == ["x", "y", "z"]


def test_tracker_derives_used_idle_and_closes_slots() -> None:
    t = ClusterLoadTracker(slot_s=600, stale_after_s=600)  # sparse reports stay "on"
    for i, node in enumerate(["a", "b", "c", "d"]):
        assert t.on_node_status(NodeStatus(cluster="k", node=node, time=i, num_gpus=8)) == []
    t.on_job_event(
        JobEvent(phase="started", job_id="j", cluster="k", time=10, submit_time=0, nodes=("a", "b"))
    )
    t.on_job_event(
        JobEvent(phase="finished", job_id="j", cluster="k", time=100, submit_time=0, nodes=("b",))
    )
    t.on_node_status(NodeStatus(cluster="k", node="d", time=200, num_gpus=8, powered_on=False))
    out = []
    for node in "abc":  # agents keep reporting (every 10 s in real life); closes slot 0
        out += t.on_node_status(NodeStatus(cluster="k", node=node, time=650, num_gpus=8))
    out += t.tick("k", 1300.0)  # closes slot 1
    assert [o.time for o in out] == [0.0, 600.0]
    first, second = out
    assert first.used == 2  # a and b were both busy within slot 0: the peak counts
    assert second.used == 0  # j's finish freed both its nodes, listed or not
    assert first.total == 4 and first.active == 3 and first.off_nodes == ("d",)
    # idle nodes, longest idle first: c (since t=2), then a and b (freed at t=100)
    assert [n for n, _ in second.idle_nodes] == ["c", "a", "b"]


def test_tracker_busy_gpus_mean_used() -> None:
    t = ClusterLoadTracker(stale_after_s=600)
    t.on_node_status(NodeStatus(node="a", time=0, num_gpus=8, busy_gpus=2))
    t.on_node_status(NodeStatus(node="b", time=1, num_gpus=8, busy_gpus=0, healthy=False))
    (obs,) = t.tick("default", 600.0)
    assert obs.used == 1 and obs.unhealthy_nodes == ("b",) and obs.idle_nodes == ()
    assert obs.busy_gpus == 2 and obs.total_gpus == 16


def test_a_node_that_stops_reporting_counts_as_off_and_can_be_woken() -> None:
    """A powered-down node's agent falls silent: after ``stale_after_s`` it is off."""
    t = ClusterLoadTracker(slot_s=600, stale_after_s=120)
    closed = t.on_node_status(NodeStatus(cluster="k", node="quiet", time=0, num_gpus=8))
    for time in range(0, 1200, 100):  # "loud" reports every 100 s, busy
        if time == 1100:  # "quiet" comes back in slot 1
            closed += t.on_node_status(NodeStatus(cluster="k", node="quiet", time=time, num_gpus=8))
        closed += t.on_node_status(
            NodeStatus(cluster="k", node="loud", time=time, num_gpus=8, busy_gpus=8)
        )
    closed += t.tick("k", 1300)
    first, second = closed
    assert first.active == 1 and first.off_nodes == ("quiet",)  # silent since t=0
    assert first.used == 1 and first.idle_nodes == ()
    assert second.active == 2 and second.off_nodes == ()  # it is back
    assert [n for n, _ in second.idle_nodes] == ["quiet"]


@pytest.mark.parametrize("listed", [(), ("a",)])
def test_a_finish_frees_every_node_of_its_job(listed: tuple[str, ...]) -> None:
    """A ``finished`` that lists none (or only some) of the job's nodes still frees them
    all: they must not count as used forever, nor stay in the checkpoint."""
    t = ClusterLoadTracker(slot_s=600, stale_after_s=600)
    start = JobEvent(phase="started", job_id="j", time=10, submit_time=0, nodes=("a", "b"))
    t.on_job_event(start)
    t.on_job_event(JobEvent(phase="finished", job_id="j", time=100, submit_time=0, nodes=listed))
    c = t.clusters["default"]
    assert c.jobs == {} and c.placed == {}
    (obs,) = t.tick("default", 1300.0)[1:]
    assert obs.used == 0 and [n for n, _ in obs.idle_nodes] == ["a", "b"]
    assert [since for _, since in obs.idle_nodes] == [100.0, 100.0]


def test_a_job_still_running_after_a_restart_is_freed_by_its_finish() -> None:
    """The job -> nodes index is rebuilt from a checkpoint (it is not saved)."""
    t = ClusterLoadTracker(slot_s=600, stale_after_s=600)
    t.on_job_event(JobEvent(phase="started", job_id="j", time=10, submit_time=0, nodes=("a", "b")))
    t.clusters = pickle.loads(pickle.dumps(t.clusters, protocol=pickle.HIGHEST_PROTOCOL))
    t.on_job_event(JobEvent(phase="finished", job_id="j", time=100, submit_time=0))
    (obs,) = t.tick("default", 600.0)
    assert obs.used == 2  # the peak of slot 0
    c = t.clusters["default"]
    assert c.jobs == {} and c.count_used(600.0, 600.0) == 0


DAY = 86400.0


def test_a_node_renamed_or_removed_is_forgotten_after_a_week() -> None:
    """A node silent for ``forget_after_s`` (and no job on it) left the cluster: it is
    neither counted nor named to wake, and leaves the checkpoint; a later report of it
    brings it back."""
    t = ClusterLoadTracker(slot_s=600, stale_after_s=120)
    t.on_node_status(NodeStatus(node="old", time=0, num_gpus=8))
    t.on_job_event(JobEvent(phase="started", job_id="j", time=5, submit_time=0, nodes=("x",)))
    t.on_job_event(JobEvent(phase="finished", job_id="j", time=6, submit_time=0, nodes=("x",)))
    t.on_job_event(  # a job placed on a silent node keeps it
        JobEvent(phase="started", job_id="k", time=7, submit_time=0, nodes=("held",))
    )
    obs: list[SlotObservation] = []
    for s in range(60, int(8 * DAY), 60):
        obs += t.on_node_status(NodeStatus(node="new", time=s, num_gpus=8))
    week = [o for o in obs if o.time >= 7 * DAY + 600]
    assert week and all(o.total == 2 and o.off_nodes == () for o in week)
    assert obs[0].total == 4 and obs[0].off_nodes == ("old",)
    c = t.clusters["default"]
    assert c.names == ["held", "new"] and c.placed == {"k": {0}}
    assert len(pickle.dumps(c)) < 2000
    t.on_node_status(NodeStatus(node="old", time=8 * DAY + 590, num_gpus=8))
    (back,) = t.tick("default", 8 * DAY + 600)
    assert back.total == 3 and [n for n, _ in back.idle_nodes] == ["old"]
