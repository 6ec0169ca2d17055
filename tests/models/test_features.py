from __future__ import annotations

import math
import pickle

from gpuhint.wire.contract import JobEvent, JobPhase
from models.features import LEVELS, HistoryFeatures, KeyStats, name_template


def _job(i: int, user: str | None = "u", gpus: int = 1, t: float | None = None, **kw: object):
    t = 100.0 * i if t is None else t
    return JobEvent(
        phase=JobPhase.SUBMITTED,
        job_id=str(i),
        user=user,
        num_gpus=gpus,
        time=t,
        submit_time=t,
        **kw,  # type: ignore[arg-type]
    )


def test_name_template_strips_digits() -> None:
    assert name_template("Run_12") == name_template("run_13") == "run_#"
    assert name_template(None) is None
    assert name_template("   ") is None


def test_keystats_window_is_bounded_and_stats_match() -> None:
    s = KeyStats(window=4)
    for v in [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]:
        s.add(v, 0.5, 0.1)
    assert list(s.recent) == [3.0, 4.0, 5.0, 6.0]
    assert s.count == 6
    assert s.median() == 4.5
    assert math.isclose(s.std, math.sqrt(sum((v - 4.5) ** 2 for v in s.recent) / 3))
    med, fast, slow, amean = s.values
    assert med == 4.5 and 4.5 < fast < 6.0 and slow < fast
    assert math.isclose(amean, math.log1p(sum(math.expm1(v) for v in range(1, 7)) / 6))


def test_most_specific_level_wins() -> None:
    hf = HistoryFeatures(burst_gap_s=-1.0)  # every job its own burst
    hf.update(_job(1, user="a", gpus=8), math.log1p(1000.0))
    _, experts, level = hf.features(_job(2, user="a", gpus=8))
    assert level == "user+gpus"
    _, _, level = hf.features(_job(3, user="a", gpus=1))
    assert level == "user"
    _, experts, level = hf.features(_job(4, user="b", gpus=8))
    assert level == "gpus"
    assert math.isclose(experts["gpus:med"], math.log1p(1000.0))
    _, _, level = hf.features(_job(5, user="b", gpus=2))
    assert level == "vc"
    _, experts, level = HistoryFeatures().features(_job(6))
    assert level == "prior" and set(experts) == {
        "global:med",
        "global:fast",
        "global:slow",
        "global:amean",
    }


def test_named_jobs_use_name_level() -> None:
    hf = HistoryFeatures(burst_gap_s=-1.0)
    hf.update(_job(1, name="bert_seed1"), math.log1p(50.0))
    x, _experts, level = hf.features(_job(2, name="bert_seed2"))
    assert level == "name"
    assert x["name:n"] > 0
    _, _, level = hf.features(_job(3, name="gpt_seed2"))
    assert level == "user+gpus"


def test_no_user_trace_uses_size_history() -> None:
    hf = HistoryFeatures(burst_gap_s=-1.0)
    for i in range(5):
        hf.update(_job(i, user=None, gpus=4), math.log1p(7200.0))
    x, experts, level = hf.features(_job(9, user=None, gpus=4))
    assert level == "gpus"
    assert not any(k.startswith(("user", "name")) for k in experts)
    assert x["user:n"] == 0.0 and x["user:submits_1h"] == 0.0


def test_every_feature_is_finite_and_keys_are_stable() -> None:
    hf = HistoryFeatures()
    keys = None
    for i in range(20):
        job = _job(i, user=None if i % 3 == 0 else "u", gpus=i % 4, num_cpus=None)
        x, experts, _ = hf.features(job)
        assert all(math.isfinite(v) for v in (*x.values(), *experts.values()))
        keys = keys or set(x)
        assert set(x) == keys  # same feature names whatever is missing
        hf.update(job, math.log1p(10.0 * i))
    assert {f"{lv}:n" for lv in LEVELS} <= keys  # type: ignore[operator]


def test_queue_state_counts_recent_submissions_and_inflight() -> None:
    hf = HistoryFeatures(recent_s=3600.0)
    for i in range(3):
        hf.observe_submit(_job(i, t=1000.0 + i))
    hf.observe_submit(_job(0, t=1000.0))  # repeated: idempotent
    x, _, _ = hf.features(_job(10, t=2000.0))
    assert x["user:submits_1h"] == math.log1p(3)
    assert x["user:inflight"] == math.log1p(3)
    hf.update(_job(1, t=1001.0), 1.0)  # finished
    x, _, _ = hf.features(_job(10, t=2000.0))
    assert x["user:inflight"] == math.log1p(2)
    x, _, _ = hf.features(_job(11, t=1000.0 + 7200.0))
    assert x["user:submits_1h"] == 0.0  # older than an hour


def test_features_are_pure() -> None:
    hf = HistoryFeatures()
    hf.update(_job(1), 3.0)
    job = _job(2)
    hf.observe_submit(job)
    assert hf.features(job) == hf.features(job)


