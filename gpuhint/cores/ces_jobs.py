"""Job-aware CES online: job events in, per-node power advisories out. No I/O of its own.

The worker's CES side (:mod:`gpuhint.cores.pipeline.cluster_load`) feeds
:class:`JobsCesEngine` every job event of a cluster (submitted, started with its nodes,
finished), the QSSF hint of each submitted job (its predicted duration) and the nodes'
NodeStatus. Per cluster it keeps what the offline simulator keeps -- each node busy,
idle (since when), booting or off; the queue in submit order with each job's GPUs; the
running jobs with their *predicted* end (start + the hint's ``predicted_duration_s``,
else ``default_duration_s``, one hour, as ``gpuhint evaluate ces --trace``) -- and asks
the same :class:`models.power_jobs.JobAwareCore` as the simulator's ``JobAware`` at the
same moments: after the last event of each event time, at each boot's end and each
tick (``JobAwareConfig.tick_s``, 1 min) that falls between events.

Its own advice is assumed followed (a node advised down is off, a woken one boots for
``PowerModel.boot_s``), and NodeStatus corrects that: a node advised down that still
reports powered on ``confirm_s`` later stayed on (its cycle is forgotten); one that
reports powered off is off, unless it was woken less than a boot + ``confirm_s`` ago.
The scheduler's demand wakes show up as a job started on a node believed off (it boots).

Advisories (unchanged wire contract plus ``off_nodes``): a cluster advisory at each
decision that changes something, when a node joins, and at least every ``heartbeat_s``
(the CES slot) -- ``action``,
``count`` and ``nodes`` the change, ``active_nodes`` the nodes meant on, ``off_nodes``
every node meant off -- and one per node named in a change.

>>> from gpuhint.wire.contract import JobEvent
>>> eng = JobsCesEngine(None, JobsCesConfig(JobAwareConfig(warmup_s=0), keep_decisions=9))
>>> eng.on_message(JobEvent(phase="started", job_id="1", num_gpus=8, time=0,
...                         submit_time=0, nodes=("n1",)))
>>> eng.on_message(JobEvent(phase="finished", job_id="1", num_gpus=8, time=60,
...                         submit_time=0, nodes=("n1",)))
>>> [(t, d) for t, _, d in eng.flush("default")]
[(60.0, ('n1',))]
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field

from gpuhint.cores.sink import HintStore
from gpuhint.wire.contract import (
    JobEvent,
    JobPhase,
    NodeStatus,
    PowerAction,
    PowerAdvisory,
    PriorityHint,
)
from models.power_jobs import JobAwareConfig, JobAwareCore, PowerChoice
from models.simulator.power import PowerModel

OFF, BOOT, ON = 0, 1, 2
_NAN = math.nan

Decision = tuple[float, tuple[str, ...], tuple[str, ...]]
"""(time, nodes woken, nodes powered down)."""


@dataclass(frozen=True)
class JobsCesConfig:
    """The online job-aware CES engine's knobs (the policy's are ``policy``)."""

    policy: JobAwareConfig = field(default_factory=JobAwareConfig)
    power: PowerModel = field(default_factory=PowerModel)
    gpus_per_node: int = 8
    default_duration_s: float = 3600.0
    heartbeat_s: float = 600.0
    confirm_s: float = 300.0
    watts_per_node: float = 700.0
    keep_decisions: int = 0
    """Decisions kept in :attr:`JobsCluster.decisions` (tests, evaluation); 0: none."""


class JobsCluster:
    """One cluster as the policy sees it; also the core's :class:`models.power_jobs.JobView`."""

    def __init__(self, cfg: JobsCesConfig) -> None:
        self.cfg = cfg
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.state: list[int] = []
        self.jobs_on: list[int] = []
        self.status_busy: list[bool] = []
        self.cycles: list[int] = []
        self.advised_at: list[float] = []  # an unconfirmed power-down of ours, when
        self.idle: dict[int, float] = {}
        self.n_boot = 0
        self.boots: list[tuple[float, int]] = []
        self.ready_at: dict[int, float] = {}
        self.queue: dict[str, tuple[int, int]] = {}  # job id -> (GPUs, its entry's seq)
        self.order: list[tuple[float, int, str]] = []  # (submit, seq, job id), lazy
        self.seq = 0
        self.predicted: dict[str, float] = {}
        self.running: dict[str, tuple[float, int, tuple[int, ...]]] = {}
        self.running_pred: list[tuple[float, str]] = []
        self.core: JobAwareCore | None = None
        self.t_last = -math.inf
        self.dirty = False
        self.last_emit = -math.inf
        self.emitted_nodes = 0
        self.decisions: list[Decision] = []
        self.version = 0
        """Bumped by every change but the clock (``t_last``): a checkpoint is re-encoded
        only when it moved (:mod:`gpuhint.cores.pipeline.cluster_load`)."""

    # -- the view ------------------------------------------------------------------
    def node_counts(self) -> dict[str, int]:
        """Nodes by power state: ``off``, ``booting``, ``on``."""
        off = sum(1 for s in self.state if s == OFF)
        booting = sum(1 for s in self.state if s == BOOT)
        return {
            "off": off,
            "booting": booting,
            "on": len(self.state) - off - booting,
        }

    def head_gpus(self) -> int | None:
        order, queue = self.order, self.queue
        while order and queue.get(order[0][2], (0, -1))[1] != order[0][1]:
            heapq.heappop(order)
        return queue[order[0][2]][0] if order else None

    def enqueue(self, job: str, submit: float, gpus: int) -> None:
        self.seq += 1
        self.queue[job] = (gpus, self.seq)
        heapq.heappush(self.order, (submit, self.seq, job))
        if len(self.order) > 2 * len(self.queue) + 64:  # started jobs' entries: drop them
            self.order = [e for e in self.order if self.queue.get(e[2], (0, -1))[1] == e[1]]
            heapq.heapify(self.order)

    def freeing_gpus(self, until: float) -> int:
        k = bisect.bisect_right(self.running_pred, (until, "\U0010ffff"))
        return sum(self.running[j][1] for _, j in self.running_pred[:k])

    # -- nodes -------------------------------------------------------------------
    def node(self, name: str, t: float, idle: bool) -> int:
        i = self.index.get(name)
        if i is not None:
            return i
        i = len(self.names)
        self.names.append(name)
        self.index[name] = i
        self.state.append(ON)
        self.jobs_on.append(0)
        self.status_busy.append(False)
        self.cycles.append(0)
        self.advised_at.append(_NAN)
        if idle:
            self._became_idle(i, t)
        return i

    def busy(self, i: int) -> bool:
        return self.jobs_on[i] > 0 or self.status_busy[i]

    def _became_idle(self, i: int, t: float) -> None:
        self.idle[i] = t
        if self.core is not None:
            self.core.on_idle(i, t)

    def refresh(self, i: int, t: float) -> None:
        """Re-file node ``i`` as idle or not after a change."""
        idle = self.state[i] == ON and not self.busy(i)
        if idle and i not in self.idle:
            self._became_idle(i, t)
        elif not idle and i in self.idle:
            del self.idle[i]

    def boot(self, i: int, t: float) -> None:
        self.state[i] = BOOT
        self.n_boot += 1
        self.advised_at[i] = _NAN
        ready = t + self.cfg.power.boot_s
        self.ready_at[i] = ready
        heapq.heappush(self.boots, (ready, i))

    def finish_boot(self, i: int, t: float) -> None:
        if self.state[i] != BOOT:
            return
        self.state[i] = ON
        self.n_boot -= 1
        self.ready_at.pop(i, None)
        self.refresh(i, t)

    def power_down(self, i: int, t: float) -> None:
        self.idle.pop(i, None)
        self.state[i] = OFF
        self.cycles[i] += 1
        self.advised_at[i] = t

    def wake(self, count: int, t: float) -> list[int]:
        """Boot up to ``count`` off nodes, fewest cycles first (as the simulator)."""
        off = [i for i, s in enumerate(self.state) if s == OFF]
        off.sort(key=lambda i: self.cycles[i])
        for i in off[:count]:
            self.boot(i, t)
        return off[:count]


