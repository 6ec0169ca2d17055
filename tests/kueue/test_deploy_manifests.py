"""deploy/k8s/ on the real API server: every object validates (strict), as shipped and as
the kustomization renders it with another image; every pod has probes and a metrics port;
and the applier's RBAC is enough for a real pass under its own ServiceAccount token."""

from __future__ import annotations

import json
import os
import shutil
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
from gpuhint.redis.applier_status import read_passes
from gpuhint.redis.store import RedisStore
from gpuhint.wire.contract import ExpectedStart, PriorityHint, StartForecasts
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
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


def _render_in_python(root: Path) -> list[dict[str, Any]]:
    """What ``kustomize build`` makes of our kustomization (resources, namespace, labels,
    images); used only when kubectl is not installed."""
    kust = yaml.safe_load((root / "kustomization.yaml").read_text())
    images = {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in kust["images"]}
    labels = {k: v for lab in kust.get("labels", []) for k, v in lab["pairs"].items()}
    out = []
    for res in kust["resources"]:
        for doc in yaml.safe_load_all((root / res).read_text()):
            if not doc:
                continue
            doc["metadata"].setdefault("labels", {}).update(labels)
            if PLURAL[doc["kind"]][2]:
                doc["metadata"]["namespace"] = kust["namespace"]
            for sub in doc.get("subjects", []):
                sub["namespace"] = kust["namespace"]
            for c in _containers(doc, init=True):
                name = c["image"].rsplit(":", 1)[0]
                c["image"] = images.get(name, c["image"])
            out.append(doc)
    return out


def _render(root: Path) -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        return _render_in_python(root)
    proc = subprocess.run(
        ["kubectl", "kustomize", str(root)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _containers(doc: dict[str, Any], init: bool = False) -> list[dict[str, Any]]:
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    return list(pod.get("containers", [])) + (list(pod.get("initContainers", [])) if init else [])


def _with_image(tmp_path: Path, image: str) -> Path:
    """A copy of deploy/k8s whose kustomization names ``image`` (as `kustomize edit set
    image` would)."""
    root = tmp_path / "k8s"
    shutil.copytree(DEPLOY, root)
    kust = yaml.safe_load((root / "kustomization.yaml").read_text())
    name, tag = image.rsplit(":", 1)
    kust["images"] = [{"name": "gpuhint", "newName": name, "newTag": tag}]
    (root / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    return root


def test_the_kustomization_sets_the_image_of_every_gpuhint_container(tmp_path: Path) -> None:
    image = "registry.example.com/team/gpuhint:1.2.3"
    docs = _render(_with_image(tmp_path, image))
    shipped = {(d["kind"], d["metadata"]["name"]) for _, d in _docs()}
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == shipped
    workloads = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]
    assert len(workloads) == 4
    for doc in workloads:
        assert doc["metadata"]["namespace"] == NS
        for c in _containers(doc):
            assert c["image"] == image, (doc["metadata"]["name"], c["image"])
    plain = _render(DEPLOY)  # as shipped: the image every manifest names
    assert {c["image"] for d in plain for c in _containers(d)} == {"gpuhint:latest"}


def test_every_pod_has_probes_on_its_metrics_port() -> None:
    docs = _render(DEPLOY)
    config = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    for doc in docs:
        for c in _containers(doc):
            where = f"{doc['kind']} {doc['metadata']['name']}"
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            assert "metrics" in ports, where
            for probe in ("readinessProbe", "livenessProbe"):
                assert c[probe]["httpGet"]["port"] == "metrics", (where, probe)
            assert c["readinessProbe"]["httpGet"]["path"] == "/healthz", where
            served = {
                config[ref["configMapRef"]["name"]].get("GPUHINT_METRICS_PORT")
                for ref in c.get("envFrom", [])
                if "configMapRef" in ref
            } - {None}
            assert served == {str(ports["metrics"])}, (where, served, ports)


def test_the_redis_secret_stands_alone() -> None:
    """Each Secret a pod needs (not marked optional) is defined in its own file."""
    by_file: dict[str, set[str]] = {}
    for name, doc in _docs():
        if doc["kind"] == "Secret":
            by_file.setdefault(doc["metadata"]["name"], set()).add(name)
    assert by_file["gpuhint-redis"] == {"secret.yaml"}
    for name, doc in _docs():
        for c in _containers(doc):
            for ref in c.get("envFrom", []):
                sec = ref.get("secretRef")
                if sec and not sec.get("optional"):
                    assert sec["name"] in by_file, (name, sec)


def test_the_rendered_kustomization_validates_strictly(kube: KubeApi, tmp_path: Path) -> None:
    _ensure_namespace(kube)
    for doc in _render(_with_image(tmp_path, "registry.example.com/gpuhint:0.1.0")):
        try:
            kube.request(
                "POST",
                _path(doc),
                body=doc,
                query=[("dryRun", "All"), ("fieldValidation", "Strict")],
            )
        except KubeError as exc:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {exc}")


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
    now = time.time()
    store.put_starts(
        StartForecasts(cluster="k8s", vc=env.cq, time=now, jobs=(
            ExpectedStart(job_id=f"{env.id}-small", expected=now + 60, low=now, high=now + 600),
        ))
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
    assert report["starts_annotated"] >= 1, report  # patch on Workloads: in its role
    notes = env.workloads()["small"]["metadata"]["annotations"]
    assert notes["gpuhint.io/expected-start"].endswith("Z")
    record = read_passes(redis.Redis.from_url(redis_url), RedisKeys(unique_prefix), "k8s")
    assert record["kueue"]["ok"] is True and record["kueue"]["result"]["relabelled"] >= 1
    # and nothing beyond its role: it cannot, say, delete a Job
    sa = KubeApi(api_client(str(sa_config)))
    with pytest.raises(KubeError) as denied:
        sa.request("DELETE", f"/apis/batch/v1/namespaces/{env.ns}/jobs/small")
    assert denied.value.status == 403


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="compares with kubectl kustomize")
def test_the_python_rendering_agrees_with_kustomize(tmp_path: Path) -> None:
    root = _with_image(tmp_path, "registry.example.com/gpuhint:9")

    def summary(docs: list[dict[str, Any]]) -> set[tuple[str, ...]]:
        return {
            (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", ""), c["image"])
            for d in docs
            for c in _containers(d, init=True) or [{"image": ""}]
        }

    assert summary(_render_in_python(root)) == summary(_render(root))
