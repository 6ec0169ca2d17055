"""``gpuhint evaluate qssf``: what gpuhint's priority hints are worth in job completion time."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from gpuhint.cli.common import (
    UserError,
    add_config_args,
    add_trace_args,
    json_text,
    load_trace,
    report_skipped,
    settings_from,
)
from gpuhint.cli.evaluate import plot_target

HELP = "simulate FIFO/SJF/SRTF/QSSF on a job trace with gpuhint's online hints"

DESCRIPTION = """\
Schedules a job trace's GPU jobs with gpuhint's online QSSF priority hints (expected
GPU-seconds = GPUs x expected duration) and compares them with other policies.

Closed loop (the default): the QSSF run drives the online duration model inside the
simulated schedule, as a live deployment would: a job is predicted when it arrives, the
model learns from each job when it finishes IN THE SIMULATED SCHEDULE, and the hints of
waiting jobs that the finished job bears on (same burst / user) are updated, so the
queue is re-ranked. Nothing is looked up ahead. --open-loop instead replays the trace's
own timeline through the model (learning at the trace's finish times, each job keeping
its submit-time hint), as the paper's artifact evaluates a predictor.

Every policy runs in a simulator faithful to the Helios paper's artifact (SC '21):
one simulation per virtual cluster (VC), 8-GPU nodes, consolidating placement (a job
of up to 8 GPUs goes to the fullest node it fits on, larger jobs take whole nodes), jobs
started in queue order until one does not fit (no backfill unless --backfill).

