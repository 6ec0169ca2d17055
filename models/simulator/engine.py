"""Event-driven scheduling of one VC, with the Helios artifact's semantics.

The artifact (``framework/QSSF Service/policies/*.py``) steps a clock one second at a
time; at every step it (1) releases jobs that end now, (2) queues jobs submitted now,
(3) orders the queue and (4) starts jobs in that order until one does not fit (no
backfill). Its state only changes at submits and ends, so deciding at those instants
gives the same schedule, without the millions of idle steps.

Orders (ties: earlier submit, then trace order):

* ``fifo`` -- submit time;
* ``sjf``  -- true duration alone (as the artifact: not GPUs x duration);
* ``qssf`` -- a priority per job (smaller first), ties broken by fewer GPUs. The oracle
  passes true service (GPUs x duration); a predictor passes its predicted service. As
  in the artifact, when every queued job arrived in this very instant the queue is
  ordered by GPU count instead (the artifact only asks its estimator once a job has
  waited), unless ``new_jobs_by_gpus=False``;
* ``srtf`` -- preemptive shortest remaining time first (oracle), see :func:`_srtf`.

``backfill=True`` lets a non-preemptive policy skip a job that does not fit and start
later ones that do (greedy, no reservation: large jobs can wait longer).

Closed loop: ``qssf`` with a :class:`Ranker` instead of fixed priorities asks the ranker
for a job's priority when it arrives, tells it when a job starts, and, when a job ends in
*this* schedule, lets the ranker learn from it and move the priorities of waiting jobs
(as a live predictor that re-ranks the queue would). Ends at an instant are handled
before the arrivals of that instant.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from models.simulator.cluster import Alloc, Nodes

PolicyKind = Literal["fifo", "sjf", "qssf", "srtf"]
POLICY_KINDS: tuple[PolicyKind, ...] = ("fifo", "sjf", "qssf", "srtf")


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job as the simulator sees it: when it arrives, how long it runs, its GPUs."""

    job_id: str
    submit: float
    duration: float
    gpus: int

    @property
    def service(self) -> float:
        return self.gpus * self.duration


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one job. ``queue`` is the total time it waited (all waits)."""

    start: float
    end: float
    queue: float
    preemptions: int = 0


class Ranker(Protocol):
    """A live predictor in the loop: jobs are referred to by their index in ``jobs``."""

    def submit(self, i: int, t: float) -> float:
        """Job ``i`` arrives at ``t``: its priority (smaller runs first)."""
        ...

    def start(self, i: int, t: float) -> None:
        """Job ``i`` starts at ``t``."""
        ...

    def finish(self, i: int, t: float) -> Iterable[tuple[int, float]]:
        """Job ``i`` ends at ``t``: ``(waiting job, new priority)`` pairs to apply."""
        ...


def ckpt_overhead(gpus: int) -> float:
    """Seconds a preempted job loses (the artifact's checkpoint/restore cost)."""
    return 7.0 if gpus == 1 else 30.0 if gpus <= 8 else 60.0


def simulate_vc(
    jobs: Sequence[SimJob],
    num_nodes: int,
    policy: PolicyKind,
    *,
    priorities: Sequence[float] | None = None,
    ranker: Ranker | None = None,
    backfill: bool = False,
    new_jobs_by_gpus: bool = True,
    gpus_per_node: int = 8,
    tick: float = 1.0,
) -> list[Outcome]:
    """Schedule ``jobs`` on ``num_nodes`` nodes; return one :class:`Outcome` per job.

    ``qssf`` needs ``priorities`` (same order as ``jobs``) or a ``ranker`` (closed
    loop, module docstring). ``tick`` is the
    artifact's clock step, used only by ``srtf`` (see :func:`_srtf`). Every job must
    fit the VC (``gpus <= num_nodes * gpus_per_node``) and ask for at least one GPU.

    >>> jobs = [SimJob("a", 0, 100, 8), SimJob("b", 1, 10, 8), SimJob("c", 2, 1, 8)]
    >>> [o.end for o in simulate_vc(jobs, 1, "fifo")]
    [100, 110, 111]
    >>> [o.end for o in simulate_vc(jobs, 1, "sjf")]
    [100, 111, 101]
    """
    capacity = num_nodes * gpus_per_node
    for j in jobs:
        if j.gpus < 1:
            raise ValueError(f"job {j.job_id}: the simulator schedules GPU jobs only")
        if j.gpus > capacity:
            raise ValueError(
                f"job {j.job_id} needs {j.gpus} GPUs but the VC has {capacity}: it could never run"
            )
        if not (math.isfinite(j.duration) and j.duration >= 0 and math.isfinite(j.submit)):
            raise ValueError(f"job {j.job_id}: submit and duration must be finite, duration >= 0")
    if policy == "srtf":
        return _srtf(jobs, Nodes(num_nodes, gpus_per_node), tick)
    if policy == "fifo":
        keys: list[tuple[float, ...]] = [(j.submit,) for j in jobs]
    elif policy == "sjf":
        keys = [(j.duration,) for j in jobs]
    elif policy == "qssf":
        if ranker is not None:
            keys = [(math.nan, j.gpus) for j in jobs]  # asked of the ranker on arrival
        elif priorities is None or len(priorities) != len(jobs):
            raise ValueError("qssf needs one priority per job (or a ranker)")
        else:
            keys = [(_prio(p, j.job_id), j.gpus) for p, j in zip(priorities, jobs, strict=True)]
    else:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICY_KINDS)}")
    return _nonpreemptive(
        jobs,
        Nodes(num_nodes, gpus_per_node),
        keys,
        backfill,
        new_jobs_by_gpus and policy == "qssf",
        ranker if policy == "qssf" else None,
    )


