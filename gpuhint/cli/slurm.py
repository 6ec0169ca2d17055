"""``gpuhint slurm``: apply priority hints and power advice to a real slurmctld."""

from __future__ import annotations

import argparse
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuhint.cli.common import UserError, add_fallback_args
from gpuhint.cli.slurm_common import (
    _check_slurm,
    _client,
    _common,
    _metrics,
    _print_pass,
    _recorder,
    _settings,
    _stopper,
)
from gpuhint.cli.slurm_hints import _ClientHints, _one_line, _wait_for_hint_change

log = logging.getLogger("gpuhint.slurm")

DESCRIPTION = """\
Makes Slurm act on gpuhint: `apply-priorities` turns the QSSF hints of pending jobs
into each job's SiteFactor (smaller expected service starts first), `apply-power` turns
the CES advice into power_down_asap / power_up of idle nodes, and `power` is a
SuspendProgram / ResumeProgram wrapper for sites where Slurm drives power saving.
Both appliers need Slurm operator rights (sacctmgr modify user NAME set
AdminLevel=Operator); --dry-run prints the scontrol lines instead of running them.
See docs/slurm.md for slurm.conf, systemd units and how to turn it off.
"""

PRIO_DESCRIPTION = """\
Every --interval seconds, and whenever the worker's change stream says a hint was
written, updated or removed, one pass: read the hints of all queued jobs of --cluster
from Redis, read Slurm's pending jobs (squeue, sprio), and set SiteFactor only where
it changes. The map from a hint's priority p (GPU-seconds) to the factor is bounded and
monotone (docs/slurm.md):

  factor(p) = round(MAX * (1 - ln(1 + p/P0) / ln(1 + PMAX/P0)))  clipped to [0, MAX]

It never touches a running or held job, nor one an admin pinned with Priority=, and
never sets Priority= itself. Updates go to one scontrol process per batch, at most
--rate jobs per second.

Each pending job's Comment gets its expected start (squeue -o %k, scontrol show job),
from the worker's forecast, all times UTC (HH:MMZ: on the day of start):
  gpuhint:start=2026-12-05T14:05Z,band80=13:40Z..15:10Z,asof=13:02Z
only when the comment is empty or gpuhint's own (a user's comment is never
overwritten), only when the text changes, in the same batches and rate limit; a job
no forecast names (beyond its VC's first 32) has its gpuhint comment cleared.

When gpuhint is down (docs/operations.md): a pending job without a hint gets the
--neutral factor, not 0 (by default the median factor of the hinted pending jobs, so it
ranks amid them, not below them all); when the cluster shows no sign of life (no new
hint, no new load summary) for --stale-after seconds, every hint fades to the neutral
factor over --fade seconds, and with every job at the same factor Slurm's own
multifactor order is back. With Redis unreachable it goes on with the hints it read
last (new jobs get the neutral factor, the rest fade once stale); it never resets
factors to 0. Each change of state is logged once and shown on /metrics.

settings (flags override env vars):
  --slurm-conf / GPUHINT_SLURM_CONF        slurm.conf (else SLURM_CONF, Slurm's default)
  --interval / GPUHINT_SLURM_INTERVAL_S    seconds between full passes (30)
  --max-factor / GPUHINT_SLURM_MAX_FACTOR  factor of the smallest job (100000)
  GPUHINT_SLURM_P0, GPUHINT_SLURM_P_MAX    the map's bend and zero (60, 165888000 GPU-s)
  --rate / GPUHINT_SLURM_RATE              job updates per second (2000)
  --max-updates / GPUHINT_SLURM_MAX_UPDATES  per pass (20000)
  --neutral / GPUHINT_SLURM_NEUTRAL        median | midpoint | off | a factor (median)
  --stale-after / GPUHINT_SLURM_STALE_AFTER_S  no sign of life for this long: fade (3600)
  --fade / GPUHINT_SLURM_FADE_S            the fade to neutral takes this long (1800; 0: at once)
  --no-start-comment / GPUHINT_SLURM_START_COMMENT=false   leave jobs' Comment alone
  --cluster / GPUHINT_CLUSTER, --redis-url / GPUHINT_REDIS_URL, GPUHINT_KEY_PREFIX

examples:
  gpuhint slurm apply-priorities --cluster prod --once --dry-run    print the scontrol lines
  gpuhint slurm apply-priorities --cluster prod                     run as a daemon
"""

