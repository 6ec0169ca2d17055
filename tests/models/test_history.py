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
