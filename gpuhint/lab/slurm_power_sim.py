"""What the power simulator predicts for an ``evaluate slurm --power`` run (pure apart
from reading the jobs): once as a cluster in real time would run them, once as the
compressed run meets Slurm (its 30 s start pass after a boot, times the speed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from gpuhint.lab.slurm_loop import LoopJob
from gpuhint.lab.slurm_power_loop import PowerSetup, with_added_wait
from models.simulator.metrics import percentile
from models.simulator.power import PowerModel

SLURM_CONFIG_PASS_S = 30.0
"""Slurm 22.05 starts a job given powering-up nodes in its periodic pass
(``job_time_limit``, every 30 wall seconds) after they respond, not when they respond: at
speed 360 that is 0 to 3 trace hours after the boot (seen in slurmctld.log as
"Configuration for JobId=N complete" at 30 s intervals)."""

PASS_PHASES = 4
"""The pass's phase against the jobs is unknown: the compressed simulation averages
this many, evenly spaced."""


class Sims(NamedTuple):
    """The simulator's figures per policy (``all_on``, ``idle_timer``, ``gpuhint``)."""

    real_time: dict[str, Any]
    compressed: dict[str, Any]


def simulated_power(loop: Sequence[LoopJob], nodes: int, setup: PowerSetup, model: str) -> Sims:
    """What the power simulator (``evaluate ces --trace``) predicts for the same jobs: all
    nodes on, the idle timer at the same SuspendTime and gpuhint's default job-aware
    policy (on the model's predicted durations, as ``evaluate ces --trace`` runs it).

    ``real_time``: jobs on woken nodes start when the boot ends, as on a cluster in real
    time. ``compressed``: as the compressed run meets Slurm, such a job starts at Slurm's
    next configuration pass (:data:`SLURM_CONFIG_PASS_S` wall seconds, ``x speed`` in
    trace time) after the boot; the mean over :data:`PASS_PHASES` phases of the pass, with
    the range of the added wait (``added_wait_range_s``) and the pass (``start_pass_s``).
    """
    from gpuhint.lab.evaluation.ces_jobs import prepare
    from gpuhint.lab.slurm_loop import as_simulated

    prep = prepare(as_simulated(loop, setup.speed), model)
    period = SLURM_CONFIG_PASS_S * setup.speed
    passes = [
        PowerModel(
            boot_s=setup.boot_s, start_period_s=period, start_offset_s=k * period / PASS_PHASES
        )
        for k in range(PASS_PHASES)
    ]
    compressed = _averaged([_simulate_policies(prep, nodes, setup, pm) for pm in passes])
    compressed["start_pass_s"] = period
    real_time = _simulate_policies(prep, nodes, setup, PowerModel(boot_s=setup.boot_s))
    return Sims(real_time=real_time, compressed=compressed)


def _averaged(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each policy's figures averaged over ``runs``, with the range of the added wait."""
    out: dict[str, Any] = {}
    for name, first in runs[0].items():
        out[name] = {k: round(sum(r[name][k] for r in runs) / len(runs), 1) for k in first}
        out[name]["power_downs"] = round(out[name]["power_downs"])
        if "added_wait_avg_s" in first:
            added = [r[name]["added_wait_avg_s"] for r in runs]
            out[name]["added_wait_range_s"] = [min(added), max(added)]
    return out


def _simulate_policies(prep: Any, nodes: int, setup: PowerSetup, pm: PowerModel) -> dict[str, Any]:
    from models.simulator.power import AlwaysOn, PowerResult, simulate_power
    from models.simulator.power_policies import IdleTimer, JobAware, JobAwareConfig

    jobs = prep.jobs

    def figures(res: PowerResult) -> dict[str, Any]:
        waits = sorted(s - j.submit for s, j in zip(res.start, jobs, strict=True))
        return {
            "node_hours_off": round(res.off_s / 3600, 3),
            "avg_wait_s": round(sum(waits) / len(waits), 1),
            "p99_wait_s": round(percentile(waits, 99), 1),
            "power_downs": res.power_downs,
        }

    base = simulate_power(jobs, nodes, AlwaysOn(), power=pm)  # nothing boots: no pass either
    end = max(s + j.duration for s, j in zip(base.start, jobs, strict=True))
    horizon = (min(j.submit for j in jobs), end)
    out: dict[str, Any] = {"all_on": figures(base)}
    for name, policy in (
        ("idle_timer", IdleTimer(setup.suspend_time_s)),
        ("gpuhint", JobAware(JobAwareConfig())),
    ):
        res = simulate_power(
            jobs, nodes, policy, power=pm, predicted=prep.predicted, horizon=horizon
        )
        out[name] = with_added_wait(figures(res), out["all_on"])
    return out
