"""A fast, event-driven twin of the Helios artifact's QSSF scheduler simulator (pure).

One simulation per VC, 8-GPU nodes, consolidating placement, non-preemptive and without
backfill unless asked; policies FIFO, SJF, SRTF and QSSF with any priorities (the oracle's
true service or a predictor's). See ``engine`` for the semantics and ``docs/qssf.md``
for the faithfulness check against the artifact.
"""

from models.simulator.cluster import Nodes
from models.simulator.engine import (
    POLICY_KINDS,
    Outcome,
    PolicyKind,
    Ranker,
    SimJob,
    ckpt_overhead,
    simulate_vc,
)
from models.simulator.metrics import Summary, bucket_name, percentile, summarize
from models.simulator.sizing import size_vcs, trace_span

__all__ = [
    "POLICY_KINDS",
    "Nodes",
    "Outcome",
    "PolicyKind",
    "Ranker",
    "SimJob",
    "Summary",
    "bucket_name",
    "ckpt_overhead",
    "percentile",
    "simulate_vc",
    "size_vcs",
    "summarize",
    "trace_span",
]
