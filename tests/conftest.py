"""Session fixtures for the real services.

Each service is found in this order: an address in an env var
(``GPUHINT_TEST_KAFKA_BOOTSTRAP``, ``GPUHINT_TEST_REDIS_URL``, ``GPUHINT_TEST_SLURM``,
``GPUHINT_TEST_KUBECONFIG``), testcontainers when a Docker daemon answers (Kafka, Redis),
else a local launcher (Kafka 4.1 KRaft from Maven Central's jars; Debian's redis-server;
Debian's Slurm 22.05 with slurmdbd; etcd + kube-apiserver + Kueue built with Go,
gpuhint/lab/local/k8s.py). A service that cannot start FAILS the tests that need it,
with the reason: integration tests are never silently skipped.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuhint.kueue.kube import KubeApi, api_client
from gpuhint.lab.local.k8s import KueueEnv, kubernetes_service
from gpuhint.lab.local.services import ServiceError, kafka_service, redis_service
from gpuhint.lab.local.slurm import slurm_service
from gpuhint.lab.local.slurm_tidy import describe, reset


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


@pytest.fixture(scope="session")
def slurm_conf() -> Iterator[str]:
    """A real Slurm cluster (4 nodes x 8 GPUs, sched/builtin, slurmdbd): its slurm.conf path.

    ``GPUHINT_TEST_SLURM`` names the slurm.conf of a running cluster, else the project's
    launcher (gpuhint/lab/local/slurm.py) starts one for the session.
    """
    with _started(slurm_service, "Slurm") as address:
        yield address


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    """A real API server with Kueue: its kubeconfig path."""
    with _started(kubernetes_service, "Kubernetes + Kueue") as path:
        yield path


@pytest.fixture(scope="session")
def kube(kubeconfig: str) -> KubeApi:
    return KubeApi(api_client(kubeconfig))


@pytest.fixture
def kueue_env(kube: KubeApi) -> Iterator[Callable[..., KueueEnv]]:
    """Makes Kueue test environments (a ClusterQueue, a LocalQueue, Jobs); all are
    removed after the test."""
    made: list[KueueEnv] = []

    def make(**kw: Any) -> KueueEnv:
        env = KueueEnv(kube, **kw)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


@pytest.fixture(autouse=True)
def _slurm_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests share one Slurm cluster: after each one that used it, cancel its jobs and bring
    every node back to idle, so that one failure never fails the next test as well."""
    yield
    if "slurm_conf" not in request.fixturenames:
        return
    problem = reset(request.getfixturevalue("slurm_conf"))
    if problem:
        pytest.fail(f"after {request.node.name}: {problem}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A failed test that used Slurm reports the cluster's jobs, nodes and logs."""
    report = yield
    if report.failed and call.when == "call" and "slurm_conf" in getattr(item, "fixturenames", ()):
        conf = item.funcargs.get("slurm_conf")  # type: ignore[attr-defined]
        if conf:
            report.sections.append(("Slurm at the failure", describe(conf)))
    return report


@pytest.fixture
def unique_prefix() -> str:
    """A topic / key prefix of its own for each test, so tests never see each other's data."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def gpuhint_env(
    kafka_bootstrap: str, redis_url: str, unique_prefix: str, tmp_path: Path
) -> Callable[..., dict[str, str]]:
    """Environment for a ``gpuhint`` subprocess on the real services, isolated by prefix.

    Call it with extra ``GPUHINT_*`` settings: ``gpuhint_env(GPUHINT_MODEL="history")``.
    """

    def make(**overrides: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            GPUHINT_KAFKA_BOOTSTRAP=kafka_bootstrap,
            GPUHINT_REDIS_URL=redis_url,
            GPUHINT_TOPIC_PREFIX=unique_prefix,
            GPUHINT_KEY_PREFIX=unique_prefix,
            GPUHINT_APP_ID=f"{unique_prefix}-worker",
            GPUHINT_PARTITIONS="4",
            GPUHINT_STATE_DIR=str(tmp_path / "state"),
            PYTHONUNBUFFERED="1",
        )
        env.update(overrides)
        return env

    return make
