"""``gpuhint evaluate qssf``'s text report: the policy table, JCT by GPUs, the tails, the
hints' band, the expected starts and (``--wait-bound-curve``) the bound's trade-off."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any


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


def _print_head(head: str) -> None:
    """A table's header line and its rule."""
    print(head)
    print("-" * len(head))


def _print_tails(report: Any) -> None:
    print("tails (waits in hours; bsld = JCT / max(duration, 60 s); jobs over 2x / 10x")
    print("their own JCT under FIFO):")
    head = (
        f"{'policy':<22} {'max wait':>10} {'p99 wait':>10} {'p99 bsld':>10} "
        f"{'>2x FIFO':>9} {'>10x FIFO':>10}"
    )
    _print_head(head)
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
    _print_curve(report)


def _print_curve(report: Any) -> None:
    """``--wait-bound-curve``: the closed-loop qssf policy at each factor."""
    from gpuhint.lab.evaluation.qssf_curve import curve_dicts

    if not report.wait_bound_curve:
        return
    print()
    print("starvation bound along its knob (qssf, closed loop; waits over FIFO's):")
    head = (
        f"{'factor':<20} {'avg JCT s':>11} {'vs off':>8} {'max wait':>9} {'p99 wait':>9} "
        f"{'>2x FIFO':>9} {'overdue':>8}"
    )
    _print_head(head)
    for d in curve_dicts(report.wait_bound_curve):
        f = d["factor"]
        name = ("off" if f == 0 else f"{f:g}") + (" (this run)" if f == report.wait_bound else "")
        change = "-" if d["avg_jct_change"] is None else f"{100 * d['avg_jct_change']:+.1f}%"
        print(
            f"{name[:20]:<20} {d['avg_jct_s']:>11,.0f} {change:>8} "
            f"{_times(d['max_wait_over_fifo']):>9} {_times(d['p99_wait_over_fifo']):>9} "
            f"{_fmt_share(d['share_jct_over_2x_fifo']):>9} {d['overdue']:>8,}"
        )


def _times(x: float | None) -> str:
    """A ratio to FIFO's: ``1.94x`` (``-`` for none)."""
    return "-" if x is None else f"{x:.2f}x"


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


def print_text(
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
    _print_head(head)
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
    if r.wait_bound_curve:
        more = sum(1 for p in r.wait_bound_curve if p.factor != r.wait_bound)
        print(f"time: the wait-bound curve's {more} more runs {r.curve_seconds:.2f} s")
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
