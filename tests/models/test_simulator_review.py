"""Regression tests from a correctness review of the pure simulators (models/simulator)."""

from __future__ import annotations

import math

import pytest

from models.simulator import SimJob, simulate_vc
from models.simulator.easy import simulate_easy
from models.simulator.power import AlwaysOn, PowerSim, simulate_power
from models.simulator.power_counts import CountTimer, simulate_counts
from models.simulator.power_policies import IdleTimer


def test_counts_drop_the_nodes_that_leave_the_cluster() -> None:
    # 4 nodes, then 2: the 2 that left must not go on counting as powered off
    r = simulate_counts([0, 0, 0, 0], [4, 4, 2, 2], 60, CountTimer(0))
    assert r.off_node_min == 4 + 4 + 2 + 2
    # busy nodes free up first when the cluster shrinks below them
    r = simulate_counts([3, 3, 1, 1], [4, 4, 2, 2], 60, CountTimer(0))
    assert r.off_node_min == 1 + 1 + 1 + 1
    assert r.shortfall_node_min == 0


def test_power_policy_and_boots_go_on_to_a_horizon_past_the_last_job() -> None:
    # 3 nodes, two 100 s jobs; the horizon runs to 1000 s (as ``evaluate slurm --power``
    # gives it): the idle timer still powers the two freed nodes down at 160 s
    jobs = [SimJob("a", 0, 100, 8), SimJob("b", 0, 100, 8)]
    r = simulate_power(jobs, 3, IdleTimer(60), horizon=(0.0, 1000.0))
    assert r.off_s == pytest.approx(940 + 2 * 840)
    assert r.idle_s == pytest.approx(60 + 2 * 60)
    assert r.horizon_power_downs == 3
    # a policy that wakes a node after the last job: it boots, then idles, to the end
    r = simulate_power([SimJob("a", 0, 10, 8)], 2, _WakeLater(), horizon=(0.0, 1000.0))
    assert (r.off_s, r.boot_s, r.busy_s) == (50.0, 300.0, 10.0)
    assert r.idle_s == pytest.approx(2000 - 10 - 50 - 300)


class _WakeLater:
    """Powers node 1 down at once and wakes it at 50 s."""

    def attach(self, sim: PowerSim) -> None:
        self.sim, self.next_t = sim, 0.0

    def on_idle(self, node: int, t: float) -> None:
        return None

    def on_alloc(self, node: int, t: float) -> None:
        return None

    def step(self, t: float) -> None:
        if t == 0.0 and 1 in self.sim.idle:
            self.sim.power_down(1)
            self.next_t = 50.0
        elif t >= 50.0 and self.next_t == 50.0:
            self.sim.wake(1)
            self.next_t = math.inf

    def next_time(self) -> float:
        return self.next_t


def test_easy_extra_gpus_count_every_job_ending_at_the_shadow_time() -> None:
    # 2 nodes; a and b (4 GPUs each, limit 100) share node 0, x (4 GPUs) node 1. Head c
    # (8 GPUs) is reserved at 100, when a *and* b end: 4 GPUs spare then, so d (4 GPUs,
    # long) backfills at once without delaying c (before: a alone counted, no spare)
    jobs = [SimJob("a", 0, 100, 4), SimJob("b", 0, 100, 4), SimJob("x", 0, 1000, 4)]
    jobs += [SimJob("c", 1, 10, 8), SimJob("d", 2, 500, 4)]
    out = simulate_easy(jobs, 2, [j.submit for j in jobs], [100, 100, 1000, 10, 500])
    assert [o.start for o in out] == [0, 0, 0, 100, 2]


def test_a_nan_priority_is_refused_not_left_to_break_the_queue() -> None:
    # b (1), c (NaN), d (2), e (0) queue behind a: with c's NaN in the heap, e (0) came
    # out after b (1)
    jobs = [SimJob("a", 0, 100, 8)] + [SimJob(x, k + 1, 10, 8) for k, x in enumerate("bcde")]
    prios = [0.0, 1.0, math.nan, 2.0, 0.0]
    with pytest.raises(ValueError, match="job c: priority is NaN"):
        simulate_vc(jobs, 1, "qssf", priorities=prios)
    with pytest.raises(ValueError, match="NaN"):
        simulate_easy(jobs, 1, prios, [100.0] * 5)
    with pytest.raises(ValueError, match="NaN"):
        simulate_easy(jobs, 1, [j.submit for j in jobs], [100.0, math.nan, 1.0, 1.0, 1.0])


def test_the_power_simulator_refuses_a_nan_priority_too() -> None:
    # the same queue under the power simulator: its heap broke the same way
    jobs = [SimJob("a", 0, 100, 8)] + [SimJob(x, k + 1, 10, 8) for k, x in enumerate("bcde")]
    with pytest.raises(ValueError, match="job c: priority is NaN"):
        simulate_power(jobs, 1, AlwaysOn(), priorities=[0.0, 1.0, math.nan, 2.0, 0.0])
