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

Its own advice is assumed followed, and NodeStatus corrects that; resent and late job
events change nothing; GPUs per node come from NodeStatus (the cluster's state and how
each message changes it: :mod:`gpuhint.cores.ces_jobs_state`).

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

import heapq
import math
from dataclasses import dataclass

from gpuhint.cores.ces_jobs_state import (
    BOOT,
    OFF,
    ON,
    Decision,
    JobsCesConfig,
    JobsCluster,
    apply_job_event,
    apply_node_status,
)
from gpuhint.cores.sink import HintStore
from gpuhint.wire.contract import (
    JobEvent,
    NodeStatus,
    PowerAction,
    PowerAdvisory,
    PriorityHint,
)
from models.power_jobs import JobAwareConfig, JobAwareCore, PowerChoice

__all__ = [
    "BOOT",
    "OFF",
    "ON",
    "Decision",
    "JobAwareConfig",
    "JobsCesConfig",
    "JobsCesEngine",
    "JobsCesStats",
    "JobsCluster",
]


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
            c.core = JobAwareCore(self.cfg.policy, self.cfg.power, c.g, t)
            for i, since in c.idle.items():
                c.core.on_idle(i, since)
        if isinstance(msg, NodeStatus):
            changed = apply_node_status(c, msg, t, self.cfg.confirm_s)
        else:
            changed = apply_job_event(c, msg, t, self.cfg.default_duration_s)
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
        forget_s = self.cfg.forget_after_s
        if forget_s is not None and t - c.swept >= self.cfg.heartbeat_s:
            c.swept = t  # nodes gone silent: looked for once a heartbeat
            gone = c.gone(t, forget_s)
            if gone:
                c.forget(gone)
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
