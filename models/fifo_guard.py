"""Never worse than FIFO: a shadow simulation of the VC's recent jobs, hints against FIFO.

The guard keeps the last ``window`` jobs of one VC *in submit order* whose true
durations are known (submit time, duration, GPUs and the last priority the model gave
them while they waited): a job enters when it and every job submitted before it have finished (a
straggler more than ``4 * window`` submits behind is dropped, a job cancelled without a
duration at once: :meth:`FifoGuard.forget`). Every ``every`` such
jobs it schedules them twice on a VC of the size seen in use (the most GPUs running at once,
in whole nodes), by the model's priorities (QSSF) and by arrival (FIFO), with the same
simulator as ``gpuhint evaluate qssf``. When the hints' average JCT is above FIFO's the
guard falls back (hints then follow arrival order) once the hints are worse than FIFO
by more than ``margin``, and returns once they are no longer worse (hysteresis: noise
around 1, e.g. a window with little queueing, does not flip it). Judging a ranking on the jobs its
own schedule let finish would be biased (jobs that finish together were ordered alike);
replaying both orders on all the jobs submitted in a stretch of time is not. Nothing
here is fitted to a trace.

>>> g = FifoGuard(window=64, every=16, min_jobs=32)
>>> for k in range(64):  # hints that rank exactly backwards: longest first
...     g.submit(str(k), priority=-k, submit_time=k, gpus=8)
...     _ = g.observe(str(k), duration=10.0 * k, running_gpus=8)
>>> g.fallback, g.ratio > 1.0
(True, True)
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict, deque

from gpuhint.wire.contract import ARRIVAL_ORDER_REASON
from models.simulator import Outcome, SimJob, simulate_vc


class FifoGuard:
    """Per-VC shadow comparison of the hints with arrival order (picklable)."""

    def __init__(
        self,
        window: int = 512,
        every: int = 128,
        min_jobs: int = 256,
        margin: float = 0.05,
        gpus_per_node: int = 8,
    ) -> None:
        self.window = window
        self.every = every
        self.min_jobs = min_jobs
        self.margin = margin
        self.gpus_per_node = gpus_per_node
        self.recent: deque[tuple[float, float, int, float]] = deque(maxlen=window)
        # submitted, not yet in ``recent``: job id -> [submit, gpus, priority, duration|-1]
        self.open: OrderedDict[str, list[float]] = OrderedDict()
        self.max_running = 0
        self.since = 0
        self.checks = 0
        self.ratio = math.nan  # hints' average JCT / FIFO's at the last check
        self.fallback = False
        self.switches = 0
        self.skipped = 0  # checks where no job waited under FIFO (no QSSF replay needed)
        self.shadow = FifoShadow()  # arrival order over every job so far, continuously

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("skipped", 0)  # a guard pickled before the counter
        self.__dict__.setdefault("shadow", FifoShadow())

    def submit(self, job_id: str, priority: float, submit_time: float, gpus: int) -> None:
        """A job was submitted and the model gave it ``priority``."""
        if gpus > 0 and math.isfinite(priority) and job_id not in self.open:
            self.open[job_id] = [submit_time, float(gpus), priority, -1.0]

    def reprioritize(self, job_id: str, priority: float) -> None:
        """The model moved a waiting job's priority (a hint update): the shadow uses the
        priority the job had when it started, as the scheduler did."""
        e = self.open.get(job_id)
        if e is not None and math.isfinite(priority):
            e[2] = priority

    def observe(self, job_id: str, duration: float, running_gpus: int) -> bool:
        """A job finished after ``duration`` s, ``running_gpus`` GPUs running (itself
        included); return True when the guard changed state (the VC's waiting hints must
        then be republished). Each job that joins :attr:`recent` also goes through
        :attr:`shadow`, arrival order simulated without a break (the scale of the
        starvation bound, :mod:`models.wait_bound`)."""
        self.max_running = max(self.max_running, running_gpus)
        e = self.open.get(job_id)
        if e is None:
            return False
        e[3] = max(0.0, duration)
        self.max_running = max(self.max_running, int(e[1]))
        return self._drain()

    def forget(self, job_id: str) -> bool:
        """A job left without a duration (cancelled while it waited, or a finish that
        says no run time): drop its entry, so that the jobs submitted after it are not
        held behind it, and drain as :meth:`observe` does; True when the guard changed
        state. An unknown job changes nothing.

        >>> g = FifoGuard()
        >>> g.submit("c", priority=1.0, submit_time=0.0, gpus=8)
        >>> g.submit("a", priority=1.0, submit_time=1.0, gpus=8)
        >>> _ = g.observe("a", duration=10.0, running_gpus=8)
        >>> g.shadow.jobs, g.forget("c"), g.shadow.jobs, list(g.open)
        (0, False, 1, [])
        """
        if self.open.pop(job_id, None) is None:
            return False
        return self._drain()

    def _drain(self) -> bool:
        """Move the finished jobs at the head of :attr:`open` (submit order) to
        :attr:`recent` and :attr:`shadow`, and compare with FIFO when due; True when
        the guard changed state."""
        op = self.open
        while op:
            jid, first = next(iter(op.items()))
            if first[3] < 0 and len(op) <= 4 * self.window:
                break
            del op[jid]
            if first[3] >= 0:
                self.recent.append((first[0], first[3], int(first[1]), first[2]))
                self.since += 1
                self.shadow.add(first[0], first[3], int(first[1]), self.max_running)
        if self.since < self.every or len(self.recent) < self.min_jobs:
            return False
        self.since = 0
        self.ratio = self._shadow_ratio()
        if math.isnan(self.ratio):
            return False
        new = self.ratio > 1.0 + self.margin if not self.fallback else self.ratio > 1.0
        if new != self.fallback:
            self.fallback = new
            self.switches += 1
            return True
        return False

    def _shadow_ratio(self) -> float:
        self.checks += 1
        jobs = [SimJob(str(k), t, d, g) for k, (t, d, g, _) in enumerate(self.recent)]
        nodes = math.ceil(self.max_running / self.gpus_per_node)
        fifo = simulate_vc(jobs, nodes, "fifo")
        if _same_without_queue(jobs, fifo):
            self.skipped += 1
            return 1.0
        hints = simulate_vc(jobs, nodes, "qssf", priorities=[p for *_, p in self.recent])
        f = sum(o.end - j.submit for o, j in zip(fifo, jobs, strict=True))
        h = sum(o.end - j.submit for o, j in zip(hints, jobs, strict=True))
        return h / f if f > 0 else math.nan

    def reason(self) -> tuple[str, float]:
        """What goes into a hint's reasons: the mode and the last shadow JCT ratio."""
        tag = ARRIVAL_ORDER_REASON if self.fallback else "fifo_guard:hints"
        return tag, round(self.ratio, 4) if math.isfinite(self.ratio) else 0.0


