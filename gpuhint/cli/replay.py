"""``gpuhint replay``: publish a historical trace into Kafka as job events."""

from __future__ import annotations

import argparse
import sys
import time

from gpuhint.cli.common import (
    UserError,
    add_config_args,
    add_trace_args,
    load_trace,
    report_skipped,
    settings_from,
)

DESCRIPTION = """\
Reads a job trace (Helios cluster_log.csv, Philly cluster_job_log JSON, or a plain
job_id,submission_time,duration,num_gpu CSV) and publishes every job's submitted,
started and finished events to the job-event topic, keyed by cluster/VC, in time order.

A trace without start times (e.g. the ITP traces) is replayed as if each job started
at submit. Pace it with --speed N (trace time N x faster than real time) or send as
fast as the broker takes them with --max (default).

examples:
  gpuhint replay venus.csv --bootstrap localhost:9092 --max
  gpuhint replay philly.json --bootstrap localhost:9092 --speed 3600 --cluster philly
  gpuhint replay jobs.csv --until "2017-10-20 00:00:00"   # stop there: leaves jobs pending
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "replay",
        help="publish a historical trace into Kafka as job events",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trace", metavar="TRACE", help="trace file (.csv, .json, optionally .gz)")
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka (else GPUHINT_KAFKA_BOOTSTRAP)")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, metavar="N", help="replay N x faster than real time")
    pace.add_argument("--max", action="store_true", help="as fast as possible (default)")
    p.add_argument("--cluster", help="cluster name on events (else GPUHINT_CLUSTER)")
    p.add_argument("--until", metavar="TIME", help="stop before events after this trace time")
    p.add_argument("--limit", type=int, metavar="N", help="send at most N events")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_trace_args(p)
    add_config_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from agents.replay import paced, replay
    from gpuhint.kafka_io import KafkaUnavailable, ensure_topics, make_producer
    from gpuhint.traces import job_events, parse_time

    if args.speed is not None and args.speed <= 0:
        raise UserError("--speed must be > 0")
    if args.limit is not None and args.limit < 0:
        raise UserError("--limit must be >= 0")
    settings = settings_from(args, kafka_bootstrap=args.bootstrap, cluster=args.cluster)
    until = None
    if args.until:
        try:
            until = parse_time(args.until)
        except ValueError:
            raise UserError(f"--until {args.until!r}: expected YYYY-MM-DD HH:MM:SS") from None

    read = load_trace(args.trace, args.format, args.on_error)
    report_skipped(read)
    events = job_events(read.jobs, cluster=settings.cluster)
    if until is not None:
        events = [e for e in events if e.time <= until]
    if args.limit is not None:
        events = events[: args.limit]

    try:
        ensure_topics(settings.kafka_bootstrap, settings.topics, settings.partitions)
        producer = make_producer(settings.kafka_bootstrap)
    except KafkaUnavailable as exc:
        raise UserError(f"{exc} (is Kafka running? see scripts/kafka/run-kafka.sh)") from None

    failures: list[BaseException] = []

    def send(topic: str, key: bytes, value: bytes) -> None:
        fut = producer.send(topic, key=key, value=value)
        fut.add_errback(failures.append)

    t0 = time.perf_counter()
    bar = tqdm(
        paced(events, None if args.max or args.speed is None else args.speed),
        total=len(events),
        unit="ev",
        desc=f"replay -> {settings.topics.job_events}",
        disable=args.no_progress,
    )
    try:
        n = replay(bar, settings.topics.job_events, send)
        producer.flush(timeout=60)
    finally:
        bar.close()
        producer.close(timeout=10)
    elapsed = time.perf_counter() - t0
    if failures:
        raise UserError(f"{len(failures)} events were not acknowledged by Kafka: {failures[0]}")
    print(
        f"replayed {n:,} events of {len(read.jobs):,} jobs ({read.fmt}) to "
        f"{settings.topics.job_events} at {settings.kafka_bootstrap} in {elapsed:.1f} s "
        f"({n / max(elapsed, 1e-9):,.0f} events/s)",
        file=sys.stderr,
    )
    return 0
