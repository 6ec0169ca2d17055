"""The CES tracker: NodeStatus and job events in, one :class:`SlotObservation` per closed
slot out (the peak of nodes running work). No I/O of its own.

:class:`~gpuhint.cores.ces.CesEngine` turns each observation into power advisories;
:mod:`gpuhint.cores.ces` re-exports everything here. The tracker's per-cluster state
(``_Tracked``) is checkpointed as a pickle under the name ``gpuhint.cores.ces._Tracked``.
"""

from __future__ import annotations

import heapq
import math
import pickle
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuhint.wire import pickles
from gpuhint.wire.contract import JobEvent, JobPhase, NodeStatus


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


# -- deriving observations from node status and job events -------------------------------

_NONE = math.nan
"""Column value for "no time" (``idle_since`` / ``last_seen`` unknown)."""

_OFF, _ALWAYS, _FRESH = 0, 1, 2
"""A node's used-count category: not used; used whatever the time (it runs a placed
job, or never sent a NodeStatus); used while its last NodeStatus is fresh."""


FORGET_AFTER_S = 7 * 86400.0
"""A node with no job that has not reported for a week left the cluster (removed or
renamed): the tracker forgets it (no longer counted, named to wake, nor checkpointed)."""


_COLUMNS = (
    "num_gpus",
    "busy_gpus",
    "status_jobs",
    "powered_on",
    "healthy",
    "idle_since",
    "last_seen",
)
"""The per-node columns (node number -> value) a checkpoint holds."""


def _col(code: str, n: int = 0, v: float = 0) -> array[Any]:
    return array(code, [v]) * n if n else array(code)


class _Node:
    """A node of a version-1 checkpoint (one object per node): only read, to migrate it."""

    __module__ = "gpuhint.cores.ces"  # the path checkpoints name it by

    num_gpus: int
    busy_gpus: int
    powered_on: bool
    healthy: bool
    jobs: set[str]
    status_jobs: int
    idle_since: float | None
    last_seen: float | None


