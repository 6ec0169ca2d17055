"""One contract suite for every registered duration model (like river's estimator checks)."""

from __future__ import annotations

import math
import pickle
import random

import pytest

from gpuhint.wire.contract import JobEvent, JobPhase
from models.base import DurationModel, DurationPrediction
from models.registry import DEFAULT_MODEL, DURATION_MODELS, make_model

NAMES = sorted(DURATION_MODELS)


def _job(i: int, user: str | None = "alice", gpus: int = 1, **kw: object) -> JobEvent:
    fields: dict[str, object] = {
        "phase": JobPhase.SUBMITTED,
        "job_id": str(i),
        "vc": "vc1",
        "user": user,
        "name": f"train_{i % 3}",
        "num_gpus": gpus,
        "num_cpus": 4 * gpus,
        "num_nodes": 1,
        "time": 1000.0 * i,
        "submit_time": 1000.0 * i,
    }
    fields.update(kw)
    return JobEvent(**fields)  # type: ignore[arg-type]


def _stream(n: int = 300, seed: int = 0) -> list[tuple[JobEvent, float]]:
    """Jobs whose duration depends on user and size, with noise."""
    rng = random.Random(seed)
    users = {"alice": 600.0, "bob": 20_000.0, "carol": 90.0}
    out = []
    for i in range(n):
        user = rng.choice(sorted(users))
        gpus = rng.choice([1, 2, 8])
        dur = users[user] * (1 + 0.2 * math.log2(gpus)) * math.exp(rng.gauss(0, 0.3))
        out.append((_job(i, user=user, gpus=gpus), dur))
    return out


def _replay(model: DurationModel, stream: list[tuple[JobEvent, float]]) -> list[float]:
    """Predict at submit, learn at finish (immediately); return the point predictions."""
    preds = []
    for job, dur in stream:
        preds.append(model.predict(job).duration_s)
        model.learn(job.model_copy(update={"phase": JobPhase.FINISHED, "duration_s": dur}), dur)
    return preds


def _check_prediction(p: DurationPrediction) -> None:
    assert isinstance(p, DurationPrediction)
    for v in (p.duration_s, p.p10_s, p.p90_s, p.log_std, p.expected_s):
        assert math.isfinite(v) and v >= 0.0
    # the band brackets the point, up to rounding of the point estimate
    assert p.p10_s <= p.duration_s * 1.000001 + 1e-9
    assert p.duration_s <= p.p90_s * 1.000001 + 1e-9
    for name, contribution in p.reasons:
        assert isinstance(name, str) and name
        assert math.isfinite(contribution)


def test_default_model_is_registered() -> None:
    assert DEFAULT_MODEL in DURATION_MODELS


def test_unknown_model_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        make_model("nope")


@pytest.mark.parametrize("name", NAMES)
def test_has_name_and_version(name: str) -> None:
    m = make_model(name)
    assert isinstance(m, DurationModel)
    assert m.name == name
    assert isinstance(m.version, str) and m.version


@pytest.mark.parametrize("name", NAMES)
def test_predict_before_learning(name: str) -> None:
    p = make_model(name).predict(_job(1))
    _check_prediction(p)
    assert p.duration_s > 0


@pytest.mark.parametrize("name", NAMES)
def test_learn_one_then_predict(name: str) -> None:
    m = make_model(name)
    job = _job(1)
    m.learn(job, 500.0)
    p = m.predict(_job(2))
    _check_prediction(p)
    # one job of this user and size: the prediction moves towards it from the prior
    assert abs(math.log1p(p.duration_s) - math.log1p(500.0)) < 1.0


@pytest.mark.parametrize("name", NAMES)
def test_learn_without_predict_first(name: str) -> None:
    m = make_model(name)
    for i in range(5):
        m.learn(_job(i), 100.0)  # e.g. jobs submitted before a restart
    _check_prediction(m.predict(_job(99)))


