"""Tests for models/forecast.py: band, causality of the online forecaster, learning."""

from __future__ import annotations

import math
import random

import pytest

from models.forecast import LoadForecaster


def _series(n: int, seed: int = 0, total: int = 100) -> list[int]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base = 50 + 30 * math.sin(2 * math.pi * i / 144)  # daily cycle at 10-min slots
        out.append(max(0, min(total, round(base + rng.gauss(0, 3)))))
    return out


def test_band_is_ordered_and_bounded() -> None:
    f = LoadForecaster(horizon_slots=6)
    for i, u in enumerate(_series(400)):
        fc = f.update(i * 600.0, u, 100)
        assert 0 <= fc.lower <= fc.point <= fc.upper <= 100
        assert fc.horizon_s == 6 * 600


def test_not_warm_means_whole_cluster_upper() -> None:
    f = LoadForecaster(horizon_slots=3, warmup_slots=50)
    fc = f.update(0.0, 10, 40)
    assert not fc.warm and fc.upper == 40


def test_learning_is_delayed_by_the_horizon() -> None:
    f = LoadForecaster(horizon_slots=5)
    for i, u in enumerate(_series(30)):
        f.update(i * 600.0, u, 100)
        assert f.learned == max(0, i + 1 - 5)


def _assert_causal(a: list[int], b: list[int], cut: int, band_bins: int = 1) -> None:
    """Both series fed in full: identical forecasts up to ``cut``, where they agree, and
    a different one at the first altered slot (so the equality is not of forecasts that
    ignore the load)."""
    fa, fb = LoadForecaster(band_bins=band_bins), LoadForecaster(band_bins=band_bins)
    got_a = [fa.update(i * 600.0, u, 100) for i, u in enumerate(a)]
    got_b = [fb.update(i * 600.0, u, 100) for i, u in enumerate(b)]
    assert a[: cut + 1] == b[: cut + 1] and a[cut + 1] != b[cut + 1]
    assert got_a[: cut + 1] == got_b[: cut + 1]
    assert got_a[cut + 1] != got_b[cut + 1]


def test_forecaster_is_causal() -> None:
    """Same past, different future: identical forecasts up to the cut."""
    a, b = _series(600, seed=1), _series(600, seed=1)
    cut = 350
    b[cut + 1 :] = [100 - x for x in b[cut + 1 :]]
    _assert_causal(a, b, cut)


def test_learns_a_daily_cycle_better_than_at_the_start() -> None:
    s = _series(144 * 10, seed=2)
    f = LoadForecaster(horizon_slots=18)
    errs = []
    for i, u in enumerate(s):
        fc = f.update(i * 600.0, u, 100)
        if i + 18 < len(s):
            errs.append(abs(fc.point - max(s[i + 1 : i + 19])))
    first, last = errs[144 : 2 * 144], errs[-144:]
    assert sum(last) / len(last) < sum(first) / len(first)
    # the band covers roughly its nominal share of what happened
    assert sum(last) / len(last) < 10


def _noisy_afternoons(n: int, seed: int = 3) -> list[int]:
    """Flat 40 of 100 nodes; jumps of up to 30 nodes only between 12:00 and 15:00 UTC."""
    rng = random.Random(seed)
    return [40 + (rng.randint(0, 30) if 72 <= i % 144 < 90 else 0) for i in range(n)]


def test_calendar_band_follows_the_hour() -> None:
    """With time-of-day bins the band is wide only where the misses happened."""
    s = _noisy_afternoons(144 * 20)
    cond = LoadForecaster(horizon_slots=6, band_bins=8, warmup_slots=144)
    flat = LoadForecaster(horizon_slots=6, band_bins=1, warmup_slots=144)
    calm_c, calm_f, busy_c = [], [], []
    for i, u in enumerate(s):
        fc = cond.update(i * 600.0, u, 100)
        ff = flat.update(i * 600.0, u, 100)
        if i >= 144 * 15:
            slot = i % 144
            if slot < 36:  # 00:00-06:00: nothing ever rises then
                calm_c.append(fc.spread)
                calm_f.append(ff.spread)
            elif 54 <= slot < 72:  # 09:00-12:00: the forecast window reaches the jumps
                busy_c.append(fc.spread)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean(calm_c) < mean(calm_f) - 1
    assert mean(calm_c) < mean(busy_c) - 1


def test_calendar_band_is_causal() -> None:
    a, b = _series(900, seed=4), _series(900, seed=4)
    cut = 700
    b[cut + 1 :] = [0] * (900 - cut - 1)
    _assert_causal(a, b, cut, band_bins=8)


@pytest.mark.parametrize(
    "bad", [{"horizon_slots": 0}, {"band_quantile": 1.0}, {"band_bins": 0}, {"band_min": 0}]
)
def test_bad_parameters(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LoadForecaster(**bad)  # type: ignore[arg-type]


def test_small_bin_falls_back_to_the_pooled_band() -> None:
    """A bin past ``band_min`` but with too few residuals for the quantile must not
    widen the band to the whole cluster: the pooled window is used, as documented."""
    f = LoadForecaster(horizon_slots=18, band_bins=4, band_min=5, warmup_slots=0)
    for i in range(36 + 18 + 8):  # bin 1 (06:00-12:00) holds 8 residuals, the pool 44
        fc = f.update(i * 600.0, 50, 100)
    assert len(f.bin_residuals[1]) == 8 and len(f.residuals) == 44
    assert fc.upper < 60, fc


def test_no_quantile_band_from_too_few_residuals() -> None:
    """A 95% conformal bound needs n >= 19 residuals ((n + 1) * 0.95 <= n); before that
    the band is the whole cluster."""
    f = LoadForecaster(horizon_slots=3, warmup_slots=0)
    for i in range(3 + 18):  # 18 residuals
        fc = f.update(i * 600.0, 50 + (i % 3), 100)
    assert len(f.residuals) == 18 and fc.upper == 100 and fc.lower == 0
    fc = f.update(21 * 600.0, 50, 100)  # the 19th
    assert fc.upper < 100
