"""The demo's schedule: FIFO, the QSSF oracle and QSSF with closed-loop hints on each VC,
and each VC's QSSF queue at a moment (``gpuhint demo``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuhint.lab.evaluation.qssf_inputs import GPUS_PER_NODE, InputError, sim_job
from gpuhint.lab.evaluation.qssf_online import ClosedLoopRanker
from gpuhint.lab.traces.readers import TraceJob
from gpuhint.wire.contract import PriorityHint
from models.simulator import simulate_vc, size_vcs


@dataclass
class WaitingJob:
    """A job waiting in the simulated QSSF schedule at the snapshot time."""

    job_id: str
    num_gpus: int
    priority: float
    predicted_duration_s: float
    hint: PriorityHint | None = None
    """Its hint as published at the snapshot (expected duration, band, reasons)."""


@dataclass
class ScheduleSummary:
    """FIFO vs QSSF with gpuhint's hints (closed loop) vs the oracle, and a queue."""

    vc_sizes: dict[str, int]
    fifo_avg_jct_s: float
    qssf_avg_jct_s: float
    oracle_avg_jct_s: float
    hint_updates: int
    snapshot_at: float
    queues: dict[str, list[WaitingJob]]
    queue_times: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "vc_sizes": dict(self.vc_sizes),
            "fifo_avg_jct_s": self.fifo_avg_jct_s,
            "qssf_avg_jct_s": self.qssf_avg_jct_s,
            "oracle_avg_jct_s": self.oracle_avg_jct_s,
            "jct_ratio_qssf_over_fifo": _ratio(self.qssf_avg_jct_s, self.fifo_avg_jct_s),
            "jct_ratio_qssf_over_oracle": _ratio(self.qssf_avg_jct_s, self.oracle_avg_jct_s),
            "hint_updates": self.hint_updates,
            "snapshot_at": self.snapshot_at,
            "queue_lengths": {vc: len(q) for vc, q in self.queues.items()},
            "queue_times": dict(self.queue_times),
        }


def _ratio(num: float, den: float) -> float | None:
    """``num / den``, None where the denominator is 0 (every job ran 0 s), as
    ``evaluate qssf``'s ratios."""
    return num / den if den > 0 else None


def schedule_summary(
    jobs: Sequence[TraceJob],
    model: str,
    *,
    snapshot_at: float,
    target_load: float = 0.9,
    vc_nodes: Mapping[str, int] | None = None,
) -> ScheduleSummary:
    """Schedule the GPU jobs under FIFO, the QSSF oracle and QSSF with closed-loop hints
    (VCs sized to ``target_load`` unless given); keep each VC's QSSF queue as it was at
    the last moment up to ``snapshot_at`` that had jobs waiting."""
    by_vc: dict[str, list[int]] = defaultdict(list)
    for k, j in enumerate(jobs):
        if j.num_gpus > 0:
            by_vc[j.vc].append(k)
    if not by_vc:
        raise InputError("trace", 0, "no job asks for a GPU: nothing to schedule")
    sizes = size_vcs(
        {
            vc: [(jobs[k].submit_time, jobs[k].duration, jobs[k].num_gpus) for k in ks]
            for vc, ks in by_vc.items()
        },
        target_load,
        GPUS_PER_NODE,
    )
    if vc_nodes:
        sizes.update({vc: n for vc, n in vc_nodes.items() if vc in sizes})
    tot = {"fifo": 0.0, "qssf": 0.0, "oracle": 0.0}
    n = 0
    updates = 0
    queues: dict[str, list[WaitingJob]] = {}
    queue_times: dict[str, float] = {}
    for vc, ks in sorted(by_vc.items()):
        sj = [sim_job(jobs[k]) for k in ks]
        vc_jobs = [jobs[k] for k in ks]
        ranker = ClosedLoopRanker(vc_jobs, model, snapshot_at=snapshot_at)
        runs = {
            "fifo": simulate_vc(sj, sizes[vc], "fifo"),
            "oracle": simulate_vc(sj, sizes[vc], "qssf", priorities=[j.service for j in sj]),
            "qssf": simulate_vc(sj, sizes[vc], "qssf", ranker=ranker),
        }
        for name, out in runs.items():
            tot[name] += sum(o.end - j.submit for o, j in zip(out, sj, strict=True))
        n += len(sj)
        updates += ranker.hint_updates
        queues[vc] = [
            WaitingJob(
                vc_jobs[i].job_id,
                vc_jobs[i].num_gpus,
                p,
                ranker.predicted[i],
                ranker.snapshot_hints.get(i),
            )
            for p, i in ranker.snapshot or []
        ]
        queue_times[vc] = ranker.snapshot_t
    return ScheduleSummary(
        vc_sizes=sizes,
        fifo_avg_jct_s=tot["fifo"] / n,
        qssf_avg_jct_s=tot["qssf"] / n,
        oracle_avg_jct_s=tot["oracle"] / n,
        hint_updates=updates,
        snapshot_at=snapshot_at,
        queues=queues,
        queue_times=queue_times,
    )
