"""Slurm output as Slurm 22.05.8 really prints it (seen on the loopback test cluster,
2026-12-07): shapes the hand-written samples in tests/data/slurm/ do not show."""

from __future__ import annotations

import json

from gpuhint.cores.job_tracker import JobTracker
from gpuhint.slurm.jobs import parse_slurm
from gpuhint.wire.contract import JobPhase, JobState


def _squeue(state: str, start: int, end: int, nodes: str) -> str:
    job = {
        "job_id": 3, "array_job_id": 0, "array_task_id": None, "array_task_string": "",
        "job_state": state, "account": "research", "partition": "gpu", "time_limit": 5,
        "submit_time": 1796641917, "start_time": start, "end_time": end, "nodes": nodes,
        "tres_req_str": "cpu=2,gres/gpu=16", "user_name": "root", "name": "big",
    }  # fmt: skip
    return json.dumps({"jobs": [job]})


def test_squeue_job_cancelled_while_pending_never_started() -> None:
    """22.05's squeue --json gives a job cancelled while pending start_time == end_time
    (the cancel time) and no nodes: it never ran, so no ``started`` event."""
    t = JobTracker(cluster="c")
    pending = parse_slurm(_squeue("PENDING", 0, 0, ""))
    cancelled = parse_slurm(_squeue("CANCELLED", 1796641967, 1796641967, ""))
    assert cancelled[0].start_time is None
    events = t.update(pending, now=1796641920) + t.update(cancelled, now=1796641970)
    assert [e.phase for e in events] == [JobPhase.SUBMITTED, JobPhase.FINISHED]
    assert events[-1].state is JobState.CANCELLED and events[-1].duration_s is None
    # first seen already cancelled: submitted and finished only, too
    fresh = JobTracker(cluster="c").update(cancelled, now=1796641970)
    assert [e.phase for e in fresh] == [JobPhase.SUBMITTED, JobPhase.FINISHED]


def test_squeue_job_that_ran_keeps_its_start() -> None:
    done = parse_slurm(_squeue("COMPLETED", 1796641917, 1796641947, "n1"))
    assert done[0].start_time == 1796641917 and done[0].nodes == ("n1",)


def test_sacct_parsable_job_name_with_the_separator() -> None:
    """sacct -P does not escape ``|`` in a job name (22.05 prints ``1|a|b name|...``):
    the row has one field too many, and every column after the name was shifted."""
    text = (
        "JobID|JobName|User|Account|Partition|Submit|Start|End|Timelimit|State|AllocTRES|NodeList\n"
        "1|a|b name|root|research|gpu|100|110|170|00:05:00|COMPLETED|cpu=1,gres/gpu=2|n1\n"
        "2|plain|root|research|gpu|100|110|170|00:05:00|FAILED|cpu=1,gres/gpu=1|n2\n"
    )
    jobs = {j.job_id: j for j in parse_slurm(text)}
    assert sorted(jobs) == ["1", "2"]
    one = jobs["1"]
    assert one.name == "a|b name" and one.user == "root" and one.vc == "research"
    assert one.final is JobState.COMPLETED and one.num_gpus == 2 and one.nodes == ("n1",)
    assert (one.submit_time, one.start_time, one.end_time) == (100.0, 110.0, 170.0)
    assert one.time_limit_s == 300.0
    assert jobs["2"].final is JobState.FAILED and jobs["2"].name == "plain"


def test_sacct_parsable_name_with_separators_as_last_column() -> None:
    text = "JobID|State|JobName\n4|RUNNING|x|y|z\n"
    (job,) = parse_slurm(text)
    assert (job.job_id, job.status, job.name) == ("4", "running", "x|y|z")


def test_squeue_stopped_job_is_still_running() -> None:
    """``scancel -s STOP`` shows the job STOPPED (``ST``) in squeue; it keeps its nodes
    and runs on after SIGCONT: no ``finished`` UNKNOWN, no second submission."""
    t = JobTracker(cluster="c")
    running = parse_slurm(_squeue("RUNNING", 1796641917, 1796642217, "n1"))
    stopped = parse_slurm(_squeue("STOPPED", 1796641917, 1796642217, "n1"))
    events = t.update(running, now=1796641920)
    for now, snap in ((1796641930, stopped), (1796641940, stopped), (1796641950, running)):
        events += t.update(snap, now=now)
    assert [e.phase for e in events] == [JobPhase.SUBMITTED, JobPhase.STARTED]


