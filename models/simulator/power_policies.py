"""Power policies for :mod:`models.simulator.power` (pure).

* :class:`IdleTimer` -- Slurm's power saving: a node idle for ``SuspendTime`` powers down;
  it comes back only when a job needs it (the simulator's demand wake).
* :class:`SlotRule` -- the slot-based CES rule of ``models.power_policy`` (the artifact's
  rule, or gpuhint's forecast policy for load series) on the peak busy nodes per slot:
  it powers down idle nodes (longest idle first) or wakes off ones to its level.
* :class:`JobAware` -- gpuhint's policy from what the hint service knows (the queue, the
  running jobs' *predicted* remaining time, the arrivals so far); see its docstring.
"""

from __future__ import annotations

import heapq
import math

from models.forecast import Forecaster
from models.power_jobs import (  # noqa: F401  (re-exported: power_counts, tests)
    DAY_S,
    GAP_EDGES,
    JobAwareConfig,
    JobAwareCore,
    _bucket,
    _Gaps,
    _History,
)
from models.power_policy import PowerPolicy as SlotPolicy
from models.power_policy import PowerPolicyConfig
from models.simulator.power import PowerSim


class IdleTimer:
    """Slurm's ``SuspendTime``: power a node down once it has been idle ``suspend_s``."""

    def __init__(self, suspend_s: float) -> None:
        if suspend_s < 0:
            raise ValueError("suspend_s must be >= 0")
        self.suspend_s = suspend_s
        self.due: list[tuple[float, int, float]] = []  # (when, node, idle since)

    def attach(self, sim: PowerSim) -> None:
        self.sim = sim

    def on_idle(self, node: int, t: float) -> None:
        heapq.heappush(self.due, (t + self.suspend_s, node, t))

    def on_alloc(self, node: int, t: float) -> None:
        return None

    def step(self, t: float) -> None:
        idle = self.sim.idle
        while self.due and self.due[0][0] <= t:
            _, node, since = heapq.heappop(self.due)
            if idle.get(node) == since:
                self.sim.power_down(node)

    def next_time(self) -> float:
        return self.due[0][0] if self.due else math.inf


class SlotRule:
    """A :class:`models.power_policy.PowerPolicy` driven once per slot by the peak busy nodes."""

    def __init__(self, cfg: PowerPolicyConfig, forecaster: Forecaster) -> None:
        self.cfg, self.forecaster = cfg, forecaster
        self.slot = 0
        self.next_t = math.inf

    def attach(self, sim: PowerSim) -> None:
        self.sim = sim
        self.rule = SlotPolicy(self.cfg, total=sim.num_nodes)
        self.next_t = sim.t + self.cfg.slot_s

    def on_idle(self, node: int, t: float) -> None:
        return None

    def on_alloc(self, node: int, t: float) -> None:
        return None

    def step(self, t: float) -> None:
        sim = self.sim
        if t < self.next_t:
            return
        self.next_t += self.cfg.slot_s
        used, total = sim.take_peak_busy(), sim.num_nodes
        on = total - sim.n_off
        self.rule.sync_active(on)
        fc = self.forecaster.update(self.next_t - 2 * self.cfg.slot_s, used, total)
        target = self.rule.step(self.slot, used, total, fc).active
        self.slot += 1
        if target > on:
            sim.wake(target - on)
        for node in list(sim.idle)[: max(0, on - target)]:
            sim.power_down(node)

    def next_time(self) -> float:
        return self.next_t


class JobAware:
    """gpuhint's job-aware policy in the simulator: :class:`models.power_jobs.JobAwareCore`
    (its docstring says what it decides) fed the simulator's arrivals, idle and
    allocated nodes, and the simulator itself as its :class:`models.power_jobs.JobView`."""

    def __init__(self, cfg: JobAwareConfig | None = None) -> None:
        self.cfg = cfg or JobAwareConfig()
        self.next_t = math.inf
        self.seen = 0

    def attach(self, sim: PowerSim) -> None:
        self.sim = sim
        self.core = JobAwareCore(self.cfg, sim.pm, sim.gpus_per_node, sim.t)
        self.next_t = sim.t
        self.order = sorted(range(len(sim.jobs)), key=lambda i: (sim.jobs[i].submit, i))

    def on_idle(self, node: int, t: float) -> None:
        self.core.on_idle(node, t)

    def on_alloc(self, node: int, t: float) -> None:
        self.core.on_alloc(node, t)

    def step(self, t: float) -> None:
        sim, core = self.sim, self.core
        jobs = sim.jobs
        while self.seen < len(self.order) and jobs[self.order[self.seen]].submit <= t:
            j = jobs[self.order[self.seen]]
            core.arrive(j.submit, j.gpus)
            self.seen += 1
        choice = core.decide(t, sim)
        self.next_t = core.next_t
        if choice.wake:
            sim.wake(choice.wake)
        for node in choice.down:
            sim.power_down(node)

    def next_time(self) -> float:
        return self.next_t
