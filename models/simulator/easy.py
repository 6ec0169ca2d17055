"""EASY backfill with the users' requested time limits (pure): what a Slurm site runs.

The queue is ordered by ``keys`` (smaller first; ties by arrival): submit time for
Slurm's default, or any priority. At each submit and end: start jobs from the head while
they fit (the artifact's consolidating placement, :class:`Nodes`); when the head does
not fit, it gets a **reservation**: the *shadow time* at which enough GPUs will be free
for it, counting each running job as ending at ``start + limit`` (its requested time
limit, what the scheduler knows; never before now), and the *extra* GPUs left over then.
A later job may start now (backfill) if it fits now and either ends by the shadow time
by its own limit, or uses no more than the extra GPUs. Jobs really end after their true
duration. As in Slurm's model the reservation counts GPUs, not nodes: a fragmented VC
can delay the head past its shadow time (the reservation is recomputed at each event).

A job without a limit (``None``) gets the largest limit of the jobs given, as Slurm
gives a job without ``--time`` its partition's ``MaxTime``; when no job has one, nothing
ends in time, jobs only backfill into the extra GPUs and the reservation is at infinity.

Closed loop: with a :class:`~models.simulator.engine.Ranker` the queue keys come from
the ranker when a job arrives and move when it re-ranks waiting jobs (after an end, as
in :func:`~models.simulator.engine.simulate_vc`); ``run_time(i)`` then gives the run
time the reservation assumes for job ``i`` (e.g. its hint's p90; ``None``: unknown, it
never ends in time), asked when the job is first considered and kept; or, given
``limits`` instead, the reservations assume the requested limits (a ranked queue under a
site's own backfill).

>>> from models.simulator.engine import SimJob
>>> jobs = [SimJob("a", 0, 100, 4), SimJob("b", 1, 10, 8), SimJob("c", 2, 40, 4),
...         SimJob("d", 3, 40, 4)]
>>> limits = [100, 10, 50, 200]   # c ends by a's limit (100): it backfills; d would not
>>> [(o.start, o.end) for o in simulate_easy(jobs, 1, [j.submit for j in jobs], limits)]
[(0, 100), (100, 110), (2, 42), (110, 150)]
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from models.simulator.cluster import Alloc, Nodes
from models.simulator.engine import Outcome, Ranker, SimJob


def simulate_easy(
    jobs: Sequence[SimJob],
    num_nodes: int,
    keys: Sequence[float] | None,
    limits: Sequence[float | None] | None,
    gpus_per_node: int = 8,
    max_job_test: int = 500,
    *,
    ranker: Ranker | None = None,
    run_time: Callable[[int], float | None] | None = None,
) -> list[Outcome]:
    """Schedule ``jobs`` with EASY backfill (module docstring); one outcome per job.

    ``max_job_test``: how many queued jobs behind the head one pass considers for
    backfill (Slurm's ``bf_max_job_test``, default 500): bounded work per event.
    Either ``keys`` and ``limits``, or (closed loop) ``ranker`` and ``run_time`` or
    ``limits``."""
    n = len(jobs)
    keys_now, lims = _initial(n, keys, limits, ranker is not None, run_time is not None)
    nodes = Nodes(num_nodes, gpus_per_node)
    for j in jobs:
        if not 1 <= j.gpus <= nodes.total_gpus:
            raise ValueError(f"job {j.job_id}: needs 1..{nodes.total_gpus} GPUs")
    order = sorted(range(n), key=lambda i: (jobs[i].submit, i))
    start = [0.0] * n
    allocs: list[Alloc] = [[] for _ in range(n)]
    queue: list[tuple[float, int, int]] = []  # (key, arrival rank, job), kept sorted
    running: list[tuple[float, int]] = []  # (true end, job)
    est_end: dict[int, float] = {}  # running job -> start + limit (inf: no limit)
    rank = {i: r for r, i in enumerate(order)}
    nxt = 0

    def limit(i: int) -> float | None:
        lim = lims[i]
        if run_time is not None and lim is not None and math.isnan(lim):
            asked = run_time(i)  # unknown (None, NaN, inf): never ends in time
            lim = lims[i] = asked if asked is not None and math.isfinite(asked) else None
        return lim

    def begin(i: int, t: float, alloc: Alloc) -> None:
        allocs[i], start[i] = alloc, t
        heapq.heappush(running, (t + jobs[i].duration, i))
        lim = limit(i)
        est_end[i] = t + lim if lim is not None else math.inf
        if ranker is not None:
            ranker.start(i, t)

    while nxt < n or running:
        t = jobs[order[nxt]].submit if nxt < n else math.inf
        if running and running[0][0] < t:
            t = running[0][0]
        while running and running[0][0] == t:
            _, i = heapq.heappop(running)
            nodes.release(allocs[i])
            del est_end[i]
            if ranker is not None:
                _rerank(queue, keys_now, rank, ranker.finish(i, t))
        while nxt < n and jobs[order[nxt]].submit == t:
            i = order[nxt]
            if ranker is not None:
                keys_now[i] = _key(ranker.submit(i, t), i)
            bisect.insort(queue, (keys_now[i], rank[i], i))
            nxt += 1
        if run_time is not None:  # predicted run times grow; requested limits do not
            _regrow(est_end, start, t)
        _schedule(t, jobs, nodes, queue, est_end, limit, begin, max_job_test)
    return [
        Outcome(start[i], start[i] + jobs[i].duration, start[i] - jobs[i].submit) for i in range(n)
    ]


def _initial(
    n: int,
    keys: Sequence[float] | None,
    limits: Sequence[float | None] | None,
    ranked: bool,
    timed: bool,
) -> tuple[list[float], list[float | None]]:
    """The queue keys and limits to start from: given (a missing limit gets the largest
    one given), or NaN for the ranker (the keys) and ``run_time`` (the limits) to fill
    in (the closed loop); a ranker with ``limits`` reserves on those."""
    if timed and not ranked:
        raise ValueError("run_time goes with a ranker (the closed loop)")
    if any(math.isnan(k) for k in keys or ()) or any(
        x is not None and math.isnan(x) for x in limits or ()
    ):
        raise ValueError("a key or limit is NaN: it would break the queue's order")
    if ranked:
        if keys is not None or (timed and limits is not None):
            raise ValueError("give keys and limits, or a ranker and run_time, not both")
        if timed:
            return [math.nan] * n, [math.nan] * n  # NaN: not asked yet
        if limits is None:
            raise ValueError("a ranker needs run_time or limits (the reservation's run times)")
        keys = [math.nan] * n  # the ranker keys each job at its submit
    if keys is None or limits is None or len(keys) != n or len(limits) != n:
        raise ValueError("one key and one limit per job")
    given = [x for x in limits if x is not None]
    default = max(given) if given else None
    return list(keys), [default if x is None else x for x in limits]


def _key(p: float, i: int) -> float:
    """A ranker's priority for job ``i`` as a queue key; NaN would break the sorted queue."""
    key = float(p)
    if math.isnan(key):
        raise ValueError(f"the ranker gave job #{i} a NaN priority")
    return key


def _regrow(est_end: dict[int, float], start: Sequence[float], t: float) -> None:
    """Predicted run times are not limits: a job that outlives its prediction is not
    killed, so its expected end doubles its run time until it lies ahead of ``t``
    (Tsafrir et al., "Backfilling using system-generated predictions", 2007: correct a
    prediction the job outlives) instead of counting it as ending now."""
    for i, e in est_end.items():
        if e > t:
            continue
        run = max(e - start[i], 1.0)  # a 0 s prediction would stay "ending now" forever
        while e <= t:
            run *= 2
            e = start[i] + run
        est_end[i] = e


def _rerank(
    queue: list[tuple[float, int, int]],
    keys: list[float],
    rank: Mapping[int, int],
    updates: Iterable[tuple[int, float]],
) -> None:
    """Move the waiting jobs a ranker re-ranked (others: already started, ignored)."""
    for i, p in updates:
        old = (keys[i], rank[i], i)
        k = bisect.bisect_left(queue, old)
        if k < len(queue) and queue[k] == old and float(p) != keys[i]:
            queue.pop(k)
            keys[i] = _key(p, i)
            bisect.insort(queue, (keys[i], rank[i], i))


def _schedule(
    t: float,
    jobs: Sequence[SimJob],
    nodes: Nodes,
    queue: list[tuple[float, int, int]],
    est_end: dict[int, float],
    limit: Callable[[int], float | None],
    start_job: Callable[[int, float, Alloc], None],
    max_job_test: int,
) -> None:
    """Start the head while it fits; then reserve for it and backfill behind it."""
    while queue:
        i = queue[0][2]
        alloc = nodes.place(jobs[i].gpus)
        if alloc is None:
            break
        queue.pop(0)
        start_job(i, t, alloc)
    if not queue:
        return
    shadow, extra = _reservation(t, jobs, nodes.total_free, jobs[queue[0][2]].gpus, est_end)
    k, tested = 1, 0
    while k < len(queue) and tested < max_job_test:
        tested += 1
        i = queue[k][2]
        g, lim = jobs[i].gpus, limit(i)
        ends_in_time = lim is not None and t + lim <= shadow
        if (ends_in_time or g <= extra) and nodes.can_place(g):
            alloc = nodes.place(g)
            assert alloc is not None
            queue.pop(k)
            start_job(i, t, alloc)
            if not ends_in_time:
                extra -= g
            continue
        k += 1


def _reservation(
    t: float, jobs: Sequence[SimJob], free: int, head: int, est_end: Mapping[int, float]
) -> tuple[float, int]:
    """The head's shadow time (the first expected end by which ``head`` GPUs are free)
    and the extra GPUs then: free now plus those of *every* job expected to end by the
    shadow time, less the head's (at a shadow time of infinity, only the jobs counted to
    reach it)."""
    ends = sorted((max(e, t), i) for i, e in est_end.items())
    for k, (end, i) in enumerate(ends):
        free += jobs[i].gpus
        if free >= head:
            if math.isfinite(end):
                for e2, i2 in ends[k + 1 :]:
                    if e2 != end:
                        break
                    free += jobs[i2].gpus
            return end, free - head
    return math.inf, 0