def test_het_job_components_are_named_as_squeue_and_scontrol_name_them() -> None:
    """A heterogeneous job's components are ``3+0``, ``3+1`` in ``squeue -o %i`` (what
    the SiteFactor applier matches hints with), in ``sacct -P`` and for ``scontrol
    update``; the JSON outputs give each its own raw id (3, 4) and the het fields."""
    squeue = {"jobs": [
        {"job_id": jid, "het_job_id": 3, "het_job_offset": off, "array_job_id": 0,
         "array_task_id": None, "array_task_string": "", "job_state": "PENDING",
         "account": "research", "partition": "gpu", "submit_time": 100,
         "tres_req_str": f"cpu=1,gres/gpu={off + 1}"}
        for jid, off in ((3, 0), (4, 1))
    ] + [
        {"job_id": 1, "het_job_id": 0, "het_job_offset": 0, "array_job_id": 0,
         "array_task_id": None, "job_state": "PENDING", "submit_time": 100},
    ]}  # fmt: skip
    assert [j.job_id for j in parse_slurm(json.dumps(squeue))] == ["3+0", "3+1", "1"]
    sacct = {"jobs": [
        {"job_id": jid, "het": het, "state": {"current": "PENDING"},
         "array": {"job_id": 0, "task": None, "task_id": None},
         "time": {"submission": 100, "start": None, "end": 0, "limit": 5}}
        for jid, het in ((3, {"job_id": 3, "job_offset": 0}),
                         (4, {"job_id": 3, "job_offset": 1}),
                         (5, {"job_id": 0, "job_offset": None}))
    ]}  # fmt: skip
    assert [j.job_id for j in parse_slurm(json.dumps(sacct))] == ["3+0", "3+1", "5"]


def test_time_limits_in_every_slurm_form() -> None:
    """Slurm's time forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (sbatch -t)."""
    from gpuhint.slurm.fields import parse_timelimit

    cases = {
        "30": 1800.0, "30:15": 1815.0, "2:00:00": 7200.0, "1-02": 93600.0,
        "1-02:30": 95400.0, "1-02:03:04": 93784.0, "0-02": 7200.0, "UNLIMITED": None, "": None,
    }  # fmt: skip
    assert {t: parse_timelimit(t) for t in cases} == cases


def test_sacct_parsable_job_cancelled_while_pending_never_started() -> None:
    """22.05's sacct -P prints a job cancelled while held Start == End (the cancel time)
    and ``None assigned`` nodes: it never ran, so no ``started`` and no 0 s run."""
    text = (
        "JobID|State|Submit|Start|End|AllocTRES|ReqTRES|NodeList\n"
        "1|CANCELLED by 0|2026-12-07T15:00:12|2026-12-07T15:00:14|2026-12-07T15:00:14|"
        "|billing=1,cpu=1,gres/gpu=2,mem=16000M,node=1|None assigned\n"
    )
    (job,) = parse_slurm(text)
    assert job.start_time is None and job.num_gpus == 2
    events = JobTracker(cluster="c").update([job], now=job.end_time or 0.0)
    assert [e.phase for e in events] == [JobPhase.SUBMITTED, JobPhase.FINISHED]
    assert events[-1].duration_s is None


def _record(state: str, submit: int, start: int, end: int, nodes: str) -> dict[str, object]:
    return {
        "job_id": 2, "state": {"current": state, "reason": "None"}, "account": "research",
        "partition": "gpu", "nodes": nodes, "array": {"job_id": 0, "task_id": None},
        "time": {"submission": submit, "start": start, "end": end, "limit": 5},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 1}]},
    }  # fmt: skip


def test_sacct_json_lists_a_requeued_job_once_per_run() -> None:
    """22.05's sacct --json lists every record of a requeued job (seen: ``REQUEUED``,
    then the new ``PENDING`` one, same id, without -D). Only the newest record counts:
    an old run's record in a final state (here ``NODE_FAIL``) must not end the job, nor
    hide the second run's end."""
    t = JobTracker(cluster="c")
    ran = _record("RUNNING", 100, 110, 0, "n1")
    t.update(parse_slurm(json.dumps({"jobs": [ran]})), now=120)
    first = _record("NODE_FAIL", 100, 110, 150, "n1")
    again = _record("PENDING", 150, 0, 0, "None assigned")
    snap = parse_slurm(json.dumps({"jobs": [first, again]}))
    assert [(j.job_id, j.status) for j in snap] == [("2", "pending")]
    assert t.update(snap, now=160) == []
    done = _record("COMPLETED", 150, 200, 260, "n2")
    events = t.update(parse_slurm(json.dumps({"jobs": [first, done]})), now=270)
    assert [(e.phase, e.state, e.duration_s) for e in events] == [
        (JobPhase.FINISHED, JobState.COMPLETED, 60.0)
    ]
