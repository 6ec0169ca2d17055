"""A starvation bound for QSSF: a wait limit after which a job is served in arrival order.

Ranking by expected service (smallest first) starves the largest jobs: while smaller
work keeps arriving, a 64-GPU job can wait weeks. The bound gives the VC a **wait
limit**; a job still waiting past it is *overdue* and its hint goes to the front
(reason ``wait_bound:overdue``), so it starts as soon as it fits, as under FIFO. One
job at a time, the oldest overdue first; the next is promoted when it starts, or when it
has been at the front for one more limit (at least the default factor's) without
starting (a job held by its user, or one whose end was never announced, must not keep
the bound off for its VC). The limit is

    limit = factor x (the longest wait FIFO would have given in this VC so far)

with FIFO's waits simulated, not assumed: the VC's :class:`models.fifo_guard.FifoShadow`
replays every job of the VC in arrival order as soon as its duration is known, backlog
included, on the VC's capacity seen in use. So with ``factor`` 1 the bound is what an
operator asks, "no job waits longer than arrival order would ever have made one wait",
on the VC's own load, with no constant in seconds. Before the shadow has seen a wait
the VC has no limit.

Earlier designs collapsed towards FIFO (docs/qssf.md "Starvation bound"): a limit per
job from a fluid FIFO wait plus its expected duration; a multiple of the VC's recent
mean wait; the longest wait of the FIFO guard's 512-job replays (each from an empty
VC: far below FIFO's real waits); the longest wait of the last 256 started jobs. Each
fired for a large share of jobs: in the artifact's simulator (no backfill) a big job
moved to the front at a busy moment drains the VC, waits grow, more jobs pass the limit.

``factor`` 0 turns the bound off. The bound is pure state of one VC (picklable); it
costs a heap push per submit and a heap peek per event.

>>> b = WaitBound(factor=2.0)
>>> for jid, t in (("a", 0.0), ("b", 5.0), ("c", 6.0)):
...     b.submit(jid, t)
>>> b.due(1e6)    # no FIFO wait seen yet: no limit
[]
>>> b.scale = 20.0; b.limit
40.0
>>> b.started("a"); b.due(44.0), b.due(46.0), b.is_overdue("b")
([], ['b'], True)
>>> b.due(47.0), b.started("b"), b.due(47.0)   # one at the front at a time
([], None, ['c'])
"""

from __future__ import annotations

import heapq
import math

DEFAULT_WAIT_BOUND = 16.0
"""The default ``factor`` (``GPUHINT_QSSF_WAIT_BOUND``; docs/qssf.md "Starvation bound")."""


class WaitBound:
    """The wait limit of one VC, its waiting jobs by submit time, and the overdue ones."""

    __slots__ = ("factor", "heap", "overdue", "promoted_at", "scale", "submit_of")
    _STATE = ("factor", "heap", "overdue", "scale", "submit_of")
    """What is pickled, in order: the five fields an older worker reads (a rollback
    loads the state). ``promoted_at`` is not: the VC's state pickles it beside the bound
    (``gpuhint.cores.qssf_state``), and a bound restored without it counts a front from
    its first check after the load."""
    # ``overdue`` holds the job at the front, and more only while those before are
    # stuck there (see :meth:`due`)

    def __init__(self, factor: float = DEFAULT_WAIT_BOUND) -> None:
        if not (factor >= 0 and math.isfinite(factor)):
            raise ValueError(f"the wait bound's factor must be finite and >= 0, got {factor}")
        self.factor = factor
        self.scale = 0.0
        """FIFO's longest wait in this VC so far (s; set by the core from the VC's
        :class:`models.fifo_guard.FifoShadow`); 0: no limit yet."""
        self.submit_of: dict[str, float] = {}  # waiting, not overdue: job -> submit time
        self.heap: list[tuple[float, str]] = []  # (submit time, job), stale entries skipped
        self.overdue: dict[str, float] = {}  # overdue job -> the limit it passed (s)
        self.promoted_at: dict[str, float] = {}  # overdue job -> when it went to the front

    def __getstate__(self) -> tuple[object, ...]:
        return tuple(getattr(self, k) for k in self._STATE)

    def __setstate__(self, state: tuple[object, ...]) -> None:
        self.promoted_at = {}  # not pickled: a front counts from its first check (below)
        for k, v in zip(self._STATE, state, strict=True):
            setattr(self, k, v)

    @property
    def limit(self) -> float:
        """The wait limit now, in seconds (inf when off or before any scale)."""
        if self.factor <= 0 or self.scale <= 0:
            return math.inf
        return self.factor * self.scale

    def submit(self, job_id: str, submit_time: float) -> None:
        """A job starts waiting."""
        if self.factor > 0:
            self.submit_of[job_id] = submit_time
            heapq.heappush(self.heap, (submit_time, job_id))

    def track(self, waiting: dict[str, float]) -> None:
        """Jobs already waiting (job -> submit time) when the bound was turned on or
        restored without them: they wait under it too (those known are left as they are)."""
        for job_id, submit_time in waiting.items():
            if job_id not in self.submit_of and job_id not in self.overdue:
                self.submit(job_id, submit_time)

    def started(self, job_id: str) -> None:
        """A job started (it no longer waits)."""
        self.forget(job_id)

    def due(self, now: float, cap: int = 1) -> list[str]:
        """The job to move to the front now, if any: the oldest waiting job whose wait
        passed the limit by ``now``, and only while no other is at the front (one at a
        time, as a backfilling scheduler reserves for one head job: promoting every
        overdue job at once drains the VC again and again and makes it FIFO), unless
        those at the front have all been there one more limit without starting."""
        limit = self.limit
        if self.overdue and not self._stuck(now, max(limit, DEFAULT_WAIT_BOUND * self.scale)):
            return []
        out: list[str] = []
        heap = self.heap
        while heap and heap[0][0] + limit <= now and len(out) < cap:
            t, jid = heapq.heappop(heap)
            if self.submit_of.get(jid) == t:
                del self.submit_of[jid]
                self.overdue[jid] = limit
                self.promoted_at[jid] = now
                out.append(jid)
        return out

    def _stuck(self, now: float, patience: float) -> bool:
        """Whether every job at the front has been there ``patience`` without starting
        (a front restored without its time counts from ``now``). The patience is one
        limit, and never less than the default factor's: under a strict factor a wide
        promoted job can wait that long for the VC to drain for it, and promoting the
        next one then drains the VC again (measured: ITP cluster02 at factor 2 went from
        +309% to +344% average JCT with one limit)."""
        at = self.promoted_at
        return all(now >= at.setdefault(jid, now) + patience for jid in self.overdue)

    def is_overdue(self, job_id: str) -> bool:
        return job_id in self.overdue

    def forget(self, job_id: str) -> None:
        """The job no longer waits (started, finished); its heap entry goes stale."""
        self.submit_of.pop(job_id, None)
        self.overdue.pop(job_id, None)
        self.promoted_at.pop(job_id, None)
        if len(self.heap) > 64 and len(self.heap) > 4 * (len(self.submit_of) + 1):
            self.heap = [e for e in self.heap if self.submit_of.get(e[1]) == e[0]]
            heapq.heapify(self.heap)
