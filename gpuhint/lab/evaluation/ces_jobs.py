"""CES from a job trace: energy saved against the wait it adds, policy against policy.

The trace's GPU jobs run in :func:`models.simulator.power.simulate_power` on one pool of
nodes (``--nodes``, or sized to a target offered load) under

* all nodes on (the reference: energy and each job's wait without power saving);
* Slurm's idle timer for each ``SuspendTime`` in :data:`SUSPEND_TIMES_S`;
* the artifact's CES rule (10-minute slots, fixed buffer, wake after a shortfall), and
  gpuhint's load-series policy (forecast band) driven the same way, for reference;
* gpuhint's job-aware policy (:class:`models.simulator.power_policies.JobAware`) for each
  reserve quantile in :data:`QUANTILES`, fed the *predicted* durations of gpuhint's
  online duration model (each job's hint at submit, as ``evaluate qssf --open-loop``).

Each run becomes a point (:func:`point`); the two frontiers and the dominance check
(:func:`dominance`) answer "how much energy do I save over SuspendTime, and how much
longer do my jobs wait?". No printing here (``gpuhint/cli/evaluate_ces.py`` does).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuhint.lab.traces.readers import TraceJob
from models.forecast import LoadForecaster
from models.power_policy import PowerPolicyConfig
from models.simulator import SimJob, size_vcs
from models.simulator.metrics import percentile
from models.simulator.power import AlwaysOn, PowerModel, PowerPolicy, PowerResult, simulate_power
from models.simulator.power_policies import IdleTimer, JobAware, JobAwareConfig, SlotRule

#: SuspendTime values tried, 5 minutes to 24 hours (3600 among them).
SUSPEND_TIMES_S: tuple[int, ...] = (300, 600, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400)
#: Reserve quantiles of gpuhint's job-aware policy (its knob), least to most cautious.
QUANTILES: tuple[float, ...] = (
    0.0,
    0.25,
    0.5,
    0.8,
    0.9,
    0.95,
    0.97,
    0.98,
    0.99,
    0.993,
    0.995,
    0.998,
    0.999,
    1.0,
)
DEFAULT_QUANTILE = JobAwareConfig().quantile
POINT_KEYS = (
    "setting",
    "energy_saved_kwh",
    "node_hours_off",
    "added_wait_avg_s",
    "added_wait_p99_s",
    "jobs_delayed",
    "cycles_per_node_day",
)
Scheduler = Literal["fifo", "qssf"]
Progress = Callable[[str], None]


@dataclass
class Prepared:
    """The simulator's view of a trace: GPU jobs, their predicted durations and service."""

    jobs: list[SimJob]
    predicted: list[float]
    priority: list[float]
    skipped_no_gpu: int
    model: str
    mae_log: float | None


def prepare(trace: Sequence[TraceJob], model: str) -> Prepared:
    """GPU jobs of ``trace`` with gpuhint's hint at submit (open loop, causal)."""
    from gpuhint.lab.evaluation.qssf import predict_online

    gpu = [j for j in trace if j.num_gpus > 0]
    pred = predict_online(gpu, model)
    predicted = [
        d if math.isfinite(d) and d >= 0 else 3600.0 for d in pred.predicted_duration
    ]  # a job without a hint: one hour
    return Prepared(
        jobs=[SimJob(j.job_id, j.submit_time, j.duration, j.num_gpus) for j in gpu],
        predicted=predicted,
        priority=[p if math.isfinite(p) else math.inf for p in pred.priority],
        skipped_no_gpu=len(trace) - len(gpu),
        model=pred.model,
        mae_log=pred.mae_log,
    )


def cluster_nodes(jobs: Sequence[SimJob], target_load: float, gpus_per_node: int = 8) -> int:
    """Nodes for an offered load of ``target_load`` (and at least the largest job)."""
    return size_vcs(
        {"all": [(j.submit, j.duration, j.gpus) for j in jobs]}, target_load, gpus_per_node
    )["all"]


