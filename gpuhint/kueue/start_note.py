"""Expected starts -> annotations of waiting Workloads (pure: the values and the plan).

gpuhint forecasts when each of a VC's first waiting jobs should start
(:mod:`gpuhint.cores.start_forecast`, Redis ``starts:{cluster}:{vc}``); the Kueue applier
writes it on the job's Workload, where ``kubectl get/describe workload`` shows it. Three
annotations, each one RFC 3339 / ISO 8601 value in UTC, to the minute (so that
``kubectl -o custom-columns`` can show any of them alone)::

    gpuhint.io/expected-start:       2026-12-05T14:05:00Z
    gpuhint.io/expected-start-band:  2026-12-05T13:40:00Z/2026-12-05T15:10:00Z   (80%, ISO 8601 interval)
    gpuhint.io/expected-start-asof:  2026-12-05T13:02:00Z                        (when forecast)

Only **waiting** Workloads are annotated (:func:`plan_notes`); a waiting Workload that a
forecast no longer names (beyond its VC's first jobs, or the forecast is gone) loses the
three; an admitted one keeps what it had (what was forecast for it). A patch is made only
when a value changes.

>>> notes_for(Start(1764943500.0, 1764942000.0, 1764947400.0, 1764939720.0))["gpuhint.io/expected-start-band"]
'2025-12-05T13:40:00Z/2025-12-05T15:10:00Z'
"""  # noqa: E501

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from gpuhint.kueue.objects import START_ANNOTATIONS as ANNOTATIONS
from gpuhint.kueue.policy import WorkloadView

START_ANNOTATION, BAND_ANNOTATION, ASOF_ANNOTATION = ANNOTATIONS


class Start(NamedTuple):
    """A job's expected start, its 80% band and the forecast's time (UNIX seconds)."""

    expected: float
    low: float
    high: float
    asof: float


def rfc3339(t: float) -> str:
    """UTC, to the minute: ``2026-12-05T14:05:00Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(round(t / 60.0) * 60))


def notes_for(s: Start) -> dict[str, str]:
    """The three annotations of a Workload expected to start at ``s``."""
    return {
        START_ANNOTATION: rfc3339(s.expected),
        BAND_ANNOTATION: f"{rfc3339(s.low)}/{rfc3339(s.high)}",
        ASOF_ANNOTATION: rfc3339(s.asof),
    }


Notes = tuple[str | None, ...]
"""A Workload's current values of :data:`ANNOTATIONS` (None: absent)."""


@dataclass(frozen=True)
class Annotate:
    namespace: str
    workload: str
    job_id: str
    notes: dict[str, str | None]  # None: remove the annotation

    def describe(self) -> dict[str, object]:
        return {
            "namespace": self.namespace,
            "workload": self.workload,
            "job_id": self.job_id,
            "annotations": self.notes,
        }


@dataclass
class NotePlan:
    patches: list[Annotate] = field(default_factory=list)
    set: int = 0  # Workloads given new values
    cleared: int = 0  # Workloads whose annotations are removed (no forecast now)
    unchanged: int = 0


def plan_notes(
    views: Iterable[WorkloadView],
    starts: Mapping[str, Start],
    written: Mapping[tuple[str, str], Notes] | None = None,
) -> NotePlan:
    """The annotation patches of one pass. A Workload's values now are its ``notes``,
    or what this applier wrote last (``written``, ``(namespace, name)`` -> values) while
    the cache has not shown it yet."""
    out = NotePlan()
    for v in views:
        if not v.pending:
            continue
        now = (written or {}).get((v.namespace, v.name), v.notes)
        start = starts.get(v.job_id)
        if start is None:
            if any(x is not None for x in now):
                clear: dict[str, str | None] = dict.fromkeys(ANNOTATIONS)
                out.patches.append(Annotate(v.namespace, v.name, v.job_id, clear))
                out.cleared += 1
            continue
        want = notes_for(start)
        if tuple(want[k] for k in ANNOTATIONS) == now:
            out.unchanged += 1
            continue
        out.patches.append(Annotate(v.namespace, v.name, v.job_id, dict(want)))
        out.set += 1
    return out
