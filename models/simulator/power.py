"""Jobs on nodes that are busy, idle, booting or off: the power-saving simulator (pure).

One pool of ``num_nodes`` nodes of ``gpus_per_node`` GPUs, placement as
:class:`models.simulator.cluster.Nodes` (the artifact's consolidating placer) over the
nodes that are *on*; a non-preemptive queue without backfill, FIFO by default or by a
priority per job (QSSF with predicted service). Every node starts on and idle.

Power states: a node is *off*, *booting* (for ``PowerModel.boot_s``, then idle), *idle*
(on, no job) or *busy* (on, at least one job). A power policy (:class:`PowerPolicy`)
powers idle nodes down and wakes off ones. Allocation works as Slurm's with power saving:
a job is placed on the nodes that are on when it fits there, else on nodes that are
booting or off as well (the simulator wakes as many off nodes as it needs, fewest power
cycles first); it starts when the last of its nodes is up (Slurm's ``ResumeTimeout`` is
the boot time here; resumes never fail). Jobs behind it are then considered at once, so
a burst of jobs waits for one boot, not one boot each. The head of the queue blocks the
jobs behind it only when it does not fit even with every node on.

Energy is integrated over ``[horizon_from, horizon_to]`` (default: first to last
submit; past the last job's end, boots finish and the policy goes on acting) with a draw
per state (:class:`PowerModel`); a node that is on and allocated to
jobs none of which runs yet (waiting for another node's boot, or for the configuration
pass) draws as idle until the first of them starts, though policies see it busy.
Policies see each running job's *predicted* duration (``predicted``), never the true one.

>>> jobs = [SimJob("a", 0, 100, 8), SimJob("b", 1000, 100, 8)]
>>> r = simulate_power(jobs, 2, AlwaysOn())
>>> [round(s) for s in r.start], r.power_downs
([0, 1000], 0)
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from models.simulator.cluster import Alloc, Nodes
from models.simulator.engine import SimJob

OFF, BOOT, ON = 0, 1, 2


@dataclass(frozen=True, slots=True)
class PowerModel:
    """Boot time and draw per node state, in seconds and watts (defaults: docs/ces.md)."""

    boot_s: float = 300.0
    busy_w: float = 3500.0
    idle_w: float = 700.0
    boot_w: float = 700.0
    off_w: float = 20.0
    start_period_s: float = 0.0
    """A job given a booting node starts at the first multiple of this period (from the
    horizon's start) after its nodes are up; 0: at once. Slurm 22.05 finishes such a job's
    configuration in its 30 s periodic pass (``job_time_limit``), so it starts 0 to 30 s
    after the boot; negligible against a real boot, but ``evaluate slurm --power`` runs
    compressed, where that pass is ``30 x speed`` trace seconds."""
    start_offset_s: float = 0.0
    """Where the passes fall: at ``horizon start + start_offset_s + k x start_period_s``."""

    def __post_init__(self) -> None:
        vals = (self.boot_s, self.busy_w, self.idle_w, self.boot_w, self.off_w,
                self.start_period_s, self.start_offset_s)  # fmt: skip
        if not all(math.isfinite(v) and v >= 0 for v in vals):
            raise ValueError("boot time, start period and watts must be finite and >= 0")


class PowerPolicy(Protocol):
    """Decides power-downs and wakes; the simulator calls it at every job event."""

    def attach(self, sim: PowerSim) -> None:
        """Called once, before the first event (every node on and idle)."""
        ...

    def on_idle(self, node: int, t: float) -> None:
        """``node`` became idle (on, no job) at ``t``."""
        ...

    def on_alloc(self, node: int, t: float) -> None:
        """A job was allocated ``node`` at ``t`` (it may still be booting or off)."""
        ...

    def step(self, t: float) -> None:
        """Decide at ``t`` (a job event or :meth:`next_time`): ``sim.power_down`` / ``wake``."""
        ...

    def next_time(self) -> float:
        """When the policy next wants :meth:`step` without a job event (inf: never)."""
        ...


class AlwaysOn:
    """Every node on, always: the reference the savings are measured against."""

    def attach(self, sim: PowerSim) -> None:
        return None

    def on_idle(self, node: int, t: float) -> None:
        return None

    def on_alloc(self, node: int, t: float) -> None:
        return None

    def step(self, t: float) -> None:
        return None

    def next_time(self) -> float:
        return math.inf


class _PoweredNodes(Nodes):
    """Nodes whose off / booting members show no free GPUs to the placer."""

    def block(self, node: int) -> None:
        self._set(node, 0)

    def unblock(self, node: int) -> None:
        self._set(node, self.gpus_per_node)

    def set_free(self, node: int, free: int) -> None:
        self._set(node, free)

    def fits_with(self, gpus: int, extra: int) -> bool:
        """Whether ``gpus`` would fit with ``extra`` more empty nodes."""
        g, count = self.gpus_per_node, self.count
        if gpus > self.total_free + extra * g:
            return False
        full = count[g] + extra
        if gpus <= g:
            return full > 0 or any(count[f] for f in range(max(gpus, 1), g))
        whole, rest = divmod(gpus, g)
        if full < whole:
            return False
        return rest == 0 or full > whole or any(count[f] for f in range(rest, g))


@dataclass
class PowerResult:
    """One run: per-job start times and the node-seconds per state over the horizon."""

    start: list[float]
    busy_s: float = 0.0
    idle_s: float = 0.0
    boot_s: float = 0.0
    off_s: float = 0.0
    power_downs: int = 0
    wakes: int = 0
    demand_wakes: int = 0
    horizon_s: float = 0.0
    num_nodes: int = 0
    cycles_per_node: list[int] = field(default_factory=list)
    horizon_power_downs: int = 0
    """``power_downs`` up to the horizon's end (the run goes on to the last job's end)."""
    horizon_cycles_per_node: list[int] = field(default_factory=list)
    log: list[tuple[str, float, int, tuple[int, ...], float]] | None = None
    """With ``simulate_power(record=True)``: ``("start" | "end", time, job, nodes, start)``
    in the order the simulator applied them (a start at allocation; ``start`` is when the
    job runs, after its nodes booted)."""

    def energy_kwh(self, pm: PowerModel) -> float:
        j = (
            self.busy_s * pm.busy_w
            + self.idle_s * pm.idle_w
            + self.boot_s * pm.boot_w
            + self.off_s * pm.off_w
        )
        return j / 3.6e6

    @property
    def utilization(self) -> float:
        """Busy node-time over powered (busy + idle + booting) node-time."""
        on = self.busy_s + self.idle_s + self.boot_s
        return self.busy_s / on if on else math.nan


class PowerSim:
    """State of one run, read by policies (``idle``, counts, queue, running jobs)."""

    def __init__(
        self,
        jobs: Sequence[SimJob],
        num_nodes: int,
        pm: PowerModel,
        predicted: Sequence[float],
        gpus_per_node: int,
        horizon: tuple[float, float],
    ) -> None:
        self.jobs, self.pm, self.predicted = jobs, pm, predicted
        self.num_nodes, self.gpus_per_node = num_nodes, gpus_per_node
        self.h0, self.h1 = horizon
        self.nodes = _PoweredNodes(num_nodes, gpus_per_node)
        self.state = [ON] * num_nodes
        self.jobs_on = [0] * num_nodes
        self.ready_at = [0.0] * num_nodes
        #: start times of the jobs allocated to each node, and the on nodes allocated
        #: only to jobs that have not started yet -> when the first of them starts
        self.starts_on: list[list[float]] = [[] for _ in range(num_nodes)]
        self.held: dict[int, float] = {}
        self.t = self.h0
        #: idle nodes -> since when, in order of becoming idle (longest idle first)
        self.idle: dict[int, float] = {}
        self.n_busy = self.n_boot = self.n_off = 0
        self.peak_busy = 0
        self.boots: list[tuple[float, int]] = []
        self.queue: list[tuple[tuple[float, ...], int]] = []
        #: running jobs as (predicted end, index), sorted
        self.running_pred: list[tuple[float, int]] = []
        self.res = PowerResult(start=[math.nan] * len(jobs), num_nodes=num_nodes)
        self.res.cycles_per_node = [0] * num_nodes
        self.res.horizon_cycles_per_node = [0] * num_nodes
        self.policy: PowerPolicy = AlwaysOn()

    # -- read side for policies -------------------------------------------------
    @property
    def n_idle(self) -> int:
        return len(self.idle)

    def head(self) -> int | None:
        """Index of the job at the head of the queue, if any."""
        return self.queue[0][1] if self.queue else None

    def head_gpus(self) -> int | None:
        """GPUs of the job at the head of the queue, if any."""
        return self.jobs[self.queue[0][1]].gpus if self.queue else None

    def nodes_needed(self, gpus: int) -> int | None:
        """Empty nodes to add for ``gpus`` to fit now (None: not even with every node)."""
        for extra in range(self.n_off + 1):
            if self.nodes.fits_with(gpus, extra):
                return extra
        return None

    def freeing_gpus(self, until: float) -> int:
        """GPUs of running jobs predicted to end by ``until`` (overdue jobs included)."""
        k = bisect.bisect_right(self.running_pred, (until, math.inf))
        return sum(self.jobs[i].gpus for _, i in self.running_pred[:k])

    # -- actions -------------------------------------------------------------------
    def power_down(self, node: int) -> None:
        if node not in self.idle:
            raise ValueError(f"node {node} is not idle")
        del self.idle[node]
        self.nodes.block(node)
        self.state[node] = OFF
        self.n_off += 1
        self.res.power_downs += 1
        self.res.cycles_per_node[node] += 1
        if self.t <= self.h1:
            self.res.horizon_power_downs += 1
            self.res.horizon_cycles_per_node[node] += 1

    def wake(self, count: int, demand: bool = False) -> int:
        """Start booting up to ``count`` off nodes (fewest cycles first); how many.

        A booting node can be allocated at once; its jobs start when it is up.
        """
        if count <= 0 or not self.n_off:
            return 0
        off = [n for n in range(self.num_nodes) if self.state[n] == OFF]
        off.sort(key=lambda n: self.res.cycles_per_node[n])
        woke = off[:count]
        ready = self.t + self.pm.boot_s
        for n in woke:
            self.state[n] = BOOT
            self.ready_at[n] = ready
            self.nodes.unblock(n)
            heapq.heappush(self.boots, (ready, n))
        self.n_off -= len(woke)
        self.n_boot += len(woke)
        self.res.wakes += len(woke)
        if demand:
            self.res.demand_wakes += len(woke)
        return len(woke)

    # -- internals -----------------------------------------------------------------
    def advance(self, t: float) -> None:
        a, b = max(self.t, self.h0), min(t, self.h1)
        if b > a:
            dt = b - a
            r = self.res
            waiting = sum(min(s, b) - a for s in self.held.values() if s > a)
            r.busy_s += self.n_busy * dt - waiting
            r.idle_s += len(self.idle) * dt + waiting
            r.boot_s += self.n_boot * dt
            r.off_s += self.n_off * dt
        self.t = max(self.t, t)
        if self.held:
            self.held = {n: s for n, s in self.held.items() if s > self.t}

    def _hold(self, node: int, t: float) -> None:
        """Mark ``node`` (on, allocated) as drawing idle until its first job starts."""
        first = min(self.starts_on[node], default=t)
        if self.state[node] == ON and first > t:
            self.held[node] = first
        else:
            self.held.pop(node, None)

    def _became_idle(self, node: int, t: float) -> None:
        self.idle[node] = t
        self.policy.on_idle(node, t)

    def finish_boot(self, node: int, t: float) -> None:
        self.state[node] = ON
        self.n_boot -= 1
        if self.jobs_on[node]:
            self.n_busy += 1
            self.peak_busy = max(self.peak_busy, self.n_busy)
            self._hold(node, t)
        else:
            self._became_idle(node, t)

    def _place(self, gpus: int) -> Alloc | None:
        """Place on nodes that are on if possible, else on booting ones too."""
        booting = [n for n, st in enumerate(self.state) if st == BOOT] if self.n_boot else []
        saved = [(n, self.nodes.free[n]) for n in booting]
        for n, _ in saved:
            self.nodes.set_free(n, 0)
        alloc = self.nodes.place(gpus)
        for n, f in saved:
            self.nodes.set_free(n, f)
        if alloc is None and booting:
            alloc = self.nodes.place(gpus)
        return alloc

    def start_job(self, i: int, alloc: Alloc, t: float) -> float:
        """Allocate ``alloc`` to job ``i`` now; it starts when its nodes are up."""
        start = t
        booting = False
        for node, _ in alloc:
            self.policy.on_alloc(node, t)
            if self.state[node] == BOOT:
                start = max(start, self.ready_at[node])
                booting = True
            elif self.jobs_on[node] == 0:
                del self.idle[node]
                self.n_busy += 1
            self.jobs_on[node] += 1
        if booting and self.pm.start_period_s > 0:
            start = self._next_pass(start)
        for node, _ in alloc:
            self.starts_on[node].append(start)
            self._hold(node, t)
        self.peak_busy = max(self.peak_busy, self.n_busy)
        self.res.start[i] = start
        if self.res.log is not None:
            self.res.log.append(("start", t, i, tuple(n for n, _ in alloc), start))
        bisect.insort(self.running_pred, (start + self.predicted[i], i))
        return start

    def _next_pass(self, t: float) -> float:
        """The first periodic pass at or after ``t`` (:attr:`PowerModel.start_period_s`)."""
        period = self.pm.start_period_s
        first = self.h0 + self.pm.start_offset_s % period
        return first + math.ceil((t - first) / period) * period

    def end_job(self, i: int, alloc: Alloc, t: float) -> None:
        self.nodes.release(alloc)
        pe = self.res.start[i] + self.predicted[i]
        del self.running_pred[bisect.bisect_left(self.running_pred, (pe, i))]
        if self.res.log is not None:
            self.res.log.append(("end", t, i, tuple(n for n, _ in alloc), self.res.start[i]))
        for node, _ in alloc:
            self.jobs_on[node] -= 1
            self.starts_on[node].remove(self.res.start[i])
            if self.jobs_on[node] == 0:
                self.n_busy -= 1
                self._became_idle(node, t)
            else:
                self._hold(node, t)

    def schedule(self, t: float, allocs: list[Alloc], ends: list[tuple[float, int]]) -> None:
        """Allocate jobs in queue order until the head does not fit even with every node."""
        while self.queue:
            i = self.queue[0][1]
            gpus = self.jobs[i].gpus
            alloc = self._place(gpus)
            if alloc is None:
                need = self.nodes_needed(gpus)
                if need is None or not self.wake(need, demand=True):
                    return
                alloc = self.nodes.place(gpus)
                if alloc is None:  # pragma: no cover - the woken nodes make it fit
                    return
            heapq.heappop(self.queue)
            allocs[i] = alloc
            start = self.start_job(i, alloc, t)
            heapq.heappush(ends, (start + self.jobs[i].duration, i))

    def take_peak_busy(self) -> int:
        """Most busy nodes since the last call (for slot-based policies)."""
        p, self.peak_busy = self.peak_busy, self.n_busy
        return p


def simulate_power(
    jobs: Sequence[SimJob],
    num_nodes: int,
    policy: PowerPolicy,
    *,
    power: PowerModel | None = None,
    predicted: Sequence[float] | None = None,
    priorities: Sequence[float] | None = None,
    gpus_per_node: int = 8,
    horizon: tuple[float, float] | None = None,
    record: bool = False,
) -> PowerResult:
    """Run ``jobs`` under ``policy``; ``priorities`` (smaller first) replace FIFO order.

    ``predicted`` durations are what policies see (default: the true ones); ``record``
    keeps the job starts and ends in ``log``.
    """
    n = len(jobs)
    cap = num_nodes * gpus_per_node
    for j in jobs:
        if not 1 <= j.gpus <= cap:
            raise ValueError(f"job {j.job_id} needs {j.gpus} GPUs; the cluster has {cap}")
        if not (math.isfinite(j.duration) and j.duration >= 0 and math.isfinite(j.submit)):
            raise ValueError(f"job {j.job_id}: submit and duration must be finite, duration >= 0")
    pred = list(predicted) if predicted is not None else [j.duration for j in jobs]
    if len(pred) != n or (priorities is not None and len(priorities) != n):
        raise ValueError("predicted and priorities need one entry per job")
    for j, p in zip(jobs, priorities or (), strict=False):
        if math.isnan(p):  # NaN compares false both ways and breaks the queue's heap
            raise ValueError(f"job {j.job_id}: priority is NaN")
    order = sorted(range(n), key=lambda i: (jobs[i].submit, i))
    if horizon is None:
        horizon = (jobs[order[0]].submit, jobs[order[-1]].submit) if n else (0.0, 0.0)
    sim = PowerSim(jobs, num_nodes, power or PowerModel(), pred, gpus_per_node, horizon)
    sim.policy = policy
    sim.res.horizon_s = max(0.0, horizon[1] - horizon[0])
    if record:
        sim.res.log = []
    policy.attach(sim)
    for node in range(num_nodes):
        sim._became_idle(node, sim.t)
    _run(sim, order, priorities)
    _drain(sim, horizon[1])
    sim.advance(horizon[1])
    return sim.res


def _drain(sim: PowerSim, until: float) -> None:
    """After the last job, up to the horizon's end: boots finish and the policy acts (a
    horizon past the last job's end leaves nodes idle that its timer powers down)."""
    stalled = False  # a policy that asks for no later step than the last is not asked again
    while True:
        tp = math.inf if stalled else sim.policy.next_time()
        t = min(sim.boots[0][0] if sim.boots else math.inf, tp)
        if t > until:
            return
        t = max(t, sim.t)
        sim.advance(t)
        while sim.boots and sim.boots[0][0] <= t:
            _, node = heapq.heappop(sim.boots)
            sim.finish_boot(node, t)
        if not stalled:
            sim.policy.step(t)
            stalled = sim.policy.next_time() <= t


