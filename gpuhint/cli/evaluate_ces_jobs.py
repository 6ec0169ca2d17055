"""``gpuhint evaluate ces --trace``: power saving from a job trace, frontier against frontier."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from gpuhint.cli.common import UserError, json_text, load_trace, report_skipped

JOBS_EPILOG = """\
with --trace (one pool of nodes; docs/ces.md for the model and the defaults' sources):
  energy_saved_kwh     energy against all nodes on, over the first to the last submit
  node_hours_off       node-hours spent powered off
  added_wait_avg_s     mean over jobs of (wait - the same job's wait with all nodes on)
  added_wait_p99_s     its 99th percentile; jobs_delayed: jobs that waited > 1 s longer
  cycles_per_node_day  power-downs per node per day
  gpuhint settings are the reserve quantile q (more cautious as q -> 1)
  gpuhint evaluate ces --trace philly_sampled_jobs.json --target-load 0.5 --plot f.png
"""


def add_jobs_args(p: argparse.ArgumentParser) -> None:
    from models.registry import DEFAULT_MODEL, DURATION_MODELS

    g = p.add_argument_group("with --trace")
    g.add_argument("--nodes", type=int, metavar="N", help="8-GPU nodes in the pool")
    g.add_argument(
        "--target-load",
        type=float,
        default=0.5,
        metavar="U",
        help="without --nodes: size the pool to this offered load, 0 < U <= 1 (0.5)",
    )
    g.add_argument("--boot-time", type=float, default=300.0, metavar="S", help="seconds (300)")
    g.add_argument("--busy-watts", type=float, default=3500.0, metavar="W", help="(3500)")
    g.add_argument("--boot-watts", type=float, default=700.0, metavar="W", help="(700)")
    g.add_argument("--off-watts", type=float, default=20.0, metavar="W", help="(20)")
    g.add_argument(
        "--scheduler", choices=["fifo", "qssf"], default="fifo", help="queue order (fifo)"
    )
    g.add_argument(
        "--model",
        choices=sorted(DURATION_MODELS),
        default=DEFAULT_MODEL,
        help=f"duration model whose predictions the policy sees ({DEFAULT_MODEL})",
    )
    g.add_argument(
        "--quantile", type=float, metavar="Q", help="gpuhint's default setting to report"
    )
    g.add_argument(
        "--max-cycles-per-node-day", type=int, metavar="N", help="gpuhint's cycle limit (6)"
    )


def _power(args: argparse.Namespace) -> Any:
    from models.simulator.power import PowerModel

    idle = 700.0 if args.watts_per_node is None else args.watts_per_node
    vals = (args.boot_time, args.busy_watts, idle, args.boot_watts, args.off_watts)
    if not all(math.isfinite(v) and v >= 0 for v in vals):
        raise UserError("--boot-time and the watts must be finite numbers >= 0")
    return PowerModel(args.boot_time, args.busy_watts, idle, args.boot_watts, args.off_watts)


def run_jobs(args: argparse.Namespace) -> int:
    from gpuhint.lab.evaluation import ces_jobs as cj
    from gpuhint.lab.evaluation.qssf_inputs import MAX_NODES

    if args.format in ("nodes", "helios-vc"):
        raise UserError(f"--format {args.format} is a load series format: use --series")
    if args.nodes is not None and not 1 <= args.nodes <= MAX_NODES:
        raise UserError(f"--nodes must be 1..{MAX_NODES:,}")
    if not 0 < args.target_load <= 1:
        raise UserError(f"--target-load must be in (0, 1], got {args.target_load}")
    if args.quantile is not None and not 0 <= args.quantile <= 1:
        raise UserError("--quantile must be in [0, 1]")
    if args.max_cycles_per_node_day is not None and args.max_cycles_per_node_day < 1:
        raise UserError("--max-cycles-per-node-day must be >= 1")
    pm = _power(args)
    t0 = time.perf_counter()
    read = load_trace(args.trace, args.format, args.on_error)
    report_skipped(read)
    prep = cj.prepare(read.jobs, args.model)
    if not prep.jobs:
        raise UserError(f"{args.trace}: no job asks for a GPU: nothing to place on nodes")
    if len({j.submit for j in prep.jobs}) == 1:  # energy is measured over a span of 0 s
        raise UserError(
            f"{args.trace}: every GPU job is submitted at the same time: energy is measured "
            "from the first to the last submit, here 0 s (nothing to compare)"
        )
    biggest = max(j.gpus for j in prep.jobs)
    nodes = args.nodes or cj.cluster_nodes(prep.jobs, args.target_load)
    if nodes > MAX_NODES:
        raise UserError(
            f"--target-load {args.target_load:g} sizes the pool to {nodes:,} nodes, over "
            f"{MAX_NODES:,}: give a higher target load or --nodes"
        )
    if biggest > nodes * 8:
        raise UserError(f"--nodes {nodes}: a job asks for {biggest} GPUs ({nodes * 8} in the pool)")
    say = None if args.json or args.no_progress else _progress
    rep = cj.evaluate_jobs(
        prep,
        nodes,
        pm,
        scheduler=args.scheduler,
        default_quantile=args.quantile if args.quantile is not None else cj.DEFAULT_QUANTILE,
        max_cycles_per_day=args.max_cycles_per_node_day,
        progress=say,
    )
    out: dict[str, Any] = {
        "mode": "jobs",
        "trace": str(args.trace),
        "format": read.fmt,
        "rows_skipped": len(read.errors),
        "jobs_without_gpus": prep.skipped_no_gpu,
        "sized_by": "--nodes" if args.nodes else f"target load {args.target_load:g}",
        "model": prep.model,
        "mae_log": prep.mae_log,
        "power": {
            "boot_s": pm.boot_s,
            "busy_w": pm.busy_w,
            "idle_w": pm.idle_w,
            "boot_w": pm.boot_w,
            "off_w": pm.off_w,
        },
        **rep,
    }
    if not args.no_plot:
        path = args.plot or "ces_frontier.png"
        try:
            cj.plot_frontier(out, path, f"{Path(args.trace).name}: energy saved vs added wait")
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot save plot {path}: {exc}") from None
        out["plot"] = path
    out["seconds"] = time.perf_counter() - t0
    if args.json:
        print(json_text(out))
    else:
        print(report_text(out))
    return 0


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _row(name: str, p: dict[str, Any], mark: str = "") -> str:
    return (
        f"  {name:<18} {p['energy_saved_kwh']:>12,.0f} {p['node_hours_off']:>11,.0f} "
        f"{p['added_wait_avg_s']:>9.1f} {p['added_wait_p99_s']:>9.0f} {p['jobs_delayed']:>7d} "
        f"{p['cycles_per_node_day']:>7.2f} {p['utilization']:>6.1%} {mark}"
    )


def report_text(r: dict[str, Any]) -> str:
    from gpuhint.lab.evaluation.ces_jobs import _fmt_setting

    pw = r["power"]
    a = r["all_on"]
    dom = {d["suspend_s"]: d["by"] for d in r["dominance"]}
    lines = [
        f"CES from jobs: {r['trace']} ({r['format']}), {r['jobs']} GPU jobs over "
        f"{r['days']:.1f} days, {r['nodes']} nodes ({r['sized_by']}), {r['scheduler']} queue",
        f"  power: boot {pw['boot_s']:g} s; busy {pw['busy_w']:g} W, idle {pw['idle_w']:g} W, "
        f"booting {pw['boot_w']:g} W, off {pw['off_w']:g} W per node",
        f"  all nodes on: {a['energy_kwh']:,.0f} kWh, utilization {a['utilization']:.1%}, "
        f"average wait {a['avg_wait_s']:.0f} s",
        "",
        f"  {'policy':<18} {'saved kWh':>12} {'node-h off':>11} {'wait+avg':>9} "
        f"{'wait+p99':>9} {'delayed':>7} {'cyc/n/d':>7} {'util':>6}",
    ]
    for p in r["frontier"]["idle_timer"]:
        by = dom.get(p["setting"])
        mark = f"dominated by q{by:g}" if by is not None else "NOT dominated"
        lines.append(_row(f"idle {_fmt_setting(p['setting'])}", p, mark))
    for p in r["frontier"]["gpuhint"]:
        lines.append(_row(f"gpuhint q{p['setting']:g}", p))
    lines.append(_row("artifact rule", r["artifact"]))
    lines.append(_row("series policy", r["series_policy"]))
    d, chk = r["default"], r["default_vs_timer_3600"]
    lines += [
        "",
        f"  default gpuhint q{d['setting']:g}: {d['energy_saved_kwh']:,.0f} kWh saved, "
        f"+{d['added_wait_avg_s']:.1f} s average wait; against SuspendTime=1h: energy "
        f"{'ok' if chk['energy_ok'] else 'NOT met'}, half the wait "
        f"{'ok' if chk['wait_ok'] else 'NOT met'}",
        f"  gpuhint dominates the idle timer at {sum(v is not None for v in dom.values())} of "
        f"{len(dom)} SuspendTimes",
    ]
    if r.get("plot"):
        lines.append(f"  plot: {r['plot']}")
    lines.append(f"  {r['seconds']:.1f} s")
    return "\n".join(lines)


def series_frontier_text(m: dict[str, Any]) -> str:
    """The --series frontier as a table (shortfall node-minutes instead of waits)."""
    from gpuhint.lab.evaluation.ces_jobs import _fmt_setting

    dom = {d["suspend_s"]: d["by"] for d in m["dominance"]}
    lines = [
        "",
        "  frontier on the per-minute series (energy saved vs node-minutes short):",
        f"  {'policy':<18} {'saved kWh':>12} {'node-h off':>11} {'short n-min':>11} {'cyc/n/d':>7}",
    ]

    def row(name: str, p: dict[str, Any], mark: str = "") -> str:
        return (
            f"  {name:<18} {p['energy_saved_kwh']:>12,.0f} {p['node_hours_off']:>11,.0f} "
            f"{p['shortfall_node_min']:>11,.0f} {p['cycles_per_node_day']:>7.2f} {mark}"
        )

    for p in m["frontier"]["idle_timer"]:
        by = dom.get(p["setting"])
        mark = f"dominated by q{by:g}" if by is not None else "NOT dominated"
        lines.append(row(f"idle {_fmt_setting(p['setting'])}", p, mark))
    for p in m["frontier"]["gpuhint"]:
        lines.append(row(f"gpuhint q{p['setting']:g}", p))
    for p in m["frontier"].get("gpuhint_slots", []):
        lines.append(row(f"slot policy buf {p['setting']}", p))
    d, chk = m["default"], m["default_vs_timer_3600"]
    lines.append(row(f"default q{d['setting']:g}", d))
    lines.append(
        f"  default against SuspendTime=1h: energy {'ok' if chk['energy_ok'] else 'NOT met'}, "
        f"half the shortfall {'ok' if chk['wait_ok'] else 'NOT met'}"
    )
    return "\n".join(lines)
