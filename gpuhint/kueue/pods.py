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
CANCELLED. Pods in phase ``Unknown`` keep their last step. Both feeds (:func:`pods_feed`,
:class:`KueueFeed`) keep an optional watermark (``--kubernetes-state``), as Slurm's.

**Kueue Jobs** (``--kubernetes kueue``, :func:`parse_kueue`, :class:`KueueFeed`): one
batch/v1 Job managed by Kueue is one job, read through the API (the official client)
with its Workload. Its ``job_id`` is the Job's ``gpuhint.io/job-id`` label, else the
Job's UID: the id ``gpuhint kueue apply-priorities`` looks hints up by. The VC is the
ClusterQueue (the admission's, else the LocalQueue's), else the namespace; GPUs are
``min(parallelism, completions)`` (Kueue's pod count) x the pod template's GPUs. Steps::

    Job created, Workload waiting -> submitted
    Workload Admitted             -> started (at the admission time)
    Job Complete / Failed         -> finished COMPLETED / FAILED (TIMEOUT: DeadlineExceeded)
    Job being deleted, or gone    -> finished CANCELLED

>>> pod = {"metadata": {"name": "p", "namespace": "ml",
...        "creationTimestamp": "2024-05-01T10:00:00Z"},
...        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
...        "status": {"phase": "Pending"}}
>>> parse_pods({"items": [pod]})[0].num_gpus
2
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuhint.cores.job_tracker import JobTracker, SchedJob, SchedulerError
from gpuhint.cores.job_watermark import WatermarkedFeed
from gpuhint.wire.contract import MAX_DURATION_S, JobState

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


def time_limit(spec: dict[str, Any]) -> float | None:
    """``activeDeadlineSeconds`` of a Job or pod spec as a time limit in seconds: the
    run time the API server allows before it fails the job (``DeadlineExceeded``, a
    ``TIMEOUT``). None when absent, not a positive integer, or over the contract's
    one-year bound (no limit worth using).

    >>> time_limit({"activeDeadlineSeconds": 3600}), time_limit({})
    (3600.0, None)
    >>> time_limit({"activeDeadlineSeconds": "3600"}) is None  # not an integer
    True
    """
    v = spec.get("activeDeadlineSeconds")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > MAX_DURATION_S:
        return None
    return float(v)


def _container_times(status: dict[str, Any]) -> tuple[float | None, float | None, str | None]:
    """Earliest container start, latest container finish, and a terminated reason.

    A container restarted in place (``restartCount`` > 0) shows only its last attempt,
    but the pod held its GPUs all along: then the pod's ``startTime`` is the start."""
    starts: list[float] = []
    ends: list[float] = []
    reason = None
    statuses = status.get("containerStatuses") or []
    if any(_qty(cs.get("restartCount")) > 0 for cs in statuses):
        t = _ts(status.get("startTime"))
        if t is not None:
            starts.append(t)
    for cs in statuses:
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
        time_limit_s=time_limit(spec),
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


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def _pods_count(spec: dict[str, Any]) -> int:
    """The pods of a Job that run at once, as Kueue counts them for its quota:
    ``min(parallelism, completions)`` (at least 1)."""
    pods = max(1, _qty(spec.get("parallelism") or 1))
    completions = spec.get("completions")
    if completions is not None and 0 < _qty(completions) < pods:
        pods = _qty(completions)
    return pods


def kueue_job(
    job: dict[str, Any],
    workload: dict[str, Any] | None,
    local_queues: dict[str, str],
    resource: str = GPU_RESOURCE,
) -> SchedJob | None:
    """One Kueue-managed Job (and its Workload) as a :class:`SchedJob`; None without GPUs."""
    from gpuhint.kueue.objects import QUEUE_NAME_LABEL, job_id_of

    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    labels = meta.get("labels") or {}
    pod_spec = ((spec.get("template") or {}).get("spec")) or {}
    pods = _pods_count(spec)
    gpus = pod_gpus(pod_spec, resource) * pods
    if gpus <= 0 or not meta.get("name"):
        return None
    ns = meta.get("namespace") or "default"
    wl_status = (workload or {}).get("status") or {}
    cq = (wl_status.get("admission") or {}).get("clusterQueue")
    if not cq:
        lq = ((workload or {}).get("spec") or {}).get("queueName") or labels.get(QUEUE_NAME_LABEL)
        cq = local_queues.get(f"{ns}/{lq}") if lq else None
    admitted = _condition(workload or {}, "Admitted") if workload else None
    start = _ts(admitted.get("lastTransitionTime")) if admitted else None
    if start is None and not spec.get("suspend") and status.get("startTime"):
        start = _ts(status.get("startTime"))
    final = None
    end = None
    done = _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet")
    failed = _condition(job, "Failed")
    if done:
        final, st = JobState.COMPLETED, "finished"
        end = _ts(status.get("completionTime")) or _ts(done.get("lastTransitionTime"))
    elif failed:
        reason = str(failed.get("reason"))
        final, st = _FAILED_REASON.get(reason, JobState.FAILED), "finished"
        end = _ts(failed.get("lastTransitionTime"))
    elif meta.get("deletionTimestamp"):  # being deleted (finalizers may keep it listed)
        final, st = JobState.CANCELLED, "finished"
        end = _ts(meta.get("deletionTimestamp"))
    elif start is not None:
        st = "running"
    else:
        st = "pending"
    uid = str(meta.get("uid") or f"{ns}/{meta['name']}")
    return SchedJob(
        job_id=job_id_of(labels, uid),
        status=st,  # type: ignore[arg-type]
        final=final,
        submit_time=_ts(meta.get("creationTimestamp")),
        start_time=start,
        end_time=end,
        user=labels.get("gpuhint.io/user") or labels.get("user"),
        vc=cq or ns,
        name=labels.get("gpuhint.io/name") or meta.get("generateName") or meta["name"],
        num_gpus=gpus,
        num_nodes=pods,
        # the Job's deadline; else its pods' (the pod template's), which bounds each pod
        time_limit_s=time_limit(spec) or time_limit(pod_spec),
    )


def local_queue_targets(doc: dict[str, Any]) -> dict[str, str]:
    """``namespace/name`` of each LocalQueue of a Kueue snapshot -> its ClusterQueue."""
    lqs = {}
    for q in doc.get("localqueues") or []:
        m = q.get("metadata") or {}
        target = (q.get("spec") or {}).get("clusterQueue")
        if target:
            lqs[f"{m.get('namespace')}/{m.get('name')}"] = str(target)
    return lqs


def parse_kueue(doc: str | dict[str, Any], resource: str = GPU_RESOURCE) -> list[SchedJob]:
    """GPU Jobs of a Kueue snapshot: ``{"jobs": [...], "workloads": [...], "localqueues":
    [...]}`` (JSON text or parsed; each list as the API's ``items``)."""
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except json.JSONDecodeError as exc:
            raise SchedulerError(f"Kueue snapshot JSON does not parse: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SchedulerError("expected a Kueue snapshot (a JSON object with 'jobs')")
    by_owner: dict[str, dict[str, Any]] = {}
    for wl in doc.get("workloads") or []:
        for o in (wl.get("metadata") or {}).get("ownerReferences") or []:
            if o.get("kind") == "Job" and o.get("uid"):
                by_owner[str(o["uid"])] = wl
    lqs = local_queue_targets(doc)
    out = []
    for job in doc["jobs"]:
        if not isinstance(job, dict):
            continue
        uid = str((job.get("metadata") or {}).get("uid") or "")
        sj = kueue_job(job, by_owner.get(uid), lqs, resource)
        if sj is not None:
            out.append(sj)
    return out


class KueueSnapshot:
    """Reads the snapshot :func:`parse_kueue` takes from the API server (official client)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        from gpuhint.kueue.kube import KubeApi, api_client

        self.api = KubeApi(api_client(kubeconfig, context))

    @property
    def server(self) -> str:
        """The API server's address and a digest of its CA certificate: the agent's
        roster identity tells clusters apart by them (in a pod, every cluster's API is
        the same service address; its CA is not)."""
        cfg = getattr(self.api.client, "configuration", None)
        host = str(getattr(cfg, "host", ""))
        return f"{host}|{file_digest(getattr(cfg, 'ssl_ca_cert', None))}"

    def read(self) -> dict[str, Any]:
        from gpuhint.kueue.kube import PATHS, KubeError
        from gpuhint.kueue.objects import QUEUE_NAME_LABEL

        try:
            return {
                "localqueues": self.api.list_all(PATHS["localqueues"])[0],
                "workloads": self.api.list_all(PATHS["workloads"])[0],
                "jobs": self.api.list_all(PATHS["jobs"], QUEUE_NAME_LABEL)[0],
            }
        except KubeError as exc:
            raise SchedulerError(f"Kubernetes API: {exc}") from None


class KueueFeed(WatermarkedFeed):
    """A :class:`~gpuhint.cores.job_watermark.WatermarkedFeed` that reads Kueue's Jobs
    and Workloads through the API; with ``state_path``, a restart publishes no
    duplicate and a Job deleted meanwhile is published finished CANCELLED."""

    def __init__(
        self, tracker: JobTracker, snapshot: KueueSnapshot, state_path: Path | None = None
    ) -> None:
        self.snapshot = snapshot
        self._queues: list[str] = []
        super().__init__(
            "kubernetes", "kueue", parse_kueue, tracker, kind="kueue", state_path=state_path
        )

    def _read(self, now: float) -> list[SchedJob]:
        doc = self.snapshot.read()
        jobs = parse_kueue(doc)
        self._queues = sorted(set(local_queue_targets(doc).values()))
        return jobs

    def named_source(self) -> str:
        return "kueue"  # the API, not a file

    def identity(self) -> str:
        """The API server it reads (from the kubeconfig, its context, or in-cluster)."""
        return f"{super().identity()}|{getattr(self.snapshot, 'server', '')}"

    def vcs(self) -> list[str]:
        """The ClusterQueues the LocalQueues of the last read point at (a job's VC): an
        empty one is rostered too."""
        return list(self._queues)


def kueue_feed(
    *, cluster: str, state_path: Path | None = None, kubeconfig: str | None = None
) -> KueueFeed:
    """The feed of ``gpuhint agent --kubernetes kueue`` (in-cluster, else ``kubeconfig``);
    ``state_path`` keeps a watermark across restarts (None: none). Raises KubeError when
    the API cannot be configured, ValueError for an unusable watermark."""
    tracker = JobTracker(cluster=cluster, vanished_state=JobState.CANCELLED)
    return KueueFeed(tracker, KueueSnapshot(kubeconfig), state_path)


IN_CLUSTER_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
"""The service account's CA certificate in a pod (which cluster's API it is)."""


def file_digest(path: object) -> str:
    """The first 8 hex digits of a file's SHA-256 ("" for no file, or one unreadable)."""
    if not isinstance(path, str) or not path:
        return ""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:8]
    except OSError:
        return ""


class PodsFeed(WatermarkedFeed):
    """The pods feed; its identity names the cluster ``kubectl`` reads: ``KUBECONFIG``
    and, in a pod, the service account's CA certificate."""

    def identity(self) -> str:
        where = f"{os.environ.get('KUBECONFIG', '')}|{file_digest(IN_CLUSTER_CA)}"
        return f"{super().identity()}|{where}"


def pods_feed(spec: str, *, cluster: str, state_path: Path | None = None) -> WatermarkedFeed:
    """The feed of ``gpuhint agent --kubernetes kubectl|cmd:...|FILE``: GPU pods, one
    job each, a pod gone before it finished is finished CANCELLED; ``state_path`` keeps
    a watermark across restarts (None: none)."""
    return PodsFeed(
        "kubernetes",
        kubernetes_source(spec),
        parse_pods,
        JobTracker(cluster=cluster, vanished_state=JobState.CANCELLED),
        kind="pods",
        state_path=state_path,
    )


def kubernetes_source(spec: str) -> str | tuple[str, ...]:
    """``kubectl`` -> ``kubectl get pods -A -o json``; ``cmd:...`` or a file path as given."""
    return KUBECTL_CMD if spec == "kubectl" else spec
