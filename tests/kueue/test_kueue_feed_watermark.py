"""The Kueue feed's watermark across a restart (pure: a fake snapshot, no API server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuhint.cores.job_tracker import JobTracker, SchedulerError
from gpuhint.kueue.pods import KueueFeed, KueueSnapshot
from gpuhint.slurm.feed import slurm_feed
from gpuhint.wire.contract import JobEvent, JobPhase, JobState

T0 = 1767229200.0  # 2026-01-01T01:00:00Z: an hour after the Jobs were created


def kueue_job(uid: str, *, admitted: bool = False) -> dict[str, Any]:
    """One Kueue-managed Job of 2 GPUs, waiting or (with ``admitted``) running."""
    return {
        "metadata": {"name": f"job-{uid}", "namespace": "ml", "uid": uid,
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"suspend": not admitted, "template": {"spec": {
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}},
        "status": {"startTime": "2026-01-01T00:05:00Z"} if admitted else {},
    }  # fmt: skip


class FakeSnapshot(KueueSnapshot):
    """Hands out ``jobs`` as the API server would; ``down`` makes a read fail."""

    def __init__(self, *jobs: dict[str, Any]) -> None:
        self.jobs = list(jobs)
        self.down = False

    def read(self) -> dict[str, Any]:
        if self.down:
            raise SchedulerError("Kubernetes API: connection refused")
        return {"jobs": self.jobs, "workloads": [], "localqueues": []}


class _Published(KueueFeed):
    """As the agent drives the feed when Kafka answers at once: each poll's events are
    safe before the next, so its watermark is written (``durable``)."""

    def poll(self, now: float) -> list[JobEvent]:
        events = super().poll(now)
        self.durable()
        return events


def _feed(snapshot: FakeSnapshot, state: Path, cluster: str = "k8s") -> KueueFeed:
    tracker = JobTracker(cluster=cluster, vanished_state=JobState.CANCELLED)
    return _Published(tracker, snapshot, state_path=state)


def test_a_restarted_kueue_feed_publishes_no_duplicate(tmp_path: Path) -> None:
    state = tmp_path / "kueue-watermark.json"
    snap = FakeSnapshot(kueue_job("u1", admitted=True), kueue_job("u2"))
    first = _feed(snap, state).poll(T0)
    assert sorted((e.job_id, e.phase.value) for e in first) == [
        ("u1", "started"),
        ("u1", "submitted"),
        ("u2", "submitted"),
    ]
    assert _feed(snap, state).poll(T0 + 10) == []


def test_a_job_deleted_while_down_is_published_cancelled_once(tmp_path: Path) -> None:
    state = tmp_path / "kueue-watermark.json"
    snap = FakeSnapshot(kueue_job("u1", admitted=True), kueue_job("u2"))
    _feed(snap, state).poll(T0)
    snap.jobs = [kueue_job("u2")]  # u1 deleted while the agent was down
    restarted = _feed(snap, state)
    (gone,) = restarted.poll(T0 + 60)
    assert (gone.job_id, gone.phase, gone.state) == ("u1", JobPhase.FINISHED, JobState.CANCELLED)
    assert gone.time == T0 + 60
    assert restarted.poll(T0 + 70) == [] and _feed(snap, state).poll(T0 + 80) == []


def test_an_unreachable_api_server_writes_no_watermark(tmp_path: Path) -> None:
    """A failed read is not an empty cluster: nothing vanishes, the file stays."""
    state = tmp_path / "kueue-watermark.json"
    snap = FakeSnapshot(kueue_job("u1", admitted=True))
    _feed(snap, state).poll(T0)
    before = state.read_text()
    snap.down = True
    feed = _feed(snap, state)
    assert feed.poll(T0 + 10) == [] and feed.failures == 1
    assert state.read_text() == before and feed.last_poll == T0
    snap.down = False
    assert feed.poll(T0 + 20) == []


def test_a_slurm_or_another_clusters_watermark_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "w.json"
    slurm = tmp_path / "squeue.json"
    slurm.write_text('{"jobs": []}')
    theirs = slurm_feed(str(slurm), cluster="k8s", state_path=state)
    theirs.poll(T0)
    theirs.durable()
    with pytest.raises(ValueError, match=r"w\.json: watermark of the slurm feed, not of the kueue"):
        _feed(FakeSnapshot(), state)
    _feed(FakeSnapshot(kueue_job("u1")), state := tmp_path / "k.json", cluster="a").poll(T0)
    with pytest.raises(ValueError, match=r"k\.json: watermark of cluster 'a', not 'k8s'"):
        _feed(FakeSnapshot(), state)


def test_the_feed_names_every_cluster_queue_a_local_queue_points_at() -> None:
    class WithQueues(FakeSnapshot):
        def read(self) -> dict[str, Any]:
            doc = super().read()
            doc["localqueues"] = [
                {"metadata": {"namespace": "ml", "name": "lq"}, "spec": {"clusterQueue": "cq-a"}},
                {"metadata": {"namespace": "cv", "name": "lq"}, "spec": {"clusterQueue": "cq-b"}},
                {"metadata": {"namespace": "x", "name": "lq"}, "spec": {}},
            ]
            return doc

    feed = KueueFeed(JobTracker(cluster="k8s"), WithQueues())
    assert feed.vcs() == []  # nothing read yet
    feed.poll(T0)
    assert feed.vcs() == ["cq-a", "cq-b"]  # rostered even with no job of theirs
