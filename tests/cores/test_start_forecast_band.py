"""The expected start's 80% band keeps its promise online (step 5 of
:mod:`gpuhint.cores.start_forecast`, :mod:`gpuhint.cores.start_band`) as a VC's book
drives it: misses widen it, hits narrow it, a job still waiting past its band counts
at the next forecast, the published times stay valid, and old pickles still load."""

from __future__ import annotations

import math
import pickle
import random
from collections.abc import Sequence

import pytest

from gpuhint.cores import start_band
from gpuhint.cores.start_forecast import CALIBRATE_AFTER, StartBook, StartForecast, Waiting
from gpuhint.wire.contract import MAX_TIME, ExpectedStart


def _ask(book: StartBook, job: str, now: float) -> StartForecast:
    """Forecast one job queued behind a 1,000 s job that holds the VC's only GPU."""
    book.started("blocker", start=now, gpus=1, expected=1000.0, low=1000.0, high=1000.0)
    forecast = book.forecast(now, [Waiting(job, 1, 1.0, 10.0, 10.0, 10.0)])[job]
    book.finished("blocker")
    return forecast


def _start(book: StartBook, job: str, at: float) -> None:
    book.started(job, start=at, gpus=1, expected=10.0, low=10.0, high=10.0)
    book.finished(job)


def _serve(book: StartBook, sigmas: Sequence[float], seed: int = 1) -> list[bool]:
    """Each job really waits 1,000 s x a log-normal factor of spread ``sigma``; whether
    its real start fell in the band it was first shown."""
    rng = random.Random(seed)
    t, inside = 0.0, []
    for i, sigma in enumerate(sigmas):
        f = _ask(book, f"j{i}", t)
        actual = t + 1000.0 * math.exp(rng.gauss(0.0, sigma))
        inside.append(f.low <= actual <= f.high)
        _start(book, f"j{i}", actual)
        t = actual + 1.0
    return inside


def _calibrated() -> StartBook:
    """A VC past its calibration, with enough ratios that a few outliers do not move
    its percentiles much."""
    book = StartBook()
    _serve(book, [0.3] * max(200, CALIBRATE_AFTER))
    return book


def _log_width(f: StartForecast, now: float) -> float:
    return math.log((f.high - now) / (f.low - now))


def test_misses_widen_the_band_and_hits_narrow_it() -> None:
    book = _calibrated()
    spread = book.band.spread
    before = _log_width(_ask(book, "probe0", 1e6), 1e6)
    book.finished("probe0")
    for i in range(10):  # each starts a hundred times later than forecast: a miss
        _ask(book, f"late{i}", 2e6 + i * 1e6)
        _start(book, f"late{i}", 2e6 + i * 1e6 + 1e5)
    assert book.band.spread > spread
    wider = _log_width(_ask(book, "probe1", 1e8), 1e8)
    book.finished("probe1")
    # the width follows the stretch: log width = stretch x the percentiles' log width
    # (the misses move the percentiles too, by ~7% here; a band blind to it is off ~20%)
    assert wider / before == pytest.approx(book.band.spread / spread, rel=0.1)
    spread = book.band.spread
    for i in range(10):  # each starts exactly when forecast: a hit
        f = _ask(book, f"on{i}", 2e8 + i * 1e6)
        _start(book, f"on{i}", f.expected)
    assert book.band.spread < spread


def test_the_band_recovers_its_coverage_when_waits_become_less_predictable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    regime_change = [0.2] * 300 + [1.0] * 300
    tracked = _serve(StartBook(), regime_change)
    monkeypatch.setattr(start_band, "SPREAD_STEP", 0.0)
    monkeypatch.setattr(start_band, "FIRST_STEP", 0.0)
    fixed = _serve(StartBook(), regime_change)
    after = slice(300, None)
    assert sum(tracked[after]) / 300 >= 0.75
    assert sum(fixed[after]) / 300 < 0.65  # the rolling percentiles alone lag


def test_a_job_still_waiting_past_its_band_counts_at_the_next_forecast() -> None:
    book = _calibrated()
    shown = _ask(book, "late", 1e6)
    spread = book.band.spread
    assert shown.high > 1e6 + 60.0
    book.forecast(shown.high + 1.0, [])  # still waiting, past its band
    assert book.band.spread == pytest.approx(spread + 0.05 * 0.8)
    _start(book, "late", shown.high + 1e4)
    assert book.band.spread == pytest.approx(spread + 0.05 * 0.8)  # not counted again
    assert not book.band.bands and not book.band.missed


def test_an_uncalibrated_band_is_not_tracked() -> None:
    book = StartBook()
    _ask(book, "first", 0.0)
    assert not book.band.bands


def test_published_times_stay_valid_however_wide_the_band() -> None:
    book = _calibrated()
    book.band.spread = 10.0
    now = MAX_TIME - 1e6
    book.started("blocker", start=now, gpus=1, expected=1e7, low=1e7, high=1e7)
    f = book.forecast(now, [Waiting("w", 1, 1.0, 10.0, 10.0, 10.0)])["w"]
    ExpectedStart.model_validate({"job_id": "w", **f._asdict()})
    assert f.low < f.expected <= f.high == MAX_TIME


def test_a_pickle_of_before_the_band_tracking_loads_and_learns() -> None:
    book = _calibrated()
    book.told["old"] = (1e6, 1e6 + 1000.0)
    state = dict(book.__dict__)
    del state["band"]
    old = StartBook.__new__(StartBook)
    old.__setstate__(pickle.loads(pickle.dumps(state)))
    assert old.band.spread == 1.0 and not old.band.bands
    calibrated = old.calibrated
    _start(old, "old", 1e6 + 5000.0)
    assert old.calibrated == calibrated + 1 and old.band.spread == 1.0


def test_a_job_expected_to_start_at_once_still_gets_a_band() -> None:
    book = _calibrated()
    book.capacity = 2
    book.started("blocker", start=1e6, gpus=1, expected=1000.0, low=1000.0, high=1000.0)
    f = book.forecast(1e6, [Waiting("w", 1, 1.0, 10.0, 10.0, 10.0)])["w"]  # a GPU is free
    assert f.low == f.expected == 1e6 < f.high
    assert "w" in book.band.bands  # tracked: its band can be stretched
