"""Kafka topic names and partition keys, in one place.

Job events are keyed by ``cluster/vc`` so one VC's events stay in order on one
partition (and one Faust worker), while VCs spread over partitions. Telemetry is
keyed by ``cluster/node``.

>>> job_key("venus", "vcvGl")
b'venus/vcvGl'

A trace or scheduler without VCs puts every job on VC ``default``: one key, one
partition. :func:`spread_vc` is the documented key choice that spreads it: the user is
hashed into one of ``n`` sub-VCs ``<vc>~<k>``, so a user's jobs (and the state their
hints learn from) stay on one key, and sub-VCs spread over partitions; a reader merges
them back into one queue (``HintClient.merged_queue``).

>>> spread_vc("default", "alice", 8)
'default~7'
>>> spread_vc("default", "alice", 1), spread_vc("default", None, 8)
('default', 'default~0')
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

SUB_VC = "~"
"""Separator of a spread VC's sub-VC index (``default~3``); not allowed in a real VC name
that is spread."""


@dataclass(frozen=True)
class Topics:
    """Topic names under a common prefix (``GPUHINT_TOPIC_PREFIX``, default ``gpuhint``)."""

    prefix: str = "gpuhint"

    @property
    def job_events(self) -> str:
        return f"{self.prefix}.job-events"

    @property
    def gpu_samples(self) -> str:
        return f"{self.prefix}.gpu-samples"

    @property
    def node_status(self) -> str:
        return f"{self.prefix}.node-status"

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}.dead-letter"

    @property
    def cluster_telemetry(self) -> str:
        """Internal: node status and job placements re-keyed by cluster for the CES agent."""
        return f"{self.prefix}.cluster-telemetry"

    def all(self) -> tuple[str, ...]:
        return (
            self.job_events,
            self.gpu_samples,
            self.node_status,
            self.dead_letter,
            self.cluster_telemetry,
        )


def job_key(cluster: str, vc: str) -> bytes:
    """Partition key of a job event: all events of one VC share a partition."""
    return f"{cluster}/{vc}".encode()


def node_key(cluster: str, node: str) -> bytes:
    """Partition key of telemetry from one node."""
    return f"{cluster}/{node}".encode()


def cluster_key(cluster: str) -> bytes:
    """Partition key of the internal cluster-telemetry topic: one cluster, one partition."""
    return cluster.encode()


def spread_vc(vc: str, user: str | None, n: int, job_id: str | None = None) -> str:
    """The sub-VC of ``vc`` that ``user``'s jobs go to when a VC is spread over ``n`` keys.

    ``n <= 1`` keeps ``vc``. The hash is CRC-32 of the user name (stable across processes
    and languages, unlike Python's ``hash``); a job without a user is hashed by its
    ``job_id`` (traces without users, e.g. ITP), else it goes to sub-VC 0.
    """
    if n <= 1:
        return vc
    by = user or job_id
    k = zlib.crc32(by.encode()) % n if by else 0
    return f"{vc}{SUB_VC}{k}"


def base_vc(vc: str) -> str:
    """The VC a (possibly spread) VC name belongs to: ``default~3`` -> ``default``."""
    return vc.split(SUB_VC, 1)[0]
