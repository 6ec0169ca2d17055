"""Tests for gpuhint/lab/traces/loadseries.py: bad rows name the right ``file:line``."""

from __future__ import annotations

import io

import pytest

from gpuhint.lab.traces.loadseries import SeriesError, parse_series

HEAD = "time,active,total\n"


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "1e300"])
def test_non_finite_or_absurd_time_is_a_line_error(bad: str) -> None:
    text = HEAD + "2020-01-01 00:00:00,3,10\n" + f"{bad},4,10\n"
    with pytest.raises(SeriesError) as exc:
        parse_series(io.StringIO(text), "x.csv")
    assert str(exc.value).startswith("x.csv:3: ")
    skipped = parse_series(io.StringIO(text), "x.csv", on_error="skip")
    assert skipped.used == [3] and [e.line for e in skipped.errors] == [3]


def test_nan_time_does_not_disable_the_order_check() -> None:
    text = HEAD + "1200,3,10\nnan,4,10\n600,5,10\n"
    s = parse_series(io.StringIO(text), "x.csv", on_error="skip")
    assert [e.line for e in s.errors] == [3, 4] and s.used == [3]


def test_line_numbers_count_quoted_newlines() -> None:
    text = HEAD + '0,3,10\n"600\n",4,10\n1200,x,10\n'
    with pytest.raises(SeriesError) as exc:
        parse_series(io.StringIO(text), "x.csv")
    assert str(exc.value).startswith("x.csv:5: "), exc.value


def test_duplicate_timestamps_take_the_max_and_timezones_convert() -> None:
    text = (
        HEAD
        + "2020-01-01 01:00:00+01:00,3,10\n"  # = 00:00 UTC
        + "2020-01-01 00:00:00,5,10\n"
        + "2020-01-01 00:00:00,4,10\n"
    )
    s = parse_series(io.StringIO(text), "x.csv")
    assert s.start == 1577836800.0 and s.used == [5] and s.filled_slots == 0
