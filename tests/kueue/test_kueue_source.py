"""Kueue snapshots -> SchedJobs (pure): ids, VCs, GPUs, steps and final states."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhint.cores.job_tracker import JobTracker, SchedulerError
from gpuhint.kueue.pods import parse_kueue
from gpuhint.wire.contract import JobState


def _job(
    name: str,
    uid: str,
    *,
    labels: dict[str, str] | None = None,
    suspend: bool = True,
    conditions: list[dict[str, Any]] | None = None,
    parallelism: int = 1,
    gpus: int = 2,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": uid,
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"kueue.x-k8s.io/queue-name": "lq", **(labels or {})}},
        "spec": {"suspend": suspend, "parallelism": parallelism, "template": {"spec": {
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}},
        "status": {"conditions": conditions or [],
                   "completionTime": "2026-01-01T01:00:00Z" if conditions else None},
    }  # fmt: skip


def _wl(uid: str, admitted_at: str | None = None) -> dict[str, Any]:
    conds = [{"type": "Admitted", "status": "True", "lastTransitionTime": admitted_at}]
    return {
        "metadata": {"name": f"job-{uid}", "namespace": "ml",
                     "ownerReferences": [{"kind": "Job", "apiVersion": "batch/v1", "uid": uid}]},
        "spec": {"queueName": "lq"},
        "status": {"conditions": conds if admitted_at else [],
                   **({"admission": {"clusterQueue": "cq-admitted"}} if admitted_at else {})},
    }  # fmt: skip


def test_snapshot_to_jobs() -> None:
    snap = {
        "localqueues": [{"metadata": {"name": "lq", "namespace": "ml"},
                         "spec": {"clusterQueue": "cq"}}],
        "workloads": [_wl("u1"), _wl("u2", "2026-01-01T00:10:00Z"),
                      _wl("u3", "2026-01-01T00:10:00Z")],
        "jobs": [
            _job("waiting", "u1", labels={"gpuhint.io/job-id": "run-7"}, parallelism=4),
            _job("running", "u2", suspend=False),
            _job("done", "u3", suspend=False,
                 conditions=[{"type": "Complete", "status": "True"}]),
            _job("late", "u4", suspend=False, conditions=[
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                 "lastTransitionTime": "2026-01-01T02:00:00Z"}]),
            _job("cpu-only", "u5", gpus=0),
        ],
    }  # fmt: skip
    jobs = {j.job_id: j for j in parse_kueue(snap)}
    assert sorted(jobs) == ["run-7", "u2", "u3", "u4"]
    w = jobs["run-7"]
    assert (w.status, w.num_gpus, w.vc, w.name) == ("pending", 8, "cq", "waiting")
    r = jobs["u2"]
    assert (r.status, r.vc) == ("running", "cq-admitted")
    assert r.start_time is not None and r.start_time - w.submit_time == 600  # type: ignore[operator]
    assert (jobs["u3"].status, jobs["u3"].final) == ("finished", JobState.COMPLETED)
    assert jobs["u3"].end_time - r.start_time == 3000  # type: ignore[operator]
    assert (jobs["u4"].final, jobs["u4"].vc) == (JobState.TIMEOUT, "cq")
    assert w.time_limit_s is None  # no deadline asked


def test_active_deadline_is_the_time_limit() -> None:
    snap = {"localqueues": [], "workloads": [_wl("u1"), _wl("u2"), _wl("u3"), _wl("u4")],
            "jobs": [_job("job", "u1"), _job("pod", "u2"), _job("both", "u3"),
                     _job("silly", "u4")]}  # fmt: skip
    snap["jobs"][0]["spec"]["activeDeadlineSeconds"] = 7200
    snap["jobs"][1]["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 600
    snap["jobs"][2]["spec"]["activeDeadlineSeconds"] = 900
    snap["jobs"][2]["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 60
    snap["jobs"][3]["spec"]["activeDeadlineSeconds"] = 10**9  # beyond a year: no limit
    jobs = {j.job_id: j for j in parse_kueue(snap)}
    got = {k: jobs[k].time_limit_s for k in ("u1", "u2", "u3", "u4")}
    assert got == {"u1": 7200.0, "u2": 600.0, "u3": 900.0, "u4": None}
    tracker = JobTracker(cluster="k8s")
    (ev,) = tracker.update([jobs["u1"]], now=1.8e9)
    assert ev.phase.value == "submitted" and ev.time_limit_s == 7200.0


def test_not_a_snapshot() -> None:
    with pytest.raises(SchedulerError, match="snapshot"):
        parse_kueue('{"items": []}')
    with pytest.raises(SchedulerError, match="does not parse"):
        parse_kueue("{")


def test_gpus_count_the_pods_kueue_admits_not_more_than_completions() -> None:
    """Kueue's pod count of a Job is min(parallelism, completions): a Job that runs
    one pod at a time is not a 4-pod job because parallelism says 4."""
    job = _job("j", "u1", parallelism=4, gpus=2)
    job["spec"]["completions"] = 1
    got = parse_kueue({"jobs": [job], "workloads": [], "localqueues": []})
    assert (got[0].num_gpus, got[0].num_nodes) == (2, 1)
    job["spec"]["completions"] = 8  # more completions than parallelism: parallelism
    got = parse_kueue({"jobs": [job], "workloads": [], "localqueues": []})
    assert (got[0].num_gpus, got[0].num_nodes) == (8, 4)
