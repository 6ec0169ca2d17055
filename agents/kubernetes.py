"""Kubernetes -> JobEvents: pods that request ``nvidia.com/gpu``.

Reads the pod list JSON as the API server returns it (``kubectl get pods -A -o json``,
a ``PodList`` with ``items``) from a command or a file, no client library needed. One
pod is one job: ``job_id`` is ``namespace/name``, the VC is the namespace, the GPUs are
``max(sum over containers, max over init containers)`` of the ``nvidia.com/gpu``
limit (else request). Phases map as::

    Pending -> submitted      Running -> started
    Succeeded -> finished COMPLETED
    Failed -> finished FAILED (TIMEOUT for DeadlineExceeded, CANCELLED for Evicted /
              Preempting / Shutdown)

A pod deleted while running (it vanishes from the list) is reported finished
CANCELLED. Pods in phase ``Unknown`` keep their last step.

>>> pod = {"metadata": {"name": "p", "namespace": "ml",
...        "creationTimestamp": "2024-05-01T10:00:00Z"},
...        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
...        "status": {"phase": "Pending"}}
>>> parse_pods({"items": [pod]})[0].num_gpus
2
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from agents.scheduler import SchedJob, SchedulerError
from gpuhint.contract import JobState

GPU_RESOURCE = "nvidia.com/gpu"
KUBECTL_CMD = ("kubectl", "get", "pods", "--all-namespaces", "-o", "json")

_FAILED_REASON = {
    "DeadlineExceeded": JobState.TIMEOUT,
    "Evicted": JobState.CANCELLED,
    "Preempting": JobState.CANCELLED,
    "Shutdown": JobState.CANCELLED,
    "NodeShutdown": JobState.CANCELLED,
    "Terminated": JobState.CANCELLED,
}


def _ts(s: Any) -> float | None:
    if not isinstance(s, str) or not s:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _qty(v: Any) -> int:
    """An extended-resource quantity (always an integer for GPUs: ``"2"`` or ``2``)."""
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return 0


def pod_gpus(spec: dict[str, Any], resource: str = GPU_RESOURCE) -> int:
    def one(c: dict[str, Any]) -> int:
        res = c.get("resources") or {}
        lim = (res.get("limits") or {}).get(resource)
        req = (res.get("requests") or {}).get(resource)
        return _qty(lim if lim is not None else req)

    main = sum(one(c) for c in spec.get("containers") or [])
    init = max((one(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _container_times(status: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
    """Earliest container start, latest container finish, and a terminated reason."""
    starts: list[float] = []
    ends: list[float] = []
    reason = None
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "running" in state:
            t = _ts(state["running"].get("startedAt"))
            if t is not None:
                starts.append(t)
        if "terminated" in state:
            term = state["terminated"]
            t0, t1 = _ts(term.get("startedAt")), _ts(term.get("finishedAt"))
            if t0 is not None:
                starts.append(t0)
            if t1 is not None:
                ends.append(t1)
            reason = reason or term.get("reason")
    return (min(starts) if starts else None, max(ends) if ends else None, reason)


def pod_job(pod: dict[str, Any], resource: str = GPU_RESOURCE) -> SchedJob | None:
    """One pod as a :class:`SchedJob`; None if it requests no GPU or its phase is Unknown."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    gpus = pod_gpus(spec, resource)
    if gpus <= 0 or not meta.get("name"):
        return None
    phase = status.get("phase")
    c_start, c_end, c_reason = _container_times(status)
    start = c_start or _ts(status.get("startTime"))
    final = None
    if phase == "Pending":
        st = "pending"
        start = None
    elif phase == "Running":
        st = "running"
    elif phase == "Succeeded":
        st, final = "finished", JobState.COMPLETED
    elif phase == "Failed":
        reason = status.get("reason") or c_reason
        st, final = "finished", _FAILED_REASON.get(str(reason), JobState.FAILED)
    else:
        return None
    ns = meta.get("namespace") or "default"
    node = spec.get("nodeName")
    labels = meta.get("labels") or {}
    return SchedJob(
        job_id=f"{ns}/{meta['name']}",
        status=st,  # type: ignore[arg-type]
        final=final,
        submit_time=_ts(meta.get("creationTimestamp")),
        start_time=start,
        end_time=c_end if st == "finished" else None,
        user=labels.get("user") or labels.get("app.kubernetes.io/created-by"),
        vc=ns,
        name=labels.get("job-name") or meta.get("generateName") or meta["name"],
        num_gpus=gpus,
        num_nodes=1,
        nodes=(node,) if node and st != "pending" else (),
    )


def parse_pods(doc: str | dict[str, Any], resource: str = GPU_RESOURCE) -> list[SchedJob]:
    """GPU pods of a ``PodList`` (JSON text or parsed)."""
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except json.JSONDecodeError as exc:
            raise SchedulerError(f"pod list JSON does not parse: {exc}") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise SchedulerError("expected a Kubernetes PodList (a JSON object with 'items')")
    out = []
    for pod in items:
        if isinstance(pod, dict):
            job = pod_job(pod, resource)
            if job is not None:
                out.append(job)
    return out


def kubernetes_source(spec: str) -> str | tuple[str, ...]:
    """``kubectl`` -> ``kubectl get pods -A -o json``; ``cmd:...`` or a file path as given."""
    return KUBECTL_CMD if spec == "kubectl" else spec
