"""The estimate from a job's time limit: per-user share of the limit, shrunk to the VC's."""

from __future__ import annotations

import math
import pickle

import pytest

from gpuhint.wire.contract import JobEvent
from models.limit_ratio import LimitRatios


def _job(user: str | None, limit: float | None, vc: str = "v", k: int = 0) -> JobEvent:
    return JobEvent(
        phase="submitted", job_id=str(k), user=user, vc=vc, num_gpus=1, time=0,
        submit_time=0, time_limit_s=limit,
    )  # fmt: skip


def _varied(r: LimitRatios, *users: str) -> LimitRatios:
    """Mark users as having asked for more than one limit (the gate is tested apart)."""
    for u in users:
        r.habits[r._habit_key(_job(u, 1.0))] = [1.0, 1.0]
    return r


def test_no_limit_or_no_history_gives_no_estimate() -> None:
    r = _varied(LimitRatios(), "u")
    assert r.estimate(_job("u", 3600.0)) is None  # nothing learned in the VC yet
    r.learn(_job("u", None), 100.0)  # a job without a limit teaches nothing
    assert r.estimate(_job("u", 3600.0)) is None and not r.stats
    r.learn(_job("u", 3600.0), 360.0)
    assert r.estimate(_job("u", None)) is None
    assert r.estimate(_job("u", 3600.0, vc="other")) is None  # another VC's state


def test_a_users_share_of_the_limit_scales_with_the_limit() -> None:
    r = _varied(LimitRatios(), "u")
    for k in range(30):
        r.learn(_job("u", 3600.0, k=k), 900.0)
    mean, typical = r.estimate(_job("u", 36000.0))  # type: ignore[misc]
    assert mean == pytest.approx(9000.0) and typical == pytest.approx(9000.0)


def test_a_new_user_gets_the_vcs_share_and_few_jobs_are_shrunk_to_it() -> None:
    r = _varied(LimitRatios(k=4.0), "new")
    for k in range(40):
        r.learn(_job(f"busy{k % 4}", 1000.0, k=k), 500.0)  # the VC: half the limit
    assert r.estimate(_job("new", 1000.0))[0] == pytest.approx(500.0)  # type: ignore[index]
    r.learn(_job("new", 1000.0), 100.0)  # one job at a tenth
    mean = r.estimate(_job("new", 1000.0))[0]  # type: ignore[index]
    # the user's one job weighs 1 / (1 + k) against the VC (which it moved by alpha), in logs
    assert 100.0 < mean < 500.0 and mean == pytest.approx(1000.0 * 0.46**0.8 * 0.1**0.2)


def test_the_share_is_learned_per_limit_value() -> None:
    """Jobs that ask for the 7-day maximum use little of it; jobs of the same user that
    ask for 2 hours use most of theirs: one share for both would misjudge both."""
    week, two_h = 7 * 86400.0, 7200.0
    r = _varied(LimitRatios(), "new")
    for k in range(40):
        r.learn(_job("u", week, k=k), 600.0)  # the default limit, 10-minute jobs
        r.learn(_job("u", two_h, k=k), 6000.0)
    # within 10%: the VC's share still weighs k / (n + k) at each level (in logs)
    assert r.estimate(_job("u", week))[0] == pytest.approx(600.0, rel=0.1)  # type: ignore[index]
    assert r.estimate(_job("u", two_h))[0] == pytest.approx(6000.0, rel=0.1)  # type: ignore[index]
    # a new user asking for the maximum: near the VC's jobs at that limit (one level less
    # of shrinkage), far from the VC's share of it (~0.4 x 7 days)
    assert 600.0 < r.estimate(_job("new", week))[0] < 1200.0  # type: ignore[index]
    # a limit nobody asked for yet: the VC's share (the mean of the two)
    share = (600.0 / week + 6000.0 / two_h) / 2
    assert r.estimate(_job("u", 3600.0))[0] == pytest.approx(3600.0 * share, rel=0.1)  # type: ignore[index]


