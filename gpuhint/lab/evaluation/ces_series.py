"""The energy / shortfall frontier on a load series: Slurm's idle timer against gpuhint.

A series has no jobs, only used nodes per minute, so waits cannot be measured: both
policies are judged by the **shortfall**, node-minutes of demand above the booted nodes,
on the per-minute series (the 10-minute slots only drive gpuhint's decisions).

* Idle timer (:func:`idle_timer_point`), per minute, nodes exchangeable: a node that
  stops being used goes idle; a node idle for ``SuspendTime`` powers off; demand above
  the on nodes takes idle nodes (the most recently idle first), then wakes off nodes,
  which are up ``boot_s`` later; until then the missing nodes are shortfall.
* gpuhint (:func:`slot_point`): the CES replay's powered-on count of each slot against
  every minute of it.

Energy saved = node-hours off x (idle W - off W) - node-hours booting x (boot W - idle W)
(all nodes on, those nodes would idle); every node starts on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

from gpuhint.lab.evaluation.ces import CesReplay
from gpuhint.lab.traces.loadseries import LoadSeries
from models.forecast import Forecast
from models.simulator.power import PowerModel
from models.simulator.power_counts import (
    CountReserve,
    CountResult,
    CountTimer,
    simulate_counts,
)

DAY_S = 86400


def idle_timer_point(
    minutes: LoadSeries, suspend_s: float, pm: PowerModel, lo: int, hi: int
) -> dict[str, Any]:
    """Slurm's idle timer over the minutes ``[lo, hi)`` of ``minutes`` (replayed from 0)."""
    r = simulate_counts(
        minutes.used,
        minutes.total,
        minutes.slot_s,
        CountTimer(suspend_s),
        boot_s=pm.boot_s,
        lo=lo,
        hi=hi,
        t0=minutes.start,
    )
    return _point(suspend_s, r, minutes, pm, lo, hi)


def reserve_point(
    minutes: LoadSeries, quantile: float, pm: PowerModel, lo: int, hi: int
) -> dict[str, Any]:
    """gpuhint's reserve policy on the per-minute counts (``models.simulator.power_counts``)."""
    pol = CountReserve(pm, minutes.slot_s, quantile=quantile)
    r = simulate_counts(
        minutes.used,
        minutes.total,
        minutes.slot_s,
        pol,
        boot_s=pm.boot_s,
        lo=lo,
        hi=hi,
        t0=minutes.start,
    )
    return _point(quantile, r, minutes, pm, lo, hi)


def _point(
    setting: float, r: CountResult, minutes: LoadSeries, pm: PowerModel, lo: int, hi: int
) -> dict[str, Any]:
    off_min, short, boot_min = r.off_node_min, r.shortfall_node_min, r.boot_node_min
    n = max(1, min(hi, minutes.n_slots) - lo)
    days = n * minutes.slot_s / DAY_S
    total = max(minutes.total[lo:hi], default=1) or 1
    return {
        "setting": setting,
        "energy_saved_kwh": (
            off_min / 60 * (pm.idle_w - pm.off_w) - boot_min / 60 * (pm.boot_w - pm.idle_w)
        )
        / 1000,
        "node_hours_off": off_min / 60,
        "added_wait_avg_s": None,
        "added_wait_p99_s": None,
        "jobs_delayed": None,
        "cycles_per_node_day": r.power_downs / total / days,
        "shortfall_node_min": short,
    }


