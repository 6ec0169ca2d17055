"""How good are the expected starts? Measured in the closed-loop simulation.

The hint core publishes each VC's expected starts as the simulated schedule unfolds
(:mod:`gpuhint.cores.start_forecast`); :class:`StartRecorder` keeps, for every job, the
first forecast that named it (what a user sees right after submitting) and, where the
trace has requested time limits, what ``squeue --start`` would have said at the same
moment (the same forward simulation with every duration at its time limit). After the
run, :func:`start_accuracy` compares both with the simulated start:

* ``median_rel_error``: median of |expected - actual start| / actual wait, over the jobs
  that waited at least a minute and were named by a forecast;
* ``band_coverage``: the share of those whose actual start fell inside the 80% band;
* ``limit_median_rel_error``: the same median for the time-limit estimate (None when
  the trace has no limits), over the ``limit_jobs`` it could name;
* ``median_rel_error_limit_jobs``: gpuhint's median over those same jobs, the figure
  to set beside it (None without limits);
* ``exact_median_rel_error``: the same median for ``squeue --start`` had every user
  asked for exactly their job's duration (the forward simulation on the true
  durations, running and waiting; no arrivals expected), over the jobs gpuhint named:
  what is left of the error when durations are known, from the jobs that arrive later
  and overtake, re-ranking and placement.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuhint.cores.start_band import MIN_WAIT_S  # the jobs the band tracks: the same
from gpuhint.cores.start_forecast import Running, StartBook, Waiting
from gpuhint.wire.contract import StartForecasts


@dataclass
class StartRecorder:
    """The first forecast of each job (index by job id), the time-limit estimate and the
    estimate from exact limits (the true durations).

    ``gpus``, ``limits`` and ``durations`` are per job index (a limit None: the job has
    none; no ``durations``: no exact estimate)."""

    index_of: dict[str, int]
    gpus: Sequence[int]
    limits: Sequence[float | None]
    durations: Sequence[float] | None = None
    first: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    by_limit: dict[int, float] = field(default_factory=dict)
    by_exact: dict[int, float] = field(default_factory=dict)

    def record(self, forecast: StartForecasts, book: StartBook | None) -> None:
        """Keep the forecast of the jobs it names for the first time."""
        new = {
            self.index_of[j.job_id]: j
            for j in forecast.jobs
            if j.job_id in self.index_of and self.index_of[j.job_id] not in self.first
        }
        for i, j in new.items():
            self.first[i] = (j.expected, j.low, j.high)
        if new and book is not None:
            self._squeue_start(forecast, book, set(new), self.limits, self.by_limit)
            if self.durations is not None:
                self._squeue_start(forecast, book, set(new), self.durations, self.by_exact)

    def _squeue_start(
        self,
        forecast: StartForecasts,
        book: StartBook,
        wanted: set[int],
        run_times: Sequence[float | None],
        into: dict[int, float],
    ) -> None:
        """``squeue --start``: the same queue, every job (running or waiting) taking
        ``run_times`` (per job index), no arrivals expected; kept ``into`` for the
        ``wanted`` jobs. Nothing when a job in it has no run time (a job without a limit)."""

        def run_time(job_id: str) -> float | None:
            i = self.index_of.get(job_id)
            return None if i is None else run_times[i]

        waiting = []
        for j in forecast.jobs:
            t = run_time(j.job_id)
            if t is None:
                return
            gpus = self.gpus[self.index_of[j.job_id]]
            waiting.append(Waiting(j.job_id, gpus, 0.0, t, t, t))
        runs = {}
        for jid, r in book.running.items():
            t = run_time(jid)
            if t is None:
                return
            runs[jid] = Running(r.start, r.gpus, t, t, t)
        plain = StartBook(running=runs, capacity=book.capacity)  # no overtaking
        for jid, f in plain.forecast(forecast.time, waiting, len(waiting)).items():
            if self.index_of[jid] in wanted:
                into[self.index_of[jid]] = f.expected


def start_accuracy(
    runs: Sequence[tuple[Sequence[float], Sequence[float], StartRecorder]],
) -> dict[str, Any]:
    """The ``expected_start`` block of ``evaluate qssf --json`` (see the module doc):
    ``runs`` holds, per VC, the jobs' submit and simulated start times (in the order of
    the recorder's job indices) and the recorder."""
    rel, rel_limit, rel_same, rel_exact, inside, waited = [], [], [], [], 0, 0
    for submit, start, rec in runs:
        for i, (s, a) in enumerate(zip(submit, start, strict=True)):
            wait = a - s
            if wait < MIN_WAIT_S:
                continue
            waited += 1
            f = rec.first.get(i)
            if f is None:
                continue
            expected, low, high = f
            rel.append(abs(expected - a) / wait)
            inside += low <= a <= high
            if i in rec.by_limit:
                rel_limit.append(abs(rec.by_limit[i] - a) / wait)
                rel_same.append(rel[-1])
            if i in rec.by_exact:
                rel_exact.append(abs(rec.by_exact[i] - a) / wait)
    return {
        "jobs_waited": waited,
        "jobs_forecast": len(rel),
        "median_rel_error": _median(rel),
        "band_coverage": round(inside / len(rel), 4) if rel else None,
        "limit_jobs": len(rel_limit),
        "limit_median_rel_error": _median(rel_limit),
        "median_rel_error_limit_jobs": _median(rel_same),
        "exact_median_rel_error": _median(rel_exact),
    }


def _median(xs: Sequence[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None
