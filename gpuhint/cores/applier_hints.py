"""What the appliers (Slurm's SiteFactor, Kueue's classes) take from the published hints.

Both read every queued job's hint and the cluster's load summary each pass, and both
must keep going when one value is odd:

* a hint this version cannot read (a newer worker's, or junk) leaves that one job
  unhinted (it gets the neutral level) instead of failing the pass; its key is listed;
* a hint whose VC follows arrival order (:attr:`PriorityHint.in_arrival_order`: its
  priority is the submit time, not a service) is no opinion on the job's size, so it
  is not mapped onto a level either: the job gets the neutral level and the
  scheduler's own age order applies (mapped as GPU-seconds, ~1.8e9 would sink it
  below every hinted job, and drag the median neutral level down with it);
* every readable hint, and the load summary, still count as the worker's sign of life.

>>> from gpuhint.kueue.hints import MemoryHints
>>> from gpuhint.wire.contract import FeatureContribution, PriorityHint
>>> def hint(j, p, first=None):
...     r = (FeatureContribution(feature=first, contribution=1.0),) if first else ()
...     return PriorityHint(job_id=j, num_gpus=1, submit_time=1.7e9, predicted_duration_s=60,
...         priority=p, model="m", model_version="1", created_at=1.7e9 + 5, reasons=r)
>>> got = read_applier_hints(MemoryHints({"a": hint("a", 60.0),
...     "b": hint("b", 1.7e9, "fifo_guard:fallback")}), "default")
>>> got.services, got.arrival_order, got.last_alive
({'a': 60.0}, 1, 1700000005.0)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from gpuhint.wire.contract import ClusterLoad, PriorityHint

log = logging.getLogger("gpuhint.appliers")


class ApplierHintReader(Protocol):
    def pending_hints(
        self, cluster: str, vc: str | None = None, *, unreadable: list[str] | None = None
    ) -> list[PriorityHint]: ...

    def load(self, cluster: str) -> ClusterLoad | None: ...


@dataclass(frozen=True)
class ApplierHints:
    """One read of a cluster's hints, as the appliers use it."""

    services: dict[str, float]
    """job id -> expected service (GPU-s) of the hints an applier maps onto levels."""
    hints: tuple[PriorityHint, ...]
    """Every readable hint (those in arrival order included)."""
    last_alive: float | None
    """The newest sign of life: a hint's ``created_at`` or the load summary's time."""
    unreadable: tuple[str, ...] = ()
    """Keys that could not be read (their jobs count as unhinted)."""
    arrival_order: int = 0
    """Hints left out of ``services`` because their VC follows arrival order."""


def read_applier_hints(reader: ApplierHintReader, cluster: str) -> ApplierHints:
    """Read ``cluster``'s hints and load once (connection errors propagate: the
    appliers' outage handling decides what then)."""
    bad: list[str] = []
    hints = reader.pending_hints(cluster, unreadable=bad)
    try:
        load = reader.load(cluster)
    except ValueError:  # another schema's summary: no sign of life from it
        load, bad = None, [*bad, f"load of {cluster}"]
    services = {h.job_id: h.priority for h in hints if not h.in_arrival_order}
    times = [h.created_at for h in hints]
    if load is not None:
        times.append(load.time)
    return ApplierHints(
        services=services,
        hints=tuple(hints),
        last_alive=max(times, default=None),
        unreadable=tuple(bad),
        arrival_order=len(hints) - len(services),
    )


class UnreadableHints:
    """Says in the log when a cluster's unreadable hints appear, change in number, or go
    (not every pass)."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.count = 0

    def said(self, keys: tuple[str, ...]) -> None:
        if len(keys) == self.count:
            return
        if keys:
            log.warning(
                "cluster %s: %d hint value(s) this version cannot read (e.g. %s): "
                "those jobs are treated as unhinted; upgrade the appliers with the worker",
                self.cluster,
                len(keys),
                keys[0],
            )
        else:
            log.info("cluster %s: every hint readable again", self.cluster)
        self.count = len(keys)
