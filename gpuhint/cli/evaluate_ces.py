"""``gpuhint evaluate ces``: CES on a load series (``--series``) or a job trace (``--trace``)."""

from __future__ import annotations

import argparse
import math
import sys
import zlib
from pathlib import Path
from typing import Any

from gpuhint.cli.common import (
    UserError,
    _first_bad_utf8_line,
    add_on_error_arg,
    json_text,
)
from gpuhint.cli.evaluate import plot_target
from gpuhint.cli.evaluate_ces_jobs import JOBS_EPILOG

TRACE_FORMATS = ("helios", "philly", "plain", "sacct", "sacct-json")

DESCRIPTION = """\
With --trace JOBS (any trace format gpuhint reads, sacct included): run the jobs in the
power-saving simulator on nodes that are busy, idle, booting or off, under all nodes on,
Slurm's idle timer (SuspendTime 5 min .. 24 h), the artifact's CES rule and gpuhint's
job-aware policy along its knob, and print the Pareto table of energy saved against
the wait added to jobs (docs/ces.md).

With --series: replay a recorded cluster load series through CES exactly as the worker runs it:
online from the first slot, every node powered on at the start, strictly causal (the
forecaster and the policy see nothing after the slot they decide in).

Input (plain or .gz, detected from the header):
  time,active,total              per minute; 'active' = nodes running a job (Philly
                                 node sequence, earth_8vcs_nodes)
  time,...,total_gpu_num,running_gpu_num,...
                                 Helios per-VC sequence; nodes = ceil(GPUs / 8)
Rows are resampled to 10-minute slots taking the maximum over each slot.

Timing model: the powered-on count of slot t+1 is decided at the end of slot t.
If the used nodes of a slot exceed its powered-on count, that slot is a shortfall
(jobs wait while nodes wake); its effective powered-on count is the used count.
"""

