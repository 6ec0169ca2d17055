"""``gpuhint serve``: one process for one Slurm cluster, no Kafka."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from gpuhint.cli.common import UserError, add_config_args, add_fallback_args, redis_store

log = logging.getLogger("gpuhint.serve")

DESCRIPTION = """\
The whole of gpuhint for one Slurm cluster in one process, without Kafka: polls Slurm
(sacct or squeue) for job events, runs them through the same message path, hint core
and checkpoint order as the Kafka worker, writes the hints to Redis (the same keys a
worker writes: any scheduler or `gpuhint hints` reads them) and applies them as
SiteFactor every --apply-interval seconds, as `gpuhint slurm apply-priorities` does.

State (each VC's model and queue, the job-event log and the Slurm watermark) is kept
in one SQLite file under GPUHINT_STATE_DIR (default .gpuhint-state): a restart, or a
SIGKILL, neither loses an event nor learns one twice; the hints are the same as the
Kafka pipeline's for the same events.

CES (power advice) runs too, unless GPUHINT_CES_ENABLED=false or --nodes none: every
poll reads each node's state from `sinfo --json` (--nodes) into the worker's CES side
(GPUHINT_CES_POLICY, docs/ces.md), whose power advisories go to Redis; with
--apply-power this process also powers idle nodes down and up as `gpuhint slurm
apply-power` does (its settings: GPUHINT_SLURM_MIN_IDLE, ..., docs/slurm.md).

examples:
  gpuhint serve --cluster prod --redis-url redis://localhost:6379/0
  gpuhint serve --cluster prod --dry-run --once        one poll and pass, print scontrol lines
  gpuhint serve --cluster prod --slurm squeue --no-apply    hints only (another applier)
  gpuhint serve --cluster prod --apply-power               ... and power nodes down/up
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "serve",
        help="one process for one Slurm cluster: feed, hints, SiteFactor (no Kafka)",
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
    p.add_argument(
        "--slurm-vc",
        choices=["account", "partition"],
        default="account",
        help="a job's VC: its account (default) or its partition",
    )
    p.add_argument(
        "--nodes",
        default="sinfo",
        metavar="SOURCE",
        help="node states for CES from: sinfo (default; sinfo --json), cmd:COMMAND, a FILE, "
        "or none (no CES)",
    )
    p.add_argument(
        "--apply-power",
        action="store_true",
        help="also power nodes down/up from the CES advice (as gpuhint slurm apply-power)",
    )
    p.add_argument("--model", help="duration model (else GPUHINT_MODEL, default history_mix)")
    p.add_argument("--poll", type=float, default=10.0, metavar="S", help="poll every S (10)")
    p.add_argument(
        "--apply-interval", type=float, metavar="S", help="SiteFactor pass every S (else 60)"
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
        help="do not write the expected start into pending jobs' Comment",
    )
    add_config_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gpuhint.cli.slurm import _check_slurm, _stopper
    from gpuhint.serve.local_log import LocalLog, LocalLogError
    from gpuhint.serve.server import Server, restore_feed
    from gpuhint.slurm.commands import SlurmCli

    settings, ss = _serve_settings(args)
    cli = SlurmCli(ss.conf)
    _check_slurm(cli)
    store = redis_store(settings)
    path = Path(settings.state_dir) / f"serve-{settings.cluster}.sqlite"
    try:
        local = LocalLog(path, topic=settings.topics.job_events)
    except (LocalLogError, OSError) as exc:
        raise UserError(str(exc)) from None
    ces = settings.ces_enabled and args.nodes != "none"
    if args.apply_power and not ces:
        raise UserError("--apply-power needs CES (GPUHINT_CES_ENABLED and --nodes)")
    one = _one_process(settings, local, store, ces)
    feed = _feed(args, settings, ss)
    restore_feed(feed, one)
    passes = [] if args.no_apply else [_priority_pass(args, settings, ss, cli)]
    if args.apply_power:
        passes.append(_power_pass(args, settings, ss, cli))
    stop, restore = _stopper()
    nodes = _node_feed(args, settings, feed) if ces else None
    server = Server(one, feed, passes, poll_s=args.poll, stop=stop, nodes=nodes)
    log.info(
        "serve %s: slurm %s, redis %s, state %s, model %s, CES %s%s%s",
        settings.cluster,
        args.slurm,
        _redacted(settings),
        path,
        settings.model,
        f"{settings.ces_policy} from {args.nodes}" if ces else "off",
        "" if not args.no_apply else ", no SiteFactor (--no-apply)",
        ", applying power" if args.apply_power else "",
    )
    try:
        server.run(once=args.once)
    finally:
        restore()
        store.close()
        local.close()
    return 0


def _serve_settings(args: argparse.Namespace) -> tuple[Any, Any]:
    from gpuhint.cli.slurm import _settings
    from models.registry import DURATION_MODELS

    args.metrics_port = getattr(args, "metrics_port", None)
    settings, ss = _settings(
        args,
        interval_s=args.apply_interval,
        neutral=args.neutral,
        stale_after_s=args.stale_after,
        fade_s=args.fade,
        start_comment=args.start_comment,
    )
    if args.model:
        settings = settings.model_copy(update={"model": args.model})
    if settings.model not in DURATION_MODELS:
        raise UserError(
            f"unknown model {settings.model!r}; choose one of {', '.join(sorted(DURATION_MODELS))}"
        )
    if args.poll <= 0:
        raise UserError(f"--poll {args.poll}: must be > 0 seconds")
    return settings, ss


def _redacted(settings: Any) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(settings.redis_url.get_secret_value())
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
    from gpuhint.cli.agent import _check_source
    from gpuhint.slurm.feed import slurm_feed
    from gpuhint.slurm.jobs import slurm_source

    _check_source("slurm", slurm_source(args.slurm))
    return slurm_feed(args.slurm, cluster=settings.cluster, vc_from=args.slurm_vc)


def _priority_pass(args: argparse.Namespace, settings: Any, ss: Any, cli: Any) -> Any:
    from gpuhint.cli.slurm import _client, _priority_applier, _report_priorities
    from gpuhint.serve.server import Pass

    applier = _priority_applier(args, settings, ss, cli, _client(settings))

    def one_pass() -> None:
        _report_priorities(applier.run_pass(), args)

    return Pass("SiteFactor", one_pass, ss.interval_s)


def _node_feed(args: argparse.Namespace, settings: Any, feed: Any) -> Any:
    from gpuhint.cli.agent import _check_source
    from gpuhint.slurm.nodes import SlurmNodeFeed, slurm_node_source

    source = slurm_node_source(args.nodes)
    _check_source("nodes", source)
    return SlurmNodeFeed(source, cluster=settings.cluster, running_on=feed.tracker.running_on)


def _power_pass(args: argparse.Namespace, settings: Any, ss: Any, cli: Any) -> Any:
    from gpuhint.cli.slurm import _client, _power_applier
    from gpuhint.serve.server import Pass

    applier = _power_applier(settings, ss, cli, _client(settings), args.dry_run)

    def one_pass() -> None:
        import time

        r = applier.run_pass(time.time())
        if r.powered_down or r.powered_up or r.resume_failed:
            log.info(
                "power pass: target %d on, down %s, up %s, failed resumes %s",
                r.target_on,
                ",".join(r.powered_down) or "-",
                ",".join(r.powered_up) or "-",
                ",".join(r.resume_failed) or "-",
            )

    return Pass("power", one_pass, ss.power_interval_s)
