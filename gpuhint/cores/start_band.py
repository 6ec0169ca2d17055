"""Step 5 of the expected start (:mod:`gpuhint.cores.start_forecast`): an 80% band that
keeps its promise online. Pure.

Quantile tracking (Angelopoulos et al., "Conformal PID control", NeurIPS 2023): the
calibrated band's two halves, in log around the expected start, are stretched by a
factor that grows by ``step x 0.8`` at every job that started outside the band it was
first shown and shrinks by ``step x 0.2`` at every job inside it, so it moves towards
the stretch where one job in five misses; the step decays from :data:`FIRST_STEP` to
:data:`SPREAD_STEP`. Only jobs that started at least :data:`MIN_WAIT_S` after their
band was shown count: the band is for them (one that starts within a minute is inside
nearly always). A job still waiting past its band's end (and at least a minute after
the band was shown) is counted as a miss at the VC's next forecast, not when it
finally starts: otherwise the misses of a growing backlog would be learned only once
it drains. If its start turns out to have been inside the band (a start reported
late), that miss is taken back, so each job counts once. Each half of the band is at
least :data:`MIN_HALF_RATIO` wide before it is stretched: a band of zero width (the
learned ratios all equal) could not be widened by any stretch.

>>> band = BandTracker()
>>> band.shown("a", made=0.0, low=100.0, high=400.0)
>>> band.started("a", 1000.0)  # outside the band: a miss, the first counted
>>> round(band.spread, 2)
1.4
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

MIN_WAIT_S = 60.0
"""Waits shorter than this do not count (nor in the evaluation's coverage,
:mod:`gpuhint.lab.evaluation.starts`, which uses this constant)."""
BAND_MISS = 0.2
"""The share of jobs an 80% band may miss."""
SPREAD_STEP = 0.05
"""How far one job moves the stretch once the VC has counted a hundred jobs (quantile
tracking's learning rate): about a hundred jobs move it by one."""
FIRST_STEP = 0.5
"""The n-th job counted moves it by ``max(SPREAD_STEP, FIRST_STEP / sqrt(n))``: a VC
finds its stretch within its first few dozen jobs, then tracks it (a decaying step,
as in stochastic approximation)."""
MIN_SPREAD = 0.1
MAX_SPREAD = 10.0
MAX_BAND_RATIO = 1000.0
"""A stretched band's edges stay within this factor of its centre (a band a thousand
times the wait says nothing more, and its end must stay a valid time)."""
MIN_HALF_RATIO = 1.25
"""Each half of a band spans at least this factor of its centre before the stretch."""


def stretch(center: float, low: float, high: float, k: float) -> tuple[float, float]:
    """The band's edges (waits, s) ``k`` times as far from ``center`` in log, each half
    at least :data:`MIN_HALF_RATIO` wide before and within :data:`MAX_BAND_RATIO` after
    (``center`` > 0; 0 returns the band as it is).

    >>> [round(x) for x in stretch(100.0, 50.0, 400.0, 2.0)]
    [25, 1600]
    >>> [round(x) for x in stretch(100.0, 100.0, 100.0, 2.0)]
    [64, 156]
    """
    if center <= 0.0:
        return low, high
    floor = math.log(MIN_HALF_RATIO)
    below = max(math.log(center / low) if low > 0 else math.inf, floor)
    above = max(math.log(high / center) if high > 0 else floor, floor)
    lo = max(center * math.exp(-k * below), center / MAX_BAND_RATIO)
    hi = min(center * math.exp(k * above), center * MAX_BAND_RATIO)
    return lo, hi


@dataclass
class BandTracker:
    """One VC's stretch factor and the calibrated bands its waiting jobs were shown."""

    spread: float = 1.0
    bands: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Waiting job -> (when shown, low, high) of the first calibrated band it was shown."""
    deadlines: list[tuple[float, str]] = field(default_factory=list)
    """A heap of (time after which the job has missed its band, job id); lazily pruned."""
    missed: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Waiting jobs already counted as a miss -> (the step that count took, the change
    of the stretch it made: less than the step where the stretch hit its limit)."""
    counted: int = 0
    """Outcomes counted so far (they set the step)."""

    def shown(self, job_id: str, *, made: float, low: float, high: float) -> None:
        """A job's first calibrated band (a zero-width one, for a job expected to start
        at once, cannot be stretched: it is not tracked)."""
        if job_id in self.bands or high <= made:
            return
        self.bands[job_id] = (made, low, high)
        heapq.heappush(self.deadlines, (_deadline(made, high), job_id))
        if len(self.deadlines) > 2 * len(self.bands) + 64:
            self._compact()

    def overdue(self, now: float) -> None:
        """Count the jobs still waiting past their band's end as misses, once."""
        while self.deadlines and self.deadlines[0][0] < now:
            due, job_id = heapq.heappop(self.deadlines)
            band = self.bands.get(job_id)
            if band is None or job_id in self.missed or due != _deadline(band[0], band[2]):
                continue  # started, cancelled, or counted already
            before = self.spread
            step = self._move(1.0 - BAND_MISS)
            self.missed[job_id] = (step, self.spread - before)

    def started(self, job_id: str, start: float) -> None:
        """The job started at ``start``: count whether it was inside its band."""
        band = self.bands.pop(job_id, None)
        if band is None:
            return
        made, low, high = band
        waited = start - made >= MIN_WAIT_S
        inside = low <= start <= high
        early = self.missed.pop(job_id, None)
        if early is None:
            if waited:
                self._move(-BAND_MISS if inside else 1.0 - BAND_MISS)
        elif inside or not waited:  # counted at its deadline, but it started in time
            step, moved = early
            self._shift(-moved)  # take that miss back
            if waited:
                self._shift(-step * BAND_MISS)  # and count the hit, with the same step
            else:
                self.counted -= 1

    def forget(self, job_id: str) -> None:
        """The job left the queue without starting."""
        self.bands.pop(job_id, None)
        self.missed.pop(job_id, None)

    def _move(self, by: float) -> float:
        """Count one outcome (``by``: 1 - BAND_MISS for a miss, -BAND_MISS for a hit);
        the step it took."""
        self.counted += 1
        step = max(SPREAD_STEP, FIRST_STEP / math.sqrt(self.counted))
        self._shift(step * by)
        return step

    def _shift(self, delta: float) -> None:
        self.spread = min(MAX_SPREAD, max(MIN_SPREAD, self.spread + delta))

    def _compact(self) -> None:
        """Drop the deadlines of jobs that are no longer waiting."""
        self.deadlines = [(_deadline(m, h), j) for j, (m, _, h) in self.bands.items()]
        heapq.heapify(self.deadlines)


def _deadline(made: float, high: float) -> float:
    return max(high, made + MIN_WAIT_S)