POWER_DESCRIPTION = """\
Every --interval seconds: read the cluster's CES advisory from Redis (its active_nodes
is the number of nodes CES wants powered on) and Slurm's nodes (sinfo), and move
towards it: power_down_asap the idle nodes that are too many (the advisory's named
nodes first), power_up powered-down ones when the target or the idle buffer needs
them. Advice that names the nodes it wants off (off_nodes: the worker's job-aware
policy, GPUHINT_CES_POLICY=jobs) is applied per node: exactly those idle nodes go down,
and powered-down nodes it does not name come up. Never powers down a node with a
running or allocated job, keeps --min-idle idle
nodes powered on, ignores advice older than --max-age. Slurm's refusals are counted and
reported. Needs SuspendProgram/ResumeProgram and SuspendTime in slurm.conf (docs/slurm.md).

settings: GPUHINT_SLURM_POWER_INTERVAL_S (60), GPUHINT_SLURM_MIN_IDLE (1),
GPUHINT_SLURM_MIN_ON (1), GPUHINT_SLURM_ADVICE_MAX_AGE_S (1800),
GPUHINT_SLURM_EXCLUDE_NODES (a host list never touched), and as apply-priorities.

examples:
  gpuhint slurm apply-power --cluster prod --once --dry-run
  gpuhint slurm apply-power --cluster prod --min-idle 2 --exclude 'login[1-2]'
"""

