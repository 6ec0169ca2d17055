"""What the power simulator predicts for an ``evaluate slurm --power`` run (pure apart
from reading the jobs): once as a cluster in real time would run them, once as the
compressed run meets Slurm (its 30 s start pass after a boot, times the speed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def simulated_power(
    loop: Sequence[LoopJob], nodes: int, setup: PowerSetup, model: str
) -> dict[str, Any]:
    """What the power simulator (``evaluate ces --trace``) predicts for the same jobs: all
    nodes on, the idle timer at the same SuspendTime and gpuhint's default job-aware
    policy (on the model's predicted durations, as ``evaluate ces --trace`` runs it).
    The jobs on woken nodes start when the boot ends, as on a cluster in real time."""
    return _simulated(loop, nodes, setup, model, [PowerModel(boot_s=setup.boot_s)])


def simulated_power_compressed(
    loop: Sequence[LoopJob], nodes: int, setup: PowerSetup, model: str
) -> dict[str, Any]:
    """:func:`simulated_power` as the compressed run meets it: a job given woken nodes
    starts at Slurm's next configuration pass (:data:`SLURM_CONFIG_PASS_S` wall seconds,
    ``x speed`` in trace time) after the boot; the mean over :data:`PASS_PHASES` phases
    of the pass, with the range of the added wait (``added_wait_range_s``)."""
    period = SLURM_CONFIG_PASS_S * setup.speed
    models = [
        PowerModel(
            boot_s=setup.boot_s, start_period_s=period, start_offset_s=k * period / PASS_PHASES
        )
        for k in range(PASS_PHASES)
    ]
    out = _simulated(loop, nodes, setup, model, models)
    out["start_pass_s"] = period
    return out


def _simulated(
    loop: Sequence[LoopJob], nodes: int, setup: PowerSetup, model: str, pms: Sequence[PowerModel]
) -> dict[str, Any]:
    """Each policy under each power model; numbers averaged over the models."""
    from gpuhint.lab.evaluation.ces_jobs import prepare
    from gpuhint.lab.slurm_loop import as_simulated

    prep = prepare(as_simulated(loop, setup.speed), model)
    runs = [_simulate_policies(prep, nodes, setup, pm) for pm in pms]
    out: dict[str, Any] = {}
    for name in runs[0]:
        keys = runs[0][name]
        out[name] = {k: round(sum(r[name][k] for r in runs) / len(runs), 1) for k in keys}
        out[name]["power_downs"] = round(out[name]["power_downs"])
        if name != "all_on" and len(runs) > 1:
            added = [r[name]["added_wait_avg_s"] for r in runs]
            out[name]["added_wait_range_s"] = [min(added), max(added)]
    return out


def _simulate_policies(prep: Any, nodes: int, setup: PowerSetup, pm: PowerModel) -> dict[str, Any]:
    from models.simulator.power import AlwaysOn, simulate_power
    from models.simulator.power_policies import IdleTimer, JobAware, JobAwareConfig

    jobs = prep.jobs
    base = simulate_power(jobs, nodes, AlwaysOn(), power=pm)
    end = max(s + j.duration for s, j in zip(base.start, jobs, strict=True))
    horizon = (min(j.submit for j in jobs), end)
    out: dict[str, Any] = {}
    for name, policy in (
        ("all_on", AlwaysOn()),
        ("idle_timer", IdleTimer(setup.suspend_time_s)),
        ("gpuhint", JobAware(JobAwareConfig())),
    ):
        res = simulate_power(
            jobs, nodes, policy, power=pm, predicted=prep.predicted, horizon=horizon
        )
        waits = sorted(s - j.submit for s, j in zip(res.start, jobs, strict=True))
        out[name] = {
            "node_hours_off": round(res.off_s / 3600, 3),
            "avg_wait_s": round(sum(waits) / len(waits), 1),
            "p99_wait_s": round(percentile(waits, 99), 1),
            "power_downs": res.power_downs,
        }
    for name in ("idle_timer", "gpuhint"):
        out[name] = with_added_wait(out[name], out["all_on"])
    return out
