"""Cancelled jobs (a ``finished`` without a duration) in the FIFO guard and the
starvation bound of the hint core."""

from __future__ import annotations

from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent
from models.history import HistoryEstimator
from tests.cores.test_qssf_wait_bound import _Truth


def _ev(phase: str, jid: str, t: float, sub: float, **kw: object) -> JobEvent:
    return JobEvent(
        phase=phase,  # type: ignore[arg-type]
        job_id=jid,
        user="u",
        num_gpus=8,
        time=t,
        submit_time=sub,
        **kw,  # type: ignore[arg-type]
    )


def _run_after(engine: HintEngine, n: int, t: float) -> None:
    """``n`` jobs submitted at 2.., run one after another from ``t``, 100 s each."""
    for i in range(n):
        engine.on_job_event(_ev("submitted", f"j{i}", 2 + i, 2 + i))
    for i in range(n):
        engine.on_job_event(_ev("started", f"j{i}", t, 2 + i, start_time=t))
        t += 100
        engine.on_job_event(
            _ev("finished", f"j{i}", t, 2 + i, start_time=t - 100, duration_s=100.0)
        )


def test_a_job_cancelled_while_waiting_does_not_stall_the_fifo_shadow() -> None:
    engine = HintEngine(HistoryEstimator, InMemoryStore(), clock=lambda: 0.0)
    engine.on_job_event(_ev("submitted", "c", 0, 0))
    engine.on_job_event(_ev("finished", "c", 1, 0, state="CANCELLED"))  # never ran
    _run_after(engine, 300, 400.0)
    st = engine.states["default/default"]
    assert "c" not in st.guard.open
    assert st.guard.shadow.jobs == 300  # every finished job reached FIFO's shadow
    assert st.guard.checks > 0  # the guard compares with FIFO again
    assert st.bound.scale == st.guard.shadow.max_wait > 0  # the bound has a limit


def test_a_job_cancelled_while_running_does_not_stall_the_fifo_shadow() -> None:
    engine = HintEngine(HistoryEstimator, InMemoryStore(), clock=lambda: 0.0)
    engine.on_job_event(_ev("submitted", "c", 0, 0))
    engine.on_job_event(_ev("started", "c", 1, 0, start_time=1))
    engine.on_job_event(_ev("finished", "c", 300, 0, start_time=1, state="CANCELLED"))
    _run_after(engine, 300, 400.0)
    st = engine.states["default/default"]
    assert "c" not in st.guard.open and st.guard.shadow.jobs == 300
    assert st.running_gpus == 0


def test_a_cancel_releases_the_jobs_held_behind_it_to_the_shadow() -> None:
    """The jobs after a cancelled head already finished: they reach the shadow (and
    the bound its scale) at the cancel, not at some later finish."""
    engine = HintEngine(HistoryEstimator, InMemoryStore(), clock=lambda: 0.0)
    engine.on_job_event(_ev("submitted", "c", 0, 0))
    for i, t in enumerate((1.0, 2.0)):
        engine.on_job_event(_ev("submitted", f"j{i}", t, t))
    engine.on_job_event(_ev("started", "j0", 3, 1, start_time=3))
    engine.on_job_event(_ev("finished", "j0", 103, 1, start_time=3, duration_s=100.0))
    engine.on_job_event(_ev("started", "j1", 103, 2, start_time=103))
    engine.on_job_event(_ev("finished", "j1", 203, 2, start_time=103, duration_s=100.0))
    st = engine.states["default/default"]
    assert st.guard.shadow.jobs == 0  # held behind c
    engine.on_job_event(_ev("finished", "c", 204, 0, state="CANCELLED"))
    assert st.guard.shadow.jobs == 2 and list(st.guard.open) == []
    assert st.bound.scale == st.guard.shadow.max_wait == 99.0  # j1 behind j0 (FIFO)


def test_a_cancelled_overdue_job_releases_the_front() -> None:
    truth = {"a": 100.0, "b": 10.0, "c": 1.0, "d": 1.0}
    engine = HintEngine(lambda: _Truth(truth), InMemoryStore(), wait_bound=2.0)
    engine.state("default", "default").bound.scale = 10.0  # limit 20 s

    def sub(jid: str, t: float) -> JobEvent:
        return JobEvent(phase="submitted", job_id=jid, num_gpus=1, time=t, submit_time=t)

    for jid, t in (("a", 100.0), ("b", 101.0), ("c", 102.0), ("d", 130.0)):
        engine.on_job_event(sub(jid, t))
    assert [h.job_id for h in engine.updates] == ["a"]
    engine.on_job_event(
        JobEvent(phase="finished", job_id="a", num_gpus=1, time=131, submit_time=100)
    )
    assert [h.job_id for h in engine.updates] == ["b"]


def test_a_job_cancelled_while_running_stops_raising_its_siblings_hints() -> None:
    """The model forgets a cancelled running job: its running time no longer counts as
    evidence that its waiting sibling runs long (before: that sibling's expected
    duration grew with the clock for ever, the engine never told the model)."""
    from models.registry import make_model

    def sibling(jid: str, t: float, **kw: object) -> JobEvent:
        return _ev(kw.pop("phase", "submitted"), jid, t, t, name="train", **kw)  # type: ignore[arg-type]

    engine = HintEngine(lambda: make_model("history_mix"), InMemoryStore(), clock=lambda: 0.0)
    for i in range(10):  # the user's jobs of this name run 600 s
        t = 1000.0 * i
        engine.on_job_event(sibling(f"h{i}", t))
        engine.on_job_event(sibling(f"h{i}", t, phase="started", start_time=t))
        engine.on_job_event(
            sibling(f"h{i}", t + 600, phase="finished", start_time=t, duration_s=600.0)
        )
    engine.on_job_event(sibling("c", 20_000.0))
    engine.on_job_event(sibling("w", 20_010.0))
    engine.on_job_event(sibling("c", 20_020.0, phase="started", start_time=20_020.0))
    st = engine.states["default/default"]
    w = st.pending["w"].event
    engine.on_job_event(sibling("c", 20_030.0, phase="finished", state="CANCELLED"))
    later = st.model.expected_one(w, 20_030.0 + 11 * 86400.0)  # type: ignore[attr-defined]
    assert later < 10 * 600.0