@pytest.mark.parametrize("name", NAMES)
def test_unseen_user_and_vc(name: str) -> None:
    m = make_model(name)
    _replay(m, _stream(100))
    _check_prediction(m.predict(_job(1000, user="nobody-seen")))
    _check_prediction(m.predict(_job(1001, vc="fresh-vc", gpus=64)))


@pytest.mark.parametrize("name", NAMES)
def test_missing_optional_fields(name: str) -> None:
    m = make_model(name)
    bare = JobEvent(phase=JobPhase.SUBMITTED, job_id="b", time=0.0, submit_time=0.0)
    _check_prediction(m.predict(bare))
    m.learn(bare, 42.0)
    _check_prediction(m.predict(bare.model_copy(update={"job_id": "c"})))
    nothing = _job(5, user=None, name=None, num_cpus=None, num_nodes=None, gpus=0)
    _check_prediction(m.predict(nothing))
    m.learn(nothing, 0.0)  # zero-length job
    _check_prediction(m.predict(nothing))


@pytest.mark.parametrize("name", NAMES)
def test_extreme_durations_stay_finite(name: str) -> None:
    m = make_model(name)
    for i, d in enumerate([0.0, 1e9, 0.0, 1e9, 3.0, 1e7] * 5):
        m.predict(_job(i))
        m.learn(_job(i), d)
    _check_prediction(m.predict(_job(999)))


@pytest.mark.parametrize("name", NAMES)
def test_pickle_round_trip_gives_identical_predictions(name: str) -> None:
    m = make_model(name)
    stream = _stream(150)
    _replay(m, stream[:100])
    pending = _job(500, user="bob", gpus=2)
    m.predict(pending)  # a job in flight at checkpoint time
    clone = pickle.loads(pickle.dumps(m))
    assert _replay(m, stream[100:]) == _replay(clone, stream[100:])
    assert m.predict(_job(600)) == clone.predict(_job(600))


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_given_the_same_stream(name: str) -> None:
    stream = _stream(200, seed=3)
    assert _replay(make_model(name), stream) == _replay(make_model(name), stream)


@pytest.mark.parametrize("name", NAMES)
def test_predict_is_repeatable(name: str) -> None:
    m = make_model(name)
    _replay(m, _stream(50))
    job = _job(777, user="alice", gpus=2)
    assert m.predict(job) == m.predict(job)


@pytest.mark.parametrize("name", NAMES)
def test_learns_per_user_differences(name: str) -> None:
    m = make_model(name)
    _replay(m, _stream(300))
    fast = m.predict(_job(2000, user="carol", gpus=1)).duration_s
    slow = m.predict(_job(2001, user="bob", gpus=1)).duration_s
    assert slow > 20 * fast


@pytest.mark.parametrize("name", NAMES)
def test_expected_duration_ranks_users(name: str) -> None:
    # QSSF ranks by expected_s: it must separate users as the point forecast does
    m = make_model(name)
    _replay(m, _stream(300))
    fast = m.predict(_job(2000, user="carol", gpus=1)).expected_s
    mid = m.predict(_job(2001, user="alice", gpus=1)).expected_s
    slow = m.predict(_job(2002, user="bob", gpus=1)).expected_s
    assert fast < mid < slow and slow > 10 * fast


