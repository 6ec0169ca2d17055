"""Expected start times: a forward simulation of one VC's queue. Pure, bounded.

``squeue --start`` only knows time limits; gpuhint knows every running job's expected
duration and every waiting job's rank, so it can say when each waiting job should start:

1. the GPUs in use free up as the running jobs end at their expected remaining time
   (a job past its expected duration is given a remaining time of a tenth of it, at
   least a minute, instead of "now");
2. the waiting jobs start in rank order (smallest priority first, as the hints ask the
   scheduler), each as soon as the GPUs it needs are free (head of line: no backfill);
3. jobs that will arrive later with a smaller priority overtake the waiting ones: the
   wait of a job of priority ``p`` is stretched by ``1 / (1 - rho(p))``, where
   ``rho(p)`` is the load (GPU-seconds per second per GPU of the VC) that recent
   arrivals ranked ahead of ``p`` brought (the classic delay of a priority queue),
   capped at 0.8.

The 80% band repeats step 1-2 with every duration at its p10 and at its p90. Only the
first ``limit`` waiting jobs are simulated (the work per forecast is bounded); the VC's
GPU capacity is the most GPUs its jobs were seen to hold at once.

4. The VC calibrates itself online, as its duration model does: for every job that
   starts after a forecast named it, the ratio of its real wait to the forecast's is
   learned (the 10th, 50th and 90th percentile of its log over the VC's last
   :data:`CALIBRATION_WINDOW` such jobs, River's ``RollingQuantile``); once
   :data:`CALIBRATE_AFTER` jobs were seen, the forecast wait is scaled by the median
   ratio and the band spans the 10th to the 90th percentile. What the simulation cannot see
   (fragmentation on nodes, hint updates that re-rank, a scheduler that is not strict
   priority order) is learned this way, per VC, not tuned per trace.
5. The band keeps its promise online: its halves are stretched by a factor that
   tracks the share of jobs that started outside the band they were first shown
   (:mod:`gpuhint.cores.start_band`).

>>> book = StartBook()
>>> book.started("r", start=0.0, gpus=4, expected=100.0, low=50.0, high=200.0)
>>> book.capacity = 4
>>> f = book.forecast(10.0, [Waiting("w", gpus=2, priority=20.0, expected=10.0,
...                   low=5.0, high=20.0)])
>>> f["w"]
StartForecast(expected=100.0, low=50.0, high=200.0)
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple, Protocol

from river import stats

from gpuhint.cores.start_band import MIN_WAIT_S, BandTracker, stretch
from gpuhint.wire.contract import MAX_TIME, ExpectedStart, JobEvent, PriorityHint, StartForecasts

MAX_OVERTAKE_LOAD = 0.8
ARRIVALS_KEPT = 256
MIN_REMAINING_S = 60.0
CALIBRATE_AFTER = 5
"""Jobs whose real wait was compared with their forecast before the VC's ratio is used."""
CALIBRATION_WINDOW = 256


class StartForecast(NamedTuple):
    """A waiting job's expected start and its 80% band (UNIX seconds)."""

    expected: float
    low: float
    high: float


@dataclass(frozen=True)
class Waiting:
    """A waiting job as the forecast needs it (rank order is the caller's)."""

    job_id: str
    gpus: int
    priority: float
    expected: float
    low: float
    high: float


@dataclass(frozen=True)
class Running:
    start: float
    gpus: int
    expected: float
    low: float
    high: float


_PICKS = (attrgetter("expected"), attrgetter("low"), attrgetter("high"))
"""The point forecast, then the band's two edges."""


def _remaining(run: Running, duration: float, now: float) -> float:
    left = run.start + duration - now
    return max(left, 0.1 * duration, MIN_REMAINING_S) if left <= 0 else left


