"""Choose VC sizes so that the offered load reaches a target utilization.

The Helios artifact does not size VCs: it reads fixed node counts (``data/philly_vc.csv``
for Philly, the real VC sizes for Helios). An excerpt of a bigger trace keeps only a
share of its jobs, so those counts would leave it nearly idle; instead each VC gets

    nodes = ceil(GPU-seconds submitted to the VC / (GPUs per node x span x target load))

where ``span`` is the time from the first to the last submit of the whole trace, and at
least enough nodes for its largest job. On the Philly sample at a target of 0.9 this
gives the 60 nodes the issue's anchor figures were simulated with.

>>> size_vcs({"a": [(0.0, 3600.0, 8), (36000.0, 3600.0, 16)]}, target_load=0.5)
{'a': 2}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def trace_span(submits: Sequence[float], durations: Sequence[float]) -> float:
    """First to last submit; if all jobs arrive at once, the longest duration (>= 1 s)."""
    span = max(submits) - min(submits) if submits else 0.0
    if span <= 0:
        span = max(durations, default=0.0)
    return max(span, 1.0)


def size_vcs(
    vc_jobs: Mapping[str, Sequence[tuple[float, float, int]]],
    target_load: float = 0.9,
    gpus_per_node: int = 8,
) -> dict[str, int]:
    """Nodes per VC from ``(submit, duration, gpus)`` tuples, for ``target_load`` in (0, 1]."""
    if not 0 < target_load <= 1:
        raise ValueError(f"target load must be in (0, 1], got {target_load}")
    all_jobs = [j for js in vc_jobs.values() for j in js]
    span = trace_span([j[0] for j in all_jobs], [j[1] for j in all_jobs])
    sizes = {}
    for vc, js in vc_jobs.items():
        service = sum(d * g for _, d, g in js)
        by_load = math.ceil(service / (gpus_per_node * span * target_load) - 1e-9)
        by_job = math.ceil(max((g for _, _, g in js), default=0) / gpus_per_node)
        sizes[vc] = max(by_load, by_job, 1)
    return sizes
