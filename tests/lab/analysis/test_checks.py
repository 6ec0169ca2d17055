"""Gaps and oddities in a trace: each check fires on its oddity and stays quiet otherwise."""

from __future__ import annotations

import numpy as np

from gpuhint.lab.analysis import checks

DAY = 86400.0
T0 = 1_600_000_000.0 - 1_600_000_000.0 % DAY  # a UTC midnight


def _steady(days: int = 10, every_s: float = 600.0) -> np.ndarray:
    return T0 + np.arange(0, days * DAY, every_s)


def _kinds(found: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return [c["check"] for c in found]


def test_a_clean_trace_has_no_warning() -> None:
    s = _steady()
    found = checks.trace_checks(
        s,
        np.full(len(s), 60.0),
        True,
        submits_in_file_order=s,
        starts=s + 5,
        id_hashes=np.arange(len(s), dtype="uint64"),
    )
    assert found == []


def test_submissions_in_half_of_the_day() -> None:
    s = _steady()
    morning = s[(s - T0) % DAY < 12 * 3600]
    (c,) = checks.trace_checks(morning, np.ones(len(morning)), True)
    assert c["check"] == "hour_window" and c["empty_hours"] == 12
    assert c["window"] == ["00:00", "12:00"]
    assert "between 00:00 and 12:00" in c["message"]
    # a window across midnight (22:00 .. 04:00) is found as one run of empty hours
    h = (s - T0) % DAY
    night = s[(h >= 22 * 3600) | (h < 4 * 3600)]
    (c,) = checks.trace_checks(night, np.ones(len(night)), True)
    assert c["window"] == ["22:00", "04:00"] and c["empty_hours"] == 18
    # relative clocks and short traces say nothing about the hour of day
    assert checks.hour_window(morning - T0, False) is None
    assert checks.hour_window(morning[morning < T0 + 2 * DAY], True) is None


def test_a_long_gap() -> None:
    s = _steady(20)
    cut = s[(s < T0 + 5 * DAY) | (s >= T0 + 8 * DAY)]
    (c,) = checks.trace_checks(cut, np.ones(len(cut)), True)
    assert c["check"] == "gap" and c["gaps"] == 1
    assert c["longest_s"] == 3 * DAY + 600 and c["longest_after_s"] < T0 + 5 * DAY
    # a trace whose usual gaps are long: only far longer ones count
    sparse = T0 + np.arange(0, 100 * 2 * DAY, 2 * DAY)
    assert checks.gaps(sparse) is None


def test_clock_jumps_and_starts_before_submits() -> None:
    s = _steady()
    jumped = s.copy()
    jumped[500:] -= 2 * 3600  # the clock set back two hours, once
    c = checks.clock_jumps(jumped, None)
    assert c is not None and c["backward_steps"] == 1 and c["starts_before_submit"] == 0
    starts = s + 10
    starts[:3] = s[:3] - 100
    starts[3] = np.nan  # never started: not counted
    c = checks.clock_jumps(s, starts)
    assert c is not None and c["starts_before_submit"] == 3 and c["backward_steps"] == 0
    # a file in no time order at all: its backward steps are not clock jumps
    shuffled = np.random.default_rng(1).permutation(s)
    assert checks.clock_jumps(shuffled, None) is None


def test_duplicate_ids_and_zero_durations() -> None:
    ids = np.array([1, 2, 2, 3, 3, 3], dtype="uint64")
    c = checks.duplicate_ids(ids)
    assert c is not None and c["ids"] == 2 and c["rows"] == 5
    d = np.ones(1000)
    d[:9] = 0
    assert checks.zero_durations(d) is None  # under 1%
    d[:50] = 0
    c = checks.zero_durations(d)
    assert c is not None and c["jobs"] == 50 and c["share"] == 0.05
    assert _kinds(checks.trace_checks(_steady(), np.zeros(len(_steady())), True)) == [
        "zero_duration"
    ]
