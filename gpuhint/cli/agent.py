"""``gpuhint agent``: the node agent (NVML telemetry and scheduler events -> Kafka)."""

from __future__ import annotations

import argparse
import logging
import math
import re
import signal
import socket
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from gpuhint.cli.agent_feeds import add_scheduler_args, make_feeds, make_node_feeds
from gpuhint.cli.common import UserError, add_config_args, one_line, settings_from

if TYPE_CHECKING:
    from agents.node_agent import NodeAgent
    from agents.nvml import Nvml
    from agents.publisher import BufferedPublisher
    from gpuhint.metrics.server import MetricsServer
    from gpuhint.wire.config import Settings

DESCRIPTION = """\
Run on every GPU host. Every --interval seconds it reads each GPU through NVML
(utilization, memory, power and energy, temperature, SM clock, throttle reasons, ECC
and XID errors, compute processes, MIG instances) and publishes one GpuSample per GPU
and one NodeStatus per node to Kafka, keyed cluster/node. A GPU that falls off the bus
is reported unhealthy in NodeStatus.gpu_health and the others keep being sampled.
With --slurm or --kubernetes it also publishes JobEvents (submitted / started /
finished), only when a job changes, and every --roster-every seconds a JobRoster per VC
(the jobs not finished): the worker retires a job that two rosters in a row leave out,
e.g. one whose end was lost in a restart. Run those on ONE host per cluster (e.g. the Slurm
controller), with --nvml none if it has no GPU. With --slurm-nodes sinfo that host also
publishes every Slurm node's NodeStatus (GPUs, GPUs in use, powered down, healthy) for
CES, so a Slurm site needs no agent on each GPU host; use one or the other per cluster.

When Kafka is unreachable, records wait in a bounded buffer (--buffer-max, optionally
spilled to --spill-dir) and sending is retried with backoff; past the bound the oldest
are dropped and counted in NodeStatus.samples_dropped. SIGTERM flushes and exits (1 if
records were lost); a second SIGTERM during the flush stops it and spills at once.

settings (flags override GPUHINT_* env vars, which override --config FILE):
  --bootstrap / GPUHINT_KAFKA_BOOTSTRAP    Kafka, HOST:PORT[,HOST:PORT]
  --cluster / GPUHINT_CLUSTER              cluster name (default "default")
  --node / GPUHINT_NODE_NAME               node name (default: this host's short name)
  --interval / GPUHINT_AGENT_INTERVAL_S    seconds between samples (10)
  --buffer-max / GPUHINT_AGENT_BUFFER_MAX  records buffered in memory (10000)
  --spill-dir / GPUHINT_AGENT_SPILL_DIR    spill the buffer to disk here
  --roster-every / GPUHINT_AGENT_ROSTER_EVERY_S
                                           seconds between job rosters (300; 0: none)
  --metrics-port / GPUHINT_METRICS_PORT    /metrics (GPUs under DCGM exporter names) and
                                           /healthz (docs/metrics.md); unset: off
  GPUHINT_TOPIC_PREFIX, GPUHINT_PARTITIONS. See docs/agent.md.
"""

EPILOG = """\
examples:
  gpuhint agent --nvml fake --scenario gpu-lost --once --dry-run   see what it sends
  gpuhint agent --bootstrap kafka:9092 --cluster venus              on a GPU host
  gpuhint agent --nvml none --slurm squeue --bootstrap kafka:9092   on the Slurm controller
  gpuhint agent --nvml none --slurm sacct --slurm-nodes sinfo ...   ... with nodes for CES
  gpuhint agent --nvml fake --slurm tests/data/slurm/squeue_1.json --once --dry-run
"""

_HOSTPORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "agent",
        help="run the node agent (NVML + scheduler events -> Kafka)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--nvml",
        choices=["real", "fake", "none"],
        default="real",
        help="real: the GPUs of this host (default); fake: scenario data, no GPU needed; "
        "none: scheduler events only",
    )
    p.add_argument(
        "--scenario",
        metavar="NAME|FILE",
        help="fake NVML scenario: steady (default), busy, idle, gpu-lost, xid, field-errors, "
        "mig, or a JSON file (see agents/fake_nvml.py)",
    )
    p.add_argument("--interval", type=float, metavar="SECONDS", help="sampling interval (10)")
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--cluster", help="cluster name")
    p.add_argument("--node", help="node name (default: short hostname)")
    p.add_argument("--once", action="store_true", help="one sample, flush, exit")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help='print {"topic","key","message"} JSON lines to stdout instead of Kafka',
    )
    add_scheduler_args(p)
    p.add_argument("--buffer-max", type=int, metavar="N", help="records buffered in memory")
    p.add_argument("--spill-dir", metavar="DIR", help="spill the full buffer to disk here")
    p.add_argument(
        "--roster-every",
        type=float,
        metavar="SECONDS",
        help="publish the scheduler's unfinished jobs per VC this often (300; 0: never)",
    )
    p.add_argument(
        "--busy-util",
        type=float,
        default=5.0,
        metavar="PCT",
        help="a GPU with no compute process counts busy from this utilization (5)",
    )
    p.add_argument(
        "--flush-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to try sending at exit (10)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve /metrics and /healthz on PORT (else GPUHINT_METRICS_PORT; unset: off)",
    )
    add_config_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agents.node_agent import NodeAgent
    from agents.nvml import NvmlUnavailable
    from gpuhint.cores.job_watermark import warn_without_watermark

    settings = _agent_settings(args)
    node = settings.node_name or _host_node_name()
    nvml = _make_nvml(args)
    feeds = make_feeds(args, settings)
    if not args.once:  # a feed without a watermark forgets, at a restart, what it announced
        warn_without_watermark(feeds, logging.getLogger("gpuhint.agent"))
    node_feeds = make_node_feeds(args, settings, feeds)
    publisher = _make_publisher(args, settings, node)
    agent = NodeAgent(
        nvml=nvml,
        publisher=publisher,
        cluster=settings.cluster,
        node=node,
        topics=settings.topics,
        interval_s=settings.agent_interval_s,
        feeds=feeds,
        node_feeds=node_feeds,
        busy_util_pct=args.busy_util,
        roster_every_s=settings.agent_roster_every_s,
    )
    try:
        agent.start()
    except NvmlUnavailable as exc:
        raise UserError(str(exc)) from None

    log = logging.getLogger("gpuhint.agent")
    metrics = _start_metrics(agent, settings, log)
    log.info(
        "agent %s/%s: nvml %s, every %.3g s -> %s%s",
        settings.cluster,
        node,
        args.nvml,
        settings.agent_interval_s,
        "stdout" if args.dry_run else settings.kafka_bootstrap,
        "".join(f", {f.name}" for f in [*feeds, *node_feeds]),
    )
    lost = _run_until_stopped(agent, args, metrics, log)
    kept = agent.publisher.pending if args.once else 0  # on disk, not sent: --once says so
    if lost or kept:
        where = "stdout" if args.dry_run else settings.kafka_bootstrap
        print(
            f"gpuhint agent: {lost or kept} record(s) could not be sent to {where} within "
            f"{args.flush_timeout:g} s"
            + (f"; kept in {settings.agent_spill_dir} for the next run" if not lost else ""),
            file=sys.stderr,
        )
        return 1
    return 0


def _agent_settings(args: argparse.Namespace) -> Settings:
    """The settings from flags, env and --config, with the flags checked."""
    try:
        settings = settings_from(
            args,
            kafka_bootstrap=args.bootstrap,
            cluster=args.cluster,
            node_name=args.node,
            agent_interval_s=args.interval,
            agent_buffer_max=args.buffer_max,
            agent_spill_dir=args.spill_dir,
            agent_roster_every_s=args.roster_every,
            metrics_port=args.metrics_port,
        )
    except UserError as exc:
        raise UserError(one_line(str(exc))) from None

    if args.scenario and args.nvml != "fake":
        raise UserError("--scenario needs --nvml fake")
    if not 0 <= args.busy_util <= 100:  # NaN too
        raise UserError(f"--busy-util must be within 0..100, got {args.busy_util}")
    if not (math.isfinite(args.flush_timeout) and args.flush_timeout >= 0):
        raise UserError(f"--flush-timeout must be a finite number >= 0, got {args.flush_timeout}")
    if args.nvml == "none" and not (args.slurm or args.kubernetes or args.slurm_nodes):
        raise UserError(
            "--nvml none publishes nothing without --slurm, --slurm-nodes or --kubernetes"
        )
    bad = [a for a in settings.kafka_bootstrap.split(",") if not _HOSTPORT.match(a.strip())]
    if bad and not args.dry_run:
        raise UserError(f"Kafka bootstrap {settings.kafka_bootstrap!r} is not HOST:PORT[,...]")
    return settings


