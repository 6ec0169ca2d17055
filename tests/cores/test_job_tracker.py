"""The scheduler-snapshot tracker (gpuhint/cores/job_tracker.py): a job the contract
refuses must not stop the poll, also when it vanishes."""

from __future__ import annotations

from pathlib import Path

from gpuhint.cores.job_tracker import JobTracker, SchedJob

DAY = 86400.0


def test_a_job_that_vanishes_after_running_over_a_year_does_not_crash_the_poll() -> None:
    """Its finished event would carry a run over the contract's cap: before, the
    pydantic error escaped ``update`` on every poll (``serve`` crash-looped)."""
    t0 = 1.7e9
    tracker = JobTracker(cluster="c", vanish_after=1)
    old = SchedJob("old", "running", submit_time=t0, start_time=t0, num_gpus=1)
    new = SchedJob("new", "pending", submit_time=t0 + 400 * DAY, num_gpus=1)
    assert [e.phase.value for e in tracker.update([old], t0 + 1)] == ["submitted", "started"]
    events = tracker.update([new], t0 + 400 * DAY)  # "old" vanished, 400 days in
    assert [(e.job_id, e.phase.value) for e in events] == [("new", "submitted")]
    assert tracker.update([new], t0 + 400 * DAY + 10) == []  # forgotten, not retried


def test_a_snapshot_with_a_latin1_job_name_is_read_not_a_decode_error(tmp_path: Path) -> None:
    """squeue prints a job name or comment in the submitter's encoding: one byte that is
    not UTF-8 must not fail every poll while that job is listed."""
    from gpuhint.cores.job_tracker import read_source

    raw = b'{"jobs": [{"name": "r\xe9sum\xe9"}]}'
    path = tmp_path / "squeue.json"
    path.write_bytes(raw)
    assert "r\ufffdsum\ufffd" in read_source(str(path))
    assert "r\ufffdsum\ufffd" in read_source(["cat", str(path)])


def test_a_pending_job_moved_to_another_partition_ends_in_its_old_vc() -> None:
    """``scontrol update jobid=7 partition=b``: before, the job's later events came under
    VC b only, and VC a kept it waiting for ever (its hint, its place in every expected
    start, and past the wait limit the front of the queue, holding the bound)."""
    t0 = 1.7e9
    tracker = JobTracker(cluster="c")
    first = SchedJob("7", "pending", submit_time=t0, vc="a", num_gpus=2)
    assert [(e.vc, e.phase.value) for e in tracker.update([first], t0 + 1)] == [("a", "submitted")]
    moved = SchedJob("7", "running", submit_time=t0, start_time=t0 + 50, vc="b", num_gpus=2)
    events = tracker.update([moved], t0 + 60)
    assert [(e.vc, e.phase.value) for e in events] == [
        ("a", "finished"),
        ("b", "submitted"),
        ("b", "started"),
    ]
    left = events[0]
    assert left.duration_s is None and left.state is not None  # a cancel: nothing learned
    assert events[1].submit_time == t0  # the wait counts from the real submit
    assert tracker.update([moved], t0 + 70) == []


def test_a_job_with_a_name_longer_than_the_contract_takes_is_published() -> None:
    """Slurm takes a 300-character ``--job-name`` (seen on 22.05); the contract bounds a
    name at 256. Before, the job was never published (it waited unseen by QSSF, and
    every poll logged it); now the name is cut to fit."""
    t = JobTracker(cluster="c")
    job = SchedJob("5", "pending", submit_time=1.0, num_gpus=1, name="x" * 300,
                   user="u" * 300, partition="p" * 300)  # fmt: skip
    (ev,) = t.update([job], now=2.0)
    assert ev.phase.value == "submitted" and ev.name == "x" * 256
    assert ev.user == "u" * 256 and ev.partition == "p" * 256


def test_the_roster_lists_unfinished_jobs_by_vc_and_keeps_a_vc_that_emptied() -> None:
    tracker = JobTracker(cluster="c")
    a1 = SchedJob("1", "pending", submit_time=0.0, vc="a")
    a2 = SchedJob("2", "running", submit_time=0.0, start_time=1.0, vc="a")
    b3 = SchedJob("3", "pending", submit_time=0.0, vc="b")
    tracker.update([a1, a2, b3], 10.0)
    assert tracker.roster() == {"a": ["1", "2"], "b": ["3"]}
    done = SchedJob("2", "finished", submit_time=0.0, start_time=1.0, end_time=20.0, vc="a")
    tracker.update([a1, done], 30.0)  # 3 vanished, 2 finished
    assert tracker.roster() == {"a": ["1"], "b": []}  # b is listed empty: it retires there
