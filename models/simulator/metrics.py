"""Summaries of a simulated schedule: average JCT and queueing, JCT percentiles, per size,
and the tails operators judge a policy by (:func:`tail_stats`).

>>> s = summarize([1, 1, 2], [10.0, 20.0, 30.0], [0.0, 5.0, 10.0])
>>> s.avg_jct_s, s.p50_jct_s, s.by_gpus["1"].jobs
(20.0, 20.0, 2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

GPU_BUCKETS: tuple[tuple[int, int], ...] = (
    (1, 1),
    (2, 2),
    (3, 4),
    (5, 8),
    (9, 16),
    (17, 32),
    (33, 64),
    (65, 10**9),
)


def bucket_name(gpus: int) -> str:
    """``"1"``, ``"2"``, ``"3-4"``, ``"5-8"``, ... ``"65+"``."""
    for lo, hi in GPU_BUCKETS:
        if lo <= gpus <= hi:
            return str(lo) if lo == hi else f"{lo}+" if hi >= 10**9 else f"{lo}-{hi}"
    return "0"


def percentile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (NumPy's default) of an ascending sequence."""
    if not sorted_xs:
        return math.nan
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class GroupStats:
    jobs: int
    avg_jct_s: float
    avg_queue_s: float


@dataclass(frozen=True)
class Summary:
    jobs: int
    avg_jct_s: float
    avg_queue_s: float
    p50_jct_s: float
    p95_jct_s: float
    p99_jct_s: float
    by_gpus: dict[str, GroupStats] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "avg_jct_s": self.avg_jct_s,
            "avg_queue_s": self.avg_queue_s,
            "p50_jct_s": self.p50_jct_s,
            "p95_jct_s": self.p95_jct_s,
            "p99_jct_s": self.p99_jct_s,
            "by_gpus": {
                k: {"jobs": v.jobs, "avg_jct_s": v.avg_jct_s, "avg_queue_s": v.avg_queue_s}
                for k, v in self.by_gpus.items()
            },
        }


def summarize(gpus: Sequence[int], jct: Sequence[float], queue: Sequence[float]) -> Summary:
    """Summarize per-job JCTs and queueing delays (same order as ``gpus``)."""
    n = len(jct)
    if n == 0:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan)
    xs = sorted(jct)
    groups: dict[str, list[tuple[float, float]]] = {}
    for g, j, q in zip(gpus, jct, queue, strict=True):
        groups.setdefault(bucket_name(g), []).append((j, q))
    order = {bucket_name(lo): k for k, (lo, _) in enumerate(GPU_BUCKETS)}
    by = {
        name: GroupStats(len(v), sum(j for j, _ in v) / len(v), sum(q for _, q in v) / len(v))
        for name, v in sorted(groups.items(), key=lambda kv: order.get(kv[0], -1))
    }
    return Summary(
        jobs=n,
        avg_jct_s=sum(jct) / n,
        avg_queue_s=sum(queue) / n,
        p50_jct_s=percentile(xs, 50),
        p95_jct_s=percentile(xs, 95),
        p99_jct_s=percentile(xs, 99),
        by_gpus=by,
    )


#: Bounded slowdown divides a job's JCT by ``max(duration, BSLD_BOUND_S)``: a job of a few
#: seconds that waits a minute is not "60x slowed down".
BSLD_BOUND_S = 60.0


@dataclass(frozen=True)
class Tails:
    """The tails of one policy's schedule (per job, then over jobs).

    ``max_wait_s`` / ``p99_wait_s``: wait = start - submit (the first start: for a
    preemptive policy the waits after a preemption are not in it). ``p99_bounded_slowdown``:
    99th percentile of JCT / max(duration, 60 s). ``share_jct_over_2x_fifo`` /
    ``share_jct_over_10x_fifo``: share of jobs whose JCT is more than 2x / 10x the same
    job's JCT under FIFO (NaN when no FIFO schedule is given; 0 for FIFO itself).
    """

    max_wait_s: float
    p99_wait_s: float
    p99_bounded_slowdown: float
    share_jct_over_2x_fifo: float
    share_jct_over_10x_fifo: float

    def as_dict(self) -> dict[str, float]:
        return {
            "max_wait_s": self.max_wait_s,
            "p99_wait_s": self.p99_wait_s,
            "p99_bounded_slowdown": self.p99_bounded_slowdown,
            "share_jct_over_2x_fifo": self.share_jct_over_2x_fifo,
            "share_jct_over_10x_fifo": self.share_jct_over_10x_fifo,
        }


def tail_stats(
    wait: Sequence[float],
    jct: Sequence[float],
    duration: Sequence[float],
    fifo_jct: Sequence[float] | None = None,
) -> Tails:
    """Tails of one schedule from per-job waits, JCTs and true durations (one order),
    against the same jobs' JCTs under FIFO (``fifo_jct``, same order) if given.

    >>> t = tail_stats([0.0, 10.0, 100.0], [30.0, 110.0, 400.0], [30.0, 100.0, 300.0],
    ...                fifo_jct=[10.0, 50.0, 400.0])
    >>> t.max_wait_s, round(t.p99_bounded_slowdown, 4), t.share_jct_over_2x_fifo
    (100.0, 1.3287, 0.6666666666666666)
    """
    n = len(jct)
    if len(wait) != n or len(duration) != n or (fifo_jct is not None and len(fifo_jct) != n):
        raise ValueError("wait, jct, duration and fifo_jct must have one entry per job")
    if n == 0:
        nan = math.nan
        return Tails(nan, nan, nan, nan, nan)
    waits = sorted(wait)
    bsld = sorted(j / max(d, BSLD_BOUND_S) for j, d in zip(jct, duration, strict=True))
    over2 = over10 = math.nan
    if fifo_jct is not None:
        over2 = sum(1 for j, f in zip(jct, fifo_jct, strict=True) if j > 2.0 * f) / n
        over10 = sum(1 for j, f in zip(jct, fifo_jct, strict=True) if j > 10.0 * f) / n
    return Tails(
        max_wait_s=waits[-1],
        p99_wait_s=percentile(waits, 99),
        p99_bounded_slowdown=percentile(bsld, 99),
        share_jct_over_2x_fifo=over2,
        share_jct_over_10x_fifo=over10,
    )
