"""The Kubernetes side of the applier: list + watch caches and patches, on the official client.

The ``kubernetes`` package supplies the configuration (kubeconfig or in-cluster service
account), authentication, TLS and the connection pool; requests go out raw and answers
are parsed as plain JSON, because turning 10,000 Jobs into the client's model objects
costs more than the whole applier pass. Each watched kind is one :class:`Reflector`: a
paged list, then a watch from its resourceVersion in a thread, re-listing when the
server says the version is gone (410).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from gpuhint.kueue.errors import Gone as _Gone
from gpuhint.kueue.errors import KubeError
from gpuhint.kueue.objects import (
    QUEUE_NAME_LABEL,
    JobRef,
    WorkloadRef,
    job_ref,
    local_queue_target,
    queue_policy,
    workload_ref,
)
from gpuhint.kueue.policy import (
    MANAGED_BY_LABEL,
    PRIORITY_CLASS_LABEL,
    SERVICE_LABEL,
    ClassLadder,
    QueuePolicy,
    WorkloadView,
)
from gpuhint.kueue.reflector import Reflector

log = logging.getLogger("gpuhint.kueue")

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
PATHS = {
    "workloads": f"{KUEUE_API}/workloads",
    "localqueues": f"{KUEUE_API}/localqueues",
    "clusterqueues": f"{KUEUE_API}/clusterqueues",
    "workloadpriorityclasses": f"{KUEUE_API}/workloadpriorityclasses",
    "jobs": "/apis/batch/v1/jobs",
}


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient``: this kubeconfig, else in-cluster, else ~/.kube/config."""
    import os

    from kubernetes import client, config

    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException as exc:
            raise KubeError(0, f"in-cluster service account: {exc}") from None
        return client.ApiClient(cfg)
    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except config.ConfigException as exc:
        raise KubeError(0, f"kubeconfig {kubeconfig or '~/.kube/config'}: {exc}") from None


