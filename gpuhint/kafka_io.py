"""kafka-python plumbing shared by producers (trace replay, node agent) and the worker."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from gpuhint.topics import Topics

log = logging.getLogger(__name__)


class KafkaUnavailable(RuntimeError):
    """The broker cannot be reached; the message names the address."""


@contextlib.contextmanager
def _admin(bootstrap: str, timeout_s: float) -> Iterator[KafkaAdminClient]:
    """An admin client whose Kafka errors become :class:`KafkaUnavailable`."""
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="gpuhint-admin",
            request_timeout_ms=int(timeout_s * 1000),
        )
    except KafkaError as exc:
        raise KafkaUnavailable(f"no Kafka broker answers at {bootstrap} ({exc})") from None
    try:
        yield admin
    except KafkaError as exc:
        raise KafkaUnavailable(f"Kafka at {bootstrap}: {exc}") from None
    finally:
        admin.close()


def ensure_topics(
    bootstrap: str,
    topics: Topics,
    partitions: int,
    timeout_s: float = 30.0,
    replication_factor: int = 1,
) -> None:
    """Create gpuhint's topics if missing, with ``partitions`` partitions each.

    The job-event topic's partition count must equal the worker's (its tables are
    co-partitioned with it), so both read the same ``GPUHINT_PARTITIONS`` setting.
    """
    with _admin(bootstrap, timeout_s) as admin:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(name=t, num_partitions=partitions, replication_factor=replication_factor)
            for t in topics.all()
            if t not in existing
        ]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):  # a concurrent creator won
                admin.create_topics(wanted)
            log.info("created topics %s", ", ".join(t.name for t in wanted))


def make_producer(bootstrap: str, **overrides: Any) -> KafkaProducer:
    """A producer that waits for the broker's ack (acks=all) and batches briefly."""
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": "gpuhint",
        "acks": "all",
        "linger_ms": 5,
        "retries": 5,
        "max_in_flight_requests_per_connection": 1,  # keep per-partition order on retry
    }
    config.update(overrides)
    try:
        return KafkaProducer(**config)
    except KafkaError as exc:
        raise KafkaUnavailable(f"no Kafka broker answers at {bootstrap} ({exc})") from None


def topic_partitions(bootstrap: str, topic: str, timeout_s: float = 30.0) -> int | None:
    """Number of partitions of ``topic``, or None if it does not exist."""
    with _admin(bootstrap, timeout_s) as admin:
        if topic not in set(admin.list_topics()):
            return None
        desc = admin.describe_topics([topic])
        return len(desc[0]["partitions"])
