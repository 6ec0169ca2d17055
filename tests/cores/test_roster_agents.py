"""Rosters from more than one agent: misses count across one agent's rosters, so two
agents publishing under one cluster name retire nothing of each other's, and say so."""

from __future__ import annotations

import logging

import pytest

from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobRoster
from models.history import HistoryEstimator
from tests.cores.test_qssf_roster import _ev


def _engine() -> HintEngine:
    return HintEngine(HistoryEstimator, InMemoryStore(), clock=lambda: 0.0)


def _roster(epoch: float, agent: str | None, *ids: str, **kw: object) -> JobRoster:
    return JobRoster(vc="a", epoch=epoch, agent=agent, job_ids=ids, **kw)  # type: ignore[arg-type]


def _two_agents_jobs(engine: HintEngine) -> None:
    """``a1`` is agent A's job, ``b1`` agent B's, both waiting in VC ``a``."""
    engine.on_job_event(_ev("submitted", "a1", 0))
    engine.on_job_event(_ev("submitted", "b1", 1, submit_time=1.0))


def test_two_agents_under_one_cluster_name_retire_nothing_of_each_others() -> None:
    """Each lists only its own job. Rosters carried no agent before: two of A's in a row
    (the agents' clocks drift, one restarts) retired B's job, and B's A's."""
    engine = _engine()
    _two_agents_jobs(engine)
    retired = []
    for k, agent in enumerate("ABAABBABBAAB"):  # two free-running agents, drifting
        own = "a1" if agent == "A" else "b1"
        retired += engine.on_roster(_roster(60.0 * (k + 1), agent, own))
    assert retired == [], f"{[e.job_id for e in retired]} retired by the other agent's rosters"
    assert set(engine.states["default/a"].pending) == {"a1", "b1"}


def test_when_the_other_agent_stops_its_jobs_are_retired_at_last() -> None:
    """B is gone for good (its jobs' ends can never be announced): A's rosters count
    again once B's last one is older than A's roster before last."""
    engine = _engine()
    _two_agents_jobs(engine)
    retired: list[str] = []
    for k, agent in enumerate("ABABAAAA"):
        own = "a1" if agent == "A" else "b1"
        retired += [e.job_id for e in engine.on_roster(_roster(60.0 * (k + 1), agent, own))]
        if k == 5:
            assert retired == []  # B's last roster is still recent
    assert retired == ["b1"]


def test_their_alternation_is_counted_and_logged_at_most_hourly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = _engine()
    _two_agents_jobs(engine)
    with caplog.at_level(logging.WARNING, logger="gpuhint.cores.qssf"):
        for k in range(8):  # A, B, A, B, ... a minute apart
            agent, own = ("A", "a1") if k % 2 == 0 else ("B", "b1")
            engine.on_roster(_roster(60.0 * (k + 1), agent, own))
    assert engine.stats.roster_switchbacks == 6  # from the third roster on
    lines = [r.getMessage() for r in caplog.records if "two scheduler agents" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "GPUHINT_CLUSTER" in lines[0]


def test_a_handover_to_another_agent_retires_two_rosters_later() -> None:
    """The agent restarted (a new identity) or moved, and the job ended meanwhile: the
    new agent's rosters count once the old one's last roster is older than the new
    one's roster before last; no alternation is reported."""
    engine = _engine()
    engine.on_job_event(_ev("submitted", "gone", 0))
    for epoch in (60, 120):
        assert engine.on_roster(_roster(epoch, "A", "gone")) == []
    for epoch in (200, 260, 320):
        assert engine.on_roster(_roster(epoch, "B")) == [], epoch
    retired = engine.on_roster(_roster(380, "B"))
    assert [e.job_id for e in retired] == ["gone"]
    assert engine.stats.roster_switchbacks == 0


def test_one_agents_rosters_still_retire_after_two() -> None:
    engine = _engine()
    engine.on_job_event(_ev("submitted", "gone", 0))
    assert engine.on_roster(_roster(60, "A")) == []
    assert [e.job_id for e in engine.on_roster(_roster(120, "A"))] == ["gone"]


def test_rosters_of_an_idle_vc_still_show_the_other_agent() -> None:
    """Both agents roster VC ``a`` while it holds no job (every VC the scheduler defines
    is rostered), and the worker skips those as nothing to reconcile; B's first job
    there must not be retired by two of A's rosters before B's next one (review
    2026-12-08: the skipped rosters left B unknown)."""
    engine = _engine()
    for epoch, agent in ((0, "A"), (150, "B"), (300, "A"), (450, "B")):
        assert engine.on_roster(_roster(epoch, agent)) == []
    engine.on_job_event(_ev("submitted", "b1", 500, submit_time=500.0))
    retired = engine.on_roster(_roster(600, "A")) + engine.on_roster(_roster(650, "A"))
    assert retired == [], f"{[e.job_id for e in retired]}: B's job retired by A's rosters"


def test_an_agent_whose_rosters_never_complete_here_is_still_heard() -> None:
    """B's one-part roster lands between A's two parts (two producers, one partition):
    A's rosters are void as rosters, but A is there, so B's rosters must not retire A's
    job (review 2026-12-08)."""
    engine = _engine()
    _two_agents_jobs(engine)
    retired = []
    for k in range(4):
        e = 60.0 + 60 * k
        retired += engine.on_roster(_roster(e, "A", "a1", part=0, last=False))
        retired += engine.on_roster(_roster(e + 30, "B", "b1"))
        retired += engine.on_roster(_roster(e, "A", part=1, last=True))
    assert retired == [], f"{[e.job_id for e in retired]}: A's job retired by B's rosters"
