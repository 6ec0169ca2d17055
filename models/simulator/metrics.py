"""Summaries of a simulated schedule: average JCT and queueing, JCT percentiles, per size.

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