def test_memory_is_bounded() -> None:
    hf = HistoryFeatures(window=8, max_keys=10, max_pending=5)
    for i in range(200):
        job = _job(i, user=f"user{i}", gpus=i % 7)
        hf.observe_submit(job)
        hf.update(_job(i + 10_000, user=f"user{i}"), 1.0)
    assert len(hf.stats) <= 10
    assert len(hf.pending) <= 5
    assert len(hf.submits) <= 10
    assert all(len(s.recent) <= 8 for s in hf.stats.values())


def test_pickle_round_trip() -> None:
    hf = HistoryFeatures()
    for i in range(30):
        hf.observe_submit(_job(i, gpus=i % 3))
        hf.update(_job(i, gpus=i % 3), math.log1p(i))
    clone = pickle.loads(pickle.dumps(hf))
    job = _job(99, gpus=2)
    assert clone.features(job) == hf.features(job)


def _learn(hf: HistoryFeatures, i: int, user: str | None, dur: float, gpus: int = 1) -> None:
    job = _job(i, user=user, gpus=gpus)
    hf.observe_submit(job)
    hf.update(job, math.log1p(dur))


def test_expected_duration_is_the_vc_mean_for_a_new_user() -> None:
    hf = HistoryFeatures()
    assert math.isclose(hf.expected_duration(_job(0)), 3600.0)  # the prior
    for i, d in enumerate([10.0, 20.0, 30.0, 10_000.0]):
        _learn(hf, i, f"u{i}", d)
    # a mean, not a median: the one long job counts in full
    assert math.isclose(hf.expected_duration(_job(9, user="new")), 10_060.0 / 4)


def test_expected_duration_trusts_users_whose_means_differ() -> None:
    hf = HistoryFeatures()
    i = 0
    for _ in range(40):  # users with clearly different, consistent durations
        for user, d in (("short", 100.0), ("long", 10_000.0)):
            _learn(hf, i, user, d * (1.1 if i % 2 else 0.9))
            i += 1
    vc_mean = hf.stats[HistoryFeatures.keys(_job(0))[-1][1]].mean_s
    short = hf.expected_duration(_job(i, user="short"))
    long = hf.expected_duration(_job(i, user="long"))
    assert short < 150.0 and long > 9_000.0  # most weight on each user's own mean
    # where users are this consistent, one job of a new user is strong evidence
    _learn(hf, i + 1, "once", 1.0)
    once = hf.expected_duration(_job(i + 2, user="once"))
    assert once < 0.05 * vc_mean


def test_expected_duration_ignores_keys_whose_means_do_not_differ() -> None:
    # every user draws from the same distribution: between-user variance ~ 0, so
    # the estimate stays at the VC mean instead of chasing each user's noise
    import random

    rng = random.Random(1)
    hf = HistoryFeatures()
    for i in range(400):
        _learn(hf, i, f"u{i % 4}", rng.choice([10.0, 5_000.0]))
    vc_mean = hf.stats[HistoryFeatures.keys(_job(0))[-1][1]].mean_s
    for u in range(4):
        assert abs(hf.expected_duration(_job(999, user=f"u{u}")) - vc_mean) < 0.05 * vc_mean


def test_credibility_sums_match_a_recount_after_eviction() -> None:
    hf = HistoryFeatures(max_keys=12)
    for i in range(300):
        _learn(hf, i, f"u{i % 9}", 10.0 * (1 + i % 7), gpus=1 + i % 3)
    want: dict[str, list[float]] = {}
    for s in hf.stats.values():
        if s.agg is None:
            continue
        a = want.setdefault(s.agg, [0.0] * 6)
        for j, v in enumerate(
            (s.count, s.sum_dur, s.sum_sq, 1, s.sum_dur**2 / s.count, s.count**2)
        ):
            a[j] += v
    for agg, a in hf.cred.items():
        b = want.get(agg, [0.0] * 6)
        for x, y in zip(a[:6], b, strict=True):
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-6)


def test_bursts_group_close_submits_of_one_shape() -> None:
    hf = HistoryFeatures(burst_gap_s=600.0)
    for i, t in enumerate([0.0, 300.0, 800.0]):  # one sweep: gaps of 300 and 500 s
        hf.observe_submit(_job(i, user=None, gpus=2, t=t))
    hf.observe_submit(_job(3, user=None, gpus=4, t=900.0))  # another shape
    hf.observe_submit(_job(4, user=None, gpus=2, t=5000.0))  # same shape, after a gap
    bursts = [
        hf.burst(_job(i, user=None, gpus=g)) for i, g in [(0, 2), (1, 2), (2, 2), (3, 4), (4, 2)]
    ]
    assert bursts[0] == bursts[1] == bursts[2]
    assert len({bursts[0], bursts[3], bursts[4]}) == 3
    # a finished sibling informs the waiting ones: the burst level fires
    hf.update(_job(0, user=None, gpus=2), math.log1p(50.0))
    _, experts, level = hf.features(_job(1, user=None, gpus=2, t=300.0))
    assert level == "burst" and math.isclose(experts["burst:med"], math.log1p(50.0))
    _, _, level = hf.features(_job(4, user=None, gpus=2, t=5000.0))
    assert level == "gpus"


