"""The pure priority core: the factor map and the plan of a pass (no Slurm, no Redis)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from gpuhint.slurm.priority import FactorMap, PriorityApplier, SlurmJob, plan_pass


def test_factor_map_is_bounded_and_monotone() -> None:
    m = FactorMap(max_factor=1000)
    ps = [0.0, 1.0, 60.0, 3600.0, 8 * 86400.0, 1e9, 1e15, math.inf, math.nan, -5.0]
    fs = [m.factor(p) for p in ps]
    assert all(0 <= f <= 1000 for f in fs)
    finite = [m.factor(p) for p in sorted(p for p in ps[:7])]
    assert finite == sorted(finite, reverse=True)
    assert m.factor(60.0) > m.factor(3600.0) > m.factor(86400.0)
    with pytest.raises(ValueError):
        FactorMap(max_factor=0)


def test_plan_skips_running_pinned_held_and_unchanged() -> None:
    m = FactorMap()
    jobs = [
        SlurmJob("1", "PENDING"),
        SlurmJob("2", "RUNNING"),
        SlurmJob("3", "PENDING", pinned=True),
        SlurmJob("4", "PENDING", held=True),
        SlurmJob("5", "PENDING", site_factor=m.factor(50.0)),
        SlurmJob("6", "PENDING"),  # no hint
        SlurmJob("7", "PENDING"),
    ]
    hints = {"1": 10.0, "2": 10.0, "3": 10.0, "4": 10.0, "5": 50.0, "7": 10.0}
    plan = plan_pass(jobs, hints, m)
    assert [u.line for u in plan.updates] == [f"update jobid=1,7 SiteFactor={m.factor(10.0)}"]
    assert (plan.skipped_pinned, plan.skipped_held, plan.unchanged) == (1, 1, 1)


def test_max_updates_defers_the_largest() -> None:
    jobs = [SlurmJob(str(i), "PENDING") for i in range(5)]
    plan = plan_pass(jobs, {str(i): 1000.0 * (i + 1) for i in range(5)}, FactorMap(), max_updates=2)
    assert [u.job_ids for u in plan.updates] == [("0",), ("1",)] and plan.deferred == 3


class _Slurm:
    def __init__(self, n: int) -> None:
        self.jobs = [SlurmJob(str(i), "PENDING") for i in range(n)]
        self.batches: list[int] = []

    def queue(self) -> list[SlurmJob]:
        return self.jobs

    def apply(self, lines: Sequence[str]) -> list[str]:
        self.batches.append(len(lines))
        return ["Job is no longer pending execution for job 3"] if not self.batches[1:] else []


class _Hints:
    def priorities(self, cluster: str) -> dict[str, float]:
        return {str(i): float(i * 37 + 1) for i in range(1000)}


def test_applier_batches_rate_limits_and_counts_refusals() -> None:
    slept: list[float] = []
    now = [0.0]
    slurm = _Slurm(1000)
    a = PriorityApplier(
        slurm, _Hints(), "c", batch=300, rate=100.0, clock=lambda: now[0], sleep=slept.append
    )
    r = a.run_pass()
    assert sum(slurm.batches) == len(r.lines) and len(slurm.batches) >= 3
    assert r.refused == 1 and r.updated == 999
    assert slept and slept[0] == pytest.approx(3.0, abs=0.1)  # 300 jobs at 100/s
    dry = PriorityApplier(_Slurm(10), _Hints(), "c", dry_run=True).run_pass()
    assert dry.updated == 10 and dry.refused == 0
