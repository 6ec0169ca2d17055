"""A Kueue playground for tests: a namespace, its LocalQueue and a ClusterQueue of its own.

Made against the API server of :class:`~gpuhint.lab.local.k8s.LocalKubernetes` (any
client with ``request(method, path, body=..., content_type=...)``).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"


def wait_for(what: str, cond: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.25)


class KueueEnv:
    """A namespace, a LocalQueue ``lq`` and a ClusterQueue of ``gpus`` GPUs of its own."""

    def __init__(self, kube: Any, gpus: int = 16, hold: bool = True, **cq_spec: Any) -> None:
        self.kube = kube
        self.id = uuid.uuid4().hex[:8]
        self.ns = f"t-{self.id}"
        self.cq = f"cq-{self.id}"
        self.flavor = f"rf-{self.id}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": self.ns}})
        kube.request(
            "POST",
            f"{KUEUE_API}/resourceflavors",
            body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                  "metadata": {"name": self.flavor}},
        )  # fmt: skip
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": self.flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "1000"},
                                {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                            ],
                        }
                    ],
                }
            ],
            **cq_spec,
        }
        if hold:
            spec["stopPolicy"] = "Hold"
        kube.request(
            "POST",
            f"{KUEUE_API}/clusterqueues",
            body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                  "metadata": {"name": self.cq}, "spec": spec},
        )  # fmt: skip
        kube.request(
            "POST",
            f"{KUEUE_API}/namespaces/{self.ns}/localqueues",
            body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                  "metadata": {"name": "lq", "namespace": self.ns},
                  "spec": {"clusterQueue": self.cq}},
        )  # fmt: skip

    def release(self) -> None:
        """Let Kueue admit (drop the ClusterQueue's Hold)."""
        self.kube.request(
            "PATCH",
            f"{KUEUE_API}/clusterqueues/{self.cq}",
            body={"spec": {"stopPolicy": "None"}},
            content_type="application/merge-patch+json",
        )

    def job(self, name: str, gpus: int = 8, job_id: str | None = None, **labels: str) -> str:
        meta_labels = {"kueue.x-k8s.io/queue-name": "lq", **labels}
        if job_id:
            meta_labels["gpuhint.io/job-id"] = job_id
        doc = self.kube.request(
            "POST",
            f"/apis/batch/v1/namespaces/{self.ns}/jobs",
            body={
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name, "labels": meta_labels},
                "spec": {
                    "suspend": True,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "command": ["sleep", "30"],
                                    "resources": {
                                        "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                                        "limits": {"nvidia.com/gpu": str(gpus)},
                                    },
                                }
                            ],
                        }
                    },
                },
            },
        )
        return str(doc["metadata"]["uid"])

    def get_job(self, name: str) -> dict[str, Any]:
        return self.kube.request("GET", f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}")

    def workloads(self) -> dict[str, dict[str, Any]]:
        """Workloads by their Job's name."""
        items = self.kube.request("GET", f"{KUEUE_API}/namespaces/{self.ns}/workloads")["items"]
        out = {}
        for w in items:
            for o in w["metadata"].get("ownerReferences") or []:
                if o.get("kind") == "Job":
                    out[o["name"]] = w
        return out

    def admitted(self) -> set[str]:
        return {
            job
            for job, w in self.workloads().items()
            if any(
                c["type"] == "Admitted" and c["status"] == "True"
                for c in (w.get("status") or {}).get("conditions") or []
            )
        }

    def finish(self, name: str) -> None:
        """No garbage collector here: delete the Job and its Workload (its quota frees)."""
        wl = self.workloads()[name]["metadata"]["name"]
        self.kube.request("DELETE", f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}")
        try:
            self.kube.request("DELETE", f"{KUEUE_API}/namespaces/{self.ns}/workloads/{wl}")
        except Exception as exc:  # KubeError; 404: Kueue deleted it already
            if getattr(exc, "status", 0) != 404:
                raise

    def close(self) -> None:
        for path in (
            f"{KUEUE_API}/clusterqueues/{self.cq}",
            f"{KUEUE_API}/resourceflavors/{self.flavor}",
        ):
            with contextlib.suppress(Exception):  # already gone
                self.kube.request("DELETE", path)
