from __future__ import annotations

from gpuhint.contract import JobEvent
from gpuhint.core import HintEngine
from gpuhint.store import InMemoryStore
from models.history import HistoryEstimator


def ev(
    phase: str, job: str, t: float, dur: float | None = None, gpus: int = 2, vc: str = "v"
) -> JobEvent:
    return JobEvent(
        phase=phase,
        job_id=job,
        user="u",
        vc=vc,
        num_gpus=gpus,
        time=t,
        submit_time=0,
        duration_s=dur,
    )


def test_hint_lifecycle_and_learning() -> None:
    store = InMemoryStore()
    engine = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), store, clock=lambda: 7.0)
    hint = engine.on_job_event(ev("submitted", "a", 0))
    assert hint is not None and hint.priority == 2 * 50 and hint.created_at == 7.0
    assert hint.duration_p10_s is not None and hint.duration_p10_s <= hint.duration_p90_s  # type: ignore[operator]
    store.flush()
    assert store.queue("default", "v") == [("a", 100.0)]

    engine.on_job_event(ev("started", "a", 1))
    store.flush()
    assert store.queue("default", "v") == [] and store.get_hint("default", "a") is None

    engine.on_job_event(ev("finished", "a", 11, dur=10))
    s = engine.stats
    assert (s.submitted, s.started, s.finished, s.learned, s.scored) == (1, 1, 1, 1, 1)
    assert s.mae_log is not None and s.mae_log > 0
    assert s.median_abs_pct_error == (50 - 10) / 10
    st = engine.states["default/v"]
    assert st.pending == {} and st.running == {}

    nxt = engine.on_job_event(ev("submitted", "b", 12))
    assert nxt is not None and nxt.predicted_duration_s == 10  # learned from "a"
    assert nxt.reasons[0].feature == "history:user+gpus"


def test_finish_without_a_prediction_still_learns() -> None:
    engine = HintEngine(HistoryEstimator, InMemoryStore())
    engine.on_job_event(ev("finished", "z", 5, dur=30))
    assert engine.stats.learned == 1 and engine.stats.scored == 0


def test_priority_is_gpus_times_expected_duration() -> None:
    from models.base import DurationPrediction

    class Fixed:
        name, version = "fixed", "1"

        def predict(self, job: JobEvent) -> DurationPrediction:
            return DurationPrediction(10.0, 1.0, 5.0, 20.0, expected_s=40.0)

        def learn(self, job: JobEvent, duration_s: float) -> None:
            return None

    hint = HintEngine(Fixed, InMemoryStore()).on_job_event(ev("submitted", "a", 0, gpus=3))
    assert hint is not None
    assert hint.predicted_duration_s == 10.0 and hint.priority == 3 * 40.0


def test_each_vc_has_its_own_model() -> None:
    engine = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), InMemoryStore())
    engine.on_job_event(ev("submitted", "a", 0, vc="x"))
    engine.on_job_event(ev("finished", "a", 5, dur=10, vc="x"))
    hx = engine.on_job_event(ev("submitted", "b", 6, vc="x"))
    hy = engine.on_job_event(ev("submitted", "c", 6, vc="y"))
    assert hx is not None and hx.predicted_duration_s == 10
    assert hy is not None and hy.predicted_duration_s == 50  # nothing leaks across VCs
    assert engine.states["default/x"].model is not engine.states["default/y"].model


def _lifecycle() -> list[JobEvent]:
    return [
        ev("submitted", "a", 0),
        ev("submitted", "b", 1),
        ev("started", "a", 2),
        ev("finished", "a", 12, dur=10),
        ev("submitted", "c", 13),
    ]


def test_redelivered_events_change_no_state_and_reemit_current_writes() -> None:
    once = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), InMemoryStore())
    for off, e in enumerate(_lifecycle()):
        once.on_job_event(e, offset=off)
    twice_store = InMemoryStore()
    twice = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), twice_store)
    events = _lifecycle()
    for off, e in enumerate(events):
        twice.on_job_event(e, offset=off)
    for off, e in enumerate(events):  # a crash before the offsets were committed
        twice.on_job_event(e, offset=off)
    a, b = once.states["default/v"], twice.states["default/v"]
    assert b.applied_offset == 4 and twice.stats.redelivered == 5
    assert twice.stats.learned == once.stats.learned == 1  # learned once, not twice
    assert a.model.state == b.model.state  # type: ignore[attr-defined]
    assert {j: p.priority for j, p in a.pending.items()} == {
        j: p.priority for j, p in b.pending.items()
    }
    twice_store.flush()
    # the redelivered submit of "a" (since started) did not resurrect its hint
    assert [j for j, _ in twice_store.queue("default", "v")] == ["c", "b"]


def test_events_without_offsets_are_always_applied() -> None:
    engine = HintEngine(HistoryEstimator, InMemoryStore())
    engine.on_job_event(ev("finished", "z", 5, dur=30))
    engine.on_job_event(ev("finished", "z", 5, dur=30))
    assert engine.stats.learned == 2 and engine.states["default/v"].applied_offset == -1


def test_started_job_is_scored_at_finish_and_rebuild_rewrites_waiting_jobs() -> None:
    store = InMemoryStore()
    engine = HintEngine(lambda: HistoryEstimator(prior_duration_s=50), store)
    for e in _lifecycle():
        engine.on_job_event(e)
    assert engine.stats.scored == 1
    store.flush()
    empty = InMemoryStore()
    engine.store = empty
    assert engine.rebuild() == 2
    empty.flush()
    assert empty.queue("default", "v") == store.queue("default", "v")


def test_vc_state_pickles_with_its_model() -> None:
    import pickle

    engine = HintEngine(HistoryEstimator, InMemoryStore())
    for off, e in enumerate(_lifecycle()):
        engine.on_job_event(e, offset=off)
    st = pickle.loads(pickle.dumps(engine.states["default/v"]))
    assert st.applied_offset == 4 and set(st.pending) == {"b", "c"}
    probe = ev("submitted", "p", 20)
    assert st.model.predict(probe) == engine.states["default/v"].model.predict(probe)
