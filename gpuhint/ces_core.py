"""The CES core: per-slot cluster observations in, power advisories out. No I/O of its own.

The Faust worker and ``gpuhint evaluate ces`` both drive :class:`CesEngine`; they differ
only in where observations come from (a :class:`ClusterLoadTracker` fed by NodeStatus
and job events, or a recorded load series) and which store they pass.

Timing: ``observe`` is called at the *end* of slot ``t`` with the slot's peak used
nodes. The forecaster learns from it, the policy decides the powered-on count for slot
``t+1``, and the engine writes a cluster :class:`PowerAdvisory` (``node=None``), one
per node named in a power-down or a wake, and a :class:`ClusterLoad`.

>>> from gpuhint.store import InMemoryStore
>>> store = InMemoryStore()
>>> eng = CesEngine(store)
>>> step = eng.observe(SlotObservation(time=0.0, used=3, total=10,
...                    idle_nodes=(("n9", 0.0), ("n8", -50.0))))
>>> _ = store.flush(); store.get_advisory("default").action.value
'keep'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuhint.contract import (
    ClusterLoad,
    JobEvent,
    JobPhase,
    NodeStatus,
    PowerAction,
    PowerAdvisory,
)
from gpuhint.store import HintStore
from models.forecast import Forecast, Forecaster, LoadForecaster
from models.power_policy import Decision, PowerPolicy, PowerPolicyConfig

ForecasterFactory = Callable[[], Forecaster]


@dataclass(frozen=True)
class SlotObservation:
    """What one cluster looked like over one slot.

    ``time`` is the slot's start (UNIX s); ``used`` the peak nodes running work in it;
    ``active`` the nodes powered on as the cluster reports it (None: assume the last
    advice was followed); ``idle_nodes`` ``(name, idle_since)`` of powered-on idle
    nodes; ``off_nodes`` names of powered-off nodes that could be woken.
    """

    time: float
    used: int
    total: int
    active: int | None = None
    cluster: str = "default"
    idle_nodes: tuple[tuple[str, float], ...] = ()
    off_nodes: tuple[str, ...] = ()
    busy_gpus: int = 0
    total_gpus: int = 0
    unhealthy_nodes: tuple[str, ...] = ()


@dataclass
class CesStep:
    """The outcome of one slot: the decision, its forecast and the messages written."""

    decision: Decision
    forecast: Forecast
    advisories: list[PowerAdvisory]
    load: ClusterLoad


@dataclass
class _Cluster:
    forecaster: Forecaster
    policy: PowerPolicy
    slot: int = 0


@dataclass
class CesStats:
    slots: int = 0
    power_downs: int = 0
    wakes: int = 0
    shortfall_slots: int = 0
    advisories_written: int = 0


class CesEngine:
    """Drives a forecaster and the power policy per cluster and writes advisories."""

    def __init__(
        self,
        store: HintStore | None = None,
        config: PowerPolicyConfig | None = None,
        forecaster_factory: ForecasterFactory | None = None,
        emit_messages: bool = True,
    ) -> None:
        self.store = store
        self.config = config or PowerPolicyConfig()
        self.forecaster_factory: ForecasterFactory = forecaster_factory or (
            lambda: LoadForecaster(slot_s=self.config.slot_s)
        )
        self.emit_messages = emit_messages or store is not None
        self.clusters: dict[str, _Cluster] = {}
        self.stats = CesStats()

    def _cluster(self, name: str, total: int) -> _Cluster:
        c = self.clusters.get(name)
        if c is None:
            c = _Cluster(self.forecaster_factory(), PowerPolicy(self.config, total))
            self.clusters[name] = c
        return c

    def observe(self, obs: SlotObservation) -> CesStep:
        """Process the slot that just closed; return the decision for the next slot."""
        c = self._cluster(obs.cluster, obs.total)
        if obs.active is not None:
            c.policy.sync_active(obs.active)
        fc = c.forecaster.update(obs.time, obs.used, obs.total)
        d = c.policy.step(c.slot, obs.used, obs.total, fc)
        c.slot += 1
        s = self.stats
        s.slots += 1
        if d.shortfall:
            s.shortfall_slots += 1
        if d.changed:
            if d.action == "wake":
                s.wakes += 1
            else:
                s.power_downs += 1
        advisories: list[PowerAdvisory] = []
        load = _EMPTY_LOAD
        if self.emit_messages:
            advisories = self.advisories(obs, d, fc)
            load = ClusterLoad(
                cluster=obs.cluster,
                time=obs.time + self.config.slot_s,
                total_nodes=obs.total,
                active_nodes=d.previous,
                used_nodes=obs.used,
                busy_gpus=obs.busy_gpus,
                total_gpus=obs.total_gpus,
                idle_nodes=tuple(n for n, _ in obs.idle_nodes),
                unhealthy_nodes=obs.unhealthy_nodes,
            )
            if self.store is not None:
                for a in advisories:
                    self.store.put_advisory(a)
                self.store.put_load(load)
                s.advisories_written += len(advisories)
        return CesStep(d, fc, advisories, load)

    def energy_kwh(self, nodes: float, seconds: float) -> float:
        return max(0.0, nodes) * self.config.watts_per_node * seconds / 3.6e6

    def advisories(self, obs: SlotObservation, d: Decision, fc: Forecast) -> list[PowerAdvisory]:
        """The cluster summary and one advisory per node named in the change."""
        now = obs.time + self.config.slot_s  # the decision is taken at the slot's end
        action = PowerAction(d.action)
        names: tuple[str, ...] = ()
        if action is PowerAction.POWER_DOWN:
            # longest idle first; the cluster's list order breaks ties
            idle = sorted(enumerate(obs.idle_nodes), key=lambda p: (p[1][1], p[0]))
            names = tuple(n for _, (n, _) in idle[: d.count])
        elif action is PowerAction.WAKE:
            names = obs.off_nodes[: d.count]
        off_after = max(0, d.total - d.active)
        common = {
            "cluster": obs.cluster,
            "time": now,
            "used_nodes": float(obs.used),
            "total_nodes": d.total,
            "forecast_nodes": fc.point,
            "forecast_upper_nodes": fc.upper,
            "horizon_s": fc.horizon_s,
        }
        out = [
            PowerAdvisory(
                action=action,
                count=d.count,
                nodes=names,
                reason=d.reason + f" [assumes {self.config.watts_per_node:g} W per idle node]",
                active_nodes=d.active,
                est_energy_saved_kwh=self.energy_kwh(off_after, fc.horizon_s),
                **common,  # type: ignore[arg-type]
            )
        ]
        for n in names:
            out.append(
                PowerAdvisory(
                    node=n,
                    action=action,
                    count=1,
                    nodes=(n,),
                    reason=d.reason,
                    active_nodes=d.active,
                    est_energy_saved_kwh=(
                        self.energy_kwh(1, fc.horizon_s)
                        if action is PowerAction.POWER_DOWN
                        else 0.0
                    ),
                    **common,  # type: ignore[arg-type]
                )
            )
        return out


_EMPTY_LOAD = ClusterLoad(time=0.0, total_nodes=0, active_nodes=0, used_nodes=0)


# -- deriving observations from node status and job events -------------------------------


@dataclass
class _Node:
    num_gpus: int = 0
    busy_gpus: int = 0
    powered_on: bool = True
    healthy: bool = True
    jobs: set[str] = field(default_factory=set)
    status_jobs: int = 0
    idle_since: float | None = None
    last_seen: float | None = None
    """Time of the node's latest NodeStatus (None: known only from job placements)."""

    @property
    def used(self) -> bool:
        return self.powered_on and (self.busy_gpus > 0 or bool(self.jobs) or self.status_jobs > 0)

    def on_at(self, time: float, stale_after_s: float) -> bool:
        """Powered on at ``time``: it says so and has reported recently (or runs a job).

        A node that was powered down stops reporting, so silence for ``stale_after_s``
        counts as off; that is what lets the policy see its own power-downs take effect
        and name nodes to wake.
        """
        if not self.powered_on:
            return False
        if self.jobs or self.last_seen is None:
            return True
        return time - self.last_seen <= stale_after_s


