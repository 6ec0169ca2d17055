"""``gpuhint worker``: the Faust stream processor (job events -> hints in Redis)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from gpuhint.cli.common import UserError, add_config_args, redis_store, settings_from

if TYPE_CHECKING:
    from gpuhint.metrics.store import MeteredRedisStore
    from gpuhint.wire.config import Settings
    from streams.app import Worker

log = logging.getLogger("gpuhint.worker")

DESCRIPTION = """\
Consumes job events from Kafka and writes a QSSF priority hint for every pending job
to Redis (removed when the job starts or finishes); consumes node status and writes
cluster load and CES power advisories. Malformed messages go to the dead-letter topic
with the reason; the count is in Redis (HGET <prefix>:v1:stats dead_letter).

State: each (cluster, VC) has its own model and queue state in a changelog-backed
Faust table, co-partitioned with the job events, so any number of workers with the same
app id share the partitions and give the same hints as one (docs/architecture.md).
If Redis fails, the worker holds its offsets and retries (consumption pauses); if Redis
comes back empty, it rewrites the pending hints. Killed, a replacement resumes where
the last commit stopped; redelivered events change no state.

settings (flags override GPUHINT_* env vars, which override --config FILE):
  --bootstrap / GPUHINT_KAFKA_BOOTSTRAP   Kafka, HOST:PORT[,HOST:PORT]
  --redis-url / GPUHINT_REDIS_URL         redis://[:password@]HOST:PORT/DB
  GPUHINT_PARTITIONS (8), GPUHINT_TOPIC_PREFIX, GPUHINT_KEY_PREFIX, GPUHINT_HINT_TTL_S,
  GPUHINT_MODEL (history_mix), GPUHINT_APP_ID, GPUHINT_STATE_DIR,
  GPUHINT_WORKER_SESSION_TIMEOUT_S (6), GPUHINT_WORKER_HEARTBEAT_S (1),
  GPUHINT_WORKER_INSTANCE_ID (static membership), GPUHINT_KAFKA_RETRY_S (300: wait this
  long for an unreachable broker at start, one log line, then exit 2). See
  docs/configuration.md.
  --metrics-port / GPUHINT_METRICS_PORT   Prometheus /metrics and /healthz (docs/metrics.md)

examples:
  gpuhint worker --bootstrap localhost:9092 --redis-url redis://localhost:6379/0
  GPUHINT_PARTITIONS=16 gpuhint worker --config gpuhint.toml --metrics-port 9400
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "worker",
        help="run the Faust stream processor (Kafka -> models -> Redis)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--redis-url", metavar="URL", help="Redis URL")
    p.add_argument("--model", help="duration model (else GPUHINT_MODEL, default history_mix)")
    p.add_argument(
        "--loglevel",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="Faust's own log level (default: info; gpuhint's: -v or GPUHINT_LOG_LEVEL)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve /metrics and /healthz on PORT (else GPUHINT_METRICS_PORT; unset: off)",
    )
    add_config_args(p)
    p.set_defaults(handler=run)


