"""What a published QSSF hint says, kept as one estimate (pure helpers of the hint core).

A hint's ``priority`` is GPUs x its expected duration unless the core overrides the
rank (the first reason says so: :data:`OVERRIDE_TAGS`). When a hint update moves the
expected duration, :func:`rescaled` moves the point forecast and the band with it, so
that no field keeps the submit-time value while another moved (docs/qssf.md "Hints that
agree with themselves"); :func:`overdue_priority` is the priority of a job the
starvation bound moved to the front (:mod:`models.wait_bound`).
"""

from __future__ import annotations

import math

from gpuhint.wire.contract import MAX_TIME, PriorityHint
from models.base import Z90

OVERRIDE_TAGS = ("fifo_guard:", "updated:", "wait_bound:")
"""Prefixes of the reason the core puts first when it publishes a priority other than
the submit-time one (:meth:`HintEngine._published`)."""


def rescaled(hint: PriorityHint, expected_s: float) -> dict[str, float]:
    """The hint's duration fields for a new expected duration: the point forecast and
    the 80% band scaled by the same ratio (the spread, ``log_duration_std``, is kept),
    so that the published estimate is one distribution, not the submit-time band beside
    a moved priority. From an expected duration of 0 (no ratio) the point is the new
    expected duration and the band is rebuilt around it (:func:`_rebuilt`).

    >>> h = PriorityHint(job_id="1", num_gpus=2, submit_time=0, predicted_duration_s=50,
    ...     priority=200, duration_p10_s=10, duration_p90_s=300, model="m",
    ...     model_version="1", created_at=0, expected_duration_s=100)
    >>> rescaled(h, 300.0)
    {'expected_duration_s': 300.0, 'predicted_duration_s': 150.0, \
'duration_p10_s': 30.0, 'duration_p90_s': 900.0}
    """
    old = hint.expected_duration_s
    if old is None:  # a hint of before the field: its priority was GPUs x expected...
        if hint.reasons and hint.reasons[0].feature.startswith(OVERRIDE_TAGS[0]):
            return {"expected_duration_s": expected_s}  # ... unless the guard had fallen back
        old = hint.priority / max(hint.num_gpus, 1)
    out = {"expected_duration_s": expected_s}
    if old == 0.0 and expected_s > 0 and math.isfinite(expected_s):
        return {**out, **_rebuilt(hint, expected_s)}
    if old == expected_s or not (old > 0 and math.isfinite(expected_s)):
        return out
    r = expected_s / old
    out["predicted_duration_s"] = min(hint.predicted_duration_s * r, 1e15)
    if hint.duration_p10_s is not None:
        out["duration_p10_s"] = min(hint.duration_p10_s * r, 1e15)
    if hint.duration_p90_s is not None:
        out["duration_p90_s"] = min(hint.duration_p90_s * r, 1e15)
    return out


def _rebuilt(hint: PriorityHint, expected_s: float) -> dict[str, float]:
    """Point forecast and band for a hint whose old estimate was 0 (no ratio to scale
    by): the point is the new expected duration, the band the hint's spread
    (``log_duration_std``, in log1p as the models build it) around it; without a spread,
    a band equal to the point.

    >>> h = PriorityHint(job_id="1", num_gpus=1, submit_time=0, predicted_duration_s=0,
    ...     priority=0, duration_p10_s=0, duration_p90_s=0, model="m", model_version="1",
    ...     created_at=0, expected_duration_s=0, log_duration_std=1.0)
    >>> {k: round(v, 1) for k, v in _rebuilt(h, 500.0).items()}
    {'predicted_duration_s': 500.0, 'duration_p10_s': 138.1, 'duration_p90_s': 1803.7}
    """
    point = min(expected_s, 1e15)
    out = {"predicted_duration_s": point}
    std = hint.log_duration_std
    if std is None or not (std > 0 and math.isfinite(std)):
        lo = hi = point
    else:
        mid = math.log1p(point)
        lo = max(0.0, math.expm1(mid - Z90 * std))
        hi = min(math.expm1(min(mid + Z90 * std, 40.0)), 1e15)
    if hint.duration_p10_s is not None or hint.duration_p90_s is not None:
        out["duration_p10_s"] = min(lo, point)
        out["duration_p90_s"] = max(hi, point)
    return out


def overdue_priority(submit_time: float) -> float:
    """An overdue job's priority: below a thousandth of a GPU-second, so below every
    job the model ranks, and in arrival order among the overdue.
    A scheduler that maps priorities to coarser levels (Slurm's site factor, Kueue's
    classes) gives them all its top level, and its own order (age, FIFO) among them.

    >>> 0 < overdue_priority(1.7e9) < overdue_priority(1.8e9) < 1e-3
    True
    """
    return 1e-3 * min(max(submit_time, 0.0), MAX_TIME) / MAX_TIME