EPILOG = """\
reported over the test window (both days included; default: the last 7 days):
  util_before / util_after   mean used/total vs mean used/powered-on
  mean_powered_off           nodes off on average; node-hours and kWh saved (W per node stated)
  changes_per_day            decisions that changed the powered-on count; wakeups_per_day: rises
  shortfall_events           slots with used > powered-on; shortfall_node_slots: sum of used - on
  forecast_mae               |forecast - actual| of the peak used nodes over the next 3 h

examples:
  gpuhint evaluate ces --series philly_node_sequence.csv.gz --test-from 2017-12-01 \\
      --test-to 2017-12-14 --plot philly.png
  gpuhint evaluate ces --series earth_8vcs_nodes.csv.gz --buffer 5 --json
  gpuhint evaluate ces --series vc.csv.gz --policy artifact --buffer 5   # the paper's rule
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "ces",
        help="replay a cluster load series through the CES forecaster and power policy",
        description=DESCRIPTION,
        epilog=EPILOG + "\n" + JOBS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--series", metavar="FILE", help="load series (csv or csv.gz)")
    src.add_argument("--trace", metavar="FILE", help="job trace (Helios, Philly, plain, sacct)")
    p.add_argument(
        "--format",
        choices=["auto", "nodes", "helios-vc", *TRACE_FORMATS],
        default="auto",
        help="series format (nodes, helios-vc) or trace format (helios, philly, plain, sacct, "
        "sacct-json); default: detect from the name and header",
    )
    add_on_error_arg(p)
    p.add_argument("--test-from", metavar="DATE", help="first test day YYYY-MM-DD (UTC)")
    p.add_argument("--test-to", metavar="DATE", help="last test day, included (default: last day)")
    p.add_argument(
        "--test-days", type=int, default=7, metavar="N", help="test days when no --test-from (7)"
    )
    p.add_argument(
        "--buffer",
        type=int,
        metavar="N",
        help="minimum idle nodes always kept on (default: max(1, 1%% of the cluster)); "
        "with --policy artifact the fixed buffer",
    )
    p.add_argument(
        "--watts-per-node",
        type=float,
        metavar="W",
        help="assumed draw of an idle powered-on node for energy figures (default 700)",
    )
    from gpuhint.cli.evaluate_ces_jobs import add_jobs_args

    add_jobs_args(p)
    p.add_argument(
        "--policy",
        choices=["forecast", "artifact"],
        default="forecast",
        help="forecast: buffer from the forecast band, wake ahead of rises (default); "
        "artifact: the paper's rule (fixed buffer, wake after a shortfall)",
    )
    p.add_argument("--max-changes-per-day", type=int, metavar="N", help="rate limit (default 3)")
    p.add_argument("--hold", type=int, metavar="SLOTS", help="no power-down after a wake (12)")
    p.add_argument("--horizon", type=int, metavar="SLOTS", help="forecast horizon, 1..18 (18)")
    p.add_argument("--gpus-per-node", type=int, default=8, help="for GPU-count series (8)")
    p.add_argument(
        "--plot",
        metavar="PATH",
        default=None,
        help="where to save the PNG: with --series used, powered-on and forecast nodes over "
        "the test window (default: ./ces_load.png); with --trace the energy / wait frontier "
        "(default: ./ces_frontier.png)",
    )
    p.add_argument("--no-plot", action="store_true", help="do not write the plot")
    p.add_argument(
        "--no-frontier",
        action="store_true",
        help="with --series: skip the idle-timer / buffer frontier (faster)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(handler=run)


def _config(args: argparse.Namespace) -> Any:
    from models.power_policy import PowerPolicyConfig

    kw: dict[str, Any] = {}
    if args.policy == "artifact":
        kw.update(
            use_band=False,
            proactive_wake=False,
            buffer_nodes=args.buffer if args.buffer is not None else 5,
            history_slots=6,
            history_threshold_frac=0.0,
            min_change_frac=0.0,
            min_change_nodes=1,
            hold_slots=12,
            max_changes_per_day=10**6,
            forecast_threshold_frac=-1.0,
        )
    elif args.buffer is not None:
        kw.update(min_buffer_nodes=args.buffer, min_buffer_frac=0.0)
    if args.watts_per_node is not None:
        kw["watts_per_node"] = args.watts_per_node
    if args.max_changes_per_day is not None:
        kw["max_changes_per_day"] = args.max_changes_per_day
    if args.hold is not None:
        kw["hold_slots"] = args.hold
    try:
        return PowerPolicyConfig(**kw)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    if not args.no_plot and args.plot:
        args.plot = plot_target(args.plot)
    if args.trace is not None:
        from gpuhint.cli.evaluate_ces_jobs import run_jobs

        return run_jobs(args)
    return run_series(args)


def _check_series_args(args: argparse.Namespace) -> None:
    """The flags of a ``--series`` run, each bad or ignored one a one-line error."""
    if args.format in TRACE_FORMATS:
        raise UserError(f"--format {args.format} is a job trace format: use --trace")
    if args.nodes is not None:
        raise UserError("--nodes sizes the pool of a --trace run; a --series has its node counts")
    for flag, val in (
        ("--quantile", args.quantile),
        ("--max-cycles-per-node-day", args.max_cycles_per_node_day),
    ):
        if val is not None:  # would be ignored: the series frontier has its own fixed default
            raise UserError(f"{flag} applies to a --trace run only")
    if args.buffer is not None and args.buffer < 0:
        raise UserError("--buffer must be >= 0")
    if args.horizon is not None and not 1 <= args.horizon <= 18:
        raise UserError("--horizon must be 1..18 slots (up to 3 hours)")
    if args.gpus_per_node < 1 or args.test_days < 1:
        raise UserError("--gpus-per-node and --test-days must be >= 1")
    if args.watts_per_node is not None and (
        args.watts_per_node < 0 or not math.isfinite(args.watts_per_node)
    ):
        raise UserError("--watts-per-node must be a finite number >= 0")


def run_series(args: argparse.Namespace) -> int:
    from gpuhint.lab.evaluation import ces
    from gpuhint.lab.traces.loadseries import SeriesError, read_series
    from models.forecast import LoadForecaster

    _check_series_args(args)
    try:
        series = read_series(
            args.series, args.format, args.on_error, gpus_per_node=args.gpus_per_node
        )
    except SeriesError as exc:
        raise UserError(f"{exc}\n  (use --on-error skip to skip bad rows)") from None
    except UnicodeDecodeError as exc:
        line = _first_bad_utf8_line(Path(args.series))
        where = f"{args.series}:{line}" if line else args.series
        raise UserError(f"{where}: not UTF-8 text ({exc.reason}); save the file as UTF-8") from None
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise UserError(f"{args.series}: {exc}") from None
    except (OSError, EOFError, zlib.error) as exc:  # a corrupt or truncated gzip
        raise UserError(f"{args.series}: cannot read: {exc}") from None
    for err in series.errors[:10]:
        print(f"skipped {err}", file=sys.stderr)
    if len(series.errors) > 10:
        print(f"... and {len(series.errors) - 10} more bad rows skipped", file=sys.stderr)
    try:
        lo, hi = ces.window_slots(series, args.test_from, args.test_to, args.test_days)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    cfg = _config(args)
    horizon = args.horizon or 18

    def factory() -> LoadForecaster:
        return LoadForecaster(horizon_slots=horizon, slot_s=series.slot_s)

    progress = None if (not args.no_progress and series.n_slots > 2000) else False
    rec = ces.replay(series, cfg, factory, progress=progress, until=hi)
    m = ces.summarize(rec, lo, hi)
    m["policy"] = args.policy
    m["filled_slots"] = series.filled_slots
    m["skipped_rows"] = len(series.errors)
    if not args.no_frontier:
        m.update(_series_frontier(args, series, cfg, factory, rec, lo, hi))
    if not args.no_plot:
        load_plot = args.plot or "ces_load.png"
        try:
            ces.plot(rec, load_plot, lo, hi)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot save plot {load_plot}: {exc}") from None
        m["plot"] = load_plot
        if "frontier" in m:
            from gpuhint.lab.evaluation.ces_jobs import plot_frontier

            fpath = str(Path(load_plot).with_suffix("")) + "_frontier.png"
            try:
                plot_frontier({**m, "mode": "series"}, fpath, f"{m['series']}: energy vs shortfall")
            except (OSError, ValueError) as exc:
                raise UserError(f"cannot save plot {fpath}: {exc}") from None
            m["frontier_plot"] = fpath
    if args.json:
        print(json_text(m))
        return 0
    print(_report(m, series.n_slots, cfg))
    return 0


def _series_frontier(
    args: argparse.Namespace, series: Any, cfg: Any, factory: Any, rec: Any, lo: int, hi: int
) -> dict[str, Any]:
    """Idle timer and gpuhint's buffer knob on the per-minute series (shortfall axis)."""
    from gpuhint.cli.evaluate_ces_jobs import _power
    from gpuhint.lab.evaluation.ces_jobs import SUSPEND_TIMES_S
    from gpuhint.lab.evaluation.ces_series import series_frontier
    from gpuhint.lab.traces.loadseries import read_series

    minutes = read_series(
        args.series, args.format, "skip", slot_s=60, gpus_per_node=args.gpus_per_node
    )
    return series_frontier(
        series, minutes, cfg, factory, lo, hi, _power(args), SUSPEND_TIMES_S, rec
    )


