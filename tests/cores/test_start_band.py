"""Step 5 of the expected start, alone: :class:`gpuhint.cores.start_band.BandTracker`."""

from __future__ import annotations

import pytest

from gpuhint.cores.start_band import (
    FIRST_STEP,
    MAX_BAND_RATIO,
    MAX_SPREAD,
    MIN_SPREAD,
    SPREAD_STEP,
    BandTracker,
    stretch,
)

MISS, HIT = SPREAD_STEP * 0.8, -SPREAD_STEP * 0.2
"""The moves of a VC past its first hundred jobs (the step at its floor)."""


def _tracker() -> BandTracker:
    """A VC that has counted many jobs already: each moves the stretch by the floor step."""
    return BandTracker(counted=1_000_000)


def _shown(band: BandTracker, job: str, made: float = 0.0, high: float = 400.0) -> None:
    band.shown(job, made=made, low=made + 100.0, high=high)


def test_a_miss_widens_and_a_hit_narrows() -> None:
    band = _tracker()
    _shown(band, "late")
    band.started("late", 1000.0)
    assert band.spread == pytest.approx(1.0 + MISS)
    _shown(band, "on time")
    band.started("on time", 200.0)
    assert band.spread == pytest.approx(1.0 + MISS + HIT)


def test_a_short_wait_and_an_unknown_job_do_not_count() -> None:
    band = _tracker()
    _shown(band, "quick")
    band.started("quick", 30.0)  # outside the band, but a 30 s wait
    band.started("never shown", 1e6)
    assert band.spread == 1.0


def test_a_job_still_waiting_past_its_band_counts_once() -> None:
    band = _tracker()
    _shown(band, "late")
    band.overdue(399.0)
    assert band.spread == 1.0
    band.overdue(401.0)
    band.overdue(500.0)
    assert band.spread == pytest.approx(1.0 + MISS)
    band.started("late", 5000.0)
    assert band.spread == pytest.approx(1.0 + MISS)
    assert not band.missed and not band.bands


def test_an_early_miss_is_taken_back_when_the_start_was_inside_the_band() -> None:
    band = _tracker()
    _shown(band, "polled late")
    band.overdue(500.0)  # another event, timed after the deadline, came first
    band.started("polled late", 300.0)  # its start was inside the band
    assert band.spread == pytest.approx(1.0 + HIT)


def test_the_deadline_is_at_least_a_minute_after_the_forecast() -> None:
    band = _tracker()
    _shown(band, "soon", high=30.0)
    band.overdue(45.0)
    assert band.spread == 1.0
    band.overdue(61.0)
    assert band.spread == pytest.approx(1.0 + MISS)


def test_only_the_first_band_shown_counts() -> None:
    band = _tracker()
    _shown(band, "a", high=400.0)
    _shown(band, "a", high=5000.0)  # a later forecast does not replace the first
    band.started("a", 1000.0)
    assert band.spread == pytest.approx(1.0 + MISS)


def test_a_requeued_job_is_judged_by_its_new_band_only() -> None:
    band = _tracker()
    _shown(band, "a", high=1000.0)
    band.started("a", 500.0)  # inside
    _shown(band, "a", made=600.0, high=5000.0)  # waiting again, a new band
    band.overdue(2000.0)  # past the old deadline, not the new one
    assert band.spread == pytest.approx(1.0 + HIT)
    assert "a" not in band.missed


def test_a_cancelled_job_is_forgotten() -> None:
    band = _tracker()
    _shown(band, "gone")
    band.overdue(500.0)
    band.forget("gone")
    assert not band.bands and not band.missed


def test_a_zero_width_band_is_not_tracked() -> None:
    band = _tracker()
    band.shown("now", made=100.0, low=100.0, high=100.0)  # expected to start at once
    band.overdue(1e6)
    assert band.spread == 1.0 and not band.bands


def test_the_stretch_stays_within_its_limits() -> None:
    band = _tracker()
    for i in range(1000):
        _shown(band, f"m{i}")
        band.started(f"m{i}", 1e6)
    assert band.spread == MAX_SPREAD
    for i in range(2000):
        _shown(band, f"h{i}")
        band.started(f"h{i}", 200.0)
    assert band.spread == MIN_SPREAD


def test_deadlines_of_jobs_gone_are_dropped() -> None:
    band = _tracker()
    for i in range(10_000):
        _shown(band, f"j{i}", high=1e9)  # deadlines far away
        band.started(f"j{i}", 200.0)
    assert len(band.deadlines) <= 64 + 2


def test_the_first_jobs_move_the_stretch_further() -> None:
    band = BandTracker()
    _shown(band, "first")
    band.started("first", 1000.0)
    assert band.spread == pytest.approx(1.0 + FIRST_STEP * 0.8)
    for i in range(400):
        _shown(band, f"j{i}")
        band.started(f"j{i}", 200.0 if i % 5 else 1000.0)  # one in five misses
    assert band.counted == 401
    assert 0.9 < band.spread < 1.6  # settled near where it began, at the floor step
    before = band.spread
    _shown(band, "late")
    band.started("late", 1000.0)
    assert band.spread - before == pytest.approx(MISS)


def test_an_early_miss_of_a_young_vc_is_taken_back_with_its_own_step() -> None:
    band = BandTracker()
    _shown(band, "polled late")
    band.overdue(500.0)
    assert band.spread == pytest.approx(1.0 + FIRST_STEP * 0.8)
    band.started("polled late", 300.0)
    assert band.spread == pytest.approx(1.0 - FIRST_STEP * 0.2)


def test_an_early_miss_at_the_stretch_limit_is_taken_back_exactly() -> None:
    band = BandTracker(spread=MAX_SPREAD, counted=1_000_000)
    _shown(band, "polled late")
    band.overdue(500.0)  # the miss cannot widen further
    band.started("polled late", 300.0)
    assert band.spread == pytest.approx(MAX_SPREAD + HIT)


def test_an_early_miss_of_a_start_within_a_minute_is_undone() -> None:
    band = _tracker()
    band.shown("quick", made=0.0, low=1.0, high=10.0)
    band.overdue(500.0)  # past the deadline (a minute after the band was shown)
    assert band.spread == pytest.approx(1.0 + MISS)
    band.started("quick", 30.0)  # its start, reported late: a 30 s wait does not count
    assert band.spread == pytest.approx(1.0)
    assert band.counted == 1_000_000


def test_a_band_of_equal_ratios_still_has_a_width_to_stretch() -> None:
    narrow = stretch(1000.0, 1000.0, 1000.0, 1.0)
    wide = stretch(1000.0, 1000.0, 1000.0, 3.0)
    assert narrow[0] < 1000.0 < narrow[1]
    assert wide[0] < narrow[0] and wide[1] > narrow[1]


def test_stretch_moves_the_edges_in_log_and_caps_them() -> None:
    lo, hi = stretch(100.0, 50.0, 400.0, 2.0)
    assert (lo, hi) == pytest.approx((25.0, 1600.0))
    lo, hi = stretch(100.0, 1.0, 1e6, 10.0)
    assert (lo, hi) == pytest.approx((100.0 / MAX_BAND_RATIO, 100.0 * MAX_BAND_RATIO))
    assert stretch(0.0, 0.0, 0.0, 5.0) == (0.0, 0.0)
