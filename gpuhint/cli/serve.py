"""``gpuhint serve``: one process for one Slurm (or Kueue) cluster, no Kafka."""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuhint.cli.agent_feeds import add_slurm_vc_arg, check_source
from gpuhint.cli.common import UserError, add_config_args, add_fallback_args, redis_store

log = logging.getLogger("gpuhint.serve")

DESCRIPTION = """\
The whole of gpuhint for one Slurm cluster in one process, without Kafka: polls Slurm
(sacct or squeue) for job events, runs them through the same message path, hint core
and checkpoint order as the Kafka worker, writes the hints to Redis (the same keys a
worker writes: any scheduler or `gpuhint hints` reads them) and applies them as
SiteFactor every --apply-interval seconds, as `gpuhint slurm apply-priorities` does.

State (each VC's model and queue, the job-event log and the Slurm watermark) is kept
in one SQLite file, serve-CLUSTER.sqlite under GPUHINT_STATE_DIR (default var/worker,
relative to the working directory): a restart, or a SIGKILL, neither loses an event
nor learns one twice; the hints are the same as the Kafka pipeline's for the same events.

CES (power advice) runs too, unless GPUHINT_CES_ENABLED=false or --nodes none: every
poll reads each node's state from `sinfo -N --json` (--nodes) into the worker's CES side
(GPUHINT_CES_POLICY, docs/ces.md), whose power advisories go to Redis; with
--apply-power this process also powers idle nodes down and up as `gpuhint slurm
apply-power` does (its settings: GPUHINT_SLURM_MIN_IDLE, ..., docs/slurm.md).

With --kueue the cluster is a Kubernetes one with Kueue: job events come from its Jobs
and Workloads (as `gpuhint agent --kubernetes kueue` reads them) and the hints are
applied as WorkloadPriorityClass labels and expected-start annotations, as `gpuhint
kueue apply-priorities` does (its settings: GPUHINT_KUEUE_*, docs/kubernetes.md). No
CES there: this process reads no node states from Kubernetes.

examples:
  gpuhint serve --cluster prod --redis-url redis://localhost:6379/0
  gpuhint serve --cluster prod --dry-run --once        one poll and pass, print scontrol lines
  gpuhint serve --cluster prod --slurm squeue --no-apply    hints only (another applier)
  gpuhint serve --cluster prod --apply-power               ... and power nodes down/up
  gpuhint serve --cluster k8s --kueue --kubeconfig ~/.kube/config    a Kueue cluster
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "serve",
        help="one process for one Slurm or Kueue cluster: feed, hints, priorities (no Kafka)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cluster", help="gpuhint cluster name (else GPUHINT_CLUSTER)")
    p.add_argument("--redis-url", metavar="URL", help="Redis URL (else GPUHINT_REDIS_URL)")
    p.add_argument("--slurm-conf", metavar="FILE", help="slurm.conf (else SLURM_CONF)")
    p.add_argument(
        "--slurm",
        default="sacct",
        metavar="SOURCE",
        help="job events from: sacct (default; needs slurmdbd, misses no transition across "
        "a restart), squeue, cmd:COMMAND, or a FILE of squeue/sacct output",
    )
    add_slurm_vc_arg(p)
    p.add_argument(
        "--nodes",
        default="sinfo",
        metavar="SOURCE",
        help="node states for CES from: sinfo (default; sinfo -N --json), cmd:COMMAND, a FILE, "
        "or none (no CES)",
    )
    p.add_argument(
        "--apply-power",
        action="store_true",
        help="also power nodes down/up from the CES advice (as gpuhint slurm apply-power)",
    )
    p.add_argument(
        "--kueue",
        action="store_true",
        help="a Kubernetes cluster with Kueue instead of Slurm: events from its Jobs and "
        "Workloads, hints applied as WorkloadPriorityClass labels (no CES)",
    )
    p.add_argument(
        "--kubeconfig", metavar="FILE", help="with --kueue: kubeconfig (else in-cluster)"
    )
    p.add_argument("--context", help="with --kueue: kubeconfig context")
    p.add_argument("--model", help="duration model (else GPUHINT_MODEL, default history_mix)")
    p.add_argument("--poll", type=float, default=10.0, metavar="S", help="poll every S (10)")
    p.add_argument(
        "--apply-interval",
        type=float,
        metavar="S",
        help="priority pass every S seconds (else GPUHINT_SLURM_INTERVAL_S, 30; with "
        "--kueue GPUHINT_KUEUE_INTERVAL_S, 5)",
    )
    p.add_argument("--no-apply", action="store_true", help="write hints only, set no SiteFactor")
    p.add_argument("--dry-run", action="store_true", help="print the scontrol lines, run none")
    p.add_argument("--once", action="store_true", help="one poll, drain and pass, then exit")
    p.add_argument("--json", action="store_true", help="one JSON object per SiteFactor pass")
    p.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="/metrics and /healthz (docs/metrics.md)"
    )
    add_fallback_args(p, "factor")
    p.add_argument(
        "--no-start-comment",
        dest="start_comment",
        action="store_false",
        default=None,
        help="do not write the expected start into pending jobs' Comment (--kueue: the "
        "Workloads' expected-start annotations)",
    )
    add_config_args(p)
    p.set_defaults(handler=run)


@dataclass
class _Site:
    """What one scheduler brings to the loop: its feed, its applier passes, its node feed
    (for CES) and a line for the log."""

    feed: Any
    passes: list[Any]
    nodes: Any
    ces: bool
    describe: str


def run(args: argparse.Namespace) -> int:
    from gpuhint.cli.slurm import _stopper

    stop, restore = _stopper()
    try:
        return _serve(args, stop)
    finally:
        restore()


def _serve(args: argparse.Namespace, stop: threading.Event) -> int:
    from gpuhint.serve.local_log import LocalLog, LocalLogError
    from gpuhint.serve.server import Server, restore_feed

    settings, site = _kueue_site(args, stop) if args.kueue else _slurm_site(args)
    store = redis_store(settings)
    path = Path(settings.state_dir) / f"serve-{settings.cluster}.sqlite"
    try:
        local = LocalLog(path, topic=settings.topics.job_events)
    except (LocalLogError, OSError) as exc:
        raise UserError(str(exc)) from None
    one = _one_process(settings, local, store, site.ces)
    try:
        restore_feed(site.feed, one)
    except (ValueError, KeyError, TypeError) as exc:  # another cluster's file, or damaged
        local.close()
        raise UserError(f"the feed's watermark in {path} cannot be used: {exc}") from None
    passes = site.passes + ([] if args.once else sweep_passes(store))
    server = Server(one, site.feed, passes, poll_s=args.poll, stop=stop, nodes=site.nodes)
    log.info(
        "serve %s: %s, redis %s, state %s, model %s, CES %s",
        settings.cluster,
        site.describe,
        _redacted(settings),
        path,
        settings.model,
        f"{settings.ces_policy} from {args.nodes}" if site.ces else "off",
    )
    try:
        server.run(once=args.once)
    finally:
        _close(store)
        local.close()
    if args.once:  # as the appliers' own --once: what could not be done is an error
        _once_failed(site)
    return 0


SWEEP_INTERVAL_S = 300.0
"""How often queue members whose hint expired are dropped (as the worker does)."""


def sweep_passes(store: Any) -> list[Any]:
    """The sweep of stale queue members (docs/redis-keys.md), for a store that has one:
    without it, a queue keeps the ids of hints that expired (a job whose end was never
    seen) for as long as the queue key lives, and every write refreshes that."""
    from gpuhint.serve.server import Pass

    sweep = getattr(store, "sweep_stale", None)
    return [] if sweep is None else [Pass("stale queue sweep", sweep, SWEEP_INTERVAL_S)]


def _once_failed(site: _Site) -> None:
    """A ``--once`` run whose poll could not read the scheduler, or whose pass failed,
    is a :class:`UserError` naming what failed (the warnings above say why)."""
    failed = [f"{p.name} pass failed: {p.error}" for p in site.passes if p.error is not None]
    if getattr(site.feed, "failures", 0):
        failed.insert(0, f"job events could not be read ({site.describe.split(',')[0]})")
    if failed:
        raise UserError("; ".join(failed))


def _close(store: Any) -> None:
    """Flush and close the store; with Redis down, say so in one line: what was not
    written belongs to events not committed, which the next start handles again."""
    try:
        store.close()
    except Exception as exc:
        log.warning(
            "serve: %d store write(s) not flushed at exit (%s: %s); the next start makes "
            "them again",
            store.pending,
            type(exc).__name__,
            exc,
        )


def _slurm_site(args: argparse.Namespace) -> tuple[Any, _Site]:
    from gpuhint.cli.slurm import _check_slurm
    from gpuhint.cli.slurm_common import _metrics
    from gpuhint.slurm.commands import SlurmCli

    settings, ss = _serve_settings(args)
    cli = SlurmCli(ss.conf)
    _check_slurm(cli, once=args.once)  # a daemon started while slurmctld is down retries
    ces = settings.ces_enabled and args.nodes != "none"
    if args.apply_power and not ces:
        raise UserError("--apply-power needs CES (GPUHINT_CES_ENABLED and --nodes)")
    feed = _feed(args, settings, ss)
    metrics = _metrics(settings)  # one /metrics server (--metrics-port) for both passes
    passes = [] if args.no_apply else [_priority_pass(args, settings, ss, cli, metrics)]
    if args.apply_power:
        passes.append(_power_pass(args, settings, ss, cli, metrics))
    nodes = _node_feed(args, settings, feed) if ces else None
    describe = f"slurm {args.slurm}"
    describe += ", no SiteFactor (--no-apply)" if args.no_apply else ""
    describe += ", applying power" if args.apply_power else ""
    return settings, _Site(feed, passes, nodes, ces, describe)


def _kueue_site(args: argparse.Namespace, stop: threading.Event) -> tuple[Any, _Site]:
    """Kueue's feed and applier pass, with the settings of ``gpuhint kueue
    apply-priorities`` (the serve flags that mean the same thing carried over)."""
    from gpuhint.cli import kueue
    from gpuhint.kueue.kube import KubeError

    if args.apply_power:
        raise UserError("--apply-power powers Slurm nodes; with --kueue there is no CES")
    kargs = argparse.Namespace(
        **{
            **dict.fromkeys(("classes", "base", "min_service", "max_service"), None),
            **dict.fromkeys(("rate", "burst", "workers"), None),
            **vars(args),
            "interval": args.apply_interval,
            "start_annotations": args.start_comment,
        }
    )
    common, ks = kueue._settings(kargs)
    settings = _checked(args, common)
    try:
        feed = _kueue_feed(settings.cluster, ks)
        passes = [] if args.no_apply else [_kueue_pass(kargs, common, ks, stop)]
    except KubeError as exc:
        raise UserError(f"Kubernetes API: {exc}") from None
    describe = "kueue" + (", no priority classes (--no-apply)" if args.no_apply else "")
    return settings, _Site(feed, passes, None, False, describe)


def _kueue_feed(cluster: str, ks: Any) -> Any:
    from gpuhint.cores.job_tracker import JobTracker
    from gpuhint.kueue.pods import KueueFeed, KueueSnapshot
    from gpuhint.wire.contract import JobState

    tracker = JobTracker(cluster=cluster, vanished_state=JobState.CANCELLED)
    return KueueFeed(tracker, KueueSnapshot(ks.kubeconfig, ks.context))


def _kueue_pass(kargs: argparse.Namespace, common: Any, ks: Any, stop: threading.Event) -> Any:
    """The Kueue applier's pass. Its cache of Jobs and Workloads is listed once per pass
    with ``--once``, else kept current by watches until ``stop`` (as the applier's own
    daemon does), so a pass reads no list from the API server. The classes are made and
    the watches started by the first pass the API server answers."""
    from redis.exceptions import RedisError

    from gpuhint.cli import kueue
    from gpuhint.kueue.kube import KubeError
    from gpuhint.serve.server import Pass

    ladder = kueue._ladder(ks)
    backend = kueue._backend(ks)
    applier, hints = kueue.build_applier(kargs, common, ks, ladder, backend)
    record = kueue._recorder(hints, common, kargs, ks)
    metrics = kueue._metrics(common)
    start = kueue.starter(applier, backend, kargs.dry_run, stop)

    def one_pass() -> None:
        try:
            if kargs.once:
                kueue.ensure_classes(applier, kargs.dry_run)
                backend.sync()
            else:  # the API server down at start is an outage, retried like a later one
                start()
            kueue.one_pass(applier, kargs, record, metrics)
        except Exception as exc:  # counted, recorded for `gpuhint status`; the loop retries
            if isinstance(exc, KubeError):
                metrics.error("api")
            elif isinstance(exc, RedisError | OSError):
                metrics.redis_down()
            else:
                metrics.error("internal")
            record(ok=False, error=f"{type(exc).__name__}: {exc}")
            raise

    return Pass("Kueue priority class", one_pass, ks.interval_s)


def _serve_settings(args: argparse.Namespace) -> tuple[Any, Any]:
    from gpuhint.cli.slurm import _settings

    args.metrics_port = getattr(args, "metrics_port", None)
    settings, ss = _settings(
        args,
        {"interval_s": "--apply-interval"},
        interval_s=args.apply_interval,
        neutral=args.neutral,
        stale_after_s=args.stale_after,
        fade_s=args.fade,
        start_comment=args.start_comment,
    )
    return _checked(args, settings), ss


def _checked(args: argparse.Namespace, settings: Any) -> Any:
    """``settings`` with ``--model``; a bad model or ``--poll`` is a user error."""
    from models.registry import DURATION_MODELS

    if args.model:
        settings = settings.model_copy(update={"model": args.model})
    if settings.model not in DURATION_MODELS:
        raise UserError(
            f"unknown model {settings.model!r}; choose one of {', '.join(sorted(DURATION_MODELS))}"
        )
    if args.poll <= 0:
        raise UserError(f"--poll {args.poll}: must be > 0 seconds")
    return settings


def _redacted(settings: Any) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(settings.redis_url.get_secret_value())
    if parts.scheme == "unix":  # a socket: its path (no host, no port)
        return f"unix://{parts.path}"
    return f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}"


def _one_process(settings: Any, local: Any, store: Any, ces: bool) -> Any:
    from functools import partial

    from gpuhint.cores.pipeline.cluster_load import processor_from_settings
    from gpuhint.serve.runner import OneProcess

    return OneProcess(
        local,
        store,
        model=settings.model,
        topics=settings.topics,
        batch_max=settings.batch_max,
        save_interval_s=0.0,
        max_record_bytes=settings.state_max_record_bytes,
        max_live=settings.state_max_live_vcs,
        wait_bound=settings.qssf_wait_bound,
        ces=partial(processor_from_settings, settings) if ces else None,
    )


def _feed(args: argparse.Namespace, settings: Any, ss: Any) -> Any:
    from gpuhint.slurm.feed import slurm_feed
    from gpuhint.slurm.jobs import slurm_source

    check_source("slurm", slurm_source(args.slurm))
    return slurm_feed(args.slurm, cluster=settings.cluster, vc_from=args.slurm_vc)


def _observed(
    run: Callable[[], Any], metrics: Any, record: Callable[..., Any]
) -> Callable[[], Any]:
    """``run`` with its failure counted in ``metrics`` and recorded for ``gpuhint
    status`` (then raised again: the loop retries), as the Slurm appliers' own loops do."""
    import redis

    from gpuhint.slurm.commands import SlurmCommandError

    def observed() -> Any:
        try:
            return run()
        except Exception as exc:
            if isinstance(exc, redis.RedisError):
                metrics.redis_down()
            else:
                metrics.error("scheduler" if isinstance(exc, SlurmCommandError) else "internal")
            record(exc=exc)
            raise

    return observed


