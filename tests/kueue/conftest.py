"""Kubernetes fixtures: a real API server with Kueue, found like Kafka and Redis.

``GPUHINT_TEST_KUBECONFIG`` names a kubeconfig of an existing cluster with Kueue; else
the project's launcher (gpuhint/lab/local/k8s.py) starts etcd + kube-apiserver + Kueue on
loopback, building them first if the cache is empty (scripts/k8s/build.sh). A cluster
that cannot start FAILS the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuhint.kueue.kube import KubeApi, api_client
from gpuhint.lab.local.k8s import KueueEnv, kubernetes_service
from gpuhint.lab.local.services import ServiceError


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    try:
        cm = kubernetes_service()
        path, how = cm.__enter__()
    except ServiceError as exc:
        pytest.fail(f"Kubernetes + Kueue could not be started: {exc}", pytrace=False)
    print(f"\n[Kubernetes] {how}")
    try:
        yield path
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture(scope="session")
def kube(kubeconfig: str) -> KubeApi:
    return KubeApi(api_client(kubeconfig))


@pytest.fixture
def kueue_env(kube: KubeApi) -> Iterator[Callable[..., KueueEnv]]:
    made: list[KueueEnv] = []

    def make(**kw: Any) -> KueueEnv:
        env = KueueEnv(kube, **kw)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()