def _run(sim: PowerSim, order: list[int], priorities: Sequence[float] | None) -> None:
    jobs, policy = sim.jobs, sim.policy
    allocs: list[Alloc] = [[] for _ in jobs]
    ends: list[tuple[float, int]] = []
    nxt, n = 0, len(order)
    while nxt < n or ends or sim.queue:
        t = jobs[order[nxt]].submit if nxt < n else math.inf
        for q in (ends, sim.boots):
            if q and q[0][0] < t:
                t = q[0][0]
        tp = policy.next_time()
        if tp < t:
            t = max(tp, sim.t)
        if math.isinf(t):
            raise RuntimeError("jobs are queued but nothing can happen: a policy left them")
        sim.advance(t)
        while sim.boots and sim.boots[0][0] <= t:
            _, node = heapq.heappop(sim.boots)
            sim.finish_boot(node, t)
        while ends and ends[0][0] <= t:
            _, i = heapq.heappop(ends)
            sim.end_job(i, allocs[i], t)
        while nxt < n and jobs[order[nxt]].submit <= t:
            i = order[nxt]
            key = (priorities[i], jobs[i].gpus) if priorities is not None else ()
            heapq.heappush(sim.queue, ((*key, jobs[i].submit, i), i))
            nxt += 1
        sim.schedule(t, allocs, ends)
        policy.step(t)
        sim.schedule(t, allocs, ends)
