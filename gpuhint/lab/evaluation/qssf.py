"""QSSF on a real trace: the online predictor's hints, then every policy in the simulator.

1. Closed loop (the default): each VC's QSSF run drives a live predictor inside the
   simulation (:class:`ClosedLoopRanker`): a job is predicted when it arrives, the
   model learns from each job when it ends *in the simulated schedule*, and the waiting
   jobs a finished job bears on are re-ranked (hint updates), as a deployment would.
   Open loop (``loop="open"``, the artifact's way): the trace's own events go through
   :class:`gpuhint.cores.qssf.HintEngine` (learn at the trace's finish times) and each job
   keeps the priority of the hint written at its submit.
2. Each VC is simulated (``models.simulator``) under FIFO, SJF, SRTF, the QSSF oracle
   (true GPUs x duration), QSSF with those hints, and QSSF with given priorities.
3. Each policy is summarized by averages and percentiles and by its tails (max / p99
   wait, p99 bounded slowdown, share of jobs over 2x / 10x their FIFO JCT:
   :func:`models.simulator.metrics.tail_stats`); the QSSF hints at submit are scored
   against the true durations (80% band coverage, share off by 2x: :class:`BandStats`).

No printing here: the CLI (``gpuhint/cli/evaluate_qssf.py``) formats the report.

The parts: side inputs (:mod:`~gpuhint.lab.evaluation.qssf_inputs`), the online and
closed-loop hints (:mod:`~gpuhint.lab.evaluation.qssf_online`), the report
(:mod:`~gpuhint.lab.evaluation.qssf_report`) and the demo's schedule
(:mod:`~gpuhint.lab.evaluation.qssf_schedule`); this module runs the evaluation and
stays the import path of all of them.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuhint.lab.evaluation.qssf_curve import BoundPoint
from gpuhint.lab.evaluation.qssf_inputs import (
    GPUS_PER_NODE,
    MAX_NODES,
    InputError,
    check_fit,
    read_priorities,
    read_vc_config,
    sim_job,
)
from gpuhint.lab.evaluation.qssf_online import (
    ClosedLoopRanker,
    OnlinePredictions,
    merge_predictions,
    predict_online,
)
from gpuhint.lab.evaluation.qssf_report import (
    BandStats,
    Loop,
    PolicyResult,
    PolicySpec,
    QssfReport,
    band_stats,
    plot_jct_cdf,
    policy_specs,
    score_hints,
)
from gpuhint.lab.evaluation.qssf_schedule import ScheduleSummary, WaitingJob, schedule_summary
from gpuhint.lab.evaluation.starts import StartRecorder, start_accuracy
from gpuhint.lab.traces.readers import TraceJob
from models.simulator import SimJob, simulate_vc, size_vcs, summarize
from models.simulator.easy import simulate_easy
from models.simulator.metrics import tail_stats

__all__ = [
    "GPUS_PER_NODE",
    "BandStats",
    "ClosedLoopRanker",
    "InputError",
    "Loop",
    "OnlinePredictions",
    "PolicyResult",
    "PolicySpec",
    "Progress",
    "QssfReport",
    "ScheduleSummary",
    "WaitingJob",
    "band_stats",
    "evaluate_qssf",
    "plot_jct_cdf",
    "policy_specs",
    "predict_online",
    "read_priorities",
    "read_vc_config",
    "schedule_summary",
]

Progress = Callable[[str], None]


def evaluate_qssf(
    jobs: Sequence[TraceJob],
    *,
    model: str,
    vc_nodes: Mapping[str, int] | None = None,
    target_load: float = 0.9,
    given_priorities: Mapping[str, float] | None = None,
    given_times_gpus: bool = False,
    backfill: bool = False,
    loop: Loop = "closed",
    progress: Progress | None = None,
    wait_bound: float | None = None,
    bound_curve: Sequence[float] = (),
) -> QssfReport:
    """Run the online predictor over ``jobs`` and simulate every policy on each VC.

    ``loop="closed"``: the QSSF runs learn and re-rank inside the simulated schedule
    (module docstring); ``"open"``: hints from the trace's own timeline.
    ``wait_bound``: the starvation bound's factor in the closed loop (None: the
    default, :data:`models.wait_bound.DEFAULT_WAIT_BOUND`; 0: off). ``bound_curve``:
    factors to run the closed-loop ``qssf`` policy at as well (the report's
    ``wait_bound_curve``; :mod:`gpuhint.lab.evaluation.qssf_curve`).
    """
    from models.wait_bound import DEFAULT_WAIT_BOUND

    bound = DEFAULT_WAIT_BOUND if wait_bound is None else wait_bound
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    preds = _predict_open(jobs, model, say) if loop == "open" else None
    gpu_idx, by_vc = _gpu_jobs_by_vc(jobs)
    sizes, sizing = _vc_sizes(jobs, by_vc, vc_nodes, target_load)
    check_fit([jobs[k] for k in gpu_idx], sizes, sizing)
    given_prio, given_info = _given(jobs, given_priorities, given_times_gpus)

    runs = _Runs(jobs, by_vc, sizes, model, bound, open_preds=preds)
    runs.sources = {
        "oracle": [j.num_gpus * j.duration for j in jobs],
        "online": preds.priority if preds is not None else [],
        "given": given_prio,
        "limit": [j.num_gpus * j.time_limit_s if j.time_limit_s else math.inf for j in jobs],
    }
    has_limits = any(jobs[k].time_limit_s for k in gpu_idx)
    results: dict[str, PolicyResult] = {}
    for spec in policy_specs(given_priorities is not None, backfill, loop, has_limits):
        results[spec.name] = r = runs.policy(spec)
        say(f"  simulated {spec.name:<22} {r.seconds:6.2f} s")
    # tails: per job, in the order every policy appended (VC by VC, trace order within)
    durations = [jobs[k].duration for ks in by_vc.values() for k in ks]
    fifo_jct = results["fifo"].jct
    for r in results.values():
        r.tails = tail_stats(r.wait, r.jct, durations, fifo_jct)
    curve = _bound_curve(runs, bound_curve, results, durations, say) if loop == "closed" else None
    if preds is None:
        preds = merge_predictions(len(jobs), list(runs.loop_preds.values()), model)
    band = score_hints(jobs, gpu_idx, preds)
    total = time.perf_counter() - t_start
    return QssfReport(
        jobs_total=len(jobs),
        jobs_simulated=len(gpu_idx),
        jobs_without_gpus=len(jobs) - len(gpu_idx),
        vc_sizes=sizes,
        vc_sizing=sizing,
        target_load=target_load,
        predictions=preds,
        policies=results,
        given=given_info,
        seconds={
            "predict": preds.seconds,
            "simulate": sum(r.seconds for r in results.values()),
            "total": total,
        },
        loop=loop,
        band=band,
        expected_start=start_accuracy(runs.start_runs) if runs.start_runs else None,
        wait_bound=bound if loop == "closed" else None,
        overdue=runs.overdue,
        overdue_easy=runs.overdue_easy if "qssf+easy" in results and loop == "closed" else None,
        wait_bound_curve=curve,
    )


def _bound_curve(
    runs: _Runs,
    factors: Sequence[float],
    results: Mapping[str, PolicyResult],
    durations: list[float],
    say: Progress,
) -> list[BoundPoint] | None:
    """The closed-loop ``qssf`` policy at each factor (the run at ``runs.bound`` reused);
    None for no factors."""
    if not factors:
        return None
    spec = results["qssf"].spec
    fifo = results["fifo"]
    assert fifo.tails is not None
    points = []
    for f in factors:
        secs = 0.0
        if f == runs.bound:
            r, overdue = results["qssf"], runs.overdue
        else:
            again = _Runs(runs.jobs, runs.by_vc, runs.sizes, runs.model, f)
            r = again.policy(spec)
            overdue, secs = again.overdue, r.seconds
        tails = tail_stats(r.wait, r.jct, durations, fifo.jct)
        points.append(BoundPoint(f, r.summary.avg_jct_s, tails, overdue, fifo.tails, secs))
        say(f"  wait bound {f:>5g}: avg JCT {r.summary.avg_jct_s:,.0f} s, {overdue} overdue")
    return points


def _predict_open(jobs: Sequence[TraceJob], model: str, say: Progress) -> OnlinePredictions:
    """The open loop's hints: the trace's own events through the hint core."""
    say(
        f"predicting with {model!r} over {len(jobs):,} jobs "
        "(open loop: predict at submit, learn at the trace's finish times)"
    )
    preds = predict_online(jobs, model)
    say(f"  {preds.events:,} events in {preds.seconds:.2f} s")
    return preds


def _gpu_jobs_by_vc(jobs: Sequence[TraceJob]) -> tuple[list[int], dict[str, list[int]]]:
    """The GPU jobs' trace indexes, and the same by VC (trace order within a VC)."""
    gpu_idx = [k for k, j in enumerate(jobs) if j.num_gpus > 0]
    by_vc: dict[str, list[int]] = defaultdict(list)
    for k in gpu_idx:
        by_vc[jobs[k].vc].append(k)
    if not gpu_idx:
        raise InputError("trace", 0, "no job asks for a GPU: nothing to schedule")
    return gpu_idx, by_vc


