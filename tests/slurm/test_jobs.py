"""Slurm adapter on sample output (tests/data/slurm/README.md): changes only, states mapped."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhint.cores.job_tracker import (
    JobTracker,
    SchedJob,
    SchedulerError,
    expand_hostlist,
    read_source,
)
from gpuhint.slurm.jobs import gpus_from_gres, gpus_from_tres, map_state, parse_slurm
from gpuhint.wire.contract import JobEvent, JobState, decode_message, encode_message

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def snap(name: str) -> list:
    return parse_slurm((DATA / name).read_text())


def steps(events: list[JobEvent]) -> list[tuple[str, str, str | None]]:
    return [(e.job_id, e.phase.value, e.state.value if e.state else None) for e in events]


def test_squeue_snapshots_publish_only_the_changes() -> None:
    t = JobTracker(cluster="venus")
    first = t.update(snap("squeue_1.json"), now=1717000060)
    assert steps(first) == [
        ("1001", "submitted", None),
        ("1002", "submitted", None),
        ("1002", "started", None),
        ("1003_1", "submitted", None),
        ("1003_1", "started", None),
        ("1006", "submitted", None),
        ("1006", "started", None),
    ]
    assert t.update(snap("squeue_1.json"), now=1717000070) == []
    second = t.update(snap("squeue_2.json"), now=1717000120)
    assert steps(second) == [
        ("1001", "started", None),
        ("1002", "finished", "COMPLETED"),
        ("1007", "submitted", None),
        ("1008", "submitted", None),
        ("1008", "finished", "CANCELLED"),  # cancelled while pending: never started
        ("1006", "finished", "UNKNOWN"),  # vanished while running
    ]
    by = {(e.job_id, e.phase.value): e for e in first + second}
    done = by[("1002", "finished")]
    assert done.duration_s == 90 and done.time == 1717000095 and done.num_gpus == 16
    assert done.nodes == ("gpu01", "gpu02") and done.vc == "vcB" and done.user == "bob"
    assert by[("1001", "started")].nodes == ("gpu01",) and by[("1001", "started")].num_gpus == 4
    assert by[("1007", "submitted")].num_gpus == 32  # gres/gpu:8 per node x 4 nodes
    assert by[("1006", "finished")].time == 1717000120
    for e in first + second:
        assert e.cluster == "venus"
        assert decode_message(encode_message(e)) == e


def test_running_on_maps_jobs_to_nodes() -> None:
    t = JobTracker()
    t.update(snap("squeue_1.json"), now=0)
    assert t.running_on("gpu02") == ["1002"]
    assert sorted(t.running_on("gpu03")) == ["1003_1"]
    t.update(snap("squeue_2.json"), now=0)
    assert t.running_on("gpu02") == [] and t.running_on("gpu01") == ["1001"]


def test_sacct_json() -> None:
    jobs = {j.job_id: j for j in snap("sacct.json")}
    assert jobs["1009"].final is JobState.FAILED and jobs["1009"].num_gpus == 2
    assert jobs["1010"].final is JobState.TIMEOUT and jobs["1010"].nodes == ("gpu05", "gpu06")
    assert jobs["1011"].status == "running" and jobs["1011"].end_time is None
    assert jobs["1012"].status == "pending" and jobs["1012"].nodes == ()
    assert jobs["1013_0"].final is JobState.NODE_FAIL  # array task 0
    events = JobTracker().update(list(jobs.values()), now=1717000200)
    fin = [e for e in events if e.phase.value == "finished"]
    assert {e.job_id: e.duration_s for e in fin}["1002"] == 90


def test_sacct_parsable_skips_steps() -> None:
    jobs = {j.job_id: j for j in snap("sacct_parsable.txt")}
    assert sorted(jobs) == ["2001", "2002", "2003", "2004"]
    assert jobs["2002"].final is JobState.CANCELLED and jobs["2002"].num_gpus == 8
    assert jobs["2001"].start_time == 1717000010 and jobs["2003"].num_gpus == 2


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["PENDING"], ("pending", None)),
        (["RUNNING", "COMPLETING"], ("running", None)),
        (["COMPLETED", "COMPLETING"], ("finished", JobState.COMPLETED)),
        ("CANCELLED by 1000", ("finished", JobState.CANCELLED)),
        ("OUT_OF_MEMORY", ("finished", JobState.FAILED)),
        ("DEADLINE", ("finished", JobState.TIMEOUT)),
        ("BOOT_FAIL", ("finished", JobState.NODE_FAIL)),
        ("PREEMPTED", ("finished", JobState.CANCELLED)),
        ("CD", ("finished", JobState.COMPLETED)),
        ("R", ("running", None)),
        ("WEIRD", None),
    ],
)
def test_state_mapping(raw: str | list[str], expected: object) -> None:
    assert map_state(raw) == expected


def test_tres_and_gres_parsing() -> None:
    assert gpus_from_tres("cpu=8,mem=16G,node=1,billing=8,gres/gpu=2,gres/gpu:a100=2") == 2
    assert gpus_from_tres("cpu=8") is None and gpus_from_tres("") is None
    assert gpus_from_gres("gres/gpu:a100:2,gres/shard:4") == 2
    assert gpus_from_gres("gres:gpu:3") == 3 and gpus_from_gres("gpu") == 1


def test_hostlists() -> None:
    assert expand_hostlist("gpu[01-02],cpu[1,3-4]x") == (
        "gpu01",
        "gpu02",
        "cpu1x",
        "cpu3x",
        "cpu4x",
    )
    assert expand_hostlist("rack[1-2]-n[1-2]") == ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")
    assert expand_hostlist("") == () and expand_hostlist("(null)") == ()


def test_requeued_job_emits_nothing_going_back() -> None:
    t = JobTracker()
    s1 = snap("squeue_1.json")
    t.update(s1, now=0)
    back = [j if j.job_id != "1002" else type(j)(**{**j.__dict__, "status": "pending"}) for j in s1]
    assert t.update(back, now=1) == []


def test_bad_input_and_sources(tmp_path: Path) -> None:
    with pytest.raises(SchedulerError, match="does not parse"):
        parse_slurm("{nope")
    with pytest.raises(SchedulerError, match="no 'jobs'"):
        parse_slurm('{"errors": ["slurm_load_jobs error: Unable to contact slurm controller"]}')
    with pytest.raises(SchedulerError, match="JobID"):
        parse_slurm("a|b\n1|2\n")
    assert parse_slurm("") == []
    with pytest.raises(SchedulerError, match="command not found"):
        read_source(("definitely-not-squeue-xyz", "--json"))
    with pytest.raises(SchedulerError, match="exited 3"):
        read_source("cmd:sh -c 'exit 3'")
    assert read_source(f"cmd:cat {DATA / 'sacct_parsable.txt'}").startswith("JobID|")
    with pytest.raises(SchedulerError, match="cannot read"):
        read_source(str(tmp_path / "missing.json"))


def test_a_job_cancelled_while_pending_has_no_nodes() -> None:
    """sacct says ``None assigned``: found on the real Slurm, it crashed the feed."""
    assert expand_hostlist("None assigned") == ()
    t = JobTracker(cluster="c")
    cancelled = SchedJob("9", "finished", final=JobState.CANCELLED, submit_time=1.0,
                         end_time=5.0, nodes=expand_hostlist("None assigned"))  # fmt: skip
    assert [e.phase.value for e in t.update([cancelled], now=6.0)] == ["submitted", "finished"]


def test_one_job_the_contract_refuses_is_skipped_not_the_poll(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = JobTracker(cluster="c")
    bad = SchedJob("1", "running", submit_time=1.0, start_time=2.0, nodes=("no such:host",))
    good = SchedJob("2", "pending", submit_time=1.0)
    events = t.update([bad, good], now=3.0)
    assert [(e.job_id, e.phase.value) for e in events] == [("2", "submitted")]
    assert "job 1: not published" in caplog.text


@pytest.mark.parametrize("keep", [0.0, 3600.0])
def test_a_finished_job_missing_from_one_snapshot_is_not_announced_again(keep: float) -> None:
    # sacct may skip an array task's record in one poll right after it ends and list it
    # again in the next: with keep_finished_s the tracker remembers it (no duplicate)
    t = JobTracker(cluster="c", keep_finished_s=keep)
    done = SchedJob(
        "9_0",
        "finished",
        submit_time=0,
        start_time=10,
        end_time=20,
        num_gpus=1,
        final=JobState.COMPLETED,
    )
    assert [e.phase.value for e in t.update([done], now=30)] == [
        "submitted",
        "started",
        "finished",
    ]
    assert t.update([], now=40) == []
    again = [e.phase.value for e in t.update([done], now=50)]
    assert again == ([] if keep else ["submitted", "started", "finished"])
    t.update([], now=20 + keep + 1)  # ended longer ago than keep_finished_s: forgotten
    assert "9_0" not in t._step


@pytest.mark.parametrize("after", [1, 2])
def test_a_pending_job_missing_from_one_snapshot_vanishes_only_after_enough(after: int) -> None:
    t = JobTracker(cluster="c", vanish_after=after)
    pending = SchedJob("7_1", "pending", submit_time=0, num_gpus=1)
    t.update([pending], now=1)
    first = [e.phase.value for e in t.update([], now=2)]
    assert first == (["finished"] if after == 1 else [])
    back = [e.phase.value for e in t.update([pending], now=3)]
    assert back == (["submitted"] if after == 1 else [])
    t.update([], now=4)
    assert [e.phase.value for e in t.update([], now=5)] == ([] if after == 1 else ["finished"])