def _report(m: dict[str, Any], n_all: int, cfg: Any) -> str:
    mae = m["forecast_mae"]
    lines = [
        f"CES replay of {m['series']} ({m['policy']} policy), {m['slot_minutes']:g}-minute slots",
        f"  test window     {m['test_from'][:16]} .. {m['test_to'][:16]} UTC "
        f"({m['n_slots']} slots, {m['days']:.2f} days; replayed online from slot 0 of {n_all})",
        f"  cluster         {m['total_nodes']} nodes",
        f"  utilization     {m['util_before']:.2%} -> {m['util_after']:.2%}  (used/total -> "
        "used/powered-on)",
        f"  powered off     {m['mean_powered_off']:.1f} nodes on average; "
        f"{m['node_hours_saved']:.0f} node-hours, ~{m['energy_saved_kwh']:.0f} kWh "
        f"at {m['watts_per_node']:g} W per idle node",
        f"  changes         {m['changes_per_day']:.2f}/day ({m['changes']} total); "
        f"wake actions {m['wakeups_per_day']:.2f}/day",
        f"  shortfalls      {m['shortfall_events']} slots, {m['shortfall_node_slots']} node-slots "
        "(used > powered-on)",
        "  forecast MAE    "
        + (f"{mae:.2f} nodes ({m['forecast_target']})" if mae is not None else "n/a"),
    ]
    if m.get("filled_slots"):
        lines.append(f"  note            {m['filled_slots']} empty slots carried forward")
    if m.get("plot"):
        lines.append(f"  plot            {m['plot']}")
    if "frontier" in m:
        from gpuhint.cli.evaluate_ces_jobs import series_frontier_text

        lines.append(series_frontier_text(m))
    return "\n".join(lines)
