"""A starvation bound for QSSF: a wait limit after which a job is served in arrival order.

Ranking by expected service (smallest first) starves the largest jobs: while smaller
work keeps arriving, a 64-GPU job can wait weeks. The bound gives the VC a **wait
limit** and a job still waiting past it is *overdue*: its hint goes to the front, in
arrival order among the overdue (reason ``wait_bound:overdue``), so it starts as soon
as it fits, as under FIFO. The limit is

    limit = factor x (mean wait of the VC's recently started jobs)

on the VC's own scale, no constant in seconds: the mean is an exponentially weighted
average over about the last ``window`` starts, so it follows the VC's load (short when
jobs rarely wait, days when the VC is overloaded) and the policy in force (promoting the
overdue lengthens others' waits and so the limit: negative feedback, no collapse to
FIFO). Until ``min_starts`` jobs have started the VC has no limit.

A first design, a limit per job from an estimated FIFO wait plus the job's expected
duration, collapsed to FIFO on every trace (docs/qssf.md "Starvation bound").

``factor`` 0 turns the bound off. The bound is pure state of one VC (picklable); it
costs a heap push per submit, an update per start and a heap peek per event.

>>> b = WaitBound(factor=2.0, min_starts=2)
>>> for jid, t in (("a", 0.0), ("b", 5.0), ("c", 6.0)):
...     b.submit(jid, t)
>>> b.started("a", wait=10.0); b.due(1e6)    # one start: no limit yet
[]
>>> b.started("x", wait=30.0); b.limit       # mean wait 20 s
40.0
>>> b.due(44.0), b.due(46.0), b.is_overdue("b")
([], ['b', 'c'], True)
"""

from __future__ import annotations

import heapq
import math

DEFAULT_WAIT_BOUND = 0.0
"""The default ``factor`` (``GPUHINT_QSSF_WAIT_BOUND``; docs/qssf.md "Starvation bound")."""


class WaitBound:
    """The wait limit of one VC, its waiting jobs by submit time, and the overdue ones."""

    __slots__ = (
        "factor",
        "heap",
        "mean_wait",
        "min_starts",
        "overdue",
        "starts",
        "submit_of",
        "window",
    )

    def __init__(
        self, factor: float = DEFAULT_WAIT_BOUND, window: int = 256, min_starts: int = 32
    ) -> None:
        if not (factor >= 0 and math.isfinite(factor)):
            raise ValueError(f"the wait bound's factor must be finite and >= 0, got {factor}")
        self.factor = factor
        self.window = window
        self.min_starts = min_starts
        self.mean_wait = 0.0
        self.starts = 0
        self.submit_of: dict[str, float] = {}  # waiting, not overdue: job -> submit time
        self.heap: list[tuple[float, str]] = []  # (submit time, job), stale entries skipped
        self.overdue: dict[str, float] = {}  # overdue job -> the limit it passed (s)

    def __getstate__(self) -> tuple[object, ...]:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for k, v in zip(self.__slots__, state, strict=True):
            setattr(self, k, v)

    @property
    def limit(self) -> float:
        """The wait limit now, in seconds (inf when off or before ``min_starts``)."""
        if self.factor <= 0 or self.starts < self.min_starts:
            return math.inf
        return self.factor * self.mean_wait

    def submit(self, job_id: str, submit_time: float) -> None:
        """A job starts waiting."""
        if self.factor > 0:
            self.submit_of[job_id] = submit_time
            heapq.heappush(self.heap, (submit_time, job_id))

    def started(self, job_id: str, wait: float) -> None:
        """A job started after waiting ``wait`` s (whatever its rank): the mean moves."""
        self.starts += 1
        a = max(1.0 / self.starts, 1.0 / self.window)
        self.mean_wait += a * (max(0.0, wait) - self.mean_wait)
        self.forget(job_id)

    def due(self, now: float, cap: int = 1 << 30) -> list[str]:
        """Waiting jobs whose wait passed the limit by ``now``, oldest first, at most
        ``cap`` (the rest on a later call); each is returned once."""
        limit = self.limit
        out: list[str] = []
        heap = self.heap
        while heap and heap[0][0] + limit <= now and len(out) < cap:
            t, jid = heapq.heappop(heap)
            if self.submit_of.get(jid) == t:
                del self.submit_of[jid]
                self.overdue[jid] = limit
                out.append(jid)
        return out

    def is_overdue(self, job_id: str) -> bool:
        return job_id in self.overdue

    def forget(self, job_id: str) -> None:
        """The job no longer waits (started, finished); its heap entry goes stale."""
        self.submit_of.pop(job_id, None)
        self.overdue.pop(job_id, None)
        if len(self.heap) > 64 and len(self.heap) > 4 * (len(self.submit_of) + 1):
            self.heap = [e for e in self.heap if self.submit_of.get(e[1]) == e[0]]
            heapq.heapify(self.heap)
