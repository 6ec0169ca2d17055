"""Watermark and parsing details of the Slurm feed (pure: files, no Slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhint.cores.job_tracker import JobTracker, SchedJob
from gpuhint.cores.job_watermark import load_tracker, save_tracker
from gpuhint.slurm.feed import sacct_command, slurm_feed
from gpuhint.slurm.jobs import parse_slurm
from gpuhint.wire.contract import JobPhase, JobState

SQUEUE_2205 = {  # the shape of Slurm 22.05's squeue --json (openapi v0.0.38)
    "jobs": [
        {"job_id": 5, "array_job_id": 5, "array_task_id": None, "array_task_string": "2-3",
         "job_state": "PENDING", "account": "nlp", "partition": "gpu", "time_limit": 10,
         "submit_time": 100, "tres_req_str": "cpu=1,gres/gpu=8", "user_name": "ann"},
        {"job_id": 6, "array_job_id": 5, "array_task_id": 0, "array_task_string": "",
         "job_state": "RUNNING", "account": "nlp", "partition": "gpu", "time_limit": 10,
         "submit_time": 100, "start_time": 110, "tres_alloc_str": "gres/gpu=8", "nodes": "n1"},
    ]
}  # fmt: skip


def test_pending_array_becomes_one_job_per_task() -> None:
    jobs = parse_slurm(json.dumps(SQUEUE_2205))
    assert [(j.job_id, j.status) for j in jobs] == [
        ("5_2", "pending"),
        ("5_3", "pending"),
        ("5_0", "running"),
    ]
    assert {(j.vc, j.partition, j.time_limit_s, j.num_gpus) for j in jobs} == {
        ("nlp", "gpu", 600.0, 8)
    }
    assert [j.vc for j in parse_slurm(json.dumps(SQUEUE_2205), "partition")][:1] == ["gpu"]


def test_parsable_timelimit_account_and_pending_array() -> None:
    text = (
        "JobID|JobName|User|Account|Partition|State|Submit|Timelimit|ReqTRES\n"
        "7_[1-2]|a|bo|cv|gpu|PENDING|100|1-00:00:00|gres/gpu=1\n"
    )
    jobs = parse_slurm(text)
    assert [(j.job_id, j.vc, j.time_limit_s) for j in jobs] == [
        ("7_1", "cv", 86400.0),
        ("7_2", "cv", 86400.0),
    ]


def test_watermark_round_trip_suppresses_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    t = JobTracker(cluster="c")
    job = SchedJob("9", "running", submit_time=1.0, start_time=2.0, vc="v", nodes=("n1",))
    assert [e.phase for e in t.update([job], now=3.0)] == [JobPhase.SUBMITTED, JobPhase.STARTED]
    save_tracker(t, path, polled_at=3.0)
    t2 = JobTracker(cluster="c")
    assert load_tracker(t2, path) == 3.0
    assert t2.update([job], now=4.0) == []
    done = SchedJob("9", "finished", JobState.FAILED, 1.0, 2.0, 5.0, vc="v", nodes=("n1",))
    evs = t2.update([done], now=6.0)
    assert [(e.phase, e.state, e.duration_s) for e in evs] == [
        (JobPhase.FINISHED, JobState.FAILED, 3.0)
    ]


def test_watermark_of_another_cluster_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    save_tracker(JobTracker(cluster="a"), path, polled_at=1.0)
    with pytest.raises(ValueError, match="cluster 'a'"):
        load_tracker(JobTracker(cluster="b"), path)
    path.write_text("{nope")
    with pytest.raises(ValueError, match="not a readable watermark"):
        slurm_feed("sacct", cluster="b", state_path=path)


def test_sacct_window_starts_at_the_watermark(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    save_tracker(JobTracker(cluster="c"), path, polled_at=10_000.0)
    feed = slurm_feed("sacct", cluster="c", state_path=path)
    assert feed.command(10_100.0) == sacct_command(400.0)  # 100 s + the 300 s margin
    assert slurm_feed("sacct", cluster="c").command(5000.0) == sacct_command(3600.0)


def test_the_feed_names_every_partition_and_account_as_vcs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import gpuhint.slurm.feed as feed_mod
    from gpuhint.cores.job_tracker import SchedulerError

    out = {"sinfo": "gpu\ndebug\n", "sacctmgr": "nlp\nvision lab\n"}

    def fake(source: object, timeout_s: float = 60.0) -> str:
        assert isinstance(source, tuple)
        if out.get(source[0]) is None:
            raise SchedulerError(f"{source[0]}: command not found")
        return out[source[0]]

    monkeypatch.setattr(feed_mod, "read_source", fake)
    assert slurm_feed("squeue", cluster="c").vcs() == ["debug", "gpu", "nlp", "vision_lab"]
    assert slurm_feed("squeue", cluster="c", vc_from="partition").vcs() == ["debug", "gpu"]
    assert slurm_feed("tests/data/slurm/squeue_1.json", cluster="c").vcs() == []  # a file
    out["sacctmgr"] = None  # type: ignore[assignment]  # no slurmdbd
    feed = slurm_feed("cmd:squeue --json", cluster="c")
    with caplog.at_level("WARNING"):
        assert feed.vcs() == ["debug", "gpu"] and feed.vcs() == ["debug", "gpu"]
    assert sum("cannot list the accounts" in r.getMessage() for r in caplog.records) == 1
