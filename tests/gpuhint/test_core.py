from __future__ import annotations

from gpuhint.contract import JobEvent
from gpuhint.core import HintEngine
from gpuhint.store import InMemoryStore
from models.history import HistoryEstimator


def ev(phase: str, job: str, t: float, dur: float | None = None, gpus: int = 2) -> JobEvent:
    return JobEvent(
        phase=phase,
        job_id=job,
        user="u",
        vc="v",
        num_gpus=gpus,
        time=t,
        submit_time=0,
        duration_s=dur,
    )


def test_hint_lifecycle_and_learning() -> None:
    store = InMemoryStore()
    engine = HintEngine(HistoryEstimator(prior_duration_s=50), store, clock=lambda: 7.0)
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
    assert engine.predictions == {}

    nxt = engine.on_job_event(ev("submitted", "b", 12))
    assert nxt is not None and nxt.predicted_duration_s == 10  # learned from "a"
    assert nxt.reasons[0].feature == "history:user+gpus"


def test_finish_without_a_prediction_still_learns() -> None:
    engine = HintEngine(HistoryEstimator(), InMemoryStore())
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

    hint = HintEngine(Fixed(), InMemoryStore()).on_job_event(ev("submitted", "a", 0, gpus=3))
    assert hint is not None
    assert hint.predicted_duration_s == 10.0 and hint.priority == 3 * 40.0
