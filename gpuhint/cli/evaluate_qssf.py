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
from gpuhint.cli.evaluate_qssf_text import print_text

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
without that policy). With --wait-bound-curve, wait_bound_curve: a list of {factor,
avg_jct_s, avg_jct_change (against factor 0, the bound off), max_wait_s, p99_wait_s,
p99_bounded_slowdown, share_jct_over_2x_fifo, share_jct_over_10x_fifo,
max_wait_over_fifo, p99_wait_over_fifo, overdue}, and seconds.curve (the time of its
extra runs); null (no seconds.curve) without it.
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
    _add_bound_args(p)
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


def _add_bound_args(p: argparse.ArgumentParser) -> None:
    """The starvation bound's flags: its factor, and the curve along it."""
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
        "--wait-bound-curve",
        nargs="?",
        const="",
        default=None,
        metavar="F,F,...",
        help="also run the closed-loop qssf policy at each of these bound factors (default "
        "list: 1,2,4,8,12,16; off and this run's factor are always added) and show its "
        "trade-off: average JCT against the longest and p99 waits over FIFO's, to choose "
        "GPUHINT_QSSF_WAIT_BOUND on your own trace (plot: <plot>_wait_bound.png)",
    )


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


def _curve_factors(args: argparse.Namespace) -> tuple[float, ...]:
    """``--wait-bound-curve``'s factors (none when not given; closed loop only)."""
    from gpuhint.lab.evaluation.qssf_curve import DEFAULT_CURVE, parse_factors

    if args.wait_bound_curve is None:
        return ()
    if args.open_loop:
        raise UserError("--wait-bound-curve needs the closed loop (the bound acts there)")
    if not args.wait_bound_curve.strip():
        return DEFAULT_CURVE
    try:
        return parse_factors(args.wait_bound_curve)
    except ValueError as exc:
        raise UserError(f"--wait-bound-curve: {exc}") from None


def _curve_plot(report: Any, plot: str, name: str) -> Path:
    from gpuhint.lab.evaluation.qssf_curve import plot_bound_curve

    path = Path(plot)
    target = path.with_name(f"{path.stem}_wait_bound{path.suffix or '.png'}")
    try:
        return plot_bound_curve(
            report.wait_bound_curve, target, f"{name}: starvation bound"
        ).resolve()
    except OSError as exc:
        raise UserError(f"cannot write the plot to {target}: {exc}") from None


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
    curve = _curve_factors(args)
    if curve:  # this run's own factor is a point of its curve
        curve = tuple(sorted({*curve, wait_bound}))
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
            bound_curve=curve,
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
        if report.wait_bound_curve:
            curve_png = _curve_plot(report, args.plot, Path(args.trace).name)
            _progress(f"wait-bound curve written to {curve_png}")
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
    print_text(args, read.fmt, report, written, elapsed)
    return 0