def _prio(p: float, job_id: str) -> float:
    """A priority as a queue key: NaN compares false both ways and breaks the heap."""
    x = float(p)
    if math.isnan(x):
        raise ValueError(f"job {job_id}: priority is NaN")
    return x


def _arrival_order(jobs: Sequence[SimJob]) -> list[int]:
    return sorted(range(len(jobs)), key=lambda i: (jobs[i].submit, i))


_Heap = list[tuple[tuple[float, ...], int, int]]  # (key..., arrival rank, index)


def _nonpreemptive(
    jobs: Sequence[SimJob],
    nodes: Nodes,
    keys: list[tuple[float, ...]],
    backfill: bool,
    new_by_gpus: bool,
    ranker: Ranker | None = None,
) -> list[Outcome]:
    n = len(jobs)
    order = _arrival_order(jobs)
    rank = [0] * n
    for r, i in enumerate(order):
        rank[i] = r
    gpus = [j.gpus for j in jobs]
    start = [0.0] * n
    end = [0.0] * n
    allocs: list[Alloc] = [[] for _ in range(n)]
    # Pending jobs, one heap per GPU count: (key..., arrival rank, index).
    queues: dict[int, _Heap] = {}
    queued = 0
    # Closed loop: a re-ranked job gets a new heap entry; older ones are stale (their
    # key is no longer ``keys[i]``) and dropped when they reach the top of a heap.
    waiting = [False] * n

    def push(i: int) -> None:
        waiting[i] = True
        heapq.heappush(queues.setdefault(gpus[i], []), (keys[i], rank[i], i))

    running: list[tuple[float, int]] = []  # (end, index)
    nxt = 0

    def start_job(i: int, t: float, alloc: Alloc) -> None:
        allocs[i] = alloc
        start[i] = t
        end[i] = t + jobs[i].duration
        heapq.heappush(running, (end[i], i))
        if ranker is not None:
            ranker.start(i, t)

    while nxt < n or running:
        t = jobs[order[nxt]].submit if nxt < n else math.inf
        if running and running[0][0] < t:
            t = running[0][0]
        while running and running[0][0] == t:
            _, i = heapq.heappop(running)
            nodes.release(allocs[i])
            if ranker is not None:
                for w, p in ranker.finish(i, t):
                    if waiting[w] and (_prio(p, jobs[w].job_id), gpus[w]) != keys[w]:
                        keys[w] = (float(p), gpus[w])
                        push(w)
        arrived = []
        while nxt < n and jobs[order[nxt]].submit == t:
            i = order[nxt]
            if ranker is not None:
                keys[i] = (_prio(ranker.submit(i, t), jobs[i].job_id), gpus[i])
            arrived.append(i)
            nxt += 1
        if new_by_gpus and queued == 0 and arrived:
            queued += _start_fresh(arrived, t, gpus, rank, nodes, backfill, start_job, push)
            continue
        for i in arrived:
            push(i)
            queued += 1
        while queued:
            g = _next_gpus(queues, waiting, keys, nodes, backfill)
            if g is None:
                break
            alloc = nodes.place(g)
            if alloc is None:  # the head does not fit: wait (no backfill)
                break
            _, _, i = heapq.heappop(queues[g])
            waiting[i] = False
            queued -= 1
            start_job(i, t, alloc)
    return [Outcome(start[i], end[i], start[i] - jobs[i].submit) for i in range(n)]


