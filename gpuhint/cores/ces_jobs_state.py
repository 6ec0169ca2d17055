"""What the job-aware CES engine believes about one cluster, and how messages change it.

:class:`JobsCluster` is the online twin of the power simulator's state (each node busy,
idle since when, booting or off; the queue in submit order; the running jobs with their
predicted ends), pure and picklable: the worker checkpoints it whole. :func:`apply_job_event`
and :func:`apply_node_status` apply one message; :mod:`gpuhint.cores.ces_jobs` decides.

The engine's own advice is assumed followed (a node advised down is off, a woken one
boots for ``PowerModel.boot_s``), and NodeStatus corrects that: a node advised down that
still reports powered on ``confirm_s`` later stayed on (its cycle is forgotten), also when
a job started on it meanwhile with no powered-off report between (the job overtook the
power-down); one that reports powered off is off, unless it was woken less than a boot +
``confirm_s`` ago (later, its wake failed: the next wakes prefer other nodes). The
scheduler's demand wakes show up as a job started on a node believed off (it boots).
GPUs per node: the most common ``num_gpus`` of the cluster's NodeStatus
(``JobsCesConfig.gpus_per_node`` until one is seen). A node believed on, with no job,
silent for ``JobsCesConfig.forget_after_s`` left the cluster: :meth:`JobsCluster.forget`.

A NodeStatus older than the node's last one applied changes nothing (a late copy, or one
redelivered after a crash). Events are idempotent: a resent or late ``submitted`` or
``started`` of a job recently finished (the cluster's last :data:`RECENT_FINISHED_MAX`
finished ids, checkpointed; a ``finished`` of a job never seen counts too), and a
repeated ``submitted`` or ``started`` of a job queued or running, change nothing (its
arrival is counted once).
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
from array import array
from dataclasses import dataclass, field

from gpuhint.cores.qssf_state import RECENT_FINISHED_MAX
from gpuhint.wire.contract import JobEvent, JobPhase, NodeStatus
from models.power_jobs import JobAwareConfig, JobAwareCore
from models.simulator.power import PowerModel

__all__ = [
    "BOOT",
    "OFF",
    "ON",
    "Decision",
    "JobsCesConfig",
    "JobsCluster",
    "apply_job_event",
    "apply_node_status",
]

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
    """GPUs per node until a NodeStatus says (then the most common ``num_gpus``)."""
    default_duration_s: float = 3600.0
    heartbeat_s: float = 600.0
    confirm_s: float = 300.0
    watts_per_node: float = 700.0
    keep_decisions: int = 0
    """Decisions kept in :attr:`JobsCluster.decisions` (tests, evaluation); 0: none."""
    forget_after_s: float | None = None
    """A node believed on, with no job, whose last NodeStatus is older than this left the
    cluster (removed, renamed): forgotten. None (here; the worker's is a week,
    :func:`gpuhint.cores.pipeline.cluster_load.make_jobs_config`): never, as the offline
    simulator, whose nodes report once. Nodes never reported are kept."""


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
        self.finished: dict[bytes, None] = {}  # recently finished jobs (id_key), oldest first
        self.woken: dict[int, float] = {}  # node -> its boot's end, until it reports on
        self.wake_failed: dict[int, float] = {}  # node -> when its last wake failed
        self.node_gpus: list[int] = []  # each node's GPUs (0: no NodeStatus yet)
        self.seen = array("d")  # each node's last NodeStatus applied, when (-inf: none)
        self.gpu_nodes: dict[int, int] = {}  # GPUs -> nodes with that many
        self.g = cfg.gpus_per_node
        self.swept = -math.inf  # when nodes gone silent were last looked for
        self.version = 0
        """Bumped by every change but the clock (``t_last``): a checkpoint is re-encoded
        only when it moved (:mod:`gpuhint.cores.pipeline.cluster_load`)."""

    def __getstate__(self) -> dict[str, object]:
        """The finished jobs' keys as one byte string (8 bytes a job, whatever its id)."""
        state = dict(self.__dict__)
        if "finished" in state:
            state["finished"] = b"".join(self.finished)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restore a pickle; one of before a field existed gets its default."""
        self.__dict__.update(state)
        d = self.__dict__
        d["finished"] = _finished_keys(d.get("finished", {}))
        d.setdefault("woken", {})
        d.setdefault("wake_failed", {})
        d.setdefault("node_gpus", [0] * len(self.names))
        d.setdefault("gpu_nodes", {})
        d.setdefault("g", self.cfg.gpus_per_node)
        d.setdefault("seen", array("d", [-math.inf]) * len(self.names))
        d.setdefault("swept", -math.inf)

    def has_finished(self, job: str) -> bool:
        """Whether ``job`` is one of the last finished jobs remembered."""
        return id_key(job) in self.finished

    def remember_finished(self, job: str) -> None:
        """Record a finished job id, forgetting the oldest beyond the cap."""
        self.finished[id_key(job)] = None
        while len(self.finished) > RECENT_FINISHED_MAX:
            del self.finished[next(iter(self.finished))]
        self.version += 1

    def set_gpus(self, i: int, gpus: int) -> None:
        """Node ``i`` has ``gpus`` GPUs; the policy's GPUs per node is the most common
        count (ties: the larger), from the next arrival on."""
        if gpus <= 0 or gpus == self.node_gpus[i]:
            return
        self._count_gpus(i, -1)
        self.node_gpus[i] = gpus
        self._count_gpus(i, 1)
        self._commonest_gpus()

    def _count_gpus(self, i: int, k: int) -> None:
        """Count node ``i`` in (``k`` 1) or out of (-1) the nodes by GPUs."""
        gpus = self.node_gpus[i]
        if gpus:
            n = self.gpu_nodes[gpus] = self.gpu_nodes.get(gpus, 0) + k
            if not n:
                del self.gpu_nodes[gpus]

    def _commonest_gpus(self) -> None:
        if self.gpu_nodes:
            self.g = max(self.gpu_nodes.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if self.core is not None:
            self.core.g = self.g

    def gone(self, t: float, after_s: float) -> list[int]:
        """Nodes believed on with no job whose last NodeStatus is over ``after_s`` old."""
        seen, state, jobs_on = self.seen, self.state, self.jobs_on
        return [
            i
            for i in range(len(self.names))
            if state[i] == ON and not jobs_on[i] and -math.inf < seen[i] < t - after_s
        ]

    def forget(self, gone: list[int]) -> None:
        """Drop nodes ``gone`` (on, no job): every node number is renumbered."""
        drop = set(gone)
        keep = [i for i in range(len(self.names)) if i not in drop]
        new = {old: k for k, old in enumerate(keep)}
        for i in drop:
            self._count_gpus(i, -1)
        self._commonest_gpus()
        self.names = [self.names[i] for i in keep]
        self.index = {n: k for k, n in enumerate(self.names)}
        for attr in ("state", "jobs_on", "status_busy", "cycles", "advised_at", "node_gpus"):
            col = getattr(self, attr)
            setattr(self, attr, [col[i] for i in keep])
        self.seen = array("d", [self.seen[i] for i in keep])
        self.idle = {new[i]: v for i, v in self.idle.items() if i in new}
        self.boots = [(r, new[i]) for r, i in self.boots if i in new]
        heapq.heapify(self.boots)
        self.running = {
            j: (e, g, tuple(new[i] for i in ns)) for j, (e, g, ns) in self.running.items()
        }
        for attr in ("ready_at", "woken", "wake_failed"):
            d = getattr(self, attr)
            setattr(self, attr, {new[i]: v for i, v in d.items() if i in new})
        if self.core is not None:
            self.core.renumber(new)
        self.version += 1

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
        self.node_gpus.append(0)
        self.seen.append(-math.inf)
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
        self.woken[i] = ready
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
        self.woken.pop(i, None)

    def stayed_on(self, i: int) -> None:
        """Our power-down of node ``i`` did not happen: forget its cycle."""
        if self.core is not None:
            self.core.undo_down(i)
        self.cycles[i] -= 1
        self.advised_at[i] = _NAN

    def wake(self, count: int, t: float) -> list[int]:
        """Boot up to ``count`` off nodes: those whose last wake did not fail first (the
        others by the age of their failure), then fewest cycles (as the simulator)."""
        off = [i for i, s in enumerate(self.state) if s == OFF]
        failed = self.wake_failed
        off.sort(key=lambda i: (failed.get(i, -math.inf), self.cycles[i]))
        for i in off[:count]:
            self.boot(i, t)
        return off[:count]


def apply_job_event(c: JobsCluster, ev: JobEvent, t: float, default_s: float) -> bool:
    """Apply a job event to ``c``; whether the policy's view changed. An event of a job
    recently finished changes nothing (a resend, or one that arrived late)."""
    core = c.core
    assert core is not None
    if c.has_finished(ev.job_id):
        return False
    if ev.phase is JobPhase.SUBMITTED:
        if ev.num_gpus <= 0 or ev.job_id in c.queue or ev.job_id in c.running:
            return False
        c.enqueue(ev.job_id, ev.submit_time, ev.num_gpus)
        core.arrive(ev.submit_time, ev.num_gpus)
        return True
    if ev.phase is JobPhase.STARTED:
        return _started(c, ev, t, default_s)
    c.remember_finished(ev.job_id)
    queued = c.queue.pop(ev.job_id, None) is not None
    c.predicted.pop(ev.job_id, None)
    run = c.running.pop(ev.job_id, None)
    if run is None:
        return queued
    end, _, nodes = run
    del c.running_pred[bisect.bisect_left(c.running_pred, (end, ev.job_id))]
    for i in nodes:
        c.jobs_on[i] = max(0, c.jobs_on[i] - 1)
        c.refresh(i, t)
    return True


def _started(c: JobsCluster, ev: JobEvent, t: float, default_s: float) -> bool:
    """A job started on its nodes: they are busy (booting if believed off)."""
    core = c.core
    assert core is not None
    if ev.job_id in c.running:
        return False
    c.queue.pop(ev.job_id, None)
    nodes = tuple(c.node(n, t, idle=False) for n in ev.nodes)
    start = ev.start_time if ev.start_time is not None else t
    for i in nodes:
        core.on_alloc(i, t)
        if c.state[i] == OFF:  # the scheduler woke it for this job
            adv = c.advised_at[i]
            c.boot(i, t)
            c.advised_at[i] = adv  # or it overtook our power-down: NodeStatus will tell
        if c.state[i] == BOOT:
            start = max(start, c.ready_at[i])
        c.jobs_on[i] += 1
        c.refresh(i, t)
    pred = c.predicted.pop(ev.job_id, default_s)
    end = start + pred
    c.running[ev.job_id] = (end, max(ev.num_gpus, 0), nodes)
    bisect.insort(c.running_pred, (end, ev.job_id))
    return True


def _record(c: JobsCluster, i: int) -> tuple[object, ...]:
    """What the checkpoint holds of node ``i`` (NaN as None: comparable)."""
    adv = c.advised_at[i]
    return (
        c.state[i],
        c.status_busy[i],
        c.cycles[i],
        None if adv != adv else adv,
        c.woken.get(i),
        c.wake_failed.get(i),
        c.node_gpus[i],
    )


def apply_node_status(c: JobsCluster, ns: NodeStatus, t: float, confirm_s: float) -> bool:
    """Apply a NodeStatus; whether the node's power or use changed for the policy. Any
    change of the node's record bumps ``c.version`` (the checkpoint is re-encoded). One
    older than the node's last applied is out of date (a late copy, or a redelivery
    after a crash): ignored."""
    j = c.index.get(ns.node)
    if j is not None and ns.time < c.seen[j]:
        return False
    new = j is None
    busy = ns.busy_gpus > 0 or bool(ns.running_jobs)
    i = c.node(ns.node, t, idle=ns.powered_on and not busy)
    before = _record(c, i)
    c.seen[i] = ns.time
    c.status_busy[i] = busy
    c.set_gpus(i, ns.num_gpus)
    applied = _power_report(c, i, ns, t, confirm_s)
    after = _record(c, i)
    if after != before:
        c.version += 1
    return new or (applied and after[:2] != before[:2])


def _power_report(c: JobsCluster, i: int, ns: NodeStatus, t: float, confirm_s: float) -> bool:
    """Apply node ``i``'s power state; False: not yet (advice still being applied)."""
    s, adv = c.state[i], c.advised_at[i]
    if not ns.powered_on:
        c.advised_at[i] = _NAN  # our power-down (if any) happened
        ready = c.woken.get(i)
        if ready is not None and ns.time < ready + confirm_s:
            return False  # a wake still being applied (it fails only after a boot + confirm_s)
        if ready is not None:  # the wake failed: the next wakes prefer other nodes
            del c.woken[i]
            c.wake_failed[i] = t
        if s == BOOT:
            c.n_boot -= 1
            c.ready_at.pop(i, None)
        c.state[i] = OFF
        c.idle.pop(i, None)
        c.refresh(i, t)
        return True
    if s == OFF and adv == adv and ns.time - adv < confirm_s:
        return False  # our power-down is still being applied
    c.woken.pop(i, None)
    c.wake_failed.pop(i, None)
    if s == OFF:
        if adv == adv:
            c.stayed_on(i)  # it stayed on: that cycle did not happen
        c.state[i] = ON
    else:
        c.finish_boot(i, t)
        if adv == adv and ns.time - adv >= confirm_s:
            c.stayed_on(i)  # a job overtook our power-down: the node never went down
    c.refresh(i, t)
    return True


def id_key(job: str) -> bytes:
    """A job id's 8-byte key in the finished-jobs memory: a checkpoint holds 4,096 of
    them in 32 kB whatever the ids' length (up to 256 characters each, ~1 MB as text,
    Kafka's default record limit); two ids share a key with odds of about 2**-64."""
    return hashlib.blake2b(job.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def _finished_keys(saved: object) -> dict[bytes, None]:
    """The finished-jobs memory from a checkpoint: packed keys, or (before 2026-12-07)
    the ids themselves."""
    if isinstance(saved, bytes):
        return dict.fromkeys(saved[k : k + 8] for k in range(0, len(saved), 8))
    assert isinstance(saved, dict)
    return dict.fromkeys(id_key(j) if isinstance(j, str) else j for j in saved)