def _same_without_queue(jobs: list[SimJob], fifo: list[Outcome]) -> bool:
    """Whether QSSF must give FIFO's very schedule, whatever the priorities: no job
    waited under FIFO, and jobs arriving in the same second are already in GPU-count
    order (the order QSSF starts same-second arrivals in when nothing waits). Then both
    policies start the same job on the same nodes at every event, by induction, and the
    hints' JCT ratio is exactly 1.

    >>> js = [SimJob("a", 0, 10, 4), SimJob("b", 0, 10, 2), SimJob("c", 5, 1, 2)]
    >>> _same_without_queue(js, simulate_vc(js, 1, "fifo"))  # same second, 4 GPUs first
    False
    >>> _same_without_queue(js[1:], simulate_vc(js[1:], 1, "fifo"))
    True
    """
    if any(o.queue > 0.0 for o in fifo):
        return False
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit, i))
    for a, b in itertools.pairwise(order):
        if jobs[a].submit == jobs[b].submit and jobs[a].gpus > jobs[b].gpus:
            return False
    return True


class FifoShadow:
    """Arrival order, simulated continuously over the VC's jobs in submit order (pure,
    picklable): what FIFO's waits would have been, backlog included.

    Fed by :class:`FifoGuard` with each job once its duration and every earlier
    submit's are known (the guard's own order; stragglers it drops are left out). A
    pool of ``capacity`` GPUs (the most seen running at once), strict arrival order,
    no placement (so it slightly *under*-states FIFO's waits). :attr:`max_wait` is the
    scale of the starvation bound (:mod:`models.wait_bound`).

    >>> f = FifoShadow()
    >>> for t, d, g in ((0, 100, 8), (1, 10, 8), (2, 10, 4), (3, 10, 4)):
    ...     f.add(float(t), float(d), g, capacity=8)
    >>> f.max_wait, f.jobs
    (108.0, 4)
    """

    __slots__ = ("capacity", "jobs", "last_start", "max_wait", "running", "used")

    def __init__(self) -> None:
        self.capacity = 0
        self.used = 0
        self.running: list[tuple[float, int]] = []  # (end, gpus), a heap
        self.last_start = -math.inf
        self.max_wait = 0.0
        self.jobs = 0

    def __getstate__(self) -> tuple[object, ...]:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for k, v in zip(self.__slots__, state, strict=True):
            setattr(self, k, v)

    def add(self, submit: float, duration: float, gpus: int, capacity: int) -> None:
        """The next job in submit order: start it when FIFO would."""
        self.capacity = max(self.capacity, capacity, gpus)
        t = max(submit, self.last_start)
        run = self.running
        while run and (run[0][0] <= t or self.used + gpus > self.capacity):
            end, g = heapq.heappop(run)
            self.used -= g
            t = max(t, end)
        self.used += gpus
        heapq.heappush(run, (t + max(0.0, duration), gpus))
        self.last_start = t
        self.max_wait = max(self.max_wait, t - submit)
        self.jobs += 1
