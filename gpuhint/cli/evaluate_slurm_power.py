"""``gpuhint evaluate slurm --power``: Slurm's idle timer against gpuhint's power advice."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gpuhint.cli.common import UserError


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _kafka_redis(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    from gpuhint.lab.local.services import ServiceError, kafka_and_redis

    with contextlib.ExitStack() as stack:
        try:
            pair = kafka_and_redis(stack, args.bootstrap, args.redis_url, _say)
        except ServiceError as exc:
            raise UserError(f"could not start the services: {exc}") from None
        yield pair


def run_power(args: argparse.Namespace, trace: Sequence[Any], t_start: float) -> int:
    from gpuhint.lab.local.services import ServiceError
    from gpuhint.lab.slurm_loop import LoopError, compress, default_speed, select_jobs
    from gpuhint.lab.slurm_power_loop import (
        PowerSetup,
        power_speed,
        run_all_on,
        run_gpuhint_power,
        run_idle_timer,
        suspend_rounding,
        with_added_wait,
    )
    from gpuhint.lab.slurm_power_sim import simulated_power
    from gpuhint.slurm.commands import SlurmCommandError

    nodes = args.nodes or 8
    sched = "backfill" if args.backfill else "builtin"
    jobs, too_big = select_jobs(trace, args.jobs, nodes)
    if not jobs:
        raise UserError(f"{args.trace}: no GPU job fits {nodes} nodes x 8 GPUs")
    speed = args.speed or power_speed(default_speed(jobs, nodes), args.suspend_time)
    loop = compress(jobs, speed)
    setup = PowerSetup(
        speed=speed, boot_s=args.boot, suspend_time_s=args.suspend_time, min_idle=args.min_idle
    )
    _say(f"{len(loop)} jobs on {nodes} nodes, speed {speed:g}x ({too_big} too big skipped)")
    warning = suspend_rounding(setup)
    if warning:
        _say(f"warning: {warning}")
    try:
        _say("simulating")
        sims = simulated_power(loop, nodes, setup, args.model)
        _say("run 1/3: all nodes on (the reference for the waits)")
        all_on = run_all_on(loop, nodes, sched, setup, _say, args.timeout)
        _say(f"  average wait {all_on.jobs.avg_queue_s:,.0f} s")
        _say(f"run 2/3: Slurm's idle timer (SuspendTime {args.suspend_time:g} s)")
        timer = run_idle_timer(loop, nodes, sched, setup, _say, args.timeout)
        _say(f"  {timer.node_hours_off:,.1f} node-hours off, {timer.power_ups} power-ups")
        with _kafka_redis(args) as kr, tempfile.TemporaryDirectory(prefix="gh-power-") as tmp:
            _say("run 3/3: gpuhint's power advice (apply-power)")
            gh = run_gpuhint_power(
                loop, nodes, sched, setup, kr, model=args.model,
                prefix=f"ep{uuid.uuid4().hex[:8]}", workdir=Path(tmp), progress=_say,
                timeout_s=args.timeout,
            )  # fmt: skip
        _say(f"  {gh.node_hours_off:,.1f} node-hours off, {gh.power_ups} power-ups")
    except (LoopError, SlurmCommandError, ServiceError) as exc:
        raise UserError(str(exc)) from None
    doc = {
        "trace": str(args.trace),
        "mode": "power",
        "jobs": len(loop),
        "speed": speed,
        "nodes": nodes,
        "sched": sched,
        "model": args.model,
        "boot_s": args.boot,
        "suspend_time_s": args.suspend_time,
        "suspend_time_wall_s": setup.suspend_wall_s,
        "min_idle": args.min_idle,
        "power": {
            "all_on": all_on.as_dict(),
            "idle_timer": with_added_wait(timer.as_dict(), all_on.as_dict()),
            "gpuhint": with_added_wait(gh.as_dict(), all_on.as_dict()),
        },
        "simulated_power": sims.real_time,
        "simulated_power_compressed": sims.compressed,
        "skipped_too_big": too_big,
        "seconds": round(time.monotonic() - t_start, 1),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_power(doc)
    return 0


def _print_power(doc: dict[str, Any]) -> None:
    print(
        f"{doc['jobs']} jobs, {doc['nodes']} nodes, speed {doc['speed']:g}x, "
        f"boot {doc['boot_s']:g} s, SuspendTime {doc['suspend_time_s']:g} s (trace seconds)"
    )
    print(
        f"  {'':12} {'node-h off':>10} {'booting':>8} {'ups':>5} {'avg wait':>10} "
        f"{'added':>9} {'p99 wait':>10}"
    )
    for name in ("all_on", "idle_timer", "gpuhint"):
        r = doc["power"][name]
        s = doc["simulated_power"][name]
        c = doc["simulated_power_compressed"][name]
        added = r.get("added_wait_avg_s")
        print(
            f"  {name:12} {r['node_hours_off']:10,.1f} {r['node_hours_booting']:8,.1f} "
            f"{r['power_ups']:5d} {r['avg_wait_s']:9,.0f}s {_secs(added):>9} "
            f"{r['p99_wait_s']:9,.0f}s"
        )
        for label, sim in (("  simulated", s), ("  compressed", c)):
            print(
                f"  {label:12} {sim['node_hours_off']:10,.1f} {'':8} {'':5} "
                f"{sim['avg_wait_s']:9,.0f}s {_secs(sim.get('added_wait_avg_s')):>9} "
                f"{sim['p99_wait_s']:9,.0f}s"
            )
    print(
        "  simulated: a cluster in real time; compressed: the same with Slurm's 30 s job"
        f" start pass after a boot ({doc['simulated_power_compressed']['start_pass_s']:,.0f}"
        " trace s at this speed), as this run meets it"
    )
    print(f"  {doc['seconds']:.0f} s")


def _secs(value: float | None) -> str:
    return "" if value is None else f"{value:+,.0f}s"
