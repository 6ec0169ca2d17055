"""Offline evaluation of CES on a recorded load series, online and strictly causal.

:func:`replay` drives :class:`gpuhint.cores.ces.CesEngine` over every slot of the series
from the first one, with every node powered on at the start (as a real cluster that
turns CES on), exactly as the worker would; :func:`summarize` reports over a test window.

Timing model (one slot = 10 minutes by default):

* ``active[i]`` is the powered-on count planned for slot ``i``, decided at the end of
  slot ``i-1`` (``active[0] = total``).
* ``used[i]`` is the peak used nodes over slot ``i``. If ``used[i] > active[i]`` the slot
  has a *shortfall* of ``used[i] - active[i]`` nodes: jobs wait while nodes are woken
  within the slot, so the slot's effective powered-on count is ``max(active[i], used[i])``
  (utilization after, powered-off nodes and energy are computed with it).
* A *change* is a decision that moves the planned count; a *wake action* one that raises it.

>>> from gpuhint.lab.traces.loadseries import LoadSeries
>>> s = LoadSeries("toy", 0.0, 600, [5] * 432, [10] * 432)
>>> r = replay(s, progress=False)
>>> m = summarize(r)
>>> m["util_before"], m["shortfall_events"], m["util_after"] > 0.6
(0.5, 0, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from gpuhint.cores.ces import CesEngine, ForecasterFactory, SlotObservation
from gpuhint.lab.traces.loadseries import LoadSeries
from models.power_policy import PowerPolicyConfig

DAY_S = 86400


@dataclass
class CesReplay:
    """Per-slot record of a replay (lists indexed by slot).

    ``active[i]``: powered-on count planned for slot ``i``; ``plan[i]``: the count the
    decision at the end of slot ``i`` set for slot ``i+1``; ``forecast[i]``: the peak
    used nodes forecast at the end of slot ``i`` for slots ``i+1 .. i+H``.
    """

    series: LoadSeries
    config: PowerPolicyConfig
    horizon_slots: int
    active: list[int] = field(default_factory=list)
    plan: list[int] = field(default_factory=list)
    forecast: list[float] = field(default_factory=list)
    forecast_upper: list[float] = field(default_factory=list)
    changed: list[bool] = field(default_factory=list)
    woke: list[bool] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def replay(
    series: LoadSeries,
    config: PowerPolicyConfig | None = None,
    forecaster_factory: ForecasterFactory | None = None,
    progress: bool | None = None,
    until: int | None = None,
    on_step: Callable[[int], None] | None = None,
) -> CesReplay:
    """Replay ``series`` through the engine; ``until`` stops after that many slots."""
    cfg = config or PowerPolicyConfig(slot_s=series.slot_s)
    engine = CesEngine(None, cfg, forecaster_factory, emit_messages=False)
    n = series.n_slots if until is None else min(until, series.n_slots)
    rec = CesReplay(series, cfg, horizon_slots=0)
    it: Any = range(n)
    if progress is None or progress:
        from tqdm import tqdm

        it = tqdm(
            it,
            desc=f"ces {series.name}",
            unit="slot",
            disable=None if progress is None else False,
            mininterval=0.5,
        )
    used, total = series.used, series.total
    for i in it:
        obs = SlotObservation(time=series.slot_time(i), used=used[i], total=total[i])
        step = engine.observe(obs)
        d = step.decision
        rec.active.append(d.previous)
        rec.plan.append(d.active)
        rec.forecast.append(step.forecast.point)
        rec.forecast_upper.append(step.forecast.upper)
        rec.changed.append(d.changed)
        rec.woke.append(d.changed and d.action == "wake")
        rec.reasons.append(d.reason)
        rec.horizon_slots = round(step.forecast.horizon_s / series.slot_s)
        if on_step is not None:
            on_step(i)
    return rec


def parse_day(value: str) -> date:
    try:
        return date.fromisoformat(value.strip()[:10])
    except ValueError:
        raise ValueError(f"not a date (YYYY-MM-DD): {value!r}") from None


def window_slots(
    series: LoadSeries, test_from: str | None = None, test_to: str | None = None, days: int = 7
) -> tuple[int, int]:
    """Slot range ``[lo, hi)`` of the test days (both included; default: the last ``days``)."""
    last_day = datetime.fromtimestamp(series.slot_time(series.n_slots - 1), UTC).date()
    d_to = parse_day(test_to) if test_to else last_day
    d_from = parse_day(test_from) if test_from else d_to - timedelta(days=days - 1)
    if d_from > d_to:
        raise ValueError(f"--test-from {d_from} is after --test-to {d_to}")
    t0 = datetime(d_from.year, d_from.month, d_from.day, tzinfo=UTC).timestamp()
    end = d_to + timedelta(days=1)
    t1 = datetime(end.year, end.month, end.day, tzinfo=UTC).timestamp()
    lo = max(0, math.ceil((t0 - series.start) / series.slot_s))
    hi = min(series.n_slots, math.ceil((t1 - series.start) / series.slot_s))
    if hi <= lo:
        first = datetime.fromtimestamp(series.start, UTC).date()
        raise ValueError(
            f"test window {d_from} .. {d_to} has no slots (series covers {first} .. {last_day})"
        )
    return lo, hi


def _powered_on(active: int, used: int, total: int) -> int:
    """A slot's powered-on nodes: the plan, or the used nodes when more were woken within
    it; never more than the cluster has (a plan made before nodes left names them too)."""
    return min(max(active, used), max(total, used))


def summarize(rec: CesReplay, lo: int = 0, hi: int | None = None) -> dict[str, Any]:
    """Metrics over slots ``[lo, hi)`` (keys as documented for ``--json``)."""
    s = rec.series
    hi = len(rec.active) if hi is None else min(hi, len(rec.active))
    if hi <= lo:
        raise ValueError("empty evaluation window")
    n = hi - lo
    slot_h = s.slot_s / 3600
    days = n * s.slot_s / DAY_S
    ub = ua = off = 0.0
    sf_events = sf_nodes = 0
    totals: set[int] = set()
    for i in range(lo, hi):
        u, t, a = s.used[i], s.total[i], rec.active[i]
        totals.add(t)
        eff = _powered_on(a, u, t)
        ub += u / t if t else 0.0
        ua += u / eff if eff else 1.0
        off += t - eff
        if u > a:
            sf_events += 1
            sf_nodes += u - a
    changes = sum(rec.changed[lo:hi])
    wakes = sum(rec.woke[lo:hi])
    H = max(1, rec.horizon_slots)
    err = 0.0
    cnt = 0
    for i in range(lo, min(hi, s.n_slots - H)):
        target = max(s.used[i + 1 : i + 1 + H])
        err += abs(rec.forecast[i] - target)
        cnt += 1
    node_hours = off * slot_h
    watts = rec.config.watts_per_node
    return {
        "util_before": ub / n,
        "util_after": ua / n,
        "changes_per_day": changes / days,
        "wakeups_per_day": wakes / days,
        "shortfall_events": sf_events,
        "shortfall_node_slots": sf_nodes,
        "slot_minutes": s.slot_s / 60,
        "n_slots": n,
        "total_nodes": max(totals),
        "mean_powered_off": off / n,
        "forecast_mae": err / cnt if cnt else None,
        "forecast_target": f"peak used nodes over the next {H} slots",
        "node_hours_saved": node_hours,
        "energy_saved_kwh": node_hours * watts / 1000,
        "watts_per_node": watts,
        "days": days,
        "changes": changes,
        "wakeups": wakes,
        "test_from": datetime.fromtimestamp(s.slot_time(lo), UTC).isoformat(),
        "test_to": datetime.fromtimestamp(s.slot_time(hi), UTC).isoformat(),
        "series": s.name,
    }


def first_divergence(
    series: LoadSeries,
    cut: int,
    config: PowerPolicyConfig | None = None,
    forecaster_factory: ForecasterFactory | None = None,
    alter: Callable[[int, int], int] | None = None,
    factory_for: Callable[[LoadSeries], ForecasterFactory] | None = None,
) -> int | None:
    """Causality check: replay ``series`` and a copy whose slots after ``cut`` are altered.

    Every decision and forecast made at the end of slots ``0 .. cut`` must be identical,
    since none of them may depend on what happens later. Returns the first slot where
    they differ, or None when the replay is causal up to ``cut``. ``factory_for(series)``
    builds the forecaster factory from the series being replayed (a forecaster that is
    handed the data, e.g. by mistake, is then caught).
    """
    alter = alter or (lambda i, u: 0)  # default: the cluster empties after the cut
    used2 = list(series.used)
    for i in range(cut + 1, len(used2)):
        used2[i] = max(0, min(series.total[i], alter(i, used2[i])))
    s2 = LoadSeries(series.name, series.start, series.slot_s, used2, list(series.total))
    fa = factory_for(series) if factory_for else forecaster_factory
    fb = factory_for(s2) if factory_for else forecaster_factory
    a = replay(series, config, fa, progress=False)
    b = replay(s2, config, fb, progress=False)
    for i in range(min(cut + 1, series.n_slots)):
        if (
            a.plan[i] != b.plan[i]
            or a.forecast[i] != b.forecast[i]
            or a.forecast_upper[i] != b.forecast_upper[i]
        ):
            return i
    return None


def plot(rec: CesReplay, path: str, lo: int = 0, hi: int | None = None) -> None:
    """Save a PNG of used, powered-on (effective), forecast and total nodes over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    s = rec.series
    hi = len(rec.active) if hi is None else hi
    xs: Any = [datetime.fromtimestamp(s.slot_time(i), UTC) for i in range(lo, hi)]
    used = s.used[lo:hi]
    tot = s.total[lo:hi]
    eff = [_powered_on(a, u, t) for a, u, t in zip(rec.active[lo:hi], used, tot, strict=True)]
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot(xs, s.total[lo:hi], color="0.6", lw=1, label="total nodes")
    ax.plot(xs, eff, color="tab:green", lw=1.4, label="powered on (CES)")
    ax.plot(xs, used, color="tab:blue", lw=0.9, label="used (peak per slot)")
    ax.plot(
        xs,
        rec.forecast[lo:hi],
        color="tab:orange",
        lw=0.8,
        ls="--",
        label=f"forecast: peak over next {rec.horizon_slots * s.slot_s / 3600:g} h",
    )
    sf = [(x, u) for x, u, a in zip(xs, used, rec.active[lo:hi], strict=True) if u > a]
    if sf:
        ax.scatter(
            [p[0] for p in sf], [p[1] for p in sf], color="red", s=12, zorder=5, label="shortfall"
        )
    ax.set_ylabel("nodes")
    ax.set_title(f"CES replay of {s.name} ({s.slot_s // 60}-minute slots, UTC)")
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d"))
    ax.grid(axis="y", ls=":")
    ax.legend(loc="lower left", fontsize=8, ncol=5)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
