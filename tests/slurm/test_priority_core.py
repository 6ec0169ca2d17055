"""The pure priority core: the factor map and the plan of a pass (no Slurm, no Redis)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from gpuhint.slurm.priority import (
    FactorMap,
    Fallback,
    HintSnapshot,
    PriorityApplier,
    SlurmJob,
    plan_pass,
)


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


# -- gpuhint down: jobs without a hint, stale hints, Redis down -------------------------


def test_plan_gives_unhinted_jobs_the_neutral_factor_not_zero() -> None:
    m = FactorMap(max_factor=1000)
    jobs = [
        SlurmJob("1", "PENDING"),
        SlurmJob("2", "PENDING"),  # no hint
        SlurmJob("3", "PENDING", pinned=True),  # no hint, pinned: left alone
        SlurmJob("4", "PENDING", held=True),  # no hint, held: left alone
        SlurmJob("5", "RUNNING"),  # no hint, running: left alone
        SlurmJob("6", "PENDING", site_factor=400),  # no hint, already neutral
    ]
    plan = plan_pass(jobs, {"1": 1e6}, m, neutral=400)
    assert [u.line for u in plan.updates] == [
        "update jobid=2 SiteFactor=400",
        f"update jobid=1 SiteFactor={m.factor(1e6)}",
    ]
    assert (plan.unhinted, plan.neutral_set, plan.unchanged) == (2, 1, 1)
    assert (plan.skipped_pinned, plan.skipped_held) == (0, 0)  # counted for hinted jobs only
    assert plan_pass(jobs, {"1": 1e6}, m).jobs == 1  # neutral None: the old behaviour


def test_stale_hints_fade_to_neutral_and_end_in_one_factor() -> None:
    m = FactorMap(max_factor=1000)
    jobs = [SlurmJob(str(i), "PENDING") for i in range(4)]
    prios = {"0": 10.0, "1": 1e6, "2": 1e8}  # job 3: no hint
    half = plan_pass(jobs, prios, m, neutral=500, weight=0.5)
    got = {j: u.site_factor for u in half.updates for j in u.job_ids}
    assert got["0"] == round(500 + 0.5 * (m.factor(10.0) - 500)) and got["3"] == 500
    assert half.faded == 3
    gone = plan_pass(jobs, prios, m, neutral=500, weight=0.0)
    assert [(u.job_ids, u.site_factor) for u in gone.updates] == [(("0", "1", "2", "3"), 500)]


def test_fallback_neutral_factor_and_fade_steps() -> None:
    m = FactorMap(max_factor=100_000)
    assert Fallback().neutral_factor(m, [90_123, 10, 70_000, 99_000]) == 70_000
    assert Fallback().neutral_factor(m, [91_499]) == 91_000  # rounded to 1% of max
    assert Fallback().neutral_factor(m, []) == 50_000  # nobody hinted: the midpoint
    assert Fallback(neutral="midpoint").neutral_factor(m, [99_000]) == 50_000
    assert Fallback(neutral=123_456).neutral_factor(m, []) == 100_000  # clipped
    f = Fallback(stale_after_s=100, fade_s=100, steps=4)
    assert [f.weight(a) for a in (50, 100, 110, 150, 190, 200, 1e9)] == [
        1.0, 1.0, 1.0, 0.5, 0.25, 0.0, 0.0
    ]  # fmt: skip
    assert Fallback(fade_s=0).weight(3601) == 0.0  # at once
    with pytest.raises(ValueError):
        Fallback(neutral="lowest")


class _Queue:
    def __init__(self, jobs: dict[str, int]) -> None:
        self.factors = dict(jobs)  # pending job id -> SiteFactor

    def queue(self) -> list[SlurmJob]:
        return [SlurmJob(j, "PENDING", site_factor=f) for j, f in self.factors.items()]

    def apply(self, lines: Sequence[str]) -> list[str]:
        for ln in lines:
            ids, _, f = ln.removeprefix("update jobid=").partition(" SiteFactor=")
            for j in ids.split(","):
                self.factors[j] = int(f)
        return []


class _Snapshots:
    def __init__(self, prios: dict[str, float], last_alive: float | None) -> None:
        self.prios, self.last_alive, self.down = prios, last_alive, False

    def priorities(self, cluster: str) -> dict[str, float]:
        return self.snapshot(cluster).priorities

    def snapshot(self, cluster: str) -> HintSnapshot:
        if self.down:
            raise ConnectionError("redis down")
        return HintSnapshot(dict(self.prios), self.last_alive)


def test_applier_worker_down_redis_down_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    m = FactorMap(max_factor=1000)
    now = [10_000.0]
    slurm = _Queue({"a": 0, "b": 0, "c": 0})
    hints = _Snapshots({"a": 10.0, "b": 1e5, "c": 1e8}, last_alive=now[0])
    a = PriorityApplier(
        slurm,
        hints,
        "c",
        m,
        fallback=Fallback(stale_after_s=3600, fade_s=0),
        hint_errors=(ConnectionError,),
        wall=lambda: now[0],
    )
    r = a.run_pass()
    hinted = {j: m.factor(p) for j, p in hints.prios.items()}
    assert slurm.factors == hinted and r.hints_fresh and r.neutral_factor == hinted["b"]
    # the worker stops: new jobs get no hint; they land at the median, not at 0
    slurm.factors.update(new1=0, new2=0)
    r = a.run_pass()
    assert slurm.factors["new1"] == slurm.factors["new2"] == hinted["b"]
    assert min(hinted.values()) < slurm.factors["new1"] < max(hinted.values())
    assert (r.pending_unhinted, r.neutral_set) == (2, 2)
    # Redis goes down: the last hints read are used; a new job still gets the neutral one
    hints.down = True
    slurm.factors["new3"] = 0
    r = a.run_pass()
    assert r.hints_from == "cache" and slurm.factors["new3"] == hinted["b"]
    assert slurm.factors["a"] == hinted["a"]  # nothing reset to 0
    a.run_pass()
    hints.down = False
    # an hour and more without a sign of life: every job at the neutral factor
    now[0] += 3601
    r = a.run_pass()
    assert not r.hints_fresh and set(slurm.factors.values()) == {hinted["b"]}
    a.run_pass()
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelname == "WARNING"]
    assert len([w for w in warnings if "cannot read hints" in w]) == 1
    assert len([w for w in warnings if "no fresh hint" in w]) == 1
    # Redis down before any hint was read: the pass fails and changes nothing
    fresh = _Snapshots({}, None)
    fresh.down = True
    b = PriorityApplier(slurm, fresh, "c", m, hint_errors=(ConnectionError,), wall=lambda: now[0])
    before = dict(slurm.factors)
    with pytest.raises(ConnectionError):
        b.run_pass()
    assert slurm.factors == before


def test_neutral_off_leaves_unhinted_jobs_alone() -> None:
    slurm = _Queue({"a": 0, "b": 0})
    a = PriorityApplier(slurm, _Snapshots({"a": 10.0}, 0.0), "c", fallback=Fallback("off"))
    r = a.run_pass()
    assert slurm.factors["b"] == 0 and r.neutral_factor is None and r.pending_unhinted == 0
    assert slurm.factors["a"] == FactorMap().factor(10.0)  # and no fade without a neutral


def test_outage_shows_on_the_applier_metrics() -> None:
    from gpuhint.metrics.applier import ApplierMetrics
    from gpuhint.slurm.priority import PassResult

    s = ApplierMetrics("slurm")
    stale = PassResult(
        pending_hinted=3, updated=5, unchanged=0, skipped_pinned=0, skipped_held=0,
        deferred=0, refused=0, pending_unhinted=2, neutral_set=2, neutral_factor=70_000,
        faded=3, hint_age_s=7300.0, hints_fresh=False, hints_from="cache",
    )  # fmt: skip
    s.observe_slurm_priorities(stale, dry_run=False)
    assert s.value("gpuhint_applier_hints_fresh") == 0
    assert s.value("gpuhint_applier_redis_up") == 0
    assert s.value("gpuhint_applier_hint_age_seconds") == 7300.0
    assert s.value("gpuhint_applier_unhinted_jobs") == 2
    assert s.value("gpuhint_applier_faded_jobs") == 3
    assert s.value("gpuhint_applier_neutral_priority") == 70_000
    assert s.value("gpuhint_applier_neutral_assignments_total") == 2
    s.redis_down()
    assert s.value("gpuhint_applier_errors_total", kind="redis") == 1


class _Refusing(_Queue):
    """A queue whose jobs sprio does not show (not yet eligible: a --begin in the
    future), and whose slurmctld refuses the updates of ``refuse`` as scontrol says it."""

    def __init__(self, jobs: list[str], refuse: set[str], line: str = "") -> None:
        super().__init__(dict.fromkeys(jobs, 0))
        self.refuse, self.line = refuse, line
        self.sent: list[str] = []  # job ids updated

    def queue(self) -> list[SlurmJob]:
        return [SlurmJob(j, "PENDING", site_factor=None) for j in self.factors]

    def apply(self, lines: Sequence[str]) -> list[str]:
        ids = [j for ln in lines for j in ln.split()[1].removeprefix("jobid=").split(",")]
        self.sent.extend(ids)
        if self.line:  # the whole batch failed, no job named
            return [self.line]
        return [f"Unexpected message received for job {j}" for j in ids if j in self.refuse]


@pytest.mark.parametrize("line", ["", "slurm_update error: Unable to contact slurm controller"])
def test_a_refused_update_is_sent_again_not_taken_as_applied(line: str) -> None:
    """A job sprio does not show is compared with what the applier set last: an update
    Slurm refused was not set, and is sent again next pass (until it is accepted)."""
    slurm = _Refusing(["1", "2"], refuse={"2"}, line=line)
    a = PriorityApplier(slurm, _Hints(), "c", fallback=Fallback(neutral="off"))
    first = a.run_pass()
    assert first.refused == 1 and first.updated == 1
    slurm.sent.clear()
    slurm.refuse, slurm.line = set(), ""
    again = a.run_pass()
    assert "2" in slurm.sent
    assert again.updated >= 1 and again.refused == 0
    assert a.run_pass().updated == 0  # accepted now: not sent a third time
