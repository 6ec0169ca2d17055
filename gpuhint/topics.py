"""Kafka topic names and partition keys, in one place.

Job events are keyed by ``cluster/vc`` so one VC's events stay in order on one
partition (and one Faust worker), while VCs spread over partitions. Telemetry is
keyed by ``cluster/node``.

>>> job_key("venus", "vcvGl")
b'venus/vcvGl'
"""

from __future__ import annotations

from dataclasses import dataclass


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