def _next_gpus(
    queues: dict[int, _Heap],
    waiting: list[bool],
    keys: list[tuple[float, ...]],
    nodes: Nodes,
    backfill: bool,
) -> int | None:
    """The GPU count of the queue whose head goes next (with backfill: among the heads
    that fit now); ``None`` when no job waits (or, with backfill, none fits)."""
    best = None
    for g, heap in queues.items():
        while heap:  # drop stale entries (re-ranked jobs) off the top
            k, _, i = heap[0]
            if waiting[i] and k == keys[i]:
                break
            heapq.heappop(heap)
        else:
            continue
        if (best is None or heap[0] < best[0]) and (not backfill or nodes.can_place(g)):
            best = (heap[0], g)
    return None if best is None else best[1]


def _start_fresh(
    arrived: list[int],
    t: float,
    gpus: list[int],
    rank: list[int],
    nodes: Nodes,
    backfill: bool,
    start_job: Callable[[int, float, Alloc], None],
    push: Callable[[int], None],
) -> int:
    """Only fresh jobs wait: the artifact orders them by GPU count and starts them in
    that order until one does not fit (with backfill: every one that fits). Returns how
    many were queued."""
    arrived.sort(key=lambda i: (gpus[i], rank[i]))
    blocked = False
    queued = 0
    for i in arrived:
        alloc = None if blocked else nodes.place(gpus[i])
        if alloc is not None:
            start_job(i, t, alloc)
            continue
        blocked = not backfill
        push(i)
        queued += 1
    return queued


_SrtfEntry = tuple[float, int, int]  # queued: (remain, rank, index); running: (vend, rank, index)