class KubeApi:
    """Raw JSON requests through a ``kubernetes.client.ApiClient``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def _call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = 30.0,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        params = self.client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            return self.client.call_api(*params, _request_timeout=timeout)
        except Exception as exc:  # urllib3 / connection errors surface as many types
            raise KubeError(0, f"{method} {path}: {exc}") from None

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        resp = self._call(method, path, **kw)
        try:  # a body cut off (connection reset mid-answer) is an API error, retried
            data = resp.read()
            if resp.status < 400:
                return json.loads(data) if data else {}
        except Exception as exc:
            raise KubeError(0, f"{method} {path}: unreadable answer: {exc}") from None
        try:
            message = str(json.loads(data).get("message", ""))
        except (ValueError, AttributeError):
            message = data[:200].decode(errors="replace")
        raise KubeError(resp.status, f"{method} {path}: {message}")

    def list_all(
        self, path: str, label_selector: str | None = None, page: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object of a collection (paged) and the list's resourceVersion. A continue
        token that expired meanwhile (410) starts the list over, once."""
        items: list[dict[str, Any]] = []
        cont = ""
        restarts = 1
        while True:
            query = [("limit", str(page))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if cont:
                query.append(("continue", cont))
            try:
                doc = self.request("GET", path, query=query)
            except KubeError as exc:
                if not (cont and exc.status == 410 and restarts):
                    raise
                log.info("%s: list continue token expired; listing again", path)
                items, cont, restarts = [], "", restarts - 1
                continue
            items.extend(doc.get("items") or [])
            meta = doc.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                return items, str(meta.get("resourceVersion") or "")

    def watch(
        self, path: str, resource_version: str, label_selector: str | None, timeout_s: int
    ) -> Iterator[dict[str, Any]]:
        from kubernetes.watch.watch import iter_resp_lines

        query = [
            ("watch", "1"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_s)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        resp = self._call("GET", path, query=query, timeout=(10.0, timeout_s + 30.0))
        if resp.status >= 400:
            raise KubeError(resp.status, f"watch {path}: {resp.read()[:200]!r}")
        try:
            for line in iter_resp_lines(resp.response):
                yield json.loads(line)
        except (KubeError, _Gone):
            raise
        except Exception as exc:  # the connection broke (server restart, network)
            raise KubeError(0, f"watch {path}: {exc}") from None
        finally:
            with contextlib.suppress(Exception):
                resp.response.release_conn()


class KubeKueue:
    """Kueue on a real API server: cached Workloads, Jobs, LocalQueues and ClusterQueues."""

    def __init__(self, client: Any) -> None:
        self.api = KubeApi(client)
        self.workloads: Reflector[WorkloadRef] = Reflector(
            self.api, PATHS["workloads"], workload_ref
        )
        # only Jobs that Kueue manages carry a queue name
        self.jobs: Reflector[JobRef] = Reflector(
            self.api, PATHS["jobs"], job_ref, label_selector=QUEUE_NAME_LABEL
        )
        self.local_queues: Reflector[str | None] = Reflector(
            self.api, PATHS["localqueues"], local_queue_target
        )
        self.cluster_queues: Reflector[QueuePolicy] = Reflector(
            self.api, PATHS["clusterqueues"], queue_policy
        )
        # classes this process wrote that the Job cache has not shown yet (watch lag):
        # without it, a pass right after a patch would patch the same Job again. Each
        # with the cached (uid, resourceVersion) it was written over: once the cache
        # shows another (a newer Job, or one re-created), the cache is the truth
        self._written: dict[str, tuple[str, float, tuple[str, str]]] = {}
        self._written_lock = threading.Lock()
        self._reflectors: list[Reflector[Any]] = [
            self.cluster_queues,
            self.local_queues,
            self.jobs,
            self.workloads,
        ]

    # -- cache -------------------------------------------------------------------------
    def sync(self) -> None:
        """List everything once (a one-shot pass); a fresh list is the truth."""
        with self._written_lock:
            self._written.clear()
        for r in self._reflectors:
            r.relist()

    def watch(self, stop: threading.Event) -> None:
        """List, then keep the caches current in background threads."""
        for r in self._reflectors:
            r.start(stop)

    def wait_change(self, timeout_s: float) -> bool:
        """Block until a cached object changes (or the timeout); clear the flag."""
        deadline = time.monotonic() + timeout_s
        while True:
            for r in self._reflectors:
                if r.changed.is_set():
                    for rr in self._reflectors:
                        rr.changed.clear()
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.workloads.changed.wait(min(left, 0.2))

    def queues(self) -> list[QueuePolicy]:
        return self.cluster_queues.snapshot()

    def views(self) -> list[WorkloadView]:
        """Every Workload joined with its Job and its ClusterQueue."""
        with self.local_queues._lock:
            lq = dict(self.local_queues.items)
        with self.jobs._lock:
            jobs = dict(self.jobs.items)
        with self._written_lock:
            now = time.monotonic()
            self._written = {k: v for k, v in self._written.items() if now - v[1] < 60.0}
            written = {k: (c, seen) for k, (c, _t, seen) in self._written.items()}
        out = []
        for w in self.workloads.snapshot():
            job = jobs.get(f"{w.namespace}/{w.job_name}") if w.job_name else None
            if job is not None and w.job_uid and job.uid != w.job_uid:
                job = None  # a Job of the same name, re-created
            job_class = job.priority_class if job else w.class_name
            if job is not None:
                k = f"{job.namespace}/{job.name}"
                wrote, seen = written.get(k, (None, None))
                if wrote is not None:
                    if wrote == job_class or seen != (job.uid, job.resource_version):
                        with self._written_lock:  # the cache has caught up or moved on
                            self._written.pop(k, None)
                    else:
                        job_class = wrote
            cq = w.admitted_queue
            if cq is None and w.queue_name:
                cq = lq.get(f"{w.namespace}/{w.queue_name}")
            out.append(
                WorkloadView(
                    namespace=w.namespace,
                    name=w.name,
                    job_name=job.name if job else None,
                    job_id=job.job_id if job else w.uid,
                    cluster_queue=cq,
                    job_class=job_class,
                    priority=w.priority,
                    pending=w.pending,
                    class_kind=w.class_kind,
                    notes=w.notes,
                    holds_quota=(w.reserved or w.admitted) and not w.finished,
                )
            )
        return out

    # -- writes ------------------------------------------------------------------------
    def ensure_classes(self, ladder: ClassLadder, dry_run: bool = False) -> list[str]:
        """Create (or fix the value of) gpuhint's WorkloadPriorityClasses; names changed."""
        path = PATHS["workloadpriorityclasses"]
        existing = {
            o["metadata"]["name"]: o for o in self.api.list_all(path)[0] if o.get("metadata")
        }
        changed = []
        for c in ladder.all():
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": c.name, "labels": {MANAGED_BY_LABEL: "gpuhint"}},
                "value": c.value,
                "description": "gpuhint QSSF class: higher = smaller expected GPU-seconds",
            }
            old = existing.get(c.name)
            if old is not None and old.get("value") == c.value:
                continue
            changed.append(c.name)
            if dry_run:
                continue
            if old is None:
                self.api.request("POST", path, body=body)
            else:
                self.api.request(
                    "PATCH",
                    f"{path}/{quote(c.name)}",
                    body={"value": c.value},
                    content_type="application/merge-patch+json",
                )
        return changed

    def relabel(self, namespace: str, job: str, class_name: str, service_s: float | None) -> bool:
        """Set a suspended Job's ``kueue.x-k8s.io/priority-class`` (Kueue copies it to the
        Workload). The JSON patch first tests ``spec.suspend == true``: a Job admitted since
        the cache saw it is refused by the server itself. False when refused.
        ``service_s`` None (no hint: the neutral class) labels the service ``unknown``."""
        labels = "/metadata/labels/"
        service = "unknown" if service_s is None else f"{service_s:.0f}"
        ops = [
            {"op": "test", "path": "/spec/suspend", "value": True},
            {"op": "add", "path": labels + _pointer(PRIORITY_CLASS_LABEL), "value": class_name},
            {"op": "add", "path": labels + _pointer(SERVICE_LABEL), "value": service},
        ]
        try:
            self.api.request(
                "PATCH",
                f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs/{quote(job)}",
                body=ops,
                content_type="application/json-patch+json",
            )
        except KubeError as exc:
            if exc.status in (404, 409, 422):  # gone, or no longer suspended
                return False
            raise
        k = f"{namespace}/{job}"
        cached = self.jobs.get(k)
        seen = (cached.uid, cached.resource_version) if cached else ("", "")
        with self._written_lock:
            self._written[k] = (class_name, time.monotonic(), seen)
        return True

    def annotate(self, namespace: str, workload: str, notes: dict[str, str | None]) -> bool:
        """Set (None: remove) annotations of a Workload: a merge patch of its metadata
        only, which Kueue does not act on. False when the Workload is gone."""
        try:
            self.api.request(
                "PATCH",
                f"{KUEUE_API}/namespaces/{quote(namespace)}/workloads/{quote(workload)}",
                body={"metadata": {"annotations": notes}},
                content_type="application/merge-patch+json",
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def unlabel(self, namespace: str, job: str) -> bool:
        """Remove gpuhint's class from a suspended Job (Kueue's default priority again),
        then its expected-service label (a merge patch: no error where it is absent)."""
        labels = "/metadata/labels/"
        ops = [
            {"op": "test", "path": "/spec/suspend", "value": True},
            {"op": "remove", "path": labels + _pointer(PRIORITY_CLASS_LABEL)},
        ]
        path = f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs/{quote(job)}"
        try:
            self.api.request("PATCH", path, body=ops, content_type="application/json-patch+json")
        except KubeError as exc:
            if exc.status in (404, 409, 422):
                return False
            raise
        with contextlib.suppress(KubeError):  # informational only: the class is gone
            self.api.request(
                "PATCH",
                path,
                body={"metadata": {"labels": {SERVICE_LABEL: None}}},
                content_type="application/merge-patch+json",
            )
        return True


def _pointer(label: str) -> str:
    """A label key as a JSON-pointer segment (RFC 6901)."""
    return label.replace("~", "~0").replace("/", "~1")
