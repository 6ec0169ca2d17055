"""The CES side of the worker: cluster telemetry in, load and power advisories out.

Node status (keyed cluster/node) and job placements (keyed cluster/VC) are re-keyed by
cluster onto the internal ``cluster-telemetry`` topic, so one worker sees all of a
cluster's nodes. There a :class:`~gpuhint.cores.ces.ClusterLoadTracker` closes 10-minute
slots and a :class:`~gpuhint.cores.ces.CesEngine` turns each into a PowerAdvisory and a
ClusterLoad in the store. Each cluster's state (tracker + forecaster + policy) is
checkpointed as a versioned pickle in a changelog-backed table at the end of every
batch that touched it (before the batch's offsets may be committed: nothing acknowledged
is lost on a rebalance), so a restarted or rebalanced worker resumes where the last one
stopped.

With the job-aware policy (``GPUHINT_CES_POLICY=jobs``, :mod:`gpuhint.cores.ces_jobs`)
the processor also feeds a :class:`~gpuhint.cores.ces_jobs.JobsCesEngine` every job event
and QSSF hint of the cluster (the message path forwards them when :attr:`wants_jobs`);
it writes the power advisories, and the slot engine only the ClusterLoad.

Checkpoint format (version 3): ``pickle((3, tracked, engine_blob, jobs))``, ``jobs`` the
job-aware engine's cluster state as ``(blob, clock, seen)`` (None without it): the
pickled :class:`~gpuhint.cores.ces_jobs.JobsCluster`, re-encoded only when its
``version`` moved (most NodeStatus change nothing there but the clock and the node's
last report time, saved beside it: ``seen``, the raw bytes of its float64 column;
older checkpoints lack it); version 2 lacks ``jobs``.
``tracked`` pickles as the tracker's node columns (``array`` buffers, copied whole: no
object per node; the used-node counters are rebuilt on load). ``engine_blob`` is the
forecaster + policy pickled on its own and reused while no slot closed (they change only
then). A 10,000-node
cluster's checkpoint is a few hundred kB of memory copies (``bench/bench_ces.py
--tracker``). Version 1 (per-node objects) is still read and migrated.
"""

from __future__ import annotations

import logging
import pickle
from array import array
from collections.abc import Callable, Mapping
from typing import Any

from gpuhint.cores.ces import CesEngine, ClusterLoadTracker, SlotObservation
from gpuhint.cores.ces_jobs import JobsCesConfig, JobsCesEngine, JobsCluster
from gpuhint.cores.ces_load import FORGET_AFTER_S
from gpuhint.cores.pipeline.state_table import DEFAULT_MAX_RECORD_BYTES, SplitRecords
from gpuhint.cores.sink import HintStore
from gpuhint.wire import pickles
from gpuhint.wire.config import Settings
from gpuhint.wire.contract import JobEvent, NodeStatus, PriorityHint
from models.power_jobs import JobAwareConfig
from models.power_policy import PowerPolicyConfig
from models.simulator.power import PowerModel

log = logging.getLogger(__name__)

STATE_VERSION = 3
_READABLE = (1, 2, 3)
POLICIES = ("jobs", "series")
"""``GPUHINT_CES_POLICY``: who writes the power advisories (docs/ces.md, "Online")."""


