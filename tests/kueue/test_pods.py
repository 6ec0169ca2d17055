"""Kubernetes adapter on pod lists (tests/data/kubernetes/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhint.cores.job_tracker import JobTracker, SchedulerError
from gpuhint.kueue.pods import parse_pods
from gpuhint.wire.contract import JobState, decode_message, encode_message

DATA = Path(__file__).resolve().parents[1] / "data" / "kubernetes"


def test_gpu_pods_become_job_events_changes_only() -> None:
    t = JobTracker(cluster="k8s", vanished_state=JobState.CANCELLED)
    p1 = parse_pods((DATA / "pods_1.json").read_text())
    assert sorted(j.job_id for j in p1) == [
        "team-a/notebook",
        "team-a/train-a-0",
        "team-b/train-b-0",
    ]
    first = t.update(p1, now=1717000100)
    assert [(e.job_id, e.phase.value) for e in first] == [
        ("team-a/train-a-0", "submitted"),
        ("team-b/train-b-0", "submitted"),
        ("team-b/train-b-0", "started"),
        ("team-a/notebook", "submitted"),
        ("team-a/notebook", "started"),
    ]
    assert t.update(p1, now=1717000110) == []
    second = t.update(parse_pods((DATA / "pods_2.json").read_text()), now=1717000600)
    got = [(e.job_id, e.phase.value, e.state.value if e.state else None) for e in second]
    assert got == [
        ("team-a/train-a-0", "started", None),
        ("team-b/train-b-0", "finished", "COMPLETED"),
        ("team-b/batch-x", "submitted", None),
        ("team-b/batch-x", "started", None),
        ("team-b/batch-x", "finished", "TIMEOUT"),  # DeadlineExceeded
        ("team-a/oom", "submitted", None),
        ("team-a/oom", "started", None),
        ("team-a/oom", "finished", "FAILED"),
        ("team-a/notebook", "finished", "CANCELLED"),  # deleted while running
    ]
    by = {(e.job_id, e.phase.value): e for e in first + second}
    train_b = by[("team-b/train-b-0", "finished")]
    assert train_b.duration_s == 900 and train_b.nodes == ("gpu-node-1",) and train_b.num_gpus == 8
    assert train_b.vc == "team-b" and train_b.name == "train-b"
    assert by[("team-a/notebook", "submitted")].num_gpus == 2  # init container asks for 2
    assert by[("team-a/train-a-0", "started")].nodes == ("gpu-node-2",)
    assert t.running_on("gpu-node-2") == ["team-a/train-a-0"]
    for e in first + second:
        assert decode_message(encode_message(e)) == e


def test_not_a_pod_list() -> None:
    with pytest.raises(SchedulerError, match="PodList"):
        parse_pods('{"kind": "Pod"}')
    with pytest.raises(SchedulerError, match="does not parse"):
        parse_pods("nope")


def test_a_pods_active_deadline_is_its_time_limit() -> None:
    doc = json.loads((DATA / "pods_2.json").read_text())
    for pod in doc["items"]:
        if pod["metadata"]["name"] == "batch-x":  # failed with DeadlineExceeded
            pod["spec"]["activeDeadlineSeconds"] = 300
    jobs = {j.job_id: j for j in parse_pods(doc)}
    assert jobs["team-b/batch-x"].time_limit_s == 300.0
    assert jobs["team-b/batch-x"].final is JobState.TIMEOUT
    assert jobs["team-a/oom"].time_limit_s is None


def _restarted(phase: str, state: dict[str, object]) -> dict[str, object]:
    """A Job's pod (``restartPolicy: OnFailure``) whose container failed twice in place."""
    return {
        "metadata": {"name": "train-0", "namespace": "ml",
                     "creationTimestamp": "2024-05-01T10:00:00Z"},
        "spec": {"nodeName": "g1", "restartPolicy": "OnFailure", "containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
        "status": {"phase": phase, "startTime": "2024-05-01T10:00:10Z", "containerStatuses": [
            {"name": "c", "restartCount": 2, "state": state, "lastState": {"terminated": {
                "startedAt": "2024-05-01T10:05:00Z", "finishedAt": "2024-05-01T10:09:00Z"}}}]},
    }  # fmt: skip


def test_a_pod_restarted_in_place_held_its_gpus_since_it_started() -> None:
    """A container restarted in place (OnFailure) keeps the pod's GPUs: the run is the
    pod's, from its start, not the last attempt's (was 300 s of a 890 s hold)."""
    t = JobTracker(cluster="k8s")
    running = _restarted("Running", {"running": {"startedAt": "2024-05-01T10:10:00Z"}})
    t.update(parse_pods({"items": [running]}), now=1714558300.0)
    done = _restarted("Succeeded", {"terminated": {
        "startedAt": "2024-05-01T10:10:00Z", "finishedAt": "2024-05-01T10:15:00Z"}})  # fmt: skip
    (fin,) = t.update(parse_pods({"items": [done]}), now=1714558600.0)
    assert fin.state is JobState.COMPLETED and fin.duration_s == 890.0
