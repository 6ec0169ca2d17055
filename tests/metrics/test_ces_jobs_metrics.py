"""The job-aware CES engine's metrics (pure: an engine, no worker)."""

from __future__ import annotations

from gpuhint.cores.ces_jobs import JobsCesConfig, JobsCesEngine
from gpuhint.metrics.worker import _ces_jobs
from gpuhint.wire.contract import NodeStatus
from models.power_jobs import JobAwareConfig


def test_decisions_nodes_and_queue_of_the_job_aware_engine() -> None:
    eng = JobsCesEngine(None, JobsCesConfig(JobAwareConfig(warmup_s=0)))
    for n in ("a", "b", "c"):
        eng.on_message(NodeStatus(cluster="farm", node=n, time=0, num_gpus=8))
    eng.on_message(NodeStatus(cluster="farm", node="a", time=60, num_gpus=8))
    eng.flush("farm")  # no demand seen: all three off, in one decision
    got = {
        (m.name, tuple(sorted(s.labels.items()))): s.value
        for m in _ces_jobs(eng)
        for s in m.samples
        if not s.name.endswith("_created")
    }
    assert got[("gpuhint_ces_jobs_decisions", ())] == 1
    assert got[("gpuhint_ces_jobs_nodes_changed", (("action", "power_down"),))] == 3
    assert got[("gpuhint_ces_jobs_nodes_changed", (("action", "wake"),))] == 0
    assert got[("gpuhint_ces_jobs_nodes", (("cluster", "farm"), ("state", "off")))] == 3
    assert got[("gpuhint_ces_jobs_nodes", (("cluster", "farm"), ("state", "on")))] == 0
    assert got[("gpuhint_ces_jobs_waiting", (("cluster", "farm"),))] == 0
