"""Online, strictly causal forecast of the nodes a cluster will need over the next horizon.

At the end of each slot ``t`` the forecaster is handed the slot's used nodes (the
maximum over the slot) and nothing else; it returns a :class:`Forecast` of the peak
used nodes over the next ``horizon_slots`` slots (``t+1 .. t+H``, up to 3 hours at
10-minute steps) with an uncertainty band.

How it works:

* Everything is in fractions of the cluster (used / total), so one model works for 20
  or 2,000 nodes.
* The target is the *rise* ``max(x[t+1..t+H]) - x[t]``; a River linear regression
  learns it from calendar features (hour of day as one-hot and harmonics, weekday,
  weekend), lags and differences, rolling mean/std/max over 1 h and 3 h, and what the
  same horizon did yesterday and a week ago.
* Learning is delayed by ``H`` slots: the sample made at ``t - H`` is learned at ``t``,
  when its target is known. Nothing is ever learned or read from after ``t``.
* The band is conformal and calendar-conditioned: empirical quantiles of the recent
  out-of-sample residuals of forecasts made at the same time of day (``band_bins``
  bins of the day, the last ``band_bin_days`` days of each), so its width tracks how good
  the forecast actually is *at that hour* -- rises cluster at the hours jobs arrive,
  nights are calm. Until a bin holds ``band_min`` residuals, the pooled window of the
  last ``band_window`` slots (every hour) is used.

>>> f = LoadForecaster(horizon_slots=3)
>>> for i in range(30):
...     fc = f.update(i * 600.0, used=10 + (i % 5), total=40)
>>> 0 <= fc.lower <= fc.point <= fc.upper <= 40
True
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from river import linear_model, optim

SLOTS_PER_DAY = 144  # at 10-minute slots
DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class Forecast:
    """Peak used nodes expected over ``(time, time + horizon_s]`` with a band.

    ``point`` is the point forecast, ``lower``/``upper`` the band (``band_quantile``
    of the recent residuals on each side), all in nodes. ``total`` is the cluster size.
    ``warm`` is False while the model has learned too little to be trusted.
    """

    time: float
    horizon_s: float
    point: float
    lower: float
    upper: float
    total: int
    warm: bool = True

    @property
    def spread(self) -> float:
        """Width of the upper half of the band, in nodes."""
        return max(0.0, self.upper - self.point)


class Forecaster(Protocol):
    """What the CES engine needs: one update per slot, returning the next forecast."""

    horizon_slots: int

    def update(self, time: float, used: float, total: int) -> Forecast: ...


class _SortedWindow:
    """A sliding window of floats that answers quantiles (kept sorted)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.fifo: deque[float] = deque()
        self.sorted: list[float] = []

    def add(self, v: float) -> None:
        self.fifo.append(v)
        bisect.insort(self.sorted, v)
        if len(self.fifo) > self.size:
            old = self.fifo.popleft()
            del self.sorted[bisect.bisect_left(self.sorted, old)]

    def __len__(self) -> int:
        return len(self.sorted)

    def quantile(self, q: float) -> float:
        xs = self.sorted
        if not xs:
            return 0.0
        pos = q * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class LoadForecaster:
    """River-based online forecaster of peak used nodes over the next horizon.

    Parameters: ``horizon_slots`` (1..18 at 10-minute slots), ``slot_s``,
    ``band_quantile`` (upper quantile of residuals used for the band, e.g. 0.95),
    ``band_window`` (pooled residuals remembered), ``band_bins`` (time-of-day bins of the
    conditional band; 1 = unconditional), ``band_bin_days`` (days remembered per bin),
    ``band_min`` (residuals a bin needs before it is used), ``warmup_slots`` (samples
    learned before the forecast is called warm), ``lr`` (SGD learning rate).
    """

    name = "river-linear"

    def __init__(
        self,
        horizon_slots: int = 18,
        slot_s: int = 600,
        band_quantile: float = 0.95,
        band_window: int = 7 * SLOTS_PER_DAY,
        warmup_slots: int = SLOTS_PER_DAY,
        band_bins: int = 1,
        band_bin_days: int = 14,
        band_min: int = 30,
        lr: float = 0.002,
        l2: float = 0.0,
        optimizer: str = "sgd",
        loss: str = "huber",
    ) -> None:
        if not 1 <= horizon_slots <= 10_000:
            raise ValueError("horizon_slots must be >= 1")
        if not 0.5 <= band_quantile < 1:
            raise ValueError("band_quantile must be in [0.5, 1)")
        if band_bins < 1 or band_bin_days < 1 or band_min < 1:
            raise ValueError("band_bins, band_bin_days and band_min must be >= 1")
        self.horizon_slots = horizon_slots
        self.slot_s = slot_s
        self.band_quantile = band_quantile
        self.warmup_slots = warmup_slots
        self.per_day = max(1, round(DAY_S / slot_s))
        opt = {"sgd": optim.SGD, "adam": optim.Adam, "adagrad": optim.AdaGrad}[optimizer](lr)
        lossf = optim.losses.Huber(epsilon=0.05) if loss == "huber" else optim.losses.Squared()
        self.model = linear_model.LinearRegression(
            optimizer=opt, intercept_lr=lr, l2=l2, loss=lossf
        )
        self.residuals = _SortedWindow(band_window)
        self.band_bins = band_bins
        self.band_min = band_min
        per_bin = max(1, band_bin_days * self.per_day // band_bins)
        self.bin_residuals = [_SortedWindow(per_bin) for _ in range(band_bins)]
        self.pending_bin: deque[int] = deque()  # time-of-day bin of each pending forecast
        keep = 7 * self.per_day + horizon_slots + 2
        self.hist: deque[float] = deque(maxlen=keep)  # used / total, oldest first
        self.pending: deque[dict[str, float]] = deque()  # features awaiting their target
        self.pending_pred: deque[float] = deque()
        self.learned = 0
        self.steps = 0
        self.abs_err_sum = 0.0
        # running rolling sums over 1 h and 3 h for mean/std
        self._w1 = max(1, round(3600 / slot_s))
        self._w3 = max(1, round(3 * 3600 / slot_s))

    def _band_need(self) -> int:
        """Residuals needed for a band: at least 10 and ``H``, and enough that the
        conformal quantile is finite (``ceil((n + 1) q) <= n``: n >= 19 at q = 0.95)."""
        q = self.band_quantile
        return max(10, self.horizon_slots, math.ceil(q / (1 - q) - 1e-9))

    def _bin(self, time: float) -> int:
        """Time-of-day bin (UTC) of a forecast made at ``time``."""
        return min(self.band_bins - 1, int((time % DAY_S) * self.band_bins // DAY_S))

    # -- features --------------------------------------------------------------------
    def _features(self, time: float) -> dict[str, float]:
        h = self.hist
        n = len(h)
        x = h[-1]
        w1 = min(self._w1, n)
        w3 = min(self._w3, n)
        last3 = [h[n - 1 - i] for i in range(w3)]
        m1 = sum(last3[:w1]) / w1
        m3 = sum(last3) / w3
        var3 = sum((v - m3) ** 2 for v in last3) / w3
        hour = (time % DAY_S) / 3600.0
        day = int(time // DAY_S)
        weekday = (day + 3) % 7  # 1970-01-01 was a Thursday; Monday = 0
        ang = 2 * math.pi * hour / 24
        feats: dict[str, float] = {
            "d1": x - h[n - 2] if n >= 2 else 0.0,
            "d3": x - h[n - 4] if n >= 4 else 0.0,
            "m1h": x - m1,
            "m3h": x - m3,
            "max3h": max(last3) - x,
            "min3h": x - min(last3),
            "sd3h": math.sqrt(var3),
            "lvl": x,
            "sin1": math.sin(ang),
            "cos1": math.cos(ang),
            "sin2": math.sin(2 * ang),
            "cos2": math.cos(2 * ang),
            "weekend": 1.0 if weekday >= 5 else 0.0,
            f"hour{int(hour)}": 1.0,
            f"wd{weekday}": 1.0,
        }
        H = self.horizon_slots
        for tag, lag in (("yday", self.per_day), ("lweek", 7 * self.per_day)):
            # what the same horizon did `lag` slots ago: rise over (t-lag, t-lag+H]
            base = n - 1 - lag
            if base >= 0 and base + H < n:
                ref = h[base]
                feats[f"rise_{tag}"] = max(h[base + i] for i in range(1, H + 1)) - ref
                feats[f"lvl_{tag}"] = x - ref
        return feats

    # -- the online step -----------------------------------------------------------------
    def update(self, time: float, used: float, total: int) -> Forecast:
        """Ingest slot ``time``'s used nodes; forecast the peak over the next horizon."""
        tot = max(int(total), 1)
        x = min(max(float(used), 0.0), float(tot)) / tot
        self.hist.append(x)
        self.steps += 1
        H = self.horizon_slots
        # learn the sample made H slots ago: its target is now fully observed
        if len(self.pending) >= H:
            feats = self.pending.popleft()
            pred = self.pending_pred.popleft()
            old_bin = self.pending_bin.popleft()
            n = len(self.hist)
            base = self.hist[n - 1 - H]
            target = max(self.hist[n - H + i] for i in range(H)) - base
            self.residuals.add(target - pred)
            if self.band_bins > 1:
                self.bin_residuals[old_bin].add(target - pred)
            self.abs_err_sum += abs(target - pred)
            self.model.learn_one(feats, target)
            self.learned += 1
        feats = self._features(time)
        pred = self.model.predict_one(feats)
        pred = max(-x, min(1.0 - x, pred))
        b = self._bin(time)
        self.pending.append(feats)
        self.pending_pred.append(pred)
        self.pending_bin.append(b)
        warm = self.learned >= self.warmup_slots
        point = (x + pred) * tot
        res = self.residuals
        need = self._band_need()
        if self.band_bins > 1 and len(self.bin_residuals[b]) >= max(self.band_min, need):
            res = self.bin_residuals[b]
        if len(res) >= need:
            q = self.band_quantile
            hi = res.quantile(q) * tot
            lo = res.quantile(1 - q) * tot
        else:  # nothing learned yet: the whole cluster might be needed
            hi, lo = float(tot), -float(tot)
        upper = min(float(tot), max(point, point + hi))
        lower = max(0.0, min(point, point + lo))
        point = min(max(point, 0.0), float(tot))
        return Forecast(time, H * self.slot_s, point, lower, upper, tot, warm)