def _priority_pass(args: argparse.Namespace, settings: Any, ss: Any, cli: Any, metrics: Any) -> Any:
    from gpuhint.cli.slurm import _client, _priority_applier, _recorder, _report_priorities
    from gpuhint.serve.server import Pass

    client = _client(settings)
    applier = _priority_applier(args, settings, ss, cli, client)
    record = _recorder(client, settings, "slurm-priorities", ss.interval_s, args.dry_run)
    run = _observed(applier.run_pass, metrics, record)

    def one_pass() -> None:
        result = run()
        if result.hints_from == "cache":
            metrics.error("redis")
        metrics.observe_slurm_priorities(result, args.dry_run)
        record(result)
        _report_priorities(result, args)

    return Pass("SiteFactor", one_pass, ss.interval_s)


def _node_feed(args: argparse.Namespace, settings: Any, feed: Any) -> Any:
    from gpuhint.slurm.nodes import SlurmNodeFeed, slurm_node_source

    source = slurm_node_source(args.nodes)
    check_source("nodes", source)
    return SlurmNodeFeed(source, cluster=settings.cluster, running_on=feed.tracker.running_on)


def _power_pass(args: argparse.Namespace, settings: Any, ss: Any, cli: Any, metrics: Any) -> Any:
    import time

    from gpuhint.cli.slurm import _client, _power_applier, _recorder
    from gpuhint.serve.server import Pass

    client = _client(settings)
    applier = _power_applier(settings, ss, cli, client, args.dry_run)
    record = _recorder(client, settings, "slurm-power", ss.power_interval_s, args.dry_run)
    run = _observed(lambda: applier.run_pass(time.time()), metrics, record)

    def one_pass() -> None:
        t0 = time.monotonic()
        r = run()
        record(r)
        metrics.observe_slurm_power(r, time.monotonic() - t0, args.dry_run)
        if r.powered_down or r.powered_up or r.resume_failed:
            log.info(
                "power pass: target %d on, down %s, up %s, failed resumes %s",
                r.target_on,
                ",".join(r.powered_down) or "-",
                ",".join(r.powered_up) or "-",
                ",".join(r.resume_failed) or "-",
            )

    return Pass("power", one_pass, ss.power_interval_s)