@contextlib.contextmanager
def quiet_kafka_python() -> Iterator[None]:
    """kafka-python logs every failed connection; our own lines say it, once."""
    loggers = [logging.getLogger(n) for n in ("kafka", "kafka.conn", "kafka.client")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def with_kafka_retry(
    attempt: Callable[[float], None],
    bootstrap: str,
    retry_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    log_every_s: float = 30.0,
) -> None:
    """Run ``attempt(timeout_s)`` until it stops raising ``KafkaUnavailable``, for at most
    ``retry_s`` in all (each try's timeout is cut to what is left), as ``gpuhint replay``
    rides out a broker outage: one warning when the broker is first missed, one every
    ``log_every_s`` after, backoff doubling from 1 s to 10 s; past ``retry_s`` the last
    ``KafkaUnavailable`` is raised, saying how long it waited. A security mismatch is
    raised at once (retrying will not fix it)."""
    from streams.kafka_io import KafkaSecurityMismatch, KafkaUnavailable

    start = clock()
    backoff, last_log, tries = 0.0, start, 0
    while True:
        left = retry_s - (clock() - start)
        try:
            with quiet_kafka_python():
                attempt(max(1.0, min(10.0, left)))
        except KafkaSecurityMismatch:
            raise
        except KafkaUnavailable as exc:
            tries += 1
            now = clock()
            waited = now - start
            if waited >= retry_s:
                raise KafkaUnavailable(
                    f"no Kafka broker answered at {bootstrap} within {retry_s:g} s "
                    f"(GPUHINT_KAFKA_RETRY_S; {tries} tries; last: {exc})"
                ) from None
            if tries == 1:
                log.warning(
                    "Kafka at %s unreachable (%s); retrying for up to %g s", bootstrap, exc, retry_s
                )
            elif now - last_log >= log_every_s:
                last_log = now
                log.warning("Kafka at %s still unreachable after %.0f s", bootstrap, waited)
            backoff = min(10.0, backoff * 2 if backoff else 1.0)
            sleep(max(0.0, min(backoff, retry_s - waited)))
            continue
        if tries:
            log.warning("Kafka at %s answered after %.0f s", bootstrap, clock() - start)
        return


def run(args: argparse.Namespace) -> int:
    import faust

    from models.registry import DURATION_MODELS
    from streams.app import build_app

    settings = settings_from(
        args,
        kafka_bootstrap=args.bootstrap,
        redis_url=args.redis_url,
        model=args.model,
        metrics_port=args.metrics_port,
    )
    if settings.model not in DURATION_MODELS:
        raise UserError(
            f"unknown model {settings.model!r}; choose one of {', '.join(sorted(DURATION_MODELS))}"
        )
    store = redis_store(settings)
    _ensure_topics(settings)
    try:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"state directory {settings.state_dir}: {exc.strerror}") from None
    handle = build_app(settings, store)
    if settings.metrics_port is not None:
        _serve_metrics(settings, handle, store)
    logging.getLogger("gpuhint").info(
        "worker %s: kafka %s, model %s, %d partitions",
        settings.app_id,
        settings.kafka_bootstrap,
        settings.model,
        settings.partitions,
    )
    import aiokafka  # noqa: F401 - its loggers exist now, so they can be rate-limited

    from gpuhint.wire.logs import rate_limit

    rate_limit()  # a dead broker: one line per message kind every 30 s, not ~110/s
    worker = faust.Worker(handle.app, loglevel=args.loglevel.upper(), quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        try:
            store.close()
        except Exception as exc:  # e.g. Redis gone: say so once, do not mask the exit
            logging.getLogger("gpuhint").error("shutdown: %s: %s", type(exc).__name__, exc)
    return 0


def _ensure_topics(settings: Settings) -> None:
    """Create the topics (never left to broker auto-creation) or refuse, before consuming;
    Kafka is waited for up to ``kafka_retry_s``."""
    from streams.faust_io import changelog_topics
    from streams.kafka_io import (
        KafkaSecurityMismatch,
        KafkaUnavailable,
        TopicMismatch,
        ensure_topics,
        kafka_client_config,
        start_kafka_hint,
    )

    try:
        with_kafka_retry(
            lambda timeout_s: ensure_topics(
                settings.kafka_bootstrap,
                settings.topics,
                settings.partitions,
                timeout_s=timeout_s,
                replication_factor=settings.replication_factor,
                security=kafka_client_config(settings),
                check=(
                    settings.topics.job_events,
                    settings.topics.cluster_telemetry,
                    *changelog_topics(settings),  # left over from another GPUHINT_PARTITIONS?
                ),
            ),
            settings.kafka_bootstrap,
            settings.kafka_retry_s,
        )
    except KafkaSecurityMismatch as exc:
        raise UserError(str(exc)) from None
    except KafkaUnavailable as exc:
        raise UserError(f"{exc} ({start_kafka_hint()})") from None
    except TopicMismatch as exc:
        raise UserError(str(exc)) from None


def _serve_metrics(settings: Settings, handle: Worker, store: MeteredRedisStore) -> None:
    """Serve /metrics and /healthz on ``metrics_host:metrics_port`` (a port taken is a
    user's mistake)."""
    from gpuhint.metrics.worker import start_worker_metrics

    assert settings.metrics_port is not None
    try:
        metrics = start_worker_metrics(
            handle, store, settings.key_prefix, settings.metrics_host, settings.metrics_port
        )
    except OSError as exc:
        raise UserError(
            f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port}: "
            f"{exc.strerror or exc}"
        ) from None
    logging.getLogger("gpuhint").info(
        "metrics on http://%s:%d/metrics, health on /healthz", metrics.host, metrics.port
    )
