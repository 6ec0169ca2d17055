"""The job-aware CES engine online on a whole trace: same decisions as offline, and its cost.

    python bench/bench_ces_jobs.py TRACE [--quantile 0.98] [--model history_mix] [--json]

The trace's GPU jobs run in the power simulator under the offline ``JobAware`` (pool
sized as ``gpuhint evaluate ces --trace``, predictions of gpuhint's duration model at
submit); the run's job events (submitted, started on its nodes, finished) and each
job's hint go to :class:`gpuhint.cores.ces_jobs.JobsCesEngine` directly (the message
path around it is tested in tests/cores/test_ces_jobs.py), every node reporting once at
the start. Reports whether every decision matched (time, nodes woken, nodes powered
down), the engine's time per message, and the size of one cluster's checkpoint (the
pickled :class:`~gpuhint.cores.ces_jobs.JobsCluster`, saved after every batch that
touched the cluster, without the decision record kept here to compare) at its largest
over the run.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuhint.cores.ces_jobs import JobsCesConfig, JobsCesEngine
from gpuhint.cores.ces_jobs_state import JobsCluster
from gpuhint.lab.evaluation.ces_jobs import cluster_nodes, prepare
from gpuhint.lab.traces.readers import read_trace
from gpuhint.wire.contract import JobEvent, NodeStatus, PriorityHint
from models.power_jobs import JobAwareConfig
from models.simulator.power import OFF, PowerModel, simulate_power
from models.simulator.power_policies import JobAware


class Recording(JobAware):
    def __init__(self, cfg: JobAwareConfig) -> None:
        super().__init__(cfg)
        self.decisions: list[tuple[float, tuple[int, ...], tuple[int, ...]]] = []

    def step(self, t: float) -> None:
        sim = self.sim
        off = [n for n in range(sim.num_nodes) if sim.state[n] == OFF]
        before = list(sim.idle)
        super().step(t)
        woke = tuple(sorted(n for n in off if sim.state[n] != OFF))
        down = tuple(n for n in before if n not in sim.idle and sim.state[n] == OFF)
        if woke or down:
            self.decisions.append((t, woke, down))


def _checkpoint_bytes(c: JobsCluster) -> int:
    """The cluster's checkpoint as the worker writes it: without the decision record the
    bench keeps to compare (the worker's ``keep_decisions`` is 0)."""
    kept, c.decisions = c.decisions, []
    try:
        return len(pickle.dumps(c, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        c.decisions = kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--quantile", type=float, default=0.98)
    ap.add_argument("--model", default="history_mix")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    prep = prepare(read_trace(Path(a.trace)).jobs, a.model)
    jobs, pred = prep.jobs, prep.predicted
    nodes, pm, cfg = cluster_nodes(jobs, 0.5), PowerModel(), JobAwareConfig(quantile=a.quantile)
    rec = Recording(cfg)
    res = simulate_power(jobs, nodes, rec, power=pm, predicted=pred, record=True)
    msgs: list[JobEvent | NodeStatus | PriorityHint] = []
    t0 = min(j.submit for j in jobs)
    msgs += [NodeStatus(node=f"n{k:05d}", time=t0, num_gpus=8) for k in range(nodes)]
    rows: list[tuple[float, int, int, list[JobEvent | PriorityHint]]] = []
    for i, j in enumerate(jobs):
        sub = JobEvent(phase="submitted", job_id=j.job_id, num_gpus=j.gpus, time=j.submit,
                       submit_time=j.submit)  # fmt: skip
        hint = PriorityHint(job_id=j.job_id, num_gpus=j.gpus, submit_time=j.submit,
                            predicted_duration_s=pred[i], priority=0, model="m",
                            model_version="1", created_at=j.submit)  # fmt: skip
        rows.append((j.submit, 1, i, [sub, hint]))
    assert res.log is not None
    for k, (kind, t, i, ns, start) in enumerate(res.log):
        j = jobs[i]
        phase = "started" if kind == "start" else "finished"
        ev = JobEvent(phase=phase, job_id=j.job_id, num_gpus=j.gpus, time=t,  # type: ignore[arg-type]
                      submit_time=j.submit, nodes=tuple(f"n{n:05d}" for n in ns),
                      start_time=None if kind == "start" else start)  # fmt: skip
        rows.append((t, 2 if kind == "start" else 0, k, [ev]))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    for r in rows:
        msgs += r[3]
    eng = JobsCesEngine(None, JobsCesConfig(cfg, pm, keep_decisions=10**7))
    biggest = 0
    every = max(1, len(msgs) // 50)
    clock = 0.0
    for k, m in enumerate(msgs):
        t1 = time.perf_counter()
        eng.on_message(m)
        clock += time.perf_counter() - t1
        if k % every == 0:
            biggest = max(biggest, _checkpoint_bytes(eng.clusters["default"]))
    got = eng.flush("default")
    idx = {f"n{k:05d}": k for k in range(nodes)}
    online = [(t, tuple(sorted(idx[n] for n in w)), tuple(idx[n] for n in d)) for t, w, d in got]
    first = next(
        (k for k, (x, y) in enumerate(zip(online, rec.decisions, strict=False)) if x != y), None
    )
    out = {
        "trace": Path(a.trace).name,
        "nodes": nodes,
        "jobs": len(jobs),
        "messages": len(msgs),
        "decisions_offline": len(rec.decisions),
        "decisions_online": len(online),
        "identical": first is None and len(online) == len(rec.decisions),
        "first_difference": first,
        "us_per_message": round(clock / len(msgs) * 1e6, 1),
        "checkpoint_max_kb": round(biggest / 1024, 1),
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(", ".join(f"{k} {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