def _vc_sizes(
    jobs: Sequence[TraceJob],
    by_vc: Mapping[str, list[int]],
    vc_nodes: Mapping[str, int] | None,
    target_load: float,
) -> tuple[dict[str, int], dict[str, str]]:
    """Nodes per VC (given, else sized to ``target_load``) and how each was sized."""
    sizing: dict[str, str] = {}
    sizes: dict[str, int] = {}
    to_size = [vc for vc in by_vc if vc_nodes is None or vc not in vc_nodes]
    load_sizes: dict[str, int] = {}
    if to_size:
        load_sizes = size_vcs(
            {
                vc: [(jobs[k].submit_time, jobs[k].duration, jobs[k].num_gpus) for k in ks]
                for vc, ks in by_vc.items()
            },
            target_load,
            GPUS_PER_NODE,
        )
    for vc in sorted(by_vc):
        if vc_nodes is not None and vc in vc_nodes:
            sizes[vc], sizing[vc] = vc_nodes[vc], "given"
        else:
            sizes[vc], sizing[vc] = load_sizes[vc], f"sized to load {target_load:g}"
            if sizes[vc] > MAX_NODES:
                raise InputError(
                    "trace",
                    0,
                    f"VC {vc!r} sized to load {target_load:g} needs {sizes[vc]:,} nodes, "
                    f"over {MAX_NODES:,}: give a higher target load",
                )
    return sizes, sizing


