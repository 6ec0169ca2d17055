"""The sacct feed and jobs its window does not list: held, or not yet eligible.

``sacct -S now-W`` lists a pending job only while it is eligible: Slurm 22.05 drops a
job from the listing as soon as it is held (``scontrol hold``: EligibleTime=Unknown) and
lists it again once released (seen on the loopback test cluster, 2026-12-07), while
``sacct -j ID`` still shows it. The feed must not announce such a job finished, nor
submit it a second time once it is back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from gpuhint.cores.job_tracker import SchedulerError
from gpuhint.slurm import feed as feed_mod
from gpuhint.slurm.feed import slurm_feed
from gpuhint.wire.contract import JobEvent, JobPhase


def _sacct(*jobs: dict[str, Any]) -> str:
    return json.dumps({"jobs": list(jobs)})


def _job(job_id: int, state: str, *, start: int | None = None, task: Any = None) -> dict[str, Any]:
    """A 22.05 ``sacct --json`` record (openapi dbv0.0.38)."""
    return {
        "job_id": job_id, "state": {"current": state, "reason": "None"},
        "array": {"job_id": job_id if task else 0, "task": task, "task_id": None},
        "time": {"submission": 100, "start": start, "end": None, "limit": 5},
        "nodes": "n1" if start else "None assigned", "account": "research",
        "partition": "gpu", "user": "ann", "name": "j",
        "tres": {"requested": [{"type": "gres", "name": "gpu", "count": 2}], "allocated": []},
    }  # fmt: skip


class _Slurm:
    """What ``sacct`` answers: the window's listing and the ``-j`` lookups."""

    def __init__(self) -> None:
        self.window: list[dict[str, Any]] = []
        self.by_id: dict[str, list[dict[str, Any]]] = {}
        self.lookups: list[str] = []
        self.fail_lookup = False

    def read(self, source: str | Sequence[str], *, timeout_s: float = 60.0) -> str:
        argv = list(source)
        if "--jobs" in argv:
            ids = argv[argv.index("--jobs") + 1]
            self.lookups.append(ids)
            if self.fail_lookup:
                raise SchedulerError("sacct: slurmdbd down")
            return _sacct(*(j for i in ids.split(",") for j in self.by_id.get(i, [])))
        return _sacct(*self.window)


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> _Slurm:
    fake = _Slurm()
    monkeypatch.setattr(feed_mod, "read_source", fake.read)
    return fake


def _phases(events: list[JobEvent], job_id: str) -> list[JobPhase]:
    return [e.phase for e in events if e.job_id == job_id]


def test_held_job_is_neither_finished_nor_submitted_twice(slurm: _Slurm) -> None:
    feed = slurm_feed("sacct", cluster="c")
    events: list[JobEvent] = []
    slurm.window = [_job(11, "PENDING")]
    events += feed.poll(1000.0)
    slurm.window = []  # held: gone from the window, still there for sacct -j
    slurm.by_id = {"11": [_job(11, "PENDING")]}
    for t in (1010.0, 1020.0, 1030.0):
        events += feed.poll(t)
    slurm.window = [_job(11, "RUNNING", start=1035)]  # released, started
    events += feed.poll(1040.0)
    assert _phases(events, "11") == [JobPhase.SUBMITTED, JobPhase.STARTED]
    assert slurm.lookups == ["11", "11", "11"]


def test_held_pending_array_task_is_looked_up_by_its_array(slurm: _Slurm) -> None:
    feed = slurm_feed("sacct", cluster="c")
    slurm.window = [_job(9, "PENDING", task="0x3")]
    events = feed.poll(1000.0)
    assert sorted({e.job_id for e in events}) == ["9_0", "9_1"]
    slurm.window = []
    slurm.by_id = {"9": [_job(9, "PENDING", task="0x3")]}
    events = feed.poll(1010.0) + feed.poll(1020.0) + feed.poll(1030.0)
    assert events == [] and slurm.lookups[-1] == "9"


def test_a_job_sacct_no_longer_knows_still_vanishes(slurm: _Slurm) -> None:
    feed = slurm_feed("sacct", cluster="c")
    slurm.window = [_job(12, "PENDING")]
    feed.poll(1000.0)
    slurm.window = []
    events = feed.poll(1010.0) + feed.poll(1020.0)
    assert [(e.job_id, e.phase, e.state and e.state.value) for e in events] == [
        ("12", JobPhase.FINISHED, "UNKNOWN")
    ]


def test_a_failed_lookup_is_a_failed_poll(slurm: _Slurm) -> None:
    feed = slurm_feed("sacct", cluster="c")
    slurm.window = [_job(13, "PENDING")]
    feed.poll(1000.0)
    slurm.window = []
    slurm.fail_lookup = True
    assert feed.poll(1010.0) + feed.poll(1020.0) + feed.poll(1030.0) == []
    assert feed.failures == 3 and feed.last_poll == 1000.0
