"""Session fixtures for the real services.

Each service is found in this order: an address in an env var
(``GPUHINT_TEST_KAFKA_BOOTSTRAP``, ``GPUHINT_TEST_REDIS_URL``), testcontainers when a
Docker daemon answers, else a local launcher (Kafka 4.1 KRaft from Maven Central's
jars; Debian's redis-server). A service that cannot start FAILS the tests that need
it, with the reason: integration tests are never silently skipped.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest

from gpuhint.testing.services import ServiceError, kafka_service, redis_service


@contextlib.contextmanager
def _started(factory, what: str) -> Iterator[str]:  # type: ignore[no-untyped-def]
    try:
        cm = factory()
        address, how = cm.__enter__()
    except ServiceError as exc:
        pytest.fail(f"{what} could not be started: {exc}", pytrace=False)
    print(f"\n[{what}] {how}")
    try:
        yield address
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A real Kafka broker, ``HOST:PORT``."""
    with _started(kafka_service, "Kafka") as address:
        yield address


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis server, ``redis://HOST:PORT/0``."""
    with _started(redis_service, "Redis") as address:
        yield address


@pytest.fixture
def unique_prefix() -> str:
    """A topic / key prefix of its own for each test, so tests never see each other's data."""
    return f"t{uuid.uuid4().hex[:10]}"