class ClusterLoadProcessor:
    """Pure glue (no Faust): telemetry messages -> tracker -> engine, with checkpoints."""

    def __init__(
        self,
        tracker: ClusterLoadTracker,
        engine: CesEngine,
        checkpoints: Mapping[str, bytes] | None = None,
        on_save: Callable[[str, bytes], None] | None = None,
        jobs: JobsCesEngine | None = None,
        *,
        on_delete: Callable[[str], None] | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        """``checkpoints`` is read at restore; saves go to ``on_save`` (deletes of
        superseded parts to ``on_delete``), else into ``checkpoints`` (then a
        ``MutableMapping``). A checkpoint longer than ``max_record_bytes`` (a job-aware
        cluster with a long queue) is written in parts (:class:`SplitRecords`)."""
        self.tracker = tracker
        self.engine = engine
        self.checkpoints: Mapping[str, bytes] = checkpoints if checkpoints is not None else {}
        self.records = SplitRecords(
            self.checkpoints,
            on_save or self._assign,
            on_delete or self._pop,
            max_record_bytes,
        )
        self.jobs = jobs
        self.dirty: set[str] = set()
        self._engine_blobs: dict[str, tuple[object, int, bytes]] = {}
        self._jobs_blobs: dict[str, tuple[object, int, bytes]] = {}
        self.saves = 0
        self.bytes_saved = 0

    def _restore(self, cluster: str) -> None:
        if cluster in self.tracker.clusters:
            return
        try:
            raw = self.records.read(cluster)
            if not raw:
                return
            version, tracked, engine_state, *rest = pickles.loads(raw)
            if version not in _READABLE:
                log.warning("ignoring CES checkpoint of %s: version %s", cluster, version)
                return
            if version >= 2 and engine_state is not None:
                engine_state = pickles.loads(engine_state)
            jobs = None
            if rest and rest[0] is not None and self.jobs is not None:
                jobs = _jobs_state(*rest[0])
        except Exception as exc:  # a corrupt checkpoint must not stop the worker
            log.warning("ignoring unreadable CES checkpoint of %s: %s", cluster, exc)
            return
        if tracked is not None:
            self.tracker.clusters[cluster] = tracked
        if engine_state is not None:
            self.engine.clusters[cluster] = engine_state
        if jobs is not None and self.jobs is not None:
            self.jobs.clusters[cluster] = jobs
        log.info("restored CES state of cluster %s", cluster)

    @property
    def wants_jobs(self) -> bool:
        """Whether every job event and QSSF hint must reach :meth:`on_message`."""
        return self.jobs is not None

    def on_message(self, msg: NodeStatus | JobEvent | PriorityHint) -> list[SlotObservation]:
        """Apply one message; return the slots it closed (each already sent to the engine)."""
        self._restore(msg.cluster)
        if self.jobs is not None:
            self.jobs.on_message(msg)
            self.dirty.add(msg.cluster)
        if isinstance(msg, PriorityHint):
            return []
        if isinstance(msg, NodeStatus):
            closed = self.tracker.on_node_status(msg)
        else:
            closed = self.tracker.on_job_event(msg)
        for obs in closed:
            self.engine.observe(obs)
        self.dirty.add(msg.cluster)
        return closed

    def checkpoint_dirty(self) -> int:
        """Checkpoint every cluster changed since the last call; return how many."""
        n = 0
        for cluster in sorted(self.dirty):
            self.checkpoint(cluster)
            n += 1
        self.dirty.clear()
        return n

    def forget(self) -> None:
        """Drop in-memory cluster state (on a rebalance): the next message re-reads the table.

        A worker that gets a cluster's partition back must not continue from what it held
        before another worker took over; the table holds the newest checkpoint.
        """
        self.tracker.clusters.clear()
        self.engine.clusters.clear()
        if self.jobs is not None:
            self.jobs.clusters.clear()
        self.dirty.clear()
        self._engine_blobs.clear()
        self._jobs_blobs.clear()

    def _engine_blob(self, cluster: str) -> bytes | None:
        """The engine's state of ``cluster`` pickled, re-encoded only after a slot closed."""
        state = self.engine.clusters.get(cluster)
        if state is None:
            return None
        cached = self._engine_blobs.get(cluster)
        if cached is not None and cached[0] is state and cached[1] == state.slot:
            return cached[2]
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        self._engine_blobs[cluster] = (state, state.slot, blob)
        return blob

    def _jobs_blob(self, cluster: str) -> tuple[bytes, float, bytes] | None:
        """The job-aware state of ``cluster`` pickled (re-encoded only when it changed),
        its clock and its nodes' last report times."""
        c = self.jobs.clusters.get(cluster) if self.jobs is not None else None
        if c is None:
            return None
        cached = self._jobs_blobs.get(cluster)
        if cached is None or cached[0] is not c or cached[1] != c.version:
            blob = pickle.dumps(c, protocol=pickle.HIGHEST_PROTOCOL)
            cached = self._jobs_blobs[cluster] = (c, c.version, blob)
        return cached[2], c.t_last, c.seen.tobytes()

    def checkpoint(self, cluster: str) -> None:
        """Save ``cluster``'s state (see the module's note on the format)."""
        jobs = self._jobs_blob(cluster)
        state: Any = (
            STATE_VERSION,
            self.tracker.clusters.get(cluster),
            self._engine_blob(cluster),
            jobs,
        )
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        self.saves += 1
        self.bytes_saved += len(blob)
        self.records.write(cluster, blob)

    def _assign(self, key: str, blob: bytes) -> None:
        self.checkpoints[key] = blob  # type: ignore[index]

    def _pop(self, key: str) -> None:
        self.checkpoints.pop(key, None)  # type: ignore[attr-defined]


def _jobs_state(blob: bytes, clock: float, seen: bytes | None = None) -> JobsCluster:
    """The job-aware cluster of a checkpoint: its pickle, clock and report times."""
    jobs = pickles.loads(blob)
    if not isinstance(jobs, JobsCluster):
        raise TypeError(f"job-aware state is a {type(jobs).__name__}")
    jobs.t_last = clock
    if seen is not None and len(seen) == 8 * len(jobs.names):
        jobs.seen = array("d")
        jobs.seen.frombytes(seen)
    return jobs


def make_jobs_config(
    quantile: float = 0.98,
    boot_s: float = 300.0,
    watts_per_node: float = 700.0,
    slot_s: int = 600,
    max_cycles_per_day: int = 6,
    confirm_s: float = 300.0,
    forget_after_s: float = FORGET_AFTER_S,
) -> JobsCesConfig:
    """The job-aware engine's configuration from the worker's settings (a cluster
    advisory at least once per CES slot; a node silent for a week while believed on left
    the cluster, as the load tracker's)."""
    return JobsCesConfig(
        JobAwareConfig(quantile=quantile, max_cycles_per_day=max_cycles_per_day),
        PowerModel(boot_s=boot_s),
        watts_per_node=watts_per_node,
        heartbeat_s=float(slot_s),
        confirm_s=confirm_s,
        forget_after_s=forget_after_s,
    )


def make_processor(
    store: HintStore | None,
    *,
    policy: str = "jobs",
    slot_s: int = 600,
    watts_per_node: float = 700.0,
    stale_after_s: float | None = None,
    forget_after_s: float = FORGET_AFTER_S,
    checkpoints: Mapping[str, bytes] | None = None,
    on_save: Callable[[str, bytes], None] | None = None,
    jobs_config: JobsCesConfig | None = None,
    on_delete: Callable[[str], None] | None = None,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> ClusterLoadProcessor:
    """The worker's CES side for ``policy`` (:data:`POLICIES`): ``series``, the slot engine
    writes advisories; ``jobs``, the job-aware engine does (the slot engine still writes
    the ClusterLoad)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown CES policy {policy!r}; choose one of {', '.join(POLICIES)}")
    engine = CesEngine(
        store,
        PowerPolicyConfig(slot_s=slot_s, watts_per_node=watts_per_node),
        advise=policy == "series",
    )
    jobs = None
    if policy == "jobs":
        cfg = jobs_config or make_jobs_config(watts_per_node=watts_per_node, slot_s=slot_s)
        jobs = JobsCesEngine(store, cfg)
    tracker = ClusterLoadTracker(
        slot_s=slot_s, stale_after_s=stale_after_s, forget_after_s=forget_after_s
    )
    return ClusterLoadProcessor(
        tracker,
        engine,
        checkpoints,
        on_save,
        jobs=jobs,
        on_delete=on_delete,
        max_record_bytes=max_record_bytes,
    )


def processor_from_settings(
    settings: Settings,
    store: HintStore | None,
    checkpoints: Mapping[str, bytes] | None = None,
    on_save: Callable[[str, bytes], None] | None = None,
    on_delete: Callable[[str], None] | None = None,
) -> ClusterLoadProcessor:
    """The CES side as ``GPUHINT_CES_*`` configure it: the worker and ``gpuhint serve``."""
    return make_processor(
        store,
        policy=settings.ces_policy,
        slot_s=settings.ces_slot_s,
        watts_per_node=settings.ces_watts_per_node,
        stale_after_s=min(settings.ces_stale_after_s, settings.ces_slot_s),
        forget_after_s=settings.ces_forget_node_after_s,
        jobs_config=make_jobs_config(
            settings.ces_quantile,
            settings.ces_boot_s,
            settings.ces_watts_per_node,
            settings.ces_slot_s,
            settings.ces_max_cycles_per_node_day,
            settings.ces_confirm_s,
            settings.ces_forget_node_after_s,
        ),
        checkpoints=checkpoints,
        on_save=on_save,
        on_delete=on_delete,
        max_record_bytes=settings.state_max_record_bytes,
    )
