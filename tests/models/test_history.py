from __future__ import annotations

import pickle

from gpuhint.wire.contract import JobEvent
from models.history import HistoryEstimator


def job(user: str | None, gpus: int, vc: str = "v") -> JobEvent:
    return JobEvent(
        phase="submitted", job_id="x", vc=vc, user=user, num_gpus=gpus, time=0, submit_time=0
    )


def test_fallback_levels() -> None:
    m = HistoryEstimator(prior_duration_s=999)
    assert m.predict(job("u", 1)).duration_s == 999
    m.learn(job("u", 1), 100)
    m.learn(job("u", 8), 1000)
    m.learn(job("w", 4), 4000)
    assert m.predict(job("u", 1)).duration_s == 100  # same user, same size
    assert m.predict(job("u", 2)).duration_s == 550  # same user, any size
    assert m.predict(job("new", 2)).duration_s == (100 + 1000 + 4000) / 3  # the VC
    assert m.predict(job(None, 2)).duration_s == (100 + 1000 + 4000) / 3
    assert m.predict(job("u", 1, vc="other")).duration_s == 999  # state is per VC


def test_band_and_pickle() -> None:
    m = HistoryEstimator()
    for d in (10, 100, 1000):
        m.learn(job("u", 1), d)
    p = m.predict(job("u", 1))
    assert p.p10_s < p.p90_s and p.log_std > 0
    clone = pickle.loads(pickle.dumps(m))
    assert clone.predict(job("u", 1)) == p


def test_the_point_forecast_stays_inside_the_band() -> None:
    """A heavy tail puts the mean past the band's p90 (the band is built in log): the
    point forecast is kept inside it; the expected duration (the rank) stays the mean."""
    m = HistoryEstimator()
    for d in (1.0, 1.0, 1.0, 1.0, 1e6):
        m.learn(job("u", 1), d)
    p = m.predict(job("u", 1))
    assert p.p10_s <= p.duration_s <= p.p90_s
    assert p.duration_s == p.p90_s < p.expected_s == (4.0 + 1e6) / 5


def test_a_time_limit_still_bounds_the_mean() -> None:
    m = HistoryEstimator()
    for d in (1.0, 1.0, 1.0, 1.0, 1e6):
        m.learn(job("u", 1), d)
    limited = job("u", 1).model_copy(update={"time_limit_s": 50_000.0})
    p = m.predict(limited)
    assert p.duration_s == p.expected_s == 50_000.0
    assert p.p10_s <= p.duration_s <= p.p90_s


def test_a_history_hint_band_contains_its_point() -> None:
    from gpuhint.cores.qssf import HintEngine
    from gpuhint.cores.sink import InMemoryStore

    engine = HintEngine(HistoryEstimator, InMemoryStore(), clock=lambda: 0.0)
    for i, d in enumerate((1.0, 1.0, 1.0, 1.0, 1e6)):
        engine.on_job_event(
            JobEvent(
                phase="finished",
                job_id=f"f{i}",
                vc="v",
                user="u",
                num_gpus=1,
                time=0,
                submit_time=0,
                duration_s=d,
            )
        )
    h = engine.on_job_event(job("u", 1))
    assert h is not None and h.duration_p10_s is not None and h.duration_p90_s is not None
    assert h.duration_p10_s <= h.predicted_duration_s <= h.duration_p90_s