def _worst_stream() -> list[tuple[JobEvent, float]]:
    """The most extreme events the wire decoder accepts (gpuhint.wire.contract.Limits defaults)."""
    from gpuhint.wire.contract import DEFAULT_LIMITS, MAX_DURATION_S

    out = []
    for i in range(120):
        gpus = (0, 1, DEFAULT_LIMITS.max_gpus)[i % 3]
        dur = (0.0, MAX_DURATION_S, 1e-3, 30.0)[i % 4]
        user = ("u" * 256, None, f"new{i}", "alice")[i % 4]
        job = _job(i, user=user, gpus=gpus, num_cpus=None, num_nodes=DEFAULT_LIMITS.max_nodes)
        out.append((job, dur))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_the_worst_accepted_values_keep_predictions_finite(name: str) -> None:
    """A decoded event can poison no model: predictions stay finite and in the hint's bounds."""
    from gpuhint.wire.contract import MAX_DURATION_S, PriorityHint

    model = make_model(name)
    preds = _replay(model, _worst_stream())
    for job, _ in _worst_stream()[:12] + _stream(30, seed=5):
        p = model.predict(job)
        for v in (p.duration_s, p.p10_s, p.p90_s, p.log_std, p.expected_s):
            assert math.isfinite(v) and v >= 0.0
        assert p.duration_s <= 10 * MAX_DURATION_S
        PriorityHint(  # the hint the engine would write validates
            job_id=job.job_id,
            num_gpus=job.num_gpus,
            submit_time=job.submit_time,
            predicted_duration_s=p.duration_s,
            priority=max(job.num_gpus, 1) * p.expected_s,
            model=model.name,
            model_version=model.version,
            created_at=0.0,
        )
    assert all(math.isfinite(x) for x in preds)


# -- River's estimator conventions, in the spirit of river.checks ---------------------------


def _state(m: DurationModel) -> bytes:
    return pickle.dumps(m)


@pytest.mark.parametrize("name", NAMES)
def test_predict_one_expected_one_and_related_keys_are_pure(name: str) -> None:
    m = make_model(name)
    _replay(m, _stream(80))
    waiting = _job(900, user="alice", gpus=2)
    m.predict(waiting)
    before = _state(m)
    p = m.predict_one(waiting)
    _check_prediction(p)
    e = m.expected_one(waiting, 1e7)
    assert math.isfinite(e) and e >= 0
    assert all(isinstance(k, str) and k for k in m.related_keys(waiting))
    assert _state(m) == before  # nothing changed
    assert m.predict_one(waiting) == p


@pytest.mark.parametrize("name", NAMES)
def test_learn_one_is_learn(name: str) -> None:
    a, b = make_model(name), make_model(name)
    for job, dur in _stream(60):
        a.predict(job)
        b.predict(job)
        a.learn(job, dur)
        b.learn_one(job, dur)
    assert a.predict_one(_job(999)) == b.predict_one(_job(999))


@pytest.mark.parametrize("name", NAMES)
def test_time_limit_bounds_the_expected_duration(name: str) -> None:
    m = make_model(name)
    for i in range(20):
        m.predict(_job(i))
        m.learn(_job(i), 50_000.0)
    limited = _job(100, time_limit_s=3600.0)
    assert m.predict(limited).expected_s <= 3600.0
    assert m.expected_one(limited) <= 3600.0
    assert m.predict_one(_job(101)).expected_s > 3600.0


@pytest.mark.parametrize("name", NAMES)
def test_a_finished_sibling_moves_a_waiting_jobs_expectation(name: str) -> None:
    # The loop a hint update relies on: a waiting job shares a key with a finishing one,
    # and its expected duration moves when the model learns.
    m = make_model(name)
    first, waiting = _job(1, user="dave", gpus=4), _job(2, user="dave", gpus=4)
    m.predict(first)
    m.predict(waiting)
    shared = set(m.related_keys(first)) & set(m.related_keys(waiting))
    assert shared
    before = m.expected_one(waiting, waiting.submit_time)
    m.observe_start(first)
    m.learn(first, 50_000.0)
    assert m.expected_one(waiting, waiting.submit_time) > before


@pytest.mark.parametrize("name", NAMES)
def test_river_progressive_val_score_with_delayed_labels(name: str) -> None:
    import datetime as dt

    from river import evaluate, metrics

    from models.river_api import RiverRegressor, featurize

    stream = [(featurize(job), dur) for job, dur in _stream(120)]
    metric = evaluate.progressive_val_score(
        stream,
        RiverRegressor(make_model(name)),
        metrics.MAE(),
        moment="submit_time",
        delay=lambda x, y: dt.timedelta(seconds=y),
    )
    assert math.isfinite(metric.get()) and metric.get() > 0