POWER_PROGRAM_DESCRIPTION = """\
SuspendProgram / ResumeProgram for slurm.conf: Slurm calls it with a host list
(`gpuhint slurm power suspend 'gpu[03-05]'`); it runs --command once per node with
{node} replaced (e.g. 'ipmitool -H {node}-bmc chassis power soft'), up to --parallel
nodes at once (Slurm counts ResumeTimeout for the whole list from the call), logs each
to --log, and exits 0 when every node succeeded. Slurm runs it with all fds closed:
stdin/stdout are redirected to /dev/null and --log.

examples (slurm.conf):
  SuspendProgram=/usr/local/sbin/gpuhint-suspend   (a two-line wrapper, deploy/slurm/)
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "slurm",
        help="apply hints and power advice to Slurm",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s = p.add_subparsers(dest="slurm_command", metavar="ACTION", required=True)

    prio = s.add_parser(
        "apply-priorities",
        help="set SiteFactor of pending jobs from their hints",
        description=PRIO_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(prio)
    prio.add_argument("--interval", type=float, metavar="S", help="seconds between passes")
    prio.add_argument("--max-factor", type=int, metavar="N", help="SiteFactor of p = 0")
    prio.add_argument("--rate", type=float, metavar="N", help="job updates per second")
    prio.add_argument("--max-updates", type=int, metavar="N", help="job updates per pass")
    add_fallback_args(prio, "factor")
    prio.add_argument(
        "--no-start-comment",
        dest="start_comment",
        action="store_false",
        default=None,
        help="do not write the expected start into pending jobs' Comment",
    )
    prio.set_defaults(handler=run_priorities)

    power = s.add_parser(
        "apply-power",
        help="power idle nodes down / up from the CES advice",
        description=POWER_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(power)
    power.add_argument("--interval", type=float, metavar="S", help="seconds between passes")
    power.add_argument("--min-idle", type=int, metavar="N", help="idle nodes kept on (1)")
    power.add_argument("--min-on", type=int, metavar="N", help="nodes always on (1)")
    power.add_argument("--max-age", type=float, metavar="S", help="ignore older advice (1800)")
    power.add_argument("--exclude", metavar="HOSTLIST", help="nodes never touched")
    power.add_argument(
        "--resume-timeout",
        type=float,
        metavar="S",
        help="a node not up S seconds after power_up is a failed resume: reported, left out "
        "of the plan, another woken instead (900; Slurm's own DOWN after ResumeTimeout "
        "counts at once)",
    )
    power.set_defaults(handler=run_power)

    prog = s.add_parser(
        "power",
        help="SuspendProgram/ResumeProgram wrapper",
        description=POWER_PROGRAM_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prog.add_argument("action", choices=["suspend", "resume"])
    prog.add_argument("hostlist", help="Slurm host list, e.g. gpu[01-04]")
    prog.add_argument(
        "--command",
        dest="node_command",  # not ``command``: that names the subcommand in error messages
        required=True,
        help="per-node command, {node} replaced",
    )
    prog.add_argument("--log", metavar="FILE", help="append what was run and its result")
    prog.add_argument("--timeout", type=float, default=300.0, help="per-node seconds (300)")
    prog.add_argument(
        "--parallel",
        type=int,
        default=32,
        metavar="N",
        help="nodes handled at once (32; 1: one after the other)",
    )
    prog.set_defaults(handler=run_power_program)


def run_priorities(args: argparse.Namespace) -> int:
    from gpuhint.slurm.commands import SlurmCli

    settings, ss = _settings(
        args,
        interval_s=args.interval,
        max_factor=args.max_factor,
        rate=args.rate,
        max_updates=args.max_updates,
        neutral=args.neutral,
        stale_after_s=args.stale_after,
        fade_s=args.fade,
        start_comment=args.start_comment,
    )
    cli = SlurmCli(ss.conf)
    _check_slurm(cli, once=args.once)
    client = _client(settings)
    applier = _priority_applier(args, settings, ss, cli, client)
    metrics = _metrics(settings)
    record = _recorder(client, settings, "slurm-priorities", ss.interval_s, args.dry_run)
    stop, restore = _stopper()
    try:
        _priority_passes(
            args, ss.interval_s, settings.cluster, client, applier, metrics, record, stop
        )
    finally:
        restore()
        client.close()
    return 0


def _priority_applier(
    args: argparse.Namespace, settings: Any, ss: Any, cli: Any, client: Any
) -> Any:
    """The SiteFactor applier of ``apply-priorities`` and ``gpuhint serve``."""
    import redis

    from gpuhint.slurm.commands import SlurmQueue
    from gpuhint.slurm.priority import FactorMap, Fallback, PriorityApplier

    try:
        fmap = FactorMap(ss.max_factor, ss.p0, ss.p_max)
        fallback = Fallback(ss.neutral_mode, ss.stale_after_s, ss.fade_s)
    except ValueError as exc:
        raise UserError(f"factor map: {exc}") from None
    return PriorityApplier(
        SlurmQueue(cli),
        _ClientHints(client),
        settings.cluster,
        fmap,
        dry_run=args.dry_run,
        max_updates=ss.max_updates,
        rate=ss.rate,
        fallback=fallback,
        hint_errors=(redis.RedisError,),
        start_comment=ss.start_comment,
    )


def _priority_passes(
    args: argparse.Namespace,
    interval_s: float,
    cluster: str,
    client: Any,
    applier: Any,
    metrics: Any,
    record: Callable[..., None],
    stop: threading.Event,
) -> None:
    """A pass every interval and on each hint change, until ``stop`` (one with --once);
    a failed pass is retried with backoff, the SiteFactors left as they are."""
    import redis

    from gpuhint.slurm.commands import SlurmCommandError

    failures = 0
    last_id = "0-0"
    next_pass = 0.0
    pending_change = True
    while not stop.is_set():
        now = time.monotonic()
        if pending_change or now >= next_pass:
            try:
                if last_id == "0-0":
                    # Redis down: the pass says so, and may go on with its last hints
                    with contextlib.suppress(redis.RedisError):
                        last_id = client.last_change_id()
                result = applier.run_pass()
            except Exception as exc:  # an outage, or a bug: the SiteFactors stay as they are
                if isinstance(exc, redis.RedisError):
                    metrics.redis_down()
                elif isinstance(exc, SlurmCommandError):
                    metrics.error("scheduler")
                else:
                    metrics.error("internal")
                    if not failures:
                        log.exception("pass failed")
                record(exc=exc)
                failures += 1
                if args.once:
                    raise UserError(f"pass failed: {_one_line(exc)}") from None
                # once per outage; the factors stay as they are meanwhile
                (log.warning if failures == 1 else log.debug)(
                    "pass failed (%d): %s; retrying, SiteFactors left as they are",
                    failures,
                    _one_line(exc),
                )
                stop.wait(min(30.0, 2.0**failures))
                continue
            if failures:
                log.info("pass succeeded again after %d failed", failures)
            failures = 0
            if result.hints_from == "cache":
                metrics.error("redis")
            metrics.observe_slurm_priorities(result, args.dry_run)
            record(result)
            _report_priorities(result, args)
            pending_change = False
            next_pass = time.monotonic() + interval_s
            if args.once:
                break
        last_id, pending_change = _wait_for_hint_change(client, cluster, stop, next_pass, last_id)
        if pending_change:
            stop.wait(0.2)  # let a burst of hints land first


def _report_priorities(result: Any, args: argparse.Namespace) -> None:
    _print_pass(result, args)
    log.info(
        "pass: %d pending with a hint, %d %s, %d unchanged, %d pinned, %d held, %d refused, %.2f s",
        result.pending_hinted,
        result.updated,
        "would change" if args.dry_run else "updated",
        result.unchanged,
        result.skipped_pinned,
        result.skipped_held,
        result.refused,
        result.seconds,
    )


def _power_applier(settings: Any, ss: Any, cli: Any, client: Any, dry_run: bool) -> Any:
    """The power applier of ``apply-power`` and ``gpuhint serve --apply-power``."""
    from gpuhint.cores.job_tracker import expand_hostlist
    from gpuhint.slurm.commands import SlurmNodes
    from gpuhint.slurm.power import PowerApplier

    return PowerApplier(
        SlurmNodes(cli),
        client,
        settings.cluster,
        min_idle=ss.min_idle,
        min_on=ss.min_on,
        max_age_s=ss.advice_max_age_s,
        exclude=expand_hostlist(ss.exclude_nodes),
        dry_run=dry_run,
        resume_timeout_s=ss.resume_timeout_s,
    )


def run_power(args: argparse.Namespace) -> int:
    import redis

    from gpuhint.slurm.commands import SlurmCli, SlurmCommandError

    settings, ss = _settings(
        args,
        power_interval_s=args.interval,
        min_idle=args.min_idle,
        min_on=args.min_on,
        advice_max_age_s=args.max_age,
        exclude_nodes=args.exclude,
        resume_timeout_s=args.resume_timeout,
    )
    cli = SlurmCli(ss.conf)
    _check_slurm(cli, once=args.once)
    client = _client(settings)
    applier = _power_applier(settings, ss, cli, client, args.dry_run)
    metrics = _metrics(settings)
    record = _recorder(client, settings, "slurm-power", ss.power_interval_s, args.dry_run)
    stop, restore = _stopper()
    failures = 0
    try:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                result = applier.run_pass(time.time())
            except Exception as exc:  # an outage, or a bug: the nodes stay as they are
                known = isinstance(exc, redis.RedisError | SlurmCommandError)
                kind = "scheduler" if isinstance(exc, SlurmCommandError) else "internal"
                metrics.error("redis" if isinstance(exc, redis.RedisError) else kind)
                record(exc=exc)
                failures += 1
                if args.once:
                    raise UserError(f"pass failed: {_one_line(exc)}") from None
                if not known and failures == 1:
                    log.exception("power pass failed")
                log.warning("pass failed (%d): %s; retrying", failures, _one_line(exc))
                stop.wait(min(60.0, 2.0**failures))
                continue
            failures = 0
            record(result)
            metrics.observe_slurm_power(result, time.monotonic() - t0, args.dry_run)
            _print_pass(result, args)
            log.info(
                "power pass: %d on (%d busy), target %d, down %s, up %s, %d refused %s "
                "(total %d), failed resumes %s",
                result.on,
                result.busy,
                result.target_on,
                ",".join(result.powered_down) or "-",
                ",".join(result.powered_up) or "-",
                result.refused,
                ",".join(result.refused_nodes) or "-",
                applier.total_refused,
                ",".join(result.resume_failed) or "-",
            )
            if args.once:
                break
            stop.wait(ss.power_interval_s)
    finally:
        restore()
        client.close()
    return 0


def run_power_program(args: argparse.Namespace) -> int:
    import os
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from gpuhint.cores.job_tracker import expand_hostlist

    nodes = expand_hostlist(args.hostlist)
    if not nodes:
        raise UserError(f"empty host list {args.hostlist!r}")
    if any(c in "[]" or c.isspace() for node in nodes for c in node):
        raise UserError(f"not a Slurm host list: {args.hostlist!r} (e.g. gpu[01-04],login1)")
    if "{node}" not in args.node_command:
        raise UserError("--command must contain {node}")
    if args.parallel < 1:
        raise UserError(f"--parallel {args.parallel}: must be at least 1")
    try:
        out = open(args.log, "a") if args.log else open(os.devnull, "w")  # noqa: SIM115
    except OSError as exc:
        raise UserError(f"cannot open the log {args.log}: {exc.strerror}") from None
    lock = threading.Lock()

    def one(node: str) -> int:
        rc, line = _power_node(args, node)
        with lock:
            print(line, file=out, flush=True)
        return rc

    # side by side: Slurm counts ResumeTimeout for every node of the list from the start
    with out, ThreadPoolExecutor(max_workers=min(args.parallel, len(nodes))) as pool:
        failed = sum(rc != 0 for rc in pool.map(one, nodes))
    return 1 if failed else 0


def _power_node(args: argparse.Namespace, node: str) -> tuple[int, str]:
    """Run the power command for one node: its exit status and its log line."""
    import shlex
    import subprocess

    argv = shlex.split(args.node_command.replace("{node}", node))
    t0 = time.time()
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        rc, msg = proc.returncode, (proc.stderr or proc.stdout).strip()[-300:]
    except (OSError, subprocess.TimeoutExpired) as exc:
        rc, msg = -1, str(exc)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0))
    return rc, f"{stamp} {args.action} {node}: rc={rc} {msg}".rstrip()