class _Tracked:
    """One cluster's nodes as columns (node number -> value) and its slot clock.

    Persistent (pickled as the columns' buffers, the name list as one cached blob):
    ``names``/``index``, the per-node columns, ``jobs`` (node number -> job
    ids placed on it, only non-empty sets), ``slot`` and ``peak_used``. Derived (rebuilt
    on unpickling, not saved): ``placed`` (job id -> its node numbers, the inverse of
    ``jobs``: a finish frees every node its job was placed on) and the used-node
    counters. Used nodes whose count depends on the time (``_FRESH``: used per their
    NodeStatus, no placed job) sit in two lazy heaps split at the last query time
    ``T``: ``above`` (fresh at ``T``: counted, min-heap of a key <= their ``last_seen``)
    and ``below`` (stale at ``T``, max-heap of their exact ``last_seen``). A query at
    another time moves only the nodes that cross it, so a NodeStatus costs O(1)
    amortized (plus a heap push when a node joins or goes back in time) whatever the
    cluster's size.
    """

    __module__ = "gpuhint.cores.ces"  # the path checkpoints (pickles) name it by

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.num_gpus = _col("i")
        self.busy_gpus = _col("i")
        self.status_jobs = _col("i")
        self.powered_on = _col("b")
        self.healthy = _col("b")
        self.idle_since = _col("d")
        self.last_seen = _col("d")
        self.jobs: dict[int, set[str]] = {}
        self.slot: int | None = None
        self.peak_used = 0
        self._names_blob: tuple[int, bytes] | None = None
        self._derive()

    # -- persistence: columns only; the counters are rebuilt ------------------------

    _SAVED = ("names", *_COLUMNS, "jobs", "slot", "peak_used")

    def __getstate__(self) -> dict[str, Any]:
        state = {k: getattr(self, k) for k in self._SAVED}
        # names get appended (or dropped, resetting the cache): pickle again when it grew
        cached: tuple[int, bytes] | None = self.__dict__.get("_names_blob")
        if cached is None or cached[0] != len(self.names):
            cached = self._names_blob = (len(self.names), pickle.dumps(self.names, protocol=5))
        state["names"] = cached[1]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "nodes" in state:  # a checkpoint of the per-node-object tracker (v1)
            self.__init__()  # type: ignore[misc]
            for name, n in state["nodes"].items():
                i = self.add(name)
                self.num_gpus[i], self.busy_gpus[i] = n.num_gpus, n.busy_gpus
                self.status_jobs[i] = n.status_jobs
                self.powered_on[i], self.healthy[i] = n.powered_on, n.healthy
                self.idle_since[i] = _NONE if n.idle_since is None else n.idle_since
                self.last_seen[i] = _NONE if n.last_seen is None else n.last_seen
                if n.jobs:
                    self.jobs[i] = set(n.jobs)
            self.slot, self.peak_used = state["slot"], state["peak_used"]
        else:
            self.__dict__.update(state)
            self.names = pickles.loads(state["names"])
            self.index = {name: i for i, name in enumerate(self.names)}
        self._derive()

    def _derive(self) -> None:
        n = len(self.names)
        self.placed: dict[str, set[int]] = {}
        for i, ids in self.jobs.items():
            for job in ids:
                self.placed.setdefault(job, set()).add(i)
        self.cat = _col("b", n)
        self.side = _col("b", n)  # _FRESH nodes: 1 in ``above``, 0 in ``below``
        self.token = _col("q", n)  # the valid heap entry's token
        self.key = _col("d", n)  # the key of its ``above`` entry
        self.above: list[tuple[float, int, int]] = []
        self.below: list[tuple[float, int, int]] = []
        self.always = 0
        self.fresh = 0  # _FRESH nodes
        self.above_n = 0  # of which in ``above``
        self.tokens = 0
        for i in range(n):
            self.settle(i)

    # -- nodes ------------------------------------------------------------------------

    def gone(self, time: float, after_s: float) -> list[int]:
        """Nodes with no placed job not heard of for over ``after_s`` at ``time``: no
        report (or, never reported, freed of their last job) since ``time - after_s``."""
        out = []
        for i in range(len(self.names)):
            seen = self.last_seen[i]
            if seen != seen:  # NaN: known from placements only, since its last job ended
                seen = self.idle_since[i]
            if i not in self.jobs and time - seen > after_s:  # NaN compares False: kept
                out.append(i)
        return out

    def forget(self, gone: list[int]) -> None:
        """Drop nodes ``gone`` (no job placed on them): columns rebuilt, counters too."""
        drop = set(gone)
        keep = [i for i in range(len(self.names)) if i not in drop]
        renum = {old: new for new, old in enumerate(keep)}
        self.names = [self.names[i] for i in keep]
        self.index = {name: i for i, name in enumerate(self.names)}
        for attr in _COLUMNS:
            col = getattr(self, attr)
            setattr(self, attr, array(col.typecode, [col[i] for i in keep]))
        self.jobs = {renum[i]: ids for i, ids in self.jobs.items()}
        self._names_blob = None  # the list changed, not only grew
        self._derive()

    def add(self, name: str) -> int:
        i = len(self.names)
        self.names.append(name)
        self.index[name] = i
        for col in (self.num_gpus, self.busy_gpus, self.status_jobs):
            col.append(0)
        self.powered_on.append(1)
        self.healthy.append(1)
        self.idle_since.append(_NONE)
        self.last_seen.append(_NONE)
        for c in (self.cat, self.side, self.token):
            c.append(0)
        self.key.append(0.0)
        return i

    def used(self, i: int) -> bool:
        """Runs work per its status or a placed job (powered on); the time plays no part."""
        return bool(self.powered_on[i]) and (
            self.busy_gpus[i] > 0 or i in self.jobs or self.status_jobs[i] > 0
        )

    def on_at(self, i: int, time: float, stale_after_s: float) -> bool:
        """Powered on at ``time``: it says so and reported recently (or runs a job)."""
        if not self.powered_on[i]:
            return False
        seen = self.last_seen[i]
        if i in self.jobs or seen != seen:  # NaN: never reported
            return True
        return time - seen <= stale_after_s

    def settle(self, i: int) -> None:
        """Re-file node ``i`` in the used counters after any change to it."""
        old = self.cat[i]
        if not self.used(i):
            new = _OFF
        elif i in self.jobs or self.last_seen[i] != self.last_seen[i]:
            new = _ALWAYS
        else:
            new = _FRESH
        if old == _FRESH and new == _FRESH and self.side[i] and self.last_seen[i] >= self.key[i]:
            return  # still counted; its entry's key is a lower bound: moved on lazily
        if old == _ALWAYS:
            self.always -= 1
        elif old == _FRESH:
            self.fresh -= 1
            if self.side[i]:
                self.above_n -= 1
        self.cat[i] = new
        if new == _ALWAYS:
            self.always += 1
        elif new == _FRESH:
            self.tokens += 1
            seen = self.last_seen[i]
            self.token[i], self.side[i], self.key[i] = self.tokens, 1, seen
            heapq.heappush(self.above, (seen, self.tokens, i))
            self.fresh += 1
            self.above_n += 1

    def count_used(self, time: float, stale_after_s: float) -> int:
        """Nodes used and powered on at ``time`` (amortized O(nodes crossing ``time``))."""
        above, below, seen, cat, token, side = (
            self.above,
            self.below,
            self.last_seen,
            self.cat,
            self.token,
            self.side,
        )
        while above and time - above[0][0] > stale_after_s:
            _, tok, i = heapq.heappop(above)
            if cat[i] != _FRESH or token[i] != tok or not side[i]:
                continue  # superseded
            real = seen[i]
            if time - real <= stale_after_s:  # reported since: re-key, still counted
                self.key[i] = real
                heapq.heappush(above, (real, tok, i))
            else:
                side[i] = 0
                self.above_n -= 1
                heapq.heappush(below, (-real, tok, i))
        while below and time + below[0][0] <= stale_after_s:
            neg, tok, i = heapq.heappop(below)
            if cat[i] != _FRESH or token[i] != tok or side[i]:
                continue
            side[i] = 1  # an earlier time (a late event): fresh again
            self.above_n += 1
            self.key[i] = -neg
            heapq.heappush(above, (-neg, tok, i))
        # superseded entries: drop them once they outnumber the live ones
        if len(above) > 2 * self.above_n + 1024:
            self.above = [
                e for e in above if cat[e[2]] == _FRESH and token[e[2]] == e[1] and side[e[2]]
            ]
            heapq.heapify(self.above)
        if len(below) > 2 * (self.fresh - self.above_n) + 1024:
            self.below = [
                e for e in below if cat[e[2]] == _FRESH and token[e[2]] == e[1] and not side[e[2]]
            ]
            heapq.heapify(self.below)
        return self.always + self.above_n