def artifact_config() -> PowerPolicyConfig:
    """The artifact's rule as ``gpuhint evaluate ces --policy artifact`` runs it (buffer 5)."""
    return PowerPolicyConfig(
        use_band=False,
        proactive_wake=False,
        buffer_nodes=5,
        history_slots=6,
        history_threshold_frac=0.0,
        min_change_frac=0.0,
        min_change_nodes=1,
        hold_slots=12,
        max_changes_per_day=10**6,
        forecast_threshold_frac=-1.0,
    )


def point(
    setting: float | str,
    res: PowerResult,
    base: PowerResult,
    jobs: Sequence[SimJob],
    pm: PowerModel,
) -> dict[str, Any]:
    """One run against all-on: the frontier keys, then energy, utilization and wakes.

    Energy, node-hours off and cycles are over the horizon (first to last submit), as
    ``days``; the added waits are over every job."""
    added = [s - b for s, b in zip(res.start, base.start, strict=True)]
    days = res.horizon_s / 86400
    n = len(added)
    return {
        "setting": setting,
        "energy_saved_kwh": base.energy_kwh(pm) - res.energy_kwh(pm),
        "node_hours_off": res.off_s / 3600,
        "added_wait_avg_s": sum(added) / n if n else 0.0,
        "added_wait_p99_s": percentile(sorted(added), 99) if n else 0.0,
        "jobs_delayed": sum(1 for a in added if a > 1.0),
        "cycles_per_node_day": res.horizon_power_downs / res.num_nodes / days if days else 0.0,
        "energy_kwh": res.energy_kwh(pm),
        "utilization": res.utilization,
        "wakes": res.wakes,
        "demand_wakes": res.demand_wakes,
        "max_cycles_per_node_day": (
            max(res.horizon_cycles_per_node, default=0) / days if days else 0.0
        ),
    }


def dominance(
    timer: Sequence[dict[str, Any]],
    gh: Sequence[dict[str, Any]],
    wait_key: str = "added_wait_avg_s",
) -> list[dict[str, Any]]:
    """For each idle-timer point, the gpuhint settings that save at least as much energy
    with no more ``wait_key`` (the first such, by least wait, or None)."""
    out = []
    for tp in timer:
        ok = [
            g
            for g in gh
            if g["energy_saved_kwh"] >= tp["energy_saved_kwh"] - 1e-9
            and g[wait_key] <= tp[wait_key] + 1e-9
        ]
        best = min(ok, key=lambda g: g[wait_key]) if ok else None
        out.append({"suspend_s": tp["setting"], "by": best["setting"] if best else None})
    return out


def default_check(
    default: dict[str, Any], timer: Sequence[dict[str, Any]], wait_key: str = "added_wait_avg_s"
) -> dict[str, Any]:
    """The target against SuspendTime = 3600 s: >= its energy, <= half its added wait."""
    ref = next((p for p in timer if p["setting"] == 3600), None)
    if ref is None:
        return {"energy_ok": None, "wait_ok": None}
    return {
        "timer_3600_energy_saved_kwh": ref["energy_saved_kwh"],
        f"timer_3600_{wait_key}": ref[wait_key],
        "energy_ok": default["energy_saved_kwh"] >= ref["energy_saved_kwh"] - 1e-9,
        "wait_ok": default[wait_key] <= 0.5 * ref[wait_key] + 1e-9,
    }