def test_the_typical_estimate_is_geometric_and_ratios_are_clipped() -> None:
    r = _varied(LimitRatios(), "u")
    r.learn(_job("u", 100.0, k=1), 10.0)
    r.learn(_job("u", 100.0, k=2), 1000.0)  # ran past its limit: counts as all of it
    mean, typical = r.estimate(_job("u", 100.0))  # type: ignore[misc]
    assert mean == pytest.approx(55.0) and typical == pytest.approx(math.sqrt(0.1) * 100.0)
    r.learn(_job("u", 100.0, k=3), 0.0)  # a zero run counts as 1 s, not log(0)
    assert math.isfinite(r.estimate(_job("u", 100.0))[1])  # type: ignore[index]


def test_recent_jobs_count_more_and_memory_is_bounded() -> None:
    r = _varied(LimitRatios(alpha=0.1, max_keys=3), "u")
    for k in range(50):
        r.learn(_job("u", 1000.0, k=k), 100.0)
    for k in range(30):
        r.learn(_job("u", 1000.0, k=k), 900.0)  # the user's jobs got longer
    assert r.estimate(_job("u", 1000.0))[0] > 800.0  # type: ignore[index]
    assert "default|v|ul|u|1000" in r.stats
    for u in ("a", "b", "c"):
        r.learn(_job(u, 1000.0), 100.0)
    assert len(r.stats) == 3 and "default|v|ul|u|1000" not in r.stats  # least recently used
    assert len(r.habits) == 3 and r._habit_key(_job("u", 1.0)) not in r.habits
    back = pickle.loads(pickle.dumps(r))
    assert back.stats == r.stats and back.habits == r.habits


def test_a_limit_nobody_varies_tells_nothing() -> None:
    """Where a user (a VC, without users) has only ever asked for one limit, a site
    default or a script's habit, there is no estimate; once they ask for another, their
    jobs get one from then on."""
    r = LimitRatios()
    for k in range(20):
        r.learn(_job("u", 3600.0, k=k), 900.0)
        r.learn(_job(None, 7200.0, k=k), 900.0)
    assert not r.varied(_job("u", 3600.0)) and r.estimate(_job("u", 3600.0)) is None
    assert r.estimate(_job(None, 7200.0)) is None and r.estimate(_job("u", 36000.0)) is None
    r.learn(_job("u", 600.0, k=99), 300.0)
    assert r.varied(_job("u", 3600.0)) and r.estimate(_job("u", 3600.0)) is not None
    assert not r.varied(_job("w", 3600.0))  # another user of the same VC
    r.learn(_job(None, 100.0, k=98), 50.0)
    assert r.estimate(_job(None, 7200.0)) is not None  # the user-less VC varies too
    r.learn(_job("w", 3600.0, k=97), 900.0)
    r.learn(_job("w", 3600.4, k=96), 900.0)  # the same limit in whole seconds
    assert not r.varied(_job("w", 3600.0))


def test_names_with_the_separator_do_not_collide() -> None:
    """A VC named ``v|h`` and the habits of a user-less VC ``v`` are kept apart; so are
    the shares of VC ``v``'s limit 3600 and of a VC named ``v|l|3600`` (review)."""
    r = LimitRatios()
    r.learn(_job(None, 100.0, vc="v"), 50.0)
    r.learn(_job(None, 100.0, vc="v|h"), 50.0)
    r.learn(_job(None, 200.0, vc="v|h"), 50.0)
    assert not r.varied(_job(None, 100.0, vc="v")) and r.varied(_job(None, 100.0, vc="v|h"))
    r = LimitRatios()
    r.learn(_job("a", 3600.0, vc="v"), 3240.0)  # a uses 90% of 3600 s
    r.learn(_job("a", 600.0, vc="v"), 540.0)  # and varies
    for _ in range(50):
        r.learn(_job("b", 3600.0, vc="v|l|3600"), 36.0)  # 1% of it, in another VC
    est = r.estimate(_job("a", 3600.0, vc="v"))
    assert est is not None and est[0] > 3000.0


def test_bad_settings_are_refused() -> None:
    for kw in ({"alpha": 0.0}, {"alpha": 1.5}, {"k": -1.0}, {"max_keys": 1}):
        with pytest.raises(ValueError):
            LimitRatios(**kw)  # type: ignore[arg-type]
