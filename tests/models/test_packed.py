"""Packed checkpoint columns: exact round trips, and the job-aware policy's histories
deciding alike after a restore (models/packed.py, models/power_jobs.py)."""

from __future__ import annotations

import math
import pickle
import random

import pytest

from models.packed import pack_columns, unpack_columns
from models.power_jobs import _Gaps, _History


@pytest.mark.parametrize(
    "ts",
    [
        [],
        [1.5e9],
        [1.6e9 + k * 60.0 + 0.123456789 * (k % 7) for k in range(500)],
        [-3.25, -0.0, 0.0, 5e-324, 1e300, math.inf, -math.inf, math.nan],
        [-1e308, 1e308, -1e308],
    ],
)
def test_floats_come_back_bit_for_bit(ts: list[float]) -> None:
    (got,), _ = unpack_columns(pack_columns([ts], []))
    assert [x.hex() for x in got] == [x.hex() for x in ts]


def test_columns_of_any_lengths_round_trip() -> None:
    times = [[0.1, 0.2, 0.3], [], [7.0]]
    ints = [[1, -2, 2**40, -(2**63), 2**63 - 1], []]
    t, x = unpack_columns(pack_columns(times, ints))
    assert [list(c) for c in t] == times
    assert [list(c) for c in x] == ints


def _stream(rng: random.Random, n: int) -> list[tuple[float, int, int | None]]:
    t, out = 1.7e9 + rng.random(), []
    for _ in range(n):
        t += 60.0 if rng.random() < 0.7 else rng.uniform(0.001, 300.0)
        out.append((t, rng.choice([0, 0, 0, 1, 2, 5, 17]), rng.choice([None, 0, 1, 3])))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_a_restored_history_answers_and_expires_as_the_original(seed: int) -> None:
    rng = random.Random(seed)
    events = _stream(rng, 3000)
    live = _History(keep_s=20 * 3600.0)
    for t, x, s in events[:2000]:
        live.add(t, x, s)
    restored = pickle.loads(pickle.dumps(live))
    assert restored.times == live.times and restored.sorted == live.sorted
    for t, x, s in events[2000:]:  # past the cut: samples keep expiring alike
        for h in (live, restored):
            h.add(t, x, s)
        for st in (None, 0, 1, 3):
            for q in (0.0, 0.5, 0.98, 1.0):
                assert restored.quantile(st, q, 1) == live.quantile(st, q, 1)
    assert restored.times == live.times


def test_a_week_of_minute_samples_packs_far_smaller_than_its_tuples() -> None:
    h = _History(keep_s=7 * 86400.0)
    rng = random.Random(1)
    for k in range(7 * 1440):
        h.add(1.7e9 + 60.0 * k, rng.choice([0, 0, 1, 3]), rng.choice([None, 0, 2]))
    tuples = pickle.dumps({"times": h.times, "sorted": h.sorted})
    assert len(pickle.dumps(h)) * 5 < len(tuples)  # random values; ~100x on real traces


def test_a_history_pickled_before_packing_still_restores() -> None:
    h = _History(keep_s=3600.0)
    for t, x, s in _stream(random.Random(2), 200):
        h.add(t, x, s)
    old = _History.__new__(_History)
    old.__setstate__(dict(h.__dict__))  # the layout of a checkpoint of before packing
    assert old.times == h.times and old.sorted == h.sorted
    assert pickle.loads(pickle.dumps(old)).times == h.times


def test_restored_idle_periods_keep_their_sums_and_pick_the_same_timeout() -> None:
    from models.simulator.power import PowerModel

    rng = random.Random(3)
    g = _Gaps(keep_s=86400.0)
    t = 1.7e9
    for _ in range(800):
        t += rng.uniform(1.0, 900.0)
        g.add(t, rng.expovariate(1 / 1800.0))
    back = pickle.loads(pickle.dumps(g))
    assert back.items == g.items and back.count == g.count and back.total == g.total
    pm = PowerModel()
    for _ in range(200):
        t += rng.uniform(1.0, 900.0)
        gap = rng.expovariate(1 / 1800.0)
        g.add(t, gap)
        back.add(t, gap)
        assert back.best_timeout(pm, 300.0) == g.best_timeout(pm, 300.0)
    assert back.total == g.total
