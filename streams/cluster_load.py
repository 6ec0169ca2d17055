"""The CES side of the worker: cluster telemetry in, load and power advisories out.

Node status (keyed cluster/node) and job placements (keyed cluster/VC) are re-keyed by
cluster onto the internal ``cluster-telemetry`` topic, so one worker sees all of a
cluster's nodes. There a :class:`~gpuhint.ces_core.ClusterLoadTracker` closes 10-minute
slots and a :class:`~gpuhint.ces_core.CesEngine` turns each into a PowerAdvisory and a
ClusterLoad in the store. Each cluster's state (tracker + forecaster + policy) is
checkpointed as a versioned pickle in a changelog-backed table at the end of every
batch that touched it (before the batch's offsets may be committed: nothing acknowledged
is lost on a rebalance), so a restarted or rebalanced worker resumes where the last one
stopped.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Mapping
from typing import Any

from gpuhint.ces_core import CesEngine, ClusterLoadTracker, SlotObservation
from gpuhint.contract import JobEvent, NodeStatus

log = logging.getLogger(__name__)

STATE_VERSION = 1


class ClusterLoadProcessor:
    """Pure glue (no Faust): telemetry messages -> tracker -> engine, with checkpoints."""

    def __init__(
        self,
        tracker: ClusterLoadTracker,
        engine: CesEngine,
        checkpoints: Mapping[str, bytes] | None = None,
        on_save: Callable[[str, bytes], None] | None = None,
    ) -> None:
        """``checkpoints`` is read at restore; saves go to ``on_save``, else are assigned
        into ``checkpoints`` (then a ``MutableMapping``)."""
        self.tracker = tracker
        self.engine = engine
        self.checkpoints: Mapping[str, bytes] = checkpoints if checkpoints is not None else {}
        self.on_save = on_save
        self.dirty: set[str] = set()

    def _restore(self, cluster: str) -> None:
        if cluster in self.tracker.clusters:
            return
        raw = self.checkpoints.get(cluster)
        if not raw:
            return
        try:
            version, tracked, engine_state = pickle.loads(raw)
        except Exception as exc:  # a corrupt checkpoint must not stop the worker
            log.warning("ignoring unreadable CES checkpoint of %s: %s", cluster, exc)
            return
        if version != STATE_VERSION:
            log.warning("ignoring CES checkpoint of %s: version %s", cluster, version)
            return
        self.tracker.clusters[cluster] = tracked
        if engine_state is not None:
            self.engine.clusters[cluster] = engine_state
        log.info("restored CES state of cluster %s", cluster)

    def on_message(self, msg: NodeStatus | JobEvent) -> list[SlotObservation]:
        """Apply one message; return the slots it closed (each already sent to the engine)."""
        self._restore(msg.cluster)
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
        self.dirty.clear()

    def checkpoint(self, cluster: str) -> None:
        state: Any = (
            STATE_VERSION,
            self.tracker.clusters.get(cluster),
            self.engine.clusters.get(cluster),
        )
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        if self.on_save is not None:
            self.on_save(cluster, blob)
        else:
            self.checkpoints[cluster] = blob  # type: ignore[index]