def _host_node_name() -> str:
    """This host's short name, checked like ``--node`` (it goes into keys and messages)."""
    from pydantic import TypeAdapter, ValidationError

    from gpuhint.wire.contract import Name

    name = socket.gethostname().split(".")[0]
    try:
        return str(TypeAdapter(Name).validate_python(name))
    except ValidationError as exc:
        why = exc.errors(include_url=False)[0]["msg"]
        raise UserError(
            f"this host's name {name!r} is not a valid node name ({why}); "
            "set --node or GPUHINT_NODE_NAME"
        ) from None


def _make_nvml(args: argparse.Namespace) -> Nvml | None:
    """The GPUs to read (real, a fake scenario), or None with ``--nvml none``."""
    from agents.fake_nvml import FakeNvml, load_scenario
    from agents.nvml import RealNvml

    nvml: Nvml | None = None
    if args.nvml == "fake":
        try:
            nvml = FakeNvml(load_scenario(args.scenario or "steady"))
        except ValueError as exc:
            raise UserError(str(exc)) from None
    elif args.nvml == "real":
        nvml = RealNvml()
    return nvml


def _make_publisher(args: argparse.Namespace, settings: Settings, node: str) -> BufferedPublisher:
    """The buffered publisher to Kafka (or stdout with ``--dry-run``)."""
    from agents.publisher import BufferedPublisher, KafkaTransport, StdoutTransport, Transport
    from streams.kafka_io import kafka_client_config

    send_timeout_s = max(1.0, min(10.0, settings.agent_interval_s))
    transport: Transport
    if args.dry_run:
        transport = StdoutTransport()
    else:
        transport = KafkaTransport(
            settings.kafka_bootstrap,
            client_id=f"gpuhint-agent-{node}",
            on_connect=_topic_creator(settings),
            bootstrap_timeout_ms=int(send_timeout_s * 1000),
            max_block_ms=int(send_timeout_s * 1000),
            **kafka_client_config(settings),
        )
    if settings.agent_spill_dir is not None:
        try:
            settings.agent_spill_dir.mkdir(parents=True, exist_ok=True)
            probe = settings.agent_spill_dir / ".probe"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise UserError(f"--spill-dir {settings.agent_spill_dir}: {exc.strerror}") from None
    from agents.spill import SpillDirBusy

    try:
        return BufferedPublisher(
            transport,
            buffer_max=settings.agent_buffer_max,
            spill_dir=settings.agent_spill_dir,
            send_timeout_s=send_timeout_s,
        )
    except SpillDirBusy as exc:
        raise UserError(str(exc)) from None


def _start_metrics(
    agent: NodeAgent, settings: Settings, log: logging.Logger
) -> MetricsServer | None:
    """Serve /metrics and /healthz when a port is set; None otherwise."""
    metrics = None
    if settings.metrics_port is not None:
        from gpuhint.metrics.agent import start_agent_metrics

        try:
            metrics = start_agent_metrics(agent, settings.metrics_host, settings.metrics_port)
        except OSError as exc:
            agent.close(0)
            raise UserError(
                f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port}: "
                f"{exc.strerror or exc}"
            ) from None
        log.info("metrics on http://%s:%d/metrics", metrics.host, metrics.port)
    return metrics


def _run_until_stopped(
    agent: NodeAgent, args: argparse.Namespace, metrics: MetricsServer | None, log: logging.Logger
) -> int:
    """Run until SIGTERM/SIGINT (or one tick with ``--once``), then flush; the records lost.

    The handlers stay during the flush: a second signal cuts it short, so what is left
    is spilled (or counted) at once instead of the process dying with it in memory.
    """
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("%s again: stopping the flush, keeping what is left", name)
            agent.publisher.abort_flush()
        else:
            log.info("%s: flushing and exiting", name)
            stop.set()

    old = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            agent.run(stop, max_ticks=1 if args.once else None)
        finally:
            stop.set()  # from here on, a signal cuts the flush short
            lost = agent.close(args.flush_timeout)
            if metrics is not None:
                metrics.stop()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return lost


def _topic_creator(settings: Any) -> Any:
    def create() -> None:
        from streams.kafka_io import ensure_topics, kafka_client_config

        ensure_topics(
            settings.kafka_bootstrap,
            settings.topics,
            settings.partitions,
            timeout_s=10,
            replication_factor=settings.replication_factor,
            security=kafka_client_config(settings),
        )

    return create