policies:
  fifo          first in, first out: the baseline
  sjf           shortest job first by the TRUE duration (an oracle; as the artifact, by
                duration alone, not GPUs x duration)
  srtf          shortest remaining TRUE time first, preemptive (an oracle; a preempted
                job pays the artifact's checkpoint cost: 7 s / 30 s / 60 s)
  qssf-oracle   quasi-shortest-service-first with the TRUE service (GPUs x duration):
                the best QSSF could do with a perfect predictor ("the oracle")
  qssf          QSSF with gpuhint's online hints (the model of --model; closed loop
                unless --open-loop)
  qssf-given    QSSF with the priorities of --priorities (e.g. a published predictor)
  X+backfill    with --backfill: the non-preemptive policies again, letting jobs that
                fit start ahead of a blocked head (greedy, no reservation)
  sjf-limit     (traces with requested time limits) smallest GPUs x requested limit
                first: what a site can rank by without gpuhint
  fifo+easy     (traces with requested time limits) FIFO with EASY backfill on the
                requested limits, as Slurm's backfill: the head job gets a reservation,
                later jobs start early only if they end by it or use spare GPUs
  qssf+easy     (with --backfill, or traces with time limits) QSSF's hints with EASY
                backfill, gpuhint's p90 duration as each job's run time: what gpuhint
                adds to a site's backfill, with no time limits needed; in the closed
                loop the hints learn, re-rank and bound waits in this schedule (the
                starvation bound's overdue job gets the reservation)
  qssf+easy-limit  (traces with time limits) QSSF's hints with EASY backfill on the
                requested limits: gpuhint's priorities under a site's own backfill,
                what a Slurm site runs with `slurm apply-priorities` and sched/backfill

the table:
  avg JCT       average job completion time (finish - submit), all GPU jobs
  avg queue     average time waiting before start (for srtf: all waits)
  xFIFO         policy's avg JCT / FIFO's: below 1 is better than FIFO
  xoracle       policy's avg JCT / qssf-oracle's: 1.10 means 10% behind the oracle

the tails table (per job, then over jobs; waits in hours):
  max wait      longest wait before a job's (first) start, start - submit
  p99 wait      99th percentile of those waits
  p99 bsld      99th percentile of bounded slowdown, JCT / max(duration, 60 s)
  >2x FIFO      share of jobs whose JCT is over 2x their own JCT under FIFO (same run)
  >10x FIFO     the same over 10x
and the QSSF hints as written at submit against the true durations: the share inside
the hint's 80% band (p10..p90), and the share off by a factor of 2 or more either way.

JCT depends on how big each VC is: --vc-config gives node counts (a CSV with a header
and rows vc,nodes: the artifact's vc_config files read as they are); VCs it does not
list are sized so that their offered load (GPU-seconds submitted / (GPUs x time from the
first to the last submit)) is --target-load, with at least enough nodes for their
largest job. The sizes used are printed. Jobs without GPUs feed the predictor but are
not scheduled.
"""

EPILOG = """\
examples:
  gpuhint evaluate qssf --trace venus_sept_2vc.csv --vc-config venus_vc_config.csv \\
      --priorities venus_sept_artifact_lgb_predictions.csv --priority-times-gpus
  gpuhint evaluate qssf --trace philly_sampled_jobs.json --target-load 0.9 --json

--json prints one object: policies.<name>.{avg_jct_s, avg_queue_s, p50/p95/p99_jct_s,
by_gpus}, jct_ratio_fifo_over_qssf, jct_ratio_qssf_over_fifo (below 1: QSSF beats
FIFO), jct_ratio_qssf_over_sjf, jct_ratio_qssf_over_oracle, loop ("closed" or "open"),
hint_updates (waiting jobs re-ranked during the closed-loop run; 0 in open loop),
mae_log (mean |log(1+predicted) - log(1+true)|), median_abs_pct_error (a fraction:
0.5 = 50%), vc_sizes. Progress goes to stderr.
Tails, under each policy: max_wait_s, p99_wait_s, p99_bounded_slowdown,
share_jct_over_2x_fifo, share_jct_over_10x_fifo (fractions; 0 for fifo). The qssf
policy's hints at submit, top level: band_coverage (share of band_jobs whose true
duration is within [p10, p90]), share_off_2x (point forecast off by >= 2x either way),
share_off_2x_expected (the same for the expected duration the priority ranks by).
The starvation bound, top level: wait_bound (the factor used; null in open loop) and
overdue (waiting jobs it moved to the front in the qssf run), overdue_easy (the same
in the qssf+easy run, which in the closed loop has its own hints and bound; null
without that policy).
Expected starts (closed loop; null in open loop), top level expected_start:
jobs_waited (jobs that waited >= 1 min), jobs_forecast (of those, named by a forecast
before they started), median_rel_error (median |expected - actual start| / wait of the
first forecast), band_coverage (share started inside its 80% band),
exact_median_rel_error (the same for squeue --start had every limit been the job's
true duration: the part of the error that knowing durations does not remove),
limit_jobs, limit_median_rel_error, median_rel_error_limit_jobs (where the trace has
time limits: squeue --start on them, and gpuhint's error on the same jobs).
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    from models.registry import DEFAULT_MODEL, DURATION_MODELS

    p = sub.add_parser(
        "qssf",
        help=HELP,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--trace", metavar="FILE", required=True, help="job trace (Helios, Philly, plain, sacct)"
    )
    add_trace_args(p)
    p.add_argument(
        "--model",
        choices=sorted(DURATION_MODELS),
        default=DEFAULT_MODEL,
        help=f"online duration model behind the hints (default: {DEFAULT_MODEL})",
    )
    p.add_argument("--vc-config", metavar="CSV", help="nodes per VC: header, then rows vc,nodes")
    p.add_argument(
        "--target-load",
        type=float,
        default=0.9,
        metavar="U",
        help="size VCs not in --vc-config to this offered load, 0 < U <= 1 (default: 0.9)",
    )
    p.add_argument(
        "--priorities",
        metavar="CSV",
        help="job_id,priority (smaller runs first): adds policy qssf-given; jobs not in the "
        "file run after all that are",
    )
    p.add_argument(
        "--priority-times-gpus",
        action="store_true",
        help="multiply each given priority by the job's GPUs: for files of predicted "
        "durations, such as the Helios artifact's *_lgb.csv (its LGBEstimator does this)",
    )
    p.add_argument(
        "--backfill",
        action="store_true",
        help="also run each non-preemptive policy with backfilling",
    )
    p.add_argument(
        "--open-loop",
        action="store_true",
        help="learn from the trace's own timeline instead of the simulated schedule, no "
        "hint updates (the artifact's evaluation; for comparison)",
    )
    p.add_argument(
        "--wait-bound",
        type=float,
        default=None,
        metavar="F",
        help="starvation bound (closed loop): a job that has waited over F x the longest "
        "wait arrival order (FIFO) gave in its VC so far goes to the front, one at a time; "
        "0 turns it off (default: GPUHINT_QSSF_WAIT_BOUND, else 16; docs/qssf.md)",
    )
    p.add_argument(
        "--plot",
        metavar="PNG",
        default="qssf_jct_cdf.png",
        help="where to write the JCT CDF plot (default: ./qssf_jct_cdf.png)",
    )
    p.add_argument("--no-plot", action="store_true", help="do not write the plot")
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=_quiet_if_asked(run))


_QUIET = False


def _quiet_if_asked(handler: Any) -> Any:
    """``run`` with the progress lines off under ``--no-progress``."""

    def wrapped(args: argparse.Namespace) -> int:
        global _QUIET
        _QUIET = bool(args.no_progress)
        return int(handler(args))

    return wrapped


def _wait_bound(args: argparse.Namespace) -> float:
    """``--wait-bound``, else the setting (``GPUHINT_QSSF_WAIT_BOUND``, the config file)."""
    flag: float | None = args.wait_bound
    if flag is None:
        return settings_from(args).qssf_wait_bound
    if not (flag >= 0 and math.isfinite(flag)):
        raise UserError(f"--wait-bound must be a finite number >= 0, got {flag}")
    return flag


def _progress(msg: str) -> None:
    if not _QUIET:
        print(msg, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from gpuhint.lab.evaluation.qssf import (
        InputError,
        evaluate_qssf,
        plot_jct_cdf,
        read_priorities,
        read_vc_config,
    )

    if not args.no_plot:
        args.plot = plot_target(args.plot)

    if not 0 < args.target_load <= 1:
        raise UserError(f"--target-load must be in (0, 1], got {args.target_load}")
    if args.priority_times_gpus and not args.priorities:
        raise UserError("--priority-times-gpus needs --priorities")
    wait_bound = _wait_bound(args)  # a bad value said before the trace is read
    t0 = time.perf_counter()
    try:
        vc_nodes = read_vc_config(args.vc_config) if args.vc_config else None
        given = read_priorities(args.priorities) if args.priorities else None
    except InputError as exc:
        raise UserError(str(exc)) from None
    _progress(f"reading {args.trace}")
    read = load_trace(args.trace, args.format, args.on_error)
    report_skipped(read)
    try:
        report = evaluate_qssf(
            read.jobs,
            model=args.model,
            vc_nodes=vc_nodes,
            target_load=args.target_load,
            given_priorities=given,
            given_times_gpus=args.priority_times_gpus,
            backfill=args.backfill,
            loop="open" if args.open_loop else "closed",
            progress=_progress,
            wait_bound=wait_bound,
        )
    except InputError as exc:
        msg = str(exc).replace("VC config", args.vc_config or "VC sizes")
        if msg.startswith("trace: "):  # the core's errors about the trace as a whole
            msg = f"{args.trace}: {msg.removeprefix('trace: ')}"
        raise UserError(msg) from None
    written = None
    if not args.no_plot:
        try:
            written = plot_jct_cdf(
                report, args.plot, title=f"{Path(args.trace).name}: JCT by policy"
            ).resolve()
        except OSError as exc:
            raise UserError(f"cannot write the plot to {args.plot}: {exc}") from None
        _progress(f"plot written to {written}")
    elapsed = time.perf_counter() - t0
    if args.json:
        out: dict[str, Any] = {
            "trace": str(args.trace),
            "format": read.fmt,
            "rows_skipped": len(read.errors),
            **report.as_dict(),
            "plot": str(written) if written else None,
        }
        out["seconds"]["command"] = round(elapsed, 3)
        print(json_text(out, indent=2))
        return 0
    _print_text(args, read.fmt, report, written, elapsed)
    return 0


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _fmt_hours(seconds: float) -> str:
    """``12.3 h``; ``0.43 h`` below an hour (``-`` for NaN)."""
    if not math.isfinite(seconds):
        return "-"
    h = seconds / 3600
    return f"{h:,.1f} h" if h >= 1 else f"{h:.2f} h"


def _fmt_share(x: float) -> str:
    """A share as a percentage: ``12.3%``, ``<0.1%`` for a small non-zero share."""
    if not math.isfinite(x):
        return "-"
    if 0 < x < 0.001:
        return "<0.1%"
    return f"{100 * x:.1f}%"


def _fmt_num(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:,.1f}"


def _print_tails(report: Any) -> None:
    print("tails (waits in hours; bsld = JCT / max(duration, 60 s); jobs over 2x / 10x")
    print("their own JCT under FIFO):")
    head = (
        f"{'policy':<22} {'max wait':>10} {'p99 wait':>10} {'p99 bsld':>10} "
        f"{'>2x FIFO':>9} {'>10x FIFO':>10}"
    )
    print(head)
    print("-" * len(head))
    for name, res in report.policies.items():
        t = res.tails
        if t is None:
            continue
        print(
            f"{name:<22} {_fmt_hours(t.max_wait_s):>10} {_fmt_hours(t.p99_wait_s):>10} "
            f"{_fmt_num(t.p99_bounded_slowdown):>10} {_fmt_share(t.share_jct_over_2x_fifo):>9} "
            f"{_fmt_share(t.share_jct_over_10x_fifo):>10}"
        )
    b = report.band
    if b is not None and b.jobs:
        print("QSSF hints as written at submit, against the true durations:")
        if b.band_jobs:
            print(
                f"  inside the 80% band (p10..p90): {_fmt_share(b.band_coverage)} "
                f"of {b.band_jobs:,} jobs"
            )
        else:
            print("  no 80% band from this model")
        print(
            f"  off by 2x or more: {_fmt_share(b.share_off_2x)} (point forecast), "
            f"{_fmt_share(b.share_off_2x_expected)} (expected duration, as ranked)"
        )
    _print_starts(report.expected_start)


def _print_starts(es: dict[str, Any] | None) -> None:
    """The expected starts' accuracy (closed loop), beside squeue --start's estimates."""
    if not es or not es.get("jobs_forecast"):
        return
    print(
        f"expected starts (first forecast of {es['jobs_forecast']:,} of the "
        f"{es['jobs_waited']:,} jobs that waited >= 1 min): median |error| "
        f"{_fmt_share(es['median_rel_error'])} of the wait, inside the 80% band "
        f"{_fmt_share(es['band_coverage'])}"
    )
    if es.get("exact_median_rel_error") is not None:
        print(
            f"  squeue --start with exact limits (the true durations, no arrivals): "
            f"{_fmt_share(es['exact_median_rel_error'])}"
        )
    if es.get("limit_median_rel_error") is not None:
        print(
            f"  squeue --start on the requested limits: {_fmt_share(es['limit_median_rel_error'])}"
            f" (gpuhint on the same {es['limit_jobs']:,} jobs: "
            f"{_fmt_share(es['median_rel_error_limit_jobs'])})"
        )


def _print_text(
    args: argparse.Namespace, fmt: str, report: Any, plot_path: Path | None, elapsed: float
) -> None:
    r = report
    p = r.predictions
    print(
        f"{args.trace} ({fmt}): {r.jobs_total:,} jobs, {r.jobs_simulated:,} GPU jobs scheduled"
        + (
            f", {r.jobs_without_gpus:,} without GPUs (predictor only)"
            if r.jobs_without_gpus
            else ""
        )
    )
    sizes = ", ".join(f"{vc} {n}" for vc, n in r.vc_sizes.items())
    how = sorted(set(r.vc_sizing.values()))
    print(f"VC sizes (8-GPU nodes, {sum(r.vc_sizes.values())} in all; {' / '.join(how)}): {sizes}")
    loop = (
        f"closed loop: learns in the simulated schedule, {p.hint_updates:,} hint updates"
        if r.loop == "closed"
        else "open loop: learns at the trace's finish times, no hint updates"
    )
    print(f"predictor {p.model} v{p.model_version} ({loop})")
    if p.mae_log is not None:
        print(
            f"  MAE(log duration) {p.mae_log:.3f}, "
            f"median |error| {100 * (p.median_abs_pct_error or 0):.0f}% over {p.scored:,} "
            f"finished jobs"
        )
    if r.given is not None:
        print(
            f"given priorities ({args.priorities}"
            + (", x GPUs" if r.given["times_gpus"] else "")
            + f"): {r.given['missing']:,} scheduled jobs missing, {r.given['missing_treatment']}"
        )
    print()
    head = (
        f"{'policy':<22} {'avg JCT s':>11} {'avg queue s':>12} {'p50 JCT':>10} "
        f"{'p95 JCT':>10} {'p99 JCT':>10} {'xFIFO':>6} {'xoracle':>7}"
    )
    print(head)
    print("-" * len(head))
    for name, res in r.policies.items():
        s = res.summary
        print(
            f"{name:<22} {s.avg_jct_s:>11,.0f} {s.avg_queue_s:>12,.0f} {s.p50_jct_s:>10,.0f} "
            f"{s.p95_jct_s:>10,.0f} {s.p99_jct_s:>10,.0f} {_fmt_ratio(r.ratio(name, 'fifo')):>6} "
            f"{_fmt_ratio(r.ratio(name, 'qssf-oracle')):>7}"
        )
    print()
    buckets = list(r.policies["fifo"].summary.by_gpus)
    print("average JCT (s) by GPUs per job:")
    print(f"{'policy':<22}" + "".join(f"{b:>10}" for b in buckets))
    jobs_row = r.policies["fifo"].summary.by_gpus
    print(f"{'(jobs)':<22}" + "".join(f"{jobs_row[b].jobs:>10,}" for b in buckets))
    for name, res in r.policies.items():
        by = res.summary.by_gpus
        print(f"{name:<22}" + "".join(f"{by[b].avg_jct_s:>10,.0f}" for b in buckets))
    print()
    _print_tails(r)
    print()
    fq, qs, qo = (
        r.ratio("fifo", "qssf"),
        r.ratio("qssf", "sjf"),
        r.ratio("qssf", "qssf-oracle"),
    )
    print(
        f"QSSF with gpuhint hints: {_fmt_ratio(fq)}x better than FIFO, "
        f"{_fmt_ratio(qs)}x SJF's JCT, {_fmt_ratio(qo)}x the oracle's"
    )
    if plot_path:
        print(f"JCT CDF plot: {plot_path}")
    _print_time(r, elapsed)


def _print_time(r: Any, elapsed: float) -> None:
    sec = r.seconds
    if r.loop == "closed":  # the hint core runs inside the qssf simulations
        print(
            f"time: simulations {sec['simulate']:.2f} s (the hint core's share "
            f"{sec['predict']:.2f} s), whole command {elapsed:.2f} s"
        )
    else:
        print(
            f"time: predictions {sec['predict']:.2f} s, simulations {sec['simulate']:.2f} s, "
            f"whole command {elapsed:.2f} s"
        )