def test_running_siblings_raise_the_burst_expectation_and_time_limit_caps_it() -> None:
    hf = HistoryFeatures()
    for i in range(3):
        hf.observe_submit(_job(i, user=None, gpus=1, t=float(i)))
    waiting = _job(2, user=None, gpus=1, t=2.0)
    before = hf.expected_duration(waiting, now=10.0)
    hf.observe_start(_job(0, user=None, gpus=1, t=0.0).model_copy(update={"start_time": 5.0}))
    assert hf.expected_duration(waiting, now=5.0) == before  # no time run yet
    later = hf.expected_duration(waiting, now=50_000.0)
    assert later > before + 40_000  # a sibling running for 14 hours says "long"
    capped = waiting.model_copy(update={"time_limit_s": 7200.0})
    assert hf.expected_duration(capped, now=50_000.0) == 7200.0
    hf.update(_job(0, user=None, gpus=1, t=0.0), math.log1p(60.0))  # it ended after all
    assert not hf.running and hf.expected_duration(waiting, now=50_000.0) < later


def _slots(s: KeyStats) -> dict[str, object]:
    return {k: getattr(s, k) for k in KeyStats.__slots__}


def test_keystats_pickle_keeps_every_field_and_derives_the_caches_exactly() -> None:
    s = KeyStats(window=4)
    for v in [1.0, 2.5, 3.0, 4.25, 5.0, 6.5]:
        s.add(v, 0.5, 0.1)
        s.add_residual(v / 10, 0.2)
    s.agg = "c|v|user"
    clone = pickle.loads(pickle.dumps(s))
    assert _slots(clone) == _slots(s)  # values and std recomputed bit for bit
    assert clone.recent.maxlen == 4
    clone.add(7.0, 0.5, 0.1)
    s.add(7.0, 0.5, 0.1)
    assert _slots(clone) == _slots(s)
    empty = pickle.loads(pickle.dumps(KeyStats(window=3)))
    assert _slots(empty) == _slots(KeyStats(window=3))


def test_keystats_pickled_by_an_older_build_still_load() -> None:
    s = KeyStats(window=4)
    for v in [1.0, 2.0, 3.0]:
        s.add(v, 0.5, 0.1)
    old = KeyStats.__new__(KeyStats)
    old.__setstate__(_slots(s))  # what the dict-of-slots pickles of before restore
    assert _slots(old) == _slots(s)


def test_key_walk_cache_gives_the_same_keys_and_is_not_pickled() -> None:
    """A waiting job's keys are walked once at submit; any other event object of the
    job (its finish, a copy after a restore) walks them again, with the same answer."""
    hf = HistoryFeatures()
    jobs = [_job(i, user=f"u{i % 3}", gpus=1 + i % 2, name=f"run_{i}") for i in range(40)]
    for j in jobs[:30]:
        hf.observe_submit(j)
    for j in jobs[:20]:
        hf.update(j, math.log1p(60.0 * (1 + int(j.job_id) % 5)))
    for j in jobs[20:30]:
        cached = hf.job_keys(j)
        assert cached is hf.job_keys(j)  # the cached list
        twin = j.model_copy()
        walked = hf.keys(j, hf.burst_of["default|" + j.job_id])
        assert twin is not j and hf.job_keys(twin) == cached == walked
        assert hf.expected_parts(j, 5000.0) == hf.expected_parts(twin, 5000.0)
        assert hf.features_parts(j) == hf.features_parts(twin)
    blob = pickle.dumps(hf)
    back = pickle.loads(blob)
    assert back._keys == {} and "_keys" not in hf.__getstate__() and hf._keys
    for j in jobs[20:30]:
        assert back.job_keys(j) == hf.job_keys(j)
        assert back.expected_parts(j, 5000.0) == hf.expected_parts(j, 5000.0)
    for j in jobs[20:30]:  # finished: the entry goes
        hf.update(j, math.log1p(60.0))
    assert not any(k.endswith(f"|{i}") for k in hf._keys for i in range(20, 30))


def test_keystats_pickles_of_before_the_move_still_load() -> None:
    """VC state pickled when KeyStats lived in models.features names that module."""
    import pickle

    import models.keystats

    s = KeyStats(4)
    for v in (1.0, 2.0, 3.0):
        s.add(v, 0.3, 0.01)
    blob = pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)
    old = blob.replace(b"models.keystats", b"models.features")  # same length: valid pickle
    assert b"models.features" in old and old != blob
    back = pickle.loads(old)
    assert type(back) is models.keystats.KeyStats
    assert back.values == s.values and back.std == s.std and back.count == 3