@dataclass
class _Tracked:
    nodes: dict[str, _Node] = field(default_factory=dict)
    slot: int | None = None
    peak_used: int = 0


class ClusterLoadTracker:
    """Derives used/idle/powered-on nodes per cluster and closes 10-minute slots.

    A node is *used* when its latest NodeStatus has ``busy_gpus > 0`` (or running jobs)
    or a job started on it (JobEvent ``started`` with ``nodes``) has not finished.
    Each event's time drives the slot clock: when an event falls in a later slot, the
    slots before it close and come back as :class:`SlotObservation` (peak used over the
    slot), ready for :meth:`CesEngine.observe`. Events must come roughly in time order;
    a late event is applied to the current slot. A node is *powered on* while it says so
    and has reported within ``stale_after_s`` (default 2 minutes): a node that was
    powered down falls silent, and the policy then sees it off and can name it to wake.

    >>> t = ClusterLoadTracker(slot_s=600, stale_after_s=600)
    >>> t.on_node_status(NodeStatus(node="a", time=0, num_gpus=8, busy_gpus=8))
    []
    >>> t.on_node_status(NodeStatus(node="b", time=10, num_gpus=8))
    []
    >>> [(o.used, o.active, o.total) for o in t.on_node_status(
    ...     NodeStatus(node="a", time=700, num_gpus=8))]
    [(1, 2, 2)]
    """

    def __init__(
        self, slot_s: int = 600, max_gap_slots: int = 144, stale_after_s: float | None = None
    ) -> None:
        self.slot_s = slot_s
        self.max_gap_slots = max_gap_slots
        # Agents report every 10 s by default: two minutes of silence means powered off.
        self.stale_after_s = float(stale_after_s if stale_after_s is not None else min(slot_s, 120))
        self.clusters: dict[str, _Tracked] = {}

    def _tick(self, cluster: str, time: float) -> tuple[_Tracked, list[SlotObservation]]:
        c = self.clusters.setdefault(cluster, _Tracked())
        k = math.floor(time / self.slot_s)
        out: list[SlotObservation] = []
        if c.slot is None:
            c.slot = k
            c.peak_used = self._used(c, time)
        elif k > c.slot:
            first = max(c.slot, k - self.max_gap_slots)
            for s in range(first, k):
                out.append(self._observation(cluster, c, s))
                c.peak_used = self._used(c, time)
            c.slot = k
        return c, out

    def _used(self, c: _Tracked, time: float) -> int:
        return sum(1 for n in c.nodes.values() if n.used and n.on_at(time, self.stale_after_s))

    def _observation(self, cluster: str, c: _Tracked, slot: int) -> SlotObservation:
        nodes = c.nodes
        end = (slot + 1) * self.slot_s
        on = {name: n.on_at(end, self.stale_after_s) for name, n in nodes.items()}
        idle = tuple(
            sorted(
                (
                    (name, n.idle_since if n.idle_since is not None else slot * self.slot_s)
                    for name, n in nodes.items()
                    if on[name] and n.healthy and not n.used
                ),
                key=lambda p: (p[1], p[0]),
            )
        )
        return SlotObservation(
            time=slot * self.slot_s,
            used=max(c.peak_used, self._used(c, end)),
            total=len(nodes),
            active=sum(on.values()),
            cluster=cluster,
            idle_nodes=idle,
            off_nodes=tuple(sorted(k for k, n in nodes.items() if not on[k] and n.healthy)),
            busy_gpus=sum(n.busy_gpus for k, n in nodes.items() if on[k]),
            total_gpus=sum(n.num_gpus for n in nodes.values()),
            unhealthy_nodes=tuple(sorted(k for k, n in nodes.items() if not n.healthy)),
        )

    def _after_change(self, c: _Tracked, n: _Node, was_used: bool, time: float) -> None:
        if was_used and not n.used:
            n.idle_since = time
        elif n.used:
            n.idle_since = None
        elif n.idle_since is None:
            n.idle_since = time
        c.peak_used = max(c.peak_used, self._used(c, time))

    def on_node_status(self, ns: NodeStatus) -> list[SlotObservation]:
        """Apply a NodeStatus; return the slots it closed (oldest first)."""
        c, out = self._tick(ns.cluster, ns.time)
        n = c.nodes.setdefault(ns.node, _Node())
        was = n.used
        n.num_gpus = ns.num_gpus
        n.busy_gpus = ns.busy_gpus
        n.powered_on = ns.powered_on
        n.healthy = ns.healthy
        n.status_jobs = len(ns.running_jobs)
        n.last_seen = ns.time
        self._after_change(c, n, was, ns.time)
        return out

    def on_job_event(self, ev: JobEvent) -> list[SlotObservation]:
        """Apply a job start/finish placed on ``ev.nodes``; return the slots it closed."""
        c, out = self._tick(ev.cluster, ev.time)
        if ev.phase is JobPhase.SUBMITTED or not ev.nodes:
            return out
        for name in ev.nodes:
            n = c.nodes.setdefault(name, _Node())
            was = n.used
            if ev.phase is JobPhase.STARTED:
                n.jobs.add(ev.job_id)
            else:
                n.jobs.discard(ev.job_id)
            self._after_change(c, n, was, ev.time)
        return out

    def tick(self, cluster: str, time: float) -> list[SlotObservation]:
        """Advance the clock without an event (e.g. a timer); return closed slots."""
        return self._tick(cluster, time)[1]


def observations_from_series(
    used: Sequence[int], total: Sequence[int], start: float, slot_s: int, cluster: str
) -> list[SlotObservation]:
    """Turn a recorded series into observations (``active`` left to the engine)."""
    return [
        SlotObservation(time=start + i * slot_s, used=u, total=t, cluster=cluster)
        for i, (u, t) in enumerate(zip(used, total, strict=True))
    ]