def slot_point(
    setting: float,
    rec: CesReplay,
    minutes: LoadSeries,
    pm: PowerModel,
    lo: int,
    hi: int,
) -> dict[str, Any]:
    """gpuhint's replay judged per minute over the minutes ``[lo, hi)``."""
    slot_s, step = rec.series.slot_s, minutes.slot_s
    base = rec.series.start
    short = off_min = 0.0
    downs = 0
    prev = None
    for i in range(lo, min(hi, minutes.n_slots)):
        k = int((minutes.start + i * step - base) // slot_s)
        if not 0 <= k < len(rec.active):
            continue
        a = rec.active[k]
        if prev is not None and a < prev:
            downs += prev - a
        prev = a
        u, tot = minutes.used[i], minutes.total[i]
        short += max(0, u - a) * step / 60
        off_min += max(0, tot - max(a, u)) * step / 60
    r = CountResult(off_node_min=off_min, shortfall_node_min=short, power_downs=downs)
    return _point(setting, r, minutes, pm, lo, hi)


class RecordedForecaster:
    """Replays forecasts recorded from a first run (the forecast never sees the policy)."""

    def __init__(self, forecasts: Sequence[Forecast], horizon_slots: int) -> None:
        self.forecasts = forecasts
        self.horizon_slots = horizon_slots
        self.i = 0

    def update(self, time: float, used: float, total: int) -> Forecast:
        fc = self.forecasts[self.i]
        self.i += 1
        return fc


class RecordingForecaster:
    """Wraps a forecaster and keeps every forecast it makes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.horizon_slots: int = inner.horizon_slots
        self.out: list[Forecast] = []

    def update(self, time: float, used: float, total: int) -> Forecast:
        fc: Forecast = self.inner.update(time, used, total)
        self.out.append(fc)
        return fc

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _same(fc: RecordedForecaster) -> RecordedForecaster:
    return fc


def minute_window(minutes: LoadSeries, t_from: float, t_to: float) -> tuple[int, int]:
    lo = max(0, math.ceil((t_from - minutes.start) / minutes.slot_s))
    hi = min(minutes.n_slots, math.ceil((t_to - minutes.start) / minutes.slot_s))
    return lo, hi


#: gpuhint's knob on a series: the minimum buffer, in % of the cluster.
BUFFER_PCT: tuple[float, ...] = (0, 0.5, 1, 2, 3, 5, 8, 12, 20)


def series_frontier(
    series: LoadSeries,
    minutes: LoadSeries,
    cfg: Any,
    factory: Any,
    lo_slot: int,
    hi_slot: int,
    pm: PowerModel,
    suspend_times: Sequence[float],
    default_rec: CesReplay | None = None,
) -> dict[str, Any]:
    """Both frontiers over the test window, the default point and the dominance check."""
    from dataclasses import replace

    from gpuhint.lab.evaluation import ces
    from gpuhint.lab.evaluation.ces_jobs import default_check, dominance

    t_from, t_to = series.slot_time(lo_slot), series.slot_time(hi_slot)
    lo, hi = minute_window(minutes, t_from, t_to)
    timer = [idle_timer_point(minutes, s, pm, lo, hi) for s in suspend_times]
    from gpuhint.lab.evaluation.ces_jobs import DEFAULT_QUANTILE, QUANTILES

    qs = sorted(set(QUANTILES) | {DEFAULT_QUANTILE})
    res = {q: reserve_point(minutes, q, pm, lo, hi) for q in qs}
    gh = [res[q] for q in qs if q in QUANTILES]
    default = res[DEFAULT_QUANTILE]
    rec_fc = RecordingForecaster(factory())
    first = ces.replay(series, cfg, lambda: rec_fc, progress=False, until=hi_slot)
    total = max(series.total)
    slots = []
    for buf in sorted({round(total * pct / 100) for pct in BUFFER_PCT}):
        c = replace(cfg, min_buffer_nodes=buf, min_buffer_frac=0.0)
        fc = RecordedForecaster(rec_fc.out, rec_fc.horizon_slots)
        r = ces.replay(series, c, partial(_same, fc), progress=False, until=hi_slot)
        slots.append(slot_point(buf, r, minutes, pm, lo, hi))
    slot_default = slot_point(cfg.min_buffer(total), default_rec or first, minutes, pm, lo, hi)
    wk = "shortfall_node_min"
    return {
        "frontier": {"idle_timer": timer, "gpuhint": gh, "gpuhint_slots": slots},
        "default": default,
        "slot_policy_default": slot_default,
        "dominance": dominance(timer, gh, wk),
        "default_vs_timer_3600": default_check(default, timer, wk),
    }