@dataclass
class JobsCesStats:
    """What the job-aware engine decided since this process started (the worker's
    metrics; not checkpointed)."""

    decisions: int = 0
    """Decisions that changed a node's power state."""
    nodes_woken: int = 0
    nodes_powered_down: int = 0


class JobsCesEngine:
    """Per-cluster :class:`JobsCluster` + :class:`JobAwareCore`; writes advisories."""

    def __init__(self, store: HintStore | None, cfg: JobsCesConfig | None = None) -> None:
        self.store = store
        self.cfg = cfg or JobsCesConfig()
        self.clusters: dict[str, JobsCluster] = {}
        self.advisories_written = 0
        self.stats = JobsCesStats()

    def cluster(self, name: str) -> JobsCluster:
        c = self.clusters.get(name)
        if c is None:
            c = self.clusters[name] = JobsCluster(self.cfg)
        return c

    # -- input -------------------------------------------------------------------
    def on_message(self, msg: JobEvent | NodeStatus | PriorityHint) -> None:
        """Apply one message (decisions for earlier times are taken first)."""
        if isinstance(msg, PriorityHint):
            c = self.cluster(msg.cluster)
            if msg.job_id in c.queue:
                c.predicted[msg.job_id] = msg.predicted_duration_s
                c.version += 1
            return
        c = self.cluster(msg.cluster)
        t = max(msg.time, c.t_last)  # a late event counts at the current time
        self.advance(msg.cluster, c, t)
        if c.core is None:
            c.core = JobAwareCore(self.cfg.policy, self.cfg.power, self.cfg.gpus_per_node, t)
            for i, since in c.idle.items():
                c.core.on_idle(i, since)
        if isinstance(msg, NodeStatus):
            changed = _node_status(c, msg, t, self.cfg.confirm_s)
        else:
            changed = _job_event(c, msg, t, self.cfg.default_duration_s)
        if changed or c.core.next_t <= t:
            c.dirty = True
            c.version += 1

    def advance(self, name: str, c: JobsCluster, t: float) -> None:
        """Take the decisions due before ``t``: the last event time's, then each boot end
        and tick before ``t`` (the simulator's loop); boots ending at ``t`` are applied."""
        if t <= c.t_last:
            return
        if c.dirty:
            self._step(name, c, c.t_last)
        while c.core is not None:
            tau = min(c.core.next_t, c.boots[0][0] if c.boots else math.inf)
            if tau >= t:
                break
            self._finish_boots(c, tau)
            self._step(name, c, max(tau, c.t_last))
        if self._finish_boots(c, t):
            c.dirty = True
            c.version += 1
        c.t_last = t

    def flush(self, cluster: str) -> list[Decision]:
        """Take the decision due at the last event time (end of a replay); the decisions."""
        c = self.cluster(cluster)
        if c.dirty:
            self._step(cluster, c, c.t_last)
        return c.decisions

    def _finish_boots(self, c: JobsCluster, t: float) -> bool:
        done = False
        while c.boots and c.boots[0][0] <= t:
            ready, i = heapq.heappop(c.boots)
            if c.ready_at.get(i) == ready:
                c.finish_boot(i, t)
                done = True
                c.version += 1
        return done

    def _step(self, name: str, c: JobsCluster, t: float) -> None:
        c.dirty = False
        c.version += 1
        assert c.core is not None
        choice = c.core.decide(t, c)
        woke = [c.names[i] for i in c.wake(choice.wake, t)] if choice.wake else []
        for i in choice.down:
            c.power_down(i, t)
        down = [c.names[i] for i in choice.down]
        if woke or down:
            self.stats.decisions += 1
            self.stats.nodes_woken += len(woke)
            self.stats.nodes_powered_down += len(down)
        if (woke or down) and self.cfg.keep_decisions:
            c.decisions.append((t, tuple(woke), tuple(down)))
            del c.decisions[: -self.cfg.keep_decisions]
        due = t - c.last_emit >= self.cfg.heartbeat_s or len(c.names) != c.emitted_nodes
        if self.store is not None and (woke or down or due):
            c.last_emit, c.emitted_nodes = t, len(c.names)
            for a in self.advisories(name, c, t, choice, woke, down):
                self.store.put_advisory(a)
                self.advisories_written += 1

    # -- output ------------------------------------------------------------------
    def advisories(
        self,
        name: str,
        c: JobsCluster,
        t: float,
        choice: PowerChoice,
        woke: list[str],
        down: list[str],
    ) -> list[PowerAdvisory]:
        """The cluster advisory and one per node named in the change."""
        assert c.core is not None
        core = c.core
        off = tuple(sorted(c.names[i] for i, s in enumerate(c.state) if s == OFF))
        busy = sum(1 for i in range(len(c.names)) if c.state[i] != OFF and c.busy(i))
        total = len(c.names)
        if woke:
            action, named = PowerAction.WAKE, tuple(woke)
            why = f"wake {len(woke)}: head of the queue + reserve need more than idle + booting"
        elif down:
            action, named = PowerAction.POWER_DOWN, tuple(down)
            why = f"power down {len(down)} idle > {core.tau:g} s, beyond the reserve"
        else:
            action, named, why = PowerAction.KEEP, (), "keep"
        reason = f"jobs: {why} (reserve {core.reserve()} nodes, q={self.cfg.policy.quantile:g})"
        kwh = (self.cfg.watts_per_node * 3600.0) / 3.6e6  # one node off for an hour
        common = {
            "cluster": name,
            "time": t,
            "action": action,
            "reason": reason,
            "used_nodes": float(busy),
            "active_nodes": total - len(off),
            "total_nodes": total,
            "horizon_s": 3600.0,
        }
        out = [
            PowerAdvisory(
                count=len(named),
                nodes=named,
                off_nodes=off,
                est_energy_saved_kwh=kwh * len(off),
                **common,  # type: ignore[arg-type]
            )
        ]
        for n in named:
            out.append(
                PowerAdvisory(
                    node=n,
                    count=1,
                    nodes=(n,),
                    est_energy_saved_kwh=kwh if action is PowerAction.POWER_DOWN else 0.0,
                    **common,  # type: ignore[arg-type]
                )
            )
        return out


