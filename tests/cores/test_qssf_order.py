"""Out-of-order events in the hint core: a ``started`` before its ``submitted``."""

from __future__ import annotations

import math
import pickle

from gpuhint.cores.qssf import HintEngine, VcState
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import JobEvent, JobPhase
from models.history import HistoryEstimator
from tests.cores.test_qssf_wait_bound import _Truth


def _ev(phase: str, job: str, t: float, dur: float | None = None, sub: float = 0) -> JobEvent:
    return JobEvent(
        phase=JobPhase(phase),
        job_id=job,
        user="u",
        vc="v",
        num_gpus=2,
        time=t,
        submit_time=sub,
        duration_s=dur,
        start_time=None if phase == "submitted" else 1,
    )


def _engine(store: InMemoryStore) -> HintEngine:
    return HintEngine(lambda: HistoryEstimator(prior_duration_s=50), store, clock=lambda: 1.0)


def test_a_start_before_its_submit_leaves_no_waiting_hint() -> None:
    store = InMemoryStore()
    engine = _engine(store)
    engine.on_job_event(_ev("started", "a", 1))  # redelivered out of order
    engine.on_job_event(_ev("submitted", "a", 0))  # the job already runs
    st = engine.states["default/v"]
    store.flush()
    assert "a" not in st.pending and "a" in st.running
    assert store.get_hint("default", "a") is None
    assert st.running_gpus == 2 and not st.bound.heap and "a" not in st.guard.open
    assert (engine.stats.started, engine.stats.submitted, engine.stats.duplicates) == (1, 0, 1)
    engine.on_job_event(_ev("finished", "a", 60, dur=59.0))
    assert st.running_gpus == 0 and "a" not in st.running
    assert engine.stats.learned == 1 and engine.stats.scored == 0  # no forecast to score


def test_a_resent_start_of_an_unseen_job_counts_once() -> None:
    engine = _engine(InMemoryStore())
    engine.on_job_event(_ev("started", "a", 1))
    engine.on_job_event(_ev("started", "a", 1))  # a producer's resend
    assert (engine.stats.started, engine.stats.duplicates) == (1, 1)
    assert engine.states["default/v"].running_gpus == 2


def test_a_running_job_never_holds_the_starvation_front() -> None:
    truth = {"z": 5.0, "a": 100.0, "b": 1.0}
    engine = HintEngine(lambda: _Truth(truth), InMemoryStore(), wait_bound=2.0)
    engine.state("default", "default").bound.scale = 10.0  # limit 20 s

    def ev(phase: str, jid: str, t: float, sub: float) -> JobEvent:
        return JobEvent(phase=phase, job_id=jid, num_gpus=1, time=t, submit_time=sub)  # type: ignore[arg-type]

    engine.on_job_event(ev("started", "z", 101, 100))  # arrives before its submit
    engine.on_job_event(ev("submitted", "z", 100, 100))
    engine.on_job_event(ev("submitted", "a", 102, 102))
    engine.on_job_event(ev("submitted", "b", 200, 200))  # a has waited 98 s > 20 s
    # z runs since 101: a is the job that starves and goes to the front
    assert [h.job_id for h in engine.updates] == ["a"]


def test_a_state_with_an_unscored_running_job_pickles() -> None:
    engine = _engine(InMemoryStore())
    engine.on_job_event(_ev("started", "a", 1))
    st: VcState = pickle.loads(pickle.dumps(engine.states["default/v"]))
    assert math.isnan(st.running["a"]) and st.running_gpus == 2
