from __future__ import annotations

import math
import random

import pytest
from river import ensemble

from gpuhint.wire.contract import JobEvent, JobPhase
from models.duration_river import (
    MEAN_EXPERTS,
    GammaDeviance,
    Hedge,
    KeyedDurationModel,
    LinearDurationModel,
    MeanMix,
)
from models.history import HistoryEstimator


def test_hedge_converges_to_the_best_expert() -> None:
    h = Hedge(eta=0.5, discount=0.99)
    rng = random.Random(1)
    for _ in range(300):
        y = rng.gauss(5.0, 0.1)
        h.learn("c", {"good": 5.0, "bad": 7.0, "worse": 1.0}, y)
    value, top = h.predict("c", {"good": 5.0, "bad": 7.0, "worse": 1.0})
    assert top[0][0] == "good" and top[0][1] > 0.99 * 5.0
    assert abs(value - 5.0) < 0.05
    # a newcomer starts as an average expert, not as the best one
    _, top = h.predict("c", {"good": 5.0, "new": 9.0})
    assert top[0][0] == "good"
    # an unseen context starts uniform
    assert h.weights("other", ["a", "b"]) == [0.5, 0.5]


def _stream(n: int, seed: int = 0) -> list[tuple[JobEvent, float]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        user = rng.choice(["a", "b", "c", "d"])
        base = {"a": 60.0, "b": 3600.0, "c": 600.0, "d": 36000.0}[user]
        gpus = rng.choice([1, 8])
        dur = base * (4.0 if gpus == 8 else 1.0) * math.exp(rng.gauss(0, 0.5))
        job = JobEvent(
            phase=JobPhase.SUBMITTED,
            job_id=str(i),
            user=user,
            num_gpus=gpus,
            time=60.0 * i,
            submit_time=60.0 * i,
        )
        out.append((job, dur))
    return out


def _mae_log(model: object, stream: list[tuple[JobEvent, float]]) -> float:
    err = 0.0
    for job, dur in stream:
        err += abs(math.log1p(model.predict(job).duration_s) - math.log1p(dur))  # type: ignore[attr-defined]
        model.learn(job, dur)  # type: ignore[attr-defined]
    return err / len(stream)


def test_learned_models_beat_the_paper_rule_on_skewed_durations() -> None:
    stream = _stream(600)
    paper = _mae_log(HistoryEstimator(), stream)
    assert _mae_log(KeyedDurationModel(), stream) < paper
    assert _mae_log(LinearDurationModel(), stream) < paper


def test_reasons_name_the_history_level_and_the_learner() -> None:
    m = LinearDurationModel()
    for job, dur in _stream(200):
        m.predict(job)
        m.learn(job, dur)
    later = 1000.0 * 200 + 86400.0  # a day after the stream: a new burst
    job = _stream(1)[0][0].model_copy(update={"job_id": "new", "time": later, "submit_time": later})
    names = [r[0] for r in m.predict(job).reasons]
    assert names[0] == "history:user+gpus"
    assert names[1] == "learner:correction"
    assert names[2] in job_feature_names(m, job)  # the linear term that moved it most
    assert names[3].startswith("mix:user")


def job_feature_names(m: LinearDurationModel, job: JobEvent) -> set[str]:
    return set(m._submit(job).x)


def test_mix_reasons_are_the_weighted_experts() -> None:
    m = KeyedDurationModel()
    for job, dur in _stream(200):
        m.predict(job)
        m.learn(job, dur)
    later = 1000.0 * 200 + 86400.0  # a day after the stream: a new burst
    p = m.predict(
        _stream(1)[0][0].model_copy(update={"job_id": "new", "time": later, "submit_time": later})
    )
    assert p.reasons[0][0] == "history:user+gpus"
    assert [r[0].startswith("mix:") for r in p.reasons[1:]] == [True] * 3
    assert sum(c for _, c in p.reasons[1:]) <= p.reasons[0][1] + 1e-3


def test_uncertainty_widens_for_noisy_users() -> None:
    m = KeyedDurationModel()
    rng = random.Random(0)
    for i in range(400):
        user = "steady" if i % 2 else "erratic"
        dur = 1000.0 if user == "steady" else math.exp(rng.uniform(2, 12))
        job = JobEvent(
            phase=JobPhase.SUBMITTED, job_id=str(i), user=user, num_gpus=1, time=i, submit_time=i
        )
        m.predict(job)
        m.learn(job, dur)

    def std(user: str) -> float:
        job = JobEvent(
            phase=JobPhase.SUBMITTED, job_id=user, user=user, num_gpus=1, time=1e6, submit_time=1e6
        )
        return m.predict(job).log_std

    assert std("erratic") > 5 * std("steady")


def test_gamma_deviance_elicits_the_mean() -> None:
    loss = GammaDeviance()
    ys = [10.0, 10.0, 10.0, 1000.0]  # mean 257.5, median 10
    mean = sum(ys) / len(ys)

    def risk(p: float) -> float:
        return sum(loss(y, p) for y in ys)

    assert risk(mean) < risk(10.0) and risk(mean) < risk(0.5 * mean) and risk(mean) < risk(2 * mean)
    assert loss(5.0, 5.0) == 0.0 and loss(1e12, 1.0) == loss.cap


def test_mean_mix_is_rivers_ewa_and_learns_which_estimate_holds() -> None:
    mm = MeanMix(("short", "long"))
    x = {"short": 100.0, "long": 10_000.0}
    assert mm.predict("c", x) == 5050.0 and mm.weights("c") == [0.5, 0.5]
    for _ in range(50):
        mm.learn("c", x, 9_000.0)
    assert isinstance(mm.mix["c"], ensemble.EWARegressor)
    w = mm.weights("c")
    assert w[1] > 0.99 and math.isclose(sum(w), 1.0)
    assert mm.predict("c", x) > 9_000.0
    assert mm.predict("other", x) == 5050.0  # contexts are separate


def test_the_rank_comes_from_the_learned_mix() -> None:
    """The expected duration is the mix's prediction, and learning moves the mix."""
    m = KeyedDurationModel()
    job = JobEvent(phase="submitted", job_id="w", user="u", num_gpus=1, time=0, submit_time=0)
    for job_i, dur in _stream(300):
        m.predict(job_i)
        m.learn(job_i, dur)
    pred = m.predict_one(job)
    parts = m.hist.expected_parts(job)
    assert math.isclose(pred.expected_s, m.mean_mix.predict(parts[0], m._mean_x(job, parts, 0.0)))
    uniform = [1.0 / len(MEAN_EXPERTS)] * len(MEAN_EXPERTS)
    # where the estimates disagree (bursts with evidence) the weights have moved
    assert any(m.mean_mix.weights(c) != uniform for c in m.mean_mix.mix)


def test_each_river_learner_has_its_own_rank_expert() -> None:
    lin = LinearDurationModel()
    assert "learner" in lin.mean_mix.experts
    assert "learner" not in KeyedDurationModel().mean_mix.experts
    stream = _stream(400)
    base = KeyedDurationModel()
    for job, dur in stream:
        for m in (lin, base):
            m.predict(job)
            m.learn(job, dur)
    probe = [j for j, _ in _stream(50, seed=9)]
    ranks_lin = [lin.predict_one(j).expected_s for j in probe]
    ranks_base = [base.predict_one(j).expected_s for j in probe]
    assert ranks_lin != ranks_base


def test_mean_mix_prediction_is_ewa_predict_one_exactly() -> None:
    """MeanMix.predict sums the EWARegressor's weights itself: the same float."""
    mm = MeanMix(("a", "b", "c"))
    rng = random.Random(3)
    for _ in range(200):
        x = {k: rng.lognormvariate(7.0, 2.0) for k in mm.experts}
        mm.learn("c", x, rng.lognormvariate(7.0, 2.0))
        probe = {k: rng.lognormvariate(7.0, 2.0) for k in mm.experts}
        assert mm.predict("c", probe) == mm.mix["c"].predict_one(probe)


def test_mean_mix_fixed_share_keeps_every_expert_and_can_switch() -> None:
    """Plain multiplicative weights lock onto one expert; the fixed share keeps each
    expert at or above share / n, so the mix follows when the better expert changes."""
    x = {"short": 100.0, "long": 10_000.0}
    plain, shared = MeanMix(("short", "long"), share=0.0), MeanMix(("short", "long"))
    for mm in (plain, shared):
        for _ in range(300):
            mm.learn("c", x, 100.0)
    assert min(plain.weights("c")) < 1e-12
    assert min(shared.weights("c")) >= shared.share / 2 - 1e-12
    for mm in (plain, shared):
        for _ in range(60):
            mm.learn("c", x, 10_000.0)
    assert shared.weights("c")[1] > 0.9 > plain.weights("c")[1]


def test_a_version_4_mean_mix_restores_with_the_share() -> None:
    import pickle

    mm = MeanMix(("a", "b"))
    mm.learn("c", {"a": 1.0, "b": 2.0}, 1.0)
    state = dict(mm.__dict__)
    del state["share"]  # what a version-4 pickle holds
    old = MeanMix.__new__(MeanMix)
    old.__setstate__(state)
    back = pickle.loads(pickle.dumps(old))
    assert back.share == mm.share and back.weights("c") == mm.weights("c")


def test_only_history_mix_has_the_share() -> None:
    assert KeyedDurationModel().mean_mix.share > 0.0
    assert LinearDurationModel().mean_mix.share == 0.0
    old = MeanMix.__new__(MeanMix)
    state = dict(LinearDurationModel().mean_mix.__dict__)
    del state["share"]  # a version-4 river_linear mix
    old.__setstate__(state)
    assert old.share == 0.0


def test_checkpoints_naming_the_mixes_in_duration_river_still_load() -> None:
    """Hedge, MeanMix and their parts moved to models.mixes; state pickled before names
    them in models.duration_river (protocol 0 spells each global as text lines)."""
    import pickle

    from models.duration_river import KeyedDurationModel

    m = KeyedDurationModel()
    for i in range(20):
        job = JobEvent(
            phase="submitted", job_id=str(i), user="u", num_gpus=1, time=i, submit_time=i
        )
        m.predict(job)
        m.learn(job, 100.0 * (1 + i % 3))
    blob = pickle.dumps(m, protocol=0)
    old = blob.replace(b"cmodels.mixes\n", b"cmodels.duration_river\n")
    assert b"cmodels.mixes\n" in blob and b"cmodels.mixes\n" not in old
    back = pickle.loads(old)
    probe = JobEvent(phase="submitted", job_id="p", user="u", num_gpus=1, time=50, submit_time=50)
    assert back.predict_one(probe) == m.predict_one(probe)


def _limited(k: int, limit: float | None, t: float = 0.0) -> JobEvent:
    return JobEvent(
        phase="submitted", job_id=str(k), user="u", num_gpus=1, time=t, submit_time=t,
        time_limit_s=limit,
    )  # fmt: skip


def test_a_jobs_time_limit_tells_its_users_short_jobs_from_long_ones() -> None:
    """One user, one GPU count, no names: 1-hour limits for 10-minute jobs, 3-day limits
    for 1-day jobs. History alone ranks both kinds alike; with the limit's estimate in
    the rank's mix the two are told apart."""
    m = KeyedDurationModel()
    t = 0.0
    for k in range(60):
        for limit, dur in ((3600.0, 600.0), (3 * 86400.0, 86400.0)):
            t += 86400.0  # a day apart: no bursts
            job = _limited(2 * k + (limit > 3600.0), limit, t=t)
            m.predict(job)
            m.learn(job, dur)
    probe = _limited(900, 3600.0, t=t + 86400.0)
    short = m.predict_one(probe).expected_s
    long_ = m.predict_one(_limited(901, 3 * 86400.0, t=t + 86400.0)).expected_s
    assert short < 0.2 * long_ and short < 3600.0 < long_
    plain = m.predict_one(_limited(902, None, t=t + 86400.0)).expected_s
    assert short < 0.2 * plain  # without a limit: the user's history, both kinds mixed
    mean_x = m._mean_x(probe, m.hist.expected_parts(probe), 0.0)
    assert mean_x["limit"] == pytest.approx(600.0, rel=0.1)
    # the hint's reasons start from the base its forecast comes from (review): with the
    # limit's estimate, its own Hedge's, not the history's without it
    shown = m.predict_one(probe)
    first, value = shown.reasons[0]
    assert first.startswith("history:") and any(r[0] == "mix:limit" for r in shown.reasons)
    assert value == pytest.approx(math.log1p(shown.duration_s), abs=1e-3)
    weights = [m.mean_mix_limit.weights(c)[-1] for c in m.mean_mix_limit.mix]
    assert max(weights) > 0.5  # the mix learned to trust it
    no_limit = _limited(903, None, t=t + 86400.0)
    assert "limit" not in m._mean_x(no_limit, m.hist.expected_parts(no_limit), 0.0)


@pytest.mark.parametrize("model", [KeyedDurationModel, LinearDurationModel])
def test_one_users_limits_change_nothing_for_the_other_users(
    model: type[KeyedDurationModel],
) -> None:
    """User a varies its limits and gets the limit's estimate; every job of the others
    (no limit) is predicted exactly as by a model that never estimates from a limit:
    the shared mixes, Hedge, learner, gate and residuals learn as without it."""
    m, ref = model(), model()
    ref.limits.estimate = lambda job: None  # type: ignore[method-assign]
    estimated = 0
    for i, (job, dur) in enumerate(_stream(300)):
        if job.user == "a":
            job = job.model_copy(update={"time_limit_s": 600.0 if i % 2 else 6000.0})
            estimated += m.limits.estimate(job) is not None
        else:
            assert m.predict_one(job) == ref.predict_one(job)
        assert (m.predict(job) == ref.predict(job)) or job.user == "a"
        m.learn(job, dur)
        ref.learn(job, dur)
        # a newcomer (new user, new GPU count) reads only the shared levels: the VC's
        # and the global residuals, mixes and Hedge weights (review: the others' own
        # keys hid a leak into the residuals)
        new = job.model_copy(update={"job_id": f"new{i}", "user": "z", "num_gpus": 3})
        assert m.predict_one(new) == ref.predict_one(new)
    assert estimated > 20 and m.mean_mix_limit.mix and not ref.mean_mix_limit.mix


def test_a_model_pickled_before_the_limit_expert_restores_and_learns_it() -> None:
    import pickle

    m = KeyedDurationModel()
    for job, dur in _stream(50):
        m.predict(job)
        m.learn(job, dur)
    state = dict(m.__dict__)
    del state["limits"], state["mean_mix_limit"], state["hedge_limit"]  # an older pickle
    old = KeyedDurationModel.__new__(KeyedDurationModel)
    old.__setstate__(state)
    back = pickle.loads(pickle.dumps(old))
    assert back.mean_mix_limit.experts == (*back.mean_mix.experts, "limit")
    for k in range(10):
        for limit, dur in ((600.0, 300.0), (6000.0, 3000.0)):
            job = _limited(1000 + 2 * k + (limit > 600.0), limit, t=1e6 + 86400.0 * k)
            back.predict(job)
            back.learn(job, dur)
    est = back.limits.estimate(_limited(2000, 600.0))
    assert est is not None and est[0] == pytest.approx(300.0, rel=0.05)


def test_a_user_who_never_varies_the_limit_is_predicted_as_without_one() -> None:
    """A site default (every job asks for 10 days, never reached): the same predictions
    as the same jobs without a limit, though the limit's shares are learned."""
    with_limit, without = KeyedDurationModel(), KeyedDurationModel()
    for job, dur in _stream(300):
        limited = job.model_copy(update={"time_limit_s": 10 * 86400.0})
        assert with_limit.predict(limited) == without.predict(job)
        with_limit.learn(limited, dur)
        without.learn(job, dur)
    assert with_limit.limits.stats and not without.limits.stats