def _job_event(c: JobsCluster, ev: JobEvent, t: float, default_s: float) -> bool:
    """Apply a job event to ``c``; whether anything changed."""
    core = c.core
    assert core is not None
    if ev.phase is JobPhase.SUBMITTED:
        if ev.num_gpus <= 0 or ev.job_id in c.queue or ev.job_id in c.running:
            return False
        c.enqueue(ev.job_id, ev.submit_time, ev.num_gpus)
        core.arrive(ev.submit_time, ev.num_gpus)
        return True
    if ev.phase is JobPhase.STARTED:
        if ev.job_id in c.running:
            return False
        c.queue.pop(ev.job_id, None)
        nodes = tuple(c.node(n, t, idle=False) for n in ev.nodes)
        start = ev.start_time if ev.start_time is not None else t
        for i in nodes:
            core.on_alloc(i, t)
            if c.state[i] == OFF:  # the scheduler woke it for this job
                c.boot(i, t)
            if c.state[i] == BOOT:
                start = max(start, c.ready_at[i])
            c.jobs_on[i] += 1
            c.refresh(i, t)
        pred = c.predicted.pop(ev.job_id, default_s)
        end = start + pred
        c.running[ev.job_id] = (end, max(ev.num_gpus, 0), nodes)
        bisect.insort(c.running_pred, (end, ev.job_id))
        return True
    c.queue.pop(ev.job_id, None)
    c.predicted.pop(ev.job_id, None)
    run = c.running.pop(ev.job_id, None)
    if run is None:
        return True
    end, _, nodes = run
    del c.running_pred[bisect.bisect_left(c.running_pred, (end, ev.job_id))]
    for i in nodes:
        c.jobs_on[i] = max(0, c.jobs_on[i] - 1)
        c.refresh(i, t)
    return True