def _simulate(
    now: float,
    capacity: int,
    running: Sequence[tuple[float, int]],
    waiting: Sequence[Waiting],
    durations: Sequence[float],
) -> list[float]:
    """Start times of ``waiting`` in order: head-of-line, GPUs freed as jobs end."""
    ends = list(running)  # (end time, gpus)
    heapq.heapify(ends)
    free = capacity - sum(g for _, g in running)
    t = now
    starts = []
    for job, duration in zip(waiting, durations, strict=True):
        need = min(job.gpus, capacity)
        while free < need and ends:
            end, gpus = heapq.heappop(ends)
            t = max(t, end)
            free += gpus
        starts.append(t)
        free -= need
        heapq.heappush(ends, (t + duration, need))
    return starts


@dataclass
class StartBook:
    """What one VC's forecast needs beyond its waiting jobs: the running jobs, the GPU
    capacity seen, and recent arrivals (time, priority) for the overtaking load."""

    running: dict[str, Running] = field(default_factory=dict)
    capacity: int = 0
    arrivals: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=ARRIVALS_KEPT)
    )
    published_at: float = float("-inf")
    told: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Jobs named by a forecast: (when, the raw forecast start), until they start."""
    log_ratio: tuple[stats.RollingQuantile, ...] = field(
        default_factory=lambda: tuple(
            stats.RollingQuantile(q=q, window_size=CALIBRATION_WINDOW) for q in (0.5, 0.1, 0.9)
        )
    )
    """Real wait / forecast wait, in log: its median, 10th and 90th percentile."""
    calibrated: int = 0
    band: BandTracker = field(default_factory=BandTracker)
    """Step 5: the band's stretch and the calibrated bands the waiting jobs were shown."""

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restore a pickle, filling the fields that a pickle of before lacks."""
        state.setdefault("band", BandTracker())
        self.__dict__.update(state)

    def arrived(self, time: float, priority: float) -> None:
        self.arrivals.append((time, priority))

    def started(
        self, job_id: str, *, start: float, gpus: int, expected: float, low: float, high: float
    ) -> None:
        self.running[job_id] = Running(start, gpus, expected, low, high)
        self.capacity = max(self.capacity, sum(r.gpus for r in self.running.values()))
        told = self.told.pop(job_id, None)
        if told is not None:
            made, raw = told
            ratio = max(start - made, MIN_WAIT_S) / max(raw - made, MIN_WAIT_S)
            for q in self.log_ratio:
                q.update(math.log(ratio))
            self.calibrated += 1
        self.band.started(job_id, start)

    def finished(self, job_id: str) -> None:
        self.running.pop(job_id, None)
        self.told.pop(job_id, None)  # left the queue without starting (cancelled)
        self.band.forget(job_id)

    def _scales(self) -> tuple[float, float, float] | None:
        """Wait multipliers of (expected, low, high) from the learned ratio (None: not
        enough jobs seen yet); step 5's stretch is not in them."""
        if self.calibrated < CALIBRATE_AFTER:
            return None
        mid, low, high = (math.exp(q.get() or 0.0) for q in self.log_ratio)
        return mid, low, high

    def overtake_loads(self, priorities: Sequence[float], now: float) -> list[float]:
        """For each priority, the load of recent arrivals ranked ahead of it (0 .. cap)."""
        if len(self.arrivals) < 2 or self.capacity <= 0:
            return [0.0] * len(priorities)
        span = max(now - self.arrivals[0][0], 3600.0)
        ranked = sorted(p for _, p in self.arrivals)
        prefix = list(itertools.accumulate(ranked, initial=0.0))
        scale = span * self.capacity
        return [
            min(MAX_OVERTAKE_LOAD, prefix[bisect.bisect_left(ranked, p)] / scale)
            for p in priorities
        ]

    def forecast(
        self,
        now: float,
        waiting: Sequence[Waiting],
        limit: int = 64,
        busy_gpus: int = 0,
        overtake: bool = True,
    ) -> dict[str, StartForecast]:
        """Expected start and band of the first ``limit`` of ``waiting`` (rank order).

        ``busy_gpus``: GPUs the VC's jobs hold now; those of jobs the book never saw
        start (running before gpuhint did) are taken to free up after the longest
        expected duration among the waiting jobs (nothing better is known of them).
        ``overtake`` False: no later arrival overtakes (step 3 off: arrival order)."""
        self.band.overdue(now)
        head = list(waiting[:limit])
        if not head:
            return {}
        runs = list(self.running.values())
        unknown = busy_gpus - sum(r.gpus for r in runs)
        if unknown > 0:
            guess = max(w.expected for w in head)
            runs.append(Running(now, unknown, guess, guess, guess))
        capacity = max(self.capacity, busy_gpus, max(w.gpus for w in head))
        out = {}
        sims = []
        for pick in _PICKS:
            running = [(now + _remaining(r, pick(r), now), r.gpus) for r in runs]
            sims.append(_simulate(now, capacity, running, head, [pick(w) for w in head]))
        if overtake:
            loads = self.overtake_loads([w.priority for w in head], now)
        else:
            loads = [0.0] * len(head)
        scales = self._scales()
        for w, exp, low, high, load in zip(head, *sims, loads, strict=True):
            stretch_by = 1.0 / (1.0 - load)
            raw = now + (exp - now) * stretch_by
            self.told.setdefault(w.job_id, (now, raw))
            if scales is None:  # not calibrated yet: the band of the p10 / p90 durations
                out[w.job_id] = _capped(now, raw, low, now + (high - now) * stretch_by)
                continue
            # the learned ratio and its spread, stretched by step 5; the band is taken
            # on the wait as the ratio was learned (at least a minute), so that a job
            # expected to start at once still gets one
            k_mid, k_low, k_high = scales
            mid, base = (raw - now) * k_mid, max(raw - now, MIN_WAIT_S)
            lo_w, hi_w = stretch(base * k_mid, base * k_low, base * k_high, self.band.spread)
            f = out[w.job_id] = _capped(now, now + mid, now + min(lo_w, mid), now + hi_w)
            self.band.shown(w.job_id, made=now, low=f.low, high=f.high)
        return out