class ClusterLoadTracker:
    """Derives used/idle/powered-on nodes per cluster and closes 10-minute slots.

    A node is *used* when its latest NodeStatus has ``busy_gpus > 0`` (or running jobs)
    or a job started on it (JobEvent ``started`` with ``nodes``) has not finished (its
    ``finished`` frees every node it was placed on, whichever nodes that event lists).
    Each event's time drives the slot clock: when an event falls in a later slot, the
    slots before it close and come back as :class:`SlotObservation` (peak used over the
    slot), ready for :meth:`CesEngine.observe`. Events must come roughly in time order;
    a late event is applied to the current slot, except a NodeStatus older than the
    node's last one applied (out of date: ignored). A node is *powered on* while it says so
    and has reported within ``stale_after_s`` (default 2 minutes): a node that was
    powered down falls silent, and the policy then sees it off and can name it to wake.
    One silent for ``forget_after_s`` (a week; None: never) with no job placed on it left
    the cluster (removed, renamed): it is forgotten at the next slot's start.

    Cost: a NodeStatus or a job placement updates the node's columns and the used-node
    counters in O(1) amortized (silence is expired lazily, see :class:`_Tracked`); only
    closing a slot walks the nodes (it names the idle and the off ones).

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
        self,
        slot_s: int = 600,
        max_gap_slots: int = 144,
        stale_after_s: float | None = None,
        forget_after_s: float | None = FORGET_AFTER_S,
    ) -> None:
        self.slot_s = slot_s
        self.max_gap_slots = max_gap_slots
        # Agents report every 10 s by default: two minutes of silence means powered off.
        self.stale_after_s = float(stale_after_s if stale_after_s is not None else min(slot_s, 120))
        if forget_after_s is not None and not forget_after_s >= self.stale_after_s:
            raise ValueError("forget_after_s must be >= stale_after_s (or None: never)")
        self.forget_after_s = forget_after_s
        self.clusters: dict[str, _Tracked] = {}

    def _tick(self, cluster: str, time: float) -> tuple[_Tracked, list[SlotObservation]]:
        c = self.clusters.get(cluster)
        if c is None:
            c = self.clusters[cluster] = _Tracked()
        k = math.floor(time / self.slot_s)
        out: list[SlotObservation] = []
        if c.slot is None:
            c.slot = k
            c.peak_used = c.count_used(time, self.stale_after_s)
        elif k > c.slot:
            first = max(c.slot, k - self.max_gap_slots)
            for s in range(first, k):
                out.append(self._observation(cluster, c, s))
                c.peak_used = c.count_used(time, self.stale_after_s)
            c.slot = k
            if self.forget_after_s is not None:
                gone = c.gone(k * self.slot_s, self.forget_after_s)
                if gone:
                    c.forget(gone)
        return c, out

    def _observation(self, cluster: str, c: _Tracked, slot: int) -> SlotObservation:
        """The slot's observation: one walk over the nodes, at the slot's end."""
        end = (slot + 1) * self.slot_s
        start = slot * self.slot_s
        stale = self.stale_after_s
        names, healthy, idle_since = c.names, c.healthy, c.idle_since
        idle: list[tuple[str, float]] = []
        off: list[str] = []
        unhealthy: list[str] = []
        active = used_end = busy_gpus = 0
        for i, name in enumerate(names):
            on = c.on_at(i, end, stale)
            used = c.used(i)
            if on:
                active += 1
                busy_gpus += c.busy_gpus[i]
                if used:
                    used_end += 1
                elif healthy[i]:
                    since = idle_since[i]
                    idle.append((name, start if since != since else since))
            elif healthy[i]:
                off.append(name)
            if not healthy[i]:
                unhealthy.append(name)
        idle.sort(key=lambda p: (p[1], p[0]))
        return SlotObservation(
            time=start,
            used=max(c.peak_used, used_end),
            total=len(names),
            active=active,
            cluster=cluster,
            idle_nodes=tuple(idle),
            off_nodes=tuple(sorted(off)),
            busy_gpus=busy_gpus,
            total_gpus=sum(c.num_gpus),
            unhealthy_nodes=tuple(sorted(unhealthy)),
        )

    def _after_change(self, c: _Tracked, i: int, was_used: bool, time: float) -> None:
        used = c.used(i)
        if was_used and not used:
            c.idle_since[i] = time
        elif used:
            c.idle_since[i] = _NONE
        elif c.idle_since[i] != c.idle_since[i]:
            c.idle_since[i] = time
        c.settle(i)
        c.peak_used = max(c.peak_used, c.count_used(time, self.stale_after_s))

    def on_node_status(self, ns: NodeStatus) -> list[SlotObservation]:
        """Apply a NodeStatus; return the slots it closed (oldest first)."""
        c, out = self._tick(ns.cluster, ns.time)
        i = c.index.get(ns.node)
        if i is None:
            i = c.add(ns.node)
        elif ns.time < c.last_seen[i]:  # older than the report applied: out of date
            return out
        was = c.used(i)
        c.num_gpus[i] = ns.num_gpus
        c.busy_gpus[i] = ns.busy_gpus
        c.powered_on[i] = ns.powered_on
        c.healthy[i] = ns.healthy
        c.status_jobs[i] = len(ns.running_jobs)
        c.last_seen[i] = ns.time
        self._after_change(c, i, was, ns.time)
        return out

    def on_job_event(self, ev: JobEvent) -> list[SlotObservation]:
        """Apply a job start (placed on ``ev.nodes``) or finish (frees every node the job
        was placed on, listed in ``ev.nodes`` or not); return the slots it closed."""
        c, out = self._tick(ev.cluster, ev.time)
        if ev.phase is JobPhase.SUBMITTED:
            return out
        nodes = [i if (i := c.index.get(name)) is not None else c.add(name) for name in ev.nodes]
        if ev.phase is JobPhase.STARTED:
            if nodes:
                c.placed.setdefault(ev.job_id, set()).update(nodes)
        else:
            placed = c.placed.pop(ev.job_id, set())
            nodes += sorted(placed.difference(nodes))
        for i in nodes:
            was = c.used(i)
            if ev.phase is JobPhase.STARTED:
                c.jobs.setdefault(i, set()).add(ev.job_id)
            else:
                jobs = c.jobs.get(i)
                if jobs is not None:
                    jobs.discard(ev.job_id)
                    if not jobs:
                        del c.jobs[i]
            self._after_change(c, i, was, ev.time)
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
