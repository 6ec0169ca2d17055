"""Rosters in the hint core: jobs whose end was never announced are retired."""

from __future__ import annotations

import logging
import pickle

import pytest

from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, JobRoster, JobState
from models.history import HistoryEstimator


def _ev(phase: str, jid: str, t: float, **kw: object) -> JobEvent:
    return JobEvent(
        phase=phase,  # type: ignore[arg-type]
        job_id=jid,
        vc="a",
        user="u",
        num_gpus=kw.pop("num_gpus", 8),  # type: ignore[arg-type]
        time=t,
        submit_time=kw.pop("submit_time", 0.0),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def _roster(epoch: float, *ids: str, part: int = 0, last: bool = True) -> JobRoster:
    return JobRoster(vc="a", epoch=epoch, part=part, last=last, job_ids=ids)


def _engine() -> tuple[HintEngine, InMemoryStore]:
    store = InMemoryStore()
    return HintEngine(HistoryEstimator, store, clock=lambda: 0.0), store


def _waiting_and_running(engine: HintEngine) -> None:
    """``w`` and ``w2`` wait; ``r`` runs (8 GPUs)."""
    engine.on_job_event(_ev("submitted", "w", 0))
    engine.on_job_event(_ev("submitted", "w2", 1, submit_time=1.0))
    engine.on_job_event(_ev("submitted", "r", 2, submit_time=2.0))
    engine.on_job_event(_ev("started", "r", 3, submit_time=2.0, start_time=3.0))


def test_a_job_left_out_of_two_rosters_in_a_row_is_retired_as_unknown() -> None:
    engine, store = _engine()
    _waiting_and_running(engine)
    assert engine.on_roster(_roster(60, "w2")) == []  # one miss: not yet
    retired = engine.on_roster(_roster(120, "w2"))
    assert sorted(e.job_id for e in retired) == ["r", "w"]
    assert {e.state for e in retired} == {JobState.UNKNOWN}
    assert all(e.duration_s is None for e in retired)  # nothing learned from them
    st = engine.states["default/a"]
    assert list(st.pending) == ["w2"] and st.running == {} and st.running_gpus == 0
    assert "r" not in st.starts.running  # no longer holds the forecast's GPUs
    store.flush()
    assert [j for j, _ in store.queue("default", "a")] == ["w2"]  # w's hint removed
    assert engine.stats.retired == 2 and engine.stats.learned == 0
    assert engine.stats.rosters == 2


def test_a_job_listed_in_between_starts_counting_again() -> None:
    engine, _ = _engine()
    _waiting_and_running(engine)
    engine.on_roster(_roster(60, "w2", "r"))  # w missed once
    engine.on_roster(_roster(120, "w", "w2", "r"))  # listed: the count starts over
    assert engine.on_roster(_roster(180, "w2", "r")) == []
    assert [e.job_id for e in engine.on_roster(_roster(240, "w2", "r"))] == ["w"]


def test_a_roster_with_a_lost_part_retires_nothing() -> None:
    engine, _ = _engine()
    _waiting_and_running(engine)
    for epoch in (60, 120, 180):  # part 0 (listing w and r) never arrives
        assert engine.on_roster(_roster(epoch, "w2", part=1, last=True)) == []
    assert set(engine.states["default/a"].pending) == {"w", "w2"}


def test_a_roster_in_parts_counts_every_part() -> None:
    engine, _ = _engine()
    _waiting_and_running(engine)
    for epoch in (60, 120):
        engine.on_roster(_roster(epoch, "w", part=0, last=False))
        retired = engine.on_roster(_roster(epoch, "r", part=1, last=True))
    assert [e.job_id for e in retired] == ["w2"]


def test_jobs_submitted_after_the_roster_epoch_never_miss_it() -> None:
    engine, _ = _engine()
    engine.on_job_event(_ev("submitted", "late", 500, submit_time=500.0))
    assert engine.on_roster(_roster(60)) == [] and engine.on_roster(_roster(120)) == []
    assert "late" in engine.states["default/a"].pending


def test_a_redelivered_roster_is_not_applied_twice() -> None:
    engine, _ = _engine()
    _waiting_and_running(engine)
    engine.on_roster(_roster(60, "w2", "r"), offset=10)
    engine.on_roster(_roster(60, "w2", "r"), offset=10)  # the same record again
    assert engine.states["default/a"].roster_missed == {"w": 1}
    assert engine.states["default/a"].applied_offset == 10


def test_an_empty_roster_of_an_unknown_vc_creates_no_state() -> None:
    engine, _ = _engine()
    assert engine.on_roster(JobRoster(vc="other", epoch=60)) == []
    assert "default/other" not in engine.states


def test_the_roster_bookkeeping_survives_a_restore() -> None:
    engine, _ = _engine()
    _waiting_and_running(engine)
    engine.on_roster(_roster(60, "w2", "r"))
    restored, _ = _engine()
    restored.states["default/a"] = pickle.loads(pickle.dumps(engine.states["default/a"]))
    assert [e.job_id for e in restored.on_roster(_roster(120, "w2", "r"))] == ["w"]


def test_a_state_pickled_before_rosters_loads_with_empty_bookkeeping() -> None:
    engine, _ = _engine()
    _waiting_and_running(engine)
    st = engine.states["default/a"]
    old = {k: v for k, v in st.__getstate__().items() if not k.startswith("roster_")}
    fresh = object.__new__(type(st))
    fresh.__setstate__(old)
    assert fresh.roster_missed == {} and fresh.roster_seen == {}
    assert fresh.roster_epoch[1] == 0


def test_a_job_retired_by_mistake_comes_back_when_announced_again() -> None:
    engine, _ = _engine()
    _waiting_and_running(engine)
    engine.on_roster(_roster(60, "w2", "r"))
    assert [e.job_id for e in engine.on_roster(_roster(120, "w2", "r"))] == ["w"]
    # the agent lists or announces w again (it was alive): applied, not taken as a resend
    assert engine.on_job_event(_ev("submitted", "w", 130)) is not None
    assert "w" in engine.states["default/a"].pending


def test_a_roster_that_retires_many_jobs_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    engine, _ = _engine()
    for i in range(30):
        engine.on_job_event(_ev("submitted", f"w{i}", i, submit_time=float(i)))
    engine.on_roster(_roster(60))
    with caplog.at_level(logging.WARNING, logger="gpuhint.cores.qssf"):
        assert len(engine.on_roster(_roster(120))) == 30
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("default/a: 30 job(s) retired") and line.endswith("w9, ...")


def test_an_empty_roster_of_a_vc_holding_no_job_writes_nothing() -> None:
    """Every VC the scheduler defines gets a roster each period: one that holds no job
    (or none at all) must not be rewritten to the changelog for it."""
    from gpuhint.cores.pipeline.state_table import TableStates

    table: dict[str, bytes] = {}
    states = TableStates(table)
    engine = HintEngine(HistoryEstimator, InMemoryStore(), clock=lambda: 0.0, states=states)
    assert engine.on_roster(JobRoster(vc="quiet", epoch=60), offset=5) == []
    assert list(states) == [] and not states.dirty and table == {}
    engine.on_job_event(_ev("submitted", "1", 0), offset=1)
    engine.on_job_event(_ev("finished", "1", 5, state="COMPLETED", duration_s=5.0), offset=2)
    states.save_dirty()
    engine.on_roster(_roster(600), offset=3)
    assert not states.dirty
