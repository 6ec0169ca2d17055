"""Gaps and oddities in a trace, as plain warnings (pure: numbers in, dicts out).

Each check is a rule on the trace's own columns, never a constant tuned to one file:

* ``hour_window``: every submission falls in one window of the day, with a run of at
  least :data:`EMPTY_HOURS_MIN` consecutive empty hours over a trace of at least
  :data:`WINDOW_DAYS_MIN` days (a clock in another zone, a filtered export, a cut file);
* ``gap``: a pause between consecutive submits longer than both :data:`GAP_MIN_S` and
  :data:`GAP_FACTOR` times the 99th percentile of the gaps (an outage, missing days);
* ``clock_jump``: a submit time that steps back by more than :data:`JUMP_S` in file
  order while the file is otherwise in time order, or starts before their submits;
* ``duplicate_ids``: job ids that occur more than once;
* ``zero_duration``: jobs that ran 0 s, when at least :data:`ZERO_SHARE_MIN` of them.

>>> import numpy as np
>>> day = np.arange(0, 5 * 86400, 1800.0)
>>> [c["check"] for c in trace_checks(day[(day % 86400) < 43200], np.ones(120), True)]
['hour_window']
"""

from __future__ import annotations

from typing import Any

import numpy as np

EMPTY_HOURS_MIN = 6
WINDOW_DAYS_MIN = 3.0
GAP_MIN_S = 86400.0
GAP_FACTOR = 20.0
JUMP_S = 3600.0
IN_ORDER_SHARE = 0.99
ZERO_SHARE_MIN = 0.01

Check = dict[str, Any]


def _hm(h: int) -> str:
    return f"{h % 24:02d}:00"


def hour_window(submits: np.ndarray, absolute: bool) -> Check | None:
    """The longest circular run of empty hours of the day, when it says something."""
    if not absolute or len(submits) == 0:
        return None
    days = (float(submits.max()) - float(submits.min())) / 86400
    if days < WINDOW_DAYS_MIN:
        return None
    by_hour = np.bincount(((submits // 3600) % 24).astype("int64"), minlength=24)[:24]
    empty = by_hour == 0
    if empty.all() or not empty.any():
        return None
    best_len = best_start = run = 0
    for i in range(48):  # twice round the clock: runs that wrap past midnight
        run = run + 1 if empty[i % 24] else 0
        if run > best_len:
            best_len, best_start = min(run, 24), i - run + 1
    if best_len < EMPTY_HOURS_MIN:
        return None
    first, last = best_start + best_len, best_start  # busy window: after the run, up to it
    return {
        "check": "hour_window",
        "severity": "warning",
        "empty_hours": best_len,
        "window": [_hm(first), _hm(last)],
        "message": (
            f"Every submission falls between {_hm(first)} and {_hm(last)}: none in the "
            f"other {best_len} hours of the day over {days:,.0f} days. A clock in another "
            "time zone, an export filtered by time, or a cut trace? The daily rhythm shown "
            "here is that of the file, not necessarily of the cluster."
        ),
    }


def gaps(submits: np.ndarray) -> Check | None:
    """Pauses between consecutive submits far longer than the trace's usual ones."""
    if len(submits) < 3:
        return None
    d = np.diff(np.sort(submits))
    limit = max(GAP_MIN_S, GAP_FACTOR * float(np.percentile(d, 99)))
    big = np.flatnonzero(d > limit)
    if len(big) == 0:
        return None
    k = int(big[np.argmax(d[big])])
    at = float(np.sort(submits)[k])
    return {
        "check": "gap",
        "severity": "warning",
        "gaps": len(big),
        "longest_s": float(d[k]),
        "longest_after_s": at,
        "limit_s": limit,
        "message": (
            f"{len(big):,} pause(s) with no submission for over {limit / 3600:,.0f} h "
            f"(the longest {d[k] / 86400:,.1f} days): an outage or missing data? Rates per "
            "day and queueing across the gap mean less."
        ),
    }


def clock_jumps(
    submits_in_file_order: np.ndarray, starts: np.ndarray | None = None
) -> Check | None:
    """Backward steps of the submit clock in an otherwise ordered file; starts before submits."""
    back = 0
    d = np.diff(submits_in_file_order)
    if len(d) and float(np.mean(d >= 0)) >= IN_ORDER_SHARE:
        back = int(np.sum(d < -JUMP_S))
    early = 0
    if starts is not None and len(starts) == len(submits_in_file_order):
        ok = ~np.isnan(starts)
        early = int(np.sum(starts[ok] < submits_in_file_order[ok] - 1.0))
    if not back and not early:
        return None
    parts = []
    if back:
        parts.append(
            f"{back:,} time(s) the submit clock steps back by over {JUMP_S / 3600:g} h in a "
            "file otherwise in time order"
        )
    if early:
        parts.append(f"{early:,} job(s) start before they are submitted")
    return {
        "check": "clock_jump",
        "severity": "warning",
        "backward_steps": back,
        "starts_before_submit": early,
        "message": "; ".join(parts) + ": a clock change or merged files? Check the timestamps.",
    }


def duplicate_ids(id_hashes: np.ndarray) -> Check | None:
    """Job ids seen more than once (compared by hash)."""
    if len(id_hashes) == 0:
        return None
    _, counts = np.unique(id_hashes, return_counts=True)
    dup = counts[counts > 1]
    if len(dup) == 0:
        return None
    return {
        "check": "duplicate_ids",
        "severity": "warning",
        "ids": len(dup),
        "rows": int(dup.sum()),
        "message": (
            f"{len(dup):,} job id(s) occur more than once ({int(dup.sum()):,} rows): "
            "requeued jobs or a file appended twice? Every row is counted as a job here; "
            "the streaming worker keeps one hint per id."
        ),
    }


def zero_durations(durations: np.ndarray) -> Check | None:
    """Jobs that ran 0 s, when they are a noticeable share."""
    n = len(durations)
    zero = int(np.sum(durations <= 0))
    if not n or zero / n < ZERO_SHARE_MIN:
        return None
    return {
        "check": "zero_duration",
        "severity": "note",
        "jobs": zero,
        "share": zero / n,
        "message": (
            f"{zero:,} jobs ({zero / n:.1%}) ran 0 s: jobs cancelled before they started, "
            "or durations rounded down? They pull the medians down."
        ),
    }


def trace_checks(
    submits: np.ndarray,
    durations: np.ndarray,
    absolute: bool,
    *,
    submits_in_file_order: np.ndarray | None = None,
    starts: np.ndarray | None = None,
    id_hashes: np.ndarray | None = None,
) -> list[Check]:
    """Every check that fires, in a fixed order (``starts`` in file order too)."""
    s = np.asarray(submits, dtype="float64")
    found = [
        hour_window(s, absolute),
        gaps(s),
        clock_jumps(np.asarray(submits_in_file_order, dtype="float64"), starts)
        if submits_in_file_order is not None
        else None,
        duplicate_ids(id_hashes) if id_hashes is not None else None,
        zero_durations(np.asarray(durations, dtype="float64")),
    ]
    return [c for c in found if c is not None]