def evaluate_jobs(
    prep: Prepared,
    nodes: int,
    pm: PowerModel,
    *,
    scheduler: Scheduler = "fifo",
    suspend_times: Sequence[float] = SUSPEND_TIMES_S,
    quantiles: Sequence[float] = QUANTILES,
    default_quantile: float = DEFAULT_QUANTILE,
    max_cycles_per_day: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Every baseline and both frontiers on one pool of ``nodes`` nodes."""
    jobs = prep.jobs
    prio = prep.priority if scheduler == "qssf" else None
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()

    def run(policy: PowerPolicy) -> PowerResult:
        return simulate_power(
            jobs, nodes, policy, power=pm, predicted=prep.predicted, priorities=prio
        )

    base = run(AlwaysOn())
    say(f"all nodes on: {base.energy_kwh(pm):,.0f} kWh, utilization {base.utilization:.1%}")
    timer = [point(int(s), run(IdleTimer(s)), base, jobs, pm) for s in suspend_times]
    say(f"idle timer: {len(timer)} SuspendTimes")
    ja_kw: dict[str, Any] = {}
    if max_cycles_per_day is not None:
        ja_kw["max_cycles_per_day"] = max_cycles_per_day
    qs = sorted(set(quantiles) | {default_quantile})
    gh = {
        q: point(q, run(JobAware(JobAwareConfig(quantile=q, **ja_kw))), base, jobs, pm) for q in qs
    }
    say(f"gpuhint: {len(gh)} settings")
    slot = 600
    art = point(
        "artifact", run(SlotRule(artifact_config(), LoadForecaster(slot_s=slot))), base, jobs, pm
    )
    series_pol = point(
        "series-forecast", run(SlotRule(PowerPolicyConfig(), LoadForecaster())), base, jobs, pm
    )
    frontier = {"idle_timer": timer, "gpuhint": [gh[q] for q in qs if q in quantiles]}
    default = gh[default_quantile]
    waits = [s - j.submit for s, j in zip(base.start, jobs, strict=True)]
    return {
        "nodes": nodes,
        "jobs": len(jobs),
        "scheduler": scheduler,
        "days": base.horizon_s / 86400,
        "all_on": {
            "energy_kwh": base.energy_kwh(pm),
            "utilization": base.utilization,
            "avg_wait_s": sum(waits) / len(waits) if waits else 0.0,
        },
        "frontier": frontier,
        "default": default,
        "artifact": art,
        "series_policy": series_pol,
        "dominance": dominance(timer, frontier["gpuhint"]),
        "default_vs_timer_3600": default_check(default, timer),
        "seconds_simulating": time.perf_counter() - t0,
    }


def plot_frontier(report: dict[str, Any], path: str, title: str) -> None:
    """Energy saved (x) against average added wait (y): both frontiers and the rules."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wk = "added_wait_avg_s" if report.get("mode") != "series" else "shortfall_node_min"
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, color, lab in (
        ("idle_timer", "tab:gray", "Slurm idle timer (SuspendTime)"),
        ("gpuhint", "tab:green", "gpuhint"),
    ):
        pts = report["frontier"][name]
        xs = [p["energy_saved_kwh"] for p in pts]
        ys = [p[wk] for p in pts]
        ax.plot(xs, ys, marker="o", color=color, label=lab)
        for p, x, y in zip(pts, xs, ys, strict=True):
            s = p["setting"]
            txt = _fmt_setting(s) if name == "idle_timer" else f"q{s:g}"
            ax.annotate(txt, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    d = report["default"]
    ax.scatter(
        [d["energy_saved_kwh"]],
        [d[wk]],
        s=90,
        facecolors="none",
        edgecolors="tab:green",
        zorder=5,
        label="gpuhint default",
    )
    for key, marker in (("artifact", "x"), ("series_policy", "^")):
        if key in report and report[key] is not None:
            p = report[key]
            ax.scatter(
                [p["energy_saved_kwh"]],
                [p[wk]],
                marker=marker,
                color="tab:red",
                label=f"{key.replace('_', ' ')} rule",
            )
    ax.set_xlabel("energy saved against all nodes on (kWh)")
    ax.set_ylabel(
        "added wait, average (s)" if wk.startswith("added") else "shortfall (node-minutes)"
    )
    ax.set_title(title)
    ax.grid(ls=":")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt_setting(s: float) -> str:
    s = float(s)
    return f"{s / 3600:g}h" if s >= 3600 else f"{s / 60:g}m"
