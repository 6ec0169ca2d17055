"""``gpuhint replay``: publish a historical trace into Kafka as job events."""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import TYPE_CHECKING

from gpuhint.cli.common import (
    UserError,
    add_config_args,
    add_trace_args,
    add_trace_file_arg,
    load_trace,
    needs_trace,
    report_skipped,
    settings_from,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from tqdm import tqdm

    from agents.publisher import KafkaTransport
    from gpuhint.lab.replay import ReplayProgress, ResumeState
    from gpuhint.lab.traces.readers import TraceRead
    from gpuhint.wire.config import Settings
    from gpuhint.wire.contract import JobEvent

DESCRIPTION = """\
Reads a job trace (Helios cluster_log.csv, Philly cluster_job_log JSON, a plain
job_id,submission_time,duration,num_gpu CSV, or a Slurm sacct --parsable2 / --json
export; gzipped or not) and publishes every job's submitted, started and finished
events to the job-event topic, keyed by cluster/VC, in time order.

A trace without start times (e.g. the ITP traces) is replayed as if each job started
at submit. Pace it with --speed N (trace time N x faster than real time) or send as
fast as the broker takes them with --max (default).

examples:
  gpuhint replay --trace venus.csv --bootstrap localhost:9092 --max
  gpuhint replay --trace philly.json --bootstrap localhost:9092 --speed 3600 --cluster philly
  gpuhint replay --trace jobs.csv --until "2017-10-20 00:00:00"   # stop there: leaves jobs pending
  gpuhint replay --trace venus.csv --resume   # after a failed run: go on where Kafka's acks ended
  gpuhint replay --trace itp_01.csv --spread-vcs 8   # a trace without VCs over 8 keys, by user
  gpuhint replay --trace history.sacct --cluster hpc1   # Slurm: sacct -a -X --parsable2

A trace without VCs puts every job on VC "default": one key, one partition, one worker.
--spread-vcs N hashes each job's user (CRC-32; the job id if it has no user) into N
sub-VCs "<vc>~0".."<vc>~N-1":
a user's jobs stay on one key (one model, one queue), the sub-VCs spread over the
partitions; HintClient.merged_queue reads them back as one queue ordered by priority
(docs/architecture.md, "Traces without VCs").

Each batch is acknowledged by Kafka (acks=all) before the next is sent, and the count
of acknowledged events is kept in a state file. If the broker goes away, replay retries
with backoff for GPUHINT_KAFKA_RETRY_S seconds (300), then stops with exit code 2 and
how far it got; --resume continues from there (events are sent at least once).
TLS/SASL: GPUHINT_KAFKA_SECURITY_PROTOCOL etc. (docs/operations.md).

Progress: a bar on a terminal; without one (a log file, a Kubernetes Job) a line a
minute; --no-progress: neither.

Bad input: the first bad row stops the run with file:line and the reason (exit 2);
--on-error skip skips bad rows and reports each. A job whose id repeats an earlier
job's is a bad row (the worker would take it for a resend and drop it); the pending and
running jobs of an sacct export are left out, and counted.
"""


PROGRESS_LINE_S = 60.0
"""Without a terminal (no bar): a progress line on stderr this often (seconds)."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "replay",
        help="publish a historical trace into Kafka as job events",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_trace_file_arg(p, "trace file (.csv, .json, sacct export; optionally .gz)")
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka (else GPUHINT_KAFKA_BOOTSTRAP)")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, metavar="N", help="replay N x faster than real time")
    pace.add_argument("--max", action="store_true", help="as fast as possible (default)")
    p.add_argument("--cluster", help="cluster name on events (else GPUHINT_CLUSTER)")
    p.add_argument(
        "--until",
        metavar="TIME",
        help="send the events up to this trace time (YYYY-MM-DD HH:MM:SS, UTC unless it "
        "has a zone; seconds for a trace counted from 0, as ITP's)",
    )
    p.add_argument("--limit", type=int, metavar="N", help="send at most N events")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bar (without a terminal: a line a minute instead)",
    )
    p.add_argument(
        "--spread-vcs",
        type=int,
        default=1,
        metavar="N",
        help="hash users into N sub-VCs <vc>~k per VC (for traces without VCs; default 1: off)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue after the last event Kafka acknowledged in an earlier run of this "
        "replay (refused when there was none: nothing is sent twice by mistake)",
    )
    p.add_argument(
        "--state",
        metavar="FILE",
        help="replay state file (default GPUHINT_STATE_DIR/replay/<fingerprint>.json)",
    )
    add_trace_args(p)
    add_config_args(p)
    p.set_defaults(handler=needs_trace(run))


def spread_events(events: list[JobEvent], n: int) -> list[JobEvent]:
    """Each event with its VC replaced by the user's sub-VC (:func:`gpuhint.wire.topics.spread_vc`).

    >>> from gpuhint.wire.contract import JobEvent, JobPhase
    >>> ev = JobEvent(phase=JobPhase.SUBMITTED, job_id="j", user="alice", time=0, submit_time=0)
    >>> [e.vc for e in spread_events([ev], 8)], [e.vc for e in spread_events([ev], 1)]
    (['default~7'], ['default'])
    """
    if n <= 1:
        return events
    from gpuhint.wire.topics import spread_vc

    return [e.model_copy(update={"vc": spread_vc(e.vc, e.user, n, e.job_id)}) for e in events]


def run(args: argparse.Namespace) -> int:
    from gpuhint.lab.replay import BrokerGone, replay_acked

    settings, until = _checked(args)
    read, events = _events(args, settings, until)
    topic = settings.topics.job_events
    state, start = _resume_state(args, settings, events, until)
    try:  # a run that never reaches the broker can be resumed too (an earlier run's
        if not state.path.exists():  # state stays until this one's first acknowledgement)
            state.save(start, len(events))
    except OSError as exc:
        raise UserError(f"cannot write the replay state {state.path}: {exc}") from None
    transport = _transport(settings)
    bar, progress = _progress(args, topic, len(events), start, state)
    t0 = time.perf_counter()
    try:
        result = replay_acked(
            events,
            topic,
            transport,
            start=start,
            speed=None if args.max or args.speed is None else args.speed,
            retry_s=settings.kafka_retry_s,
            on_progress=progress,
        )
    except BrokerGone as exc:
        raise UserError(f"{exc}; rerun with --resume to continue") from None
    finally:
        bar.close()
        transport.close()
    state.save(result.acked, result.total)
    elapsed = time.perf_counter() - t0
    n = result.acked - start
    print(
        f"replayed {n:,} events of {len(read.jobs):,} jobs ({read.fmt}) to "
        f"{topic} at {settings.kafka_bootstrap} in {elapsed:.1f} s "
        f"({n / max(elapsed, 1e-9):,.0f} events/s)"
        + (f", {result.outages} broker outage(s) ridden out" if result.outages else ""),
        file=sys.stderr,
    )
    return 0


def _checked(args: argparse.Namespace) -> tuple[Settings, float | None]:
    """The flags checked (a user's mistake is a :class:`UserError`), the settings, and
    ``--until`` as a trace time."""
    from gpuhint.lab.traces.readers import parse_time

    if args.speed is not None and not (math.isfinite(args.speed) and args.speed > 0):
        raise UserError(f"--speed {args.speed}: must be a finite number > 0")
    if args.limit is not None and args.limit < 0:
        raise UserError("--limit must be >= 0")
    if args.spread_vcs < 1:
        raise UserError("--spread-vcs must be >= 1")
    settings = settings_from(args, kafka_bootstrap=args.bootstrap, cluster=args.cluster)
    until = None
    if args.until:
        try:
            until = parse_time(args.until)
        except ValueError:
            until = math.nan
        if math.isnan(until):
            raise UserError(
                f"--until {args.until!r}: expected YYYY-MM-DD HH:MM:SS (UTC) or trace seconds"
            ) from None
    return settings, until


def _events(
    args: argparse.Namespace, settings: Settings, until: float | None
) -> tuple[TraceRead, list[JobEvent]]:
    """The trace read (its skipped rows reported) and the events to send, in order."""
    from gpuhint.lab.traces.readers import job_events

    read = load_trace(args.trace, args.format, args.on_error)
    report_skipped(read)
    events = spread_events(job_events(read.jobs, cluster=settings.cluster), args.spread_vcs)
    if until is not None:
        first = events[0].time if events else until
        events = [e for e in events if e.time <= until]
        if not events:
            raise UserError(
                f"--until {args.until!r} is before the trace's first event "
                f"({_when(first)}): nothing to send"
            )
    if args.limit is not None:
        events = events[: args.limit]
    return read, events


def _when(t: float) -> str:
    """A trace time in words: a UTC date, or seconds for a trace counted from 0.

    >>> _when(1506816000.0), _when(3600.0)
    ('2017-10-01 00:00:00 UTC', '3,600 s')
    """
    from datetime import UTC, datetime

    if t < 10 * 365 * 86400:  # before 1980: seconds since the trace's start
        return f"{t:,.0f} s"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _resume_state(
    args: argparse.Namespace, settings: Settings, events: list[JobEvent], until: float | None
) -> tuple[ResumeState, int]:
    """This replay's state file (named by its fingerprint) and the event to start at
    (after the acknowledged ones with ``--resume``, else the first)."""
    from pathlib import Path

    from gpuhint.lab.replay import ResumeState, fingerprint

    trace = Path(args.trace).resolve()
    topic = settings.topics.job_events
    stat = trace.stat()
    cluster_id = settings.cluster
    if args.spread_vcs > 1:  # another key layout is another replay (resume state)
        cluster_id = f"{cluster_id}~{args.spread_vcs}"
    fp = fingerprint(trace, stat.st_size, stat.st_mtime_ns, topic, cluster_id, until, args.limit)
    state_path = Path(args.state) if args.state else settings.state_dir / "replay" / f"{fp}.json"
    state = ResumeState(state_path, fp)
    start = 0
    if args.resume:
        if not state_path.exists():
            raise UserError(
                f"nothing to resume: no state of this replay at {state_path} (an earlier run "
                "with another trace file, cluster, topic prefix, --until, --limit, "
                "--spread-vcs or state directory is another replay); run without --resume "
                "to start over"
            )
        try:
            start = min(state.load(), len(events))
        except ValueError as exc:
            raise UserError(str(exc)) from None
        print(f"resuming after {start:,} acknowledged events ({state_path})", file=sys.stderr)
    return state, start


def _transport(settings: Settings) -> KafkaTransport:
    """A Kafka producer transport that creates the topics on connect (per-partition order
    kept on retry); Kafka's own connection noise silenced (our lines say it)."""
    import logging

    from agents.publisher import KafkaTransport
    from streams.kafka_io import ensure_topics, kafka_client_config

    security = kafka_client_config(settings)

    def create_topics() -> None:
        ensure_topics(
            settings.kafka_bootstrap,
            settings.topics,
            settings.partitions,
            timeout_s=10,
            replication_factor=settings.replication_factor,
            security=security,
        )

    transport = KafkaTransport(
        settings.kafka_bootstrap,
        client_id="gpuhint-replay",
        on_connect=create_topics,
        max_in_flight_requests_per_connection=1,  # keep per-partition order on retry
        **security,
    )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("kafka", "kafka.conn", "kafka.client"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)  # our own lines say it, rate-limited
    return transport


def _progress(
    args: argparse.Namespace, topic: str, total: int, start: int, state: ResumeState
) -> tuple[tqdm[Any], Callable[[ReplayProgress], None]]:
    """The progress bar, and the callback that moves it, shows a broker outage and saves
    the acknowledged count."""
    from tqdm import tqdm

    bar = tqdm(
        total=total,
        initial=start,
        unit="ev",
        desc=f"replay -> {topic}",
        disable=True if args.no_progress else None,  # None: off when stderr is no terminal
    )
    shown_down = False
    lines = bool(bar.disable) and not args.no_progress  # no terminal: lines, not a bar
    last_line = time.monotonic()

    def progress(p: ReplayProgress) -> None:
        nonlocal shown_down, last_line
        bar.update(p.acked - bar.n)
        if lines and time.monotonic() - last_line >= PROGRESS_LINE_S:
            last_line = time.monotonic()
            print(
                f"replay: {p.acked:,} of {p.total:,} events acknowledged "
                f"({100 * p.acked / max(p.total, 1):.0f}%)",
                file=sys.stderr,
                flush=True,
            )
        if p.down_since is not None:
            bar.set_postfix_str(f"Kafka down, retry {p.retries}", refresh=True)
            shown_down = True
        elif shown_down:
            bar.set_postfix_str("")
            shown_down = False
        if p.acked > start:
            state.save(p.acked, p.total)

    return bar, progress
