"""The CES load tracker as it was before issue 10 (O(nodes) per message), kept verbatim.

It is the reference that ``tests/cores/test_ces_tracker.py`` compares the incremental
:class:`gpuhint.cores.ces.ClusterLoadTracker` against on random streams, and the "old"
side of ``bench/bench_ces.py --tracker``. Do not optimise it: its value is being the
plain algorithm (every NodeStatus recounts all nodes; a checkpoint pickles every node).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuhint.cores.ces import SlotObservation
from gpuhint.wire.contract import JobEvent, JobPhase, NodeStatus


@dataclass
class _RefNode:
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
class _RefTracked:
    nodes: dict[str, _RefNode] = field(default_factory=dict)
    slot: int | None = None
    peak_used: int = 0


class ReferenceTracker:
    """Derives used/idle/powered-on nodes per cluster and closes 10-minute slots.

    A node is *used* when its latest NodeStatus has ``busy_gpus > 0`` (or running jobs)
    or a job started on it (JobEvent ``started`` with ``nodes``) has not finished.
    Each event's time drives the slot clock: when an event falls in a later slot, the
    slots before it close and come back as :class:`SlotObservation` (peak used over the
    slot), ready for :meth:`CesEngine.observe`. Events must come roughly in time order;
    a late event is applied to the current slot. A node is *powered on* while it says so
    and has reported within ``stale_after_s`` (default 2 minutes): a node that was
    powered down falls silent, and the policy then sees it off and can name it to wake.

    >>> t = ReferenceTracker(slot_s=600, stale_after_s=600)
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
        self.clusters: dict[str, _RefTracked] = {}

    def _tick(self, cluster: str, time: float) -> tuple[_RefTracked, list[SlotObservation]]:
        c = self.clusters.setdefault(cluster, _RefTracked())
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

    def _used(self, c: _RefTracked, time: float) -> int:
        return sum(1 for n in c.nodes.values() if n.used and n.on_at(time, self.stale_after_s))

    def _observation(self, cluster: str, c: _RefTracked, slot: int) -> SlotObservation:
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

    def _after_change(self, c: _RefTracked, n: _RefNode, was_used: bool, time: float) -> None:
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
        n = c.nodes.setdefault(ns.node, _RefNode())
        if n.last_seen is not None and ns.time < n.last_seen:
            return out  # older than the report applied (the tracker does the same)
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
            n = c.nodes.setdefault(name, _RefNode())
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
