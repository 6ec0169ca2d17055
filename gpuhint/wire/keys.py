"""The Redis key schema a scheduler in any language reads (see docs/redis-keys.md).

All keys live under ``{prefix}:v1:`` (prefix ``gpuhint`` by default):

=====================================  ========  =============================================
key                                    type      value
=====================================  ========  =============================================
``hint:{cluster}:{job_id}``            string    PriorityHint JSON; TTL ``hint_ttl_s``
``queue:{cluster}:{vc}``               zset      member job_id, score priority (GPU-seconds)
``advice:{cluster}``                   string    cluster PowerAdvisory JSON; TTL
``advice-node:{cluster}:{node}``       string    node PowerAdvisory JSON; TTL
``load:{cluster}``                     string    ClusterLoad JSON; TTL
``starts:{cluster}:{vc}``              string    StartForecasts JSON (expected starts); TTL
``stats``                              hash      counters (``dead_letter``, ...)
``changes``                            stream    one entry per change (field ``type``)
``epoch``                              string    set by the worker; missing = Redis came back empty
``applier:{cluster}:{name}``           string    an applier's last pass (JSON); no TTL
``writer:{writer_id}``                 hash      a worker process's write record; TTL 30 days
``writer:{writer_id}:applied``         string    bitmap of its batch in flight; TTL 30 days
=====================================  ========  =============================================

>>> RedisKeys().queue("venus", "vc1")
'gpuhint:v1:queue:venus:vc1'
"""

from __future__ import annotations

from dataclasses import dataclass

KEY_SCHEMA_VERSION = "v1"


@dataclass(frozen=True)
class RedisKeys:
    prefix: str = "gpuhint"

    @property
    def root(self) -> str:
        return f"{self.prefix}:{KEY_SCHEMA_VERSION}"

    def hint(self, cluster: str, job_id: str) -> str:
        return f"{self.root}:hint:{cluster}:{job_id}"

    def queue(self, cluster: str, vc: str) -> str:
        return f"{self.root}:queue:{cluster}:{vc}"

    def cluster_advice(self, cluster: str) -> str:
        return f"{self.root}:advice:{cluster}"

    def node_advice(self, cluster: str, node: str) -> str:
        return f"{self.root}:advice-node:{cluster}:{node}"

    def load(self, cluster: str) -> str:
        return f"{self.root}:load:{cluster}"

    def starts(self, cluster: str, vc: str) -> str:
        """The expected starts of a VC's first waiting jobs (StartForecasts JSON)."""
        return f"{self.root}:starts:{cluster}:{vc}"

    def applier(self, cluster: str, name: str) -> str:
        """An applier's last pass (``slurm-priorities``, ``slurm-power``, ``kueue``):
        written by the applier after every pass, read by ``gpuhint status``."""
        return f"{self.root}:applier:{cluster}:{name}"

    def writer(self, writer_id: str) -> str:
        """One worker process's record of its writes (``flushed``, ``base``: sequence
        numbers; docs/redis-keys.md): a Redis restored from an older snapshot is found."""
        return f"{self.root}:writer:{writer_id}"

    def writer_applied(self, writer_id: str) -> str:
        """A bitmap: which writes of the worker process's batch in flight Redis applied,
        so that a batch sent again applies its counters and change entries once."""
        return f"{self.root}:writer:{writer_id}:applied"

    @property
    def stats(self) -> str:
        return f"{self.root}:stats"

    @property
    def changes(self) -> str:
        return f"{self.root}:changes"

    @property
    def epoch(self) -> str:
        """Marker the worker sets with every flush (``SET NX``): if it is missing, Redis
        lost its data and the worker rewrites the pending hints (change ``rebuilt``)."""
        return f"{self.root}:epoch"


# Change-stream entry types (field ``type`` of each ``changes`` entry).
CHANGE_HINT = "hint"
CHANGE_HINT_UPDATED = "hint_updated"
CHANGE_HINT_REMOVED = "hint_removed"
CHANGE_ADVICE = "advice"
CHANGE_LOAD = "load"
CHANGE_REBUILT = "rebuilt"
"""Hints were re-written from the worker's state after Redis came back empty."""
