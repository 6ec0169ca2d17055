"""``gpuhint.wire.topics``: the documented key choice that spreads a VC-less trace."""

from __future__ import annotations

from collections import Counter

from gpuhint.cli.replay import spread_events
from gpuhint.cores.pipeline.partitioning import partition_for
from gpuhint.wire.contract import JobEvent, JobPhase
from gpuhint.wire.topics import base_vc, job_key, spread_vc


def test_spread_vc_is_stable_per_user_and_spreads_users() -> None:
    users = [f"user{i}" for i in range(400)]
    subs = [spread_vc("default", u, 8) for u in users]
    assert subs == [spread_vc("default", u, 8) for u in users]  # deterministic
    counts = Counter(subs)
    assert set(counts) == {f"default~{k}" for k in range(8)}
    assert max(counts.values()) < 2 * min(counts.values())
    assert all(base_vc(s) == "default" for s in subs) and base_vc("vcA") == "vcA"
    assert spread_vc("vcA", "u", 1) == "vcA" and spread_vc("vcA", None, 4) == "vcA~0"


def test_jobs_without_a_user_spread_by_job_id() -> None:
    """ITP traces have no user: the job id spreads them (else all would share sub-VC 0)."""
    subs = Counter(spread_vc("default", None, 4, f"job-{i}") for i in range(200))
    assert len(subs) == 4
    assert spread_vc("default", "alice", 4, "x") == spread_vc("default", "alice", 4, "y")


def test_spread_sub_vcs_reach_several_partitions() -> None:
    """N keys reach fewer than N partitions (hash collisions; docs/architecture.md gives
    the measured share): 8 keys of cluster itp use 3 of 4, 32 use every one."""
    keys = {job_key("itp", spread_vc("default", f"u{i}", 8)) for i in range(100)}
    assert len(keys) == 8
    assert len({partition_for(k, 4) for k in keys}) == 3
    many = {job_key("itp", spread_vc("default", f"u{i}", 32)) for i in range(1000)}
    assert len({partition_for(k, 4) for k in many}) == 4


def test_spread_events_keeps_each_users_jobs_on_one_key() -> None:
    evs = [
        JobEvent(
            phase=p,
            job_id=f"j{i}",
            user=f"u{i % 7}",
            time=i,
            submit_time=0,
            start_time=0 if p != JobPhase.SUBMITTED else None,
        )
        for i in range(30)
        for p in (JobPhase.SUBMITTED, JobPhase.STARTED)
    ]
    out = spread_events(evs, 4)
    by_job: dict[str, set[str]] = {}
    for e in out:
        by_job.setdefault(e.job_id, set()).add(e.vc)
    assert all(len(v) == 1 for v in by_job.values())
    assert len({e.vc for e in out}) > 1
    assert [(e.job_id, e.phase) for e in out] == [(e.job_id, e.phase) for e in evs]
    assert spread_events(evs, 1) is evs
