"""``gpuhint evaluate slurm``: the closed loop on a real Slurm, against its own order."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuhint.cli.common import UserError, add_trace_args, load_trace, report_skipped

HELP = "replay a trace into a real Slurm, with and without gpuhint in the loop"

DESCRIPTION = """\
Replays the first --jobs GPU jobs of a trace into a real Slurm cluster as `sleep` jobs,
compressed --speed times (durations and inter-arrival times divided by S, a job sleeps
at least 1 s; the default S keeps the whole run under about 15 minutes), twice:

  slurm    Slurm's own order (equal priorities: first come, first served)
  gpuhint  the agent's Slurm feed -> Kafka -> `gpuhint worker` -> Redis ->
           `gpuhint slurm apply-priorities` (SiteFactor) while the jobs wait

both under sched/builtin (strict priority order, no backfill, as the simulator) or
sched/backfill with --backfill. It reports, from Slurm's accounting and in trace
seconds, each run's average JCT, average queueing and makespan, and what the simulator
(`gpuhint evaluate qssf`'s code, closed loop) predicts for the same jobs and nodes.

Unless --slurm-conf / --bootstrap / --redis-url name running services, it starts a
private Slurm (--nodes x 8 fake GPUs, slurmdbd), Kafka and Redis with the project's own
launchers and stops them after (Slurm needs root to install; see docs/slurm.md).
A given Slurm cluster must be idle and have a partition `gpu`.

JSON keys (--json): jobs, speed, nodes, sched, slurm.{avg_jct_s,avg_queue_s,makespan_s},
gpuhint.{...}, jct_ratio_slurm_over_gpuhint, simulated.{fifo_avg_jct_s,qssf_avg_jct_s,
jct_ratio_fifo_over_qssf}, sim_agreement (real ratio / simulated ratio), hints_applied,
skipped_too_big, seconds.

With --power it compares power saving instead, each run on a fresh private Slurm whose
SuspendProgram stops a node's slurmd and whose ResumeProgram starts it after --boot
seconds (compressed like the jobs), all in Slurm's own job order:

  all_on      no node ever powered down: the reference for the waits (Slurm's own
              per-job overheads dominate them when compressed), added_wait_avg_s
  idle_timer  Slurm's SuspendTime = --suspend-time, nothing else
  gpuhint     the agent's job and node feeds (--slurm-nodes) -> Kafka -> `gpuhint worker`
              (CES) -> Redis -> `gpuhint slurm apply-power --min-idle 0 --min-on 0`
              (the policy's own reserve decides, as in the simulator); Slurm's timer off

Slurm counts SuspendTime in whole seconds and checks it each second, so --power's
default speed is at most SuspendTime / 10 (360 for an hour): runs are slower than
without --power; pick a short, dense excerpt (--jobs): 100 Helios jobs on 8 nodes took
43 minutes for the three runs. A faster --speed is allowed, with a warning.

It reports each run's node-hours off and booting, power-ups, and job waits (average,
p99) from Slurm's accounting, next to the power simulator's figures for the same jobs
(`gpuhint evaluate ces --trace`'s code), once as on a cluster in real time and once as
the compressed run meets Slurm: Slurm 22.05 starts a job given powering-up nodes in a
pass every 30 wall seconds, i.e. 0 to 3 trace hours after the boot at speed 360, so
compressed waits for woken nodes are far longer than real ones.

--power JSON keys: power.{all_on,idle_timer,gpuhint}.
{setting,node_hours_off,node_hours_booting,power_ups,avg_wait_s,p99_wait_s,avg_jct_s,...},
simulated_power.{all_on,idle_timer,gpuhint}.{node_hours_off,avg_wait_s,p99_wait_s,
power_downs}, added_wait_avg_s in both for idle_timer and gpuhint,
simulated_power_compressed (the same, with Slurm's 30 s pass that starts a job on woken
nodes, x speed: the simulator as the compressed run meets it; added_wait_range_s over
the pass's phase; start_pass_s), boot_s, suspend_time_s, suspend_time_wall_s,
min_idle, plus jobs, speed, nodes, sched, model, seconds.

examples:
  gpuhint evaluate slurm --trace tests/data/philly_excerpt.json --jobs 300 --nodes 8 --json
  gpuhint evaluate slurm --trace venus_sept_2vc.csv --power --jobs 100 --nodes 8
  gpuhint evaluate slurm --trace history.sacct --jobs 30 --nodes 4 --speed 600
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    from models.registry import DEFAULT_MODEL, DURATION_MODELS

    p = sub.add_parser(
        "slurm",
        help=HELP,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--trace", metavar="FILE", required=True, help="job trace (any gpuhint format)")
    add_trace_args(p)
    p.add_argument("--jobs", type=int, default=300, metavar="N", help="first N GPU jobs (300)")
    p.add_argument(
        "--nodes", type=int, metavar="N", help="nodes x 8 GPUs (8; a given cluster's own)"
    )
    p.add_argument(
        "--speed",
        type=float,
        metavar="S",
        help="compression (default: fit ~15 min; --power: at most SuspendTime / 10)",
    )
    p.add_argument("--backfill", action="store_true", help="sched/backfill instead of builtin")
    p.add_argument("--model", choices=sorted(DURATION_MODELS), default=DEFAULT_MODEL)
    p.add_argument(
        "--slurm-conf", metavar="FILE", help="an idle running Slurm (else a private one)"
    )
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="a running Kafka (else a private one)")
    p.add_argument("--redis-url", metavar="URL", help="a running Redis (else a private one)")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S", help="per run (1800)")
    p.add_argument(
        "--power", action="store_true", help="compare power saving: idle timer vs gpuhint"
    )
    p.add_argument(
        "--suspend-time", type=float, default=3600.0, metavar="S",
        help="--power: Slurm's SuspendTime, trace seconds (3600)",
    )  # fmt: skip
    p.add_argument(
        "--boot", type=float, default=300.0, metavar="S",
        help="--power: a node's boot time, trace seconds (300)",
    )  # fmt: skip
    p.add_argument(
        "--min-idle", type=int, default=0, metavar="N",
        help="--power: apply-power's --min-idle in the gpuhint run (0: the policy's own "
        "reserve alone, as the simulator runs it)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _services(args: argparse.Namespace, nodes: int, sched: str) -> Iterator[Any]:
    from gpuhint.lab.local.services import ServiceError, kafka_and_redis
    from gpuhint.lab.local.slurm import LocalSlurm
    from gpuhint.lab.slurm_loop import Services
    from gpuhint.slurm.commands import SlurmCli

    with contextlib.ExitStack() as stack:
        try:
            conf = args.slurm_conf
            if conf is None:
                _say(f"starting a private Slurm: {nodes} nodes x 8 GPUs, sched/{sched}")
                s = stack.enter_context(LocalSlurm(nodes, sched=sched))
                s.start()
                conf = str(s.conf)
            else:
                found = len(SlurmCli(conf).nodes())
                if args.nodes is not None and args.nodes != found:
                    raise UserError(f"--nodes {args.nodes}, but {conf} has {found} nodes")
                nodes = found
            bootstrap, url = kafka_and_redis(stack, args.bootstrap, args.redis_url, _say)
        except ServiceError as exc:
            raise UserError(f"could not start the services: {exc}") from None
        yield Services(conf, bootstrap, url, nodes)


def run(args: argparse.Namespace) -> int:
    from gpuhint.lab.slurm_loop import (
        LoopError,
        compress,
        default_speed,
        reset_site_factors,
        run_gpuhint,
        run_slurm_only,
        select_jobs,
        simulate,
    )
    from gpuhint.slurm.commands import SlurmCli, SlurmCommandError

    _check_args(args)
    t_start = time.monotonic()
    read = load_trace(args.trace, args.format, args.on_error)
    report_skipped(read)
    if args.power:
        from gpuhint.cli.evaluate_slurm_power import run_power

        return run_power(args, read.jobs, t_start)
    nodes = args.nodes or 8
    sched = "backfill" if args.backfill else "builtin"
    with _services(args, nodes, sched) as svc:
        jobs, too_big = select_jobs(read.jobs, args.jobs, svc.nodes)
        if not jobs:
            raise UserError(f"{args.trace}: no GPU job fits {svc.nodes} nodes x 8 GPUs")
        speed = args.speed or default_speed(jobs, svc.nodes)
        loop = compress(jobs, speed)
        _say(f"{len(loop)} jobs on {svc.nodes} nodes, speed {speed:g}x ({too_big} too big skipped)")
        cli = SlurmCli(svc.slurm_conf)
        try:
            reset_site_factors(cli)
            _say("simulating")
            sim = simulate(loop, speed, svc.nodes, args.model, args.backfill)
            _say("run 1/2: Slurm's own order")
            base = run_slurm_only(cli, loop, speed=speed, progress=_say, timeout_s=args.timeout)
            _say(f"  avg JCT {base.avg_jct_s:,.0f} s (trace), {base.wall_s:.0f} s wall")
            _say("run 2/2: gpuhint in the loop")
            with tempfile.TemporaryDirectory(prefix="gpuhint-evalslurm-") as tmp:
                gh, applied = run_gpuhint(
                    cli, svc, loop, speed=speed, model=args.model,
                    prefix=f"es{uuid.uuid4().hex[:8]}", workdir=Path(tmp), progress=_say,
                    timeout_s=args.timeout,
                )  # fmt: skip
            _say(
                f"  avg JCT {gh.avg_jct_s:,.0f} s (trace), {gh.wall_s:.0f} s wall, "
                f"{applied} hints applied"
            )
        except (LoopError, SlurmCommandError) as exc:
            raise UserError(str(exc)) from None
    ratio = base.avg_jct_s / gh.avg_jct_s if gh.avg_jct_s > 0 else None
    sim_ratio = sim["jct_ratio_fifo_over_qssf"]
    doc = {
        "trace": str(args.trace),
        "jobs": len(loop),
        "speed": speed,
        "nodes": svc.nodes,
        "sched": sched,
        "model": args.model,
        "slurm": base.as_dict(),
        "gpuhint": gh.as_dict(),
        "jct_ratio_slurm_over_gpuhint": round(ratio, 3) if ratio else None,
        "simulated": sim,
        "sim_agreement": round(ratio / sim_ratio, 3) if ratio and sim_ratio else None,
        "hints_applied": applied,
        "skipped_too_big": too_big,
        "seconds": round(time.monotonic() - t_start, 1),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_text(doc, base, gh, sim_ratio)
    return 0


def _check_args(args: argparse.Namespace) -> None:
    if args.jobs < 1:
        raise UserError("--jobs must be >= 1")
    if args.nodes is not None and args.nodes < 1:
        raise UserError("--nodes must be >= 1")
    if args.speed is not None and args.speed <= 0:
        raise UserError("--speed must be > 0")
    if args.power and args.slurm_conf:
        raise UserError("--power runs its own private Slurm (power scripts): drop --slurm-conf")
    if args.suspend_time <= 0 or args.boot < 0:
        raise UserError("--suspend-time must be > 0 and --boot >= 0")
    if args.min_idle < 0:
        raise UserError("--min-idle must be >= 0")


def _print_text(doc: dict[str, Any], base: Any, gh: Any, sim_ratio: float | None) -> None:
    """The two runs side by side (the JSON document in words)."""
    print(
        f"{doc['jobs']} jobs, {doc['nodes']} nodes, speed {doc['speed']:g}x, sched/{doc['sched']}\n"
        f"  Slurm's order : avg JCT {base.avg_jct_s:10,.0f} s  queue "
        f"{base.avg_queue_s:10,.0f} s  makespan {base.makespan_s:10,.0f} s\n"
        f"  gpuhint       : avg JCT {gh.avg_jct_s:10,.0f} s  queue "
        f"{gh.avg_queue_s:10,.0f} s  makespan {gh.makespan_s:10,.0f} s\n"
        f"  JCT ratio slurm/gpuhint {doc['jct_ratio_slurm_over_gpuhint']}, simulated "
        f"fifo/qssf {sim_ratio and round(sim_ratio, 3)}; {doc['hints_applied']} hints applied; "
        f"{doc['seconds']:.0f} s"
    )