def _capped(now: float, expected: float, low: float, high: float) -> StartForecast:
    """A forecast whose times the wire contract accepts (none past ``MAX_TIME``), its
    band around its expected start (``low <= expected <= high``: before calibration the
    p10 run of a job past its p10 duration can end after the expected run's end).

    >>> _capped(0.0, 100.0, 150.0, 90.0)
    StartForecast(expected=100.0, low=100.0, high=100.0)
    """
    expected = min(expected, MAX_TIME)
    return StartForecast(expected, min(low, expected), min(max(high, expected), MAX_TIME))


class _Pending(Protocol):
    """What the forecast reads of a waiting job (:class:`gpuhint.cores.qssf.PendingJob`)."""

    @property
    def event(self) -> JobEvent: ...
    @property
    def hint(self) -> PriorityHint: ...


def forecast_vc(
    book: StartBook,
    pending: Iterable[_Pending],
    cluster: str,
    vc: str,
    now: float,
    limit: int,
    busy_gpus: int = 0,
    overtake: bool = True,
) -> StartForecasts:
    """The VC's expected starts as published: its first ``limit`` waiting jobs by rank
    (priority, then submit time and id, as the simulator and the appliers order them);
    ``overtake`` as in :meth:`StartBook.forecast`."""
    head = heapq.nsmallest(
        limit, pending, key=lambda j: (j.hint.priority, j.event.submit_time, j.event.job_id)
    )
    waiting = []
    for j in head:
        h = j.hint
        pred = h.predicted_duration_s
        waiting.append(
            Waiting(
                j.event.job_id,
                j.event.num_gpus,
                h.priority,
                pred,
                pred if h.duration_p10_s is None else h.duration_p10_s,
                pred if h.duration_p90_s is None else h.duration_p90_s,
            )
        )
    starts = book.forecast(now, waiting, limit, busy_gpus, overtake)
    jobs = tuple(
        ExpectedStart.model_construct(job_id=w.job_id, **starts[w.job_id]._asdict())
        for w in waiting
    )
    return StartForecasts.model_construct(cluster=cluster, vc=vc, time=now, jobs=jobs)