def _given(
    jobs: Sequence[TraceJob], given_priorities: Mapping[str, float] | None, times_gpus: bool
) -> tuple[list[float], dict[str, object] | None]:
    """The given priorities in trace order (inf: none given) and the report's note."""
    given_prio: list[float] = []
    if given_priorities is None:
        return given_prio, None
    missing = 0
    for j in jobs:
        p = given_priorities.get(j.job_id)
        if p is None:
            if j.num_gpus > 0:
                missing += 1
            given_prio.append(math.inf)
        else:
            given_prio.append(p * j.num_gpus if times_gpus else p)
    return given_prio, {
        "missing": missing,
        "missing_treatment": "ranked after every job that has a priority "
        "(among themselves: fewer GPUs first, then submit order)",
        "times_gpus": times_gpus,
    }


@dataclass
class _Runs:
    """Simulates one policy on every VC; keeps what the closed-loop QSSF runs leave."""

    jobs: Sequence[TraceJob]
    by_vc: Mapping[str, list[int]]
    sizes: Mapping[str, int]
    model: str
    bound: float
    sources: dict[str, list[float]] = field(default_factory=dict)
    """Priorities by source (``PolicySpec.priority``), in trace order."""
    loop_preds: dict[str, tuple[list[int], OnlinePredictions]] = field(default_factory=dict)
    start_runs: list[tuple[list[float], list[float], StartRecorder]] = field(default_factory=list)
    overdue: int = 0
    overdue_easy: int = 0
    """Jobs the starvation bound promoted in the closed-loop ``qssf+easy`` runs."""
    sim_jobs: dict[str, list[SimJob]] = field(default_factory=dict)
    open_preds: OnlinePredictions | None = None
    """The open loop's hints (trace order); None in the closed loop."""

    def __post_init__(self) -> None:
        self.sim_jobs = {vc: [sim_job(self.jobs[k]) for k in ks] for vc, ks in self.by_vc.items()}

    def policy(self, spec: PolicySpec) -> PolicyResult:
        """Every VC under ``spec``: per-job JCT, queueing and wait, VC by VC."""
        jobs = self.jobs
        t0 = time.perf_counter()
        gpus: list[int] = []
        jct: list[float] = []
        queue: list[float] = []
        wait: list[float] = []
        for vc, ks in self.by_vc.items():
            sj = self.sim_jobs[vc]
            prios = None
            ranker: ClosedLoopRanker | None = None
            if spec.priority == "loop":
                ranker = ClosedLoopRanker([jobs[k] for k in ks], self.model, wait_bound=self.bound)
            elif spec.priority is not None and not spec.easy:
                src = self.sources[spec.priority]
                prios = [src[k] for k in ks]
            if spec.easy and spec.priority == "hint" and self.open_preds is None:
                # closed loop: the hints learn from, re-rank and bound waits in EASY's
                # schedule; its reservations on their p90s, or on the requested limits
                easy = ClosedLoopRanker([jobs[k] for k in ks], self.model, wait_bound=self.bound)
                if spec.run_times == "hint":
                    out = simulate_easy(
                        sj, self.sizes[vc], None, None, ranker=easy, run_time=easy.run_time
                    )
                    self.overdue_easy += easy.engine.stats.overdue
                else:
                    out = simulate_easy(sj, self.sizes[vc], None, self._limits(ks), ranker=easy)
            elif spec.easy:
                keys, lims = self._easy_inputs(spec, vc, ks)
                out = simulate_easy(sj, self.sizes[vc], keys, lims)
            else:
                out = simulate_vc(
                    sj,
                    self.sizes[vc],
                    spec.kind,
                    priorities=prios,
                    ranker=ranker,
                    backfill=spec.backfill,
                )
            if ranker is not None and not spec.backfill:
                self.loop_preds[vc] = (ks, ranker.summary())
                self.start_runs.append(
                    ([j.submit for j in sj], [o.start for o in out], ranker.starts)
                )
                self.overdue += ranker.engine.stats.overdue
            for job, o in zip(sj, out, strict=True):
                gpus.append(job.gpus)
                jct.append(o.end - job.submit)
                queue.append(o.queue)
                wait.append(o.start - job.submit)
        secs = time.perf_counter() - t0
        return PolicyResult(spec, summarize(gpus, jct, queue), jct, secs, wait=wait)

    def _limits(self, ks: list[int]) -> list[float | None]:
        """The requested limits of these jobs (None: none given)."""
        return [self.jobs[k].time_limit_s or None for k in ks]

    def _easy_inputs(
        self, spec: PolicySpec, vc: str, ks: list[int]
    ) -> tuple[list[float], list[float | None]]:
        """EASY's queue keys and run times for one VC: submit order, or
        (``priority="hint"``, open loop only: the closed loop runs its own hint core in
        EASY's schedule) the open loop's hints at submit; the requested limits, or
        (``run_times="hint"``) those hints' p90s."""
        limits = self._limits(ks)
        if spec.priority != "hint":
            return [j.submit for j in self.sim_jobs[vc]], limits
        if self.open_preds is None:
            raise RuntimeError(f"{spec.name}: no open-loop hints (the closed loop runs its own)")
        p, pos = self.open_preds, ks
        prio = p.submit_priority or p.priority
        keys = [_finite_or(prio[i], math.inf) for i in pos]
        if spec.run_times != "hint":
            return keys, limits
        run = p.p90 or p.predicted_duration
        return keys, [None if not math.isfinite(run[i]) else run[i] for i in pos]


def _finite_or(x: float, default: float) -> float:
    return x if math.isfinite(x) else default
