"""The generic job-feed watermark (pure: a file source, no scheduler)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from gpuhint.cores.job_tracker import JobTracker, SchedJob
from gpuhint.cores.job_watermark import WatermarkedFeed, load_tracker, save_tracker
from gpuhint.wire.contract import JobEvent, JobPhase, JobState

RUNNING = SchedJob("a", "running", submit_time=1.0, start_time=2.0, vc="v", num_gpus=1)
PENDING = SchedJob("b", "pending", submit_time=1.0, vc="v", num_gpus=2)


def _snapshot(path: Path, *jobs: SchedJob) -> None:
    path.write_text(json.dumps([{**asdict(j), "nodes": list(j.nodes)} for j in jobs]))


def _parse(text: str) -> list[SchedJob]:
    return [SchedJob(**{**d, "nodes": tuple(d["nodes"])}) for d in json.loads(text)]


class _Published(WatermarkedFeed):
    """As the agent drives a feed when its broker answers at once: each poll's events
    are published and safe (acknowledged) before the next, so its watermark is written."""

    def poll(self, now: float) -> list[JobEvent]:
        events = super().poll(now)
        self.durable()
        return events


def _feed(src: Path, state: Path, cluster: str = "c") -> WatermarkedFeed:
    tracker = JobTracker(cluster=cluster, vanished_state=JobState.CANCELLED)
    return _Published("test", str(src), _parse, tracker, kind="pods", state_path=state)


def test_restart_publishes_no_duplicate_and_ends_a_job_gone_meanwhile(tmp_path: Path) -> None:
    src, state = tmp_path / "snap.json", tmp_path / "w.json"
    _snapshot(src, RUNNING, PENDING)
    first = _feed(src, state).poll(10.0)
    assert [(e.job_id, e.phase) for e in first] == [
        ("a", JobPhase.SUBMITTED),
        ("a", JobPhase.STARTED),
        ("b", JobPhase.SUBMITTED),
    ]
    assert _feed(src, state).poll(20.0) == []  # restarted: nothing again
    _snapshot(src, RUNNING)  # b deleted while the agent was down
    restarted = _feed(src, state)
    assert restarted.last_poll == 20.0
    (gone,) = restarted.poll(30.0)
    assert (gone.job_id, gone.phase, gone.state) == ("b", JobPhase.FINISHED, JobState.CANCELLED)
    assert _feed(src, state).poll(40.0) == []  # and only once


def test_a_failed_read_keeps_the_watermark_and_vanishes_nothing(tmp_path: Path) -> None:
    src, state = tmp_path / "snap.json", tmp_path / "w.json"
    _snapshot(src, RUNNING, PENDING)
    feed = _feed(src, state)
    feed.poll(10.0)
    before = state.read_text()
    src.unlink()  # the scheduler cannot be read
    assert feed.poll(20.0) == [] and feed.failures == 1
    assert state.read_text() == before and feed.last_poll == 10.0
    _snapshot(src, RUNNING, PENDING)
    assert _feed(src, state).poll(30.0) == []


def test_a_file_of_another_feed_cluster_or_none_is_one_line(tmp_path: Path) -> None:
    src, state = tmp_path / "snap.json", tmp_path / "w.json"
    _snapshot(src, RUNNING)
    save_tracker(JobTracker(cluster="c"), state, 1.0, "kueue")
    with pytest.raises(ValueError, match=r"w\.json: watermark of the kueue feed, not of the pods"):
        _feed(src, state)
    save_tracker(JobTracker(cluster="c"), state, 1.0)  # a Slurm file from before kinds
    with pytest.raises(ValueError, match=r"w\.json: watermark of no named feed \(a Slurm one\)"):
        _feed(src, state)
    assert load_tracker(JobTracker(cluster="c"), state, "slurm", untagged=True) == 1.0
    save_tracker(JobTracker(cluster="other"), state, 1.0, "pods")
    with pytest.raises(ValueError, match="cluster 'other', not 'c'"):
        _feed(src, state)
    for text in ("{nope", '{"version": 1, "kind": "pods", "cluster": "c", "jobs": [{}]}'):
        state.write_text(text)
        with pytest.raises(ValueError, match=r"w\.json: (not a readable|damaged) watermark") as e:
            _feed(src, state)
        assert "\n" not in str(e.value)


def test_a_feed_without_a_watermark_file_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A long-running agent whose feed keeps no watermark is told what a restart costs."""
    import logging

    from gpuhint.cores.job_watermark import warn_without_watermark

    kept = WatermarkedFeed("slurm", "f", lambda _t: [], JobTracker(cluster="c"),
                           kind="slurm", state_path=tmp_path / "w.json")  # fmt: skip
    bare = WatermarkedFeed("kubernetes", "f", lambda _t: [], JobTracker(cluster="c"))
    with caplog.at_level(logging.WARNING):
        assert warn_without_watermark([kept, bare], logging.getLogger("t")) == ["kubernetes"]
    assert "--kubernetes-state" in caplog.text and "--slurm-state" not in caplog.text


def test_the_watermark_is_on_disk_before_it_replaces_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a host crash the rename may be on disk before the data: the agent would then
    find an empty watermark and refuse to start. The new file is fsynced first."""
    import os

    steps: list[str] = []
    fsync, replace = os.fsync, os.replace

    def fsync_noted(fd: int) -> None:
        steps.append("fsync")
        fsync(fd)

    def replace_noted(src: str, dst: Path) -> None:
        steps.append("replace")
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync_noted)
    monkeypatch.setattr(os, "replace", replace_noted)
    save_tracker(JobTracker(cluster="c"), tmp_path / "w.json", 5.0, "pods")
    assert steps == ["fsync", "replace"]
    assert load_tracker(JobTracker(cluster="c"), tmp_path / "w.json", "pods") == 5.0


def test_the_watermark_waits_until_the_events_are_safe(tmp_path: Path) -> None:
    """Until the caller says the poll's events are safe (sent, or kept on disk), the
    watermark is not written: a crash then announces them again, never loses them."""
    src, state = tmp_path / "snap.json", tmp_path / "w.json"
    _snapshot(src, RUNNING, PENDING)
    tracker = JobTracker(cluster="c", vanished_state=JobState.CANCELLED)
    feed = WatermarkedFeed("test", str(src), _parse, tracker, kind="pods", state_path=state)
    assert len(feed.poll(10.0)) == 3 and not state.exists()  # published, not yet safe
    again = WatermarkedFeed("test", str(src), _parse, JobTracker(cluster="c"), kind="pods",
                            state_path=state).poll(20.0)  # fmt: skip
    assert len(again) == 3  # "crashed" before they were safe: announced again
    feed.durable()
    assert state.exists()
    fresh = WatermarkedFeed("test", str(src), _parse, JobTracker(cluster="c"), kind="pods",
                            state_path=state)  # fmt: skip
    assert fresh.poll(30.0) == []


def test_a_feed_name_with_odd_characters_is_quoted_in_the_error(tmp_path: Path) -> None:
    src, state = tmp_path / "snap.json", tmp_path / "w.json"
    _snapshot(src, RUNNING)
    save_tracker(JobTracker(cluster="c"), state, 1.0, "x\nERROR: forged log line" + "y" * 500)
    with pytest.raises(ValueError) as err:
        _feed(src, state)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200
    assert "watermark of the 'x\\nERROR: forged log line" in str(err.value)
