"""kafka-python plumbing shared by producers (trace replay, node agent) and the worker.

Every Kafka client in the project takes its transport security from the settings
(:func:`kafka_client_config` for kafka-python, :func:`aiokafka_client_config` for
aiokafka, :func:`faust_credentials` for the Faust worker): TLS with a CA bundle (and
optionally a client certificate), SASL PLAIN or SCRAM-SHA-256/512, the password a
:class:`~pydantic.SecretStr` until the client gets it.

>>> from gpuhint.config import load_settings
>>> kafka_client_config(load_settings())
{'security_protocol': 'PLAINTEXT'}
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from gpuhint.topics import Topics

if TYPE_CHECKING:
    from gpuhint.config import Settings

log = logging.getLogger(__name__)


class KafkaUnavailable(RuntimeError):
    """The broker cannot be reached; the message names the address."""


class TopicMismatch(RuntimeError):
    """An existing topic has the wrong number of partitions; the message says which."""


def kafka_client_config(settings: Settings) -> dict[str, Any]:
    """kafka-python keyword arguments for the configured security (secrets revealed here)."""
    config: dict[str, Any] = {"security_protocol": settings.kafka_security_protocol}
    if settings.kafka_security_protocol.startswith("SASL_"):
        assert settings.kafka_sasl_password is not None  # checked by Settings
        config.update(
            sasl_mechanism=settings.kafka_sasl_mechanism,
            sasl_plain_username=settings.kafka_sasl_username,
            sasl_plain_password=settings.kafka_sasl_password.get_secret_value(),
        )
    if settings.kafka_security_protocol.endswith("SSL"):
        config["ssl_check_hostname"] = settings.kafka_ssl_check_hostname
        if settings.kafka_ssl_cafile is not None:
            config["ssl_cafile"] = str(settings.kafka_ssl_cafile)
        if settings.kafka_ssl_certfile is not None:
            config["ssl_certfile"] = str(settings.kafka_ssl_certfile)
            config["ssl_keyfile"] = str(settings.kafka_ssl_keyfile)
    return config


def aiokafka_client_config(settings: Settings) -> dict[str, Any]:
    """The same security options in aiokafka's terms (its TLS is an ``ssl_context``)."""
    config = {k: v for k, v in kafka_client_config(settings).items() if not k.startswith("ssl_")}
    ctx = ssl_context(settings)
    if ctx is not None:
        config["ssl_context"] = ctx
    return config


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """A verifying TLS context for the configured CA/client certificate, or None without TLS."""
    if not settings.kafka_security_protocol.endswith("SSL"):
        return None
    cafile = str(settings.kafka_ssl_cafile) if settings.kafka_ssl_cafile else None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    ctx.check_hostname = settings.kafka_ssl_check_hostname
    if settings.kafka_ssl_certfile is not None:
        ctx.load_cert_chain(str(settings.kafka_ssl_certfile), str(settings.kafka_ssl_keyfile))
    return ctx


def faust_credentials(settings: Settings) -> Any:
    """Faust's ``broker_credentials`` for the configured security (None for PLAINTEXT)."""
    import faust

    proto = settings.kafka_security_protocol
    if proto == "PLAINTEXT":
        return None
    ctx = ssl_context(settings)
    if proto == "SSL":
        return faust.SSLCredentials(ctx)
    assert settings.kafka_sasl_password is not None  # checked by Settings
    creds = faust.SASLCredentials(
        username=settings.kafka_sasl_username,
        password=settings.kafka_sasl_password.get_secret_value(),
        ssl_context=ctx,
        mechanism=settings.kafka_sasl_mechanism,
    )
    return creds


@contextlib.contextmanager
def _admin(
    bootstrap: str, timeout_s: float, security: Mapping[str, Any] | None = None
) -> Iterator[KafkaAdminClient]:
    """An admin client whose Kafka errors become :class:`KafkaUnavailable`."""
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="gpuhint-admin",
            request_timeout_ms=int(timeout_s * 1000),
            **(security or {}),
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
    security: Mapping[str, Any] | None = None,
    check: tuple[str, ...] = (),
) -> None:
    """Create gpuhint's topics if missing, with ``partitions`` partitions each.

    The job-event topic's partition count must equal the worker's (its tables are
    co-partitioned with it), so both read the same ``GPUHINT_PARTITIONS`` setting.
    Topics named in ``check`` that already exist with another partition count raise
    :class:`TopicMismatch` (nothing has been consumed yet).
    """
    with _admin(bootstrap, timeout_s, security) as admin:
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
        present = [t for t in check if t in existing]
        if present:
            for desc in admin.describe_topics(present):
                found = len(desc["partitions"])
                if found != partitions:
                    raise TopicMismatch(
                        f"topic {desc.get('topic') or desc.get('name')} has {found} partitions "
                        f"but GPUHINT_PARTITIONS="
                        f"{partitions}: the worker's tables must be co-partitioned with it; "
                        "set GPUHINT_PARTITIONS to match"
                    )


def make_producer(
    bootstrap: str, security: Mapping[str, Any] | None = None, **overrides: Any
) -> KafkaProducer:
    """A producer that waits for the broker's ack (acks=all) and batches briefly."""
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": "gpuhint",
        "acks": "all",
        "linger_ms": 5,
        "retries": 5,
        "max_in_flight_requests_per_connection": 1,  # keep per-partition order on retry
        **(security or {}),
    }
    config.update(overrides)
    try:
        return KafkaProducer(**config)
    except KafkaError as exc:
        raise KafkaUnavailable(f"no Kafka broker answers at {bootstrap} ({exc})") from None


def topic_partitions(
    bootstrap: str, topic: str, timeout_s: float = 30.0, security: Mapping[str, Any] | None = None
) -> int | None:
    """Number of partitions of ``topic``, or None if it does not exist."""
    with _admin(bootstrap, timeout_s, security) as admin:
        if topic not in set(admin.list_topics()):
            return None
        desc = admin.describe_topics([topic])
        return len(desc[0]["partitions"])
