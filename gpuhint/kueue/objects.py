"""Compact views of Kubernetes / Kueue API objects (pure: dicts as the API returns them).

The applier caches thousands of Workloads and Jobs; it keeps only these few fields.

>>> job = {"metadata": {"namespace": "ml", "name": "train", "uid": "u-1",
...        "labels": {"gpuhint.io/job-id": "run-42"}}}
>>> job_ref(job).job_id
'run-42'
>>> job_ref({"metadata": {"namespace": "ml", "name": "t", "uid": "u-2"}}).job_id
'u-2'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuhint.kueue.policy import JOB_ID_LABEL, NEVER, PRIORITY_CLASS_LABEL, QueuePolicy

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
START_ANNOTATIONS = (
    "gpuhint.io/expected-start",
    "gpuhint.io/expected-start-band",
    "gpuhint.io/expected-start-asof",
)
"""The expected-start annotations (:mod:`gpuhint.kueue.start_note`), in its order."""


@dataclass(frozen=True)
class JobRef:
    namespace: str
    name: str
    uid: str
    job_id: str
    priority_class: str | None
    resource_version: str = ""


@dataclass(frozen=True)
class WorkloadRef:
    namespace: str
    name: str
    uid: str
    job_name: str | None
    job_uid: str | None
    queue_name: str | None
    admitted_queue: str | None  # status.admission.clusterQueue
    priority: int
    class_name: str | None
    class_kind: str | None
    pending: bool
    reserved: bool
    admitted: bool
    finished: bool
    creation: str = ""
    notes: tuple[str | None, ...] = (None, None, None)  # gpuhint's expected-start annotations


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def key(obj: dict[str, Any]) -> str:
    m = _meta(obj)
    ns = m.get("namespace")
    return f"{ns}/{m.get('name')}" if ns else str(m.get("name"))


def job_id_of(labels: dict[str, str] | None, uid: str) -> str:
    """The gpuhint job id of a Job: its ``gpuhint.io/job-id`` label, else its UID."""
    value = (labels or {}).get(JOB_ID_LABEL)
    return value if value else uid


def job_ref(obj: dict[str, Any]) -> JobRef:
    m = _meta(obj)
    labels = m.get("labels") or {}
    uid = str(m.get("uid") or "")
    return JobRef(
        namespace=str(m.get("namespace") or "default"),
        name=str(m.get("name")),
        uid=uid,
        job_id=job_id_of(labels, uid),
        priority_class=labels.get(PRIORITY_CLASS_LABEL) or None,
        resource_version=str(m.get("resourceVersion") or ""),
    )


def _true(conditions: list[dict[str, Any]], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def condition_time(obj: dict[str, Any], kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return c.get("lastTransitionTime")
    return None


def workload_ref(obj: dict[str, Any]) -> WorkloadRef:
    m = _meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conds = status.get("conditions") or []
    owner = next(
        (
            o
            for o in m.get("ownerReferences") or []
            if o.get("kind") == "Job" and str(o.get("apiVersion", "")).startswith("batch/")
        ),
        None,
    )
    ref = spec.get("priorityClassRef") or {}
    reserved = _true(conds, "QuotaReserved")
    admitted = _true(conds, "Admitted")
    finished = _true(conds, "Finished")
    active = spec.get("active", True) is not False
    return WorkloadRef(
        namespace=str(m.get("namespace") or "default"),
        name=str(m.get("name")),
        uid=str(m.get("uid") or ""),
        job_name=owner.get("name") if owner else None,
        job_uid=owner.get("uid") if owner else None,
        queue_name=spec.get("queueName") or None,
        admitted_queue=((status.get("admission") or {}).get("clusterQueue")) or None,
        priority=int(spec.get("priority") or 0),
        class_name=ref.get("name") or None,
        class_kind=ref.get("kind") or None,
        pending=active and not (reserved or admitted or finished),
        reserved=reserved,
        admitted=admitted,
        finished=finished,
        creation=str(m.get("creationTimestamp") or ""),
        notes=tuple((m.get("annotations") or {}).get(k) for k in START_ANNOTATIONS),
    )


def queue_policy(obj: dict[str, Any]) -> QueuePolicy:
    """A ClusterQueue's preemption settings (absent fields are Kueue's default, Never)."""
    spec = obj.get("spec") or {}
    pre = spec.get("preemption") or {}
    borrow = pre.get("borrowWithinCohort") or {}
    return QueuePolicy(
        name=str(_meta(obj).get("name")),
        cohort=spec.get("cohortName") or spec.get("cohort") or None,
        within_cluster_queue=pre.get("withinClusterQueue") or NEVER,
        reclaim_within_cohort=pre.get("reclaimWithinCohort") or NEVER,
        borrow_within_cohort=borrow.get("policy") or NEVER,
    )


def local_queue_target(obj: dict[str, Any]) -> str | None:
    """The ClusterQueue a LocalQueue feeds."""
    return (obj.get("spec") or {}).get("clusterQueue") or None