def _node_status(c: JobsCluster, ns: NodeStatus, t: float, confirm_s: float) -> bool:
    """Apply a NodeStatus; whether the node's power or use changed."""
    new = ns.node not in c.index
    busy = ns.busy_gpus > 0 or bool(ns.running_jobs)
    i = c.node(ns.node, t, idle=ns.powered_on and not busy)
    before = (c.state[i], c.status_busy[i])
    c.status_busy[i] = busy
    s = c.state[i]
    if not ns.powered_on:
        if s == BOOT and ns.time < c.ready_at[i] + confirm_s:
            return new  # a wake still being applied (it fails only after a boot + confirm_s)
        c.advised_at[i] = _NAN  # confirmed (or powered down by someone else)
        if s == BOOT:
            c.n_boot -= 1
            c.ready_at.pop(i, None)
        c.state[i] = OFF
        c.idle.pop(i, None)
    elif s == OFF:
        adv = c.advised_at[i]
        if adv == adv and ns.time - adv < confirm_s:
            return new  # our power-down is still being applied
        if adv == adv and c.core is not None:
            c.core.undo_down(i)  # it stayed on: that cycle did not happen
            c.cycles[i] -= 1
        c.advised_at[i] = _NAN
        c.state[i] = ON
    elif s == BOOT:
        c.finish_boot(i, t)
    c.refresh(i, t)
    return new or (c.state[i], c.status_busy[i]) != before
