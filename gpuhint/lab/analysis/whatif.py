"""What gpuhint can do for the cluster of a trace: QSSF and CES summaries, predictor notes.

QSSF runs :func:`gpuhint.lab.evaluation.qssf.evaluate_qssf` (the code behind
``gpuhint evaluate qssf``) on the trace, or on its latest ``max_jobs`` jobs when it is
larger; CES runs :mod:`gpuhint.lab.evaluation.ces` (``gpuhint evaluate ces``) on a load
series when one is given. Both are the online, strictly causal evaluations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuhint.lab.traces.readers import TraceJob

QSSF_MAX_JOBS = 10_000
TAIL_KEYS = ("max_wait_s", "p99_wait_s", "share_jct_over_2x_fifo")
CES_TARGET_LOAD = 0.5
"""Pool size of the CES estimate from jobs: ``gpuhint evaluate ces --trace``'s default."""
CES_SUSPEND_S = 3600


def qssf_summary(
    jobs: Sequence[TraceJob],
    total_jobs: int,
    *,
    model: str,
    vc_nodes: Mapping[str, int] | None = None,
    target_load: float = 0.9,
    plot: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """FIFO vs QSSF with gpuhint's hints vs the oracle on ``jobs`` (InputError if unfit)."""
    from gpuhint.lab.evaluation.qssf import evaluate_qssf, plot_jct_cdf

    rep = evaluate_qssf(
        jobs, model=model, vc_nodes=vc_nodes, target_load=target_load, progress=progress
    )
    d = rep.as_dict()
    pol = d["policies"]
    out: dict[str, Any] = {
        "jobs": len(jobs),
        "window": "whole trace" if len(jobs) >= total_jobs else f"latest {len(jobs):,} jobs",
        "jobs_simulated": d["jobs_simulated"],
        "model": d["model"],
        "model_version": d["model_version"],
        "vc_sizes": d["vc_sizes"],
        "vc_sizing": d["vc_sizing"],
        "gpus_per_node": d["gpus_per_node"],
        "loop": d.get("loop"),
        "hint_updates": d.get("hint_updates"),
        "qssf_description": pol["qssf"]["description"],
        "mae_log": d["mae_log"],
        "median_abs_pct_error": d["median_abs_pct_error"],
        "avg_jct_s": {name: p["avg_jct_s"] for name, p in pol.items()},
        "avg_queue_s": {name: p["avg_queue_s"] for name, p in pol.items()},
        "jct_ratio_fifo_over_qssf": d["jct_ratio_fifo_over_qssf"],
        "jct_ratio_qssf_over_oracle": d["jct_ratio_qssf_over_oracle"],
        "jct_ratio_fifo_over_oracle": rep.ratio("fifo", "qssf-oracle"),
        "seconds": d["seconds"]["total"],
        "plot": None,
        "tails": {name: {k: p.get(k) for k in TAIL_KEYS} for name, p in pol.items()},
        "wait_bound": d.get("wait_bound"),
    }
    out["without_users"] = None
    if any(j.user or j.name for j in jobs):
        if progress is not None:
            progress("QSSF again, users and names hidden from the predictor")
        blind = _qssf_without_users(jobs, model, rep.vc_sizes)
        oracle = out["avg_jct_s"]["qssf-oracle"]
        out["without_users"] = {
            "avg_jct_s": blind,
            "jct_ratio_qssf_over_oracle": blind / oracle if oracle else None,
            "jct_ratio_fifo_over_qssf": out["avg_jct_s"]["fifo"] / blind if blind else None,
        }
    if plot is not None:
        plot_jct_cdf(rep, plot, title=f"JCT by policy ({out['window']})")
        out["plot"] = plot.name
    return out


def _qssf_without_users(jobs: Sequence[TraceJob], model: str, vc_sizes: Mapping[str, int]) -> float:
    """Average JCT of QSSF when the predictor sees neither users nor job names.

    ``evaluate_qssf`` again, on the same jobs with users and names removed and the VC
    sizes of the main run: only what the predictor sees differs.
    """
    from gpuhint.lab.evaluation.qssf import evaluate_qssf

    blind = [dataclasses.replace(j, user=None, name=None) for j in jobs]
    return evaluate_qssf(blind, model=model, vc_nodes=vc_sizes).avg("qssf")


def ces_summary(
    series_path: str | Path,
    *,
    test_days: int = 7,
    test_from: str | None = None,
    test_to: str | None = None,
    plot: Path | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """CES with gpuhint's default policy on a load series, over the test days
    ``test_from`` .. ``test_to`` (default: the series' last ``test_days``).

    Raises :class:`gpuhint.lab.traces.loadseries.SeriesError` / OSError / ValueError on bad input.
    """
    from gpuhint.lab.evaluation import ces
    from gpuhint.lab.traces.loadseries import read_series
    from models.forecast import LoadForecaster

    series = read_series(series_path)
    lo, hi = ces.window_slots(series, test_from, test_to, days=test_days)

    def factory() -> LoadForecaster:
        return LoadForecaster(horizon_slots=18, slot_s=series.slot_s)

    rec = ces.replay(series, None, factory, progress=progress, until=hi)
    m = ces.summarize(rec, lo, hi)
    m["filled_slots"] = series.filled_slots
    m["plot"] = None
    if plot is not None:
        ces.plot(rec, str(plot), lo, hi)
        m["plot"] = plot.name
    return m


SAME_WITHIN = 0.01
"""Average JCTs within 1% of each other are "about the same" (tie order moves them)."""


def users_worth(with_users: float, blind: float) -> str:
    """The sentence on what users and names are worth, from the sign of the difference
    between QSSF / oracle with them (``with_users``) and without (``blind``).

    >>> users_worth(1.68, 1.58)[:60]
    '; with users and names hidden from the predictor it would en'
    >>> "worse" in users_worth(1.2, 1.5), "better" in users_worth(1.68, 1.58)
    (True, True)
    """
    said = f"; with users and names hidden from the predictor it would end at {blind:.2f}x"
    change = blind / with_users - 1
    if abs(change) <= SAME_WITHIN:
        return said + ": about the same, so users and names add little here."
    if change > 0:
        return said + f", {change:.0%} worse: that is what users and names are worth here."
    return (
        said + f", {-change:.0%} better: on this trace users' history misleads the "
        "predictor more than it helps (check that user names are stable and mean one person)."
    )


def ces_jobs_summary(
    jobs: Sequence[TraceJob], *, model: str, progress: Callable[[str], None] | None = None
) -> dict[str, Any] | None:
    """Energy saving on the trace's own GPU jobs, the cheap part of ``gpuhint evaluate ces
    --trace``: all nodes on, Slurm's idle timer at ``SuspendTime`` = 1 h and gpuhint's
    job-aware policy at its default reserve, on one pool sized to load 0.5, with that
    command's default power model. None when no job asks for a GPU."""
    from gpuhint.lab.evaluation import ces_jobs as cj
    from models.simulator.power import AlwaysOn, PowerModel, simulate_power
    from models.simulator.power_policies import IdleTimer, JobAware, JobAwareConfig

    say = progress or (lambda _m: None)
    say(
        f"CES from the jobs ({len(jobs):,}): all nodes on, SuspendTime=1 h and gpuhint's "
        "policy on one pool"
    )
    prep = cj.prepare(jobs, model)
    if not prep.jobs:
        return None
    nodes = cj.cluster_nodes(prep.jobs, CES_TARGET_LOAD)
    pm = PowerModel()  # evaluate ces --trace's defaults

    def run(policy: Any) -> Any:
        return simulate_power(prep.jobs, nodes, policy, power=pm, predicted=prep.predicted)

    say(f"  {len(prep.jobs):,} GPU jobs on {nodes} nodes")
    base = run(AlwaysOn())
    timer = cj.point(CES_SUSPEND_S, run(IdleTimer(CES_SUSPEND_S)), base, prep.jobs, pm)
    gh = cj.point(cj.DEFAULT_QUANTILE, run(JobAware(JobAwareConfig())), base, prep.jobs, pm)
    return {
        "jobs": len(prep.jobs),
        "nodes": nodes,
        "sized_by": f"target load {CES_TARGET_LOAD:g}",
        "days": base.horizon_s / 86400,
        "all_on_energy_kwh": base.energy_kwh(pm),
        "all_on_utilization": base.utilization,
        "idle_timer": timer,
        "gpuhint": gh,
        "power": {
            "boot_s": pm.boot_s,
            "busy_w": pm.busy_w,
            "idle_w": pm.idle_w,
            "boot_w": pm.boot_w,
            "off_w": pm.off_w,
        },
        "command": "gpuhint evaluate ces --trace FILE",
    }


def predictor_notes(
    fields: Mapping[str, bool],
    repetition: Mapping[str, Any] | None,
    qssf: Mapping[str, Any] | None,
) -> list[str]:
    """Plain sentences: what the trace gives the predictor and what a missing field costs."""
    notes: list[str] = []
    ratio = qssf.get("jct_ratio_qssf_over_oracle") if qssf else None
    cost = (
        f" Here QSSF with the hints ends at {ratio:.2f}x the oracle's average JCT" if ratio else ""
    )
    blind = qssf.get("without_users") if qssf else None
    if cost and ratio and blind and blind.get("jct_ratio_qssf_over_oracle"):
        cost += users_worth(ratio, blind["jct_ratio_qssf_over_oracle"])
    elif cost:
        cost += "."
    if not fields.get("user"):
        notes.append(
            "The trace has no users: gpuhint's predictor has only the VC and the GPU count to "
            "go on, so every job of one GPU count looks the same at submit and history cannot "
            "tell a user's short jobs from their long ones. Traces that record users show what "
            "they are worth (docs/analyze.md)." + cost
        )
    else:
        share = repetition.get("same_user_same_gpus_prior_share") if repetition else None
        if share is not None:
            notes.append(
                f"{share:.0%} of the jobs follow an earlier job of the same user with the same "
                "GPU count: that history is what gpuhint's predictor learns from." + cost
            )
    if not fields.get("name"):
        notes.append(
            "The trace has no job names: the name-template expert (same user, same job name "
            "with digits stripped) is unused, so jobs of one user and GPU count share one "
            "estimate."
        )
    if not fields.get("start_time"):
        notes.append(
            "The trace has no start times: queueing delay is not shown; the QSSF simulation "
            "needs only submit times, durations and GPUs."
        )
    if not fields.get("state"):
        notes.append(
            "The trace has no final states: completion, cancellation and failure rates are "
            "not shown (every job is counted as completed)."
        )
    return notes
