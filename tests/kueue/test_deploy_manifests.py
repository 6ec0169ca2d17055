"""deploy/k8s/ on the real API server: every object validates (strict), and the applier's
RBAC is enough for a real pass under its own ServiceAccount token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from gpuhint.kueue.kube import KubeApi, KubeError, api_client
from gpuhint.kueue.policy import PRIORITY_CLASS_LABEL
from gpuhint.lab.local.k8s import KueueEnv, wait_for
from gpuhint.redis.store import RedisStore
from gpuhint.wire.contract import PriorityHint
from gpuhint.wire.keys import RedisKeys

pytestmark = pytest.mark.integration
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
NS = "gpuhint"
PLURAL = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Secret": ("/api/v1", "secrets", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
}


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


def _path(doc: dict[str, Any]) -> str:
    base, plural, namespaced = PLURAL[doc["kind"]]
    return f"{base}/namespaces/{NS}/{plural}" if namespaced else f"{base}/{plural}"


def _ensure_namespace(kube: KubeApi) -> None:
    try:
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
    except KubeError as exc:
        if exc.status != 409:
            raise


def test_every_manifest_validates_strictly(kube: KubeApi) -> None:
    _ensure_namespace(kube)
    docs = _docs()
    assert {d["kind"] for _, d in docs} >= {"Deployment", "DaemonSet", "ClusterRole"}
    for name, doc in docs:
        try:  # unknown or misspelt fields fail too
            kube.request(
                "POST",
                _path(doc),
                body=doc,
                query=[("dryRun", "All"), ("fieldValidation", "Strict")],
            )
        except KubeError as exc:
            pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']}: {exc}")


def test_the_applier_works_with_exactly_its_rbac(
    kube: KubeApi,
    kueue_env: Callable[..., KueueEnv],
    kubeconfig: str,
    redis_url: str,
    unique_prefix: str,
) -> None:
    _ensure_namespace(kube)
    for _name, doc in _docs():
        if doc["metadata"]["name"] != "gpuhint-kueue-applier" or doc["kind"] not in (
            "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
        ):  # fmt: skip
            continue
        try:
            kube.request("POST", _path(doc), body=doc)
        except KubeError as exc:
            if exc.status != 409:
                raise
    token = kube.request(
        "POST",
        f"/api/v1/namespaces/{NS}/serviceaccounts/gpuhint-kueue-applier/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 600}},
    )["status"]["token"]  # fmt: skip
    admin = yaml.safe_load(Path(kubeconfig).read_text())
    admin["users"][0]["user"] = {"token": token}
    sa_config = Path(kubeconfig).with_name(f"sa-{unique_prefix}.kubeconfig")
    sa_config.write_text(json.dumps(admin))

    env = kueue_env(gpus=8, hold=True)
    env.job("small", gpus=8, job_id=f"{env.id}-small")
    wait_for("its Workload", lambda: len(env.workloads()) == 1)
    store = RedisStore(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix))
    store.put_hint(
        PriorityHint(job_id=f"{env.id}-small", cluster="k8s", vc=env.cq, num_gpus=8,
                     submit_time=time.time(), predicted_duration_s=60, priority=480,
                     model="test", model_version="1", created_at=time.time())
    )  # fmt: skip
    store.flush()
    store.close()
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhint", "kueue", "apply-priorities", "--once", "--json",
         "--kubeconfig", str(sa_config), "--cluster", "k8s"],
        env={**os.environ, "GPUHINT_REDIS_URL": redis_url, "GPUHINT_KEY_PREFIX": unique_prefix},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["relabelled"] >= 1 and report["errors"] == 0, report
    labels = env.get_job("small")["metadata"]["labels"]
    assert labels[PRIORITY_CLASS_LABEL] == "gpuhint-09"
    # and nothing beyond its role: it cannot, say, delete a Job
    sa = KubeApi(api_client(str(sa_config)))
    with pytest.raises(KubeError) as denied:
        sa.request("DELETE", f"/apis/batch/v1/namespaces/{env.ns}/jobs/small")
    assert denied.value.status == 403
