"""Review tests of the duration models' edge cases: purity, bounded state, keys that
cannot collide across users (each written to fail on the code before its fix)."""

from __future__ import annotations

import math
import pickle
import random

import pytest

from gpuhint.wire.contract import JobEvent, JobPhase
from models.base import DurationPrediction
from models.duration_river import (
    ForestDurationModel,
    KeyedDurationModel,
    LinearDurationModel,
    TreeDurationModel,
)
from models.features import HistoryFeatures
from models.history import HistoryEstimator

KEYED = (KeyedDurationModel, LinearDurationModel, TreeDurationModel, ForestDurationModel)


def _job(i: int, user: str | None = "u", gpus: int = 1, t: float | None = None, **kw: object):
    t = 1000.0 * i if t is None else t
    return JobEvent(
        phase=JobPhase.SUBMITTED,
        job_id=str(i),
        vc="vc1",
        user=user,
        num_gpus=gpus,
        time=t,
        submit_time=t,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("cls", KEYED, ids=lambda c: c.name)
def test_predict_one_does_not_change_which_history_is_forgotten(cls: type) -> None:
    """``predict_one`` is pure: it must not refresh the keys' LRU order, or a later
    eviction forgets another user's history and later predictions change."""

    def run(peek: bool) -> tuple[float, float]:
        m = cls(features=HistoryFeatures(max_keys=8))
        m.learn(_job(1, "a", t=0.0), 100.0)
        m.learn(_job(2, "b", t=10_000.0), 5000.0)
        if peek:
            m.predict_one(_job(3, "a", t=20_000.0))
        m.learn(_job(4, "c", gpus=2, t=40_000.0), 70.0)
        return (
            m.predict_one(_job(5, "a", t=90_000.0)).duration_s,
            m.predict_one(_job(6, "b", t=90_000.0)).duration_s,
        )

    assert run(peek=True) == run(peek=False)


def test_jobs_started_and_never_finished_do_not_grow_the_state_without_bound() -> None:
    """A job cancelled while running ends without a duration, so no model learns it:
    its running record must not stay forever (memory on a long run)."""
    m = KeyedDurationModel(features=HistoryFeatures(max_keys=50, max_pending=20), max_pending=20)
    for i in range(500):
        job = _job(i, user=f"user{i}", t=100.0 * i)
        m.predict(job)
        m.observe_start(job)  # then cancelled: no learn
    assert len(m.hist.run_of) <= 20
    assert len(m.hist.running) <= 20
    # what is left is consistent: each burst counts exactly its recorded running jobs
    counts: dict[str, float] = {}
    for b, _ in m.hist.run_of.values():
        counts[b] = counts.get(b, 0.0) + 1.0
    assert {b: r[0] for b, r in m.hist.running.items()} == counts


def test_history_baseline_state_is_bounded() -> None:
    """The paper's rule keeps per-key sums: many distinct users must not grow them
    without bound; the least recently learned keys go, recent users keep theirs."""
    m = HistoryEstimator(max_keys=30)
    for i in range(1000):
        m.learn(_job(i, user=f"user{i}"), 100.0 + i)
    assert len(m.state) <= 30
    recent = m.predict(_job(2000, user="user999"))
    assert recent.reasons[0][0] == "history:user+gpus"
    assert recent.expected_s == pytest.approx(1099.0)
    back = pickle.loads(pickle.dumps(m))  # the bound survives a checkpoint
    for i in range(1000, 1100):
        back.learn(_job(i, user=f"user{i}"), 1.0)
    assert len(back.state) <= 30


def test_history_baseline_state_of_before_the_bound_restores() -> None:
    m = HistoryEstimator()
    m.learn(_job(1), 100.0)
    state = m.__dict__.copy()
    state.pop("max_keys", None)  # what a pickle of before the bound holds
    old = HistoryEstimator.__new__(HistoryEstimator)
    old.__dict__.update(state)
    back = pickle.loads(pickle.dumps(old))
    back.learn(_job(2), 300.0)
    assert back.predict(_job(3)).expected_s == pytest.approx(200.0)


def test_history_baseline_users_named_with_the_separator_do_not_share_history() -> None:
    """User ``alice|g|1`` is not alice's 1-GPU jobs: the paper's rule must not learn
    one user's jobs into another's statistics (a user could move another's priority)."""
    m = HistoryEstimator()
    for i in range(5):
        m.learn(_job(i, user="alice", gpus=1), 100.0)
    before = m.predict(_job(10, user="alice", gpus=1))
    for i in range(20, 40):
        m.learn(_job(i, user="alice|g|1", gpus=4), 90_000.0)
    assert m.predict(_job(11, user="alice", gpus=1)) == before


def _sweep_job(i: int, t: float, start: float | None = None) -> JobEvent:
    return JobEvent(
        phase=JobPhase.STARTED if start is not None else JobPhase.SUBMITTED,
        job_id=str(i),
        user="u",
        name="sweep_1",
        num_gpus=1,
        time=t if start is None else start,
        submit_time=t,
        start_time=start,
    )


@pytest.mark.parametrize("cls", KEYED, ids=lambda c: c.name)
def test_a_job_cancelled_while_running_stops_counting_as_its_bursts_evidence(cls: type) -> None:
    """A running job that ends without a duration (cancelled) is never learned; once
    forgotten, its running time must stop raising its waiting siblings' expectation
    (before: it grew with ``now`` for ever, 1.7e6 s after 11 days)."""
    m = cls()
    for i in range(10):
        j = _sweep_job(i, 10.0 * i)
        m.predict(j)
        m.observe_start(j)
        m.learn(j, 600.0)
    cancelled, waiting = _sweep_job(100, 5000.0), _sweep_job(101, 5010.0)
    m.predict(cancelled)
    m.predict(waiting)
    never_started = pickle.loads(pickle.dumps(m))
    m.observe_start(_sweep_job(100, 5000.0, start=5020.0))
    assert m.expected_one(waiting, 1e6) > 10 * never_started.expected_one(waiting, 1e6)
    m.forget(cancelled)
    never_started.forget(cancelled)
    assert m.expected_one(waiting, 1e6) == never_started.expected_one(waiting, 1e6)
    assert m.predict_one(waiting) == never_started.predict_one(waiting)
    jk = m.hist.job_key(cancelled)
    assert jk not in m._pending and jk not in m.hist.pending and not m.hist.run_of
    m.forget(cancelled)  # again, or a job never seen: nothing to do
    m.forget(_sweep_job(555, 1.0))


def test_forgetting_a_waiting_job_releases_its_queue_state() -> None:
    """A job cancelled while waiting no longer counts as in flight for its user."""
    m = LinearDurationModel()
    m.learn(_job(1, t=0.0), 100.0)
    jobs = [_job(i, t=10.0 * i) for i in range(2, 12)]
    for j in jobs:
        m.predict(j)
    for j in jobs[:-1]:
        m.forget(j)
    x, _, _ = m.hist.features(jobs[-1])
    assert x["user:inflight"] == 0.0 and x["vc:inflight"] == 0.0
    assert len(m._pending) == 1 and len(m.hist.pending) == 1


def test_the_history_baseline_forgets_nothing() -> None:
    m = HistoryEstimator()
    m.learn(_job(1), 100.0)
    before = pickle.dumps(m)
    m.forget(_job(2))
    assert pickle.dumps(m) == before


def _odd_stream(seed: int, n: int = 250) -> list[tuple[JobEvent, float]]:
    """Valid but odd jobs: 0 and 1 s, a year, limits of 0, of the duration, tiny ones,
    unicode and separator names, new users each time, up to the contract's GPU maximum."""
    from gpuhint.wire.contract import MAX_DURATION_S, MAX_GPUS

    rng = random.Random(seed)
    out = []
    for i in range(n):
        dur = rng.choice([0.0, 1.0, 0.4, MAX_DURATION_S, rng.expovariate(1 / 3600)])
        lim = rng.choice([None, 0.0, dur, 1e-9, 1.0, 3600.0, MAX_DURATION_S])
        user = rng.choice(["a", "ü-ß", "a|g|1", "", None, f"new{i}"])
        name = rng.choice([None, "", "训练_1", f"r{i}|x"])
        gpus = rng.choice([0, 1, 8, MAX_GPUS])
        out.append((_job(i, user=user, gpus=gpus, name=name, time_limit_s=lim), dur))
    return out


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", ["history", *(c.name for c in KEYED)])
def test_odd_valid_streams_keep_every_prediction_sound(name: str, seed: int) -> None:
    from models.checkpoint import dumps, loads
    from models.registry import make_model

    m = make_model(name)
    rng = random.Random(seed + 100)
    for job, dur in _odd_stream(seed):
        peek = m.predict_one(job)
        p = m.predict(job)
        assert peek == m.predict_one(job)
        for v in (p.duration_s, p.p10_s, p.p90_s, p.log_std, p.expected_s):
            assert math.isfinite(v) and v >= 0.0
        assert p.p10_s <= p.duration_s * (1 + 1e-9) <= p.p90_s * (1 + 1e-9) + 1e-9
        lim = job.time_limit_s
        if lim is not None and lim > 0:
            assert p.expected_s <= lim * (1 + 1e-9) and p.duration_s <= lim * (1 + 1e-9)
        if rng.random() < 0.5:
            m.observe_start(job)
        m.learn(job, dur)
    back = loads(dumps(m), expect_model=name)
    for job, _ in _odd_stream(seed + 7, n=20):
        assert back.predict_one(job) == m.predict_one(job)
        assert back.expected_one(job, 1e9) == m.expected_one(job, 1e9)


def _hint(job: JobEvent, p: object) -> object:
    """The hint the engine writes (``HintEngine.make_hint``), validated."""
    from gpuhint.wire.contract import PriorityHint

    assert isinstance(p, DurationPrediction)
    return PriorityHint(
        job_id=job.job_id,
        num_gpus=job.num_gpus,
        submit_time=job.submit_time,
        predicted_duration_s=p.duration_s,
        priority=max(job.num_gpus, 1) * p.expected_s,
        duration_p10_s=p.p10_s,
        duration_p90_s=p.p90_s,
        log_duration_std=p.log_std,
        model="m",
        model_version="1",
        created_at=0.0,
        expected_duration_s=p.expected_s,
    )


def test_a_wide_band_still_fits_the_hint() -> None:
    """The widest band a model can build (a year's point, an erratic key's spread)
    must fit the hint's fields (at most 1e15 s), or the hint fails validation."""
    from models.duration_river import MAX_LOG

    p = DurationPrediction.from_log(MAX_LOG, 25.0)
    assert p.p10_s <= p.duration_s <= p.p90_s <= 1e15
    _hint(_job(1), p)


def test_jobs_of_0_s_and_of_a_year_in_runs_keep_the_hint_valid() -> None:
    """Found by a seeded search: one user's jobs alternate, in runs, between 0 s and the
    longest duration the contract accepts; the default model's p90 reached 3.6e15 s,
    past the hint's 1e15 bound."""
    from gpuhint.wire.contract import MAX_DURATION_S

    rng = random.Random(31)
    m = KeyedDurationModel()
    i, state = 0, 0
    while i < 500:
        for _ in range(rng.choice([1, 2, 3, 5, 8, 13])):
            job = _job(i)
            _hint(job, m.predict(job))
            m.learn(job, MAX_DURATION_S if state else 0.0)
            i += 1
        state ^= 1


class _NanLearner(KeyedDurationModel):
    """A learner whose prediction went NaN (a diverged regression)."""

    name = "nan_learner"

    def _correct(self, x: dict[str, float]) -> float:
        return math.nan


def test_a_nan_correction_adds_nothing() -> None:
    """A learner's NaN is dropped (no correction), not clipped to the largest one:
    ``min(6, nan)`` is 6 in Python, which moved the forecast x400."""
    m, plain = _NanLearner(), KeyedDurationModel()
    for i in range(30):
        for model in (m, plain):
            model.predict(_job(i))
            model.learn(_job(i), 600.0)
    sub = m._submit(_job(99), touch=False)
    assert sub.correction == 0.0
    p, q = m.predict_one(_job(99)), plain.predict_one(_job(99))
    assert p.duration_s == pytest.approx(q.duration_s)