def _srtf(jobs: Sequence[SimJob], nodes: Nodes, tick: float) -> list[Outcome]:
    """Preemptive shortest-remaining-time-first, as the artifact's ``srtf.py``.

    At each decision the artifact lists queued jobs then running ones, sorts them by
    remaining time (stable), and walks the list with a GPU quota equal to the VC's
    size: a job that fits the quota keeps running or is started; a running job that
    does not fit is preempted (it loses :func:`ckpt_overhead` seconds); a queued one that
    does not fit is skipped (so SRTF backfills). A job picked but not placeable (nodes
    fragmented) keeps waiting. Its 1-second clock sees a job end one step after its
    remaining time reaches zero, so every run segment lasts ``remaining + tick``.

    Decisions are taken at submits and ends. The artifact re-decides every second, which
    differs only when a running job's shrinking remaining time overtakes a queued job
    that was picked but could not be placed.
    """
    n = len(jobs)
    order = _arrival_order(jobs)
    gpus = [j.gpus for j in jobs]
    remain = [j.duration for j in jobs]  # at the start of the current segment / while queued
    vend = [0.0] * n  # running: start of segment + remaining at that start
    seg = [0] * n
    first_start = [math.nan] * n
    end = [0.0] * n
    queue = [0.0] * n
    ckpt_at = [0.0] * n
    preempted = [0] * n
    allocs: list[Alloc] = [[] for _ in range(n)]
    run_rank = [0] * n
    counter = itertools.count()
    queues: dict[int, list[_SrtfEntry]] = {}  # gpus -> (remain, rank, index)
    running: list[_SrtfEntry] = []  # sorted: (vend, run rank, index)
    ends: list[tuple[float, int, int]] = []  # (time, index, segment)
    total = nodes.total_gpus
    nxt = 0

    while nxt < n or ends:
        t = jobs[order[nxt]].submit if nxt < n else math.inf
        if ends and ends[0][0] < t:
            t = ends[0][0]
        while ends and ends[0][0] == t:
            _, i, s = heapq.heappop(ends)
            if s != seg[i]:
                continue  # a preempted segment
            nodes.release(allocs[i])
            del running[bisect.bisect_left(running, (vend[i], run_rank[i], i))]
            end[i] = t
        while nxt < n and jobs[order[nxt]].submit == t:
            i = order[nxt]
            nxt += 1
            heapq.heappush(queues.setdefault(gpus[i], []), (remain[i], next(counter), i))
        if not any(queues.values()):
            continue
        picked, to_preempt = _srtf_walk(queues, running, gpus, total, t)
        for run_entry in to_preempt:
            i = run_entry[2]
            nodes.release(allocs[i])
            del running[bisect.bisect_left(running, run_entry)]
            seg[i] += 1
            remain[i] = vend[i] - t + ckpt_overhead(gpus[i])
            ckpt_at[i] = t
            preempted[i] += 1
            heapq.heappush(queues.setdefault(gpus[i], []), (remain[i], next(counter), i))
        for entry, g in picked:
            i = entry[2]
            alloc = nodes.place(g)
            if alloc is None:  # fragmented: keep its place in the queue
                heapq.heappush(queues[g], entry)
                continue
            allocs[i] = alloc
            if math.isnan(first_start[i]):
                first_start[i] = t
                queue[i] = t - jobs[i].submit
            else:
                queue[i] += t - ckpt_at[i]
            run_rank[i] = next(counter)
            vend[i] = t + remain[i]
            bisect.insort(running, (vend[i], run_rank[i], i))
            heapq.heappush(ends, (vend[i] + tick, i, seg[i]))
    return [Outcome(first_start[i], end[i], queue[i], preempted[i]) for i in range(n)]


def _srtf_walk(
    queues: dict[int, list[_SrtfEntry]],
    running: list[_SrtfEntry],
    gpus: list[int],
    total: int,
    t: float,
) -> tuple[list[tuple[_SrtfEntry, int]], list[_SrtfEntry]]:
    """Walk queued + running jobs in order of remaining time with the GPU quota.

    Returns the queued jobs picked to start (popped off ``queues``, with their GPU
    count) and the running jobs to preempt.
    """
    quota = total
    picked: list[tuple[tuple[float, int, int], int]] = []
    to_preempt: list[tuple[float, int, int]] = []
    r = 0
    n_run = len(running)
    best: tuple[tuple[float, int, int], int] | None = None
    stale = True
    while True:
        # The best queued job that fits the quota; it stays best while it still fits.
        if stale or (best is not None and best[1] > quota):
            best = None
            for g, heap in queues.items():
                if heap and g <= quota and (best is None or heap[0] < best[0]):
                    best = (heap[0], g)
            stale = False
        if r < n_run:
            run_entry = running[r]
            # Queued jobs come first on a tie (the artifact sorts queue + running).
            if best is None or run_entry[0] - t < best[0][0]:
                ri = run_entry[2]
                if gpus[ri] <= quota:
                    quota -= gpus[ri]
                else:
                    to_preempt.append(run_entry)
                r += 1
                continue
        if best is None:
            break
        stale = True
        entry = heapq.heappop(queues[best[1]])
        quota -= best[1]
        picked.append((entry, best[1]))
    return picked, to_preempt
