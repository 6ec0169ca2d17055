"""apply-priorities passes over many pending jobs, against a real slurmctld and Redis.

Starts the project's own Slurm (2 nodes, ``MaxArraySize``/``MaxJobCount`` raised) and
Redis, queues ``--jobs`` pending jobs (array tasks in a partition that is DOWN, so they
stay pending with a computed priority, as jobs waiting for resources do), writes one
hint per job the way the worker does, and times the applier's passes in-process (the
real ``squeue``/``sprio`` reads, ``scontrol`` batches and Redis reads). The array's
tasks are split into job records of their own first (the applier updates a shared
pending array record as one job), so the queue holds ``--jobs`` separate jobs:

1. ``first``: every job gets its factor;
2. ``steady``: nothing changed, nothing is written;
3. ``10% changed``: a tenth of the hints move.

Target (issue 8): each pass under 30 s for 10,000 pending jobs.

    python bench/bench_slurm_apply.py [--jobs 10000]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import time
from datetime import date

from gpuhint.lab.local.services import LocalRedis
from gpuhint.lab.local.slurm import LocalSlurm
from gpuhint.redis.client import HintClient
from gpuhint.redis.store import RedisStore
from gpuhint.slurm.commands import SlurmCli, SlurmQueue
from gpuhint.slurm.priority import PriorityApplier
from gpuhint.wire.contract import PriorityHint
from gpuhint.wire.keys import RedisKeys


class _Hints:
    def __init__(self, client: HintClient) -> None:
        self.client = client

    def priorities(self, cluster: str) -> dict[str, float]:
        return {h.job_id: h.priority for h in self.client.pending_hints(cluster)}


def _hint(job_id: str, p: float) -> PriorityHint:
    return PriorityHint(
        job_id=job_id, cluster="bench", vc="research", num_gpus=1, submit_time=0.0,
        predicted_duration_s=p, priority=p, model="bench", model_version="1",
        created_at=time.time(),
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    args = ap.parse_args()
    n = args.jobs
    conf = [f"MaxArraySize={n + 1}", f"MaxJobCount={4 * n + 1000}"]
    rng = random.Random(8)
    with LocalSlurm(2, extra_conf=conf) as slurm, LocalRedis() as redis_srv:
        t = time.perf_counter()
        slurm.start()
        redis_srv.start()
        print(f"services up in {time.perf_counter() - t:.1f} s")
        cli = SlurmCli(str(slurm.conf), timeout_s=600)
        os.environ["SLURM_CONF"] = str(slurm.conf)
        cli.run(["scontrol", "update", "partitionname=gpu", "state=down"])
        ids: list[str] = []
        t = time.perf_counter()
        step = 5000
        for lo in range(0, n, step):
            hi = min(n, lo + step) - 1
            out = cli.run(
                ["sbatch", "--parsable", "-o", "/dev/null", "-a", f"0-{hi - lo}",
                 "-G", "1", "--wrap", "true"]
            )  # fmt: skip
            arr = out.strip().split(";")[0]
            ids += [f"{arr}_{i}" for i in range(hi - lo + 1)]
        # The applier updates a shared pending array record as one job; naming each task
        # splits it into a record of its own: n pending jobs, as n separate sbatch would.
        errors = cli.scontrol_batch([f"update jobid={j} Nice=0" for j in ids])
        records = {j.raw_id for j in cli.pending_jobs()}
        if errors or len(records) != n:
            raise SystemExit(f"{len(records)} job records for {n} jobs: {errors[:3]}")
        print(f"{len(ids):,} pending jobs queued in {time.perf_counter() - t:.1f} s")
        store = RedisStore.from_url(redis_srv.url, keys=RedisKeys("bench"), max_buffer=n + 10)
        prio = {j: rng.lognormvariate(8, 2.5) for j in ids}
        for j, p in prio.items():
            store.put_hint(_hint(j, p))
        store.flush()
        client = HintClient.from_url(redis_srv.url, key_prefix="bench")
        applier = PriorityApplier(SlurmQueue(cli), _Hints(client), "bench", rate=None)
        rows = []
        for label in ("first", "steady", "10% changed"):
            if label == "10% changed":
                for j in rng.sample(ids, n // 10):
                    store.put_hint(_hint(j, prio[j] * rng.choice((0.01, 100.0))))
                store.flush()
            calls = cli.calls
            r = applier.run_pass()
            rows.append((label, r.seconds, r.updated, r.refused, cli.calls - calls))
            print(
                f"pass {label:12s}: {r.seconds:6.2f} s, {r.updated:6,} updated, "
                f"{r.unchanged:6,} unchanged, {r.refused} refused, {cli.calls - calls} commands"
            )
        client.close()
    print(
        "\n| pass | seconds | jobs updated | refused | Slurm commands |\n"
        "|---|---|---|---|---|\n"
        + "\n".join(f"| {a} | {b:.2f} | {c:,} | {d} | {e} |" for a, b, c, d, e in rows)
    )
    print(
        f"\n{n:,} pending jobs, Slurm 22.05 (2 slurmd), {platform.machine()}, "
        f"{os.cpu_count()} CPUs, {date.today()}"
    )
    if rows[0][2] != n:
        raise SystemExit(f"the first pass updated {rows[0][2]:,} of {n:,} jobs")


if __name__ == "__main__":
    main()
